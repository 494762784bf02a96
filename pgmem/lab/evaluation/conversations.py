"""The seven storage/search methods the conversation suites compare, on the same data,
the same embedder and one database.

Every method stores its vectors through `pgmem.put_turn` (each method in its own
scope, `<prefix>/<method>`) and every search is `pgmem.memory_recall`, so the methods
differ only in what a vector stands for and how the query is built:

- `whole_turn`: one vector per turn (its messages' text joined); one whole-message
  query vector. The seed's old indexer.
- `per_message`: one vector per message (an assistant message's text includes its tool
  calls as `name(arguments)`); one whole-message query vector. What mem0 and
  LangGraph's PostgresStore store.
- `user_turns`: one vector per user message; one whole-message query vector. The flat
  turn-level index of LongMemEval's own retrieval script (its key is the user turn).
- `fixed_chunks`: LangChain's `RecursiveCharacterTextSplitter(chunk_size=1000,
  chunk_overlap=200)` over each turn's text; one whole-message query vector. What most
  RAG stacks do today.
- `pieces`: pgmem's labelled pieces (normal ingest path, `ingest_turns`) with no blend
  (weight 1.0); the message's parts as queries, unblended.
- `blended`: labelled pieces with the blend (weight 0.8 by default); blended query
  parts (`pgmem.recall.embed_query`).
- `hybrid`: `blended`'s store and query vectors with `memory_recall(mode => 'hybrid')`
  (vector + word search). It shares `blended`'s scope: same data, only the search differs.

Four ablations of the stored pieces (issue 14), for `pieces`/`blended`/`hybrid`:
`piece_bytes` (the byte budget of a piece, default 1,200; the model's token limit still
applies), `label` (`"embedded"`, the default: the label is embedded with the body;
`"beside"`: only the body is embedded, the label is stored beside it as always),
`short_turns` (`"per_role"`, the default: a piece never spans two messages;
`"one_piece"`: a chat turn whose messages fit one piece together is stored as one piece
holding the whole exchange, see `one_piece_turn`) and `context` (`"mean"`, the default:
pieces are blended with the mean of their turn's pieces; `"text"`: with the turn's whole
text embedded, `ingest_turns(context="text")`).

Recall is asked without a floor and with a generous `x`, so the metrics see the full
ranking; `top1_above_floor` applies the floor afterwards, the same floor for every
method. Grouped results become one list by the rule of `pgmem.lab.evaluation.ranking`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg

from pgmem.blend import DEFAULT_WEIGHT
from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.ingest import CONTEXT_MODES, ingest_turns
from pgmem.lab.evaluation.ranking import ScoredHit
from pgmem.packing import utf8_len
from pgmem.pieces import DEFAULT_MAX_BYTES, turn_pieces
from pgmem.recall import QueryParts, embed_query, merge_subjects, recall_vectors, subject_cosine_for, whole_query
from pgmem.turns import Turn, content_text, format_label, split_sources

METHODS = ("whole_turn", "per_message", "user_turns", "fixed_chunks", "pieces", "blended", "hybrid")


#: How pieces/blended/hybrid query (`ConversationStore.query`, `-o query=...`): pgmem's query
#: ("parts": the split, or the whole message when all its parts are one subject,
#: `pgmem.recall.merge_subjects`); every part of the split alone ("split", the default before);
#: or one whole-message vector for every message ("whole"). See `query_variant`.
QUERIES = ("parts", "split", "whole")


def check_query(query: object) -> None:
    if query not in QUERIES:
        raise InputError(f"query must be one of {QUERIES}, got {query!r}")


def query_variant(q: QueryParts, query: str, subject_cosine: float | None) -> QueryParts:
    """The query-split ablation, from the unmerged parts `q` (`embed_query(merge=False)`).
    "parts": pgmem's query, `merge_subjects` at the model's `subject_cosine` (None: no merge).
    "split": `q` itself. "whole": one part, the whole-message vector. No new text is embedded."""
    check_query(query)
    if query == "split":
        return q
    if query == "whole":
        return whole_query(q)
    return q if subject_cosine is None else merge_subjects(q, subject_cosine)


#: The pgmem.* settings memory_recall reads as integers.
INTEGER_SETTINGS = (
    "pgmem.word_keep_rank",
    "pgmem.recency_depth",
    "pgmem.floor_head",
    "pgmem.window_head",
    "pgmem.word_postings_cap",
)


def word_settings(conn: Conn, word_share: float | None, word_weight: float | None, **more: float | None) -> None:
    """The hybrid ablations: set the session's pgmem.word_share / pgmem.word_weight (the
    settings memory_recall reads; defaults 0.1 and 2), and any of `more` (time_weight,
    word_keep_rank, word_keep_margin, recency_depth, floor_head, window_head,
    word_postings_cap: pgmem.<name>), where a value is
    given."""
    for name, value in (
        ("pgmem.word_share", word_share),
        ("pgmem.word_weight", word_weight),
        *((f"pgmem.{k}", v) for k, v in more.items()),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"{name.removeprefix('pgmem.')} must be a number, got {value!r}")
        text = str(int(value)) if name in INTEGER_SETTINGS else str(float(value))
        conn.execute("SELECT set_config(%s, %s, false)", (name, text))


def check_methods(methods: Sequence[str]) -> None:
    """Refuse method names this module does not know, naming them."""
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise InputError(f"unknown methods {sorted(unknown)}; choose from {METHODS}")


LABELS = ("embedded", "beside")
SHORT_TURNS = ("per_role", "one_piece")


class BodyOnlyEmbedder:
    """The label-beside ablation: embeds a piece's body without its label. Wraps the embedder
    ingest is given (the write path is unchanged): every text it embeds whose start is one
    of the run's piece labels is embedded without it."""

    def __init__(self, inner: Embedder, labels: set[str]) -> None:
        self.inner = inner
        self.labels = labels

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def strip(self, text: str) -> str:
        label, sep, body = text.partition("] ")
        return body if sep and f"{label}]" in self.labels else text

    def embed(self, texts: Sequence[str]) -> Any:
        return self.inner.embed([self.strip(t) for t in texts])


