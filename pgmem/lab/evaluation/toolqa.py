"""`pgmem eval toolqa FILE.jsonl`: questions over agent trajectories with tool calls
(format and scoring: the toolqa data README).

Each trajectory is its own thread (and store): its messages are cut into turns at every
user message and ingested through the normal ingest path (`pgmem.ingest.ingest_turns`
for pgmem's pieces; `put_turn` with the baselines' vectors for the others). Questions
are never ingested. Every method's hits are mapped back to the messages their text
came from; a pgmem tool-call source holds the call's arguments and its whole result, so
its pieces come from both the calling assistant message and the tool message.

Metrics, averaged over questions (ranked lists by `pgmem.lab.evaluation.ranking`):

- `top1_turn`: the top hit lies in the gold turn (trivially 1 when a trajectory is one turn).
- `top1_message`: the top hit comes from the gold message. A unit identifies a message
  only if it spans at most two messages (one step: a call and its result); a unit that
  covers more (a whole turn) identifies none, because it cannot point at one message.
- `mrr_message`: reciprocal rank of the first unit from the gold message, within the
  first `depth` units (each unit counted once).

`by_kind` repeats them per `gold_kind`, and for `tool_result` also by gold size
(`tool_result<=1500`, `tool_result>1500` characters).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgmem.blend import DEFAULT_WEIGHT
from pgmem.db import connect
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.lab.evaluation.common import check_split, in_split, progress, temporary_database
from pgmem.lab.evaluation.conversations import (
    METHODS,
    ConversationStore,
    UnitKey,
    bar_plot,
    check_methods,
    check_piece_options,
    check_query,
    word_settings,
)
from pgmem.lab.evaluation.longmemeval import compare_methods
from pgmem.lab.evaluation.ranking import ScoredHit, mean, rank_units, reciprocal_rank, top1
from pgmem.lab.evaluation.stats import intervals
from pgmem.pieces import DEFAULT_MAX_BYTES
from pgmem.sqlfiles import InstallParams
from pgmem.text import read_json_lines
from pgmem.turns import Turn

METRICS = ("top1_turn", "top1_message", "mrr_message")
#: The metrics with intervals and per-question values (top-1 turn is nearly always 1).
CI_METRICS = ("top1_message", "mrr_message")
LONG_RESULT = 1500
MAX_UNIT_MESSAGES = 2


@dataclass(frozen=True)
class ToolQuestion:
    question: str
    gold_message: int
    gold_kind: str
    gold_chars: int


@dataclass(frozen=True)
class Trajectory:
    tid: str
    turns: list[Turn]
    offsets: list[int]  # absolute index of each turn's first message
    questions: list[ToolQuestion]

    def locate(self, message: int) -> tuple[int, int]:
        """(turn index, index within the turn) of an absolute message index."""
        for t in range(len(self.turns) - 1, -1, -1):
            if message >= self.offsets[t]:
                return t, message - self.offsets[t]
        raise InputError(f"{self.tid}: message {message} is before the first turn")


def split_turns(messages: Sequence[Mapping[str, Any]], thread: str) -> tuple[list[Turn], list[int]]:
    """A turn is a user message plus everything after it until the next user message."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "user" or i == 0]
    starts = sorted(set(starts))
    ends = [*starts[1:], len(messages)]
    turns = [
        Turn("eval", thread, n, None, tuple(messages[s:e])) for n, (s, e) in enumerate(zip(starts, ends, strict=True))
    ]
    return turns, starts


def load(path: Path) -> list[Trajectory]:
    if not path.is_file():
        raise InputError(f"{path}: not a file (toolqa JSON Lines expected)")
    out: list[Trajectory] = []
    for where, obj in read_json_lines(path):  # one InputError line: unreadable, not UTF-8, not JSON
        if not isinstance(obj, dict):
            raise InputError(f"{where}: a trajectory is a JSON object, got {type(obj).__name__}")
        messages, questions = obj.get("messages"), obj.get("questions")
        if not isinstance(messages, list) or not messages or not isinstance(questions, list):
            raise InputError(f"{where}: needs a non-empty 'messages' list and a 'questions' list")
        if not all(isinstance(m, dict) for m in messages):
            raise InputError(f"{where}: every message must be a JSON object")
        tid = str(obj.get("id") or f"line{where.rpartition(':')[2]}")
        turns, starts = split_turns(messages, tid)
        qs = []
        for i, q in enumerate(questions):
            try:
                gm = int(q["gold_message"])
                qs.append(ToolQuestion(str(q["question"]), gm, str(q["gold_kind"]), int(q.get("gold_chars", 0))))
            except (KeyError, TypeError, ValueError):
                raise InputError(f"{where}: questions[{i}] needs question, gold_message and gold_kind") from None
            if not 0 <= gm < len(messages):
                raise InputError(f"{where}: questions[{i}].gold_message {gm} is out of range")
        out.append(Trajectory(tid, turns, starts, qs))
    if not out:
        raise InputError(f"{path}: no trajectories")
    return out


