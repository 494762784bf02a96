"""Query side: split the message, embed parts + whole message in one request, search a
message whose parts are all one subject as the whole message (models that have a measured
`subject_cosine`), blend each part with the whole message, and let one SQL call return a
group per part."""

from __future__ import annotations

import functools
import json
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime

import numpy as np

from pgmem.blend import DEFAULT_WEIGHT, F32, blend
from pgmem.calls import Call, Embed, Query, Work, sync
from pgmem.dates import message_window
from pgmem.embedders.base import Embedder, embed_side
from pgmem.errors import InputError
from pgmem.splitting import SplitRules, cap_bytes_keep_end, split_prompt_chunks
from pgmem.text import as_float, check_bool, check_int, check_json_text, check_name, check_number, check_text

#: Whole-message cap (seed 000): 8,000 bytes, keeping the end. Each part's embedding input is
#: capped the same way, and so is its word-search text in SQL (pgmem.word_query), so a part of
#: any length is searched by the same text on both sides of hybrid recall.
WHOLE_MESSAGE_BYTES = 8000
#: The most a logged recall's message, and its part texts together, may hold (pgmem.log_recall's
#: rule, checked here first): the bound the MCP server puts on a query.
MAX_LOGGED_BYTES = 100_000
#: Raw cosine floor for blended MiniLM pieces, from the sweep (docs/evaluation.md, section 7):
#: at 0.2 a part keeps 99.2% of its gold hits when it shares a message with other subjects
#: and a long paragraph (92.3% at 0.3), top-1 is unchanged, and 42.5% of parts with nothing
#: related in memory still return weak hits (20% at 0.3). Missing a memory is the failure
#: pgmem exists to fix, so the floor sits under the motivating case, as in the seed (the
#: dog-names piece of examples/ scores 0.254 here). A per-model setting.
DEFAULT_FLOOR = 0.2
#: Fact plane floor (seed 000: cosine >= 0.35 with text-embedding-3 at 1,024-d).
DEFAULT_FACT_FLOOR = 0.35
DEFAULT_X = 5
MODES = ("vector", "hybrid")
#: Word search fused with vector search (reciprocal rank) inside each part's group. Chosen by
#: measurement (docs/evaluation.md): toolqa top-1 message 50.6% vs 46.9% vector-only;
#: LongMemEval oracle sample MRR 0.711 vs 0.694, recall@5 87.8% vs 83.9%, top-1 equal.
DEFAULT_MODE = "hybrid"


@dataclass(frozen=True)
class Hit:
    rank: int
    piece_id: int
    thread_id: str | None
    turn_index: int | None
    label: str
    body: str
    cosine: float
    score: float
    word_rank: int | None = None


@dataclass
class Group:
    part_no: int
    part_text: str
    hits: list[Hit] = field(default_factory=list)


@dataclass
class Recall:
    message: str
    groups: list[Group]
    recall_id: int | None = None
    #: Why no group holds a hit (pgmem.empty_recall_reason), None when one does: "scope_empty"
    #: (the scope holds no memory: often a misspelt scope), "thread_empty" (no turn of the
    #: thread), "filter_empty" (no turn's metadata contains the filter), "bounds_empty" (no
    #: turn's time is within since / until) or "below_floor".
    empty_reason: str | None = None
    #: The reason in words, for people.
    empty_message: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "message": self.message,
            "recall_id": self.recall_id,
            "empty_reason": self.empty_reason,
            "empty_message": self.empty_message,
            "groups": [asdict(g) for g in self.groups],
        }

    @property
    def nothing_searched(self) -> bool:
        """Nothing was there to search (no memory in the scope, no turn of the thread, none
        matching the filter, none within since / until): not a question of the floor."""
        return self.empty_reason in ("scope_empty", "thread_empty", "filter_empty", "bounds_empty")


@dataclass(frozen=True)
class QueryParts:
    texts: list[str]
    raw: F32  # one row per part
    whole: F32  # the capped whole message
    blended: F32  # one row per part: blend(part, whole)


def embed_query(
    message: str,
    embedder: Embedder,
    *,
    rules: SplitRules = SplitRules(),
    weight: float = DEFAULT_WEIGHT,
    whole_bytes: int = WHOLE_MESSAGE_BYTES,
    merge: bool = True,
) -> QueryParts:
    """Split `message` and embed its parts plus the whole message in one request (on the
    query side of a model that has one); a message that is all one subject becomes one part
    (`merge_subjects`, with the model's `subject_cosine_for`; `merge=False`: every part alone)."""
    parts, inputs = query_inputs(message, rules=rules, whole_bytes=whole_bytes)
    vectors = embed_side(embedder, inputs, "query")
    return blend_query(parts, vectors, weight, subject_cosine_for(embedder) if merge else None)