def check_piece_options(
    piece_bytes: object, label: object, short_turns: object = "per_role", context: object = "mean"
) -> None:
    """Refuse a piece ablation value the suites cannot run, naming it."""
    if label not in LABELS:
        raise InputError(f"label must be one of {LABELS}, got {label!r}")
    if short_turns not in SHORT_TURNS:
        raise InputError(f"short_turns must be one of {SHORT_TURNS}, got {short_turns!r}")
    if context not in CONTEXT_MODES:
        raise InputError(f"context must be one of {CONTEXT_MODES}, got {context!r}")
    if not isinstance(piece_bytes, int) or isinstance(piece_bytes, bool) or not 200 <= piece_bytes <= 100_000:
        raise InputError(f"piece_bytes must be an integer from 200 to 100000, got {piece_bytes!r}")


def one_piece_turn(turn: Turn, max_bytes: int = DEFAULT_MAX_BYTES) -> Turn:
    """The short-turn ablation: a chat turn (user and assistant messages, no tool calls)
    whose messages fit one `max_bytes` piece together becomes one user message holding the
    exchange (`User: ...` / `Assistant: ...` lines), which the write path stores as one
    piece; any other turn is returned unchanged. Only for suites scored by turn."""
    msgs = turn.messages
    if len(msgs) < 2 or any(m.get("role") not in ("user", "assistant") or m.get("tool_calls") for m in msgs):
        return turn
    text = "\n".join(f"{str(m['role']).capitalize()}: {content_text(m.get('content')).strip()}" for m in msgs)
    if utf8_len(format_label(turn.index, "User", turn.time)) + 1 + utf8_len(text) > max_bytes:
        return turn
    return replace(turn, messages=({"role": "user", "content": text},))


def piece_turns(turns: Sequence[Turn], *, piece_bytes: int, short_turns: str) -> list[Turn]:
    """The turns as the piece methods store them under the `short_turns` ablation."""
    if short_turns == "per_role":
        return list(turns)
    return [one_piece_turn(t, piece_bytes) for t in turns]


