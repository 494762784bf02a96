"""LangGraph's `BaseStore` on pgmem: `PgmemStore`.

    with PgmemStore.from_conn_string(url) as store:
        store.setup()                       # pgmem's migrations (as the migrating role)
        store.put(("users", "u1"), "k1", {"text": "Luna the dog hates baths"})
        store.search(("users", "u1"), query="what does the dog dislike?")

Mapping (README, section LangGraph, says the same):

- A namespace is a scope: `pgmem.store_scope(namespace)`, its labels joined by `/`, each label's
  `\\` and `/` escaped as `\\\\` and `\\/`, so two namespaces never share a scope. A scope name is at
  most 200 characters: a longer namespace is refused (InputError). Row-level security confines
  every read and write of a namespace to its scope, as for any pgmem scope.
- An item is a row of `pgmem.store_item` (key, JSON value, created/updated times). An indexed
  item is also one turn of its scope, thread `item:<key>` (`item-sha256:<hex>` for keys over 195
  characters), turn 0, stored through `pgmem.ingest_turns`: its texts are split, packed into
  pieces of at most 1,200 bytes, labelled (`[Turn 0 · Memory text · Dec 1, 10:35 AM]`, the time
  being the item's creation) and blended with the item's context vector like any turn. The
  texts are those at the index paths (LangGraph's path syntax; default `$`, the whole value as
  JSON), one source per path; a path holding a list of chat messages (`{"role": ..., "content":
  ...}`, e.g. `messages`) is stored as those messages, role-split like a logged turn. An item put
  with `index=False`, or with no text at its paths, is a plain key-value row with no turn.
- `search(prefix, query=...)` embeds the query once (pgmem's split into at most 8 parts, each
  part blended with the whole message) and runs `pgmem.memory_recall` in the scope of every
  namespace under the prefix. An item's score is the best raw cosine among its pieces' hits.
  BaseStore returns one list, so the per-part groups are merged round-robin by part (part 1's
  best item, part 2's best, ..., then each part's second), each item once at its first place:
  no part is crowded out by another's stronger hits. The list is therefore not sorted by score.
  Each part keeps up to `x` hits above `floor`, x growing with `offset + limit`
  (2 * (offset + limit), at least the store's x, at most 1,000); a `filter` applies to the
  items those hits name, so a filter that matches few items can return fewer than `limit`.
  Without a query, `search` lists items newest first (`updated_at`), with the filter.
- `filter` is equality on the value, JSON containment (`value @> filter`); `{"$eq": v}` is
  accepted, other operators are refused (InputError). Two reserved keys bound a search with a
  query by when items were first put: `"$since"` (at or after) and `"$until"` (before), each an
  ISO 8601 time or a datetime (no zone: UTC); memory_recall applies them (since / until).
- `list_namespaces` and prefix searches read the store's **directory** of namespace names
  (`pgmem.store_namespace`): the store is constructed with a directory name (`directory=`,
  default `"default"`, where namespaces stored before migration 0006 are listed), and every
  put records its namespace there. Row-level security shows a directory's rows only to a
  transaction that sets `pgmem.store_directory` to its name (the store does, per transaction,
  as it sets `pgmem.scope`; `pgmem.check_store_directory` refuses a mismatch like
  `pgmem.check_scope`), and a namespace's row to a transaction inside that namespace's scope: a
  service bound to one scope, or `pgmem_reader` in psql, sees no other tenant's namespace names.
  What remains: whoever names a directory sees its namespace names (a setting, not
  authentication, like `pgmem.scope`: give each tenant's store its own directory name, not a
  guessable one, where that matters); a namespace written by stores with two directory names is
  listed in both. One prefix and one suffix condition at most.
- TTL as LangGraph has it (minutes): `ttl={"default_ttl", "refresh_on_read",
  "sweep_interval_minutes"}` and a per-put `ttl`. An expired item is invisible to get and search
  at once (`pgmem.store_get`, `pgmem.store_list`); a read with refresh moves its expiry
  (`pgmem.refresh_items`); `start_ttl_sweeper` removes expired items of the directory's
  namespaces every `sweep_interval_minutes` (`pgmem.expire_items`, the path of `delete_item`),
  and a DBA can schedule `pgmem.sweep_expired_items()` from pg_cron instead.
- Search results are sorted by score (best raw cosine of the item's pieces), then namespace and
  key, with no floor unless the store is given one (`floor=`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote, urlencode

from pgmem.extras import require

require("langgraph.store.base", "langgraph", "pgmem.integrations.langgraph")

import psycopg  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402
from psycopg.rows import tuple_row  # noqa: E402

from pgmem.calls import RETRY_ATTEMPTS, lost_race, retry_delay  # noqa: E402
from pgmem.db import scoped  # noqa: E402
from pgmem.embedders.base import Embedder  # noqa: E402
from pgmem.errors import ConfigError, ConflictError, DatabaseError, InputError, PgmemError, SchemaError  # noqa: E402
from pgmem.ingest import ingest_turns  # noqa: E402
from pgmem.recall import DEFAULT_MODE, DEFAULT_X, MODES, embed_query, recall_vectors  # noqa: E402
from pgmem.text import check_text, describe, unstorable  # noqa: E402
from pgmem.turns import MAX_DEPTH, Turn, parse_time  # noqa: E402

Conn = psycopg.Connection[tuple[object, ...]]

#: pgmem's scope names are at most 200 characters (pgmem.scope.scope_id).
MAX_SCOPE_CHARS = 200
#: store_item.item_key is at most 1,000 characters.
MAX_KEY_CHARS = 1000
#: Keys up to this length are readable in the thread name (`item:<key>`, 200 characters at most).
_READABLE_KEY_CHARS = 195
#: Default cap on an item's value as JSON (UTF-8 bytes). An indexed value is embedded whole:
#: 4 MB is about 3,500 pieces, a minute of the local model on two cores.
DEFAULT_MAX_VALUE_BYTES = 4_000_000
#: A search runs one recall per namespace under its prefix; more namespaces than this is refused.
DEFAULT_MAX_SEARCH_NAMESPACES = 100
#: The largest limit + offset of a search.
MAX_SEARCH_WINDOW = 1000
#: The directory of a store constructed without one (and of every namespace stored before 0006).
DEFAULT_DIRECTORY = "default"
#: pgmem.store_namespace.directory is at most 200 characters.
MAX_DIRECTORY_CHARS = 200


@dataclass(frozen=True)
class _ItemRow:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


def namespace_scope(namespace: object) -> str:
    """The scope of a namespace (the Python twin of `pgmem.store_scope`): labels joined by `/`,
    `\\` and `/` in a label escaped. InputError for a namespace pgmem cannot store."""
    labels = check_namespace(namespace)
    scope = "/".join(label.replace("\\", "\\\\").replace("/", "\\/") for label in labels)
    if len(scope) > MAX_SCOPE_CHARS:
        raise InputError(
            f"namespace {labels!r:.120} maps to a scope of {len(scope)} characters; at most {MAX_SCOPE_CHARS} "
            "(labels joined by '/', with '\\' and '/' escaped)"
        )
    return scope


def check_namespace(namespace: object, *, what: str = "namespace", allow_empty: bool = False) -> tuple[str, ...]:
    """A tuple of non-empty storable labels."""
    if not isinstance(namespace, tuple | list):
        raise InputError(f"{what} must be a tuple of strings, got {type(namespace).__name__}")
    if not namespace and not allow_empty:
        raise InputError(f"{what} must have at least one label")
    for i, label in enumerate(namespace):
        check_text(label, f"{what}[{i}]")
        if not label:
            raise InputError(f"{what}[{i}] is empty: a namespace label must be a non-empty string")
    return tuple(namespace)


def item_thread(key: str) -> str:
    """The thread of an indexed item's turn: `item:<key>`, or `item-sha256:<hex>` for a long key."""
    if len(key) <= _READABLE_KEY_CHARS:
        return f"item:{key}"
    return "item-sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def check_key(key: object) -> str:
    check_text(key, "key")
    assert isinstance(key, str)
    if len(key) > MAX_KEY_CHARS:
        raise InputError(f"key is {len(key)} characters; at most {MAX_KEY_CHARS}")
    return key


