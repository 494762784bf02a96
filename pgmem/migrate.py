"""Run the alembic migrations programmatically (`pgmem migrate` = `alembic upgrade head`)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from pgmem.db import sqlalchemy_url
from pgmem.sqlfiles import ALEMBIC_INI, InstallParams


def alembic_config(url: str | None, params: InstallParams | None = None) -> Config:
    cfg = Config(str(ALEMBIC_INI))
    if url is not None:
        cfg.attributes["connection_url"] = sqlalchemy_url(url)
    if params is not None:
        cfg.attributes["pgmem_params_override"] = params
    return cfg


def upgrade(url: str, revision: str = "head", params: InstallParams | None = None) -> None:
    command.upgrade(alembic_config(url, params), revision)


def downgrade(url: str, revision: str = "base", params: InstallParams | None = None) -> None:
    command.downgrade(alembic_config(url, params), revision)
