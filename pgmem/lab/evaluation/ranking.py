"""How a recall result becomes one ranked list, and the metrics read from that list.

pgmem returns one group of hits per query part, and the groups are never merged in
production. The retrieval metrics (top-1, MRR, recall@k) need one ranked list, so every
method of every suite is reduced to one list by the same rule:

1. **Rank-major interleaving.** Hits are ordered by their rank inside their own group
   first, then by cosine (higher first), then by part number. So the list starts with
   the first hit of every group (best cosine first), then every group's second hit, and
   so on. A method with a single group (one whole-message vector) keeps its own order
   exactly. Interleaving by rank rather than sorting all hits by cosine keeps each
   group's own order, which matters for hybrid search, whose groups are ordered by fused
   rank, not by cosine; for vector search the top-1 is the same under both rules.
2. **Units counted once.** Each hit is mapped to the unit being scored (a turn, or a
   set of messages). A unit counts at its first appearance; later hits on it are
   skipped, so a turn split into many pieces cannot fill the list alone.
3. **Ties split.** Units that share the same interleaving rank and exactly the same
   cosine are a tie block. Metrics give a tie block the expected value over a uniformly
   random order of the block (a top-1 tie between one gold and three other units scores
   1/4), so no method wins by the database's tie-break.

Metrics per query (averaged over queries by the suites):

- `top1`: the first unit is gold.
- `top1_above_floor`: the first unit is gold and its cosine is at least the floor.
- `mrr`: reciprocal rank of the first gold unit within the first `depth` units, else 0.
- `recall_at_k`: share of the gold units found in the first k units.
- `recall_all_at_k` / `ndcg_at_k`: LongMemEval's own retrieval metrics (its paper's
  evaluation script): whether every gold unit is in the first k, and NDCG@k with binary
  relevance and that script's discount (ranks 1 and 2 undiscounted, then 1/log2(rank)).
  Ties are split here too: both are expected values over a random order within tie blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from math import comb, log2
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class ScoredHit(Generic[K]):
    """One hit of one group: its group (part), its rank in the group, its cosine, and
    the unit it counts as."""

    part_no: int
    rank: int
    cosine: float
    key: K


@dataclass(frozen=True)
class RankedUnit(Generic[K]):
    key: K
    cosine: float
    block: int  # index of the tie block this unit belongs to


def rank_units(hits: Iterable[ScoredHit[K]]) -> list[RankedUnit[K]]:
    """One ranked list of units from grouped hits (rules 1-3 of the module docstring)."""
    ordered = sorted(hits, key=lambda h: (h.rank, -h.cosine, h.part_no))
    out: list[RankedUnit[K]] = []
    seen: set[K] = set()
    block = -1
    last: tuple[int, float] | None = None
    for h in ordered:
        if h.key in seen:
            continue
        seen.add(h.key)
        sig = (h.rank, h.cosine)
        if sig != last:
            block += 1
            last = sig
        out.append(RankedUnit(h.key, h.cosine, block))
    return out


Gold = Callable[[K], bool] | Collection[K]


def _is_gold(gold: Gold[K]) -> Callable[[K], bool]:
    if callable(gold):
        return gold
    members = gold
    return lambda k: k in members


def _blocks(ranked: Sequence[RankedUnit[K]]) -> list[list[RankedUnit[K]]]:
    blocks: list[list[RankedUnit[K]]] = []
    for u in ranked:
        if blocks and blocks[-1][0].block == u.block:
            blocks[-1].append(u)
        else:
            blocks.append([u])
    return blocks


def _first_gold_positions(ranked: Sequence[RankedUnit[K]], gold: Gold[K]) -> list[tuple[int, float, float]]:
    """Distribution of the first gold unit's position: (1-based position, probability,
    cosine) under random order within tie blocks. Empty if no gold unit is listed."""
    is_gold = _is_gold(gold)
    pos = 0
    for block in _blocks(ranked):
        n = len(block)
        g = sum(1 for u in block if is_gold(u.key))
        if g:
            # P(first gold at offset j) for g golds among n shuffled units.
            return [(pos + j + 1, comb(n - j - 1, g - 1) / comb(n, g), block[0].cosine) for j in range(n - g + 1)]
        pos += n
    return []


def top1(ranked: Sequence[RankedUnit[K]], gold: Gold[K], *, floor: float | None = None) -> float:
    """1 if the first unit is gold (ties split); with `floor`, only if its cosine >= floor."""
    positions = _first_gold_positions(ranked, gold)
    return sum(p for rank, p, cos in positions if rank == 1 and (floor is None or cos >= floor))


def reciprocal_rank(ranked: Sequence[RankedUnit[K]], gold: Gold[K], *, depth: int | None = None) -> float:
    """Expected 1/rank of the first gold unit within the first `depth` units (0 if none)."""
    return sum(p / rank for rank, p, _ in _first_gold_positions(ranked, gold) if depth is None or rank <= depth)


def recall_at_k(ranked: Sequence[RankedUnit[K]], gold: Collection[K], k: int) -> float:
    """Share of the gold units among the first k units. A tie block crossing position k
    contributes its gold units in proportion to the places left."""
    if not gold:
        raise ValueError("recall_at_k needs at least one gold unit")
    found = 0.0
    pos = 0
    for block in _blocks(ranked):
        if pos >= k:
            break
        n = len(block)
        g = sum(1 for u in block if u.key in gold)
        found += g * min(n, k - pos) / n
        pos += n
    return found / len(gold)


def recall_all_at_k(ranked: Sequence[RankedUnit[K]], gold: Collection[K], k: int) -> float:
    """1 if every gold unit is among the first k units. The tie block crossing position k
    holds all of its gold units in its places left with probability C(n-g, m-g) / C(n, m)."""
    if not gold:
        raise ValueError("recall_all_at_k needs at least one gold unit")
    missing = len(gold)
    pos = 0
    for block in _blocks(ranked):
        n = len(block)
        g = sum(1 for u in block if u.key in gold)
        left = k - pos
        if left <= 0:
            break
        if n > left:  # the block crosses position k
            return comb(n - g, left - g) / comb(n, left) if g == missing and left >= g else 0.0
        missing -= g
        pos += n
        if missing == 0:
            return 1.0
    return 0.0


def _discount(rank: int) -> float:
    return 1.0 if rank <= 2 else 1.0 / log2(rank)


def ndcg_at_k(ranked: Sequence[RankedUnit[K]], gold: Collection[K], k: int) -> float:
    """NDCG@k with binary relevance and the LongMemEval script's discount (module
    docstring). A unit in a tie block counts the block's share of gold at every place of the
    block, which is the expected gain over a random order within the block."""
    if not gold:
        raise ValueError("ndcg_at_k needs at least one gold unit")
    gain = 0.0
    pos = 0
    for block in _blocks(ranked):
        share = sum(1 for u in block if u.key in gold) / len(block)
        for _ in block:
            pos += 1
            if pos > k:
                break
            gain += share * _discount(pos)
    ideal = sum(_discount(r) for r in range(1, min(k, len(gold)) + 1))
    return gain / ideal


def coarsen(ranked: Sequence[RankedUnit[K]], coarser: Callable[[K], Hashable | None]) -> list[RankedUnit[Any]]:
    """The same ranking over coarser units (a turn's session, say): each coarse unit at
    the first appearance of one of its units, in that unit's tie block. A unit mapped to
    None is dropped (a unit the coarser index does not hold)."""
    out: list[RankedUnit[Any]] = []
    seen: set[Hashable] = set()
    for u in ranked:
        c = coarser(u.key)
        if c is None or c in seen:
            continue
        seen.add(c)
        out.append(RankedUnit(c, u.cosine, u.block))
    return out


def covered(ranked: Sequence[RankedUnit[K]], gold: Collection[K]) -> bool:
    """Whether any gold unit appears anywhere in the result (the coverage suite)."""
    return any(u.key in gold for u in ranked)


def mean(values: Sequence[float]) -> float:
    """Mean of per-query values; 0.0 for no queries."""
    return sum(values) / len(values) if values else 0.0
