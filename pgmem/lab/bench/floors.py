"""Where a model's recall floor belongs: cosines of true matches vs unrelated texts.

    python -m pgmem.lab.bench.floors DIR [--embedder local|e5] [--cache DIR] [--limit N]

DIR is a LongMemEval folder (the development `oracle/` set). Each question is embedded on
the query side (the whole question, as recall embeds the whole message) and each message of
the haystacks on the passage side (one vector per message, the evaluation's `per_message`
texts, so a warm evaluation cache serves them). True match = the best cosine between a
question and a message of one of its gold turns. Unrelated = every cosine between a question
and the messages of another question's haystack (question i against haystack i+1; a
LongMemEval haystack is about its own question's subject). Prints percentiles of both, and
the share of true matches each candidate floor keeps and of unrelated texts it lets through.
A floor is a cut of what is returned, not of the ranking: it should keep (almost) every
true match and drop the bulk of the unrelated texts."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from pgmem.config import Settings
from pgmem.embedders import from_settings
from pgmem.embedders.base import embed_side
from pgmem.lab.evaluation.common import CachedEmbedder
from pgmem.lab.evaluation.conversations import per_message_units
from pgmem.lab.evaluation.longmemeval import load_dir
from pgmem.recall import WHOLE_MESSAGE_BYTES
from pgmem.splitting import cap_bytes_keep_end

PERCENTILES = (1, 5, 10, 50, 90, 95, 99)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.floors", description=__doc__)
    ap.add_argument("path", type=Path, metavar="DIR", help="a LongMemEval folder")
    ap.add_argument("--embedder", default=None, help="local or e5 (default: PGMEM_EMBEDDER)")
    ap.add_argument("--cache", type=Path, default=None, help="embedding cache (default: $PGMEM_HOME/cache)")
    ap.add_argument("--limit", type=int, default=None, help="a seeded sample of N questions (default: all)")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    if args.embedder:
        env["PGMEM_EMBEDDER"] = args.embedder
    s = Settings.from_env(env)
    emb = CachedEmbedder(from_settings(s), args.cache or s.home / "cache")
    questions = load_dir(args.path, limit=args.limit)
    units = [[(t.index, u.text) for t in q.turns for u in per_message_units(t)] for q in questions]
    texts = sorted({text for us in units for _, text in us})
    pvec = dict(zip(texts, emb.embed(texts), strict=True))
    wholes = [cap_bytes_keep_end(" ".join(q.question.split()), WHOLE_MESSAGE_BYTES) for q in questions]
    qvecs = embed_side(emb, wholes, "query")
    true: list[float] = []
    unrelated: list[float] = []
    for i, q in enumerate(questions):
        gold = [pvec[text] for turn, text in units[i] if turn in q.gold]
        if gold:
            true.append(float(np.max(np.stack(gold) @ qvecs[i])))
        other = units[(i + 1) % len(questions)]
        if other:
            unrelated += [float(c) for c in np.stack([pvec[text] for _, text in other]) @ qvecs[i]]
    t, u = np.array(true), np.array(unrelated)
    print(f"model {emb.model_id}; {len(t)} true matches, {len(u)} unrelated pairs; {len(texts)} messages")
    print("percentile\t" + "\t".join(f"p{p}" for p in PERCENTILES))
    print("true\t" + "\t".join(f"{np.percentile(t, p):.3f}" for p in PERCENTILES))
    print("unrelated\t" + "\t".join(f"{np.percentile(u, p):.3f}" for p in PERCENTILES))
    lo, hi = np.floor(np.percentile(u, 1) * 100) / 100, np.ceil(np.percentile(t, 50) * 100) / 100
    print("floor\ttrue kept\tunrelated kept")
    for f in np.arange(lo, hi + 1e-9, 0.01):
        print(f"{f:.2f}\t{np.mean(t >= f):.1%}\t{np.mean(u >= f):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
