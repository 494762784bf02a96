"""Embedding throughput of the local models side by side (a benchmark, not a test).

    python -m pgmem.lab.bench.embed_models DIR [--texts 64] [--repeats 5] [--models local,e5]

DIR is a LongMemEval folder: the texts are a seeded sample of its messages (one vector per
message, as the evaluation embeds them), the same texts for every model. The models take
turns within each repeat (local, e5, local, e5, ...), so a change of load on a shared machine
falls on both; each model's figure is the median over repeats of texts/s for the whole
sample (passage side), with the load average at the start and end."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

from pgmem.config import Settings
from pgmem.embedders import from_settings
from pgmem.lab.evaluation.conversations import per_message_units
from pgmem.lab.evaluation.longmemeval import load_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.embed_models", description=__doc__)
    ap.add_argument("path", type=Path, metavar="DIR", help="a LongMemEval folder")
    ap.add_argument("--texts", type=int, default=64, help="texts per measurement (default 64)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats per model (default 5)")
    ap.add_argument("--models", default="local,e5", help="PGMEM_EMBEDDER values (default local,e5)")
    args = ap.parse_args(argv)
    texts = sorted({u.text for q in load_dir(args.path) for t in q.turns for u in per_message_units(t)})
    sample = random.Random(0).sample(texts, min(args.texts, len(texts)))
    models = {m: from_settings(Settings.from_env({**os.environ, "PGMEM_EMBEDDER": m})) for m in args.models.split(",")}
    for e in models.values():
        e.embed(sample[:2])  # load and warm up
    rates: dict[str, list[float]] = {m: [] for m in models}
    load0 = os.getloadavg()[0]
    for _ in range(args.repeats):
        for m, e in models.items():
            t0 = time.perf_counter()
            e.embed(sample)
            rates[m].append(len(sample) / (time.perf_counter() - t0))
    load1 = os.getloadavg()[0]
    nbytes = sum(len(t.encode("utf-8")) for t in sample)
    print(f"{len(sample)} texts ({nbytes / len(sample):.0f} bytes each on average), {args.repeats} repeats")
    print("model\tmedian texts/s\tmin\tmax")
    for m, e in models.items():
        r = rates[m]
        print(f"{e.model_id}\t{statistics.median(r):.1f}\t{min(r):.1f}\t{max(r):.1f}")
    print(f"load average {load0:.1f} at the start, {load1:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
