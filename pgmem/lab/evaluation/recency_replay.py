"""Recency settings replayed offline: `python -m pgmem.lab.evaluation.recency_replay DIR`.

memory_recall's recency reorders only a part's first `pgmem.recency_depth` hits, so one hybrid
recall per question with recency off (x = 30, no floor) holds everything any recency setting
can do. `dump` runs that recall once per question of a LongMemEval folder (one half, own or
pooled haystack) and keeps each hit's part, rank, cosine, turn, turn time and whether it is an
assistant's reply; `replay` applies a recency rule to those hits the way SQL does and `score`
reads top-1 and top-1 latest by question type. A grid of bands and depths then takes seconds,
not a pooled store per setting. On the oracle set's tuning half it reproduced `pgmem eval
longmemeval` exactly (first hits gold of 121 at 0.05 over 2, 0.1 over 3, and 0.15 over 4 with
replies staying: own 74, 78, 78; pooled 59, 52, 59); tests/test_eval_recency_replay.py checks
it against memory_recall. `replies_move=False` is the rule of e14ef39 (reverted), which
memory_recall does not have.

Tuning-half use only: looking at the confirmation half's questions one by one is what the
halves forbid (docs/evaluation.md).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from pgmem.db import scoped
from pgmem.lab.evaluation.ranking import ScoredHit, rank_units, top1
from pgmem.recall import recall_vectors

Key = tuple[str, int]


@dataclass(frozen=True)
class Hit:
    """One hit of one part, as memory_recall returned it with recency off."""

    part_no: int
    rank: int
    cosine: float
    key: Key
    time: datetime | None
    assistant: bool


@dataclass(frozen=True)
class Asked:
    """One question's hits with recency off, and what scores them."""

    qid: str
    qtype: str
    hits: tuple[Hit, ...]
    gold: frozenset[Key]
    latest: frozenset[Key]
    #: memory_recall turns recency off under a time window.
    windowed: bool


@dataclass(frozen=True)
class Rule:
    """A recency setting: the band, the depth (pgmem.recency_depth) and whether an assistant's
    reply may move up (the first hit keeps its place in the band whatever its source)."""

    band: float = 0.05
    depth: int = 2
    replies_move: bool = True


def replay(hits: Sequence[Hit], rule: Rule) -> list[Hit]:
    """`hits` reranked as memory_recall's recency would: per part, among the first `depth`
    hits, those whose cosine is within `band` of the first hit's keep the ranks they hold, the
    most recent turn taking the best (equal or no time: rank order; no time last)."""
    if rule.band <= 0:
        return list(hits)
    by_part: dict[int, list[Hit]] = defaultdict(list)
    for h in hits:
        by_part[h.part_no].append(h)
    out: list[Hit] = []
    for part in by_part.values():
        part.sort(key=lambda h: h.rank)
        first = part[0]
        band = [
            h
            for h in part[: rule.depth]
            if abs(first.cosine - h.cosine) <= rule.band and (h is first or rule.replies_move or not h.assistant)
        ]
        newest = sorted(band, key=lambda h: (h.time is None, -(h.time.timestamp() if h.time else 0.0), h.rank))
        moved = {id(h): r for h, r in zip(newest, sorted(h.rank for h in band), strict=True)}
        out += [replace(h, rank=moved.get(id(h), h.rank)) for h in part]
    return out


