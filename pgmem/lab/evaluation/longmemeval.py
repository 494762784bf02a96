"""`pgmem eval longmemeval DIR`: LongMemEval per-question files (see the data README).

Per question: its haystack sessions become the turns of one thread, in file order; a
turn is a user message and the assistant replies after it (a session opening with an
assistant message gives that message a turn of its own); every turn carries its
session's date. `has_answer` is removed before ingest and session ids are never
stored. The question is the query; gold = the turns holding a `has_answer` message.
Abstention questions (`_abs`) are left out, as in the LongMemEval paper. With `limit`,
a seeded sample of the questions is run (file names sort by session count, so the
first N would be biased).

`haystack="pooled"` stores every question's turns (each question its own thread) in one
scope and searches that whole scope for each question: on `oracle/` that is 236 questions
over 2,581 turns of other people's on-topic chats, a harder and far larger test of many
distractors than `s/` (12 questions over 42-55 sessions each). `filler=DIR` adds the haystacks
of another folder's questions to that store (`filler_questions`), never scored: with `s/`, a
store twice as large (17,466 pieces against 8,768), the largest labelled store here.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgmem.blend import DEFAULT_WEIGHT
from pgmem.dates import message_window
from pgmem.db import connect
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.lab.evaluation.common import CachedEmbedder, check_split, in_split, progress, temporary_database
from pgmem.lab.evaluation.conversations import (
    METHODS,
    STORED,
    ConversationStore,
    UnitKey,
    bar_plot,
    check_methods,
    check_piece_options,
    check_query,
    word_settings,
)
from pgmem.lab.evaluation.ranking import (
    RankedUnit,
    ScoredHit,
    coarsen,
    mean,
    ndcg_at_k,
    rank_units,
    recall_all_at_k,
    recall_at_k,
    reciprocal_rank,
    top1,
)
from pgmem.lab.evaluation.stats import intervals, paired
from pgmem.pieces import DEFAULT_MAX_BYTES
from pgmem.recall import floor_for, query_inputs
from pgmem.sqlfiles import InstallParams
from pgmem.text import read_json_file
from pgmem.turns import Turn

_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\(\w+\))?\s+(\d{1,2}):(\d{2})")
METRICS = ("top1", "top1_above_floor", "mrr", "recall_at_5")
#: Metrics given a bootstrap interval and kept per question (for paired comparisons).
CI_METRICS = ("top1", "mrr")
HAYSTACKS = ("own", "pooled")
#: Connections the stores are spread over: one stores while the other's turns are split in
#: Python, so the store phase keeps both cores busy.
STORE_CONNECTIONS = 2


@contextmanager
def eval_connections(
    url: str, *, word_share: float | None = None, word_weight: float | None = None, **more: float | None
) -> Iterator[list[Any]]:
    """`STORE_CONNECTIONS` connections to a throwaway evaluation database, each with the
    hybrid settings of the run (`more`: time_weight, word_keep_rank, word_keep_margin) and
    without waiting for the WAL flush on commit."""
    with ExitStack() as stack:
        conns = [stack.enter_context(connect(url)) for _ in range(STORE_CONNECTIONS)]
        for conn in conns:
            conn.execute("SET synchronous_commit = off")
            word_settings(conn, word_share, word_weight, **more)
        yield conns


class Phases:
    """Wall time of each phase of a run, printed as it ends, with the load average."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.timings: dict[str, float] = {}
        self.load: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, phase: str, note: str = "") -> None:
        now = time.monotonic()
        seconds, load = round(now - self._last, 1), round(os.getloadavg()[0], 2)
        self.timings[f"{phase}_seconds"], self.load[f"{phase}_load"] = seconds, load
        self._last = now
        detail = f" ({note})" if note else ""
        progress(f"{self.what}: {phase} {seconds:.1f}s, load average {load:.1f}{detail}")


