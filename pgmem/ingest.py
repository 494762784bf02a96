"""Ingest sealed turns: split, pack, label, embed, then `pgmem.put_turn` per turn.

Each turn is one transaction (one `put_turn` call): fully visible or not at all. A turn
whose content hash is unchanged is skipped before embedding, so re-ingesting writes
nothing and calls no embedding endpoint. One bad turn is reported, not fatal to the rest;
an embedding request that fails after its retries stops the run loudly (turns already
stored stay stored).

`bulk=True` (a backfill) stores each embedding group's turns of one scope with one
`pgmem.put_turns` call instead: the same rows, rules and report, one transaction per call."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC

import psycopg

from pgmem.calls import Call, Embed, Query, lost_race, sync, work
from pgmem.embedders.base import Embedder, FloatArray
from pgmem.errors import DatabaseError, InputError
from pgmem.pieces import DEFAULT_MAX_BYTES, Piece, turn_pieces
from pgmem.text import check_int, check_number
from pgmem.turns import Turn, check_storable, split_sources

#: Bumped whenever splitting, packing or labelling changes what a turn's pieces are.
PIECING_VERSION = 1
DEFAULT_WEIGHT = 0.8


@dataclass
class IngestReport:
    inserted: int = 0
    replaced: int = 0
    unchanged: int = 0
    #: Turns given `replace_hashes` (a rebuild's) that were gone or written again since they
    #: were read: left as they are.
    skipped: int = 0
    pieces: int = 0
    failed: list[tuple[tuple[str, str, int], str]] = field(default_factory=list)
    #: Earlier versions of a turn that appears more than once in one batch: the last one
    #: is stored (a later line is a later version), each earlier one is listed here as
    #: (key, "where it was, superseded by where").
    superseded: list[tuple[tuple[str, str, int], str]] = field(default_factory=list)
    #: Turns asked to use their text as context that were over the model's input limit
    #: and fell back to the mean of their pieces.
    context_fallbacks: list[tuple[str, str, int]] = field(default_factory=list)

    def count(self, status: str, pieces: int) -> None:
        """One turn that put_turns stored or left: its status and pieces written. A status this
        pgmem does not know (a newer schema's) is a DatabaseError: counted as unchanged, a turn
        the database did not store would read as stored."""
        if status not in ("inserted", "replaced", "unchanged", "skipped"):
            raise DatabaseError(f"put_turns returned the status {status!r:.40}, which this pgmem does not know")
        setattr(self, status, getattr(self, status) + 1)
        self.pieces += pieces

    def add(self, other: IngestReport) -> None:
        """`other`'s turns counted and listed in this report too (one report for a file stored a
        batch at a time)."""
        for name in ("inserted", "replaced", "unchanged", "skipped", "pieces"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failed += other.failed
        self.superseded += other.superseded
        self.context_fallbacks += other.context_fallbacks

    def as_dict(self) -> dict[str, object]:
        return {
            "inserted": self.inserted,
            "replaced": self.replaced,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "pieces": self.pieces,
            "failed": [{"turn": list(k), "error": e} for k, e in self.failed],
            "superseded": [{"turn": list(k), "note": n} for k, n in self.superseded],
            "context_fallbacks": [list(k) for k in self.context_fallbacks],
        }


Progress = Callable[[int, int, int], None]  # turns done, turns total, pieces written


CONTEXT_MODES = ("mean", "text")


def content_hash(turn: Turn, *, model_id: str, max_bytes: int, weight: float, context: str = "mean") -> bytes:
    payload = {
        "v": PIECING_VERSION,
        "context": context,
        "model": model_id,
        "max_bytes": max_bytes,
        "weight": weight,
        "time": turn.time.isoformat() if turn.time else None,
        "messages": turn.messages,
    }
    if turn.metadata:  # only when present, so turns without metadata keep their hashes
        payload["metadata"] = dict(turn.metadata)
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).digest()


def turn_text(turn: Turn) -> str:
    """The whole turn as one text: its sources in order, as the pieces label them."""
    return "\n".join(f"{s.name}: {s.text}" for s in split_sources(turn.messages))


#: The stored hashes of a scope's turns (any threads), and whether the scope refuses the model
#: (pgmem.model_refusal), in one statement: storing a turn is then two round trips, this and put_turn.
HASHES_AND_REFUSAL = """SELECT h.thread_id, h.turn_index, h.content_hash, r.refusal
  FROM (SELECT pgmem.model_refusal(%s, %s, %s, 'piece') AS refusal) r
  LEFT JOIN pgmem.stored_turn_hashes(%s, %s, %s) h ON true"""

#: The most turns whose stored hashes one statement reads.
HASHES_AT_ONCE = 5000


def _existing_hashes(
    turns: Sequence[Turn], embedder: Embedder, checked: dict[str, str | None]
) -> Call[dict[tuple[str, str, int], bytes]]:
    """The stored hashes of `turns`, read a scope at a time (at most HASHES_AT_ONCE turns a
    statement, whatever their threads); `checked` gets each scope's model refusal (None: none)."""
    by_scope: dict[str, list[tuple[str, int]]] = {}
    for t in turns:
        by_scope.setdefault(t.scope, []).append((t.thread, t.index))
    found: dict[tuple[str, str, int], bytes] = {}
    for scope, keys in by_scope.items():
        for at in range(0, len(keys), HASHES_AT_ONCE):
            chunk = keys[at : at + HASHES_AT_ONCE]
            rows = yield Query(
                scope,
                HASHES_AND_REFUSAL,
                (scope, embedder.model_id, embedder.dims, scope, [k[0] for k in chunk], [k[1] for k in chunk]),
            )
            for thread, idx, h, refusal in rows:
                checked[scope] = None if refusal is None else str(refusal)
                if idx is not None:
                    found[(scope, str(thread), int(idx))] = bytes(h)
    return found


