"""Query side: split the message, embed parts + whole message in one request, blend each
part with the whole message, and let one SQL call return a group per part."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import psycopg

from pgmem.blend import DEFAULT_WEIGHT, F32, blend
from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError, ModelMismatchError, PgmemError
from pgmem.splitting import SplitRules, cap_bytes_keep_end, split_prompt_chunks
from pgmem.text import check_name, check_text

#: Whole-message cap (seed 000): 8,000 bytes, keeping the end. Each part's embedding input is
#: capped the same way, and so is its word-search text in SQL (pgmem.word_query), so a part of
#: any length is searched by the same text on both sides of hybrid recall.
WHOLE_MESSAGE_BYTES = 8000
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

    def as_dict(self) -> dict[str, object]:
        return {"message": self.message, "recall_id": self.recall_id, "groups": [asdict(g) for g in self.groups]}


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
) -> QueryParts:
    """Split `message` and embed its parts plus the whole message in one request."""
    check_text(message, "message")
    parts = split_prompt_chunks(message, rules)
    if not parts:
        raise InputError("message is empty (or only whitespace): nothing to recall")
    whole = cap_bytes_keep_end(" ".join(message.split()), whole_bytes)
    inputs = [cap_bytes_keep_end(p, whole_bytes) for p in parts] + [whole]
    vectors = embedder.embed(inputs)
    raw, whole_vec = vectors[:-1], vectors[-1]
    blended = blend(raw, np.broadcast_to(whole_vec, raw.shape).copy(), weight)
    return QueryParts(parts, raw, whole_vec, blended)


def check_target(scope: object, thread: object = None) -> None:
    """The scope (and thread filter, if any) of a search: storable names, else an InputError."""
    check_name(scope, "scope")
    if thread is not None:
        check_name(thread, "thread")


def refusal(exc: psycopg.Error) -> PgmemError:
    """The PgmemError for a search the database refused: query vectors from another model than
    the scope's stored ones (pgmem.check_recall_args: 22000, "... from model ...") are a
    ModelMismatchError; any other bad argument (a wrong dimension, NaN, out of range) an InputError."""
    diag = exc.diag
    text = diag.message_primary or " ".join(str(exc).split())
    if diag.message_hint:
        text += f" ({diag.message_hint})"
    if exc.sqlstate == "22000" and " vectors from model " in text:
        return ModelMismatchError(text)
    return InputError(text)


def _check(x: int, floor: float, mode: str) -> None:
    if not 1 <= x <= 1000:
        raise InputError(f"x must be between 1 and 1000, got {x}")
    if not -1.0 <= floor <= 1.0:
        raise InputError(f"floor is a raw cosine between -1 and 1, got {floor}")
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r}")


def recall_vectors(
    conn: psycopg.Connection[tuple[object, ...]],
    scope: str,
    part_texts: Sequence[str],
    part_vectors: F32,
    *,
    x: int = DEFAULT_X,
    floor: float = DEFAULT_FLOOR,
    thread: str | None = None,
    mode: str = DEFAULT_MODE,
    message: str = "",
    log: bool = False,
    model_id: str | None = None,
) -> Recall:
    """One `pgmem.memory_recall` call for all parts (vectors already blended). `model_id`, the
    model that embedded the parts, must be the model of the scope's pieces (ModelMismatchError)."""
    _check(x, floor, mode)
    check_target(scope, thread)
    for i, t in enumerate(part_texts):
        check_text(t, f"part_texts[{i}]")
    check_text(message, "message")
    groups = [Group(i + 1, t) for i, t in enumerate(part_texts)]
    with scoped(conn, scope):
        try:
            rows = conn.execute(
                """SELECT part_no, rank, piece_id, thread_id, turn_index, label, body, cosine, score, word_rank
                     FROM pgmem.memory_recall(scope => %s, part_vectors => %s::vector[], part_texts => %s,
                                              x => %s, floor => %s, thread => %s, mode => %s, model_id => %s)""",
                (scope, list(part_vectors), list(part_texts), x, floor, thread, mode, model_id),
                binary=True,
            ).fetchall()
        except psycopg.DataError as exc:
            raise refusal(exc) from None
        for r in rows:
            groups[int(str(r[0])) - 1].hits.append(
                Hit(
                    int(str(r[1])),
                    int(str(r[2])),
                    _opt_str(r[3]),
                    _opt_int(r[4]),
                    str(r[5]),
                    str(r[6]),
                    float(str(r[7])),
                    float(str(r[8])),
                    _opt_int(r[9]),
                )
            )
        result = Recall(message, groups)
        if log:
            try:
                row = conn.execute(
                    "SELECT pgmem.log_recall(%s, 'memory', %s, %s, %s::vector[], %s, %s, %s, %s, %s::jsonb)",
                    (
                        scope,
                        message,
                        list(part_texts),
                        list(part_vectors),
                        x,
                        floor,
                        thread,
                        mode,
                        json.dumps([asdict(g) for g in groups], ensure_ascii=False),
                    ),
                    binary=True,
                ).fetchone()
            except psycopg.DataError as exc:
                raise refusal(exc) from None
            assert row is not None
            result.recall_id = int(str(row[0]))
    return result


def recall(
    conn: psycopg.Connection[tuple[object, ...]],
    scope: str,
    message: str,
    embedder: Embedder,
    *,
    x: int = DEFAULT_X,
    floor: float = DEFAULT_FLOOR,
    thread: str | None = None,
    mode: str = DEFAULT_MODE,
    weight: float = DEFAULT_WEIGHT,
    rules: SplitRules = SplitRules(),
    log: bool = False,
) -> Recall:
    """Per-part memory recall for an incoming message: one group of up to `x` hits above
    `floor` per part. Groups are never merged, padded or deduplicated across parts. The
    embedder must be the model the scope's pieces were stored with (ModelMismatchError)."""
    _check(x, floor, mode)
    check_target(scope, thread)
    q = embed_query(message, embedder, rules=rules, weight=weight)
    return recall_vectors(
        conn,
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
    )


def whole_message_recall(
    conn: psycopg.Connection[tuple[object, ...]],
    scope: str,
    message: str,
    embedder: Embedder,
    *,
    k: int,
    floor: float = DEFAULT_FLOOR,
    thread: str | None = None,
    mode: str = DEFAULT_MODE,
) -> Recall:
    """The baseline the seed replaced: one vector for the whole message, one ranked list."""
    check_target(scope, thread)
    whole = cap_bytes_keep_end(" ".join(check_text(message, "message").split()), WHOLE_MESSAGE_BYTES)
    if not whole:
        raise InputError("message is empty (or only whitespace): nothing to recall")
    vec = embedder.embed([whole])
    return recall_vectors(
        conn,
        scope,
        [whole],
        vec,
        x=k,
        floor=floor,
        thread=thread,
        mode=mode,
        message=message,
        model_id=embedder.model_id,
    )


def _opt_str(v: object) -> str | None:
    return None if v is None else str(v)


def _opt_int(v: object) -> int | None:
    return None if v is None else int(str(v))
