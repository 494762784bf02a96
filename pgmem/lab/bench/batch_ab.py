"""Two checkouts' LangGraph store batches over several namespaces side by side (a benchmark, not
a test).

    python -m pgmem.lab.bench.batch_ab URL URL2 [--python PY] [--python2 PY2] [--namespaces 8]
        [--puts 40] [--batches 100] [--prefill 50] [--gets 0]

URL and URL2 name two migrated databases as a superuser, each at the revision to compare (a
database migrated by each checkout's `pgmem migrate`); PY and PY2 (default: this interpreter) are
the Pythons whose pgmem writes each: another checkout's virtual environment measures that
checkout's PgmemStore against its database. Each side runs in a worker process of its Python
(this file, run with -P so that the interpreter's own pgmem is imported), with one PgmemStore of
pgmem's pieces (`index={"fields": ["text"]}`, word-hash vectors: no model time) on one
connection. A batch is `puts` puts of new items spread evenly over `namespaces` namespaces
("bench", "batch-ab", "n<j>"), each namespace its own scope: a batch of several opens them all
first since 0075 (`pgmem.open_scope`, one statement a scope), which `--namespaces 1` leaves out
(the control). First, not timed, `prefill` batches a side create the scopes, bind the model and
fill the tables, and the database is vacuumed and analyzed (timed from empty tables, batches of
one namespace came out 0.81x in one run and 1.81x in the next, as the tables grew); then
`batches` batches a side, alternating the sides batch by batch and which goes first. With
`gets`, the items are stored with a TTL and each batch also gets that many items of the batch
before it, each get refreshing its TTL (`pgmem.refresh_items`, one call a get). Timed, in
the worker: the wall clock of `store.batch` (embedding, the pipelined statements, the commit).
Every put must be stored; the scopes are forgotten at the end, on error too. Reported: p50 and
p95 a side, their ratio, and the commit of each side's pgmem."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

ROOT = ("bench", "batch-ab")
WORDS = ["pallet", "ledger", "harbour", "ferry", "invoice", "deadline", "printer", "garden", "oven", "ticket"]


def _namespace(j: int) -> tuple[str, ...]:
    return (*ROOT, f"n{j}")


def _ops(batch: int, puts: int, namespaces: int, gets: int = 0) -> list[Any]:
    from langgraph.store.base import GetOp, PutOp

    ops: list[Any] = [
        PutOp(
            _namespace(j % namespaces),
            f"b{batch}-{j}",
            {"text": f"Item {j} of batch {batch}: the {WORDS[j % 10]} and the {WORDS[(batch + j) % 10]} note {j}."},
        )
        for j in range(puts)
    ]
    # Gets of the previous batch's items (stored with a TTL, so each refreshes it: refresh_items).
    return ops + [GetOp(_namespace(j % namespaces), f"b{batch - 1}-{j}") for j in range(gets)]


def _forget(conn: Any, namespaces: int) -> None:
    from pgmem.forget import forget_scope
    from pgmem.integrations.langgraph import namespace_scope

    for j in range(namespaces):
        forget_scope(conn, namespace_scope(_namespace(j)))


def _stored(conn: Any, namespaces: int) -> int:
    from pgmem.integrations.langgraph import namespace_scope

    scopes = [namespace_scope(_namespace(j)) for j in range(namespaces)]
    row = conn.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = ANY(%s)", (scopes,)).fetchone()
    return int(str(row[0]))


def _line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def worker(url: str, namespaces: int, puts: int, prefill: int, gets: int = 0) -> int:
    """A side: reads `batch N` lines on stdin and answers each with the batch's milliseconds;
    `stop` forgets the scopes and answers with the items the batches left stored."""
    from pgmem.db import connect
    from pgmem.integrations.langgraph import PgmemStore
    from pgmem.lab.bench.langgraph_batch import HashWords, _commit

    try:
        conn = connect(url)
    except Exception as exc:  # one line to the main process, which says it
        print(f"error {_line(exc)}", flush=True)
        return 1
    try:
        _forget(conn, namespaces)
        ttl = {"default_ttl": 60.0, "refresh_on_read": True} if gets else None
        store = PgmemStore(conn, embedder=HashWords(), index={"fields": ["text"]}, ttl=ttl)
        for i in range(prefill):  # not timed
            store.batch(_ops(-prefill + i, puts, namespaces))
        conn.execute("VACUUM (ANALYZE)")
        print(f"ready {_commit()}", flush=True)
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "batch":
                ops = _ops(int(arg), puts, namespaces, gets)
                t = time.perf_counter()
                store.batch(ops)
                print(f"{(time.perf_counter() - t) * 1000:.4f}", flush=True)
            else:
                print(f"stored {_stored(conn, namespaces)}", flush=True)
                break
    except Exception as exc:
        print(f"error {_line(exc)}", flush=True)
        return 1
    finally:
        try:
            _forget(conn, namespaces)  # after `stop`, an error or the end of input
        finally:
            conn.close()
    return 0


class _Side:
    def __init__(self, python: str, url: str, namespaces: int, puts: int, prefill: int, gets: int = 0) -> None:
        self.python = python
        cmd = [python, "-P", str(Path(__file__).resolve()), "--worker", url]
        self.proc = subprocess.Popen(
            [*cmd, "--namespaces", str(namespaces), "--puts", str(puts), "--prefill", str(prefill),
             "--gets", str(gets)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(python).parent,
        )  # fmt: skip
        self.commit = self.ask(None).removeprefix("ready ")

    def ask(self, line: str | None) -> str:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        if line is not None:
            stdin.write(line + "\n")
            stdin.flush()
        answer = stdout.readline().strip()
        if not answer:
            raise RuntimeError(f"the worker of {self.python} stopped (exit {self.proc.wait()})")
        if answer.startswith("error "):
            raise RuntimeError(answer.removeprefix("error "))
        return answer

    def close(self) -> None:
        stdin: IO[str] | None = self.proc.stdin
        if stdin is not None and not stdin.closed:
            stdin.close()  # a worker still reading forgets its scopes on end of input
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run(
    url: str,
    url2: str,
    *,
    python: str,
    python2: str,
    namespaces: int = 8,
    puts: int = 40,
    batches: int = 100,
    prefill: int = 50,
    gets: int = 0,
) -> dict[str, Any]:
    sides: list[_Side] = []
    try:
        for py, u in ((python, url), (python2, url2)):
            sides.append(_Side(py, u, namespaces, puts, prefill, gets))
        times: list[list[float]] = [[], []]
        for i in range(batches):
            for side in (0, 1) if i % 2 else (1, 0):
                times[side].append(float(sides[side].ask(f"batch {i}")))
        stored = [int(s.ask("stop").removeprefix("stored ")) for s in sides]
    finally:
        for s in sides:
            s.close()
    want = puts * (batches + prefill)
    if stored != [want, want]:
        raise RuntimeError(f"items stored (URL, URL2): {stored}, not {want} each")
    out: dict[str, Any] = {"namespaces": namespaces, "puts": puts, "gets": gets, "batches": batches, "prefill": prefill}
    for name, s, ts in zip(("url", "url2"), sides, times, strict=True):
        out[name] = {
            "commit": s.commit,
            "p50_ms": round(statistics.median(ts), 3),
            "p95_ms": round(statistics.quantiles(ts, n=20)[-1], 3),
        }
    out["p50_ratio"] = round(out["url2"]["p50_ms"] / out["url"]["p50_ms"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgmem.lab.bench.batch_ab", description=__doc__.split("\n")[0])
    p.add_argument("url")
    p.add_argument("url2", nargs="?")
    p.add_argument("--python", default=sys.executable, help="the Python whose pgmem writes URL")
    p.add_argument("--python2", default=sys.executable, help="the Python whose pgmem writes URL2")
    p.add_argument("--namespaces", type=int, default=8)
    p.add_argument("--puts", type=int, default=40, help="puts a batch")
    p.add_argument("--batches", type=int, default=100, help="batches timed a side")
    p.add_argument("--prefill", type=int, default=50, help="batches a side put first, not timed")
    p.add_argument("--gets", type=int, default=0, help="gets a batch of the previous batch's items, with a TTL")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not (1 <= a.namespaces <= 1000 and a.namespaces <= a.puts <= 10_000 and 2 <= a.batches <= 100_000):
        p.error("--namespaces must be 1..1000, --puts namespaces..10000 and --batches 2..100000")
    if not 1 <= a.prefill <= 100_000:
        p.error("--prefill must be 1..100000")
    if not 0 <= a.gets <= a.puts:
        p.error("--gets must be 0..puts")
    if a.worker:
        return worker(a.url, a.namespaces, a.puts, a.prefill, a.gets)
    if a.url2 is None:
        p.error("URL2 is required")
    try:
        r = run(
            a.url, a.url2, python=a.python, python2=a.python2, namespaces=a.namespaces, puts=a.puts,
            batches=a.batches, prefill=a.prefill, gets=a.gets,
        )  # fmt: skip
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"batch_ab: {_line(exc)}", file=sys.stderr)
        return 1
    print(
        f"store.batch, {r['puts']} puts"
        + (f" and {r['gets']} gets (TTL refreshed)" if r["gets"] else "")
        + f" over {r['namespaces']} namespaces, {r['batches']} batches a side "
        f"(after {r['prefill']}), wall clock: "
        f"URL ({r['url']['commit']}) p50 {r['url']['p50_ms']} ms (p95 {r['url']['p95_ms']}), "
        f"URL2 ({r['url2']['commit']}) p50 {r['url2']['p50_ms']} ms (p95 {r['url2']['p95_ms']}); "
        f"URL2/URL p50 {r['p50_ratio']}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
