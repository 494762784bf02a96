"""Local MiniLM throughput by positions per call, concurrent calls and graph (a benchmark, not a test).

    python -m pgmem.lab.bench.embed_batch DIR [--texts 256] [--positions 256,1024,8192]
        [--workers 1,2] [--rounds 3]

DIR is a LongMemEval folder: the texts are one vector per message, as the evaluation embeds
them (a seeded sample), measured once short (the shortest `--texts`) and once long (the
longest). Every setting runs once per round, rounds interleaved, so a change in the machine's
load reaches all settings alike. Prints each setting's median texts/s and tokens/s and its
ratio to the default (`CALL_POSITIONS`, every core as a one-core worker), with the load
average, because on a shared machine that decides the absolute figure. The row `exported`
runs the default setting on the model graph as exported, with the NaN guards pgmem drops
(`pgmem.embedders.local.without_nan_guards`)."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path
from unittest import mock

from pgmem.embedders.local import CALL_POSITIONS, LocalEmbedder
from pgmem.lab.evaluation.conversations import per_message_units
from pgmem.lab.evaluation.longmemeval import load_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.embed_batch", description=__doc__)
    ap.add_argument("path", type=Path, metavar="DIR", help="a LongMemEval folder")
    ap.add_argument("--texts", type=int, default=256, help="texts per measurement (default 256)")
    ap.add_argument("--positions", default="256,1024,8192", help="model positions per call (default 256,1024,8192)")
    ap.add_argument("--workers", default="1,2", help="concurrent one-core calls; 1 = every call on all cores")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the median is printed (default 3)")
    args = ap.parse_args(argv)
    texts = sorted({u.text for q in load_dir(args.path) for t in q.turns for u in per_message_units(t)})
    random.Random(0).shuffle(texts)
    default = LocalEmbedder()
    tokens = dict(zip(texts, (min(c, default.max_input_tokens) for c in default.count_tokens(texts)), strict=True))
    by_len = sorted(texts, key=lambda t: tokens[t])
    sets = {"short": by_len[: args.texts], "long": by_len[-args.texts :]}
    settings: dict[tuple[int, int, str], LocalEmbedder] = {(CALL_POSITIONS, 0, "lean"): default}
    for workers in (int(x) for x in args.workers.split(",")):
        for positions in (int(x) for x in args.positions.split(",")):
            settings.setdefault((positions, workers, "lean"), LocalEmbedder(call_positions=positions, workers=workers))
    with mock.patch("pgmem.embedders.local.without_nan_guards", lambda model: (model, 0)):
        settings[(CALL_POSITIONS, 0, "exported")] = LocalEmbedder()
    print("set\tpositions\tworkers\tgraph\ttokens/text\ttexts/s\ttokens/s\tx default\tload")
    for name, sample in sets.items():
        n_tokens = sum(tokens[t] for t in sample)
        rates: dict[tuple[int, int, str], list[float]] = {k: [] for k in settings}
        for e in settings.values():
            e.embed(sample[:8])  # warm up the sessions
        for _ in range(args.rounds):
            for key, e in settings.items():
                t0 = time.monotonic()
                e.embed(sample)
                rates[key].append(len(sample) / (time.monotonic() - t0))
        base = statistics.median(rates[(CALL_POSITIONS, 0, "lean")])
        for (positions, workers, graph), got in rates.items():
            rate = statistics.median(got)
            print(
                f"{name}\t{positions}\t{workers or 'default'}\t{graph}\t{n_tokens / len(sample):.0f}\t{rate:.1f}\t"
                f"{rate * n_tokens / len(sample):.0f}\t{rate / base:.2f}\t{os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
