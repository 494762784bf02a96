"""Metrics of the evaluation suites on tiny hand-made rankings (no database)."""

from __future__ import annotations

import pytest

from pgmem.lab.evaluation.ranking import (
    ScoredHit,
    coarsen,
    covered,
    ndcg_at_k,
    rank_units,
    recall_all_at_k,
    recall_at_k,
    reciprocal_rank,
    top1,
)
from pgmem.lab.evaluation.sweep import floor_curve, floor_for_keep, floor_for_precision


def hits(*rows: tuple[int, int, float, str]) -> list[ScoredHit[str]]:
    return [ScoredHit(p, r, c, k) for p, r, c, k in rows]


def keys(rows: list[ScoredHit[str]]) -> list[str]:
    return [u.key for u in rank_units(rows)]


def test_single_group_keeps_its_order_and_counts_a_unit_once() -> None:
    h = hits((1, 1, 0.9, "a"), (1, 2, 0.8, "a"), (1, 3, 0.7, "b"), (1, 4, 0.6, "c"))
    assert keys(h) == ["a", "b", "c"]


def test_groups_interleave_by_rank_then_cosine() -> None:
    # part 2's first hit beats part 1's first hit; all first hits come before any second hit
    h = hits((1, 1, 0.5, "a"), (1, 2, 0.49, "b"), (2, 1, 0.7, "c"), (2, 2, 0.69, "a"), (2, 3, 0.6, "d"))
    assert keys(h) == ["c", "a", "b", "d"]


def test_hybrid_order_inside_a_group_is_kept() -> None:
    # a fused rank can put a lower cosine first; interleaving keeps that order
    h = hits((1, 1, 0.4, "word"), (1, 2, 0.6, "vec"))
    assert keys(h) == ["word", "vec"]


def test_top1_mrr_recall() -> None:
    ranked = rank_units(hits((1, 1, 0.9, "x"), (1, 2, 0.8, "g1"), (1, 3, 0.7, "y"), (1, 4, 0.6, "g2")))
    assert top1(ranked, {"g1"}) == 0.0
    assert top1(ranked, {"x"}) == 1.0
    assert reciprocal_rank(ranked, {"g1", "g2"}) == pytest.approx(0.5)
    assert reciprocal_rank(ranked, {"g2"}) == pytest.approx(0.25)
    assert reciprocal_rank(ranked, {"g2"}, depth=3) == 0.0
    assert reciprocal_rank(ranked, {"nowhere"}) == 0.0
    assert recall_at_k(ranked, {"g1", "g2"}, 2) == pytest.approx(0.5)
    assert recall_at_k(ranked, {"g1", "g2"}, 5) == pytest.approx(1.0)
    assert reciprocal_rank(ranked, lambda k: k.startswith("g")) == pytest.approx(0.5)


def test_top1_above_floor() -> None:
    ranked = rank_units(hits((1, 1, 0.25, "g")))
    assert top1(ranked, {"g"}) == 1.0
    assert top1(ranked, {"g"}, floor=0.3) == 0.0
    assert top1(ranked, {"g"}, floor=0.2) == 1.0


def test_ties_are_split() -> None:
    # four units with the same cosine at rank 1 (four groups): one is gold
    ranked = rank_units(hits((1, 1, 0.5, "a"), (2, 1, 0.5, "b"), (3, 1, 0.5, "g"), (4, 1, 0.5, "c")))
    assert top1(ranked, {"g"}) == pytest.approx(0.25)
    # expected 1/rank over a random order of four: (1 + 1/2 + 1/3 + 1/4) / 4
    assert reciprocal_rank(ranked, {"g"}) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    # two golds among four: P(first gold at 1) = 1/2, at 2 = 1/3, at 3 = 1/6
    assert reciprocal_rank(ranked, {"g", "a"}) == pytest.approx(1 / 2 + 1 / 3 / 2 + 1 / 6 / 3)
    assert recall_at_k(ranked, {"g"}, 2) == pytest.approx(0.5)