def piece_embedder(embedder: Embedder, turns: Sequence[Turn], *, piece_bytes: int, label: str) -> Any:
    """The embedder to give `ingest_turns` for these turns under the piece ablations."""
    if label == "embedded":
        return embedder
    labels = {p.label for t in turns for p in turn_pieces(t, embedder, max_bytes=piece_bytes)}
    return BodyOnlyEmbedder(embedder, labels)


#: Methods that own a scope (hybrid searches blended's).
STORED = ("whole_turn", "per_message", "user_turns", "fixed_chunks", "pieces", "blended")
CHUNK_SIZE = 1000
CHUNK_OVERLAP = 200

Conn = psycopg.Connection[tuple[object, ...]]
#: What a hit counts as: (thread, turn index, the turn's message indexes it holds text of).
UnitKey = tuple[str, int, tuple[int, ...]]


@dataclass(frozen=True)
class Unit:
    """One stored vector of a baseline method: embedded text and the messages it covers."""

    unit_kind: str
    source_index: int
    text: str
    messages: tuple[int, ...]


def message_text(m: Mapping[str, Any]) -> str:
    """A message as one text: its content, plus its tool calls as `name(arguments)`."""
    parts = [content_text(m.get("content"))]
    for call in m.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False) if args else ""
        parts.append(f"{fn.get('name') or 'tool'}({args_text})")
    return "\n".join(p for p in parts if p.strip())


def _kind(m: Mapping[str, Any]) -> str:
    role = str(m.get("role"))
    return role if role in ("user", "assistant", "tool") else "system"


def per_message_units(turn: Turn) -> list[Unit]:
    units: list[Unit] = []
    for i, m in enumerate(turn.messages):
        text = message_text(m)
        if text.strip():
            units.append(Unit(_kind(m), len(units), text, (i,)))
    return units


def user_turn_units(turn: Turn) -> list[Unit]:
    return [u for u in per_message_units(turn) if u.unit_kind == "user"]


def _joined(turn: Turn) -> tuple[str, list[tuple[int, int, int]]]:
    """The turn's text (messages joined by a blank line) and each message's span."""
    spans: list[tuple[int, int, int]] = []
    text = ""
    for i, m in enumerate(turn.messages):
        t = message_text(m)
        if not t.strip():
            continue
        if text:
            text += "\n\n"
        spans.append((i, len(text), len(text) + len(t)))
        text += t
    return text, spans


def whole_turn_units(turn: Turn) -> list[Unit]:
    text, spans = _joined(turn)
    return [Unit("chunk", 0, text, tuple(i for i, _, _ in spans))] if text.strip() else []


def fixed_chunk_units(turn: Turn) -> list[Unit]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    text, spans = _joined(turn)
    if not text.strip():
        return []
    splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, add_start_index=True)
    units: list[Unit] = []
    for doc in splitter.create_documents([text]):
        start = int(doc.metadata["start_index"])
        end = start + len(doc.page_content)
        covered = tuple(i for i, s, e in spans if s < end and e > start)
        units.append(Unit("chunk", len(units), doc.page_content, covered))
    return units


BASELINES = {
    "whole_turn": whole_turn_units,
    "per_message": per_message_units,
    "user_turns": user_turn_units,
    "fixed_chunks": fixed_chunk_units,
}


def source_messages(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, ...]]:
    """For each source of `pgmem.turns.split_sources(messages)`, the message indexes its
    text comes from: a tool call's source holds the calling assistant message's
    arguments and the tool message's result, so it covers both."""
    out: list[tuple[int, ...]] = []
    call_msg: dict[str, int] = {}
    answered: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            if content_text(m.get("content")).strip():
                out.append((i,))
            for call in m.get("tool_calls") or []:
                call_msg[str(call.get("id"))] = i
        elif role == "tool":
            call_id = str(m.get("tool_call_id"))
            answered.add(call_id)
            src = call_msg.get(call_id)
            out.append((src, i) if src is not None else (i,))
        elif content_text(m.get("content")).strip():
            out.append((i,))
    for call_id, i in call_msg.items():
        if call_id not in answered:
            out.append((i,))
    n = len(split_sources(messages))
    if len(out) != n:  # keep this mirror of split_sources honest
        raise AssertionError(f"source map has {len(out)} entries for {n} sources")
    return out