@dataclass(frozen=True)
class Question:
    """One retrieval question over its own thread of turns. `sessions` gives each turn's
    session; `user_turns` the turns that open with a user message (what LongMemEval's
    script indexes at turn level); `user_gold` those whose user message has the answer;
    `session_gold` the sessions of `answer_session_ids`."""

    qid: str
    qtype: str
    question: str
    turns: list[Turn]
    gold: frozenset[int]  # turn indexes
    sessions: tuple[int, ...] = ()
    user_turns: frozenset[int] = frozenset()
    user_gold: frozenset[int] = frozenset()
    session_gold: frozenset[int] = frozenset()
    #: When the question was asked (question_date), the message time of time-aware recall.
    date: datetime | None = None

    @property
    def thread(self) -> str:
        return self.turns[0].thread if self.turns else self.qid


#: LongMemEval's own retrieval metrics (its paper's script), at turn and session level.
LME_METRICS = tuple(
    f"{level}_{m}" for level in ("turn", "session") for m in ("recall_all_at_5", "recall_all_at_10", "ndcg_at_10")
)


@dataclass(frozen=True)
class Levels:
    """What LongMemEval's evaluation script scores, for one question: its corpus at turn
    level is the user turns (each keyed by the turn holding it), at session level the
    sessions; the gold are the user turns with `has_answer` and `answer_session_ids`."""

    session_of: Mapping[tuple[str, int], tuple[str, int]]
    user_turns: frozenset[tuple[str, int]]
    turn_gold: frozenset[tuple[str, int]]
    session_gold: frozenset[tuple[str, int]]

    def scores(self, ranked: Sequence[RankedUnit[tuple[str, int]]]) -> dict[str, float | None]:
        """The metrics of `LME_METRICS`; None at a level with no gold (an answer said by the
        assistant only has no gold user turn), so that level's means leave it out. A hit on
        an assistant reply counts as its turn's user turn, as the script's key-value index
        would return it; a turn opening with an assistant message is not in its corpus."""
        out: dict[str, float | None] = {}
        by_level = {
            "turn": (coarsen(ranked, lambda k: k if k in self.user_turns else None), self.turn_gold),
            "session": (coarsen(ranked, self.session_of.get), self.session_gold),
        }
        for level, (units, gold) in by_level.items():
            for k in (5, 10):
                out[f"{level}_recall_all_at_{k}"] = recall_all_at_k(units, gold, k) if gold else None
            out[f"{level}_ndcg_at_10"] = ndcg_at_k(units, gold, 10) if gold else None
        return out


def levels(questions: Sequence[Question], scored: Sequence[Question]) -> list[Levels]:
    """`Levels` of each scored question, over the turns of every question (the pooled
    haystack holds them all; its own haystack only ever returns its own)."""
    session_of = {(q.thread, i): (q.thread, s) for q in questions for i, s in enumerate(q.sessions)}
    user_turns = frozenset((q.thread, i) for q in questions for i in q.user_turns)
    return [
        Levels(
            session_of,
            user_turns,
            frozenset((q.thread, i) for i in q.user_gold),
            frozenset((q.thread, s) for s in q.session_gold),
        )
        for q in scored
    ]


def parse_date(value: object, where: str) -> datetime:
    """LongMemEval dates look like `2023/05/27 (Sat) 22:10`."""
    m = _DATE.match(value) if isinstance(value, str) else None
    if not m:
        raise InputError(f"{where}: date {value!r} is not like '2023/05/27 (Sat) 22:10'")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    try:
        return datetime(y, mo, d, h, mi, tzinfo=UTC)
    except ValueError as exc:  # 2023/13/45: no such day
        raise InputError(f"{where}: date {value!r} is no time ({exc})") from None


@dataclass(frozen=True)
class Paired:
    """`pair_turns`' result: the turns, the gold turns (any message with `has_answer`),
    each turn's session, the turns opening with a user message and those whose user
    message has the answer."""

    turns: list[Turn]
    gold: set[int]
    sessions: tuple[int, ...]
    user_turns: frozenset[int]
    user_gold: frozenset[int]


