"""Alembic environment: version table in schema pgmem; revisions apply files from sql/."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from pgmem.db import sqlalchemy_url
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


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        literal_binds=True,
        **OPTS,  # type: ignore[arg-type]
    )
    with context.begin_transaction():
        context.execute("CREATE SCHEMA IF NOT EXISTS pgmem")
        context.run_migrations()


def run_online() -> None:
    url = config.attributes.get("connection_url") or sqlalchemy_url(None)
    engine = create_engine(url, poolclass=pool.NullPool)
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


if context.is_offline_mode():
    run_offline()
else:
    run_online()
