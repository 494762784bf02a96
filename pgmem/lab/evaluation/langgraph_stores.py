"""`pgmem eval langgraph DIR`: LangGraph's own `PostgresStore` and `PgmemStore` side by side,
through the same interface (`store.put`/`store.batch`, `store.search(namespace, query=question)`),
on LongMemEval question files (the data README; loading as `pgmem eval longmemeval`).

Both stores live in one fresh database on the same server and embed with the same model (the
configured one, local MiniLM by default). Each question's haystack goes into its own namespace
of each store:

- PostgresStore (langgraph-checkpoint-postgres), one item per message as its users store
  memories: value `{"role", "content"}`, its default index config (`{"dims", "embed"}`: an HNSW
  cosine index) with `fields = ["content"]` (option `postgres_fields`; `["$"]` embeds the value
  as JSON, LangGraph's default, which no other suite embeds, so nothing of it is cached);
- PgmemStore, one item per turn (a user message and the replies after it): value
  `{"messages": [...]}` indexed as that turn (`index={"fields": ["messages"]}`).

Two phases, one run:

1. **Latency** (`latency_questions`, default 20, a seeded subset): both stores embed with the
   live model (the harness's cache unwrapped), question by question side by side (which store
   goes first alternates), one `put` per item and one `search` per question, each timed wall
   clock; p50 and p95, with the load average before and after.
2. **Accuracy** (every scored question): both stores embed through the evaluation's shared
   cache (`CachedEmbedder`: the PostgresStore's `embed` function is the cached embedder's), so
   texts other suites already embedded (every message's text, the questions) are read, not
   re-embedded; a question's items go in one `batch` per store. PgmemStore's pieces carry the
   put time in their labels, so they are new texts on every run.

Gold = the turns holding a `has_answer` message (the longmemeval suite's definition); `_abs`
questions are left out. `search(..., limit=k)` results are read as a ranking of turns (a
message item counts as its turn, a turn's first place counts): top-1 = the first result is a
gold turn, MRR = 1 / rank of the first gold turn (0 when none is returned). Top-1 and MRR carry
percentile bootstrap 95% intervals over questions (`stats.bootstrap_ci`); PgmemStore against
PostgresStore is paired question by question (`stats.paired`: won / lost / tied, the mean
difference with its paired bootstrap interval, the sign test).
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.extras import require
from pgmem.lab.evaluation.common import check_split, in_split, progress, temporary_database
from pgmem.lab.evaluation.longmemeval import Question, load_dir
from pgmem.lab.evaluation.stats import bootstrap_ci, paired
from pgmem.sqlfiles import InstallParams

STORES = ("PostgresStore", "PgmemStore")


@dataclass
class StoreRun:
    top1: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)
    put_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    load_seconds: float = 0.0
    items: int = 0
    short: int = 0  # searches that returned fewer than k items
    embedded: int = 0  # texts sent to the model in the accuracy phase
    cached: int = 0  # texts read from the cache in the accuracy phase
    by_type: dict[str, list[float]] = field(default_factory=dict)


def turn_ranking(turns: Sequence[int]) -> list[int]:
    """Result turns in order of first appearance (several messages of one turn count once)."""
    return list(dict.fromkeys(turns))


def score(ranking: Sequence[int], gold: frozenset[int]) -> tuple[float, float]:
    top1 = 1.0 if ranking and ranking[0] in gold else 0.0
    rr = next((1.0 / (i + 1) for i, t in enumerate(ranking) if t in gold), 0.0)
    return top1, rr


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def _timed(fn: Callable[[], Any], into: list[float]) -> Any:
    t0 = time.perf_counter()
    out = fn()
    into.append(1000 * (time.perf_counter() - t0))
    return out


def _message_items(q: Question) -> list[tuple[str, dict[str, Any]]]:
    """PostgresStore's items: one per message, key `t<turn>m<j>`."""
    return [
        (f"t{t.index}m{j}", {"role": str(m["role"]), "content": str(m.get("content") or "")})
        for t in q.turns
        for j, m in enumerate(t.messages)
    ]


def _turn_items(q: Question) -> list[tuple[str, dict[str, Any]]]:
    """PgmemStore's items: one per turn, key `t<turn>`."""
    return [
        (
            f"t{t.index}",
            {"messages": [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in t.messages]},
        )
        for t in q.turns
    ]