def query_inputs(
    message: str, *, rules: SplitRules = SplitRules(), whole_bytes: int = WHOLE_MESSAGE_BYTES
) -> tuple[list[str], list[str]]:
    """The parts of `message`, and the texts to embed: each part, then the whole message
    (capped at `whole_bytes`, keeping the end)."""
    check_text(message, "message")
    parts = split_prompt_chunks(message, rules)
    if not parts:
        raise InputError("message is empty (or only whitespace): nothing to recall")
    whole = cap_bytes_keep_end(" ".join(message.split()), whole_bytes)
    return parts, [cap_bytes_keep_end(p, whole_bytes) for p in parts] + [whole]


def blend_query(parts: list[str], vectors: F32, weight: float, subject_cosine: float | None = None) -> QueryParts:
    """Each part's query vector: blend(part, whole message); the whole message is the last row.
    With a `subject_cosine`, a message that is all one subject becomes one part (`merge_subjects`)."""
    raw, whole_vec = vectors[:-1], vectors[-1]
    blended = blend(raw, np.broadcast_to(whole_vec, raw.shape).copy(), weight)
    q = QueryParts(parts, raw, whole_vec, blended)
    return q if subject_cosine is None else merge_subjects(q, subject_cosine)


def blended_query_call(
    scope: str | None, parts: list[str], vectors: F32, model_id: str, weight: float = DEFAULT_WEIGHT
) -> Call[QueryParts]:
    """`blend_query` at the model's subject cosine from the registry (`pgmem.model_settings`),
    read only for a message of two parts or more: one part has nothing to merge with, so a
    one-part recall is one round trip."""
    subject = None
    if len(parts) > 1:
        row = yield Query(scope, "SELECT subject_cosine FROM pgmem.model_settings(%s)", (model_id,), one=True)
        subject = None if row is None or row[0] is None else float(str(row[0]))
    return blend_query(parts, vectors, weight, subject)


def merge_subjects(q: QueryParts, threshold: float) -> QueryParts:
    """A message that is one subject is searched as one query: when every two of its parts'
    raw vectors have a cosine of at least `threshold`, the parts become one part, the whole
    message (its text the parts' texts joined, its vector the whole-message vector:
    blend(whole, whole) is the whole message). Any other message keeps every part, so each of
    its subjects keeps its own group. No text is embedded again."""
    if len(q.texts) < 2:
        return q
    unit = q.raw / np.maximum(np.linalg.norm(q.raw, axis=1, keepdims=True), 1e-12)
    return q if float((unit @ unit.T).min()) < threshold else whole_query(q)


def whole_query(q: QueryParts) -> QueryParts:
    """`q` as one part, the whole message: its text the parts' texts joined, its vector the
    whole-message vector (blend(whole, whole) is the whole message itself)."""
    whole = q.whole[None, :]
    return QueryParts([" ".join(q.texts)], whole, q.whole, whole)


def subject_cosine_for(embedder: Embedder) -> float | None:
    """The raw cosine at which two query parts count as one subject, for the evaluation suites
    that split messages without a database: the model's own `subject_cosine` (MiniLM: 0.25,
    `pgmem.embedders.local.SUBJECT_COSINE`), else None and every part is searched alone. The
    recall path reads the registry's value instead (`pgmem.model_settings`, seeded with these;
    tests/test_model_settings.py keeps them equal)."""
    c = getattr(embedder, "subject_cosine", None)
    return float(c) if isinstance(c, float | int) and not isinstance(c, bool) and -1 <= c <= 1 else None


def check_target(scope: object, thread: object = None) -> None:
    """The scope (and thread filter, if any) of a search: storable names, else an InputError."""
    check_name(scope, "scope")
    if thread is not None:
        check_name(thread, "thread")


def check_parts(part_texts: object, model_id: object = None) -> list[str]:
    """A search's part texts as a list of text (a single string was searched as one part a
    character) and the model that embedded them as text or None (another type reached SQL as no
    text, and the caller was told "function pgmem.memory_recall(...) does not exist")."""
    if isinstance(part_texts, str | bytes) or not isinstance(part_texts, Iterable):
        raise InputError(f"part_texts must be a list of strings, one a part, got {type(part_texts).__name__}")
    texts = list(part_texts)
    for i, t in enumerate(texts):
        check_text(t, f"part_texts[{i}]")
    if model_id is not None:
        check_text(model_id, "model_id")
    return texts


