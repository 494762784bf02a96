"""Run the alembic migrations programmatically (`pgmem migrate` = `alembic upgrade head`)."""

from __future__ import annotations

import psycopg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from pgmem.db import sqlalchemy_url
from pgmem.errors import SchemaError
from pgmem.sqlfiles import ALEMBIC_INI, InstallParams


def alembic_config(url: str | None, params: InstallParams | None = None) -> Config:
    cfg = Config(str(ALEMBIC_INI))
    if url is not None:
        cfg.attributes["connection_url"] = sqlalchemy_url(url)
    if params is not None:
        cfg.attributes["pgmem_params_override"] = params
    return cfg


def head_revision() -> str:
    """The newest revision this pgmem ships."""
    head = ScriptDirectory.from_config(alembic_config(None)).get_current_head()
    assert head is not None
    return head


def preflight(url: str) -> bool:
    """True when the database's schema is already at head (an upgrade to head is then a no-op,
    and runs no DDL, so the application login may call it). When it is not, and this login
    cannot migrate (neither a superuser nor a member of pgmem_owner), a one-line SchemaError
    naming the role to run it as; False otherwise (go on and migrate)."""
    head = head_revision()
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            """SELECT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user),
                      EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_owner')
                        AND pg_catalog.pg_has_role(current_user, 'pgmem_owner', 'USAGE'),
                      pg_catalog.to_regclass('pgmem.alembic_version') IS NOT NULL,
                      pg_catalog.has_database_privilege(current_database(), 'CREATE')"""
        ).fetchone()
        assert row is not None
        superuser, owner, installed, can_create = (bool(x) for x in row)
        current = None
        if installed:
            try:
                found = conn.execute("SELECT version_num FROM pgmem.alembic_version").fetchone()
                current = str(found[0]) if found else None
            except psycopg.Error:
                current = None
    if current == head:
        return True
    if superuser or (owner and (installed or can_create)):
        return False
    raise SchemaError(
        f"schema pgmem is at {current or 'nothing (not installed)'}, this pgmem needs {head}, and "
        "this login may not migrate: run `pgmem migrate` (or store.setup()) as a login member of pgmem_owner"
    )


def upgrade(url: str, revision: str = "head", params: InstallParams | None = None) -> None:
    if revision == "head" and params is None and preflight(url):
        return  # at head: nothing to do, and no DDL for a login that may not run it
    command.upgrade(alembic_config(url, params), revision)


def downgrade(url: str, revision: str = "base", params: InstallParams | None = None) -> None:
    command.downgrade(alembic_config(url, params), revision)