def score(questions: Iterable[Asked], rule: Rule) -> dict[str, dict[str, float]]:
    """Top-1 and top-1 latest (counts of questions) and the question count, by question type
    and over all ("all")."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"questions": 0, "top1": 0.0, "top1_latest": 0.0})
    for q in questions:
        hits = q.hits if q.windowed else replay(q.hits, rule)
        ranked = rank_units(ScoredHit(h.part_no, h.rank, h.cosine, h.key) for h in hits)
        for t in (q.qtype, "all"):
            out[t]["questions"] += 1
            out[t]["top1"] += top1(ranked, q.gold)
            out[t]["top1_latest"] += top1(ranked, q.latest)
    return dict(sorted(out.items()))


def dump(path: Path, *, server_url: str, embedder: Any, split: str, haystack: str = "own") -> list[Asked]:
    """One hybrid recall per question of the half, recency off, no floor, x = 30 (what the
    evaluation asks for), on each question's own history or over the pooled store."""
    from pgmem.db import connect
    from pgmem.lab.evaluation.common import in_split, temporary_database
    from pgmem.lab.evaluation.conversations import ConversationStore, word_settings
    from pgmem.lab.evaluation.longmemeval import latest_gold, load_dir, question_times
    from pgmem.sqlfiles import InstallParams

    questions = load_dir(path)
    times = {(q.thread, i): t.time for q in questions for i, t in enumerate(q.turns)}
    scored = [q for q in questions if in_split(q.qid, split)]
    out: list[Asked] = []
    with temporary_database(server_url, InstallParams(embedder.dims, embedder.dims)) as url, connect(url) as conn:
        word_settings(conn, None, None)
        pooled = None
        if haystack == "pooled":
            pooled = ConversationStore(conn, embedder, "pool", x=30, methods=["hybrid"])
            pooled.ingest([t for q in questions for t in q.turns])
        for i, q in enumerate(scored):
            store = pooled
            if store is None:
                store = ConversationStore(conn, embedder, f"q{i}", x=30, methods=["hybrid"])
                store.ingest(q.turns)
            parts = store.embed_question(q.question)
            kw = question_times(q, dates=True, recency=0.0)
            scope = store.scope("hybrid")
            result = recall_vectors(conn, scope, parts.texts, parts.blended, x=30, floor=-1.0, mode="hybrid", **kw)
            found = [(g.part_no, h) for g in result.groups for h in g.hits]
            with scoped(conn, scope):
                rows = conn.execute(
                    "SELECT piece_id, unit_kind FROM pgmem.piece WHERE scope_id = %s AND piece_id = ANY(%s)",
                    (scope, [h.piece_id for _, h in found]),
                ).fetchall()
            replies = {int(str(pid)) for pid, kind in rows if kind == "assistant"}
            hits = []
            for part_no, h in found:
                key = (str(h.thread_id), int(h.turn_index or 0))
                hits.append(Hit(part_no, h.rank, h.cosine, key, times.get(key), h.piece_id in replies))
            gold = frozenset((q.thread, t) for t in q.gold)
            windowed = "time_from" in kw or "time_to" in kw
            out.append(Asked(q.qid, q.qtype, tuple(hits), gold, latest_gold(q), windowed))
    return out


def grid(
    questions: Sequence[Asked], bands: Sequence[float], depths: Sequence[int], *, replies_move: Sequence[bool]
) -> list[tuple[Rule, dict[str, dict[str, float]]]]:
    """`score` of every rule of the grid."""
    rules = [Rule(band, depth, move) for move in replies_move for depth in depths for band in bands]
    return [(rule, score(questions, rule)) for rule in rules]


def main(argv: Sequence[str] | None = None) -> int:
    from pgmem.cli.common import settings
    from pgmem.db import database_url
    from pgmem.embedders import from_settings
    from pgmem.lab.evaluation.common import CachedEmbedder

    ap = argparse.ArgumentParser(prog="python -m pgmem.lab.evaluation.recency_replay", description=__doc__)
    ap.add_argument("path", type=Path, help="a LongMemEval folder of per-question files")
    ap.add_argument("--split", default="tune", choices=["tune", "confirm", "all"])
    ap.add_argument("--haystack", default="own", choices=["own", "pooled"])
    ap.add_argument("--bands", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.15])
    ap.add_argument("--depths", type=int, nargs="+", default=[2, 3, 4])
    args = ap.parse_args(argv)
    s = settings()
    embedder = CachedEmbedder(from_settings(s, plane="piece"), s.home / "cache")
    asked = dump(args.path, server_url=database_url(s), embedder=embedder, split=args.split, haystack=args.haystack)
    for rule, by_type in grid(asked, args.bands, args.depths, replies_move=[True, False]):
        cells = " ".join(f"{t}={v['top1']:g}/{v['top1_latest']:g}" for t, v in by_type.items())
        print(f"band {rule.band:<4} depth {rule.depth} replies {'move' if rule.replies_move else 'stay'}: {cells}")
    print(f"(top-1 / top-1 latest, questions of {len(asked)}, {args.split} half, {args.haystack} haystack)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
