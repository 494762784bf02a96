"""Alembic environment: version table in schema pgmem; revisions apply files from sql/."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import psycopg
from alembic import context
from sqlalchemy import create_engine, pool

from pgmem.db import database_url
from pgmem.migrate import RUN_LOCK
from pgmem.sqlfiles import InstallParams

config = context.config
config.attributes["pgmem_params"] = config.attributes.get("pgmem_params_override") or InstallParams.from_mapping(
    context.get_x_argument(as_dictionary=True)
)
OPTS = {
    "version_table_schema": "pgmem",
    "transaction_per_migration": True,
}


def _step_checks_its_version_row(ctx: Any, step: Any, heads: set[str], **_: Any) -> None:
    """Offline, after each step's version row change: the check alembic makes online (its
    UPDATE must match one row). In a script the UPDATE of a database at another revision than
    the script's start matches none without a word, and the script ran on: head's functions over
    older tables, the version left where it was. The step's transaction now rolls back instead,
    naming the revision the database is at (psql -v ON_ERROR_STOP=1 stops there)."""
    want = sorted(heads)
    expected = "ARRAY[" + ", ".join(f"'{h}'" for h in want) + "]::text[]" if want else "NULL::text[]"
    start = ", ".join(step.source_revision_ids) or "base"
    end = ", ".join(step.destination_revision_ids) or "base"
    ctx.impl.static_output(
        f"""DO $check$
DECLARE
    found text[] := (SELECT array_agg(v.version_num::text ORDER BY v.version_num) FROM pgmem.alembic_version v);
BEGIN
    IF found IS DISTINCT FROM {expected} THEN
        RAISE EXCEPTION 'schema pgmem is at %, not at {start} where this step to {end} starts: rolled back',
            coalesce(array_to_string(found, ', '), 'no revision')
            USING ERRCODE = '55000',
                  HINT = 'Write the script from the revision the database is at: pgmem migrate --sql '
                         '--revision <pgmem.version()''s revision>:head.';
    END IF;
END
$check$;
"""
    )


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        literal_binds=True,
        on_version_apply=_step_checks_its_version_row,
        **OPTS,  # type: ignore[arg-type]
    )
    with context.begin_transaction():
        # As online: created only when missing (CREATE SCHEMA IF NOT EXISTS checks CREATE on
        # the database first, which the migrating login needs only to install).
        context.execute(
            "DO $schema$ BEGIN IF pg_catalog.to_regnamespace('pgmem') IS NULL THEN CREATE SCHEMA pgmem; END IF;"
            " END $schema$"
        )
        context.run_migrations()


def run_online() -> None:
    # psycopg connects, with the libpq connection string as given: SQLAlchemy's URL parser
    # refused forms libpq takes (key=value, postgresql:///db?host=..., a host written %2F...),
    # with a traceback or a host it could not resolve (until rt71).
    conninfo = config.attributes.get("connection_url") or _server_url() or database_url()
    if conninfo.startswith("postgresql+psycopg://"):  # a SQLAlchemy URL handed in by a caller
        conninfo = "postgresql://" + conninfo.removeprefix("postgresql+psycopg://")
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(conninfo), poolclass=pool.NullPool)
    with engine.connect() as guard, engine.connect() as conn:
        # One run at a time: a second `pgmem migrate` (another host of a deploy, store.setup()
        # in several processes) waits here for the first to end (or gives up on its
        # lock_timeout), then reads the version the first left. Without it, it ran the first's
        # revisions again behind it and failed on the version row ("expected to match one row")
        # or on the catalog ("tuple concurrently updated"). A transaction lock on a connection
        # of its own, open for the whole run and ended when it closes: the run's connection
        # commits once per revision, and a session lock taken there would outlive the run on a
        # server connection a transaction-mode pooler (PgBouncer) hands back to its pool. Idle
        # while the revisions run, so exempt from idle_in_transaction_session_timeout.
        guard.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = 0")
        guard.exec_driver_sql(RUN_LOCK)
        # The version table lives in pgmem, so the schema must exist before alembic looks.
        # Created only when missing: CREATE SCHEMA IF NOT EXISTS checks CREATE on the database
        # first, which a migrating login needs only to install (pgmem.migrate.preflight).
        if conn.exec_driver_sql("SELECT pg_catalog.to_regnamespace('pgmem') IS NULL").scalar():
            conn.exec_driver_sql("CREATE SCHEMA IF NOT EXISTS pgmem")
        conn.commit()
        context.configure(connection=conn, **OPTS)  # type: ignore[arg-type]
        with context.begin_transaction():
            context.run_migrations()


def _server_url() -> str | None:
    """DATABASE_URL, or the embedded server's when it runs. Only `pgmem db start` starts that
    server (pgmem.cli.common.server_url): alembic run by hand started it unseen."""
    if config.attributes.get("pgmem"):
        return None  # pgmem's own run: as before (store.setup() may start the embedded server)
    from pgmem.cli.common import server_url

    return server_url()


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    """alembic's own command (`alembic -c "$(pgmem migrate --alembic-ini)" ...`, the rollback of
    docs/operations.md) says a failure of the server or of pgmem as its one FAILED line, as
    `pgmem migrate` says it: it printed SQLAlchemy's traceback (a wrong login, a lock timeout).
    pgmem's own runs say their errors themselves (pgmem.migrate._driver_errors)."""
    if config.attributes.get("pgmem"):
        yield
        return
    from alembic.util import CommandError
    from sqlalchemy.exc import DBAPIError

    from pgmem.db import redact_secrets
    from pgmem.errors import DatabaseError, PgmemError

    def line(text: str) -> CommandError:
        return CommandError(redact_secrets(" ".join(text.split()), os.environ.get("DATABASE_URL")))

    try:
        yield
    except DBAPIError as exc:
        if isinstance(exc.orig, psycopg.Error):
            raise line(str(DatabaseError.from_driver(exc.orig))) from None
        raise
    except psycopg.Error as exc:
        raise line(str(DatabaseError.from_driver(exc))) from None
    except PgmemError as exc:
        raise line(str(exc)) from None


with _one_line():
    if context.is_offline_mode():
        run_offline()
    else:
        run_online()
