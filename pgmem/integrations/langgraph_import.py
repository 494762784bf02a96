"""Copy a LangGraph `PostgresStore`'s items into a `PgmemStore`: `import_postgres_store`, the
Python twin of `pgmem store import`.

    with PgmemStore.from_conn_string(pgmem_url) as store:
        report = import_postgres_store("postgresql://.../langgraph", store)

The source is read from PostgresStore's `store` table (prefix, key, value, created_at,
updated_at, and ttl_minutes / expires_at where its migrations added them) in key order,
`(prefix, key)`, a page at a time (keyset pagination on the table's primary key). Each page is
read through the store's `batch` (GetOp) and written as `batch` writes (PutOp, each conditional
on the source's time), so the import goes through PgmemStore's one write pipeline, embeds with
the store's model and takes the store's locks in their documented order. Per item:

- no item in pgmem: imported;
- the same value in pgmem: unchanged (nothing written, nothing embedded), so a second run
  changes nothing and a rerun after a kill passes over what was done at the cost of a read;
- another value in pgmem written after the source's `updated_at`: kept (the application wrote
  it since); written before: replaced by the source's (the source changed since). The put is
  conditional and decided again under the item's lock (put_item's unless_newer_than), so an
  application's put that commits between the import's read and its write is kept too;
- no item in pgmem because the application deleted it there after the source's `updated_at`
  (`delete`, or a forget of the item's thread; pgmem remembers a deleted key 30 days,
  pgmem.store_tombstone), or because it expired there after it (an expiry is a delete at
  `expires_at`, swept or not: 0092): deleted, not written again. A delete that commits between the
  import's read and its write counts too (the key's lock, pgmem._store_key_lock);
- unchanged or kept, its namespace is listed in the store's directory all the same
  (pgmem.note_store_namespace; nothing written or embedded): an import into a second directory
  of a database that holds the items lists every namespace;
- expired in the source (`expires_at` passed): not copied; an item with a TTL keeps its
  `ttl_minutes`, counted from the import;
- an item pgmem cannot store (an InputError: a namespace or key too long, a value too large,
  not an object, nested too deeply, a number JSON cannot carry, text that is not UTF-8): failed,
  reported with its namespace and key, and the others are imported.

`created_at` and `updated_at` are not carried over: `pgmem.put_item` stamps an item with the
time it is written, so an imported item's times (and its turn's label) are the import's.

`checkpoint` (a file) records the last (prefix, key) written, after every page, with the source's
table and database and the target's database and directory: a run given the same file starts
after it (a run from another source or into another store refuses it), and the file is removed
when the import reaches the end. Without
one, a rerun reads every item again and writes only what differs.

A table or view (`table`) that holds two rows of one (prefix, key), which PostgresStore's primary
key never does, is refused before anything is written (without a unique index on the two
columns, the source is read once to see)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgmem.extras import require

require("langgraph.store.base", "langgraph", "pgmem.integrations.langgraph_import")

import psycopg  # noqa: E402
from langgraph.store.base import GetOp, Item, PutOp  # noqa: E402
from psycopg import sql  # noqa: E402
from psycopg.rows import tuple_row  # noqa: E402

from pgmem.db import redact_secrets  # noqa: E402
from pgmem.errors import ConfigError, DatabaseError, InputError, PgmemError  # noqa: E402
from pgmem.integrations.langgraph import PgmemStore  # noqa: E402
from pgmem.text import json_loads_once, unstorable  # noqa: E402

DEFAULT_PAGE_SIZE = 100
#: The time of a source row whose updated_at is NULL: before anything pgmem holds or deleted.
_NO_TIME = datetime.min.replace(tzinfo=UTC)
DEFAULT_TABLE = "store"


@dataclass
class ImportReport:
    """What an import did. `read` = imported + unchanged + kept + deleted + expired + len(failed)."""

    read: int = 0
    imported: int = 0
    unchanged: int = 0
    kept: int = 0
    #: Items the application deleted in pgmem (or that expired there) after the source's copy was
    #: written: not written.
    deleted: int = 0
    expired: int = 0
    #: (namespace, key, error) of each item that could not be stored.
    failed: list[tuple[tuple[str, ...] | str, str, str]] = field(default_factory=list)
    #: The items the source holds beyond where this run started (for progress).
    total: int = 0
    #: True when the run read to the end of the source (not stopped by `limit`).
    complete: bool = False

    def summary(self) -> str:
        return (
            f"read {self.read} · imported {self.imported} · unchanged {self.unchanged} · kept {self.kept} "
            f"(newer in pgmem) · deleted {self.deleted} (in pgmem since) · expired {self.expired} · "
            f"failed {len(self.failed)}"
        )


@dataclass(frozen=True)
class _Row:
    prefix: str | bytes | None
    key: str | bytes | None
    value: str | bytes | None
    updated_at: datetime | None
    ttl_minutes: float | None
    expired: bool
    #: The source's updated_at as text when Python cannot hold it (see _IN_RANGE), else None.
    bad_time: str | None = None


def import_postgres_store(
    source: Any,
    store: PgmemStore,
    *,
    table: str = DEFAULT_TABLE,
    page_size: int = DEFAULT_PAGE_SIZE,
    limit: int | None = None,
    checkpoint: str | Path | None = None,
    progress: Callable[[ImportReport], None] | None = None,
) -> ImportReport:
    """Copy the items of a PostgresStore's table into `store` (see the module docstring).

    `source` is a psycopg connection, a `psycopg_pool.ConnectionPool`, a conninfo string, or the
    PostgresStore itself (its connection is used); only SELECT on `table` is needed. `limit`
    stops after that many items are read (a later run with the same `checkpoint` continues);
    rows with a NULL prefix or key (not in PostgresStore's own table) are reported, all of them,
    by the run that reaches the end.
    `progress` is called after every page with the report so far."""
    if not isinstance(table, str) or not table.strip() or unstorable(table):
        raise ConfigError(f"table must be a table name, got {table!r:.80}")
    if not isinstance(page_size, int) or isinstance(page_size, bool) or not 1 <= page_size <= 10_000:
        raise ConfigError(f"page_size must be an integer from 1 to 10000, got {page_size!r:.40}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ConfigError(f"limit must be a non-negative integer or None, got {limit!r:.40}")
    if checkpoint is not None and (not isinstance(checkpoint, str | Path) or "\x00" in str(checkpoint)):
        raise ConfigError(f"checkpoint must be a file path, got {checkpoint!r:.200}")
    if checkpoint is not None and not Path(checkpoint).resolve().parent.is_dir():
        raise ConfigError(f"the checkpoint's directory does not exist: {str(checkpoint)!r:.200}")
    if progress is not None and not callable(progress):
        raise ConfigError(f"progress must be a callable or None, got {type(progress).__name__}")
    if not isinstance(store, PgmemStore):
        raise ConfigError(f"store must be a PgmemStore, got {type(store).__name__}")
    report = ImportReport()
    with _source_conn(source) as conn:
        relation, name, columns = _table(conn, table)
        database = _database(conn) if checkpoint is not None else ""
        target = _target(store) if checkpoint is not None else ""
        after = _read_checkpoint(checkpoint, name, database, target)
        report.total = _count(conn, relation, after)
        while limit is None or report.read < limit:
            n = page_size if limit is None else min(page_size, limit - report.read)
            rows = _page(conn, relation, columns, after, n)
            if not rows:
                report.complete = True
                break
            _import_page(store, rows, report)
            after = (rows[-1].prefix, rows[-1].key)
            _write_checkpoint(checkpoint, name, database, target, after)
            if progress is not None:
                progress(report)
            if len(rows) < n:
                report.complete = True
                break
        if report.complete:
            _import_unkeyed(conn, relation, columns, store, report)
    if report.complete and checkpoint is not None:
        Path(checkpoint).unlink(missing_ok=True)
    return report


# -- the source ---------------------------------------------------------------------------------


@contextmanager
def _source_conn(source: Any) -> Iterator[psycopg.Connection[Any]]:
    if isinstance(source, str):
        try:
            conn = psycopg.connect(source, autocommit=True)
        except (psycopg.Error, UnicodeError) as exc:
            # libpq quotes the part of a conninfo it cannot parse: the password, at times.
            shown = redact_secrets(" ".join(str(exc).split()), source)
            raise ConfigError(f"cannot connect to the source: {shown[:300]}") from None
        with conn:
            yield conn
    elif isinstance(source, psycopg.Connection):
        yield source
    elif hasattr(source, "connection") and callable(source.connection):  # a psycopg_pool.ConnectionPool
        with source.connection() as conn:
            yield conn
    elif hasattr(source, "conn") and not isinstance(source, PgmemStore):  # a PostgresStore
        with _source_conn(source.conn) as conn:
            yield conn
    else:
        raise ConfigError(
            "source must be a conninfo string, a psycopg connection or pool, or a PostgresStore; "
            f"got {type(source).__name__}"
        )


@contextmanager
def _reading(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Cursor[tuple[Any, ...]]]:
    """A tuple-row cursor in a short transaction (the source's own row factory, e.g.
    PostgresStore's dict rows, is left alone; no transaction stays open between pages). The
    source's refusals (privilege, a bad table name) are DatabaseErrors of one line."""
    try:
        with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
            yield cur
    except psycopg.Error as exc:
        raise DatabaseError.from_driver(exc) from None


def _table(conn: psycopg.Connection[Any], table: str) -> tuple[sql.Composable, str, set[str]]:
    """The table as an identifier, its schema-qualified name, and its columns."""
    with _reading(conn) as cur:
        row = cur.execute(
            """SELECT n.nspname, c.relname,
                      array(SELECT a.attname::text FROM pg_catalog.pg_attribute a
                             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
                      array(SELECT pg_catalog.format_type(CASE t.typtype WHEN 'd' THEN t.typbasetype ELSE t.oid END,
                                                          NULL)
                              FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
                      array(SELECT t.typcategory::text
                              FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
                      EXISTS (SELECT FROM pg_catalog.pg_index i
                               WHERE i.indrelid = c.oid AND i.indisunique AND i.indpred IS NULL
                                 AND i.indexprs IS NULL AND i.indnatts = 2
                                 AND (SELECT array_agg(a.attname::text ORDER BY a.attname::text)
                                        FROM pg_catalog.pg_attribute a
                                       WHERE a.attrelid = c.oid AND a.attnum = ANY (i.indkey))
                                     = ARRAY['key', 'prefix'])
                 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                WHERE c.oid = pg_catalog.to_regclass(%s)""",
            (table,),
        ).fetchone()
    if row is None:
        raise ConfigError(
            f"the source has no table {table!r:.80} (PostgresStore's table is `store`; --table names another)"
        )
    types = {_text(c): (_text(t), _text(k)) for c, t, k in zip(row[2], row[3], row[4], strict=True)}
    missing = {"prefix", "key", "value", "updated_at"} - set(types)
    if missing:
        raise ConfigError(f"table {table!r:.80} is not a PostgresStore table: no column {sorted(missing)[0]}")
    # Read as Python takes them: another type (an integer prefix, a text time) failed midway.
    for column, ok in _TYPES.items():
        if column in types and not ok(*types[column]):
            raise ConfigError(
                f"table {table!r:.80} is not a PostgresStore table: column {column} is {types[column][0]!r:.80}"
            )
    columns = set(types)
    schema, name = _text(row[0]), _text(row[1])
    relation = sql.Identifier(schema, name)
    if not row[5]:
        _one_row_per_key(conn, relation, table)
    return relation, f"{schema}.{name}", columns


def _one_row_per_key(conn: psycopg.Connection[Any], relation: sql.Composable, table: str) -> None:
    """A ConfigError unless the source holds one row per (prefix, key), as PostgresStore's table
    does (its primary key; a table or view without a unique index on the two is read once to
    see). Two rows of one key were both read as that item, the store kept either, and the keyset
    pages (`(prefix, key) > the last`) skipped the second when a page ended between them: the
    import said "read 8" of 10 rows and "kept 3 (newer in pgmem)" of items it had just written."""
    query = sql.SQL(
        "SELECT prefix, key, count(*) FROM {} WHERE {} GROUP BY prefix, key HAVING count(*) > 1 LIMIT 1"
    ).format(relation, _KEYED)
    with _reading(conn) as cur:
        row = cur.execute(query).fetchone()
    if row is not None:
        raise ConfigError(
            f"table {table!r:.80} is not a PostgresStore table: it holds {row[2]} rows of namespace "
            f"{_shown(row[0])!r:.120} key {_text(row[1])!r:.80} (PostgresStore's holds one row per key); "
            "give one row per key, e.g. a view keeping the newest"
        )


def _timestamp(name: str, category: str) -> bool:
    return name in ("timestamp with time zone", "timestamp without time zone")


#: The type each column must have (format_type, pg_type.typcategory of its base type); the
#: value is read as text and parsed as JSON, so any type will do for it.
_TYPES: dict[str, Callable[[str, str], bool]] = {
    "prefix": lambda name, category: category == "S",
    "key": lambda name, category: category == "S",
    "updated_at": _timestamp,
    "expires_at": _timestamp,
    "ttl_minutes": lambda name, category: category == "N",
}


def _text(x: object) -> str:
    return x.decode("utf-8", "surrogateescape") if isinstance(x, bytes) else str(x)


def _after(after: tuple[str | bytes, str | bytes] | None) -> tuple[sql.Composable, tuple[Any, ...]]:
    """The keyset condition. A SQL_ASCII database hands text over as bytes: they go back as they
    came (convert_from to SQL_ASCII converts nothing)."""
    if after is None:
        return sql.SQL("true"), ()
    if isinstance(after[0], bytes):
        return sql.SQL("(prefix, key) > (convert_from(%s, 'SQL_ASCII'), convert_from(%s, 'SQL_ASCII'))"), after
    return sql.SQL("(prefix, key) > (%s, %s)"), after


#: Rows a keyset cannot page over (a row comparison with NULL is NULL): a table that is not
#: PostgresStore's own can hold them. They are read after the others, and fail.
_UNKEYED = sql.SQL("(prefix IS NULL OR key IS NULL)")
_KEYED = sql.SQL("prefix IS NOT NULL AND key IS NOT NULL")


def _count(conn: psycopg.Connection[Any], relation: sql.Composable, after: Any) -> int:
    cond, params = _after(after)
    query = sql.SQL("SELECT count(*) FILTER (WHERE {} OR {}) FROM {}").format(cond, _UNKEYED, relation)
    with _reading(conn) as cur:
        row = cur.execute(query, params).fetchone()
    return int(row[0]) if row else 0


def _import_unkeyed(
    conn: psycopg.Connection[Any], relation: sql.Composable, columns: set[str], store: PgmemStore, report: ImportReport
) -> None:
    """The rows with a NULL prefix or key, once the keyset pages are done: each is reported as
    failed. All of them, whatever `limit` says: no checkpoint can say where among them a run
    stopped, and none of them is written."""
    with _reading(conn) as cur:
        row = cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE {}").format(relation, _UNKEYED)).fetchone()
    if row and row[0]:
        _import_page(store, _page(conn, relation, columns, None, int(row[0]), where=_UNKEYED), report)


def _page(
    conn: psycopg.Connection[Any],
    relation: sql.Composable,
    columns: set[str],
    after: Any,
    n: int,
    *,
    where: sql.Composable = _KEYED,
) -> list[_Row]:
    ttl = sql.SQL("ttl_minutes" if "ttl_minutes" in columns else "NULL::int")
    expired = sql.SQL("coalesce(expires_at <= now(), false)" if "expires_at" in columns else "false")
    cond, params = _after(after)
    query = sql.SQL(
        "SELECT prefix, key, value::text, CASE WHEN {ok} THEN updated_at END, {ttl}, {expired},"
        " CASE WHEN NOT ({ok}) THEN updated_at::text END"
        " FROM {rel} WHERE {where} AND {cond} ORDER BY prefix, key LIMIT {n}"
    ).format(ok=_IN_RANGE, ttl=ttl, expired=expired, rel=relation, where=where, cond=cond, n=sql.Literal(n))
    with _reading(conn) as cur:
        rows = cur.execute(query, params).fetchall()
    return [_Row(r[0], r[1], r[2], r[3], float(r[4]) if r[4] is not None else None, bool(r[5]), r[6]) for r in rows]


#: An updated_at Python's datetime holds in any session time zone: years 1 to 9999, a day from
#: either end. Another (infinity, a BC date, year 20000) failed the page's read in psycopg
#: ("timestamp too large"), which stopped the import there, every run: that row is failed now.
#: A time zone in the literal is ignored for a timestamp column (Postgres' rule).
_IN_RANGE = sql.SQL(
    "(updated_at IS NULL OR updated_at >= '0001-01-02 00:00+00' AND updated_at < '9999-12-31 00:00+00')"
)


# -- the checkpoint -------------------------------------------------------------------------------


def _database(conn: psycopg.Connection[Any]) -> str:
    """The source database, for the checkpoint: its name and its cluster's system identifier
    (the name alone is the same on many servers), or the name where pg_control_system() is
    refused."""
    try:
        with _reading(conn) as cur:
            row = cur.execute(
                "SELECT current_database()::text || '@' || system_identifier::text FROM pg_catalog.pg_control_system()"
            ).fetchone()
    except DatabaseError:
        with _reading(conn) as cur:
            row = cur.execute("SELECT current_database()::text").fetchone()
    return _text(row[0]) if row else ""


def _target(store: PgmemStore) -> str:
    """The store the items go into, for the checkpoint: its database (as `_database` names a
    source) and its directory."""
    with store._connection() as conn:
        return f"{_database(conn)}/{store.directory}"


def _read_checkpoint(path: str | Path | None, where: str, database: str, target: str) -> Any:
    if path is None or not Path(path).exists():
        return None
    if not Path(path).is_file():  # a FIFO would wait for a writer
        raise ConfigError(f"checkpoint {str(path)!r:.200} is not a regular file")
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
        prefix, key = saved["after"]
        table, as_bytes = saved["table"], saved["bytes"]
        saved_database = saved.get("database", database)  # absent from checkpoints written before it
        saved_target = saved.get("target", target)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ConfigError(f"checkpoint {str(path)!r:.200} is not an import checkpoint ({exc!s:.200})") from None
    # What _write_checkpoint writes, exactly: anything else would page from a wrong place (two
    # nulls read nothing and called the import complete) or fail inside the read.
    texts = (prefix, key, table, saved_database, saved_target)
    if (
        not isinstance(saved["after"], list)
        or not all(isinstance(t, str) and "\x00" not in t for t in texts)
        or not isinstance(as_bytes, bool)
    ):
        raise ConfigError(
            f"checkpoint {str(path)!r:.200} is not an import checkpoint (after must be two strings, table, "
            "database and target strings, bytes true or false)"
        )
    if table != where:
        raise ConfigError(f"checkpoint {str(path)!r:.200} is of table {table!r:.80}, not {where!r:.80}")
    if saved_database != database:
        # Its keys are another source's: continuing after them would skip this one's items.
        raise ConfigError(
            f"checkpoint {str(path)!r:.200} is of another database ({str(saved_database).split('@')[0]!r:.80}): "
            "give this source its own --checkpoint file"
        )
    if saved_target != target:
        # Its keys were written into another store: continuing after them would skip this one's.
        raise ConfigError(
            f"checkpoint {str(path)!r:.200} is of an import into another store ({saved_target!r:.120}): "
            "give this import its own --checkpoint file"
        )
    if as_bytes:
        return (prefix.encode("utf-8", "surrogateescape"), key.encode("utf-8", "surrogateescape"))
    return (prefix, key)


def _write_checkpoint(path: str | Path | None, where: str, database: str, target: str, after: tuple[Any, Any]) -> None:
    if path is None:
        return
    as_bytes = isinstance(after[0], bytes)
    saved = {
        "table": where,
        "database": database,
        "target": target,
        "after": [_text(after[0]), _text(after[1])],
        "bytes": as_bytes,
    }
    text = json.dumps(saved)
    tmp = Path(f"{path}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # a kill leaves the old checkpoint or the new one, never half of one
    except OSError as exc:
        raise ConfigError(f"cannot write the checkpoint {str(path)!r:.200}: {exc.strerror or exc}") from None


# -- one page -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Item:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    updated_at: datetime | None
    ttl: float | None


def _import_page(store: PgmemStore, rows: Sequence[_Row], report: ImportReport) -> None:
    items: list[_Item] = []
    for r in rows:
        report.read += 1
        if r.expired:
            report.expired += 1
            continue
        try:
            items.append(_decode(r))
        except InputError as exc:
            report.failed.append((_shown(r.prefix), _text(r.key), str(exc)))
    found = _each(store.batch, [GetOp(it.namespace, it.key, refresh_ttl=False) for it in items])
    puts: list[tuple[_Item, PutOp]] = []
    present: set[tuple[str, ...]] = set()  # namespaces of items found stored, nothing written
    for it, got in zip(items, found, strict=True):
        if isinstance(got, PgmemError):
            report.failed.append((it.namespace, it.key, str(got)))
        elif isinstance(got, Item) and got.value == it.value:
            report.unchanged += 1
            present.add(it.namespace)
        elif isinstance(got, Item) and (it.updated_at is None or got.updated_at > it.updated_at):
            report.kept += 1
            present.add(it.namespace)
        else:
            puts.append((it, PutOp(it.namespace, it.key, it.value, index=None, ttl=it.ttl)))
    # Each put is conditional on the source's time, decided again under the item's lock: an
    # application's put or delete committed since the read above is kept, not undone. A row
    # without a time is older than anything in pgmem, as the read above takes it.
    written = _each(store._put_unless_newer, [(op, it.updated_at or _NO_TIME) for it, op in puts])
    for (it, _), done in zip(puts, written, strict=True):
        if isinstance(done, PgmemError):
            report.failed.append((it.namespace, it.key, str(done)))
        elif done == "written":
            report.imported += 1
        elif done == "deleted":
            report.deleted += 1
        else:
            report.kept += 1
            present.add(it.namespace)
    # A store of another directory may have written them: they are listed in this one too.
    store._note_namespaces(present)


def _each(run: Callable[[list[Any]], Sequence[Any]], ops: list[Any]) -> list[Any]:
    """`run(ops)` (the store's batch, or its conditional puts); when the store refuses an
    input of the batch (InputError, before or during its one transaction, so nothing of it
    was written), each op alone, so the refused ones are named and the others go in. Any
    other error (the connection, the schema, the model) stops the import."""
    if not ops:
        return []
    try:
        return list(run(ops))
    except InputError as exc:
        if len(ops) == 1:
            return [exc]
    out: list[Any] = []
    for op in ops:
        try:
            out.append(run([op])[0])
        except InputError as exc:
            out.append(exc)
    return out


def _decode(r: _Row) -> _Item:
    """The item as PgmemStore takes it; InputError for what cannot be read as one."""
    prefix, key = _str(r.prefix, "namespace"), _str(r.key, "key")
    if r.bad_time is not None:
        raise InputError(f"updated_at {_text(r.bad_time)!r:.60} is not a time from year 1 to 9999")
    text = _str(r.value, "value")
    try:
        # A json or text column (not PostgresStore's jsonb) can give a key twice: refused, as
        # json.loads would keep the last silently.
        value = json_loads_once(text, "value")
    except RecursionError:
        raise InputError("value is JSON nested too deeply for Python to read") from None
    except InputError:
        raise
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"value is not JSON Python can read: {exc}") from None
    # A store item is a JSON object. JSON null must not reach the store: PutOp(value=None) is a
    # delete, and it deleted the item pgmem held, counted as imported.
    if not isinstance(value, dict):
        raise InputError(f"value must be a JSON object, got {'null' if value is None else type(value).__name__}")
    # A source column without a time zone (timestamp) is read as UTC, to compare with pgmem's.
    updated = r.updated_at
    if updated is not None and updated.tzinfo is None:
        updated = updated.replace(tzinfo=UTC)
    return _Item(tuple(prefix.split(".")), key, value, updated, r.ttl_minutes)


def _str(x: str | bytes | None, what: str) -> str:
    if x is None:
        raise InputError(f"{what} is NULL")
    if isinstance(x, str):
        return x
    try:
        return x.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not valid UTF-8 (byte {exc.start}: {x[exc.start : exc.start + 4]!r})") from None


def _shown(prefix: str | bytes | None) -> tuple[str, ...] | str:
    if prefix is None:
        return "NULL"
    if isinstance(prefix, bytes):
        return repr(prefix)[:200]
    return tuple(prefix.split("."))


__all__ = ["ImportReport", "import_postgres_store"]
