"""A model change of a large scope, measured: `python -m pgmem.lab.bench.reembed --longmemeval
DIR --raydocs DIR [--turns 10000]`.

One scope holds every LongMemEval oracle question's haystack (each its own thread), the `s/`
haystacks, and Ray documentation sections as filler turns (a user asks for a section, the
assistant answers with it) until the scope holds `--turns` turns, all stored with MiniLM
through `ingest_turns`, as the application login. Then `pgmem.reembed` moves the scope to a
second model while, side by side in the same run:

- a reader recalls the oracle questions with the old model in a loop (its latencies and
  errors are reported: the old model must be served until the flip);
- a writer keeps storing new turns with the old model (they must be caught up by the flip).

The second model is MiniLM followed by a fixed random rotation: a different vector space (an
old-model query against the new vectors finds noise, so a half-done switch would show), with
the same cosines, so the recall after the change must equal the recall before it; the oracle
questions' top-1 and recall@5 are reported before and after as that check. Its texts come from
the ingest's embedding cache, so the staging time measured is pgmem's own (listing, staging,
flip); a real model adds its embedding time (`embedding_rate` is MiniLM's, measured here)."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo

from pgmem.embedders.base import Embedder, FloatArray
from pgmem.errors import ModelRefusedError
from pgmem.ingest import ingest_turns
from pgmem.lab.bench.churn import ensure_logins
from pgmem.lab.bench.measure import build_indexes, pct
from pgmem.lab.evaluation.common import CachedEmbedder
from pgmem.lab.evaluation.longmemeval import Question, load_dir
from pgmem.lab.evaluation.ranking import ScoredHit, rank_units, recall_at_k, top1
from pgmem.recall import recall
from pgmem.reembed import reembed
from pgmem.turns import Turn

SCOPE = "bench-reembed"
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$")


class Rotated:
    """A second model: the inner model's vectors times a fixed random orthogonal matrix."""

    def __init__(self, inner: Embedder, seed: int = 7) -> None:
        self.inner = inner
        self.model_id = f"{inner.model_id}+rotation{seed}"
        self.dims, self.max_input_tokens = inner.dims, inner.max_input_tokens
        self.default_floor = getattr(inner, "default_floor", 0.2)
        q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((inner.dims, inner.dims)))
        self.rotation = q.astype(np.float32)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        return np.asarray(self.inner.embed(texts), dtype=np.float32) @ self.rotation

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        embed_queries = getattr(self.inner, "embed_queries", self.inner.embed)
        return np.asarray(embed_queries(texts), dtype=np.float32) @ self.rotation


def doc_turns(raydocs: Path, start: int, wanted: int) -> list[Turn]:
    """Filler turns from the Ray docs: the heading asked and the section answered, a turn per
    800 bytes of the section's paragraphs, one thread per document."""
    out: list[Turn] = []
    when = datetime(2023, 8, 15, tzinfo=UTC)
    for path in sorted((raydocs / "corpus").rglob("*.md")):
        thread = f"doc:{path.relative_to(raydocs / 'corpus')}"
        heading, lines, index = None, [], 0
        for line in [*path.read_text(encoding="utf-8", errors="replace").splitlines(), "# end"]:
            m = _HEADING.match(line)
            if not m:
                lines.append(line)
                continue
            body = "\n".join(lines).strip()
            # A long section is asked about in parts: one turn per 800 bytes of its paragraphs (at most 1,500).
            part = ""
            for para in [*body.split("\n\n"), None]:
                if para is not None and len(part.encode()) + len(para.encode()) < 800:
                    part = f"{part}\n\n{para}" if part else para
                    continue
                if heading and len(part) > 80:
                    ask = f"How does {heading} work in Ray?" + (f" (part {index + 1})" if index else "")
                    answer = part.encode()[:1500].decode("utf-8", "ignore")
                    out.append(
                        Turn(
                            SCOPE,
                            thread,
                            index,
                            when,
                            ({"role": "user", "content": ask}, {"role": "assistant", "content": answer}),
                        )
                    )
                    index += 1
                    if len(out) >= wanted:
                        return out
                part = para or ""
            heading, lines = m.group(2), []
    return out


