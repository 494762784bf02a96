"""`pgmem db start|stop|status|url|psql` and `pgmem migrate`."""

from __future__ import annotations

import argparse
import os
import sys

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgmem import server
from pgmem.cli.common import server_url, settings
from pgmem.db import redact
from pgmem.errors import ConfigError, ServerError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = sub.add_parser("db", help="the embedded Postgres server (ignored with DATABASE_URL)")
    dbsub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    dbsub.add_parser("start", help="start (or reuse) the embedded server").set_defaults(func=_start)
    dbsub.add_parser("stop", help="stop the embedded server cleanly").set_defaults(func=_stop)
    dbsub.add_parser("status", help="is it running, where, which pid").set_defaults(func=_status)
    dbsub.add_parser("url", help="print the connection URL").set_defaults(func=_url)
    p = dbsub.add_parser("psql", help="psql on the pgmem database (extra args go to psql)")
    p.add_argument("psql_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_psql)

    m = sub.add_parser("migrate", help="install or upgrade the schema (alembic upgrade head)")
    m.add_argument(
        "--revision",
        default="head",
        help="upgrade to this revision (head, or an id from the newest that changes a table: the functions applied"
        " are head's); with --sql, START:END prints the script from START",
    )
    m.add_argument("--sql", action="store_true", help="print the SQL instead of running it (offline)")
    m.add_argument(
        "--alembic-ini",
        action="store_true",
        help='print the path of the installed alembic.ini (for `alembic -c "$(pgmem migrate --alembic-ini)" ...`)',
    )
    m.set_defaults(func=_migrate)


def _start(args: argparse.Namespace) -> int:
    s = settings()
    if s.database_url:
        print("DATABASE_URL is set: pgmem uses that server; nothing to start", file=sys.stderr)
        return 0
    url = server.start(s.pgdata)
    print(url)
    return 0


def _stop(args: argparse.Namespace) -> int:
    s = settings()
    if s.database_url:
        # Like start and status: the embedded server is not the one pgmem uses. Until rt71 this
        # stopped it anyway (a service on the embedded server, reached by its own URL, went down).
        running = server.status(s.pgdata).running
        hint = f" (the embedded server in {s.pgdata} runs: unset DATABASE_URL to stop it)" if running else ""
        print(f"DATABASE_URL is set: pgmem uses that server; nothing to stop{hint}", file=sys.stderr)
        return 0
    if server.stop(s.pgdata):
        print(f"stopped the server in {s.pgdata}")
    else:
        print(f"no server running in {s.pgdata}")
    return 0


def _status(args: argparse.Namespace) -> int:
    s = settings()
    if s.database_url:
        print("external: DATABASE_URL is set")
        return 0
    st = server.status(s.pgdata)
    if st.running:
        print(f"running · pid {st.pid} · {st.pgdata} · {st.url}")
        return 0
    print(f"stopped · {st.pgdata}")
    return 3


def _url(args: argparse.Namespace) -> int:
    # DATABASE_URL is printed without its password: the command is for showing where pgmem
    # connects, and its output lands in terminals and logs.
    print(redact(server_url(settings())))
    return 0


def _psql(args: argparse.Namespace) -> int:
    return run_psql(args.psql_args)


def run_psql(psql_args: list[str]) -> int:
    """Replace this process with the bundled psql, connected to the pgmem database."""
    url = server_url(settings())
    # psql would print a connection string it cannot parse, password and all: parse it here,
    # where the error is printed without it.
    params = conninfo_to_dict(url)
    psql = server.bin_dir() / "psql"
    if not psql.exists():
        raise ServerError(f"bundled psql not found at {psql}")
    extra = [a for a in psql_args if a != "--"]
    # The connection goes to psql in its environment (PGHOST, PGUSER, PGPASSWORD, ...), as the
    # defaults psql's own options override: given as psql's first argument, `-d other` made it
    # the user name and `-U` was overridden by it. Never on psql's command line, which every
    # user of the machine reads (ps, /proc/PID/cmdline): until rt71 the URL, password and all.
    # A parameter libpq reads from no variable stays in a connection string (its password not).
    env = dict(os.environ)
    rest = {}
    for key, value in params.items():
        if key in _LIBPQ_ENV:
            env[_LIBPQ_ENV[key]] = str(value)
        else:
            rest[key] = value
    conninfo = [make_conninfo("", **rest)] if rest else []
    os.execve(str(psql), [str(psql), *conninfo, *extra], env)
    return 0  # not reached


#: libpq's connection parameters and the environment variables it reads them from.
_LIBPQ_ENV = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "dbname": "PGDATABASE",
    "user": "PGUSER",
    "password": "PGPASSWORD",
    "passfile": "PGPASSFILE",
    "require_auth": "PGREQUIREAUTH",
    "channel_binding": "PGCHANNELBINDING",
    "service": "PGSERVICE",
    "options": "PGOPTIONS",
    "application_name": "PGAPPNAME",
    "sslmode": "PGSSLMODE",
    "sslnegotiation": "PGSSLNEGOTIATION",
    "sslcompression": "PGSSLCOMPRESSION",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslcertmode": "PGSSLCERTMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcrl": "PGSSLCRL",
    "sslcrldir": "PGSSLCRLDIR",
    "sslsni": "PGSSLSNI",
    "requirepeer": "PGREQUIREPEER",
    "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION",
    "ssl_max_protocol_version": "PGSSLMAXPROTOCOLVERSION",
    "gssencmode": "PGGSSENCMODE",
    "krbsrvname": "PGKRBSRVNAME",
    "gsslib": "PGGSSLIB",
    "gssdelegation": "PGGSSDELEGATION",
    "connect_timeout": "PGCONNECT_TIMEOUT",
    "client_encoding": "PGCLIENTENCODING",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "load_balance_hosts": "PGLOADBALANCEHOSTS",
}


def _migrate(args: argparse.Namespace) -> int:
    from alembic import command

    from pgmem.migrate import (
        ROLLING_BACK,
        alembic_config,
        check_functions_fit,
        revisions_below,
        shipped_revision,
        upgrade,
    )
    from pgmem.sqlfiles import ALEMBIC_INI

    if args.alembic_ini:
        print(ALEMBIC_INI)
        return 0
    if args.sql:
        # A script from a named revision (`0012:head`) to one of this pgmem's; never downward.
        start, _, end = args.revision.rpartition(":")
        end = shipped_revision(end)
        if start:
            start = shipped_revision(start)
            if end in revisions_below(start):
                raise ConfigError(f"--revision {start}:{end} goes down: pgmem migrate only upgrades; {ROLLING_BACK}")
        check_functions_fit(end)
        command.upgrade(alembic_config(None), f"{start}:{end}" if start else end, sql=True)
        return 0
    step = upgrade(server_url(settings()), args.revision)
    if step == "nothing":
        print(f"schema pgmem is at {args.revision} already: nothing to do", file=sys.stderr)
    elif step == "definitions":
        print("schema pgmem is at head; applied this package's re-runnable definitions again", file=sys.stderr)
    else:
        print("schema pgmem is at", args.revision, file=sys.stderr)
    return 0