def pair_turns(
    sessions: Sequence[Sequence[Mapping[str, Any]]], dates: Sequence[datetime], *, thread: str, scope: str = "eval"
) -> Paired:
    """Turns of one thread (a user message + the replies after it). Only role and content
    are kept."""
    turns: list[Turn] = []
    gold: set[int] = set()
    session_of: list[int] = []
    user: set[int] = set()
    user_gold: set[int] = set()
    for s, (session, date) in enumerate(zip(sessions, dates, strict=True)):
        groups: list[list[Mapping[str, Any]]] = []
        for m in session:
            if m.get("role") == "user" or not groups:
                groups.append([])
            groups[-1].append(m)
        for group in groups:
            if any(m.get("has_answer") for m in group):
                gold.add(len(turns))
            if group[0].get("role") == "user":
                user.add(len(turns))
                if group[0].get("has_answer"):
                    user_gold.add(len(turns))
            messages = tuple({"role": str(m.get("role")), "content": m.get("content") or ""} for m in group)
            session_of.append(s)
            turns.append(Turn(scope, thread, len(turns), date, messages))
    return Paired(turns, gold, tuple(session_of), frozenset(user), frozenset(user_gold))


def load_question(path: Path) -> Question | None:
    """One question file, or None for an abstention question or one without evidence."""
    obj = read_json_file(path)  # one InputError line: unreadable, not UTF-8, not JSON
    if not isinstance(obj, dict):
        raise InputError(f"{path}: a LongMemEval question is a JSON object, got {type(obj).__name__}")
    for k in ("question_id", "question", "haystack_sessions", "haystack_dates"):
        if k not in obj:
            raise InputError(f"{path}: missing field {k!r}")
    qid = str(obj["question_id"])
    if qid.endswith("_abs"):
        return None
    sessions, raw_dates = obj["haystack_sessions"], obj["haystack_dates"]
    if not isinstance(sessions, list) or not isinstance(raw_dates, list) or len(sessions) != len(raw_dates):
        raise InputError(f"{path}: haystack_sessions and haystack_dates must be lists of the same length")
    for i, session in enumerate(sessions):
        if not isinstance(session, list) or not all(isinstance(m, dict) for m in session):
            raise InputError(f"{path}: haystack_sessions[{i}] must be a list of message objects")
    dates = [parse_date(d, f"{path}: haystack_dates[{i}]") for i, d in enumerate(raw_dates)]
    paired = pair_turns(sessions, dates, thread=qid)
    if not paired.gold:
        return None
    try:
        asked = parse_date(obj.get("question_date"), f"{path}: question_date")
    except InputError:
        asked = None
    ids, answer_ids = obj.get("haystack_session_ids"), obj.get("answer_session_ids")
    session_gold = (
        frozenset(i for i, sid in enumerate(ids) if sid in set(answer_ids))
        if isinstance(ids, list) and isinstance(answer_ids, list) and len(ids) == len(sessions)
        else frozenset()
    )
    return Question(
        qid,
        str(obj.get("question_type", "")),
        str(obj["question"]),
        paired.turns,
        frozenset(paired.gold),
        paired.sessions,
        paired.user_turns,
        paired.user_gold,
        session_gold,
        asked,
    )


def filler_questions(path: Path) -> list[Question]:
    """The haystacks of a folder's questions as threads of their own ("filler:<id>"), to be
    stored beside a pooled haystack and never scored: without their answer sessions or any
    turn holding evidence, so that no filler turn answers a question (`s/` holds the oracle
    questions' own evidence among its filler)."""
    out = []
    for q in load_dir(path):
        thread = f"filler:{q.qid}"
        keep = [
            i
            for i in range(len(q.turns))
            if i not in q.gold and (q.sessions[i] if q.sessions else -1) not in q.session_gold
        ]
        index = {i: j for j, i in enumerate(keep)}
        turns = [Turn(q.turns[i].scope, thread, j, q.turns[i].time, q.turns[i].messages) for i, j in index.items()]
        if turns:
            sessions = tuple(q.sessions[i] for i in keep) if q.sessions else ()
            user = frozenset(index[i] for i in q.user_turns if i in index)
            out.append(Question(thread, "filler", q.question, turns, frozenset(), sessions, user))
    return out


def load_dir(path: Path, *, limit: int | None = None, seed: int = 0) -> list[Question]:
    """The scored questions of a folder of per-question files (a seeded sample with `limit`)."""
    if not path.is_dir():
        raise InputError(f"{path}: not a folder of LongMemEval question files")
    files = sorted(path.glob("*.json"))
    if not files:
        raise InputError(f"{path}: no *.json question files")
    if limit is not None and limit < len(files):
        if limit < 1:
            raise InputError(f"limit must be positive, got {limit}")
        # Sample files (cheap) and load only what is needed; _abs files are skipped.
        order = files[:]
        random.Random(seed).shuffle(order)
        out: list[Question] = []
        for f in order:
            q = load_question(f)
            if q is not None:
                out.append(q)
                if len(out) == limit:
                    break
        return out
    return [q for q in (load_question(f) for f in files) if q is not None]


