"""Alembic environment: version table in schema pgmem; revisions apply files from sql/."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from pgmem.db import sqlalchemy_url
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
    with engine.connect() as conn:
        # The version table lives in pgmem, so the schema must exist before alembic looks.
        conn.exec_driver_sql("CREATE SCHEMA IF NOT EXISTS pgmem")
        conn.commit()
        context.configure(connection=conn, **OPTS)  # type: ignore[arg-type]
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
