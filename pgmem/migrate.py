"""Run the alembic migrations programmatically (`pgmem migrate` = `alembic upgrade head`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import psycopg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from pgmem.errors import ConfigError, SchemaError
from pgmem.sqlfiles import (
    ALEMBIC_INI,
    InstallParams,
    check_vector_schema,
    definitions_digest,
    idempotent_files,
    render,
    search_path_sql,
)


def alembic_config(url: str | None, params: InstallParams | None = None) -> Config:
    cfg = Config(str(ALEMBIC_INI))
    cfg.attributes["pgmem"] = True  # run by pgmem, which says its errors itself (migrations/env.py)
    if url is not None:
        # The libpq connection string as it is: migrations/env.py connects with psycopg, never
        # through SQLAlchemy's URL parser (it refused a key=value string, a URL without a host
        # and a socket folder in the host written %2F: libpq forms DATABASE_URL may take).
        cfg.attributes["connection_url"] = url
    if params is not None:
        cfg.attributes["pgmem_params_override"] = params
    return cfg


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config(None))


def head_revision() -> str:
    """The newest revision this pgmem ships."""
    head = _script().get_current_head()
    assert head is not None
    return head


def shipped_revision(name: str) -> str:
    """`name` as a revision of this pgmem: "head" or one of its revision ids, written out; a
    one-line ConfigError for anything else (a relative or partial name, a range, garbage)."""
    script = _script()
    if name == "head":
        return head_revision()
    try:
        found = script.get_revision(name) if name.isascii() and name.isalnum() else None
    except Exception:  # alembic's "Can't locate revision", an ambiguous prefix
        found = None
    if found is None or found.revision != name:
        raise ConfigError(
            f"no revision {name[:40]!r} in this pgmem: name head or a revision id (0001 to {head_revision()})"
        )
    return found.revision


def newest_table_change() -> str:
    """The newest revision that changes a table (one not made by sqlfiles.functions_only). This
    pgmem ships its head's re-runnable definitions only, and they read what that revision adds,
    so a run stops there or later."""
    for rev in _script().walk_revisions():
        if not getattr(rev.module.upgrade, "functions_only", False):
            return rev.revision
    raise AssertionError("no revision changes a table")  # 0001 creates them


def check_functions_fit(revision: str) -> None:
    """A one-line ConfigError when a run to `revision` would apply this pgmem's re-runnable
    definitions (head's) below the newest revision that changes a table: they would read columns
    and tables the schema does not have yet (at 0056, log_recall writes recall_log.settings,
    which 0057 adds). Nothing to check without definitions to apply."""
    from pgmem import sqlfiles  # looked up at the call, as apply_idempotent does

    target, floor = shipped_revision(revision), newest_table_change()
    if sqlfiles.idempotent_files() and target in revisions_below(floor):
        raise ConfigError(
            f"revision {target} is below {floor}, the newest revision of this pgmem that changes a table: the "
            f"functions it applies are its head's ({head_revision()}), which need {floor}'s tables; "
            f"name {floor} or later"
        )


def revisions_below(revision: str) -> list[str]:
    """The revisions `revision` comes after, newest first (ConfigError when it is not shipped)."""
    try:
        found = _script().iterate_revisions(revision, "base")
        return [r.revision for r in found if r is not None and r.revision != revision]
    except Exception:  # alembic's "Can't locate revision"
        raise ConfigError(f"no revision {revision[:40]!r} in this pgmem") from None


#: The advisory lock an online alembic run holds in a transaction of its own for the whole run
#: (migrations/env.py), and an apply of the definitions for its transaction: one run at a time.
#: The two-key form: pgmem's other advisory locks take one bigint key, another space.
RUN_LOCK = "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgmem'), pg_catalog.hashtext('migrate'))"

ROLLING_BACK = 'to roll back, follow docs/operations.md, "Rolling back"'


#: What `pgmem migrate` has to do: nothing; apply the re-runnable definitions again (the schema
#: is at head, but another package applied them); or run alembic's upgrade.
Step = Literal["nothing", "definitions", "migrate"]


def preflight(url: str, revision: str = "head", params: InstallParams | None = None) -> Step:
    """What an upgrade of this database to `revision` has to do. "nothing" when the schema is
    there already, and, at head, holds this package's re-runnable definitions (the digest of
    sql/idempotent recorded by the last apply, pgmem._definitions(), is this package's) or this
    login may not change them: an upgrade to head then runs no DDL, so the application login may
    call it. "definitions" at head when
    they are another package's (a package rolled back or forward at the same revision) and this
    login may migrate. One-line SchemaError when the schema is above `revision` (this pgmem
    does not go down), or at a revision this pgmem does not know (a newer pgmem migrated it),
    or when this login cannot migrate (neither a superuser nor a member of pgmem_owner), naming
    the role to run it as; "migrate" otherwise. One-line ConfigError, when it would run SQL, if
    pgvector is installed in another schema than the one the SQL is written for (`params`, by
    default PGMEM_VECTOR_SCHEMA's), or is older than MIN_PGVECTOR (_check_vector_version)."""
    target, head = shipped_revision(revision), head_revision()
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            """SELECT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user),
                      EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_owner')
                        AND pg_catalog.pg_has_role(current_user, 'pgmem_owner', 'USAGE'),
                      pg_catalog.to_regclass('pgmem.alembic_version') IS NOT NULL,
                      pg_catalog.has_database_privilege(current_database(), 'CREATE'),
                      current_database(), pg_catalog.quote_ident(current_database()),
                      (SELECT n.nspname FROM pg_catalog.pg_extension e
                         JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
                        WHERE e.extname = 'vector'),
                      (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'vector'),
                      (SELECT a.default_version FROM pg_catalog.pg_available_extensions a
                        WHERE a.name = 'vector')"""
        ).fetchone()
        assert row is not None
        superuser, owner, installed, can_create = (bool(x) for x in row[:4])
        database, database_sql = str(row[4]), str(row[5])
        vector_found = None if row[6] is None else str(row[6])
        vector_versions = (None if row[7] is None else str(row[7]), None if row[8] is None else str(row[8]))
        current = None
        if installed:
            try:
                found = conn.execute("SELECT version_num FROM pgmem.alembic_version").fetchone()
                current = str(found[0]) if found else None
            except psycopg.Error:
                current = None
        may_migrate = superuser or (owner and (installed or can_create))
        if current == target:
            stale = current == head and may_migrate and _definitions_stale(conn)
            if not stale:
                return "nothing"
            _check_vector_schema(vector_found, params, database)
            _check_vector_version(*vector_versions, database)
            return "definitions"
    if current is not None:
        try:
            below = revisions_below(current)
        except ConfigError:
            raise SchemaError(
                f"schema pgmem is at {current[:40]}, a revision this pgmem (head {head}) does not ship: "
                f"a newer pgmem migrated it; {ROLLING_BACK}"
            ) from None
        if target in below:
            raise SchemaError(
                f"schema pgmem is at {current}, above {target}: pgmem migrate only upgrades; {ROLLING_BACK}"
            )
    if may_migrate:
        _check_vector_schema(vector_found, params, database)
        _check_vector_version(*vector_versions, database)
        return "migrate"
    if owner:
        # A member of pgmem_owner in a database where `pgmem roles create` did not run: the roles
        # are the cluster's, the CREATE grant is the database's.
        raise SchemaError(
            f"schema pgmem is not installed in database {database!r:.80}, and pgmem_owner may not create it "
            f"there: as a superuser, GRANT CREATE ON DATABASE {database_sql} TO pgmem_owner (or run "
            "`pgmem roles create` in this database), then `pgmem migrate` again"
        )
    raise SchemaError(
        f"schema pgmem is at {current or 'nothing (not installed)'}, this pgmem needs {target}, and "
        "this login may not migrate: run `pgmem migrate` (or store.setup()) as a login member of pgmem_owner"
    )


#: The oldest pgvector pgmem runs on: its recall functions set hnsw.iterative_scan (0.8.0).
MIN_PGVECTOR = (0, 8, 0)


def _version_tuple(version: str) -> tuple[int, ...] | None:
    """'0.8.1' as (0, 8, 1); None for a version string that is not dotted numbers."""
    parts = version.split("-", 1)[0].split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def _check_vector_version(installed: str | None, available: str | None, database: str) -> None:
    """A one-line ConfigError when the pgvector this run would use is older than MIN_PGVECTOR:
    the one installed in the database, else the one CREATE EXTENSION would install (the server's
    default version). On 0.7 the migration went ahead and created recall functions that SET
    hnsw.iterative_scan, a setting 0.7 does not have under a prefix it reserves. Neither installed
    nor offered: the run created an empty schema pgmem, then failed in its first revision. A
    version string that is not dotted numbers (a build of its own) passes."""
    need = ".".join(map(str, MIN_PGVECTOR))
    if installed is not None:
        found = _version_tuple(installed)
        if found is not None and found < MIN_PGVECTOR:
            raise ConfigError(
                f"pgmem needs pgvector {need} or later, and database {database!r:.80} has {installed:.20}: as a "
                f"superuser, ALTER EXTENSION vector UPDATE (after installing pgvector {need}+ on the server), "
                "then migrate again"
            )
    elif available is None:
        raise ConfigError(
            f"pgvector is not installed in database {database!r:.80}, and this server does not offer it: install "
            f"pgvector {need}+ on the server (the postgresql-NN-pgvector package), then migrate again"
        )
    else:
        found = _version_tuple(available)
        if found is not None and found < MIN_PGVECTOR:
            raise ConfigError(
                f"pgmem needs pgvector {need} or later, and this server offers {available:.20}: install pgvector "
                f"{need}+ on the server, then migrate again"
            )


def _check_vector_schema(found: str | None, params: InstallParams | None, database: str) -> None:
    """A one-line ConfigError when pgvector is installed in another schema than the one this
    run's SQL names (`@VECTOR_SCHEMA@`: PGMEM_VECTOR_SCHEMA, alembic's -x vector_schema). The
    run failed inside its first revision with 'type "vector" does not exist', which names no
    setting. Nothing to check when pgvector is not installed: the first revision installs it.
    The environment is read here only, when the run will apply SQL (at head, nothing reads it)."""
    configured = (params or InstallParams.from_mapping({})).vector_schema
    if found is not None and found != configured:
        try:
            check_vector_schema(found)
        except ConfigError:
            raise ConfigError(
                f"pgvector is installed in schema {found!r:.80} of database {database!r:.80}, where pgmem cannot use "
                "it: as a superuser, ALTER EXTENSION vector SET SCHEMA public (or a schema of its own, named in "
                "PGMEM_VECTOR_SCHEMA), then migrate again"
            ) from None
        raise ConfigError(
            f"pgvector is installed in schema {found!r:.80} of database {database!r:.80}, and this run's SQL is "
            f"written for schema {configured!r}: set PGMEM_VECTOR_SCHEMA={found} (alembic: -x vector_schema={found}), "
            "as when pgmem was installed"
        )


def _definitions_stale(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    """Whether the re-runnable definitions are not this package's: their digest, recorded by the
    last apply, is another's, or none is (a pgmem older than the digest applied them). The
    digest alone: two packages with the same definitions (a release that changed only Python)
    started side by side, as in a rolling deploy, would otherwise apply them in turn, each apply
    locking every table."""
    row = conn.execute("SELECT pg_catalog.to_regprocedure('pgmem._definitions()') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return True
    recorded = conn.execute("SELECT pgmem._definitions()").fetchone()
    return recorded != (definitions_digest(),)


def apply_definitions(url: str, params: InstallParams | None = None) -> None:
    """Apply this package's re-runnable set (sql/idempotent) in one transaction, as the last
    revision of an upgrade run does, without changing the schema's revision. The version row is
    held first, so a migration running meanwhile is waited for (or waits), and the set goes only
    onto this package's head."""
    params = params or InstallParams.from_mapping({})
    with psycopg.connect(url) as conn:  # one transaction, committed when the block ends
        conn.execute(RUN_LOCK)  # after a running alembic run
        row = conn.execute("SELECT version_num FROM pgmem.alembic_version FOR UPDATE").fetchone()
        if row is None or row[0] != head_revision():
            raise SchemaError(f"schema pgmem moved to {row and row[0]} meanwhile: run pgmem migrate again")
        conn.execute(search_path_sql(params))
        for path in idempotent_files():
            conn.execute(render(path.read_text(encoding="utf-8"), params).encode())


@contextlib.contextmanager
def _driver_errors() -> Iterator[None]:
    """An alembic run's failures as pgmem's: the server's error as psycopg raised it (SQLAlchemy
    wraps the statements it runs itself: the run's lock, the version row), alembic's own as a
    SchemaError; one line each from the CLI, never a traceback."""
    from alembic.util import CommandError
    from sqlalchemy.exc import DBAPIError

    try:
        yield
    except DBAPIError as exc:
        if isinstance(exc.orig, psycopg.Error):
            raise exc.orig from None
        raise
    except CommandError as exc:
        raise SchemaError(f"alembic: {' '.join(str(exc).split())}") from None


def upgrade(url: str, revision: str = "head", params: InstallParams | None = None) -> Step:
    """Bring the schema up to `revision` (what `pgmem migrate` and store.setup() run); returns
    what it did (preflight)."""
    step = preflight(url, revision, params)
    if step == "definitions":
        apply_definitions(url, params)
    elif step == "migrate":
        check_functions_fit(revision)
        with _driver_errors():
            command.upgrade(alembic_config(url, params), revision)
    return step


def downgrade(url: str, revision: str = "base", params: InstallParams | None = None) -> None:
    with _driver_errors():
        command.downgrade(alembic_config(url, params), revision)