def turn_hits(hits: Sequence[ScoredHit[UnitKey]]) -> list[ScoredHit[tuple[str, int]]]:
    return [ScoredHit(h.part_no, h.rank, h.cosine, (h.key[0], h.key[1])) for h in hits]


def score_turns(
    ranked: Sequence[RankedUnit[tuple[str, int]]], gold: frozenset[tuple[str, int]], *, floor: float, depth: int
) -> dict[str, float]:
    return {
        "top1": top1(ranked, gold),
        "top1_above_floor": top1(ranked, gold, floor=floor),
        "mrr": reciprocal_rank(ranked, gold, depth=depth),
        "recall_at_5": recall_at_k(ranked, gold, 5),
    }


def evaluate_threads(
    conns: Sequence[Any],
    embedder: Embedder,
    items: Sequence[tuple[str, str, Sequence[Turn], frozenset[tuple[str, int]]]],
    *,
    methods: Sequence[str],
    floor: float,
    weight: float,
    depth: int,
    what: str,
    ids: Sequence[str] | None = None,
    query: str = "parts",
    piece_bytes: int = DEFAULT_MAX_BYTES,
    label: str = "embedded",
    short_turns: str = "per_role",
    context: str = "mean",
    levels: Sequence[Levels] | None = None,
    times: Sequence[Mapping[str, Any]] | None = None,
    types: Sequence[str] | None = None,
    latest: Sequence[frozenset[tuple[str, int]]] | None = None,
) -> dict[str, Any]:
    """Shared by LongMemEval and LoCoMo: items are (store name, question, turns, gold
    (thread, turn) keys); a store is ingested once and reused by the questions after it.
    `levels` (one per item) adds LongMemEval's own metrics (`LME_METRICS`, `Levels`);
    `types` (one per item) adds `by_type`: top-1 and MRR per question type and method.
    Stores are dealt round-robin over `conns` (`eval_connections`) and stored concurrently,
    one thread per connection; each store's searches run on its connection.

    In phases, each timed: `prepare` (split every store's turns for every method),
    `embed` (every distinct text of every method and question in one pass through the
    cache, so nothing is embedded twice), `store` (one transaction per store and method),
    `search` (one `memory_recall` per question and method) and `score`. Returns the
    means (`results`), their bootstrap intervals (`ci`), the per-question values
    (`per_question`, in the order of `ids`), `timings` (seconds) and the load average.
    `times`: per item, memory_recall's time arguments for pgmem's methods; `types`: per
    item, its question type (top-1 and MRR by type, `by_type`); `latest`: per item, its gold
    turns of the latest time (top1_latest: the first hit is one of them, the up-to-date fact of
    a knowledge update). top1_above_floor counts
    only the gold turns a second search, at the floor, returns (SQL applies the floor, with its
    exception for a strong word hit)."""
    emb = embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder, None)
    clock = Phases(what)
    stores: dict[str, tuple[ConversationStore, Sequence[Turn]]] = {}
    for name, _, turns, _ in items:
        if name not in stores:
            stores[name] = (
                ConversationStore(
                    conns[len(stores) % len(conns)],
                    emb,
                    name,
                    weight=weight,
                    x=max(30, 3 * depth),
                    methods=methods,
                    query=query,
                    piece_bytes=piece_bytes,
                    label=label,
                    short_turns=short_turns,
                    context=context,
                ),
                turns,
            )
    texts = [t for store, turns in stores.values() for t in store.texts(turns)]
    queries = [t for _, question, _, _ in items for t in query_inputs(question)[1]]
    clock.lap("prepare", f"{len(texts) + len(queries)} texts to embed, {len(set(texts)) + len(set(queries))} distinct")
    before = emb.embedded
    emb.embed(texts)
    emb.embed_queries(queries)
    clock.lap("embed", f"{emb.embedded - before} texts sent to the model")

    stored = 0
    count_lock = threading.Lock()

    def store_all(conn: Any) -> None:
        nonlocal stored
        for store, turns in stores.values():
            if store.conn is conn:
                store.ingest(turns)
                with count_lock:
                    stored += 1
                    if stored % 50 == 0 or stored == len(stores):
                        progress(f"{what}: stored {stored}/{len(stores)} threads")

    with ThreadPoolExecutor(len(conns), thread_name_prefix="pgmem-eval-store") as pool:
        for done in as_completed([pool.submit(store_all, c) for c in conns]):
            done.result()
    clock.lap("store", f"{len(stores)} threads x {len(store_methods(methods))} stored methods")
    per: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
    lme: dict[str, list[dict[str, float | None]]] = {m: [] for m in methods}
    for i, (name, question, _, gold) in enumerate(items):
        store = stores[name][0]
        q = store.embed_question(question)
        kw = times[i] if times is not None else {}
        for m in methods:
            hits = store.search(m, q, **kw)
            ranked = rank_units(turn_hits(hits))
            scores = score_turns(ranked, gold, floor=floor, depth=depth)
            # Top-1 above the floor: the first hit is gold and the floor keeps it (SQL's floor,
            # with its exception for a strong word hit).
            kept = {u.key for u in rank_units(turn_hits(store.search(m, q, floor=floor, **kw)))}
            scores["top1_above_floor"] = top1(ranked, gold & kept)
            if latest is not None:
                scores["top1_latest"] = top1(ranked, latest[i])
            if len(stores) > 1:
                # The question over the next item's own history (a LongMemEval history is about
                # its own question): nothing there is related, and the floor should hide it all.
                other = stores[items[(i + 1) % len(items)][0]][0]
                scores["unrelated_empty"] = float(not other.search(m, q, floor=floor, **kw))
            per[m].append(scores)
            if levels is not None:
                lme[m].append(levels[i].scores(ranked))
    clock.lap("search", f"{len(items)} questions x {len(methods)} methods")
    results = {
        m: {k: mean([r[k] for r in per[m]]) for k in (*METRICS, "unrelated_empty", "top1_latest") if k in per[m][0]}
        for m in methods
    }
    extra: dict[str, Any] = {}
    if levels is not None:
        for m in methods:
            for k in LME_METRICS:
                results[m][k] = mean([v for r in lme[m] if (v := r[k]) is not None])
        extra["lme_questions"] = {
            level: sum(1 for r in lme[methods[0]] if r[f"{level}_ndcg_at_10"] is not None)
            for level in ("turn", "session")
        }
    per_keys = [
        k
        for k in (*CI_METRICS, "top1_above_floor", "top1_latest", "unrelated_empty")
        if per[methods[0]] and k in per[methods[0]][0]
    ]
    per_question = {m: {k: [r[k] for r in per[m]] for k in per_keys} for m in methods}
    tops = " ".join(f"{m}={results[m]['top1']:.3f}" for m in methods)
    clock.lap("score", f"top1 {tops}")
    by_type: dict[str, dict[str, Any]] = {}
    for t in sorted(set(types or ())):
        idx = [i for i, u in enumerate(types or ()) if u == t]
        by_type[t] = {
            "questions": len(idx),
            **{
                m: {k: mean([per[m][i][k] for i in idx]) for k in ("top1", "mrr", "top1_latest") if k in per[m][0]}
                for m in methods
            },
        }
    return {
        "results": results,
        **extra,
        **({"by_type": by_type} if by_type else {}),
        "ci": intervals(per_question),
        "timings": clock.timings,
        "load_average": clock.load,
        "ids": list(ids) if ids is not None else [str(i) for i in range(len(items))],
        "per_question": per_question,
    }


