"""`pgmem roles create|show`: the roles pgmem expects, for a DBA to create once.

    pgmem_owner   owns the schema and everything in it; migrations run as it (or a member)
    pgmem_app     applications: read under row-level security, write through pgmem functions
    pgmem_reader  read-only debugging in psql (still filtered by scope)

The group roles are NOLOGIN; `--login NAME:ROLE[:PASSWORD_ENV]` adds LOGIN members (the
password is read from the named environment variable, never from the command line, and is
never printed). `--print` writes the SQL instead of running it (docs/security.md shows it);
`--print --psql` writes a script that `psql -f` runs as it is (docker/initdb/ is one)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgmem.cli.common import settings
from pgmem.errors import ConfigError
from pgmem.sqlfiles import check_vector_schema
from pgmem.text import check_text

GROUPS = {"owner": "pgmem_owner", "app": "pgmem_app", "reader": "pgmem_reader"}
_SAFE_ATTRS = "NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOREPLICATION"
# Matched whole (fullmatch): "$" also matches before a final newline ("bob\n" got through).
_LOGIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Login:
    """A LOGIN role that is a member of one pgmem group role."""

    name: str
    group: str  # owner | app | reader
    password_env: str | None = None

    @classmethod
    def parse(cls, spec: str) -> Login:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise ConfigError(f"--login takes NAME:ROLE[:PASSWORD_ENV], got {spec!r}")
        name, group = parts[0], parts[1]
        if not _LOGIN_NAME.fullmatch(name):
            raise ConfigError(f"login name {name!r}: use letters, digits and underscores (at most 63)")
        if group not in GROUPS:
            raise ConfigError(f"login {name}: role must be one of {sorted(GROUPS)}, got {group!r}")
        if name in GROUPS.values():
            raise ConfigError(f"{name} is a group role; choose another login name")
        password_env = parts[2] if len(parts) == 3 and parts[2] else None
        if password_env is not None and not _ENV_NAME.fullmatch(password_env):
            raise ConfigError(f"login {name}: {password_env!r} is not an environment variable name")
        return cls(name, group, password_env)


def setup_sql(*, database: str, vector_schema: str = "public", logins: Sequence[Login] = ()) -> sql.Composed:
    """Idempotent SQL: the group roles, LOGIN members, pgvector, the pgmem schema."""

    def create_role(name: str, login: bool) -> sql.Composed:
        # A run in another database of the server (roles are the server's) may create it
        # meanwhile: this CREATE waits for its commit, then fails on the name (23505).
        return sql.SQL(
            "    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {lit}) THEN\n"
            "        BEGIN\n"
            "            CREATE ROLE {ident} {login} " + _SAFE_ATTRS + ";\n"
            "        EXCEPTION WHEN duplicate_object OR unique_violation THEN\n"
            "            NULL;  -- created meanwhile by a run in another database\n"
            "        END;\n"
            "    END IF;\n"
        ).format(lit=sql.Literal(name), ident=sql.Identifier(name), login=sql.SQL("LOGIN" if login else "NOLOGIN"))

    def reuse_login(name: str) -> sql.Composed:
        # An existing login is reused as it is: refuse one that connects past row-level security,
        # or cannot connect at all.
        return sql.SQL(
            "    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {lit}\n"
            "               AND (rolsuper OR rolbypassrls OR NOT rolcanlogin)) THEN\n"
            "        RAISE EXCEPTION 'login %: the role exists already and is SUPERUSER, BYPASSRLS or NOLOGIN', {lit}\n"
            "            USING ERRCODE = '42501', HINT = 'choose another login name, or ALTER ROLE it first';\n"
            "    END IF;\n"
        ).format(lit=sql.Literal(name))

    body = [create_role(g, False) for g in GROUPS.values()]
    body += [part for x in logins for part in (reuse_login(x.name), create_role(x.name, True))]
    parts: list[sql.Composable] = [
        sql.SQL(
            "-- pgmem roles: run once as a superuser (or a role with CREATEROLE that owns the database);"
            " safe to re-run.\n"
        ),
        sql.SQL("DO $pgmem_roles$\nBEGIN\n"),
        *body,
        sql.SQL("END\n$pgmem_roles$;\n"),
    ]
    for x in logins:
        parts.append(sql.SQL("GRANT {} TO {};\n").format(sql.Identifier(GROUPS[x.group]), sql.Identifier(x.name)))
    own_schema = vector_schema != "public"
    if own_schema:
        # A schema of its own (PGMEM_VECTOR_SCHEMA): made here, usable by the three roles, and on
        # the search_path of the logins made here, since pgmem's statements name pgvector's types
        # unqualified (`%s::vector[]`): without it, every call of those logins failed.
        parts += [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {};\n").format(sql.Identifier(vector_schema)),
            sql.SQL("GRANT USAGE ON SCHEMA {} TO pgmem_owner, pgmem_app, pgmem_reader;\n").format(
                sql.Identifier(vector_schema)
            ),
        ]
        parts += [
            sql.SQL('ALTER ROLE {} IN DATABASE {} SET search_path = "$user", {}, public;\n').format(
                sql.Identifier(x.name), sql.Identifier(database), sql.Identifier(vector_schema)
            )
            for x in logins
        ]
    parts += [
        sql.SQL("-- pgvector is not a trusted extension: only a superuser can install it.\n"),
        sql.SQL("CREATE EXTENSION IF NOT EXISTS vector SCHEMA {};\n").format(sql.Identifier(vector_schema)),
        # A role with CREATEROLE that is no superuser may not SET ROLE to a role it created
        # (PostgreSQL 16+), which AUTHORIZATION needs: the whole script was refused. The schema
        # is then the migration's to create (the CREATE grant below lets the migrating login).
        sql.SQL(
            "DO $pgmem_schema$\nBEGIN\n"
            "    IF pg_catalog.to_regnamespace('pgmem') IS NULL THEN\n"
            "        CREATE SCHEMA pgmem AUTHORIZATION pgmem_owner;\n"
            "    END IF;\n"
            "EXCEPTION WHEN insufficient_privilege THEN\n"
            "    RAISE NOTICE 'schema pgmem: % may not create it for pgmem_owner; pgmem migrate creates it',"
            " current_user;\n"
            "END\n$pgmem_schema$;\n"
        ),
        sql.SQL("GRANT CONNECT ON DATABASE {} TO pgmem_owner, pgmem_app, pgmem_reader;\n").format(
            sql.Identifier(database)
        ),
        # the migrations start with CREATE SCHEMA IF NOT EXISTS pgmem, which checks this privilege
        sql.SQL("GRANT CREATE ON DATABASE {} TO pgmem_owner;\n").format(sql.Identifier(database)),
        sql.SQL(
            "-- PostgreSQL 15+ default; every pgmem function searches this schema, so nobody else may create in it.\n"
        ),
        sql.SQL("REVOKE CREATE ON SCHEMA {} FROM PUBLIC;\n").format(sql.Identifier(vector_schema)),
        # A GRANT or REVOKE by a role that may not give it is a WARNING, not an error: run by a
        # plain login (the roles there already, as roles are the server's), the script ended well
        # and `pgmem roles create` said "roles ready" with none of them given (until rt71).
        sql.SQL(
            "DO $pgmem_check$\nBEGIN\n"
            "    IF NOT (pg_catalog.has_database_privilege('pgmem_owner', pg_catalog.current_database(), 'CREATE')\n"
            "            AND pg_catalog.has_database_privilege('pgmem_app', pg_catalog.current_database(), 'CONNECT')\n"
            "            AND pg_catalog.has_database_privilege('pgmem_reader', pg_catalog.current_database(),"
            " 'CONNECT'))\n"
            "       OR EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n,\n"
            "                  pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a\n"
            "                   WHERE n.nspname = {lit} AND a.grantee = 0 AND a.privilege_type = 'CREATE') THEN\n"
            "        RAISE EXCEPTION 'pgmem roles: % may not grant the pgmem roles CONNECT and CREATE on database % or "
            "revoke CREATE on schema % from PUBLIC', current_user, pg_catalog.current_database(), {lit}\n"
            "            USING ERRCODE = '42501', HINT = 'run it as a superuser or as the owner of the database';\n"
            "    END IF;\n"
            "END\n$pgmem_check$;\n"
        ).format(lit=sql.Literal(vector_schema)),
    ]
    return sql.Composed(parts)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    roles = sub.add_parser("roles", help="create the pgmem roles (for a DBA), or show them")
    rsub = roles.add_subparsers(dest="roles_command", required=True, metavar="ACTION")
    c = rsub.add_parser("create", help="create pgmem_owner, pgmem_app, pgmem_reader (and LOGIN members)")
    c.add_argument(
        "--login",
        action="append",
        default=[],
        metavar="NAME:ROLE[:PASSWORD_ENV]",
        help="a LOGIN member of owner/app/reader; its password is read from PASSWORD_ENV",
    )
    c.add_argument("--vector-schema", default=None, help="schema of pgvector (default PGMEM_VECTOR_SCHEMA or public)")
    c.add_argument("--print", action="store_true", help="print the SQL instead of running it")
    c.add_argument(
        "--psql",
        action="store_true",
        help="with --print: a script for `psql -f` (the database psql is connected to; passwords from PASSWORD_ENV)",
    )
    c.set_defaults(func=_create)
    rsub.add_parser("show", help="the pgmem roles, their attributes and members").set_defaults(func=_show)


def _connect() -> psycopg.Connection[tuple[object, ...]]:
    from pgmem.cli.common import server_url

    return psycopg.connect(server_url(settings()), autocommit=True)


def _create(args: argparse.Namespace) -> int:
    logins = [Login.parse(s) for s in args.login]
    vector_schema = args.vector_schema or os.environ.get("PGMEM_VECTOR_SCHEMA") or "public"
    # An undecodable byte (a lone surrogate here) would fail in psycopg's encoder: a traceback.
    check_text(vector_schema, "--vector-schema")
    check_vector_schema(vector_schema)  # as the migration will read it from PGMEM_VECTOR_SCHEMA
    if args.print:
        # Rendering needs no server: names are quoted by psycopg's rules for the default encoding.
        script = setup_sql(database="<database>", vector_schema=vector_schema, logins=logins).as_string(None)
        if args.psql:
            print(script.replace('"<database>"', ':"DBNAME"'), end="")
            print("".join(_psql_password(x) for x in logins if x.password_env), end="")
            return 0
        print(script.replace('"<database>"', "<database>"), end="")
        for x in logins:
            if x.password_env:
                # Quoted as the script quotes it: Bob unquoted is bob, and user is a reserved word.
                name = sql.Identifier(x.name).as_string(None)
                print(f"-- then: ALTER ROLE {name} PASSWORD '...';  (from ${x.password_env})")
        return 0
    passwords: dict[str, str] = {}
    for x in logins:
        if x.password_env:
            value = os.environ.get(x.password_env)
            if not value:
                raise ConfigError(f"login {x.name}: environment variable {x.password_env} is not set")
            # Checked before anything is created; the message names the variable, not the value.
            passwords[x.name] = check_text(value, f"the password in {x.password_env}")
    with _connect() as conn:
        database = conn.info.dbname
        conn.execute(setup_sql(database=database, vector_schema=vector_schema, logins=logins))
        for name, value in passwords.items():
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(name), sql.Literal(value)))
    print(f"roles ready in database {database}: {', '.join(GROUPS.values())}", file=sys.stderr)
    for x in logins:
        print(
            f"  login {x.name} -> {GROUPS[x.group]}{' (password set)' if x.name in passwords else ''}", file=sys.stderr
        )
    print("next: migrate as pgmem_owner (or a member of it): pgmem migrate", file=sys.stderr)
    return 0


def _psql_password(login: Login) -> str:
    """psql lines that set the login's password from its environment variable (psql 15+'s
    \\getenv), so that the password is never in the script; a missing variable stops the script."""
    var = f"pgmem_password_{login.name}"
    name = sql.Identifier(login.name).as_string(None)
    return (
        f"\\getenv {var} {login.password_env}\n"
        f"\\if :{{?{var}}}\n"
        f"ALTER ROLE {name} PASSWORD :'{var}';\n"
        f"\\unset {var}\n"
        "\\else\n"
        f"DO $$BEGIN RAISE EXCEPTION 'environment variable {login.password_env} (password of {login.name}) is not set'"
        " USING ERRCODE = '22023'; END$$;\n"
        "\\endif\n"
    )


def _show(args: argparse.Namespace) -> int:
    with _connect() as conn:
        rows = conn.execute(
            """SELECT r.rolname, r.rolcanlogin, r.rolsuper, r.rolbypassrls,
                      coalesce(array_agg(m.rolname ORDER BY m.rolname) FILTER (WHERE m.rolname IS NOT NULL), '{}'),
                      coalesce(array_agg(m.rolname ORDER BY m.rolname)
                               FILTER (WHERE m.rolsuper OR m.rolbypassrls), '{}')
                 FROM pg_catalog.pg_roles r
                 LEFT JOIN pg_catalog.pg_auth_members am ON am.roleid = r.oid
                 LEFT JOIN pg_catalog.pg_roles m ON m.oid = am.member
                WHERE r.rolname = ANY(%s)
                GROUP BY 1, 2, 3, 4 ORDER BY 1""",
            (list(GROUPS.values()),),
        ).fetchall()
    if not rows:
        print("no pgmem roles here: run `pgmem roles create` as a DBA")
        return 3
    for name, login, superuser, bypass, members, unsafe in rows:
        flags = [f for f, on in (("LOGIN", login), ("SUPERUSER", superuser), ("BYPASSRLS", bypass)) if on]
        warn = "  <- unsafe: row-level security does not apply" if superuser or bypass else ""
        # A login member is what connects: one that is SUPERUSER or BYPASSRLS bypasses row-level
        # security whatever the group is. Names printed as repr when not plain (no escape codes).
        if unsafe:
            warn += f"  <- unsafe members (SUPERUSER or BYPASSRLS): {', '.join(map(_shown, unsafe))}"  # type: ignore[call-overload]
        print(f"{name}: {' '.join(flags) or 'NOLOGIN'}; members: {', '.join(map(_shown, members)) or '-'}{warn}")  # type: ignore[call-overload]
    return 0


def _shown(name: object) -> str:
    """A role name as one printable word: repr when it holds anything unprintable (a newline, a
    terminal escape code)."""
    text = str(name)
    return text if text.isprintable() else repr(text)