ITEMS: dict[str, Callable[[Question], list[tuple[str, dict[str, Any]]]]] = {
    "PostgresStore": _message_items,
    "PgmemStore": _turn_items,
}


def _turn_of(key: str) -> int:
    """Item key -> turn index: `t12` (a turn) or `t12m1` (a message of turn 12)."""
    return int(key[1:].split("m", 1)[0])


def _embed_fn(embedder: Embedder) -> Callable[[Sequence[str]], list[list[float]]]:
    """PostgresStore's `embed`: the given embedder (the cached one in the accuracy phase)."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = embedder.embed(list(texts)).tolist()
        return out

    return embed


def _check_options(k: object, latency_questions: object, postgres_fields: object) -> list[str]:
    for name, v, low in (("k", k, 1), ("latency_questions", latency_questions, 0)):
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= 1000:
            raise InputError(f"option {name} must be an integer from {low} to 1000, got {v!r:.40}")
    if isinstance(postgres_fields, str):
        postgres_fields = [postgres_fields]
    elif isinstance(postgres_fields, tuple):
        postgres_fields = list(postgres_fields)
    if (
        not isinstance(postgres_fields, list)
        or not postgres_fields
        or not all(isinstance(f, str) and f for f in postgres_fields)
    ):
        raise InputError(f"option postgres_fields must be a list of field paths, got {postgres_fields!r:.60}")
    return list(postgres_fields)


def run(
    path: Any,
    *,
    server_url: str,
    embedder: Embedder,
    limit: int | None = None,
    seed: int = 0,
    k: int = 10,
    latency_questions: int = 20,
    postgres_fields: Any = ("content",),
    split: str = "all",
    **_: object,
) -> dict[str, Any]:
    """Both phases (see the module docstring) and the table's numbers."""
    fields = _check_options(k, latency_questions, postgres_fields)
    require("langgraph.store.postgres", "langgraph", "pgmem eval langgraph")
    from langgraph.store.postgres import PostgresStore

    from pgmem.integrations.langgraph import PgmemStore

    live: Embedder = getattr(embedder, "inner", embedder)  # the model itself, for latencies
    check_split(split)
    questions = [q for q in load_dir(path, limit=limit, seed=seed) if in_split(q.qid, split)]
    progress(
        f"langgraph: {len(questions)} questions, {sum(len(q.turns) for q in questions)} turns, "
        f"{sum(len(t.messages) for q in questions for t in q.turns)} messages"
    )
    subset = random.Random(seed).sample(questions, min(latency_questions, len(questions)))
    runs = {name: StoreRun() for name in STORES}
    load: dict[str, float] = {}

    def stores(emb: Embedder) -> Any:
        index = {"dims": emb.dims, "embed": _embed_fn(emb), "fields": fields}
        return (
            PostgresStore.from_conn_string(url, index=index),  # type: ignore[arg-type]
            PgmemStore.from_conn_string(url, embedder=emb, index={"fields": ["messages"]}),
        )

    with temporary_database(server_url, InstallParams(embedder.dims, embedder.dims)) as url:
        lg_cm, pm_cm = stores(live)
        with lg_cm as lg, pm_cm as pm:
            lg.setup()
            if subset:
                load["latency_load_before"] = round(os.getloadavg()[0], 2)
                _latency(subset, {"PostgresStore": lg, "PgmemStore": pm}, runs, k)
                load["latency_load_after"] = round(os.getloadavg()[0], 2)
        lg_cm, pm_cm = stores(embedder)
        with lg_cm as lg, pm_cm as pm:
            load["accuracy_load_before"] = round(os.getloadavg()[0], 2)
            _accuracy(questions, {"PostgresStore": lg, "PgmemStore": pm}, runs, k, embedder)
            load["accuracy_load_after"] = round(os.getloadavg()[0], 2)
    return _result(questions, runs, k=k, seed=seed, latency_questions=len(subset), load=load, fields=fields)