def test_coverage_anywhere_in_the_result() -> None:
    ranked = rank_units(hits((1, 1, 0.9, "x"), (2, 5, 0.1, "g")))
    assert covered(ranked, {"g"})
    assert not covered(ranked, {"h"})


def test_floor_curve_and_choice() -> None:
    positives = [(0.6, True), (0.5, True), (0.4, False), (0.35, True)]
    negatives = [0.45, 0.3, 0.2]
    mixed = [0.4, 0.2, None]
    curve = floor_curve(positives, negatives, mixed, floors=[0.0, 0.3, 0.46])
    # precision: kept top hits from a haystack that holds the answer (right or not)
    assert curve[0]["precision"] == pytest.approx(4 / 7)
    assert curve[1]["precision"] == pytest.approx(4 / 6)
    assert curve[2]["precision"] == pytest.approx(1.0)
    assert curve[2]["top1_above_floor"] == pytest.approx(0.5)
    assert curve[1]["negatives_above"] == pytest.approx(2 / 3)
    assert curve[1]["mixed_gold_kept"] == pytest.approx(1 / 3)
    chosen = floor_for_precision(curve, 0.9)
    assert chosen is not None and chosen["floor"] == 0.46
    assert floor_for_precision(curve[:2], 0.9) is None
    keep = floor_for_keep(curve, 0.6)
    assert keep is not None and keep["floor"] == 0.0  # 0.3 keeps only 1/3 of the mixed gold hits
    assert floor_for_keep(curve, 1.0) is None


def test_recall_all_and_ndcg() -> None:
    ranked = rank_units(hits((1, 1, 0.9, "x"), (1, 2, 0.8, "g1"), (1, 3, 0.7, "y"), (1, 4, 0.6, "g2")))
    assert recall_all_at_k(ranked, {"g1", "g2"}, 3) == 0.0
    assert recall_all_at_k(ranked, {"g1", "g2"}, 4) == 1.0
    assert recall_all_at_k(ranked, {"g1"}, 2) == 1.0
    assert recall_all_at_k(ranked, {"nowhere"}, 10) == 0.0
    # gains at ranks 2 and 4 (discounts 1 and 1/2) over the ideal ranks 1 and 2 (1 and 1)
    assert ndcg_at_k(ranked, {"g1", "g2"}, 10) == pytest.approx((1 + 0.5) / 2)
    assert ndcg_at_k(ranked, {"g2"}, 3) == 0.0
    assert ndcg_at_k(ranked, {"x"}, 10) == 1.0
    with pytest.raises(ValueError):
        ndcg_at_k(ranked, set(), 10)


def test_recall_all_and_ndcg_split_ties() -> None:
    # four tied units, two gold: all in the first 2 with probability 1 / C(4, 2)
    ranked = rank_units(hits((1, 1, 0.5, "a"), (2, 1, 0.5, "g"), (3, 1, 0.5, "h"), (4, 1, 0.5, "c")))
    assert recall_all_at_k(ranked, {"g", "h"}, 2) == pytest.approx(1 / 6)
    assert recall_all_at_k(ranked, {"g", "h"}, 3) == pytest.approx(3 / 6)
    assert recall_all_at_k(ranked, {"g", "h"}, 4) == 1.0
    # each place holds half a gold unit in expectation
    assert ndcg_at_k(ranked, {"g", "h"}, 10) == pytest.approx(0.5 * (1 + 1 + 1 / 1.5849625007211563 + 0.5) / 2)


def test_coarsen_keeps_first_appearance_and_drops_unmapped() -> None:
    ranked = rank_units(hits((1, 1, 0.9, "s1t1"), (1, 2, 0.8, "s2t1"), (1, 3, 0.7, "s1t2"), (1, 4, 0.6, "xt1")))
    sessions = coarsen(ranked, lambda k: None if k.startswith("x") else k[:2])
    assert [u.key for u in sessions] == ["s1", "s2"]
