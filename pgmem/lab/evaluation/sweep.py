"""`pgmem eval sweep DIR`: tune the blend weight and the cosine floor on development
data (LongMemEval per-question files), for the embedder in use.

Weight. Each question's haystack is ingested once as labelled pieces (its own scope);
for every weight w, `pgmem.reblend` rewrites the stored vectors in SQL from the kept
raw and context vectors (no new embedding), and the query parts are re-blended with
the same w from the raw part and whole-message vectors already computed. Reported per
weight: top1 and mrr over turns (ranking rules of `pgmem.lab.evaluation.ranking`).

Floor (per model, at `floor_weight`, 0.8 by default). A floor must let the right memory
through and keep wrong ones out, so three query sets are scored:

- positives: each question against its own haystack (its top hit may be right or wrong);
- negatives: each question against another question's haystack (nothing there is
  relevant, so anything returned is wrong);
- mixed: messages of two or three questions plus, with `paragraph` (default), a long
  unrelated paragraph (as in the coverage suite), each question
  searched in its own haystack with the message's blended parts: the cosine of the
  best gold hit of any part, i.e. what a floor must let through when a question shares
  its message with other subjects (the seed's voice-turn case).

For a floor f, over the top hits that clear it: `precision` = share that come from a
haystack holding the answer (a positive query), i.e. how well the floor tells "there is
related memory" from "there is none" (a wrong top hit in the right haystack is a ranking
error that no floor can fix); `top1_above_floor` = right top hits >= f / positives;
`negatives_above` = share of negatives returning anything; `mixed_gold_kept` = share of
mixed-message questions whose best gold hit is >= f. Two floors are reported: `floor`,
the lowest f whose precision reaches `precision` (the chosen target), and `floor_keep`,
the highest f that still keeps `keep` of the mixed-message gold hits.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pgmem.blend import DEFAULT_WEIGHT, blend
from pgmem.db import connect, scoped
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.ingest import ingest_turns
from pgmem.lab.evaluation.common import check_split, in_split, progress, temporary_database
from pgmem.lab.evaluation.coverage import build_messages, sample_questions
from pgmem.lab.evaluation.ranking import ScoredHit, mean, rank_units, reciprocal_rank, top1
from pgmem.recall import QueryParts, embed_query, recall_vectors
from pgmem.sqlfiles import InstallParams
from pgmem.turns import Turn

WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
FLOORS = tuple(round(0.01 * i, 2) for i in range(0, 81))


def _parts(q: QueryParts, w: float) -> Any:
    return blend(q.raw, np.broadcast_to(q.whole, q.raw.shape).copy(), w)


def floor_curve(
    positives: Sequence[tuple[float, bool]],
    negatives: Sequence[float],
    mixed: Sequence[float | None],
    floors: Sequence[float] = FLOORS,
) -> list[dict[str, float]]:
    """Per floor: precision, top1_above_floor, negatives_above, mixed_gold_kept.
    `positives` = (top cosine, top is gold); `negatives` = top cosines; `mixed` = best
    gold cosine per mixed-message question (None if no gold hit came back)."""
    out = []
    for f in floors:
        right = sum(1 for c, ok in positives if ok and c >= f)
        related = sum(1 for c, _ in positives if c >= f)
        kept = related + sum(1 for c in negatives if c >= f)
        out.append(
            {
                "floor": f,
                "precision": related / kept if kept else 1.0,
                "top1_above_floor": right / len(positives) if positives else 0.0,
                "negatives_above": sum(1 for c in negatives if c >= f) / len(negatives) if negatives else 0.0,
                "mixed_gold_kept": sum(1 for c in mixed if c is not None and c >= f) / len(mixed) if mixed else 0.0,
            }
        )
    return out


def floor_for_precision(curve: Sequence[dict[str, float]], target: float) -> dict[str, float] | None:
    """The lowest floor whose precision reaches `target` (None if none does)."""
    for row in curve:
        if row["precision"] >= target:
            return row
    return None


def floor_for_keep(curve: Sequence[dict[str, float]], keep: float) -> dict[str, float] | None:
    """The highest floor that still keeps `keep` of the mixed-message gold hits."""
    best = None
    for row in curve:
        if row["mixed_gold_kept"] >= keep:
            best = row
    return best


def run(
    path: Path,
    *,
    server_url: str,
    embedder: Embedder,
    limit: int | None = None,
    seed: int = 0,
    weights: Sequence[float] = WEIGHTS,
    floor_weight: float = DEFAULT_WEIGHT,
    precision: float = 0.9,
    keep: float = 0.95,
    paragraph: bool = True,
    messages: int = 100,
    x: int = 30,
    depth: int = 10,
    split: str = "all",
    **_: object,
) -> dict[str, Any]:
    if not weights or any(not 0.0 <= w <= 1.0 for w in weights):
        raise InputError(f"weights must be between 0 and 1, got {list(weights)}")
    if not 0.0 < precision <= 1.0:
        raise InputError(f"precision must be in (0, 1], got {precision}")
    all_w = sorted(set(weights) | {floor_weight})
    check_split(split)
    questions, paragraphs = sample_questions(path, limit=limit, seed=seed, paragraph=paragraph)
    questions = [q for q in questions if in_split(q.qid, split)]
    if len(questions) < 2:
        raise InputError(f"{path}: the sweep needs at least two questions")
    n = len(questions)
    progress(f"sweep: {n} questions, weights {all_w}")
    per_w: dict[float, dict[str, list[float]]] = {w: {"top1": [], "mrr": []} for w in all_w}
    positives: list[tuple[float, bool]] = []
    negatives: list[float] = []
    mixed: list[float | None] = []
    gold = [frozenset((q.qid, t) for t in q.gold) for q in questions]
    mix = build_messages(questions, paragraphs, count=messages, rng=random.Random(seed))
    with temporary_database(server_url, InstallParams(embedder.dims, embedder.dims)) as url, connect(url) as conn:
        for i, q in enumerate(questions):
            turns = [Turn(f"q{i}", q.qid, t.index, t.time, t.messages) for t in q.turns]
            report = ingest_turns(conn, turns, embedder, weight=floor_weight)
            if report.failed:
                raise RuntimeError(f"sweep: ingest failed for {report.failed[:3]}")
            if (i + 1) % 10 == 0 or i + 1 == n:
                progress(f"sweep: ingested {i + 1}/{n} haystacks")
        qparts = [embed_query(q.question, embedder) for q in questions]
        mparts = [embed_query(m.text, embedder) for m in mix]
        for w in all_w:
            for i in range(n):
                with scoped(conn, f"q{i}"):
                    conn.execute("SELECT pgmem.reblend(%s, %s)", (f"q{i}", w))
            for i, qp in enumerate(qparts):
                res = recall_vectors(conn, f"q{i}", qp.texts, _parts(qp, w), x=x, floor=-1.0)
                hits = [
                    ScoredHit(g.part_no, h.rank, h.cosine, (h.thread_id, h.turn_index))
                    for g in res.groups
                    for h in g.hits
                ]
                ranked = rank_units(hits)
                per_w[w]["top1"].append(top1(ranked, gold[i]))
                per_w[w]["mrr"].append(reciprocal_rank(ranked, gold[i], depth=depth))
                if w == floor_weight and ranked:
                    positives.append((ranked[0].cosine, top1(ranked, gold[i]) >= 0.5))
                    j = (i + 1) % n
                    neg = recall_vectors(conn, f"q{j}", qp.texts, _parts(qp, w), x=1, floor=-1.0)
                    negatives.append(max(h.cosine for g in neg.groups for h in g.hits))
            if w == floor_weight:
                for m, mp in zip(mix, mparts, strict=True):
                    for qi in m.questions:
                        res = recall_vectors(conn, f"q{qi}", mp.texts, _parts(mp, w), x=x, floor=-1.0)
                        cos = [h.cosine for g in res.groups for h in g.hits if (h.thread_id, h.turn_index) in gold[qi]]
                        mixed.append(max(cos) if cos else None)
            progress(f"sweep: weight {w}: top1 {mean(per_w[w]['top1']):.3f} mrr {mean(per_w[w]['mrr']):.3f}")
    table = {str(w): {k: mean(v) for k, v in per_w[w].items()} for w in all_w}
    best = max(all_w, key=lambda w: (table[str(w)]["mrr"], table[str(w)]["top1"]))
    curve = floor_curve(positives, negatives, mixed)
    chosen = floor_for_precision(curve, precision)
    kept = floor_for_keep(curve, keep)
    return {
        "model": embedder.model_id,
        "questions": n,
        "weights": table,
        "best_weight": best,
        "floor": {"weight": floor_weight, "precision_target": precision, **(chosen or {"floor": None})},
        "floor_keep": {"weight": floor_weight, "keep_target": keep, **(kept or {"floor": None})},
        "floor_curve": curve,
        "cosines": {
            "positive_top": [[round(c, 4), ok] for c, ok in positives],
            "negative_top": [round(c, 4) for c in negatives],
            "mixed_gold": [None if c is None else round(c, 4) for c in mixed],
        },
    }


def plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "sweep_weight.png", out_dir / "sweep_floor.png", out_dir / "sweep_cosines.png"]
    ws = sorted(result["weights"], key=float)
    fig, ax = plt.subplots(figsize=(6, 4))
    for k in ("top1", "mrr"):
        ax.plot([float(w) for w in ws], [result["weights"][w][k] for w in ws], marker="o", label=k)
    ax.set_xlabel("blend weight w (piece share)")
    ax.set_title(f"Blend weight sweep, {result['questions']} questions")
    ax.legend()
    fig.tight_layout()
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)

    curve = result["floor_curve"]
    fig, ax = plt.subplots(figsize=(6, 4))
    fs = [r["floor"] for r in curve]
    for k in ("precision", "top1_above_floor", "negatives_above", "mixed_gold_kept"):
        ax.plot(fs, [r[k] for r in curve], label=k)
    for key, style in (("floor", "--"), ("floor_keep", ":")):
        if result.get(key, {}).get("floor") is not None:
            ax.axvline(result[key]["floor"], color="grey", linestyle=style, linewidth=1)
    ax.set_xlabel("cosine floor")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Floor, {result['model']} (w = {result['floor']['weight']})")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(paths[1], dpi=120)
    plt.close(fig)

    cos = result["cosines"]
    fig, ax = plt.subplots(figsize=(6, 4))
    bins = [i / 50 for i in range(-5, 51)]
    ax.hist([c for c, ok in cos["positive_top"] if ok], bins=bins, alpha=0.5, label="right top hit")
    ax.hist([c for c, ok in cos["positive_top"] if not ok], bins=bins, alpha=0.5, label="wrong top hit")
    ax.hist(cos["negative_top"], bins=bins, alpha=0.5, label="unrelated haystack top hit")
    ax.hist([c for c in cos["mixed_gold"] if c is not None], bins=bins, alpha=0.5, label="gold hit, mixed message")
    ax.set_xlabel("cosine")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(paths[2], dpi=120)
    plt.close(fig)
    return paths
