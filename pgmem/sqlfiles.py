"""The SQL source of truth on disk, and how migrations apply it.

The files ship inside the package (`pgmem.sql`, `pgmem.migrations`).
`sql/incremental/NNN_*.sql` are run-once changes (frozen once released; a checksum
test guards them). `sql/idempotent/*.sql` are re-runnable definitions applied, in name
order, after every revision. Files may use five placeholders, replaced from the install
settings: @PIECE_DIMS@, @FACT_DIMS@, @VECTOR_SCHEMA@, @PGMEM_VERSION@ (the package's), and
@PGMEM_DEFINITIONS@ (the digest of the package's sql/idempotent, definitions_digest)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgmem.errors import ConfigError


def _package_dir(name: str) -> Path:
    """A folder shipped as package data (the repository's `sql/` and `migrations/`, mapped into
    the wheel by setup.py), from a checkout and from an installed wheel alike."""
    return Path(str(importlib.resources.files(name)))


SQL_DIR = _package_dir("pgmem.sql")
MIGRATIONS_DIR = _package_dir("pgmem.migrations")
ALEMBIC_INI = MIGRATIONS_DIR / "alembic.ini"

_IDENT = re.compile(r"[a-z_][a-z0-9_]*")  # matched whole: "$" also matched before a final newline


def check_vector_schema(name: str) -> str:
    """`name` as pgvector's schema (PGMEM_VECTOR_SCHEMA, `pgmem roles create --vector-schema`), or
    a one-line ConfigError: a plain identifier (the SQL writes it unquoted), neither pgmem's own
    schema (900_grants.sql would take pgvector's functions for pgmem's: every migration failed)
    nor a system schema (pg_catalog, pg_toast, information_schema)."""
    if not _IDENT.fullmatch(name):
        raise ConfigError(f"vector schema must be a plain identifier, got {name!r}")
    if name == "pgmem" or name.startswith("pg_") or name == "information_schema":
        raise ConfigError(
            f"vector schema {name!r} is pgmem's own or a system schema: install pgvector into public or a "
            "schema of its own"
        )
    return name


@dataclass(frozen=True)
class InstallParams:
    """What is fixed at install time: vector column dimensions and pgvector's schema."""

    piece_dims: int
    fact_dims: int
    vector_schema: str = "public"

    def __post_init__(self) -> None:
        for name in ("piece_dims", "fact_dims"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 16000:
                raise ConfigError(f"{name} must be an integer between 1 and 16000, got {value!r}")
        check_vector_schema(self.vector_schema)

    @classmethod
    def from_mapping(cls, values: Mapping[str, str], env: Mapping[str, str] | None = None) -> InstallParams:
        """From alembic `-x key=value` arguments, falling back to the environment."""
        from pgmem.config import Settings

        settings = Settings.from_env(env)
        env = os.environ if env is None else env

        def pick(key: str, default: int) -> int:
            raw = values.get(key)
            if raw is None:
                return default
            try:
                return int(raw)
            except ValueError:
                raise ConfigError(f"-x {key}= must be an integer, got {raw!r}") from None

        return cls(
            piece_dims=pick("piece_dims", settings.piece_dims),
            fact_dims=pick("fact_dims", settings.fact_dims),
            vector_schema=values.get("vector_schema") or env.get("PGMEM_VECTOR_SCHEMA") or "public",
        )


def package_version() -> str:
    """The installed pgmem's version (recorded in the schema by every migration run)."""
    try:
        return importlib.metadata.version("pgmem")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def definitions_digest() -> str:
    """The sha256 of this package's re-runnable files (names and text, placeholders unfilled),
    recorded by every apply (pgmem._definitions()): with the package version, what tells
    `pgmem migrate` at head whether the database holds this package's definitions."""
    digest = hashlib.sha256()
    for path in idempotent_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def render(text: str, params: InstallParams) -> str:
    if "@PGMEM_DEFINITIONS@" in text:
        text = text.replace("@PGMEM_DEFINITIONS@", definitions_digest())
    out = (
        text.replace("@PIECE_DIMS@", str(params.piece_dims))
        .replace("@FACT_DIMS@", str(params.fact_dims))
        .replace("@VECTOR_SCHEMA@", params.vector_schema)
        .replace("@PGMEM_VERSION@", package_version())
    )
    left = re.findall(r"@[A-Z_]+@", out)
    if left:
        raise ConfigError(f"unknown SQL placeholder(s): {sorted(set(left))}")
    return out


def idempotent_files() -> list[Path]:
    return sorted((SQL_DIR / "idempotent").glob("*.sql"))


def current_params() -> InstallParams:
    """The install parameters of the running alembic command (set in migrations/env.py)."""
    from alembic import context

    params: InstallParams = context.config.attributes["pgmem_params"]
    return params


def search_path_sql(params: InstallParams) -> str:
    """The statement every applied SQL file starts with: pgvector's schema on the transaction's
    search_path. The files name pgvector's types unqualified (`vector(384)`, `vector[]` in the
    functions' signatures), and a migrating login's own search_path ("$user", public) does not
    hold a schema of its own (PGMEM_VECTOR_SCHEMA): the install failed at 001 with `type
    "vector" does not exist`. Transaction-local, and nothing of the login's path before it (an
    object another role made there cannot stand in for pgvector's)."""
    path = f"pg_catalog, {params.vector_schema}, pg_temp"  # a plain identifier (InstallParams)
    return f"SELECT pg_catalog.set_config('search_path', '{path}', true);\n"


def apply(op: Any, relative: str, params: InstallParams | None = None) -> None:
    """Apply one SQL file inside an alembic revision, then nothing else.

    Online, the text goes to the driver unparsed (no bind-parameter processing);
    offline (`--sql`), it is written to the script as it is."""
    params = params or current_params()
    text = search_path_sql(params) + render((SQL_DIR / relative).read_text(encoding="utf-8"), params)
    ctx = op.get_context()
    if ctx.as_sql:
        ctx.impl.static_output(text.rstrip() + "\n")
        return
    raw = op.get_bind().connection.driver_connection
    raw.execute(text)


def _is_last_step(revision: str) -> bool:
    """Whether `revision` is where this alembic run stops: the script head, or the revision
    named on the command line."""
    from alembic import context
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(context.config)
    if revision == script.get_current_head():
        return True
    argument = context.get_revision_argument()
    if not isinstance(argument, str):
        return True  # several heads or none named: apply, as before
    try:
        target = script.get_revision(argument)
    except Exception:  # a relative or partial argument: apply, as before
        return True
    return target is not None and target.revision == revision


def apply_idempotent(op: Any, params: InstallParams | None = None, *, revision: str | None = None) -> None:
    """Apply every re-runnable file. With `revision`, only when the run stops there: the files
    are those of this checkout and may read columns a later revision adds, so a run from an
    empty database to head applies them once, after the last run-once file."""
    if revision is not None and not _is_last_step(revision):
        ctx = op.get_context()
        if ctx.as_sql:
            ctx.impl.static_output(f"-- sql/idempotent: applied after this run's last revision, not at {revision}\n")
        return
    for path in idempotent_files():
        apply(op, str(path.relative_to(SQL_DIR)), params)


def functions_only(revision: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """The upgrade and downgrade of a revision that changes only re-runnable definitions
    (sql/idempotent): upgrade applies them (at the run's last revision, as apply_idempotent);
    downgrade changes nothing, since no table changed and the definitions are whatever the
    checkout holds. A migration file: `upgrade, downgrade = functions_only(revision)`."""

    def upgrade() -> None:
        from alembic import op

        apply_idempotent(op, revision=revision)

    def downgrade() -> None:
        return None

    upgrade.functions_only = True  # type: ignore[attr-defined]  # read by pgmem.migrate.newest_table_change
    return upgrade, downgrade
