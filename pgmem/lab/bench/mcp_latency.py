"""Round-trip latency of the `pgmem mcp` tools through the MCP SDK's client over stdio (a
benchmark, not a test).

    python -m pgmem.lab.bench.mcp_latency [--turns 50] [--recalls 50]

Spawns `python -m pgmem mcp --scope <a fresh scope>` on DATABASE_URL (or the embedded server of
PGMEM_HOME), remembers `turns` turns (a user message and an assistant reply, ~60 words), recalls
`recalls` two-part questions, then forgets each thread; prints the median and 95th percentile
of each tool as the client measured it (embedding with the configured model included), and
the server's start-up time (interpreter, model load, schema check, MCP handshake)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

from pgmem.extras import require

TOPICS = ["the harbour ferry", "the vet visit", "the quarterly budget", "the staging deploy", "the kitchen oven"]


def _turn(i: int) -> list[dict[str, Any]]:
    topic = TOPICS[i % len(TOPICS)]
    user = f"Note {i} about {topic}: we agreed on step {i} and the owner is person {i % 7}. " * 3
    reply = f"Noted. For {topic} I will remember step {i}, owned by person {i % 7}, and remind you on day {i % 30}."
    return [{"role": "user", "content": user.strip()}, {"role": "assistant", "content": reply}]


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "n": len(xs),
        "p50_ms": round(statistics.median(xs) * 1000, 1),
        "p95_ms": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))] * 1000, 1),
    }


async def run(turns: int, recalls: int) -> dict[str, Any]:
    require("mcp", "mcp", "the MCP benchmark")
    from mcp import Client, StdioServerParameters

    scope = f"bench-mcp-{os.getpid()}-{int(time.time())}"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "pgmem", "mcp", "--scope", scope], env=dict(os.environ)
    )
    times: dict[str, list[float]] = {"remember": [], "recall": [], "forget": []}
    start = time.perf_counter()
    async with Client(params, read_timeout_seconds=300) as client:
        startup = time.perf_counter() - start
        for i in range(turns):
            t = time.perf_counter()
            r = await client.call_tool("remember", {"messages": _turn(i), "thread": f"t{i % 5}"})
            times["remember"].append(time.perf_counter() - t)
            assert not r.is_error, r.content
        for i in range(recalls):
            q = f"Who owns step {i % max(turns, 1)}? When is {TOPICS[i % len(TOPICS)]} due?"
            t = time.perf_counter()
            r = await client.call_tool("recall", {"query": q})
            times["recall"].append(time.perf_counter() - t)
            assert not r.is_error, r.content
        for k in range(min(turns, 5)):
            t = time.perf_counter()
            r = await client.call_tool("forget", {"thread": f"t{k}"})
            times["forget"].append(time.perf_counter() - t)
            assert not r.is_error, r.content
    return {"startup_s": round(startup, 2), **{tool: _ms(xs) for tool, xs in times.items() if xs}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.mcp_latency", description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=50)
    p.add_argument("--recalls", type=int, default=50)
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.turns, args.recalls)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