@dataclass
class ConversationStore:
    """All methods' stores for a set of threads, in one database.

    `prefix` names the scopes (`<prefix>/<method>`); `x` is the hits each group keeps
    (recall runs with no floor so the metrics see the whole ranking)."""

    conn: Conn
    embedder: Embedder
    prefix: str
    weight: float = DEFAULT_WEIGHT
    x: int = 30
    methods: Sequence[str] = METHODS
    #: How pieces/blended/hybrid query (QUERIES): "parts" (pgmem's query, the default),
    #: "split" or "whole" (ablations, `query_variant`).
    query: str = "parts"
    #: Piece ablations (module docstring): the byte budget, whether the label is embedded,
    #: short turns per role or as one piece, and the turn context.
    piece_bytes: int = DEFAULT_MAX_BYTES
    label: str = "embedded"
    short_turns: str = "per_role"
    context: str = "mean"
    _units: dict[tuple[str, str, int, int], tuple[int, ...]] = field(default_factory=dict)
    _piece_messages: dict[str, dict[int, UnitKey]] = field(default_factory=dict)

    def scope(self, method: str) -> str:
        return f"{self.prefix}/{'blended' if method == 'hybrid' else method}"

    def _stored(self) -> list[str]:
        want = set(self.methods)
        if "hybrid" in want:
            want.add("blended")
        return [m for m in STORED if m in want]

    def texts(self, turns: Sequence[Turn]) -> list[str]:
        """Every text `ingest(turns)` will embed, over all of this store's methods (the
        evaluation embeds them all in one pass before storing anything)."""
        out: list[str] = []
        for method in self._stored():
            if method in ("pieces", "blended"):
                ps = [
                    p
                    for t in self._piece_turns(turns)
                    for p in turn_pieces(t, self.embedder, max_bytes=self.piece_bytes)
                ]
                out += [p.text if self.label == "embedded" else p.body for p in ps]
            else:
                out += [u.text for t in turns for u in BASELINES[method](t)]
        return out

    def ingest(self, turns: Sequence[Turn]) -> None:
        """Store `turns` (any scope; they are re-scoped per method) under every method:
        one transaction per method (each turn a savepoint inside it)."""
        for method in self._stored():
            scope = self.scope(method)
            stored = self._piece_turns(turns) if method in ("pieces", "blended") else list(turns)
            scoped_turns = [Turn(scope, t.thread, t.index, t.time, t.messages) for t in stored]
            with scoped(self.conn, scope):
                if method in ("pieces", "blended"):
                    w = 1.0 if method == "pieces" else self.weight
                    emb = piece_embedder(self.embedder, stored, piece_bytes=self.piece_bytes, label=self.label)
                    report = ingest_turns(
                        self.conn, scoped_turns, emb, weight=w, max_bytes=self.piece_bytes, context=self.context
                    )
                    if report.failed:
                        raise RuntimeError(f"{scope}: ingest failed for {report.failed[:3]}")
                else:
                    self._put_baseline(method, scoped_turns)
            self._map_pieces(method, stored)

    def _piece_turns(self, turns: Sequence[Turn]) -> list[Turn]:
        return piece_turns(turns, piece_bytes=self.piece_bytes, short_turns=self.short_turns)

    def _put_baseline(self, method: str, turns: Sequence[Turn]) -> None:
        """All turns of one baseline method through `pgmem.put_turn`, pipelined
        (executemany) in the caller's transaction."""
        per_turn = [(t, BASELINES[method](t)) for t in turns]
        texts = [u.text for _, us in per_turn for u in us]
        vectors = self.embedder.embed(texts) if texts else None
        offset = 0
        params: list[tuple[object, ...]] = []
        for turn, units in per_turn:
            if not units:
                continue
            assert vectors is not None
            vecs = vectors[offset : offset + len(units)]
            offset += len(units)
            digest = hashlib.sha256(json.dumps([method, [u.text for u in units]]).encode("utf-8", "surrogatepass"))
            params.append(
                (
                    turn.scope,
                    turn.thread,
                    turn.index,
                    turn.time,
                    json.dumps(list(turn.messages), ensure_ascii=False),
                    digest.digest(),
                    self.embedder.model_id,
                    [u.unit_kind for u in units],
                    [u.source_index for u in units],
                    ["" for _ in units],
                    [u.text for u in units],
                    list(vecs),
                )
            )
            for u in units:
                self._units[(turn.scope, turn.thread, turn.index, u.source_index)] = u.messages
        with self.conn.cursor(binary=True) as cur:
            cur.executemany(
                """SELECT pgmem.put_turn(scope => %s, thread => %s, turn_index => %s, turn_time => %s,
                       messages => %s::jsonb, content_hash => %s, model_id => %s, unit_kinds => %s,
                       source_indexes => %s, labels => %s, bodies => %s, vectors => %b::vector[],
                       weight => 1.0)""",
                params,
            )

    def _map_pieces(self, method: str, turns: Sequence[Turn]) -> None:
        """piece_id -> (thread, turn, messages) for every piece of this method's scope."""
        scope = self.scope(method)
        by_key = {(t.thread, t.index): t for t in turns}
        mapping = self._piece_messages.setdefault(scope, {})
        threads = sorted({t.thread for t in turns})
        with scoped(self.conn, scope):
            rows = self.conn.execute(
                """SELECT piece_id, thread_id, turn_index, source_index FROM pgmem.piece
                    WHERE scope_id = %s AND kind = 'memory' AND thread_id = ANY(%s)""",
                (scope, threads),
            ).fetchall()
        src_cache: dict[tuple[str, int], list[tuple[int, ...]]] = {}
        for pid, thread, tidx, sidx in rows:
            key = (str(thread), int(str(tidx)))
            if key not in by_key:
                continue
            s = int(str(sidx))
            if method in ("pieces", "blended"):
                if key not in src_cache:
                    src_cache[key] = source_messages(by_key[key].messages)
                msgs = src_cache[key][s]
            else:
                msgs = self._units[(scope, key[0], key[1], s)]
            mapping[int(str(pid))] = (key[0], key[1], msgs)

    def embed_question(self, question: str) -> QueryParts:
        q = embed_query(question, self.embedder, weight=self.weight, merge=False)
        return query_variant(q, self.query, subject_cosine_for(self.embedder))

    def search(
        self, method: str, q: QueryParts, *, thread: str | None = None, floor: float = -1.0, **times: Any
    ) -> list[ScoredHit[UnitKey]]:
        """The method's hits for a query, each keyed by (thread, turn, messages). `times`:
        memory_recall's time arguments (time_from, time_to, recency), for pgmem's methods."""
        scope = self.scope(method)
        if method in BASELINES:
            texts, vecs, mode = [q.texts[-1] if len(q.texts) == 1 else " ".join(q.texts)], q.whole[None, :], "vector"
        elif method == "pieces":
            texts, vecs, mode = q.texts, q.raw, "vector"
        else:
            texts, vecs, mode = q.texts, q.blended, "hybrid" if method == "hybrid" else "vector"
        if method in ("whole_turn", "per_message", "fixed_chunks", "pieces"):
            times = {}
        result = recall_vectors(self.conn, scope, texts, vecs, x=self.x, floor=floor, thread=thread, mode=mode, **times)
        mapping = self._piece_messages[scope]
        return [
            ScoredHit(g.part_no, h.rank, h.cosine, mapping[h.piece_id])
            for g in result.groups
            for h in g.hits
            if h.piece_id in mapping
        ]


def bar_plot(results: Mapping[str, Mapping[str, float]], metrics: Sequence[str], title: str, path: Any) -> None:
    """Grouped bars: one group per metric, one bar per method (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(results)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(metrics) + 2), 4))
    width = 0.8 / max(1, len(methods))
    for j, m in enumerate(methods):
        xs = [i + j * width for i in range(len(metrics))]
        ax.bar(xs, [results[m].get(k, 0.0) for k in metrics], width, label=m)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(metrics))], list(metrics))
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize="small", ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
