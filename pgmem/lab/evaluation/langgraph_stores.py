"""`pgmem eval langgraph DIR`: LangGraph's own `PostgresStore` and `PgmemStore` side by side,
through the same interface (`store.put`, `store.search(namespace, query=question)`), on
LongMemEval question files (the data README; loading as `pgmem eval longmemeval`).

Both stores live in one fresh database on the same server and embed with the same model (the
configured one, local MiniLM by default; uncached, so latencies include the model). Each
question's haystack goes into its own namespace `("lme", question_id)` of each store, every
question's haystack is loaded before any search (a pooled store, as in production):

- PostgresStore (langgraph-checkpoint-postgres), its default index config (`{"dims", "embed"}`:
  fields `$`, an HNSW cosine index), one item per message as its users store memories: value
  `{"role", "content"}`;
- PgmemStore, one item per turn (a user message and the replies after it): value
  `{"messages": [...]}` indexed as that turn (`index={"fields": ["messages"]}`).

Gold = the turns holding a `has_answer` message (the longmemeval suite's definition); `_abs`
questions are left out. `search(..., limit=k)` results are read as a ranking of turns (a
message item counts as its turn, a turn's first place counts): top-1 = the first result is a
gold turn, MRR = 1 / rank of the first gold turn (0 when none is returned). Latency: each
`put` call (one item) and each `search` call, wall clock, medians. Top-1 and MRR carry a
bootstrap 95% confidence interval over questions (2,000 resamples), and so does the paired
difference PgmemStore - PostgresStore.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pgmem.embedders.base import Embedder
from pgmem.extras import require
from pgmem.lab.evaluation.common import progress, temporary_database
from pgmem.lab.evaluation.longmemeval import Question, load_dir
from pgmem.sqlfiles import InstallParams

STORES = ("PostgresStore", "PgmemStore")
BOOTSTRAP = 2000


@dataclass
class StoreRun:
    top1: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)
    put_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    load_seconds: float = 0.0
    items: int = 0
    short: int = 0  # searches that returned fewer than k items
    by_type: dict[str, list[float]] = field(default_factory=dict)


def bootstrap_ci(values: Sequence[float], *, seed: int = 0, n: int = BOOTSTRAP) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the mean over `values` (resampling questions)."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return (0.0, 0.0)
    idx = np.random.default_rng(seed).integers(0, a.size, size=(n, a.size))
    means = a[idx].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def turn_ranking(turns: Sequence[int]) -> list[int]:
    """Result turns in order of first appearance (several messages of one turn count once)."""
    return list(dict.fromkeys(turns))


def score(ranking: Sequence[int], gold: frozenset[int]) -> tuple[float, float]:
    top1 = 1.0 if ranking and ranking[0] in gold else 0.0
    rr = next((1.0 / (i + 1) for i, t in enumerate(ranking) if t in gold), 0.0)
    return top1, rr


def _timed(fn: Callable[[], Any], into: list[float]) -> Any:
    t0 = time.perf_counter()
    out = fn()
    into.append(1000 * (time.perf_counter() - t0))
    return out


def _load_postgres_store(store: Any, q: Question, run: StoreRun) -> None:
    ns = ("lme", q.qid)
    for t in q.turns:
        for j, m in enumerate(t.messages):
            value = {"role": str(m["role"]), "content": str(m.get("content") or "")}
            _timed(partial(store.put, ns, f"t{t.index}m{j}", value), run.put_ms)
            run.items += 1


def _load_pgmem_store(store: Any, q: Question, run: StoreRun) -> None:
    ns = ("lme", q.qid)
    for t in q.turns:
        value = {"messages": [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in t.messages]}
        _timed(partial(store.put, ns, f"t{t.index}", value), run.put_ms)
        run.items += 1


def _turn_of(key: str) -> int:
    """Item key -> turn index: `t12` (a turn) or `t12m1` (a message of turn 12)."""
    return int(key[1:].split("m", 1)[0])


def run(
    path: Path,
    *,
    server_url: str,
    embedder: Embedder,
    limit: int | None = None,
    seed: int = 0,
    k: int = 10,
    cache: bool = False,
    **_: object,
) -> dict[str, Any]:
    """Load both stores, search both, and return the table's numbers (see the module docstring)."""
    require("langgraph.store.postgres", "langgraph", "pgmem eval langgraph")
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.base import PostgresIndexConfig

    from pgmem.integrations.langgraph import PgmemStore

    if not cache:  # latencies include the model: unwrap the eval harness's on-disk cache
        embedder = getattr(embedder, "inner", embedder)
    questions = load_dir(path, limit=limit, seed=seed)
    progress(
        f"langgraph: {len(questions)} questions, {sum(len(q.turns) for q in questions)} turns, "
        f"{sum(len(t.messages) for q in questions for t in q.turns)} messages"
    )

    def embed(texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = embedder.embed(texts).tolist()
        return out

    runs = {name: StoreRun() for name in STORES}
    index: PostgresIndexConfig = {"dims": embedder.dims, "embed": embed}  # its defaults otherwise
    with (
        temporary_database(server_url, InstallParams(embedder.dims, embedder.dims)) as url,
        PostgresStore.from_conn_string(url, index=index) as lg,
        PgmemStore.from_conn_string(url, embedder=embedder, index={"fields": ["messages"]}) as pm,
    ):
        lg.setup()
        loaders: dict[str, tuple[Any, Callable[[Any, Question, StoreRun], None]]] = {
            "PostgresStore": (lg, _load_postgres_store),
            "PgmemStore": (pm, _load_pgmem_store),
        }
        for name, (store, load) in loaders.items():
            t0 = time.monotonic()
            for n, q in enumerate(questions, 1):
                load(store, q, runs[name])
                if n % 25 == 0 or n == len(questions):
                    progress(f"langgraph: {name} loaded {n}/{len(questions)} questions ({runs[name].items} items)")
            runs[name].load_seconds = time.monotonic() - t0
        for n, q in enumerate(questions, 1):
            for name, (store, _load) in loaders.items():
                r = runs[name]
                found: list[Any] = _timed(partial(store.search, ("lme", q.qid), query=q.question, limit=k), r.search_ms)
                r.short += len(found) < k
                top1, rr = score(turn_ranking([_turn_of(i.key) for i in found]), q.gold)
                r.top1.append(top1)
                r.rr.append(rr)
                r.by_type.setdefault(q.qtype, []).append(top1)
            if n % 25 == 0 or n == len(questions):
                tops = " ".join(f"{s}={statistics.fmean(runs[s].top1):.3f}" for s in STORES)
                progress(f"langgraph: searched {n}/{len(questions)} · top1 {tops}")
    return _result(questions, runs, k=k, seed=seed)


def _result(questions: Sequence[Question], runs: dict[str, StoreRun], *, k: int, seed: int) -> dict[str, Any]:
    results: dict[str, dict[str, float | int]] = {}
    for name, r in runs.items():
        lo, hi = bootstrap_ci(r.top1, seed=seed)
        mlo, mhi = bootstrap_ci(r.rr, seed=seed)
        results[name] = {
            "top1": statistics.fmean(r.top1) if r.top1 else 0.0,
            "top1_ci_low": lo,
            "top1_ci_high": hi,
            "mrr": statistics.fmean(r.rr) if r.rr else 0.0,
            "mrr_ci_low": mlo,
            "mrr_ci_high": mhi,
            "items": r.items,
            "put_p50_ms": statistics.median(r.put_ms) if r.put_ms else 0.0,
            "search_p50_ms": statistics.median(r.search_ms) if r.search_ms else 0.0,
            "load_seconds": r.load_seconds,
            "searches_short_of_k": r.short,
        }
    a, b = runs["PgmemStore"], runs["PostgresStore"]
    d_top1 = [x - y for x, y in zip(a.top1, b.top1, strict=True)]
    d_rr = [x - y for x, y in zip(a.rr, b.rr, strict=True)]
    top_lo, top_hi = bootstrap_ci(d_top1, seed=seed)
    rr_lo, rr_hi = bootstrap_ci(d_rr, seed=seed)
    by_type = {
        name: {t: statistics.fmean(v) for t, v in sorted(r.by_type.items())} for name, r in runs.items()
    }  # fmt: skip
    return {
        "questions": len(questions),
        "turns": sum(len(q.turns) for q in questions),
        "k": k,
        "results": results,
        "pgmem_minus_postgres": {
            "top1": statistics.fmean(d_top1) if d_top1 else 0.0,
            "top1_ci_low": top_lo,
            "top1_ci_high": top_hi,
            "mrr": statistics.fmean(d_rr) if d_rr else 0.0,
            "mrr_ci_low": rr_lo,
            "mrr_ci_high": rr_hi,
        },
        "top1_by_type": by_type,
    }
