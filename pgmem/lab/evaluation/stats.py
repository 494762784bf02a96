"""Telling a difference from noise: bootstrap confidence intervals over questions and a
paired comparison of two methods on the same questions.

- `bootstrap_ci`: the mean of per-question values and its percentile interval from
  `resamples` resamples of the questions (with replacement), fixed seed.
- `paired`: A against B question by question. Won / lost / tied compare the two values of
  each question (a tie-split top-1 of 0.5 against 0 is a win); the difference of the means
  gets a paired bootstrap interval (the same resampled questions for both methods) and a
  two-sided p-value from it; the sign test is the exact binomial test on won vs lost
  (ties left out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import comb

import numpy as np

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95


def _resampled_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    means: np.ndarray = values[idx].mean(axis=1)
    return means


def bootstrap_ci(
    values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL
) -> tuple[float, float, float]:
    """(mean, low, high): the percentile bootstrap interval of the mean over questions."""
    if not values:
        return 0.0, 0.0, 0.0
    v = np.asarray(values, dtype=np.float64)
    means = _resampled_means(v, resamples, seed)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(v.mean()), float(low), float(high)


def intervals(per_question: Mapping[str, Mapping[str, Sequence[float]]]) -> dict[str, dict[str, float]]:
    """Each method's `METRIC_low` / `METRIC_high`: the bootstrap interval of every metric of
    `per_question` (method -> metric -> one value per question)."""
    out: dict[str, dict[str, float]] = {}
    for method, metrics in per_question.items():
        for k, values in metrics.items():
            _, low, high = bootstrap_ci(values)
            out.setdefault(method, {}).update({f"{k}_low": low, f"{k}_high": high})
    return out


def sign_test(won: int, lost: int) -> float:
    """Two-sided exact binomial p-value of `won` against `lost` under p = 1/2."""
    n = won + lost
    if n == 0:
        return 1.0
    k = min(won, lost)
    tail = sum(comb(n, i) for i in range(k + 1)) / 2**n
    return float(min(1.0, 2 * tail))


def paired(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
    eps: float = 1e-9,
) -> dict[str, float]:
    """A vs B on the same questions (same order): won/lost/tied, the mean difference
    A − B with its paired bootstrap interval and p-value, and the sign test p-value."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs the same questions: {len(a)} vs {len(b)} values")
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    won, lost = int((d > eps).sum()), int((d < -eps).sum())
    out: dict[str, float] = {"won": won, "lost": lost, "tied": len(d) - won - lost}
    if not len(d):
        return out | {"diff": 0.0, "diff_low": 0.0, "diff_high": 0.0, "p_bootstrap": 1.0, "p_sign": 1.0}
    means = _resampled_means(d, resamples, seed)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    # Two-sided: how often the resampled difference falls on the other side of zero.
    p_boot = min(1.0, 2 * min(float((means <= 0).mean()), float((means >= 0).mean())))
    return out | {
        "diff": float(d.mean()),
        "diff_low": float(low),
        "diff_high": float(high),
        "p_bootstrap": p_boot,
        "p_sign": sign_test(won, lost),
    }