def refused_scopes(scopes: Sequence[str], embedder: Embedder, plane: str) -> Call[dict[str, str]]:
    """The scopes among `scopes` whose `plane` stores another model's vectors, with the reason
    (pgmem.model_refusal: the rule lives in SQL, and put_turn raises the same message)."""
    refused: dict[str, str] = {}
    for scope in scopes:
        row = yield Query(
            scope,
            "SELECT pgmem.model_refusal(%s, %s, %s, %s)",
            (scope, embedder.model_id, embedder.dims, plane),
            one=True,
        )
        if row is not None and row[0] is not None:
            refused[scope] = str(row[0])
    return refused


def check_write_settings(max_bytes: object, weight: object, group_pieces: object) -> tuple[int, float, int]:
    """`max_bytes`, `weight` and `group_pieces` as ingest_turns (and a rebuild) take them; an
    InputError naming the first that is not."""
    return (
        check_int(max_bytes, "max_bytes", 64, 1 << 20),
        check_number(weight, "weight", 0, 1),
        check_int(group_pieces, "group_pieces", 1, 1 << 20),
    )


def ingest_turns_call(
    turns: Iterable[Turn],
    embedder: Embedder,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    weight: float = DEFAULT_WEIGHT,
    group_pieces: int = 512,
    reembed: bool = False,
    force: bool = False,
    context: str = "mean",
    progress: Progress | None = None,
    bulk: bool = False,
    replace_hashes: Mapping[tuple[str, str, int], bytes] | None = None,
) -> Call[IngestReport]:
    """Store `turns` (idempotently), each turn in its own transaction (a savepoint when `db`
    is a connection with a transaction open: committing it is then the caller's). `db` is any
    psycopg connection or a pool. Embeds about `group_pieces` pieces at a time to bound memory.

    `context="mean"` (default) blends each piece with the unit mean of its turn's pieces;
    `context="text"` embeds the turn's whole text as its context (one more input per turn),
    falling back to the mean, and saying so in the report, when the turn is over the
    model's input limit.

    `bulk=True`: each group's turns of one scope are stored by one `pgmem.put_turns` call, in one
    transaction (a backfill: many threads at once, set-based); a turn it refuses is reported as
    put_turn would report it, the others are stored. If the call fails as a whole on a turn's
    data, its turns are stored one by one with put_turn, which names the turn.

    `replace_hashes` (a rebuild's): a turn whose key is in it is written only over the stored turn
    of that content hash; one forgotten or written again since (another hash) is left as it is
    and counted in `skipped`, never brought back nor overwritten with the older copy."""
    if context not in CONTEXT_MODES:
        raise InputError(f"context must be one of {CONTEXT_MODES}, got {context!r:.80}")
    max_bytes, weight, group_pieces = check_write_settings(max_bytes, weight, group_pieces)
    if isinstance(turns, str | bytes) or not isinstance(turns, Iterable):
        raise InputError(f"turns must be a list of Turn, got {type(turns).__name__}")
    all_turns = list(turns)
    for i, t in enumerate(all_turns):
        if not isinstance(t, Turn):
            raise InputError(f"turns[{i}] must be a Turn, got {type(t).__name__}")
    report = IngestReport()
    # A turn the database cannot store (bad key, NUL, invalid UTF-8, wrong shape) is
    # reported, never sent: it must not fail the hash lookup or the transaction of the turns
    # around it. The same turn twice in one batch: the last version wins (it is the later
    # one in the caller's log), and each earlier version is reported as superseded.
    latest: dict[tuple[str, str, int], Turn] = {}
    for t in all_turns:
        try:
            check_storable(t)
        except InputError as exc:
            report.failed.append((t.key, str(exc)))
            continue
        if t.time is not None and t.time.tzinfo is None:
            # A time without a zone is UTC, as a JSONL line's (turns.parse_time). Sent as it was, the
            # server read it in the session's TimeZone: one Turn stored at another instant through
            # each connection whose TimeZone differs (12:00 was 03:00 UTC through Asia/Tokyo).
            t = replace(t, time=t.time.replace(tzinfo=UTC))
        earlier = latest.pop(t.key, None)
        if earlier is not None:
            report.superseded.append((t.key, f"{earlier.where} superseded by {t.where}"))
        latest[t.key] = t
    valid = list(latest.values())
    # The hash travels with its own turn: the stored hash is always that of the stored messages.
    hashed = [
        (t, content_hash(t, model_id=embedder.model_id, max_bytes=max_bytes, weight=weight, context=context))
        for t in valid
    ]
    checked: dict[str, str | None] = {}
    existing = {} if force else (yield from _existing_hashes(valid, embedder, checked))
    todo: list[tuple[Turn, bytes]] = []
    for t, digest in hashed:
        if not force and existing.get(t.key) == digest:
            report.unchanged += 1
        else:
            todo.append((t, digest))
    if not reembed:
        # The model check runs before anything is embedded: a scope that stores another model's
        # vectors refuses its turns here, with put_turn's message, not after the embedding.
        # Checked with the hashes already, but for a forced write (no hashes read).
        unchecked = sorted({t.scope for t, _ in todo} - checked.keys())
        refused = {s: r for s, r in checked.items() if r is not None}
        refused |= yield from refused_scopes(unchecked, embedder, "piece")
        for t, _ in todo:
            if t.scope in refused:
                report.failed.append((t.key, f"22000: {refused[t.scope]}"))
        todo = [(t, d) for t, d in todo if t.scope not in refused]
    done = report.unchanged + len(report.failed) + len(report.superseded)
    group: list[tuple[Turn, bytes, list[Piece]]] = []
    group_size = 0

    def flush() -> Call[None]:
        nonlocal done, group, group_size
        if not group:
            return
        texts = [p.text for _, _, ps in group for p in ps]
        contexts: dict[tuple[str, str, int], int] = {}
        if context == "text":
            for turn, _, _ in group:
                text = turn_text(turn)
                if embedder.count_tokens([text])[0] <= embedder.max_input_tokens:
                    contexts[turn.key] = len(texts)
                    texts.append(text)
                else:
                    report.context_fallbacks.append(turn.key)
        vectors = yield Embed(embedder, texts)
        offset = 0
        ready: list[Ready] = []
        for turn, digest, ps in group:
            vecs = vectors[offset : offset + len(ps)]
            offset += len(ps)
            ctx = vectors[contexts[turn.key]] if turn.key in contexts else None
            ready.append((turn, ps, vecs, ctx, digest))
        if bulk:
            by_scope: dict[str, list[Ready]] = {}
            for item in ready:
                by_scope.setdefault(item[0].scope, []).append(item)
            for items in by_scope.values():
                yield from _put_many(items, embedder.model_id, weight, reembed, force, report, replace_hashes)
                done += len(items)
                if progress:
                    progress(done, len(all_turns), report.pieces)
        else:
            for turn, ps, vecs, ctx, digest in ready:
                yield from _put(
                    turn, ps, vecs, ctx, digest, embedder.model_id, weight, reembed, force, report, replace_hashes
                )
                done += 1
                if progress:
                    progress(done, len(all_turns), report.pieces)
        group, group_size = [], 0

    for turn, digest in todo:
        try:
            # Split, packed and token-counted off the event loop (pgmem.aio): a turn of 300 KB held
            # the loop for over a second.
            ps = yield from work(functools.partial(turn_pieces, turn, embedder, max_bytes=max_bytes))
            if not ps:
                raise InputError(f"{turn.where}: the turn has no text in any message")
        except InputError as exc:
            report.failed.append((turn.key, str(exc)))
            done += 1
            continue
        group.append((turn, digest, ps))
        group_size += len(ps)
        if group_size >= group_pieces:
            yield from flush()
    yield from flush()
    if progress:
        progress(len(all_turns), len(all_turns), report.pieces)
    return report