def scored(conn: psycopg.Connection[Any], emb: Embedder, questions: Sequence[Question]) -> dict[str, list[float]]:
    top, at5 = [], []
    for q in questions:
        r = recall(conn, SCOPE, q.question, emb, x=10)
        hits = [ScoredHit(g.part_no, h.rank, h.cosine, (h.thread_id, h.turn_index)) for g in r.groups for h in g.hits]
        ranked = rank_units(hits)
        gold = frozenset((q.thread, i) for i in q.gold)
        top.append(top1(ranked, gold))
        at5.append(recall_at_k(ranked, gold, 5))
    return {"top1": top, "recall_at_5": at5}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--longmemeval", type=Path, required=True, help="the LongMemEval folder (oracle/ and s/)")
    ap.add_argument("--raydocs", type=Path, required=True, help="the Ray docs folder (corpus/)")
    ap.add_argument("--turns", type=int, default=10_000)
    ap.add_argument("--limit", type=int, help="a sample of the questions (for trying the command, not for figures)")
    ap.add_argument("--out", type=Path, help="write the figures (JSON) here too")
    args = ap.parse_args()

    from pgmem.config import Settings
    from pgmem.db import database_url
    from pgmem.embedders.local import LocalEmbedder
    from pgmem.lab.evaluation.common import temporary_database
    from pgmem.sqlfiles import InstallParams

    oracle = load_dir(args.longmemeval / "oracle", limit=args.limit)
    haystacks = load_dir(args.longmemeval / "s", limit=args.limit)
    turns: list[Turn] = []
    for q in oracle:
        turns += [Turn(SCOPE, q.thread, t.index, t.time, t.messages) for t in q.turns]
    for q in haystacks:
        turns += [Turn(SCOPE, f"s:{q.thread}", t.index, t.time, t.messages) for t in q.turns]
    turns += doc_turns(args.raydocs, len(turns), max(0, args.turns - len(turns)))
    if len(turns) < args.turns:
        raise SystemExit(f"only {len(turns)} turns available, fewer than --turns {args.turns}")
    old = CachedEmbedder(LocalEmbedder(), None)
    new = Rotated(old)
    settings = Settings.from_env()
    figures: dict[str, Any] = {"turns": len(turns), "oracle_questions": len(oracle), "old_model": old.model_id}
    server = database_url(settings)
    with (
        temporary_database(server, InstallParams(old.dims, settings.fact_dims)) as url,
        psycopg.connect(url, autocommit=True) as admin,
    ):
        ensure_logins(admin, "pgmem_bench_app", "pgmem_bench_owner")
        app_url = make_conninfo(url, user="pgmem_bench_app")
        conn = psycopg.connect(app_url, autocommit=True)
        t0 = time.monotonic()
        report = ingest_turns(conn, turns, old, group_pieces=1024)
        ingest_s = time.monotonic() - t0
        pieces = report.pieces
        figures.update(
            ingest_seconds=round(ingest_s, 1),
            pieces=pieces,
            embedding_rate_texts_per_s=round(old.embedded / ingest_s, 1),
            ingest_failed=len(report.failed),
        )
        print(f"stored {len(turns)} turns, {pieces} pieces in {ingest_s:.0f}s", flush=True)
        # The scope's ANN index, as the scheduled maintenance builds it for a scope this size.
        builds = build_indexes(admin, min_pieces=10_000, method="hnsw", maintenance_work_mem="512MB")
        figures["ann_index"] = [b.__dict__ for b in builds]
        before = scored(conn, old, oracle)

        stop = threading.Event()
        read_ms: list[float] = []
        read_errors: list[str] = []
        written: list[int] = []

        def reader() -> None:
            c = psycopg.connect(app_url, autocommit=True)
            i = 0
            while not stop.is_set():
                q = oracle[i % len(oracle)]
                i += 1
                t = time.monotonic()
                try:
                    recall(c, SCOPE, q.question, old, x=10)
                    read_ms.append((time.monotonic() - t) * 1000)
                except ModelRefusedError as exc:
                    read_errors.append(str(exc)[:120])
            c.close()

        def writer() -> None:
            c = psycopg.connect(app_url, autocommit=True)
            n = 0
            while not stop.is_set() and n < 50:
                extra = Turn(SCOPE, "late-writer", n, None, ({"role": "user", "content": f"late note {n}"},))
                written.append(ingest_turns(c, [extra], old).inserted)
                n += 1
                time.sleep(0.2)
            c.close()

        threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        staged = reembed(conn, SCOPE, new, flip=False)
        stage_s = time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join()
        t0 = time.monotonic()
        flipped = reembed(conn, SCOPE, new)
        flip_s = time.monotonic() - t0
        # old-model recall after the flip is refused, naming both models
        try:
            recall(conn, SCOPE, oracle[0].question, old)
            refused_after = False
        except ModelRefusedError:
            refused_after = True
        after = scored(conn, new, oracle)
        conn.close()
    diffs = {k: [a - b for a, b in zip(after[k], before[k], strict=True)] for k in before}
    figures.update(
        new_model=new.model_id,
        staging_seconds=round(stage_s, 1),
        staged_pieces=staged.embedded,
        staging_pieces_per_s=round(staged.embedded / stage_s, 1),
        flip_run_seconds=round(flip_s, 2),
        flip_caught_up_pieces=flipped.embedded,
        flipped=flipped.flipped,
        turns_rewritten=flipped.turns,
        pieces_after=flipped.pieces,
        reader_during_staging={
            "recalls": len(read_ms),
            "errors": len(read_errors),
            "p50_ms": pct(read_ms, 50),
            "p95_ms": pct(read_ms, 95),
        },
        writer_turns_during_staging=sum(written),
        old_model_refused_after_flip=refused_after,
        before={k: round(statistics.fmean(v), 4) for k, v in before.items()},
        after={k: round(statistics.fmean(v), 4) for k, v in after.items()},
        questions_changed={k: sum(1 for d in v if d) for k, v in diffs.items()},
    )
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