def _latency(subset: Sequence[Question], stores: dict[str, Any], runs: dict[str, StoreRun], k: int) -> None:
    """Live model, side by side: each question into both stores (the first store alternates),
    one timed put per item; then one timed search per question and store."""
    for n, q in enumerate(subset):
        order = STORES if n % 2 == 0 else STORES[::-1]
        for name in order:
            for key, value in ITEMS[name](q):
                _timed(partial(stores[name].put, ("lat", q.qid), key, value), runs[name].put_ms)
    for n, q in enumerate(subset):
        order = STORES if n % 2 == 0 else STORES[::-1]
        for name in order:
            _timed(partial(stores[name].search, ("lat", q.qid), query=q.question, limit=k), runs[name].search_ms)
    # Printed in full as the phase ends: an accuracy phase cut short still leaves the latencies.
    summary = (
        f"{s} put p50/p95 {percentile(runs[s].put_ms, 50):.0f}/{percentile(runs[s].put_ms, 95):.0f} ms "
        f"({len(runs[s].put_ms)} puts), search p50/p95 {percentile(runs[s].search_ms, 50):.0f}/"
        f"{percentile(runs[s].search_ms, 95):.0f} ms"
        for s in STORES
    )
    progress(
        f"langgraph: latency on {len(subset)} questions (load average {os.getloadavg()[0]:.1f}): " + "; ".join(summary)
    )


def _accuracy(
    questions: Sequence[Question], stores: dict[str, Any], runs: dict[str, StoreRun], k: int, embedder: Embedder
) -> None:
    from langgraph.store.base import PutOp

    def counts() -> tuple[int, int]:
        return int(getattr(embedder, "embedded", 0)), int(getattr(embedder, "cached", 0))

    for name in STORES:
        r, store = runs[name], stores[name]
        t0, (e0, c0) = time.monotonic(), counts()
        for n, q in enumerate(questions, 1):
            items = ITEMS[name](q)
            store.batch([PutOp(("lme", q.qid), key, value) for key, value in items])
            r.items += len(items)
            if n % 25 == 0 or n == len(questions):
                progress(f"langgraph: {name} loaded {n}/{len(questions)} questions ({r.items} items)")
        r.load_seconds = time.monotonic() - t0
        e1, c1 = counts()
        r.embedded, r.cached = e1 - e0, c1 - c0
    for n, q in enumerate(questions, 1):
        for name in STORES:
            r = runs[name]
            found: list[Any] = stores[name].search(("lme", q.qid), query=q.question, limit=k)
            r.short += len(found) < k
            top1, rr = score(turn_ranking([_turn_of(i.key) for i in found]), q.gold)
            r.top1.append(top1)
            r.rr.append(rr)
            r.by_type.setdefault(q.qtype, []).append(top1)
        if n % 25 == 0 or n == len(questions):
            tops = " ".join(f"{s}={statistics.fmean(runs[s].top1):.3f}" for s in STORES)
            progress(f"langgraph: searched {n}/{len(questions)} · top1 {tops}")


def _result(
    questions: Sequence[Question],
    runs: dict[str, StoreRun],
    *,
    k: int,
    seed: int,
    latency_questions: int,
    load: dict[str, float],
    fields: list[str],
) -> dict[str, Any]:
    results: dict[str, dict[str, float | int]] = {}
    for name, r in runs.items():
        top1, lo, hi = bootstrap_ci(r.top1, seed=seed)
        mrr, mlo, mhi = bootstrap_ci(r.rr, seed=seed)
        results[name] = {
            "top1": top1,
            "top1_ci_low": lo,
            "top1_ci_high": hi,
            "mrr": mrr,
            "mrr_ci_low": mlo,
            "mrr_ci_high": mhi,
            "items": r.items,
            "searches_short_of_k": r.short,
            "load_seconds": round(r.load_seconds, 1),
            "texts_embedded": r.embedded,
            "texts_cached": r.cached,
            "put_p50_ms": percentile(r.put_ms, 50),
            "put_p95_ms": percentile(r.put_ms, 95),
            "search_p50_ms": percentile(r.search_ms, 50),
            "search_p95_ms": percentile(r.search_ms, 95),
            "puts_timed": len(r.put_ms),
            "searches_timed": len(r.search_ms),
        }
    a, b = runs["PgmemStore"], runs["PostgresStore"]
    by_type = {
        name: {t: statistics.fmean(v) for t, v in sorted(r.by_type.items())} for name, r in runs.items()
    }  # fmt: skip
    return {
        "questions": len(questions),
        "turns": sum(len(q.turns) for q in questions),
        "k": k,
        "latency_questions": latency_questions,
        "postgres_fields": ",".join(fields),
        "results": results,
        "pgmem_minus_postgres": {"top1": paired(a.top1, b.top1, seed=seed), "mrr": paired(a.rr, b.rr, seed=seed)},
        "top1_by_type": by_type,
        "load_average": load,
    }
