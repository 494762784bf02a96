"""Ingest throughput, side by side in one run (a benchmark, not a test).

    python -m pgmem.lab.bench.ingest [--turns 400] [--e2e-turns 40]

1. database side: pieces/s through ingest_turns -> pgmem.put_turn with precomputed vectors
   (a lookup table stands in for the model, so the embedder is not measured);
2. for reference, binary COPY of the same rows straight into pgmem.piece (pgvector's
   psycopg adapter) — the path put_turn's array parameters were chosen over;
3. end to end with the local MiniLM model.
Runs in a temporary database on the embedded server (or DATABASE_URL's server)."""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np

from pgmem.config import Settings
from pgmem.db import connect, database_url
from pgmem.embedders.base import FloatArray
from pgmem.embedders.local import LocalEmbedder
from pgmem.ingest import ingest_turns
from pgmem.lab.evaluation.common import temporary_database
from pgmem.pieces import turn_pieces
from pgmem.sqlfiles import InstallParams
from pgmem.turns import Turn, turn_from_dict

WORDS = [
    *("deploy", "token", "budget", "shipment", "customs", "vet", "dogs"),
    *("runner", "staging", "index", "vacuum", "query", "plan", "cache"),
]


def synthetic_turns(n: int, scope: str, seed: int = 0) -> list[Turn]:
    rng = np.random.default_rng(seed)
    turns = []
    for i in range(n):

        def sentences(k: int) -> str:
            return " ".join(" ".join(rng.choice(WORDS, size=12)).capitalize() + "." for _ in range(k))

        rows = "\n".join(f"row {j}," + ",".join(rng.choice(WORDS, size=6)) for j in range(int(rng.integers(20, 120))))
        turns.append(
            turn_from_dict(
                {
                    "scope": scope,
                    "thread": f"t{i % 7}",
                    "turn": i,
                    "time": "2026-10-16T14:02:00Z",
                    "messages": [
                        {"role": "user", "content": sentences(3)},
                        {
                            "role": "assistant",
                            "content": sentences(2),
                            "tool_calls": [
                                {"id": "c", "type": "function", "function": {"name": "query", "arguments": "{}"}}
                            ],
                        },
                        {"role": "tool", "tool_call_id": "c", "content": rows},
                        {"role": "assistant", "content": sentences(4)},
                    ],
                }
            )
        )
    return turns


class TableEmbedder:
    """Returns vectors computed beforehand (a dict lookup): the model is not measured."""

    def __init__(self, real: LocalEmbedder, texts: Sequence[str]) -> None:
        self.real = real
        rng = np.random.default_rng(1)
        v = rng.standard_normal((len(texts), real.dims)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        self.table = {hashlib.sha1(t.encode()).digest(): v[i] for i, t in enumerate(texts)}

    model_id = property(lambda self: self.real.model_id)
    dims = property(lambda self: self.real.dims)
    max_input_tokens = property(lambda self: self.real.max_input_tokens)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.real.count_tokens(texts)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        return np.stack([self.table[hashlib.sha1(t.encode()).digest()] for t in texts])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--turns", type=int, default=400)
    ap.add_argument("--e2e-turns", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    real = LocalEmbedder()
    server = database_url(Settings.from_env())
    results: dict[str, float] = {}
    with temporary_database(server, InstallParams(384, 384)) as url, connect(url) as conn:
        db_rates, copy_rates = [], []
        for r in range(args.repeats):
            turns = synthetic_turns(args.turns, f"bench{r}", seed=r)
            pieces = [p for t in turns for p in turn_pieces(t, real)]
            fake = TableEmbedder(real, [p.text for p in pieces])
            t0 = time.perf_counter()
            rep = ingest_turns(conn, turns, fake)
            db_rates.append(rep.pieces / (time.perf_counter() - t0))

            # Reference: binary COPY of the same pieces straight into the table.
            vecs = fake.embed([p.text for p in pieces])
            key = conn.execute("SELECT piece_model_key FROM pgmem.scope WHERE scope_id = %s", (f"bench{r}",)).fetchone()
            assert key is not None
            conn.execute("ALTER TABLE pgmem.piece DROP CONSTRAINT IF EXISTS piece_scope_id_thread_id_turn_index_fkey")
            # The scope row must exist: piece's insert trigger copies its scope_no.
            conn.execute("SELECT pgmem.bind_scope_model(%s, %s, %s)", (f"copy{r}", fake.model_id, fake.dims))
            t0 = time.perf_counter()
            with (
                conn.cursor() as cur,
                cur.copy(
                    "COPY pgmem.piece (scope_id, kind, unit_kind, thread_id, turn_index, label, body, raw_embedding,"
                    " embedding, model_key) FROM STDIN WITH (FORMAT BINARY)"
                ) as copy,
            ):
                copy.set_types(["text", "text", "text", "text", "int4", "text", "text", "vector", "vector", "int4"])
                for p, v in zip(pieces, vecs, strict=True):
                    copy.write_row((f"copy{r}", "memory", p.unit_kind, "t", 0, p.label, p.body, v, v, key[0]))
            copy_rates.append(len(pieces) / (time.perf_counter() - t0))
        results["pieces_per_run"] = rep.pieces
        results["db_side_put_turn_pieces_per_s"] = round(statistics.median(db_rates), 1)
        results["binary_copy_reference_pieces_per_s"] = round(statistics.median(copy_rates), 1)

        turns = synthetic_turns(args.e2e_turns, "e2e", seed=99)
        t0 = time.perf_counter()
        rep = ingest_turns(conn, turns, real)
        dt = time.perf_counter() - t0
        results["end_to_end_local_model_pieces_per_s"] = round(rep.pieces / dt, 1)
        results["end_to_end_pieces"] = rep.pieces
    results["ratio_db_side_over_end_to_end"] = round(
        results["db_side_put_turn_pieces_per_s"] / results["end_to_end_local_model_pieces_per_s"], 1
    )
    for k, v in results.items():
        print(f"{k:40s} {v}", file=sys.stderr)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