def compare_methods(result: Mapping[str, Any], pairs: Sequence[Sequence[str]]) -> dict[str, dict[str, Any]]:
    """Paired comparisons `A vs B` for each pair, on every metric both sides have
    per question (`per_question`). A side is a method of `result` or `FILE.json:METHOD` (a
    method of an earlier run's `--json`/`--out` output); questions are matched by id, and
    only questions in both runs are compared. Shared by every suite with per-question
    values (LongMemEval, LoCoMo, coverage)."""
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise InputError(f"--compare takes two methods, got {list(pair)}")
        sides = [_side(result, name) for name in pair]
        common = [q for q in sides[0] if q in sides[1]]
        if not common:
            raise InputError(f"--compare {pair[0]} {pair[1]}: no question in common")
        row: dict[str, Any] = {"questions": len(common)}
        for k in [k for k in sides[0][common[0]] if k in sides[1][common[0]]]:
            row[k] = paired([sides[0][q][k] for q in common], [sides[1][q][k] for q in common])
        out[f"{pair[0]} vs {pair[1]}"] = row
    return out


def _side(result: Mapping[str, Any], name: str) -> dict[str, dict[str, float]]:
    source: Mapping[str, Any] = result
    method = name
    if name not in result.get("per_question", {}) and ":" in name:
        path, _, method = name.rpartition(":")
        source = compare_file(path)
    per = source.get("per_question", {}).get(method)
    if per is None:
        raise InputError(f"--compare: no per-question values for method {method!r} in {name}")
    ids = source["ids"]
    if not isinstance(per, dict) or not all(isinstance(v, list) and len(v) == len(ids) for v in per.values()):
        raise InputError(f"--compare {name}: per_question[{method!r}] must map each metric to a value per id")
    return {q: {k: values[i] for k, values in per.items()} for i, q in enumerate(ids)}