ingest_turns = sync(ingest_turns_call)

#: A turn ready to store: the turn, its pieces, their vectors, its context vector, its hash.
Ready = tuple[Turn, list[Piece], FloatArray, "FloatArray | None", bytes]

PUT_TURNS = """SELECT turn_no, status, pieces, error_code, error FROM pgmem.put_turns(
    scope => %s, model_id => %s, threads => %s, turn_indexes => %s, turn_times => %s::timestamptz[],
    messages => %s::jsonb[], content_hashes => %s, piece_counts => %s, unit_kinds => %s,
    source_indexes => %s, labels => %s, bodies => %s, vectors => %b::vector[], weight => %s,
    reembed => %s, force => %s, contexts => %b::vector[], metadata => %s::jsonb[]{replace})"""


def _put_many(
    items: list[Ready],
    model_id: str,
    weight: float,
    reembed: bool,
    force: bool,
    report: IngestReport,
    replace_hashes: Mapping[tuple[str, str, int], bytes] | None = None,
) -> Call[None]:
    """Store turns of one scope with one pgmem.put_turns call; the report says what put_turn would."""
    turns = [t for t, _, _, _, _ in items]
    contexts = [c for _, _, _, c, _ in items]
    # Named only when given, so a call without it runs on schemas before 0040.
    replace = [replace_hashes.get(t.key) for t in turns] if replace_hashes else None
    try:
        rows = yield Query(
            turns[0].scope,
            PUT_TURNS.format(replace=", replace_hashes => %s" if replace else ""),
            (
                turns[0].scope,
                model_id,
                [t.thread for t in turns],
                [t.index for t in turns],
                [t.time.isoformat() if t.time else None for t in turns],
                [json.dumps(list(t.messages), ensure_ascii=False) for t in turns],
                [d for _, _, _, _, d in items],
                [len(ps) for _, ps, _, _, _ in items],
                [p.unit_kind for _, ps, _, _, _ in items for p in ps],
                [p.source_index for _, ps, _, _, _ in items for p in ps],
                [p.label for _, ps, _, _, _ in items for p in ps],
                [p.body for _, ps, _, _, _ in items for p in ps],
                [v for _, _, vecs, _, _ in items for v in vecs],
                weight,
                reembed,
                force,
                contexts if any(c is not None for c in contexts) else None,
                [json.dumps(dict(t.metadata), ensure_ascii=False) if t.metadata else None for t in turns],
                *([replace] if replace else []),
            ),
        )
    except psycopg.Error as exc:
        # A turn's data the rules let through but the table refused, or a race lost on every
        # attempt: the normal path, one transaction per turn, names the turn and stores the rest.
        if not isinstance(exc, (psycopg.DataError, psycopg.IntegrityError)) and not lost_race(exc):
            raise
        for turn, ps, vecs, ctx, digest in items:
            yield from _put(turn, ps, vecs, ctx, digest, model_id, weight, reembed, force, report, replace_hashes)
        return
    for turn_no, status, n, code, error in rows:
        turn = turns[int(str(turn_no)) - 1]
        if status == "failed":
            detail = f"{code}: {error}"
            report.failed.append((turn.key, f"{turn.where}: {detail}" if turn.origin else detail))
        else:
            report.count(str(status), int(str(n)))