def check_value(value: object, *, max_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> str:
    """`value` as JSON text Postgres can store (jsonb), or an InputError naming the place."""
    if not isinstance(value, Mapping):
        raise InputError(f"value must be a JSON object (a dict), got {type(value).__name__}")
    stack: list[tuple[object, str, int]] = [(value, "value", 1)]
    while stack:
        v, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"{where} nests deeper than {MAX_DEPTH} levels")
        if isinstance(v, Mapping):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise InputError(f"{where} has a key of type {type(k).__name__}: JSON keys are strings")
                _check_str(k, f"{where} key {k!r:.40}")
                stack.append((x, f"{where}.{k}"[:200], depth + 1))
        elif isinstance(v, list | tuple):
            stack.extend((x, f"{where}[{i}]"[:200], depth + 1) for i, x in enumerate(v))
        elif isinstance(v, str):
            _check_str(v, where)
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise InputError(f"{where} is {v}: JSON has no NaN or infinity")
        elif not (v is None or isinstance(v, bool | int)):
            raise InputError(f"{where} is a {type(v).__name__}: a value holds JSON types only")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"value is not JSON: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise InputError(f"value is {size:,} bytes as JSON; at most {max_bytes:,} (max_value_bytes)")
    return text


def _check_str(s: str, where: str) -> None:
    found = unstorable(s)
    if found is not None:
        raise InputError(f"{where} contains {describe(found[1])} at offset {found[0]}: Postgres cannot store it")