def floor_for(embedder: Embedder) -> float:
    """The model's recall floor, for the evaluation suites: its own `default_floor` (e5:
    measured, `pgmem.embedders.e5.DEFAULT_FLOOR`), else DEFAULT_FLOOR, measured on MiniLM.
    Cosine scales differ by model (unrelated texts: MiniLM 0.0-0.3, e5-small 0.7-0.8). The
    recall functions take the registry's floor when given none (`pgmem.model_settings`)."""
    f = getattr(embedder, "default_floor", None)
    return float(f) if isinstance(f, float | int) and not isinstance(f, bool) else DEFAULT_FLOOR


def _check(x: object, floor: object, mode: object) -> tuple[int, float | None]:
    """x and floor as the SQL call takes them (numpy's numbers too), else an InputError."""
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r:.80}")
    return check_int(x, "x", 1, 1000), None if floor is None else check_number(floor, "floor (a raw cosine)", -1, 1)


def check_message_args(weight: object, rules: object) -> float:
    """The blend weight (in [0, 1], as a float) and split rules of a search by message, else an
    InputError; recall and fact recall share them."""
    if not isinstance(rules, SplitRules):
        raise InputError(f"rules must be a SplitRules, got {type(rules).__name__}")
    return check_number(weight, "weight", 0, 1)


@dataclass(frozen=True)
class RecallStatement:
    """One `pgmem.memory_recall` call as SQL and its parameters, every argument checked: the
    statement `recall_vectors_call` runs, and the one the LangGraph store reads its items
    beside. `filter_json` and `times` are what a log and an empty answer's reason repeat."""

    sql: str
    params: tuple[object, ...]
    vectors: list[F32]
    x: int
    floor: float | None
    filter_json: str | None
    times: dict[str, object]


#: The columns of a hit, in the order `recall_vectors_call` reads them.
HIT_COLUMNS = "part_no, rank, piece_id, thread_id, turn_index, label, body, cosine, score, word_rank"


def check_logged(message: str, part_texts: Sequence[str] = ()) -> None:
    """A recall to be logged: a message of at most MAX_LOGGED_BYTES, and part texts of at most
    that together (pgmem.log_recall's rule), else an InputError before anything runs."""
    if (n := len(message.encode("utf-8"))) > MAX_LOGGED_BYTES:
        raise InputError(f"message is {n} bytes; at most {MAX_LOGGED_BYTES:,} in a logged recall")
    if (n := sum(len(t.encode("utf-8")) for t in part_texts)) > MAX_LOGGED_BYTES:
        raise InputError(f"part_texts are {n} bytes together; at most {MAX_LOGGED_BYTES:,} in a logged recall")