def _put(
    turn: Turn,
    pieces: list[Piece],
    vectors: FloatArray,
    context: FloatArray | None,
    digest: bytes,
    model_id: str,
    weight: float,
    reembed: bool,
    force: bool,
    report: IngestReport,
    replace_hashes: Mapping[tuple[str, str, int], bytes] | None = None,
) -> Call[None]:
    # The metadata argument is named only when there is metadata (schemas before 0005 lack it),
    # and the rebuild's condition only when given (before 0040).
    metadata = ", metadata => %s::jsonb" if turn.metadata else ""
    replace = replace_hashes.get(turn.key) if replace_hashes else None
    metadata += ", replace_hash => %s" if replace is not None else ""
    try:
        row = yield Query(
            turn.scope,
            f"""SELECT status, pieces FROM pgmem.put_turn(
                   scope => %s, thread => %s, turn_index => %s, turn_time => %s,
                   messages => %s::jsonb, content_hash => %s, model_id => %s,
                   unit_kinds => %s, source_indexes => %s, labels => %s, bodies => %s,
                   vectors => %b::vector[], weight => %s, reembed => %s, force => %s,
                   context => %b::vector{metadata})""",
            (
                turn.scope,
                turn.thread,
                turn.index,
                turn.time,
                json.dumps(list(turn.messages), ensure_ascii=False),
                digest,
                model_id,
                [p.unit_kind for p in pieces],
                [p.source_index for p in pieces],
                [p.label for p in pieces],
                [p.body for p in pieces],
                list(vectors),
                weight,
                reembed,
                force,
                context,
                *([json.dumps(dict(turn.metadata), ensure_ascii=False)] if turn.metadata else []),
                *([replace] if replace is not None else []),
            ),
            one=True,
        )
    except psycopg.Error as exc:
        # This turn's data, or a race with concurrent writers lost on every attempt: reported
        # for this turn, and the batch goes on. Anything else is the connection's.
        if not isinstance(exc, (psycopg.DataError, psycopg.IntegrityError)) and not lost_race(exc):
            raise
        detail = f"{exc.sqlstate or 'client'}: {exc.diag.message_primary or exc}"
        report.failed.append((turn.key, f"{turn.where}: {detail}" if turn.origin else detail))
        return
    report.count(str(row[0]), int(row[1]))
