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
  characters; when the scope already holds a conversation of that name, written by put_turn or
  add_facts, `item-sha256:<hex>` and then `:1`, `:2`..., so an item never joins or forgets a
  conversation: pgmem._claim_item_thread, 0092), turn 0, stored through `pgmem.ingest_turns`:
  its texts are split, packed into pieces of at most 1,200 bytes, labelled (`[Turn 0 · Memory
  text · Dec 1, 10:35 AM]`, the time being the item's creation) and blended with the item's
  context vector like any turn. The texts are those at the index paths (LangGraph's path syntax;
  default `$`, the whole value as JSON), one source per path; a path holding a list of chat
  messages (`{"role": ..., "content": ...}`, e.g. `messages`, in OpenAI's shape: a list in
  another shape is the path's text) is stored as those messages, role-split like a logged turn.
  An item put with `index=False`, or with no text at its paths (chat messages whose contents are
  null, empty or images only included), is a plain key-value row with no turn.
- `search(prefix, query=...)` embeds the query once (pgmem's split into at most 8 parts, each
  part blended with the whole message) and runs `pgmem.memory_recall` in the scope of every
  namespace under the prefix. Items are ranked by their best hit's rank in its part's group,
  then its cosine (the hybrid order, word side included); an item's score is the reciprocal of
  that rank (1.0 for a part's first hit); results are sorted by score, then cosine, namespace
  and key (stable pages),
  with no floor unless the store is given one (`floor=`). Each part keeps up to `x` hits,
  x growing with `offset + limit` (2 * (offset + limit), at least the store's x, at most
  1,000); the `filter` applies in SQL (`pgmem.store_filter_match`) to the items those hits name.
  Without a query, `search` lists items newest first (`updated_at`), with the filter.
- With `index={"embed": ...}` of the caller's own (a LangChain `Embeddings`, a function, a
  `"provider:model"` string), a store works as PostgresStore does: one vector per indexed text
  (`pgmem.store_vector`, named `path` or `path.i`), scored by `pgmem.store_search` with the
  config's `distance_type` (cosine similarity, inner product, negated L2 distance; an item
  scores its best field), every match returned. A namespace holds one model's vectors: another
  model is a one-line ModelMismatchError, and pgmem's pieces and field vectors never mix in one
  namespace.
- `filter`: a plain value is equality; `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte` compare
  numbers as numbers (`pgmem.store_filter_match`, the rule in SQL).
  Two reserved keys bound a search with a query through pgmem's pieces by when items were
  first put (created_at, the turn's time, which a put again keeps; not updated_at): `"$since"`
  (at or after) and `"$until"` (before), each an ISO 8601 time or a datetime (no zone: UTC);
  memory_recall applies them (since / until) before ranking. LangGraph's stores have no time
  filter (they read `"$since"` as a value field).
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
- One implementation: every batch is a pgmem call (pgmem.calls: generators of statements and
  embedding requests); `PgmemStore` drives it on a `Connection` or `ConnectionPool`,
  `AsyncPgmemStore` on an `AsyncConnection` or `AsyncConnectionPool` (pgmem.aio).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeGuard, TypeVar
from urllib.parse import quote, urlencode

from pgmem.extras import require

require("langgraph.store.base", "langgraph", "pgmem.integrations.langgraph")

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    NamespacePath,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore  # noqa: E402
from langgraph.store.base.embed import get_text_at_path, tokenize_path  # noqa: E402
from psycopg.rows import tuple_row  # noqa: E402
from psycopg.types import TypeInfo  # noqa: E402

from pgmem import aio  # noqa: E402
from pgmem.calls import (  # noqa: E402
    RETRY_ATTEMPTS,
    SCOPE_LOCAL,
    Call,
    Embed,
    Finished,
    Local,
    Query,
    advance,
    check_usable,
    connection_lock,
    lost_race,
    one_round_trip,
    register_types,
    retry_delay,
    type_infos,
)
from pgmem.embedders.base import Embedder  # noqa: E402
from pgmem.errors import (  # noqa: E402
    CanceledError,
    ConfigError,
    ConflictError,
    DatabaseError,
    EmbeddingError,
    InputError,
    ModelMismatchError,
    ModelRefusedError,
    PgmemError,
    SchemaError,
    database_error,
    is_refusal,
)
from pgmem.ingest import ingest_turns_call  # noqa: E402
from pgmem.recall import (  # noqa: E402
    DEFAULT_MODE,
    DEFAULT_X,
    MODES,
    blended_query_call,
    query_inputs,
    recall_statement,
)
from pgmem.text import check_name, check_text, describe, unstorable  # noqa: E402
from pgmem.turns import MAX_DEPTH, UNREADABLE_INT, UNREADABLE_NUMBER, Turn, check_messages, parse_time, split_sources  # noqa: E402

T = TypeVar("T")

#: pgmem's scope names are at most 200 characters (pgmem.scope.scope_id).
MAX_SCOPE_CHARS = 200
#: store_item.item_key is at most 1,000 characters.
MAX_KEY_CHARS = 1000
#: An item's scope and key, as UTF-8, in its index entries (store_item's and store_vector's
#: primary keys): Postgres refuses a btree entry over 2,704 bytes ("index row size ... exceeds
#: btree version 4 maximum"), which 1,000 characters of CJK or emoji pass.
MAX_KEY_INDEX_BYTES = 2600
#: Keys up to this length are readable in the thread name (`item:<key>`, 200 characters at most).
_READABLE_KEY_CHARS = 195
#: Default cap on an item's value as JSON (UTF-8 bytes). An indexed value is embedded whole:
#: 4 MB is about 3,500 pieces, a minute of the local model on two cores.
DEFAULT_MAX_VALUE_BYTES = 4_000_000
#: The largest limit, offset or max_depth of list_namespaces (a Postgres integer).
MAX_INT4 = 2**31 - 1
#: A search runs one recall per namespace under its prefix; more namespaces than this is refused.
DEFAULT_MAX_SEARCH_NAMESPACES = 100
#: The largest limit + offset of a search.
MAX_SEARCH_WINDOW = 1000
#: The most hits a part of a search's recall reads (memory_recall's x), when others than the
#: namespace's items took the first ones.
MAX_RECALL_X = 1000
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
    if not scope.strip():
        # pgmem's scope names need a non-blank character (check_name); said here, naming the
        # namespace, before any op of the batch runs.
        raise InputError(
            f"namespace {labels!r:.80} is one blank label: pgmem cannot store it (a scope name needs a "
            "non-blank character; blank labels beside others are fine)"
        )
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


def check_value(value: object, *, max_bytes: int = DEFAULT_MAX_VALUE_BYTES, what: str = "value") -> str:
    """`value` as JSON text Postgres can store (jsonb), or an InputError naming the place (`what`:
    the value of a put, or a search's filter)."""
    if not isinstance(value, Mapping):
        raise InputError(f"{what} must be a JSON object (a dict), got {type(value).__name__}")
    stack: list[tuple[object, str, int]] = [(value, what, 1)]
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
        elif what == "value" and isinstance(v, int) and not isinstance(v, bool) and abs(v) >= UNREADABLE_INT:
            # pgmem.put_item's rule (pgmem._unreadable_number): such a stored number is not read
            # back at all (a filter's is only compared, in SQL).
            raise InputError(f"{where} {UNREADABLE_NUMBER}")
        elif not (v is None or isinstance(v, bool | int)):
            raise InputError(f"{where} is a {type(v).__name__}: a {what} holds JSON types only")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"{what} is not JSON: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        limit = " (max_value_bytes)" if what == "value" else ""
        raise InputError(f"{what} is {size:,} bytes as JSON; at most {max_bytes:,}{limit}")
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
    return check_value(flt, max_bytes=DEFAULT_MAX_VALUE_BYTES, what="filter")


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
    a list of chat messages pgmem reads gives those messages (other lists, messages of another
    shape included, are the path's text, as any value). No messages when none has text (chat
    messages with a null, empty or image-only content): the item is then a plain row, as one
    with no text at its paths."""
    messages: list[dict[str, Any]] = []
    for path in paths:
        held = value.get(path) if path.isidentifier() else None
        if _chat_messages(held):
            messages.extend(dict(m) for m in held)
            continue
        role = "memory" if path == "$" else f"memory {path}"
        for text in get_text_at_path(value, path):
            if text.strip():
                messages.append({"role": role, "content": text})
    return messages if split_sources(messages) else []


def _chat_messages(held: object) -> TypeGuard[list[Mapping[str, Any]]]:
    """Whether a value is a list of chat messages in the shapes pgmem reads (`check_messages`):
    OpenAI's. A list in another shape (LangChain's tool calls, a content that is a number) is
    indexed as text, as PostgresStore indexes any value: refusing it failed the whole batch."""
    if not (
        isinstance(held, list) and held and all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in held)
    ):
        return False
    try:
        check_messages(held, "messages")
    except InputError:
        return False
    return True


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


#: `index["embed"]` strings that name pgmem's own embedders.
_PGMEM_EMBEDDERS = {"pgmem:minilm": "local", "pgmem:local": "local", "pgmem:e5": "e5"}
#: PostgresStore's distance types, scored as it scores them (`pgmem.store_search`).
DISTANCE_TYPES = ("cosine", "inner_product", "l2")
_INDEX_KEYS = ("dims", "embed", "fields", "distance_type", "ann_index_config")


class FieldEmbedder:
    """The caller's own embedding (`index["embed"]`: a LangChain `Embeddings`, a sync or async
    function of a list of texts, or a `"provider:model"` string for LangChain's
    `init_embeddings`), seen as pgmem's `Embedder`: every indexed text of an item gets one
    vector, as the model returns it (not normalised: inner_product sees it raw), stored in
    `pgmem.store_vector` and searched by `pgmem.store_search`. Items and queries alike go through
    `embed_documents` (`aembed_documents` in the async store), as PostgresStore embeds them."""

    def __init__(self, embed: object, dims: int | None) -> None:
        from langgraph.store.base.embed import EmbeddingsLambda, ensure_embeddings

        if not (isinstance(embed, str) or callable(embed) or hasattr(embed, "embed_documents")):
            raise ConfigError(
                f"index embed must be a LangChain Embeddings, a function of a list of texts or a 'provider:model' "
                f"string, got {type(embed).__name__}"
            )
        if isinstance(embed, str):
            try:
                from langchain.embeddings import init_embeddings  # type: ignore[import-not-found]  # noqa: F401
            except ImportError:
                raise ConfigError(
                    f"index embed {embed!r:.60} needs langchain's init_embeddings, and langchain is not installed: "
                    "pip install 'langchain>=0.3.9' and the provider's package (e.g. langchain-openai), "
                    "or give an Embeddings object or a function"
                ) from None
        try:
            self.embeddings = ensure_embeddings(embed)  # type: ignore[arg-type]
        except (ImportError, ValueError, TypeError) as exc:
            line = " ".join(str(exc).split())
            raise ConfigError(f"index embed {str(embed)!r:.60} cannot be loaded: {line[:240]}") from None
        self.model_id = _model_id(embed, self.embeddings)
        self._dims = dims
        self.async_only = isinstance(self.embeddings, EmbeddingsLambda) and not hasattr(self.embeddings, "func")

    @property
    def dims(self) -> int:
        return self._dims or 0

    @property
    def max_input_tokens(self) -> int:
        return 1 << 30  # the caller's model sizes its own inputs

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def embed(self, texts: Sequence[str]) -> Any:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        try:
            out = self.embeddings.embed_documents(list(texts))
        except PgmemError:
            raise
        except Exception as exc:
            raise EmbeddingError(
                f"index embed failed: {type(exc).__name__}: {' '.join(str(exc).split())[:240]}"
            ) from None
        return self._matrix(out, len(texts))

    async def aembed(self, texts: Sequence[str]) -> Any:
        """What pgmem.aio awaits instead of running `embed` in a worker thread."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        try:
            out = await self.embeddings.aembed_documents(list(texts))
        except PgmemError:
            raise
        except Exception as exc:
            raise EmbeddingError(
                f"index embed failed: {type(exc).__name__}: {' '.join(str(exc).split())[:240]}"
            ) from None
        return self._matrix(out, len(texts))

    def _matrix(self, out: object, n: int) -> Any:
        try:
            m = np.asarray(out, dtype=np.float32)
        except (TypeError, ValueError):
            raise EmbeddingError(f"index embed returned {type(out).__name__}, not a list of {n} vectors") from None
        if m.ndim != 2 or m.shape[0] != n or m.shape[1] < 1:
            raise EmbeddingError(f"index embed returned an array of shape {m.shape} for {n} texts")
        if self._dims and m.shape[1] != self._dims:
            raise ConfigError(f"index dims is {self._dims}, but index embed {self.model_id} gives {m.shape[1]}")
        if not np.isfinite(m).all():
            raise EmbeddingError("index embed returned NaN or infinity")
        return m