def compare_file(path: str | Path) -> dict[str, Any]:
    """An earlier run's `--json`/`--out` output, as `--compare FILE.json:METHOD` reads it: an object
    with a list of question `ids` and a `per_question` object; else an InputError of one line."""
    try:
        source = read_json_file(path)
    except InputError as exc:
        raise InputError(f"--compare: {exc}") from None
    if (
        not isinstance(source, dict)
        or not isinstance(source.get("ids"), list)
        or not all(isinstance(q, str) for q in source["ids"])
        or not isinstance(source.get("per_question"), dict)
    ):
        raise InputError(f"--compare: {path} is no run's --json output (an object with ids and per_question)")
    return source


def store_methods(methods: Sequence[str]) -> list[str]:
    want = set(methods) | ({"blended"} if "hybrid" in methods else set())
    return [m for m in STORED if m in want]


def run(
    path: Path,
    *,
    server_url: str,
    embedder: Embedder,
    limit: int | None = None,
    seed: int = 0,
    floor: float | None = None,
    weight: float = DEFAULT_WEIGHT,
    depth: int = 10,
    methods: Sequence[str] = METHODS,
    compare: Sequence[Sequence[str]] = (),
    query: str = "parts",
    word_share: float | None = None,
    word_weight: float | None = None,
    piece_bytes: int = DEFAULT_MAX_BYTES,
    label: str = "embedded",
    short_turns: str = "per_role",
    context: str = "mean",
    haystack: str = "own",
    split: str = "all",
    dates: bool = True,
    recency: float | None = None,
    time_weight: float | None = None,
    word_keep_rank: int | None = None,
    word_keep_margin: float | None = None,
    recency_depth: int | None = None,
    word_postings_cap: int | None = None,
    floor_head: int | None = None,
    window_head: int | None = None,
    types: Sequence[str] | None = None,
    filler: str | None = None,
    **_: object,
) -> dict[str, Any]:
    """Run every method on the folder's questions; the JSON object of the issue. `compare`:
    pairs of methods to compare question by question (see `compare_methods`); `query`:
    "parts" (pgmem's query), "split" or "whole" (`conversations.query_variant`);
    `word_share` / `word_weight`: hybrid's pgmem.word_share / pgmem.word_weight settings;
    `piece_bytes` / `label` / `short_turns` / `context`: the piece ablations of
    `pgmem.lab.evaluation.conversations`; `haystack`: each question searches its own
    thread ("own") or every question's turns ("pooled", module docstring); `split`: score only
    the questions of one fixed half (`common.half`), "tune" or "confirm" (a pooled haystack
    still holds every question's turns). `dates`: each question's date is its message time,
    so its date expressions give a time window (`pgmem.dates.message_window`; False: none);
    `recency`: memory_recall's recency (None: its default); `time_weight`, `word_keep_rank`,
    `word_keep_margin`, `recency_depth`, `floor_head`, `window_head`,
    `word_postings_cap`: the pgmem.* settings of the same names
    (None: the defaults, the model's where the registry holds them); `floor`: the floor of
    top1_above_floor and unrelated_empty (None: the model's, `floor_for`); `types`: score only
    questions of these types (a pooled haystack still holds every question's turns); `filler`:
    a folder of LongMemEval questions whose haystacks the pooled store holds too
    (`filler_questions`)."""
    check_split(split)
    check_methods(methods)
    check_query(query)
    floor = floor_for(embedder) if floor is None else floor
    check_piece_options(piece_bytes, label, short_turns, context)
    if haystack not in HAYSTACKS:
        raise InputError(f"haystack must be one of {HAYSTACKS}, got {haystack!r}")
    questions = load_dir(path, limit=limit, seed=seed)
    progress(f"longmemeval: {len(questions)} questions, {sum(len(q.turns) for q in questions)} turns")
    if haystack == "pooled" and len({q.thread for q in questions}) < len(questions):
        raise InputError("haystack=pooled needs each question in its own thread (distinct question ids)")
    if filler is not None and haystack != "pooled":
        raise InputError("filler is stored beside a pooled haystack: give haystack=pooled too")
    extra = filler_questions(Path(str(filler))) if filler is not None else []
    if extra:
        progress(f"longmemeval: filler of {len(extra)} haystacks, {sum(len(q.turns) for q in extra)} turns")
    pool = [t for q in [*questions, *extra] for t in q.turns]
    if isinstance(types, str):
        types = [types]
    scored = [q for q in questions if in_split(q.qid, split) and (types is None or q.qtype in types)]
    if not scored:
        raise InputError(f"{path}: no question in the {split} half")
    items = [
        (
            "pool" if haystack == "pooled" else f"q{i}",
            q.question,
            pool if haystack == "pooled" else q.turns,
            frozenset((q.thread, t) for t in q.gold),
        )
        for i, q in enumerate(scored)
    ]
    times = [question_times(q, dates=dates, recency=recency) for q in scored]
    t0 = time.monotonic()
    with (
        temporary_database(server_url, InstallParams(embedder.dims, embedder.dims)) as url,
        eval_connections(
            url,
            word_share=word_share,
            word_weight=word_weight,
            time_weight=time_weight,
            word_keep_rank=word_keep_rank,
            word_keep_margin=word_keep_margin,
            recency_depth=recency_depth,
            word_postings_cap=word_postings_cap,
            floor_head=floor_head,
            window_head=window_head,
        ) as conns,
    ):
        out = evaluate_threads(
            conns,
            embedder,
            items,
            methods=methods,
            floor=floor,
            weight=weight,
            depth=depth,
            what="longmemeval",
            ids=[q.qid for q in scored],
            query=query,
            piece_bytes=piece_bytes,
            label=label,
            short_turns=short_turns,
            context=context,
            levels=levels([*questions, *extra], scored),
            times=times,
            types=[q.qtype for q in scored],
            latest=[latest_gold(q) for q in scored],
        )
    out["timings"]["total_seconds"] = round(time.monotonic() - t0, 1)
    result = {"questions": len(scored), "split": split, **out}
    if compare:
        result["comparisons"] = compare_methods(result, compare)
    return result


def latest_gold(q: Question) -> frozenset[tuple[str, int]]:
    """The question's gold turns of the latest time among its gold turns."""
    last = max((t for t in (q.turns[i].time for i in q.gold) if t is not None), default=None)
    return frozenset((q.thread, i) for i in q.gold if q.turns[i].time == last)


def question_times(q: Question, *, dates: bool, recency: float | None) -> dict[str, Any]:
    """memory_recall's time arguments for a question: the window of its date expressions
    relative to its date (`dates`), and `recency` when given."""
    out: dict[str, Any] = {} if recency is None else {"recency": float(recency)}
    window = message_window(q.question, q.date) if dates else None
    if window is not None:
        out["time_from"], out["time_to"] = window.start, window.end
    return out


def plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "longmemeval.png"
    bar_plot(result["results"], METRICS, f"LongMemEval ({result['questions']} questions)", path)
    return [path]