def check_index(index: object) -> Literal[False] | list[str] | None:
    if index is None or index is False:
        return index
    if not isinstance(index, list) or not all(isinstance(p, str) and p for p in index):
        raise InputError(f"index must be False, None or a list of field paths, got {index!r:.80}")
    for p in index:
        check_text(p, "index path")
        try:
            tokenize_path(p)
        except Exception as exc:  # LangGraph's parser raises plain exceptions on a bad path
            raise InputError(f"index path {p!r:.80} is not a valid path: {exc}") from None
    return list(index)


#: The filter operators `pgmem.store_filter_match` knows (the SQL is the rule; this names them early).
FILTER_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def time_bounds(flt: object) -> tuple[dict[str, datetime], object]:
    """The filter's reserved `$since` / `$until` keys as recall's since / until, and the rest."""
    if not isinstance(flt, Mapping) or not ({"$since", "$until"} & set(flt)):
        return {}, flt
    rest = {k: v for k, v in flt.items() if k not in ("$since", "$until")}
    times = {k[1:]: parse_time(flt[k], f"filter {k}") for k in ("$since", "$until") if flt.get(k) is not None}
    return {k: v for k, v in times.items() if v is not None}, rest


def check_filter(flt: object) -> str | None:
    """The filter as JSON text for `pgmem.store_filter_match` (which applies it, operators
    included); here only that it is storable JSON and names known operators."""
    if flt is None:
        return None
    if not isinstance(flt, Mapping):
        raise InputError(f"filter must be a dict of field values, got {type(flt).__name__}")
    for k, v in flt.items():
        if isinstance(v, Mapping) and any(isinstance(op, str) and op.startswith("$") for op in v):
            bad = [op for op in v if op not in FILTER_OPERATORS]
            if bad:
                raise InputError(
                    f"filter[{k!r:.40}]: operator {str(bad[0])!r:.40} is not one of {', '.join(FILTER_OPERATORS)}"
                )
    return check_value(flt, max_bytes=DEFAULT_MAX_VALUE_BYTES)


#: The longest TTL pgmem stores (pgmem.store_item.ttl_minutes): 100 years, in minutes.
MAX_TTL_MINUTES = 52_596_000


def check_ttl(ttl: object, what: str = "ttl") -> float | None:
    """A TTL in minutes (LangGraph's unit), or None for no expiry."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InputError(f"{what} must be a number of minutes or None, got {type(ttl).__name__}")
    if not (math.isfinite(ttl) and 0 < ttl <= MAX_TTL_MINUTES):
        raise InputError(f"{what} must be above 0 and at most {MAX_TTL_MINUTES} minutes (100 years), got {ttl!r:.40}")
    return float(ttl)


def item_messages(value: Mapping[str, Any], paths: Sequence[str]) -> list[dict[str, Any]]:
    """The messages of an indexed item's turn: one source per text at each path; a path holding
    a list of chat messages gives those messages."""
    messages: list[dict[str, Any]] = []
    for path in paths:
        held = value.get(path) if path.isidentifier() else None
        if (
            isinstance(held, list)
            and held
            and all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in held)
        ):
            messages.extend(dict(m) for m in held)
            continue
        role = "memory" if path == "$" else f"memory {path}"
        for text in get_text_at_path(value, path):
            if text.strip():
                messages.append({"role": role, "content": text})
    return messages


def conninfo_url(conninfo: str, password: str | None = None) -> str:
    """A postgresql:// URL for a conninfo string (URL or key=value), as alembic needs."""
    if conninfo.startswith(("postgresql://", "postgres://")):
        return conninfo
    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    if password and "password" not in params:
        params["password"] = password
    user = quote(str(params.pop("user", "") or ""), safe="")
    pw = params.pop("password", None)
    db = quote(str(params.pop("dbname", "") or ""), safe="")
    auth = f"{user}:{quote(str(pw), safe='')}@" if pw else (f"{user}@" if user else "")
    query = urlencode({k: str(v) for k, v in params.items() if v is not None})
    return f"postgresql://{auth}/{db}" + (f"?{query}" if query else "")