def recall_statement(
    scope: str,
    part_texts: Sequence[str],
    part_vectors: F32,
    *,
    x: int = DEFAULT_X,
    floor: float | None = None,
    thread: str | None = None,
    mode: str = DEFAULT_MODE,
    message: str = "",
    model_id: str | None = None,
    metadata_filter: Mapping[str, object] | None = None,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
    recency: float | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> RecallStatement:
    """The `pgmem.memory_recall` call of `recall_vectors_call`'s arguments (InputError, one
    line, for a bad one: SQL checks the rest)."""
    x, floor = _check(x, floor, mode)
    times = _time_args(time_from=time_from, time_to=time_to, since=since, until=until)
    if recency is not None:  # its range is SQL's rule (check_recall_args)
        if isinstance(recency, bool) or not isinstance(recency, numbers.Real):
            raise InputError(f"recency must be a number, got {type(recency).__name__}")
        times["recency"] = as_float(recency)
    check_target(scope, thread)
    part_texts = check_parts(part_texts, model_id)
    check_text(message, "message")
    part_vectors = _vector_rows(part_vectors)
    filter_json = _filter_json(metadata_filter)
    # The filter and the time arguments are named only when given, so the call also runs on
    # schemas without them.
    filter_arg = ", metadata_filter => %s::jsonb" if filter_json is not None else ""
    filter_arg += "".join(f", {k} => %s" for k in times)
    sql = f"""SELECT {HIT_COLUMNS}
              FROM pgmem.memory_recall(scope => %s, part_vectors => %b::vector[], part_texts => %s,
                                       x => %s, floor => %s, thread => %s, mode => %s, model_id => %s{filter_arg})"""
    vectors = list(part_vectors)
    params = (
        scope,
        vectors,
        list(part_texts),
        x,
        floor,
        thread,
        mode,
        model_id,
        *([filter_json] if filter_json is not None else []),
        *times.values(),
    )
    return RecallStatement(sql, params, vectors, x, floor, filter_json, times)


def recall_vectors_call(
    scope: str,
    part_texts: Sequence[str],
    part_vectors: F32,
    *,
    x: int = DEFAULT_X,
    floor: float | None = None,
    thread: str | None = None,
    mode: str = DEFAULT_MODE,
    message: str = "",
    log: bool = False,
    model_id: str | None = None,
    metadata_filter: Mapping[str, object] | None = None,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
    recency: float | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Call[Recall]:
    """One `pgmem.memory_recall` call for all parts (vectors already blended). `model_id`, the
    model that embedded the parts, must be the model of the scope's pieces (ModelMismatchError).
    Without a `floor`, the model's (`pgmem.model_settings`).
    `metadata_filter` keeps turns whose metadata contains it (JSON containment, `@>`).
    `time_from` / `time_to`: a window on turn_time (`>= time_from`, `< time_to`, either end
    open) whose pieces rank higher, nothing dropped; `since` / `until`: the same bounds as a
    filter, only turns inside them. `recency`: the cosine band within which the most recent
    turn ranks first (None: SQL's default). SQL checks them (InputError, one line)."""
    part_texts = check_parts(part_texts, model_id)  # read once: a generator is used here again
    st = recall_statement(
        scope, part_texts, part_vectors, x=x, floor=floor, thread=thread, mode=mode, message=message,
        model_id=model_id, metadata_filter=metadata_filter, time_from=time_from, time_to=time_to,
        recency=recency, since=since, until=until,
    )  # fmt: skip
    x, floor, filter_json, times = st.x, st.floor, st.filter_json, st.times
    if check_bool(log, "log"):
        check_logged(message, part_texts)
    groups = [Group(i + 1, t) for i, t in enumerate(part_texts)]
    rows = yield Query(scope, st.sql, st.params)
    for r in rows:
        groups[int(r[0]) - 1].hits.append(
            Hit(
                int(r[1]),
                int(r[2]),
                _opt_str(r[3]),
                _opt_int(r[4]),
                str(r[5]),
                str(r[6]),
                float(r[7]),
                float(r[8]),
                _opt_int(r[9]),
            )
        )
    result = Recall(message, groups)
    if not rows:
        # With since / until, the reason knows them (bounds_empty: no turn within them, 0111).
        bounds = {k: v for k, v in times.items() if k in ("since", "until")}
        why = yield Query(
            scope,
            "SELECT reason, message FROM pgmem."
            + ("empty_memory_recall_reason" if bounds else "empty_recall_reason")
            + "(%s, %s, %s::jsonb"
            + "".join(f", {k} => %s" for k in bounds)
            + ")",
            (scope, thread, filter_json, *bounds.values()),
            one=True,
        )
        if why is not None:
            result.empty_reason, result.empty_message = str(why[0]), str(why[1])
    if log:
        row = yield Query(
            scope,
            # Every argument that decides what was searched, so the log replays the recall.
            "SELECT pgmem.log_recall(%s, 'memory', %s, %s, %b::vector[], %s, %s, %s, %s, %s::jsonb"
            + (", metadata_filter => %s::jsonb" if filter_json is not None else "")
            + "".join(f", {k} => %s" for k in times)
            + ")",
            (
                scope,
                message,
                list(part_texts),
                st.vectors,
                x,
                floor,
                thread,
                mode,
                json.dumps([asdict(g) for g in groups], ensure_ascii=False),
                *([filter_json] if filter_json is not None else []),
                *times.values(),
            ),
            one=True,
        )
        # None: the scope has no row (a misspelt one, or forgotten meanwhile): nothing logged (0113).
        result.recall_id = None if row is None or row[0] is None else int(row[0])
    return result


recall_vectors = sync(recall_vectors_call)


def _vector_rows(value: object) -> F32:
    """Caller-supplied part vectors as float32 rows (they travel in pgvector's binary format)."""
    try:
        rows = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"part_vectors must be rows of numbers: {str(exc).splitlines()[0][:200]}") from None
    if rows.ndim != 2:
        raise InputError(f"part_vectors must be one row per part, got an array of shape {rows.shape}")
    if rows.shape[1] > 16000:  # pgvector's limit (the binary format counts dimensions in 16 bits)
        raise InputError(f"part_vectors have {rows.shape[1]} dimensions; a vector has at most 16000")
    return rows


def _time_args(**args: object) -> dict[str, object]:
    """The time arguments given, each an aware datetime (a naive one is refused: its zone would
    be the server's)."""
    out: dict[str, object] = {}
    for name, value in args.items():
        if value is None:
            continue
        if not isinstance(value, datetime):
            raise InputError(f"{name} must be a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise InputError(f"{name} must be an aware datetime (with a time zone), got {value.isoformat()}")
        out[name] = value
    return out


def _filter_json(metadata_filter: Mapping[str, object] | None) -> str | None:
    if metadata_filter is None:
        return None
    if not isinstance(metadata_filter, Mapping):
        raise InputError(f"metadata_filter must be a JSON object, got {type(metadata_filter).__name__}")
    check_json_text(metadata_filter, "metadata_filter")
    try:
        text = json.dumps(metadata_filter, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InputError(f"metadata_filter is not JSON: {exc}") from None
    return check_text(text, "metadata_filter")


def recall_call(
    scope: str,
    message: str,
    embedder: Embedder,
    *,
    x: int = DEFAULT_X,
    floor: float | None = None,
    thread: str | None = None,
    mode: str = DEFAULT_MODE,
    weight: float = DEFAULT_WEIGHT,
    rules: SplitRules = SplitRules(),
    log: bool = False,
    metadata_filter: Mapping[str, object] | None = None,
    message_time: datetime | None = None,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
    recency: float | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Call[Recall]:
    """Per-part memory recall for an incoming message: one group of up to `x` hits above
    `floor` per part (a message that is all one subject is one part, `merge_subjects`). Groups
    are never merged, padded or deduplicated across parts. The
    embedder must be the model the scope's pieces were stored with (ModelMismatchError).
    `db` is any psycopg connection (used as it is) or a connection pool. Without a `floor`,
    the model's; parts merge at the model's subject cosine (both `pgmem.model_settings`). With a
    `message_time` (when the message was sent), the message's date expressions ("last
    Tuesday", "two weeks ago") become the time window (`pgmem.dates.message_window`, the
    `[dates]` extra) unless `time_from` / `time_to` are given; `since` / `until` keep only
    turns inside them (`recall_vectors_call`)."""
    x, floor = _check(x, floor, mode)
    weight = check_message_args(weight, rules)
    check_target(scope, thread)
    _time_args(message_time=message_time)
    parts, inputs = query_inputs(message, rules=rules)
    if check_bool(log, "log"):  # before the message is embedded
        check_logged(message)
    if message_time is not None and time_from is None and time_to is None:
        # Read off the event loop under pgmem.aio: a long text dense with dates takes seconds.
        window = yield Work(functools.partial(message_window, message, message_time))
        if window is not None:
            time_from, time_to = window.start, window.end
    vectors = yield Embed(embedder, inputs, "query")
    q = yield from blended_query_call(scope, parts, vectors, embedder.model_id, weight)
    return (
        yield from recall_vectors_call(
            scope,
            q.texts,
            q.blended,
            x=x,
            floor=floor,
            thread=thread,
            mode=mode,
            message=message,
            log=log,
            model_id=embedder.model_id,
            metadata_filter=metadata_filter,
            time_from=time_from,
            time_to=time_to,
            recency=recency,
            since=since,
            until=until,
        )
    )


recall = sync(recall_call)


def whole_message_call(
    scope: str,
    message: str,
    embedder: Embedder,
    *,
    k: int,
    floor: float | None = None,
    thread: str | None = None,
    mode: str = DEFAULT_MODE,
) -> Call[Recall]:
    """The baseline the seed replaced: one vector for the whole message, one ranked list
    (without a `floor`, the model's own)."""
    check_target(scope, thread)
    whole = cap_bytes_keep_end(" ".join(check_text(message, "message").split()), WHOLE_MESSAGE_BYTES)
    if not whole:
        raise InputError("message is empty (or only whitespace): nothing to recall")
    vec = yield Embed(embedder, [whole], "query")
    return (
        yield from recall_vectors_call(
            scope, [whole], vec, x=k, floor=floor, thread=thread, mode=mode, message=message, model_id=embedder.model_id
        )
    )


whole_message_recall = sync(whole_message_call)


def _opt_str(v: object) -> str | None:
    return None if v is None else str(v)


def _opt_int(v: object) -> int | None:
    return None if v is None else int(v)  # type: ignore[call-overload]