def score_question(
    hits: Sequence[ScoredHit[UnitKey]], traj: Trajectory, q: ToolQuestion, *, depth: int
) -> dict[str, float]:
    turn, rel = traj.locate(q.gold_message)
    turn_ranked = rank_units([ScoredHit(h.part_no, h.rank, h.cosine, (h.key[0], h.key[1])) for h in hits])
    unit_ranked = rank_units(hits)

    def is_gold(k: UnitKey) -> bool:
        return k[1] == turn and rel in k[2] and len(k[2]) <= MAX_UNIT_MESSAGES

    return {
        "top1_turn": top1(turn_ranked, {(traj.tid, turn)}),
        "top1_message": top1(unit_ranked, is_gold),
        "mrr_message": reciprocal_rank(unit_ranked, is_gold, depth=depth),
    }


def _kinds(q: ToolQuestion) -> list[str]:
    kinds = [q.gold_kind]
    if q.gold_kind == "tool_result":
        kinds.append(f"tool_result>{LONG_RESULT}" if q.gold_chars > LONG_RESULT else f"tool_result<={LONG_RESULT}")
    return kinds


def run(
    path: Path,
    *,
    server_url: str,
    embedder: Embedder,
    limit: int | None = None,
    seed: int = 0,
    weight: float = DEFAULT_WEIGHT,
    depth: int = 10,
    methods: Sequence[str] = METHODS,
    piece_bytes: int = DEFAULT_MAX_BYTES,
    label: str = "embedded",
    query: str = "parts",
    context: str = "mean",
    word_share: float | None = None,
    word_weight: float | None = None,
    compare: Sequence[Sequence[str]] = (),
    split: str = "all",
    **_: object,
) -> dict[str, Any]:
    """Every method on every trajectory's questions, with 95% bootstrap intervals of the
    message metrics and `compare`: pairs of methods compared question by question. `limit` =
    trajectories (a seeded sample); `piece_bytes` / `label` / `context`: the piece ablations of
    `pgmem.lab.evaluation.conversations`; `query`: the query-split ablation
    (`conversations.query_variant`); `word_share` / `word_weight`: hybrid's settings."""
    check_split(split)
    check_methods(methods)
    check_piece_options(piece_bytes, label, context=context)
    check_query(query)
    trajs = load(path)
    if limit is not None and limit < len(trajs):
        trajs = random.Random(seed).sample(trajs, limit)
    n_q = sum(len(t.questions) for t in trajs)
    progress(f"toolqa: {len(trajs)} trajectories, {n_q} questions")
    rows: list[tuple[list[str], dict[str, dict[str, float]]]] = []
    ids: list[str] = []
    with temporary_database(server_url, InstallParams(embedder.dims, embedder.dims)) as url, connect(url) as conn:
        word_settings(conn, word_share, word_weight)
        for i, traj in enumerate(trajs, 1):
            store = ConversationStore(
                conn,
                embedder,
                f"t{i}",
                weight=weight,
                x=max(30, 3 * depth),
                methods=methods,
                piece_bytes=piece_bytes,
                label=label,
                query=query,
                context=context,
            )
            store.ingest(traj.turns)
            for n, q in enumerate(traj.questions):
                if not in_split(f"{traj.tid}:{n}", split):
                    continue
                ids.append(f"{traj.tid}:{n}")
                qp = store.embed_question(q.question)
                rows.append(
                    (_kinds(q), {m: score_question(store.search(m, qp), traj, q, depth=depth) for m in methods})
                )
            tops = " ".join(f"{m}={mean([r[m]['top1_message'] for _, r in rows]):.2f}" for m in methods)
            progress(f"toolqa: {i}/{len(trajs)} trajectories · top1_message {tops}")

    def summary(sel: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
        return {m: {k: mean([r[m][k] for r in sel]) for k in METRICS} for m in methods}

    kinds = sorted({k for ks, _ in rows for k in ks})
    by_kind = {
        k: {"questions": sum(1 for ks, _ in rows if k in ks), "results": summary([r for ks, r in rows if k in ks])}
        for k in kinds
    }
    per_question = {m: {k: [r[m][k] for _, r in rows] for k in CI_METRICS} for m in methods}
    result: dict[str, Any] = {
        "questions": len(rows),
        "split": split,
        "results": summary([r for _, r in rows]),
        "ci": intervals(per_question),
        "by_kind": by_kind,
        "ids": ids,
        "per_question": per_question,
    }
    if compare:
        result["comparisons"] = compare_methods(result, compare)
    return result


def plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "toolqa.png"]
    bar_plot(result["results"], METRICS, f"ToolQA ({result['questions']} questions)", paths[0])
    by_kind = result.get("by_kind", {})
    if by_kind:
        kinds = list(by_kind)
        per_method: dict[str, dict[str, float]] = {}
        for k in kinds:
            for m, vals in by_kind[k]["results"].items():
                per_method.setdefault(m, {})[k] = vals["top1_message"]
        paths.append(out_dir / "toolqa_by_kind.png")
        bar_plot(per_method, kinds, "ToolQA top1_message by gold kind", paths[1])
    return paths