class PgmemStore(BaseStore):
    """A LangGraph `BaseStore` whose items live in pgmem: the module docstring has the mapping.

    `conn` is an autocommit psycopg connection with tuple rows (pgmem's default), or a
    `psycopg_pool.ConnectionPool` of such connections. One connection is used by one batch at a
    time (a lock); a pool serves concurrent batches. `index={"fields": [...]}` sets the default
    index paths (LangGraph's syntax; default `["$"]`); `embedder` is pgmem's (default: the local
    MiniLM model, the `[local]` extra). `directory` names the namespace directory that
    `list_namespaces` and prefix searches read and puts write (default `"default"`): stores
    of different tenants given different names never list each other's namespaces."""

    supports_ttl: bool = True

    def __init__(
        self,
        conn: Any,
        *,
        embedder: Embedder | None = None,
        index: Mapping[str, Any] | None = None,
        x: int = DEFAULT_X,
        floor: float = -1.0,
        mode: str = DEFAULT_MODE,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_search_namespaces: int = DEFAULT_MAX_SEARCH_NAMESPACES,
        conninfo: str | None = None,
        directory: str = DEFAULT_DIRECTORY,
        ttl: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._ttl = _check_ttl_config(ttl)
        self.ttl_config: Any = dict(self._ttl) if ttl is not None else None
        self._sweeper: threading.Thread | None = None
        self._sweep_stop = threading.Event()
        try:
            check_text(directory, "directory")
        except InputError as exc:
            raise ConfigError(str(exc)) from None
        if not 1 <= len(directory) <= MAX_DIRECTORY_CHARS:
            raise ConfigError(f"directory must be 1 to {MAX_DIRECTORY_CHARS} characters, got {len(directory)}")
        self.directory = directory
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
        if not 1 <= x <= 1000:
            raise ConfigError(f"x must be between 1 and 1000, got {x}")
        if not -1.0 <= floor <= 1.0:
            raise ConfigError(f"floor is a raw cosine between -1 and 1, got {floor}")
        self.index_config: dict[str, Any] | None = dict(index) if index is not None else None
        fields = (index or {}).get("fields") or ["$"]
        if isinstance(fields, str):
            fields = [fields]
        try:
            self.fields: list[str] = check_index(list(fields)) or ["$"]
        except InputError as exc:
            raise ConfigError(f"index fields: {exc}") from None
        embedder = _index_embedder(index, embedder)
        self.embedder = embedder
        self.x, self.floor, self.mode = x, floor, mode
        self.max_value_bytes = max_value_bytes
        self.max_search_namespaces = max_search_namespaces
        self._conn = conn
        self._conninfo = conninfo
        self._is_pool = not isinstance(conn, psycopg.Connection)
        self._lock = threading.Lock()

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool_config: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Iterator[PgmemStore]:
        """A store on a new connection (or, with `pool_config`, a `psycopg_pool.ConnectionPool`:
        `min_size`, `max_size` and the pool's other arguments), closed on leaving the block.
        Other keyword arguments are those of `PgmemStore`."""
        if pool_config is not None:
            pool_mod = require("psycopg_pool", "langgraph", "PgmemStore with a pool")
            pc = dict(pool_config)
            kwargs = {"autocommit": True, **(pc.pop("kwargs", None) or {})}
            with pool_mod.ConnectionPool(
                conn_string, min_size=pc.pop("min_size", 1), max_size=pc.pop("max_size", None), kwargs=kwargs, **pc
            ) as pool:
                yield cls(pool, conninfo=conn_string, **options)
        else:
            with psycopg.connect(conn_string, autocommit=True) as conn:
                yield cls(conn, conninfo=conn_string, **options)

    def setup(self) -> None:
        """Run pgmem's migrations (`pgmem.migrate.upgrade`) on the store's database. It needs the
        migrating role (pgmem_owner or a member, or a superuser), not the application's."""
        from pgmem.migrate import upgrade

        url = self._url()
        try:
            upgrade(url)
        except PgmemError:
            raise
        except Exception as exc:
            line = " ".join(str(exc).split())[:300]
            raise SchemaError(
                f"setup() could not migrate ({type(exc).__name__}: {line}); run it as the migrating role "
                "(pgmem_owner or a member), or run `pgmem migrate`"
            ) from None

    def _url(self) -> str:
        if self._conninfo:
            return conninfo_url(self._conninfo)
        if self._is_pool:
            return conninfo_url(str(self._conn.conninfo))
        info = self._conn.info
        return conninfo_url(psycopg.conninfo.make_conninfo(**info.get_parameters()), info.password)

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        if self._is_pool:
            with self._conn.connection() as conn:
                yield self._ready(conn)
        else:
            with self._lock:
                yield self._ready(self._conn)

    @contextmanager
    def _in_directory(self, conn: Conn) -> Iterator[None]:
        """A transaction reading and writing the store's directory (set transaction-locally, as
        `scoped` sets the scope); inside a transaction already open, for the rest of it."""
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.store_directory', %s, true)", (self.directory,))
            yield

    @staticmethod
    def _ready(conn: Conn) -> Conn:
        if not conn.autocommit:
            raise ConfigError("PgmemStore needs autocommit connections (each batch is its own transaction)")
        if conn.row_factory is not tuple_row:
            raise ConfigError("PgmemStore needs connections with psycopg's default tuple rows (no row_factory)")
        if conn.adapters.types.get("vector") is None:
            try:
                register_vector(conn)
            except psycopg.ProgrammingError:
                raise SchemaError("pgvector is not installed in this database: call store.setup()") from None
        return conn

    # -- BaseStore ----------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops`: reads first (get, search, list_namespaces), then every put and delete in one
        transaction (all stored, or none when one fails). Every op is checked before anything runs."""
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            _check_op(op, i, self.max_value_bytes)
            if isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op  # the last put of a key wins, as in PostgresStore
        # Writes in one order, (scope, key), so two batches never take the same items' locks in
        # opposite orders (the lock order: docs/architecture.md).
        writes = [puts[k] for k in sorted(puts, key=lambda k: (namespace_scope(k[0]), k[1]))]
        try:
            with self._connection() as conn:
                for i, op in enumerate(ops):
                    if isinstance(op, GetOp):
                        results[i] = self._get(conn, op)
                    elif isinstance(op, SearchOp):
                        results[i] = self._search(conn, op)
                    elif isinstance(op, ListNamespacesOp):
                        results[i] = self._list_namespaces(conn, op)
                if writes:
                    self._write(conn, writes)
        except psycopg.DataError as exc:
            raise InputError(" ".join(str(exc).split())) from None
        except psycopg.Error as exc:
            raise DatabaseError.from_driver(exc) from None
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` in a worker thread (psycopg's sync connection; one implementation)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    # -- reads --------------------------------------------------------------------------------

    def _get(self, conn: Conn, op: GetOp) -> Item | None:
        scope = namespace_scope(op.namespace)
        with scoped(conn, scope):
            row = conn.execute("SELECT * FROM pgmem.store_get(%s, %s)", (scope, op.key)).fetchone()
            if row is not None and self._refresh(op.refresh_ttl):
                conn.execute("SELECT pgmem.refresh_items(%s, %s)", (scope, [op.key]))
        if row is None:
            return None
        r = _row(row)
        return Item(value=r.value, key=r.key, namespace=r.namespace, created_at=r.created_at, updated_at=r.updated_at)

    def _namespaces_under(self, conn: Conn, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        limit = self.max_search_namespaces
        with self._in_directory(conn):
            rows = conn.execute(
                "SELECT pgmem.store_namespaces(%s, prefix => %s, lim => %s)",
                (self.directory, list(prefix) or None, limit + 1),
            ).fetchall()
        found = [tuple(str(x) for x in r[0]) for r in rows]  # type: ignore[attr-defined]
        if len(found) > limit:
            raise InputError(
                f"namespace prefix {prefix!r:.120} holds more than {limit} namespaces; a search runs one recall per "
                "namespace: search a longer prefix, or raise max_search_namespaces"
            )
        return found

    def _search(self, conn: Conn, op: SearchOp) -> list[SearchItem]:
        times, rest = time_bounds(op.filter)
        flt = check_filter(rest)
        if times and not op.query:
            raise InputError("filter $since / $until bound a search with a query; a listing has no turn times")
        namespaces = self._namespaces_under(conn, tuple(op.namespace_prefix))
        if not op.query:
            listed = self._list_items(conn, namespaces, flt, op.limit, op.offset)
            self._refresh_found(conn, listed, op.refresh_ttl)
            return listed
        if not namespaces:
            return []
        window = op.offset + op.limit
        x = min(1000, max(self.x, 2 * window))
        q = embed_query(op.query, self.embedder)
        # Per part, the hits of every namespace: (rank, -cosine, scope, thread, cosine).
        per_part: list[list[tuple[int, float, str, str, float]]] = [[] for _ in q.texts]
        items: dict[tuple[str, str], _ItemRow] = {}
        for ns in namespaces:
            scope = namespace_scope(ns)
            rec = recall_vectors(
                conn, scope, q.texts, q.blended, x=x, floor=self.floor, mode=self.mode,
                message=op.query, model_id=self.embedder.model_id,
                since=times.get("since"), until=times.get("until"),
            )  # fmt: skip
            threads = sorted({h.thread_id for g in rec.groups for h in g.hits if h.thread_id})
            if not threads:
                continue
            with scoped(conn, scope):
                rows = conn.execute(
                    """SELECT namespace, item_key, value, created_at, updated_at, thread_id FROM pgmem.store_item
                        WHERE scope_id = %s AND thread_id = ANY(%s)
                          AND (expires_at IS NULL OR expires_at > now())
                          AND pgmem.store_filter_match(value, %s::jsonb)""",
                    (scope, threads, flt),
                ).fetchall()
            for row in rows:
                items[(scope, str(row[5]))] = _row(row)
            for g in rec.groups:
                for h in g.hits:
                    if h.thread_id and (scope, h.thread_id) in items:
                        per_part[g.part_no - 1].append((h.rank, -h.cosine, scope, h.thread_id, h.cosine))
        best: dict[tuple[str, str], float] = {}
        for hits in per_part:
            hits.sort()
            for _, _, scope, thread, cos in hits:
                best[(scope, thread)] = max(cos, best.get((scope, thread), -2.0))
        # Sorted by score, then namespace and key, so pages are stable.
        order = sorted(best, key=lambda ident: (-best[ident], items[ident].namespace, items[ident].key))
        out = []
        for ident in order[op.offset : window]:
            r = items[ident]
            out.append(SearchItem(r.namespace, r.key, r.value, r.created_at, r.updated_at, score=best[ident]))
        self._refresh_found(conn, out, op.refresh_ttl)
        return out

    def _list_items(
        self, conn: Conn, namespaces: list[tuple[str, ...]], flt: str | None, limit: int, offset: int
    ) -> list[SearchItem]:
        rows: list[_ItemRow] = []
        for ns in namespaces:
            scope = namespace_scope(ns)
            with scoped(conn, scope):
                found = conn.execute(
                    "SELECT * FROM pgmem.store_list(%s, %s::jsonb, %s, 0)", (scope, flt, offset + limit)
                ).fetchall()
            rows.extend(_row(r) for r in found)
        rows.sort(key=lambda r: (r.updated_at, r.namespace, r.key), reverse=True)
        page = rows[offset : offset + limit]
        return [SearchItem(r.namespace, r.key, r.value, r.created_at, r.updated_at) for r in page]

    def _list_namespaces(self, conn: Conn, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefix: list[str] | None = None
        suffix: list[str] | None = None
        for cond in op.match_conditions or ():
            path = list(check_namespace(tuple(cond.path), what="match condition path"))
            if cond.match_type == "prefix" and prefix is None:
                prefix = path
            elif cond.match_type == "suffix" and suffix is None:
                suffix = path
            else:
                raise InputError(
                    f"match condition {cond.match_type!r:.40}: at most one prefix and one suffix condition"
                )
        with self._in_directory(conn):
            rows = conn.execute(
                "SELECT pgmem.store_namespaces(%s, %s, %s, %s, %s, %s)",
                (self.directory, prefix, suffix, op.max_depth, op.limit, op.offset),
            ).fetchall()
        return [tuple(str(x) for x in r[0]) for r in rows]  # type: ignore[attr-defined]

    # -- TTL ----------------------------------------------------------------------------------

    def _put_ttl(self, ttl: object) -> float | None:
        # BaseStore.put has already put the default_ttl in when no ttl was given (NOT_PROVIDED).
        if _not_provided(ttl):
            return check_ttl(self._ttl.get("default_ttl"))
        return check_ttl(ttl)

    def _refresh(self, refresh_ttl: bool | None) -> bool:
        if refresh_ttl is None:
            return bool(self._ttl.get("refresh_on_read", True))
        return bool(refresh_ttl)

    def _refresh_found(self, conn: Conn, found: Sequence[Item], refresh_ttl: bool | None) -> None:
        if not found or not self._refresh(refresh_ttl):
            return
        by_scope: dict[str, list[str]] = {}
        for it in found:
            by_scope.setdefault(namespace_scope(it.namespace), []).append(it.key)
        for scope, keys in sorted(by_scope.items()):
            with scoped(conn, scope):
                conn.execute("SELECT pgmem.refresh_items(%s, %s)", (scope, sorted(keys)))

    def sweep_ttl(self) -> int:
        """Remove the expired items of every namespace of the store's directory now
        (`pgmem.expire_items` in each namespace's scope); returns how many went."""
        gone = 0
        with self._connection() as conn:
            with self._in_directory(conn):
                rows = conn.execute("SELECT pgmem.store_namespaces(%s, lim => NULL)", (self.directory,)).fetchall()
            for r in rows:
                scope = namespace_scope(tuple(str(x) for x in r[0]))  # type: ignore[attr-defined]
                with scoped(conn, scope):
                    n = conn.execute("SELECT pgmem.expire_items(%s)", (scope,)).fetchone()
                gone += int(n[0]) if n and n[0] is not None else 0  # type: ignore[call-overload]
        return gone

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Any:
        """Sweep expired items every `sweep_interval_minutes` (the ttl config's, default 5) in a
        daemon thread until `stop_ttl_sweeper`. Returns a Future that resolves when it stops."""
        from concurrent.futures import Future

        interval = sweep_interval_minutes or self._ttl.get("sweep_interval_minutes") or 5
        check_ttl(interval, "sweep_interval_minutes")
        done: Future[None] = Future()
        if self._sweeper is not None and self._sweeper.is_alive():
            done.set_result(None)
            return done
        self._sweep_stop.clear()

        def loop() -> None:
            try:
                while not self._sweep_stop.wait(float(interval) * 60):
                    try:
                        self.sweep_ttl()
                    except (PgmemError, psycopg.Error):
                        continue  # the next sweep tries again; reads never see expired items anyway
            finally:
                done.set_result(None)

        self._sweeper = threading.Thread(target=loop, name="pgmem-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True once it has stopped (or none was running)."""
        if self._sweeper is None:
            return True
        self._sweep_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    # -- writes -------------------------------------------------------------------------------

    def _write(self, conn: Conn, puts: list[PutOp]) -> None:
        """The batch's puts and deletes in one transaction, run again when it loses a race with a
        concurrent writer (a deadlock or serialization failure rolls it back whole)."""
        attempt = 1
        while True:
            try:
                return self._put(conn, puts)
            except (psycopg.Error, ConflictError) as exc:
                if not (lost_race(exc) or isinstance(exc, ConflictError)) or attempt >= RETRY_ATTEMPTS:
                    raise
            time.sleep(retry_delay(attempt))
            attempt += 1

    def _put(self, conn: Conn, puts: list[PutOp]) -> None:
        with self._in_directory(conn):
            turns: list[Turn] = []
            for op in puts:
                scope = namespace_scope(op.namespace)
                if op.value is None:
                    with scoped(conn, scope):
                        conn.execute("SELECT pgmem.delete_item(%s, %s)", (scope, op.key))
                    continue
                value = dict(op.value)
                paths = self.fields if op.index is None else (op.index or [])
                messages = item_messages(value, paths)
                thread = item_thread(op.key) if messages else None
                with scoped(conn, scope):
                    row = conn.execute(
                        """SELECT created_at FROM pgmem.put_item(scope => %s, namespace => %s, item_key => %s,
                                                value => %s::jsonb, thread => %s, ttl_minutes => %s)""",
                        (
                            scope,
                            list(op.namespace),
                            op.key,
                            check_value(value, max_bytes=self.max_value_bytes),
                            thread,
                            self._put_ttl(op.ttl),
                        ),
                    ).fetchone()
                assert row is not None
                if thread is not None:
                    created = row[0]
                    assert isinstance(created, datetime)
                    turns.append(Turn(scope, thread, 0, created, tuple(messages), origin=f"item {op.key!r:.80}"))
            if turns:
                report = ingest_turns(conn, turns, self.embedder)
                if report.failed:
                    raise InputError("; ".join(err for _, err in report.failed[:3]))


#: `index["embed"]` strings that name pgmem's own embedders.
_PGMEM_EMBEDDERS = {"pgmem:minilm": "local", "pgmem:local": "local", "pgmem:e5": "e5"}


def _index_embedder(index: Mapping[str, Any] | None, embedder: Embedder | None) -> Embedder:
    """The embedder an index config names, checked against its dims and distance_type: a
    config pgmem cannot honour is a one-line ConfigError, never a silent substitution."""
    cfg = dict(index or {})
    unknown = sorted(str(k) for k in cfg if k not in ("dims", "embed", "fields", "distance_type", "ann_index_config"))
    if unknown:
        raise ConfigError(f"index: unknown setting {unknown[0]!r:.40}; known: dims, embed, fields, distance_type")
    embed = cfg.get("embed")
    if embed is not None:
        if embedder is not None:
            raise ConfigError("give index['embed'] or embedder=, not both")
        if not isinstance(embed, str) or embed not in _PGMEM_EMBEDDERS:
            raise ConfigError(
                f"index embed {str(embed)!r:.60} is not one of pgmem's embedders ({', '.join(_PGMEM_EMBEDDERS)}); "
                "PgmemStore does not embed with LangChain embeddings or callables yet: pass embedder= a pgmem Embedder"
            )
        if _PGMEM_EMBEDDERS[embed] == "e5":
            from pgmem.embedders.e5 import E5Embedder

            embedder = E5Embedder()
    if embedder is None:
        from pgmem.embedders.local import LocalEmbedder

        embedder = LocalEmbedder()
    dims = cfg.get("dims")
    if dims is not None and dims != embedder.dims:
        raise ConfigError(f"index dims is {dims!r:.20}, but the model {embedder.model_id} gives {embedder.dims}")
    distance = cfg.get("distance_type", "cosine")
    if distance != "cosine":
        raise ConfigError(f"index distance_type {str(distance)!r:.40}: PgmemStore scores by cosine only")
    return embedder


def _not_provided(v: object) -> bool:
    return type(v).__name__ == "NotProvided"


def _check_ttl_config(ttl: object) -> dict[str, Any]:
    if ttl is None:
        return {}
    if not isinstance(ttl, Mapping):
        raise ConfigError(
            f"ttl must be a dict (default_ttl, refresh_on_read, sweep_interval_minutes), got {type(ttl).__name__}"
        )
    unknown = sorted(str(k) for k in ttl if k not in ("default_ttl", "refresh_on_read", "sweep_interval_minutes"))
    if unknown:
        raise ConfigError(
            f"ttl: unknown setting {unknown[0]!r:.40}; known: default_ttl, refresh_on_read, sweep_interval_minutes"
        )
    try:
        check_ttl(ttl.get("default_ttl"), "ttl default_ttl")
        check_ttl(ttl.get("sweep_interval_minutes"), "ttl sweep_interval_minutes")
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(ttl.get("refresh_on_read", True), bool):
        raise ConfigError("ttl refresh_on_read must be True or False")
    return dict(ttl)


def _row(row: Sequence[object]) -> _ItemRow:
    ns, key, value, created, updated = row[:5]
    assert isinstance(ns, list) and isinstance(value, dict)
    assert isinstance(created, datetime) and isinstance(updated, datetime)
    return _ItemRow(tuple(str(x) for x in ns), str(key), value, created, updated)


def _check_op(op: object, i: int, max_value_bytes: int) -> None:
    """Every argument of an op, before any op runs: a bad one is an InputError naming it."""
    where = f"op {i}"
    if isinstance(op, GetOp):
        namespace_scope(op.namespace)
        check_key(op.key)
    elif isinstance(op, PutOp):
        namespace_scope(op.namespace)
        check_key(op.key)
        if op.value is not None:
            check_value(op.value, max_bytes=max_value_bytes)
            check_index(op.index)
        if op.ttl is not None and not _not_provided(op.ttl):
            check_ttl(op.ttl, f"{where}: ttl")
    elif isinstance(op, SearchOp):
        check_namespace(op.namespace_prefix, what="namespace_prefix", allow_empty=True)
        if op.query is not None:
            check_text(op.query, "query")
        check_filter(time_bounds(op.filter)[1])
        for name, n in (("limit", op.limit), ("offset", op.offset)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise InputError(f"{where}: {name} must be an integer >= 0, got {n!r:.40}")
        if op.limit + op.offset > MAX_SEARCH_WINDOW:
            raise InputError(f"{where}: limit + offset is {op.limit + op.offset}; at most {MAX_SEARCH_WINDOW}")
    elif isinstance(op, ListNamespacesOp):
        md = op.max_depth
        if md is not None and (not isinstance(md, int) or isinstance(md, bool) or md < 1):
            raise InputError(f"{where}: max_depth must be a positive integer or None, got {md!r:.40}")
        for name, n in (("limit", op.limit), ("offset", op.offset)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise InputError(f"{where}: {name} must be an integer >= 0, got {n!r:.40}")
        for cond in op.match_conditions or ():
            if getattr(cond, "match_type", None) not in ("prefix", "suffix"):
                raise InputError(f"{where}: match_type must be 'prefix' or 'suffix'")
    else:
        raise InputError(f"{where}: not a store operation: {type(op).__name__}")


__all__ = ["PgmemStore", "item_thread", "namespace_scope"]
