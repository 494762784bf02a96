"""Local MiniLM throughput by batch size and thread count (a benchmark, not a test).

    python -m pgmem.lab.bench.embed_batch DIR [--texts 256] [--batches 8,16,32,64,128] [--threads 1,2]

DIR is a LongMemEval folder: the texts are one vector per message, as the evaluation embeds
them (a seeded sample, sorted by length as `LocalEmbedder.embed` sorts them), measured once
short (the shortest `--texts`) and once long (the longest). Prints texts/s and tokens/s per
setting, with the load average, because on a shared machine that decides the figure."""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from pgmem.embedders.local import LocalEmbedder
from pgmem.lab.evaluation.conversations import per_message_units
from pgmem.lab.evaluation.longmemeval import load_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.embed_batch", description=__doc__)
    ap.add_argument("path", type=Path, metavar="DIR", help="a LongMemEval folder")
    ap.add_argument("--texts", type=int, default=256, help="texts per measurement (default 256)")
    ap.add_argument("--batches", default="8,16,32,64,128", help="batch sizes (default 8,16,32,64,128)")
    ap.add_argument("--threads", default="1,2", help="onnxruntime intra-op threads (default 1,2)")
    args = ap.parse_args(argv)
    texts = sorted({u.text for q in load_dir(args.path) for t in q.turns for u in per_message_units(t)})
    random.Random(0).shuffle(texts)
    probe = LocalEmbedder()
    tokens = dict(zip(texts, (min(c, probe.max_input_tokens) for c in probe.count_tokens(texts)), strict=True))
    by_len = sorted(texts, key=lambda t: tokens[t])
    sets = {"short": by_len[: args.texts], "long": by_len[-args.texts :]}
    print("set\tthreads\tbatch\ttokens/text\ttexts/s\ttokens/s\tload")
    for name, sample in sets.items():
        n_tokens = sum(tokens[t] for t in sample)
        for threads in (int(x) for x in args.threads.split(",")):
            for batch in (int(x) for x in args.batches.split(",")):
                e = LocalEmbedder(batch_size=batch, threads=threads)
                e.embed(sample[:batch])  # warm up the session
                t0 = time.monotonic()
                e.embed(sample)
                dt = time.monotonic() - t0
                print(
                    f"{name}\t{threads}\t{batch}\t{n_tokens / len(sample):.0f}\t{len(sample) / dt:.1f}\t"
                    f"{n_tokens / dt:.0f}\t{os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