def _model_id(embed: object, embeddings: object) -> str:
    """The name a namespace's field vectors are stored under: the "provider:model" string, or
    the class (and its model attribute) of an Embeddings, or the function's qualified name."""
    if isinstance(embed, str):
        name = embed
    elif hasattr(embed, "embed_documents"):
        cls = type(embeddings)
        model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        name = f"{cls.__module__}.{cls.__qualname__}" + (f":{model}" if isinstance(model, str) and model else "")
    else:
        name = f"callable:{getattr(embed, '__module__', '?')}.{getattr(embed, '__qualname__', type(embed).__name__)}"
    return name[:200]


def _resolve_index(
    index: Mapping[str, Any] | None, embedder: Embedder | None
) -> tuple[Embedder, FieldEmbedder | None, str]:
    """(pgmem's embedder, the caller's field embedder or None, the distance type) for an index
    config: a config pgmem cannot honour is a one-line ConfigError, never a silent substitution."""
    cfg = dict(index or {})
    unknown = sorted(str(k) for k in cfg if k not in _INDEX_KEYS)
    if unknown:
        raise ConfigError(f"index: unknown setting {unknown[0]!r:.40}; known: {', '.join(_INDEX_KEYS)}")
    dims = cfg.get("dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= 16000):
        raise ConfigError(f"index dims must be an integer from 1 to 16000, got {dims!r:.40}")
    distance = cfg.get("distance_type", "cosine")
    if distance not in DISTANCE_TYPES:
        raise ConfigError(f"index distance_type {str(distance)!r:.40} is not one of {', '.join(DISTANCE_TYPES)}")
    ann = cfg.get("ann_index_config") or {}
    vector_type = ann.get("vector_type", "vector") if isinstance(ann, Mapping) else None
    if vector_type not in ("vector", "halfvec"):
        raise ConfigError(
            f"index ann_index_config vector_type {str(vector_type)!r:.40}: PgmemStore stores vector or halfvec"
        )
    embed = cfg.get("embed")
    if embed is not None and not (isinstance(embed, str) and embed in _PGMEM_EMBEDDERS):
        if embedder is not None:
            raise ConfigError("give index['embed'] or embedder=, not both")
        fields = FieldEmbedder(embed, dims)
        return fields, fields, str(distance)
    if embed is not None:
        if embedder is not None:
            raise ConfigError("give index['embed'] or embedder=, not both")
        if _PGMEM_EMBEDDERS[embed] == "e5":
            from pgmem.embedders.e5 import E5Embedder

            embedder = E5Embedder()
    if embedder is None:
        from pgmem.embedders.local import LocalEmbedder

        embedder = LocalEmbedder()
    if dims is not None and dims != embedder.dims:
        raise ConfigError(f"index dims is {dims!r:.20}, but the model {embedder.model_id} gives {embedder.dims}")
    if distance != "cosine":
        raise ConfigError(
            f"index distance_type {str(distance)!r:.40}: pgmem's own pieces score by cosine only; "
            "give index['embed'] for another distance"
        )
    return embedder, None, "cosine"


def field_texts(value: Mapping[str, Any], paths: Sequence[str]) -> list[tuple[str, str]]:
    """(field name, text) of each text an item indexes, named as PostgresStore names them: the
    path, or `path.i` when the path holds several texts."""
    out: list[tuple[str, str]] = []
    for path in paths:
        texts = get_text_at_path(value, path)
        for i, text in enumerate(texts):
            if text.strip():
                out.append((f"{path}.{i}" if len(texts) > 1 else path, text))
    return out


def text_hash(text: str) -> bytes:
    """What pgmem.store_vector.text_hash holds for a text: the sha256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class _StoreLogic:
    """What PgmemStore and AsyncPgmemStore share: every batch written once, as pgmem calls
    (generators of `Query` and `Embed` steps, pgmem.calls), which the sync store drives on a
    `psycopg.Connection` or `ConnectionPool` and the async store on an `AsyncConnection` or
    `AsyncConnectionPool`. A batch's reads run in one transaction and its writes in another
    (run again whole when they lose a race), each with the store's directory set."""

    supports_ttl: bool = True
    index_config: Any
    ttl_config: Any
    _conn: Any
    _conninfo: str | None

    def _configure(
        self,
        *,
        embedder: Embedder | None,
        index: Mapping[str, Any] | None,
        x: int,
        floor: float,
        mode: str,
        max_value_bytes: int,
        max_search_namespaces: int,
        directory: str,
        ttl: Mapping[str, Any] | None,
    ) -> None:
        self._ttl = _check_ttl_config(ttl)
        self.ttl_config = dict(self._ttl) if ttl is not None else None
        # Whether the login may move expiries (pgmem.refresh_items): read once, on the first
        # read that would; a read-only login (pgmem_reader) reads without refreshing.
        self._may_refresh: bool | None = None
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
        if index is not None and not isinstance(index, Mapping):
            raise ConfigError(f"index must be a dict (dims, embed, fields, distance_type), got {type(index).__name__}")
        self.index_config = dict(index) if index is not None else None
        fields = (index or {}).get("fields") or ["$"]
        if isinstance(fields, str):
            fields = [fields]
        try:
            self.fields: list[str] = check_index(list(fields)) or ["$"]
        except (InputError, TypeError) as exc:
            raise ConfigError(f"index fields: {exc}") from None
        self.embedder, self.field_embedder, self.distance_type = _resolve_index(index, embedder)
        self.x, self.floor, self.mode = x, floor, mode
        self.max_value_bytes = max_value_bytes
        self.max_search_namespaces = max_search_namespaces

    # -- planning -----------------------------------------------------------------------------

    def _plan(self, ops: Iterable[Op]) -> tuple[list[Op], bool, list[PutOp]]:
        """Every op checked before anything runs; whether any reads; the writes deduplicated (the
        last put of a key wins, as in PostgresStore) and in one order, (scope, key), so two batches
        never take the same items' locks in opposite orders (the lock order: docs/architecture.md)."""
        try:
            ops = list(ops)
        except TypeError:  # None, a number: one line, as for any op that is not one
            raise InputError(f"ops must be an iterable of store operations, got {type(ops).__name__}") from None
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            _check_op(op, i, self.max_value_bytes)
            if isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
        writes = [puts[k] for k in sorted(puts, key=lambda k: (namespace_scope(k[0]), k[1]))]
        reads = any(isinstance(op, GetOp | SearchOp | ListNamespacesOp) for op in ops)
        return ops, reads, writes

    def _directory(self) -> Query:
        # Transaction-local, so it holds for every step of the call's transaction.
        return Query(None, DIRECTORY_SETTING, (self.directory,), wait=False)

    # -- reads --------------------------------------------------------------------------------

    def _reads_call(self, ops: list[Op]) -> Call[list[Result]]:
        results: list[Result] = [None] * len(ops)
        yield self._directory()
        query_vectors: dict[str, Any] = {}
        if self.field_embedder is not None:
            # One embedding request for every query of the batch, as PostgresStore makes it.
            texts = list(dict.fromkeys(op.query for op in ops if isinstance(op, SearchOp) and op.query))
            if texts:
                matrix = yield Embed(self.field_embedder, texts)
                query_vectors = dict(zip(texts, matrix, strict=True))
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                results[i] = yield from self._get(op)
            elif isinstance(op, SearchOp):
                results[i] = yield from self._search(op, query_vectors)
            elif isinstance(op, ListNamespacesOp):
                results[i] = yield from self._list_namespaces(op)
        return results

    def _get(self, op: GetOp) -> Call[Item | None]:
        scope = namespace_scope(op.namespace)
        row = yield Query(scope, "SELECT * FROM pgmem.store_get(%s, %s)", (scope, op.key), one=True)
        if row is None:
            return None
        if self._refresh(op.refresh_ttl) and (yield from self._login_may_refresh()):
            yield Query(scope, "SELECT pgmem.refresh_items(%s, %s)", (scope, [op.key]), wait=False)
        r = _row(row)
        return Item(value=r.value, key=r.key, namespace=r.namespace, created_at=r.created_at, updated_at=r.updated_at)

    def _namespaces_under(self, prefix: tuple[str, ...]) -> Call[list[tuple[str, ...]]]:
        limit = self.max_search_namespaces
        # The prefix is literal: a label "*" is that label, not list_namespaces' wildcard (a
        # namespace built from a user's id of "*" would otherwise search every user's).
        rows = yield Query(
            None,
            "SELECT pgmem.store_namespaces(%s, prefix => %s, lim => %s, literal => true)",
            (self.directory, list(prefix) or None, limit + 1),
        )
        found = [tuple(str(x) for x in r[0]) for r in rows]
        if len(found) > limit:
            raise InputError(
                f"namespace prefix {prefix!r:.120} holds more than {limit} namespaces; a search runs one query per "
                "namespace: search a longer prefix, or raise max_search_namespaces"
            )
        return found

    def _search(self, op: SearchOp, query_vectors: Mapping[str, Any]) -> Call[list[SearchItem]]:
        times, rest = time_bounds(op.filter)
        flt = check_filter(rest)
        # A query of whitespace only is no query on pgmem's pieces (there is nothing to recall):
        # the items are listed, as for an empty one, and as PostgresStore without an embed lists
        # them for any query. A field embedder embeds it, as PostgresStore with one does.
        query = op.query if self.field_embedder is not None or (op.query or "").strip() else None
        if times and (not query or self.field_embedder is not None):
            raise InputError("filter $since / $until bound a search with a query through pgmem's pieces; "
                             "a listing and field vectors have no turn times")  # fmt: skip
        namespaces = yield from self._namespaces_under(tuple(op.namespace_prefix))
        if not namespaces:
            if times:
                # No recall runs, but a bad window is refused all the same (SQL's rule).
                yield Query(
                    None,
                    "SELECT pgmem.check_window(%s, %s, 'since', 'until')",
                    (times.get("since"), times.get("until")),
                )
            found: list[SearchItem] = []
        elif not query:
            found = yield from self._list_items(namespaces, flt, op.limit, op.offset)
        elif self.field_embedder is not None:
            found = yield from self._vector_search(namespaces, query_vectors[query], flt, op)
        else:
            found = yield from self._recall_search(namespaces, flt, op, times)
        yield from self._refresh_found(found, op.refresh_ttl)
        return found

    def _vector_search(
        self, namespaces: list[tuple[str, ...]], vector: Any, flt: str | None, op: SearchOp
    ) -> Call[list[SearchItem]]:
        assert self.field_embedder is not None
        window = op.offset + op.limit
        found: list[tuple[float, _ItemRow]] = []
        for ns in namespaces:
            scope = namespace_scope(ns)
            rows = yield Query(
                scope,
                """SELECT namespace, item_key, value, created_at, updated_at, score
                     FROM pgmem.store_search(scope => %s, query => %b::vector, model_id => %s, distance_type => %s,
                                             filter => %s::jsonb, lim => %s, off => 0)""",
                (scope, vector, self.field_embedder.model_id, self.distance_type, flt, window),
            )
            found.extend((float(r[5]), _row(r)) for r in rows)
        # Best first; ties by namespace and key, so pages are stable.
        found.sort(key=lambda sr: (-sr[0], sr[1].namespace, sr[1].key))
        return [
            SearchItem(r.namespace, r.key, r.value, r.created_at, r.updated_at, score=s)
            for s, r in found[op.offset : window]
        ]

    def _recall_search(
        self, namespaces: list[tuple[str, ...]], flt: str | None, op: SearchOp, times: Mapping[str, datetime]
    ) -> Call[list[SearchItem]]:
        assert op.query
        window = op.offset + op.limit
        x = min(1000, max(self.x, 2 * window))
        parts, inputs = query_inputs(op.query)
        vectors = yield Embed(self.embedder, inputs, "query")
        q = yield from blended_query_call(None, parts, vectors, self.embedder.model_id)
        best: dict[tuple[str, str], tuple[int, float]] = {}
        items: dict[tuple[str, str], _ItemRow] = {}
        for ns in namespaces:
            scope = namespace_scope(ns)
            rows = yield from self._recall_items(scope, q, x, window, flt, op, times)
            for row in rows:
                # An item's place: its best hit by rank in its part's group, then cosine (the rule
                # the evaluation ranks by, pgmem.lab.evaluation.ranking). Sorting by cosine alone
                # threw away hybrid's word ranking (`pgmem eval langgraph`, docs/langgraph.md).
                ident = (scope, str(row[5]))
                items[ident] = _row(row[:6])
                place = (int(str(row[6])), -float(str(row[7])))
                best[ident] = min(place, best.get(ident, place))
        order = sorted(best, key=lambda ident: (best[ident], items[ident].namespace, items[ident].key))
        # score: the reciprocal of that rank (1 for some part's first hit), so results are sorted
        # by score; PostgresStore has no score here (without an `embed` it ignores the query).
        return [
            SearchItem(r.namespace, r.key, r.value, r.created_at, r.updated_at, score=1.0 / best[ident][0])
            for ident in order[op.offset : window]
            for r in (items[ident],)
        ]

    def _recall_items(
        self,
        scope: str,
        q: Any,
        x: int,
        window: int,
        flt: str | None,
        op: SearchOp,
        times: Mapping[str, datetime],
    ) -> Call[list[tuple[Any, ...]]]:
        """The rows of the namespace's items that a recall of the scope finds, best hits first.
        The recall reads the scope's pieces, and the scope is an ordinary pgmem scope: a
        conversation of it (put_turn, `pgmem ingest`), or items the filter or an expiry leaves
        out, took the x hits of each part, and the items below them were never seen (rt59: a
        conversation about what the items hold made every search of them answer nothing). When
        a part's hits were all taken (x of them) by what is no item of the search, and fewer
        items than the window came back, the recall runs again with 8 times x, up to 1,000."""
        assert op.query
        while True:
            st = recall_statement(
                scope, q.texts, q.blended, x=x, floor=self.floor, mode=self.mode,
                message=op.query, model_id=self.embedder.model_id,
                since=times.get("since"), until=times.get("until"),
            )  # fmt: skip
            # The recall and the items its hits are (each item is one thread) in one statement:
            # one round trip a namespace, and no second one for an empty answer's reason. The
            # check, the outer side of a LEFT JOIN so it runs when the recall finds nothing,
            # refuses a namespace of field vectors (0087; it answered nothing, without a word).
            # Every hit comes back, an item's or not (its item columns NULL), to see the crowding.
            rows = yield Query(
                scope,
                f"""SELECT i.namespace, i.item_key, i.value, i.created_at, i.updated_at, i.thread_id, r.rank, r.cosine,
                           r.part_no
                      FROM pgmem.store_pieces_check(%s) AS ok
                      LEFT JOIN (({st.sql}) r
                                 LEFT JOIN pgmem.store_item i ON i.scope_id = %s AND i.thread_id = r.thread_id
                                  AND (i.expires_at IS NULL OR i.expires_at > clock_timestamp())
                                  AND pgmem.store_filter_match(i.value, %s::jsonb)) ON ok""",
                (scope, *st.params, scope, flt),
            )
            hits = [row for row in rows if row[8] is not None]  # the check's row alone: no hit
            items = [row for row in hits if row[5] is not None]
            per_part: dict[int, int] = {}
            for row in hits:
                per_part[int(row[8])] = per_part.get(int(row[8]), 0) + 1
            crowded = (
                len(items) < len(hits)
                and len({row[1] for row in items}) < window
                and any(n >= x for n in per_part.values())
            )
            if not crowded or x >= MAX_RECALL_X:
                return items
            x = min(MAX_RECALL_X, x * 8)

    def _list_items(
        self, namespaces: list[tuple[str, ...]], flt: str | None, limit: int, offset: int
    ) -> Call[list[SearchItem]]:
        rows: list[_ItemRow] = []
        for ns in namespaces:
            scope = namespace_scope(ns)
            found = yield Query(
                scope, "SELECT * FROM pgmem.store_list(%s, %s::jsonb, %s, 0)", (scope, flt, offset + limit)
            )
            rows.extend(_row(r) for r in found)
        # Newest first, ties by namespace and key ascending, as each namespace's rows come
        # (pgmem.store_list): a reverse sort put tied keys descending, and the page taken from
        # each namespace's first offset + limit rows then repeated one item on every page.
        rows.sort(key=lambda r: (r.namespace, r.key))
        rows.sort(key=lambda r: r.updated_at, reverse=True)
        return [
            SearchItem(r.namespace, r.key, r.value, r.created_at, r.updated_at) for r in rows[offset : offset + limit]
        ]

    def _list_namespaces(self, op: ListNamespacesOp) -> Call[list[tuple[str, ...]]]:
        prefix: list[str] | None = None
        suffix: list[str] | None = None
        for cond in op.match_conditions or ():
            if not tuple(cond.path):
                continue  # an empty path matches every namespace (PostgresStore skips it too)
            path = list(check_namespace(tuple(cond.path), what="match condition path"))
            if cond.match_type == "prefix" and prefix is None:
                prefix = path
            elif cond.match_type == "suffix" and suffix is None:
                suffix = path
            else:
                raise InputError(
                    f"match condition {cond.match_type!r:.40}: at most one prefix and one suffix condition"
                )
        rows = yield Query(
            None,
            "SELECT pgmem.store_namespaces(%s, %s, %s, %s, %s, %s)",
            (self.directory, prefix, suffix, op.max_depth, op.limit, op.offset),
        )
        return [tuple(str(x) for x in r[0]) for r in rows]

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

    def _login_may_refresh(self) -> Call[bool]:
        """Whether the store's login may move expiries: a refresh on read is a write, and a
        read-only login (a member of pgmem_reader: a dashboard, someone debugging) reads without
        one instead of failing with 42501 (as PostgresStore does for a login without UPDATE)."""
        if self._may_refresh is None:
            row = yield Query(
                None,
                "SELECT pg_catalog.has_function_privilege('pgmem.refresh_items(text, text[])', 'EXECUTE')",
                one=True,
            )
            self._may_refresh = bool(row and row[0])
        return self._may_refresh

    def _refresh_found(self, found: Sequence[Item], refresh_ttl: bool | None) -> Call[None]:
        if not found or not self._refresh(refresh_ttl) or not (yield from self._login_may_refresh()):
            return
        by_scope: dict[str, list[str]] = {}
        for it in found:
            by_scope.setdefault(namespace_scope(it.namespace), []).append(it.key)
        for scope, keys in sorted(by_scope.items()):
            yield Query(scope, "SELECT pgmem.refresh_items(%s, %s)", (scope, sorted(keys)), wait=False)

    def _sweep_call(self) -> Call[int]:
        """Remove the expired items of every namespace of the directory (`pgmem.expire_items`
        in each namespace's scope); how many went."""
        yield self._directory()
        rows = yield Query(None, "SELECT pgmem.store_namespaces(%s, lim => NULL)", (self.directory,))
        gone = 0
        # One transaction writes every scope: in bytewise order, as a batch writes them (the lock
        # order). The directory lists namespaces label by label, ("a", "x") before ("a!",), while
        # their scopes go "a!" before "a/x": a sweep holding a/x's recall-log lock waited for a!'s,
        # held by a batch that deleted in a! and then waited for a/x's (40P01).
        for scope in sorted({namespace_scope(tuple(str(x) for x in r[0])) for r in rows}):
            n = yield Query(scope, "SELECT pgmem.expire_items(%s)", (scope,), one=True)
            gone += int(n[0]) if n and n[0] is not None else 0
        return gone

    def _sweep_interval(self, sweep_interval_minutes: float | None) -> float:
        interval = sweep_interval_minutes or self._ttl.get("sweep_interval_minutes") or 5
        check_ttl(interval, "sweep_interval_minutes")
        return float(interval)

    # -- writes -------------------------------------------------------------------------------

    def _writes_call(
        self,
        puts: list[PutOp],
        *,
        skip_current: bool = True,
        unless_newer: Mapping[tuple[str, str], datetime] | None = None,
    ) -> Call[dict[tuple[str, str], str]]:
        """The batch's puts and deletes, in (scope, key) order, in the driver's one transaction.
        `unless_newer` ((scope, key) -> time): those puts are conditional (put_item's
        unless_newer_than, an import): an item updated after the time is kept, and a key deleted
        after it stays deleted, with no turn or vectors written for the put; returns the
        (scope, key) of each put not written, with why: "kept" or "deleted".
        Texts are embedded across the whole batch: a field embedder's in one request before any
        row is locked, leaving out (with `skip_current`) the items whose stored vectors are
        already those of their texts (pgmem.store_vectors_current: same paths, texts and model);
        pgmem's through ingest_turns, which skips a turn whose text is unchanged. With field
        vectors no statement after that read is waited for: put_item checks again under the
        item's lock that vectors left out are still current (keep_vectors), and raises 40001 when
        a put committed since changed them; the driver then runs the batch again."""
        yield self._directory()
        fe = self.field_embedder
        texts: dict[tuple[str, str], list[tuple[str, str]]] = {}
        hashes: dict[tuple[str, str], list[bytes]] = {}
        vectors: dict[tuple[str, str], Any] = {}
        current: set[tuple[str, str]] = set()
        if fe is not None:
            for op in puts:
                if op.value is not None and op.index is not False:
                    found = field_texts(op.value, self.fields if op.index is None else op.index)
                    if found:
                        ident = (namespace_scope(op.namespace), op.key)
                        texts[ident] = found
                        hashes[ident] = [text_hash(t) for _, t in found]
            for scope in sorted({s for s, _ in texts}):
                row = yield from self._current_vectors(scope, fe.model_id, texts, hashes)
                if row is not None and row[0] != fe.model_id:
                    raise ModelMismatchError(
                        f"namespace scope {scope!r:.80} is embedded with {row[0]}, not {fe.model_id}: open the store "
                        "with the index config the namespace was written with"
                    )
                if row is not None and skip_current:  # a scope without vectors has none current
                    current |= {(scope, str(k)) for k in row[1]}
            vectors = yield from self._embed_fields(fe, {i: t for i, t in texts.items() if i not in current})
        # Items searched through their turns, by scope: (key, thread, messages).
        searched: dict[str, list[tuple[str, str, list[dict[str, Any]]]]] = {}
        not_written: dict[tuple[str, str], str] = {}
        found_messages = {
            id(op): item_messages(dict(op.value), self.fields if op.index is None else (op.index or []))
            for op in puts
            if op.value is not None and fe is None
        }
        # A scope whose items the batch stores as turns is held FOR SHARE before its first item
        # (bind_scope_model, as put_turns holds it at the end): the lock order's scope row first,
        # in the strongest mode the batch takes it. Asked for only by put_turns, after a delete
        # or a put had locked an item's thread, a model change's flip (the row FOR NO KEY UPDATE,
        # then the threads) waited for that thread while the batch waited for the flip: a
        # deadlock (tests/test_mixed_writers.py). An import's conditional puts, which may write
        # nothing (a scope forgotten since), bind no model ahead.
        bound: set[str] = set()
        turn_scopes = {namespace_scope(op.namespace) for op in puts if found_messages.get(id(op)) and not unless_newer}
        # A batch of several scopes opens them all (their rows created, held FOR KEY SHARE), in
        # order, before it binds a model in any (0075): a bind may register a new model, whose
        # lock is held to the commit, and a batch that then inserted its next scope's row waited
        # for a writer that had inserted that row and waited for the registry (a deadlock).
        put_scopes = sorted({namespace_scope(op.namespace) for op in puts if op.value is not None})
        if turn_scopes and len(put_scopes) > 1:
            for scope in put_scopes:
                yield Query(scope, "SELECT pgmem.open_scope(%s)", (scope,), wait=False)
        for op in puts:
            scope = namespace_scope(op.namespace)
            if scope in turn_scopes and scope not in bound:
                bound.add(scope)
                yield Query(
                    scope,
                    "SELECT pgmem.bind_scope_model(%s, %s, %s, 'piece')",
                    (scope, self.embedder.model_id, self.embedder.dims),
                    wait=False,
                )
            if op.value is None:
                yield Query(scope, "SELECT pgmem.delete_item(%s, %s)", (scope, op.key), wait=False)
                continue
            ident = (scope, op.key)
            value = dict(op.value)
            messages = found_messages.get(id(op), [])
            thread = item_thread(op.key) if messages else None
            since = unless_newer.get(ident) if unless_newer else None
            written = yield Query(
                scope,
                """SELECT written, created_at IS NULL FROM pgmem.put_item(
                       scope => %s, namespace => %s, item_key => %s, value => %s::jsonb, thread => %s,
                       ttl_minutes => %s, model_id => %s, field_paths => %s, text_hashes => %s,
                       keep_vectors => %s, unless_newer_than => %s)""",
                (
                    scope,
                    list(op.namespace),
                    op.key,
                    check_value(value, max_bytes=self.max_value_bytes),
                    thread,
                    self._put_ttl(op.ttl),
                    fe.model_id if fe is not None and ident in texts else None,
                    [p for p, _ in texts[ident]] if ident in texts else None,
                    hashes.get(ident),
                    ident in current or None,
                    since,
                ),
                one=True,
                wait=since is not None,  # only a conditional put's answer is read
            )
            if since is not None and not (written and written[0]):
                not_written[ident] = "deleted" if written and written[1] else "kept"
                continue
            if ident in vectors:
                yield from self._put_vectors(ident, texts[ident], hashes[ident], vectors[ident])
            if thread is not None:
                searched.setdefault(scope, []).append((op.key, thread, messages))
        # An item's turn has the item's time (created_at, kept by a re-put) and the thread
        # put_item gave it (item:<key>, or another when a conversation of the scope holds that
        # name: pgmem._claim_item_thread, 0092): read once a scope. The thread from the item's
        # row, beside store_item_times (whose result columns stay those of every revision, so
        # this package still writes a store at an older schema, and an app's prepared calls
        # survive the migration).
        turns: list[Turn] = []
        for scope, items in searched.items():
            rows = yield Query(
                scope,
                """SELECT t.item_key, t.created_at, i.thread_id FROM pgmem.store_item_times(%s, %s) t
                     JOIN pgmem.store_item i ON i.scope_id = %s AND i.item_key = t.item_key""",
                (scope, [key for key, _, _ in items], scope),
            )
            stored: dict[str, tuple[datetime, str]] = {str(r[0]): (r[1], str(r[2])) for r in rows}
            turns += [
                Turn(scope, stored[key][1], 0, stored[key][0], tuple(m), origin=f"item {key!r:.80}")
                for key, _, m in items
            ]
        if turns:
            # One put_turns call a scope (the batch is one transaction either way).
            report = yield from ingest_turns_call(turns, self.embedder, bulk=True)
            if report.failed:
                errors = [err for _, err in report.failed]
                if all(err.startswith("22000: ") and " from model " in err for err in errors):
                    # The scope stores another model's pieces (a model change moved it): the
                    # error a model refusal is everywhere else, so a service that switches its
                    # embedder on ModelMismatchError switches here too.
                    raise ModelRefusedError("; ".join(e.removeprefix("22000: ") for e in errors[:3]), sqlstate="22000")
                raise InputError("; ".join(errors[:3]))
        return not_written

    def _writes_calls(
        self, puts: list[PutOp], unless_newer: Mapping[tuple[str, str], datetime] | None = None
    ) -> Callable[[], Call[dict[tuple[str, str], str]]]:
        """The batch's write call, a new one for each attempt: the first leaves out of the
        embedding request the items whose vectors it read as current; one run again (it lost a
        race: 40001 when such vectors changed, or a deadlock) embeds every text, so a put that
        changes them again meanwhile cannot make it lose that race again."""
        attempts = itertools.count()
        return lambda: self._writes_call(puts, skip_current=next(attempts) == 0, unless_newer=unless_newer)

    def _current_vectors(
        self,
        scope: str,
        model_id: str,
        texts: Mapping[tuple[str, str], list[tuple[str, str]]],
        hashes: Mapping[tuple[str, str], list[bytes]],
    ) -> Call[tuple[Any, ...] | None]:
        """The model of `scope`'s field vectors (pgmem.store_vector_model; None: none stored yet)
        and, when it is `model_id`, the keys of the items whose stored vectors are already those
        of their texts (the rule is pgmem.item_vectors_current's): one statement, read without
        locks, so put_item decides again."""
        idents = [i for i in texts if i[0] == scope]
        row = yield Query(
            scope,
            """SELECT m.model_id, CASE WHEN m.model_id = %s THEN
                          ARRAY(SELECT k FROM pgmem.store_vectors_current(%s, %s, %s, %s, %s, %s) AS k) END
                 FROM pgmem.store_vector_model(%s) m""",
            (
                model_id,
                scope,
                model_id,
                [k for _, k in idents],
                [len(texts[i]) for i in idents],
                [p for i in idents for p, _ in texts[i]],
                [h for i in idents for h in hashes[i]],
                scope,
            ),
            one=True,
        )
        return None if row is None else tuple(row)

    def _embed_fields(
        self, fe: FieldEmbedder, texts: Mapping[tuple[str, str], list[tuple[str, str]]]
    ) -> Call[dict[tuple[str, str], Any]]:
        """Every text of `texts` in one embedding request; each item's rows of the result."""
        flat = [t for found in texts.values() for _, t in found]
        if not flat:
            return {}
        matrix = yield Embed(fe, flat)
        out: dict[tuple[str, str], Any] = {}
        at = 0
        for ident, found in texts.items():
            out[ident] = matrix[at : at + len(found)]
            at += len(found)
        return out

    def _put_vectors(
        self, ident: tuple[str, str], found: list[tuple[str, str]], hashes: list[bytes], vectors: Any
    ) -> Call[None]:
        fe = self.field_embedder
        assert fe is not None
        scope, key = ident
        yield Query(
            scope,
            "SELECT pgmem.put_item_vectors(%s, %s, %s, %s, %b::vector[], %s)",
            (scope, key, fe.model_id, [p for p, _ in found], list(vectors), hashes),
            wait=False,
        )

    # -- connections --------------------------------------------------------------------------

    def _url(self) -> str:
        conn = self._conn
        if self._conninfo:
            return conninfo_url(self._conninfo)
        if not isinstance(conn, psycopg.Connection | psycopg.AsyncConnection):
            return conninfo_url(str(conn.conninfo))
        info = conn.info
        return conninfo_url(psycopg.conninfo.make_conninfo(**info.get_parameters()), info.password)

    def _setup(self) -> None:
        from pgmem.migrate import upgrade

        try:
            upgrade(self._url())
        except PgmemError:
            raise
        except Exception as exc:
            line = " ".join(str(exc).split())[:300]
            raise SchemaError(
                f"setup() could not migrate ({type(exc).__name__}: {line}); run it as the migrating role "
                "(pgmem_owner or a member), or run `pgmem migrate`"
            ) from None


#: pgvector's types per connection, fetched once (a connection of a pool is reused).
def _fail(call: Call[Any], exc: psycopg.Error) -> PgmemError | psycopg.Error:
    """A statement's error ends the call (the transaction is aborted: no later step could run)."""
    call.close()
    return database_error(exc) if is_refusal(exc) or lost_race(exc) else exc


#: The store directory's setting, transaction-local. No call reads its result (Query.wait false),
#: so the drivers send it (and a step's scope setting) without waiting: in pipeline mode they go
#: with the next statement, in one round trip.
DIRECTORY_SETTING = "SELECT set_config('pgmem.store_directory', %s, true)"
#: What a store call sets for its transaction (set_config(..., true)): read before a call that runs
#: inside the caller's open transaction (a savepoint, which does not end the settings) and put back
#: after it, as pgmem.db.scoped does. Until rt60 the namespace's scope and the directory outlived
#: the call, and the caller's next unscoped query in that transaction read the namespace's items.
_CALL_SETTINGS = "SELECT current_setting('pgmem.scope', true), current_setting('pgmem.store_directory', true)"
_PUT_BACK_SETTINGS = "SELECT set_config('pgmem.scope', %s, true), set_config('pgmem.store_directory', %s, true)"


def _in_pipeline(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a store call on `conn` runs as one pipeline (`_pipelined`): an autocommit
    connection (the store's own, or its pool's) with no transaction open, or one in pipeline
    mode already (the store's `pipeline=True`) with only implicit work pending."""
    return one_round_trip(conn) or (
        conn.autocommit
        and conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
        and conn.info.transaction_status in (psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.ACTIVE)
    )


def _still_open(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a store call's transaction is still open after its pipeline ended: it is then
    rolled back. A connection that was lost, or that psycopg closed because a second
    interruption (Ctrl-C, a task cancelled again) came while it cancelled the query, has no
    transaction left (the server rolled it back): rolling it back raised "the connection is
    closed", which replaced the interruption on its way out."""
    return conn.info.transaction_status in (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)


@contextmanager
def _pipelined(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A store call's transaction in pipeline mode: BEGIN goes with the settings and the first
    statement, COMMIT (or, when the block raises, ROLLBACK) with the pipeline's one Sync, so
    neither is a round trip of its own, nor is a setting; each statement whose result the call
    reads is one. A statement the server refused leaves the transaction aborted at the Sync:
    it is rolled back then. (psycopg's transaction() in a pipeline syncs after BEGIN.)

    The refusal is read with whichever statement follows its arrival: one of the block's, the
    COMMIT, or the Sync ending the pipeline. Read before that Sync, it is `failed` (COMMIT
    too), and the pipeline ends with no exception on its way: psycopg's exit, which reads
    what is left (the rest of the transaction, aborted), raises instead of logging "error
    ignored terminating ...: pipeline aborted", and that error is dropped for the first."""
    failed: BaseException | None = None
    with conn.cursor() as control:
        try:
            try:
                with conn.pipeline():
                    control.execute("BEGIN")
                    try:
                        yield
                        control.execute("COMMIT")
                    except BaseException as exc:
                        failed = exc
                        with contextlib.suppress(psycopg.Error):
                            control.execute("ROLLBACK")
            except psycopg.Error:
                if failed is None:
                    raise
            if failed is not None:
                raise failed
        finally:
            if _still_open(conn):
                conn.rollback()


@asynccontextmanager
async def _apipelined(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """`_pipelined` on an async connection."""
    failed: BaseException | None = None
    async with conn.cursor() as control:
        try:
            try:
                async with conn.pipeline():
                    await control.execute("BEGIN")
                    try:
                        yield
                        await control.execute("COMMIT")
                    except BaseException as exc:
                        failed = exc
                        with contextlib.suppress(psycopg.Error):
                            await control.execute("ROLLBACK")
            except psycopg.Error:
                if failed is None:
                    raise
            if failed is not None:
                raise failed
        finally:
            if _still_open(conn):
                await conn.rollback()


def _drive_sync(conn: psycopg.Connection[Any], call: Call[T], infos: list[TypeInfo], stop: _Stop | None = None) -> T:
    """Drive a store call inside the transaction its caller opened (so all of it commits or
    none): one tuple-row cursor for the statements whose replies the call reads, another for
    those it does not (`Query.wait` false: the settings, writes), never waited for; pgvector's
    types registered on both once; `pgmem.scope` set only when a step's scope differs from the
    last one's. No savepoint per statement: the batch is one transaction anyway, and this
    saves three round trips per step. With `stop` (PgmemStore.abatch's, set when its caller was
    cancelled), the call ends before its next step and before its commit: CanceledError."""
    scope: str | None = None
    reply: object = None
    with conn.cursor(row_factory=tuple_row) as cur, conn.cursor() as unwaited:
        register_types(cur, infos)
        register_types(unwaited, infos)
        while True:
            step = advance(call, reply, None)
            if stop is not None and stop.is_set():
                call.close()
                raise CanceledError("the store call was canceled by its caller; nothing of it was committed")
            if isinstance(step, Finished):
                return step.value
            if isinstance(step, Local):
                reply = step.run()
                continue
            try:
                if step.scope is not None and step.scope != scope:
                    unwaited.execute(SCOPE_LOCAL, (check_name(step.scope, "scope"),))
                    scope = step.scope
                if not step.wait:
                    unwaited.execute(step.sql, step.params, binary=True)
                    reply = None
                    continue
                cur.execute(step.sql, step.params, binary=True)
                reply = cur.fetchone() if step.one else cur.fetchall()
            except psycopg.Error as exc:
                raise _fail(call, exc) from None


async def _drive_async(conn: psycopg.AsyncConnection[Any], call: Call[T], infos: list[TypeInfo]) -> T:
    """`_drive_sync` on an async connection."""
    scope: str | None = None
    reply: object = None
    async with conn.cursor(row_factory=tuple_row) as cur, conn.cursor() as unwaited:
        register_types(cur, infos)
        register_types(unwaited, infos)
        while True:
            step = advance(call, reply, None)
            if isinstance(step, Finished):
                return step.value
            if isinstance(step, Local):
                reply = await aio.local_step(step)
                continue
            try:
                if step.scope is not None and step.scope != scope:
                    await unwaited.execute(SCOPE_LOCAL, (check_name(step.scope, "scope"),))
                    scope = step.scope
                if not step.wait:
                    await unwaited.execute(step.sql, step.params, binary=True)
                    reply = None
                    continue
                await cur.execute(step.sql, step.params, binary=True)
                reply = await cur.fetchone() if step.one else await cur.fetchall()
            except psycopg.Error as exc:
                raise _fail(call, exc) from None


def _driver_error(exc: psycopg.Error) -> PgmemError:
    # A statement not waited for (Query.wait false) fails at COMMIT: the same error as waited.
    if is_refusal(exc) or lost_race(exc):
        return database_error(exc)
    if isinstance(exc, psycopg.DataError):
        return InputError(" ".join(str(exc).split()))
    return DatabaseError.from_driver(exc)


class _Stop:
    """The stop of a PgmemStore.abatch whose caller was cancelled: set, the batch's calls end
    before their next step (`_drive_sync`), and the statement the thread runs now is cancelled
    in the server (psycopg's cancel_safe on its connection, while the call holds it)."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._lock = threading.Lock()
        self.conn: psycopg.Connection[Any] | None = None

    def is_set(self) -> bool:
        return self._set.is_set()

    def set(self) -> None:
        """Set the stop; the server's cancel (a round trip of its own) in a thread of its own, not
        the loop's executor, which the batches being stopped may fill."""
        self._set.set()
        threading.Thread(target=self._cancel, name="pgmem-store-cancel", daemon=True).start()

    def _cancel(self) -> None:
        with self._lock:  # the connection is the call's until _stoppable lets it go
            if self.conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self.conn.cancel_safe(timeout=5)


@contextmanager
def _stoppable(stop: _Stop | None, conn: psycopg.Connection[Any]) -> Iterator[None]:
    """`conn` is the one `stop` cancels in the server while the block runs."""
    if stop is None:
        yield
        return
    if stop.is_set():
        raise CanceledError("the store call was canceled by its caller; nothing of it was committed")
    with stop._lock:
        stop.conn = conn
    try:
        yield
    finally:
        with stop._lock:
            stop.conn = None


class PgmemStore(_StoreLogic, BaseStore):
    """A LangGraph `BaseStore` whose items live in pgmem: the module docstring has the mapping.

    `conn` is a psycopg `Connection` (autocommit, as PostgresStore's; any row factory) or a
    `psycopg_pool.ConnectionPool`. One connection serves one batch at a time (a lock); a pool
    serves concurrent batches. `index` is PostgresStore's index config: `fields` (LangGraph's
    path syntax; default `["$"]`) and, with `embed` (a LangChain `Embeddings`, a function or a
    `"provider:model"` string), `dims` and `distance_type`, PostgresStore's field vectors and
    scores; without `embed`, pgmem's own pieces and recall with `embedder` (default: the local
    MiniLM model, the `[local]` extra). `directory` names the namespace directory that
    `list_namespaces` and prefix searches read and puts write (default `"default"`)."""

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
        self._configure(
            embedder=embedder, index=index, x=x, floor=floor, mode=mode, max_value_bytes=max_value_bytes,
            max_search_namespaces=max_search_namespaces, directory=directory, ttl=ttl,
        )  # fmt: skip
        if self.field_embedder is not None and self.field_embedder.async_only:
            raise ConfigError("index embed is an async function: use AsyncPgmemStore, or give a sync one")
        if isinstance(conn, psycopg.AsyncConnection) or type(conn).__name__ == "AsyncConnectionPool":
            raise ConfigError(
                f"PgmemStore takes a Connection or ConnectionPool; for a {type(conn).__name__} use AsyncPgmemStore"
            )
        self._conn = conn
        self._conninfo = conninfo
        self._is_pool = not isinstance(conn, psycopg.Connection)
        self._sweeper: threading.Thread | None = None
        self._sweep_stop = threading.Event()
        self._sweep_done: concurrent.futures.Future[None] | None = None

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        pool_config: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Iterator[PgmemStore]:
        """A store on a new autocommit connection (in pipeline mode with `pipeline=True`), or,
        with `pool_config`, a `psycopg_pool.ConnectionPool` (`min_size`, `max_size` and the
        pool's other arguments), closed on leaving the block. Other keyword arguments are
        PgmemStore's (`index`, `ttl`, ...)."""
        if pool_config is not None:
            pool_mod = require("psycopg_pool", "langgraph", "PgmemStore with a pool")
            pc = dict(pool_config)
            kwargs = {"autocommit": True, **(pc.pop("kwargs", None) or {})}
            with (
                pool_mod.ConnectionPool(
                    conn_string, min_size=pc.pop("min_size", 1), max_size=pc.pop("max_size", None), kwargs=kwargs, **pc
                ) as pool,
                _sweeper_stopped(cls(pool, conninfo=conn_string, **options)) as store,
            ):
                yield store
        else:
            with psycopg.connect(conn_string, autocommit=True) as conn:
                if pipeline:
                    with conn.pipeline(), _sweeper_stopped(cls(conn, conninfo=conn_string, **options)) as store:
                        yield store
                else:
                    with _sweeper_stopped(cls(conn, conninfo=conn_string, **options)) as store:
                        yield store

    def setup(self) -> None:
        """Run pgmem's migrations (`pgmem.migrate.upgrade`) on the store's database: a no-op for
        any login at head (where a migrating login applies this package's re-runnable definitions
        again if another pgmem applied them); below head it needs the migrating role (pgmem_owner
        or a member)."""
        self._setup()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._is_pool:
            with self._conn.connection() as conn:
                yield conn
        else:
            with connection_lock(self._conn):  # shared with pgmem's calls on it
                yield self._conn

    def _run(self, make: Callable[[], Call[T]], stop: _Stop | None = None) -> T:
        """Drive a call in one transaction of one connection, run again whole (a new call) when
        it loses a race with a concurrent writer (a deadlock rolls it back whole). `stop`: see
        `abatch`."""
        attempt = 1
        while True:
            try:
                with self._connection() as conn, _stoppable(stop, conn):
                    check_usable(conn)
                    if _in_pipeline(conn):
                        infos = type_infos(conn)  # before the pipeline: fetching them waits
                        with _pipelined(conn):
                            return _drive_sync(conn, make(), infos, stop)
                    nested = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
                    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                        prior = cur.execute(_CALL_SETTINGS).fetchone() if nested else None
                        result = _drive_sync(conn, make(), type_infos(conn), stop)
                        if prior is not None:
                            cur.execute(_PUT_BACK_SETTINGS, (prior[0] or "", prior[1] or ""))
                        return result
            except ConflictError:
                if attempt >= RETRY_ATTEMPTS:
                    raise
            except psycopg.Error as exc:
                if not lost_race(exc) or attempt >= RETRY_ATTEMPTS:
                    raise _driver_error(exc) from None
            time.sleep(retry_delay(attempt))
            attempt += 1

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops`: reads first (get, search, list_namespaces, in one transaction), then every
        put and delete in one transaction (all stored, or none when one fails). Every op is
        checked before anything runs."""
        return self._batch(ops)

    def _batch(self, ops: Iterable[Op], stop: _Stop | None = None) -> list[Result]:
        ops, reads, writes = self._plan(ops)
        # A batch of puts and deletes only opens no read transaction (two round trips a put).
        results: list[Result] = self._run(lambda: self._reads_call(ops), stop) if reads else [None] * len(ops)
        if writes:
            self._run(self._writes_calls(writes), stop)
        return results

    def _put_unless_newer(self, puts: Sequence[tuple[PutOp, datetime | None]]) -> list[str]:
        """Puts in one transaction, as `batch` writes them, each one conditional on its time
        (None: none): an item updated after it is kept, and a key deleted after it stays deleted
        (put_item's unless_newer_than, decided under the item's lock, so a put or a delete
        committed since the caller read the item is never undone). For each put "written",
        "kept" or "deleted". For `import_postgres_store`: one op a key."""
        ops, _, writes = self._plan([op for op, _ in puts])
        if len(writes) != len(ops) or any(not isinstance(op, PutOp) or op.value is None for op in ops):
            raise InputError("conditional puts take one put (not a delete) a key")
        since = {(namespace_scope(op.namespace), op.key): t for op, t in puts if t is not None}
        skipped = self._run(self._writes_calls(writes, since))
        return [skipped.get((namespace_scope(op.namespace), op.key), "written") for op, _ in puts]

    def _note_namespaces(self, namespaces: Iterable[tuple[str, ...]]) -> None:
        """List `namespaces` in the store's directory where their items are stored already (by a
        store of another directory), in one transaction and writing no item
        (pgmem.note_store_namespace). For `import_postgres_store`, which finds such items
        unchanged or kept and writes nothing."""
        scopes = sorted({namespace_scope(ns) for ns in namespaces})
        if scopes:
            self._run(lambda: self._note_call(scopes))

    def _note_call(self, scopes: list[str]) -> Call[None]:
        yield self._directory()
        for scope in scopes:  # in scope order, as writes take their locks
            yield Query(scope, "SELECT pgmem.note_store_namespace(%s)", (scope,), wait=False)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` in a worker thread (for the async API on a sync connection: AsyncPgmemStore
        runs the same calls on an async one). Cancelled, it stops the batch (before its next step
        or its commit; a statement in progress is cancelled in the server) and waits for the
        thread before the cancellation goes on, so the batch wrote all or nothing by then. (A
        thread left running, as PostgresStore's is, wrote the value of an `aput` cancelled while
        its text was embedded afterwards, over a put made since.)"""
        ops = self._plan(ops)[0]  # a bad op (or no list of ops) is one line here, as in `batch`
        stop = _Stop()
        running = asyncio.get_running_loop().run_in_executor(None, self._batch, ops, stop)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            stop.set()
            # Cancelled again meanwhile: no more waiting (the batch still stops at its next step).
            with contextlib.suppress(Exception):
                await asyncio.shield(running)
            raise

    def sweep_ttl(self) -> int:
        """Remove the expired items of every namespace of the store's directory now; how many went."""
        return self._run(self._sweep_call)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Sweep expired items every `sweep_interval_minutes` (the ttl config's, default 5) in a
        daemon thread until `stop_ttl_sweeper`, or until the returned Future is cancelled (as
        PostgresStore's); the Future resolves when the sweeper stops. While a sweeper runs, its
        Future is returned; while one is stopping (a stop that timed out), a new one starts."""
        interval = self._sweep_interval(sweep_interval_minutes)
        running, done = self._sweeper, self._sweep_done
        if running is not None and running.is_alive() and done is not None and not self._sweep_stop.is_set():
            return done
        # Each sweeper its own stop event and Future (rt58): a start after a stop that timed out
        # returned the stopping sweeper's, which then ended, and no sweeper ran; a cancelled
        # Future left its sweeper sweeping, whose end then failed in its thread (InvalidStateError).
        stop = self._sweep_stop = threading.Event()
        done = self._sweep_done = concurrent.futures.Future()
        done.add_done_callback(lambda f: stop.set() if f.cancelled() else None)

        def loop() -> None:
            try:
                while not stop.wait(interval * 60):
                    try:
                        self.sweep_ttl()
                    except (PgmemError, psycopg.Error):
                        continue  # the next sweep tries again; reads never see expired items anyway
            except Exception as exc:  # for the Future's holder, not a traceback of the thread
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    done.set_exception(exc)
            else:
                with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled: stopped
                    done.set_result(None)

        self._sweeper = threading.Thread(target=loop, name="pgmem-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True once it has stopped (or none was running)."""
        sweeper = self._sweeper
        if sweeper is None:
            return True
        self._sweep_stop.set()
        sweeper.join(timeout)
        stopped = not sweeper.is_alive()
        if stopped and self._sweeper is sweeper:
            self._sweeper = None
        return stopped


class AsyncPgmemStore(_StoreLogic, AsyncBatchedBaseStore):
    """PgmemStore over a psycopg `AsyncConnection` or `psycopg_pool.AsyncConnectionPool`, with
    AsyncPostgresStore's constructors and methods (`aput`, `aget`, `asearch`, `adelete`,
    `alist_namespaces`, `abatch`, async `setup`, `sweep_ttl`, `start_ttl_sweeper`,
    `stop_ttl_sweeper`): the same calls as PgmemStore, driven by pgmem.aio. Concurrent `aput`
    and `aget` calls are gathered into one batch (LangGraph's AsyncBatchedBaseStore). The sync
    methods work from other threads; in the event loop's own thread they raise
    `asyncio.InvalidStateError`, as AsyncPostgresStore's do. Construct it inside a running loop."""

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
        super().__init__()  # first: LangGraph's batching task, which __del__ cancels even when this raises
        self._configure(
            embedder=embedder, index=index, x=x, floor=floor, mode=mode, max_value_bytes=max_value_bytes,
            max_search_namespaces=max_search_namespaces, directory=directory, ttl=ttl,
        )  # fmt: skip
        if isinstance(conn, psycopg.Connection) or type(conn).__name__ == "ConnectionPool":
            raise ConfigError(
                "AsyncPgmemStore takes an AsyncConnection or AsyncConnectionPool; "
                f"for a {type(conn).__name__} use PgmemStore"
            )
        self._conn = conn
        self._conninfo = conninfo
        self._is_pool = not isinstance(conn, psycopg.AsyncConnection)
        self._sweeper_task: asyncio.Task[None] | None = None
        self._sweep_stop = asyncio.Event()

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        pool_config: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AsyncIterator[AsyncPgmemStore]:
        """A store on a new autocommit `AsyncConnection` (in pipeline mode with `pipeline=True`),
        or, with `pool_config`, an `AsyncConnectionPool`, closed on leaving the block."""
        if pool_config is not None:
            pool_mod = require("psycopg_pool", "langgraph", "AsyncPgmemStore with a pool")
            pc = dict(pool_config)
            kwargs = {"autocommit": True, **(pc.pop("kwargs", None) or {})}
            async with pool_mod.AsyncConnectionPool(
                conn_string, min_size=pc.pop("min_size", 1), max_size=pc.pop("max_size", None), kwargs=kwargs,
                open=False, **pc,
            ) as pool, cls(pool, conninfo=conn_string, **options) as store:  # fmt: skip
                yield store
        else:
            async with await psycopg.AsyncConnection.connect(conn_string, autocommit=True) as conn:
                if pipeline:
                    async with conn.pipeline(), cls(conn, conninfo=conn_string, **options) as store:
                        yield store
                else:
                    async with cls(conn, conninfo=conn_string, **options) as store:
                        yield store

    async def __aenter__(self) -> AsyncPgmemStore:
        """`async with AsyncPgmemStore(conn) as store:`, as AsyncPostgresStore is used (until rt68 a
        TypeError: the object does not support the asynchronous context manager protocol)."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Tells the TTL sweeper to stop (without waiting for it), as AsyncPostgresStore's exit does;
        `from_conn_string`'s block ends so too, before its connection or pool is closed."""
        self._sweep_stop.set()

    async def setup(self) -> None:
        """`PgmemStore.setup` in a worker thread (alembic is synchronous)."""
        await asyncio.to_thread(self._setup)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._is_pool:
            async with self._conn.connection() as conn:
                yield conn
        else:
            async with aio.connection_lock(self._conn):  # shared with pgmem.aio's calls on it
                yield self._conn

    async def _arun(self, make: Callable[[], Call[T]]) -> T:
        attempt = 1
        while True:
            try:
                async with self._connection() as conn:
                    check_usable(conn)
                    if _in_pipeline(conn):
                        infos = await aio.type_infos(conn)  # before the pipeline: fetching them waits
                        async with _apipelined(conn):
                            return await _drive_async(conn, make(), infos)
                    nested = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
                    async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                        prior = await (await cur.execute(_CALL_SETTINGS)).fetchone() if nested else None
                        result = await _drive_async(conn, make(), await aio.type_infos(conn))
                        if prior is not None:
                            await cur.execute(_PUT_BACK_SETTINGS, (prior[0] or "", prior[1] or ""))
                        return result
            except ConflictError:
                if attempt >= RETRY_ATTEMPTS:
                    raise
            except psycopg.Error as exc:
                if not lost_race(exc) or attempt >= RETRY_ATTEMPTS:
                    raise _driver_error(exc) from None
            await asyncio.sleep(retry_delay(attempt))
            attempt += 1

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """PgmemStore.batch's calls on the async connection or pool."""
        if asyncio.current_task() is getattr(self, "_task", None):
            return await self._gathered(list(ops))
        return await self._abatch(ops)

    async def _abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops, reads, writes = self._plan(ops)
        results: list[Result] = await self._arun(lambda: self._reads_call(ops)) if reads else [None] * len(ops)
        if writes:
            await self._arun(self._writes_calls(writes))
        return results

    async def _gathered(self, ops: list[Op]) -> list[Result]:
        """The single calls (aget, aput, ...) of concurrent callers, which LangGraph's batching task
        gathers into one abatch: a refusal of one caller's op is that caller's alone, as it is in
        PgmemStore, where each call is a batch of its own. Until rt68 every op gathered with a
        refused one failed with its error, an aput of another coroutine not stored (one node of a
        graph putting a value with a NUL lost its sibling nodes' puts). Each op is checked alone,
        the others run as one batch, and, when the database or the model refuses that batch
        (nothing of it written: its writes are one transaction), each of them again alone. A
        refused op's result is `_Refused`, which its call raises."""
        results: list[Result | _Refused] = [None] * len(ops)
        ready: list[int] = []
        for i, op in enumerate(ops):
            try:
                self._plan([op])
                ready.append(i)
            except PgmemError as exc:
                results[i] = _Refused(exc)
        try:
            for i, result in zip(ready, await self._abatch([ops[i] for i in ready]), strict=True):
                results[i] = result
            return results  # type: ignore[return-value]  # _Refused: raised by the store's own a-methods
        except (ConflictError, CanceledError):
            raise  # the batch lost a race or was canceled: no op's refusal, nothing to run alone
        except PgmemError as exc:
            if len(ready) == 1:
                results[ready[0]] = _Refused(exc)
                return results  # type: ignore[return-value]
        for i in ready:
            try:
                results[i] = (await self._abatch([ops[i]]))[0]
            except PgmemError as exc:
                results[i] = _Refused(exc)
        return results  # type: ignore[return-value]

    # LangGraph's single calls, gathered into one abatch (see _gathered), each raising its own refusal.
    # A key is str(key), as BaseStore's get, put and delete (PgmemStore's) take it: an integer key
    # was stored by PgmemStore and refused by AsyncPgmemStore ("key must be a string, got int").

    async def aget(self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        return _refused(await super().aget(namespace, str(key), refresh_ttl=refresh_ttl))

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        found = await super().asearch(
            namespace_prefix, query=query, filter=filter, limit=limit, offset=offset, refresh_ttl=refresh_ttl
        )
        return _refused(found)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        put: Callable[..., Awaitable[object]] = super().aput  # resolves to None, or to a _Refused
        _refused(await put(namespace, str(key), value, index, ttl=ttl))

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        delete: Callable[..., Awaitable[object]] = super().adelete
        _refused(await delete(namespace, str(key)))

    async def alist_namespaces(
        self,
        *,
        prefix: NamespacePath | None = None,
        suffix: NamespacePath | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        found = await super().alist_namespaces(
            prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
        )
        return _refused(found)

    async def sweep_ttl(self) -> int:
        """Remove the expired items of every namespace of the store's directory now; how many went."""
        return await self._arun(self._sweep_call)

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep every `sweep_interval_minutes` (the ttl config's, default 5) in a task of the
        store's loop until `stop_ttl_sweeper`; returns the task."""
        interval = self._sweep_interval(sweep_interval_minutes)
        if self._sweeper_task is not None and not self._sweeper_task.done() and not self._sweep_stop.is_set():
            return self._sweeper_task
        # Each task its own stop event (rt58): a start after a stop that timed out returned the
        # stopping task, which then ended, and no sweeper ran.
        stop = self._sweep_stop = asyncio.Event()

        async def loop() -> None:
            while True:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=interval * 60)
                    return
                except TimeoutError:
                    pass
                try:
                    await self.sweep_ttl()
                except (PgmemError, psycopg.Error):
                    continue  # the next sweep tries again; reads never see expired items anyway

        self._sweeper_task = asyncio.get_running_loop().create_task(loop(), name="pgmem-ttl-sweeper")
        return self._sweeper_task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; True once it has stopped (or none was running)."""
        task = self._sweeper_task
        if task is None or task.done():
            self._sweeper_task = None
            return True
        self._sweep_stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            return False
        if self._sweeper_task is task:
            self._sweeper_task = None
        return True


@dataclass(frozen=True)
class _Refused:
    """The result of an op gathered with other callers' ops that the store refused (see
    AsyncPgmemStore._gathered): the op's own call raises the error."""

    error: PgmemError


def _refused(result: T) -> T:
    """`result`, or the refusal it stands for raised (see _Refused)."""
    if isinstance(result, _Refused):
        raise result.error
    return result


@contextmanager
def _sweeper_stopped(store: PgmemStore) -> Iterator[PgmemStore]:
    """`store`, whose TTL sweeper is told to stop (without waiting for it) when the block ends:
    `from_conn_string` closes the connection or pool then. Until rt68 the sweeper thread lived on,
    failing every sweep on the closed connection, and kept the store from being collected."""
    try:
        yield store
    finally:
        store._sweep_stop.set()


def _not_provided(v: object) -> bool:
    return type(v).__name__ == "NotProvided"


def _check_ttl_config(ttl: object) -> dict[str, Any]:
    if ttl is None:
        return {}
    if not isinstance(ttl, Mapping):
        raise ConfigError(
            f"ttl must be a dict (default_ttl, refresh_on_read, sweep_interval_minutes), got {type(ttl).__name__}"
        )
    known = ("default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired")
    unknown = sorted(str(k) for k in ttl if k not in known)
    if unknown:
        raise ConfigError(f"ttl: unknown setting {unknown[0]!r:.40}; known: {', '.join(known)}")
    # LangGraph's TTLConfig key: pgmem never returns an expired item, which is omit_expired=True.
    if ttl.get("omit_expired", True) is not True:
        raise ConfigError("ttl omit_expired: pgmem never returns an expired item; only True (the default) is supported")
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
        scope = namespace_scope(op.namespace)
        check_key(op.key)
        if op.value is not None:
            size = len(scope.encode("utf-8")) + len(op.key.encode("utf-8"))
            if size > MAX_KEY_INDEX_BYTES:
                raise InputError(
                    f"{where}: key and namespace are {size:,} bytes as UTF-8; at most {MAX_KEY_INDEX_BYTES:,} "
                    "(an item's index entry holds both)"
                )
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
        if md is not None and (not isinstance(md, int) or isinstance(md, bool) or not 1 <= md <= MAX_INT4):
            raise InputError(f"{where}: max_depth must be an integer from 1 to {MAX_INT4:,} or None, got {md!r:.40}")
        for name, n in (("limit", op.limit), ("offset", op.offset)):
            if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_INT4:
                raise InputError(f"{where}: {name} must be an integer from 0 to {MAX_INT4:,}, got {n!r:.40}")
        conds = op.match_conditions or ()
        if not isinstance(conds, tuple | list):
            raise InputError(f"{where}: match_conditions must be a tuple of MatchCondition, got {type(conds).__name__}")
        for cond in conds:
            if getattr(cond, "match_type", None) not in ("prefix", "suffix"):
                raise InputError(f"{where}: match_type must be 'prefix' or 'suffix'")
            # A path that is no sequence of labels (None, a number) was a TypeError from deep in
            # the read ("'NoneType' object is not iterable"); its labels are checked here too.
            path = getattr(cond, "path", None)
            if not isinstance(path, tuple | list | str):
                raise InputError(f"{where}: match condition path must be a tuple of strings, got {type(path).__name__}")
            check_namespace(tuple(path), what=f"{where}: match condition path", allow_empty=True)
    else:
        raise InputError(f"{where}: not a store operation: {type(op).__name__}")


__all__ = ["AsyncPgmemStore", "FieldEmbedder", "PgmemStore", "item_thread", "namespace_scope"]
