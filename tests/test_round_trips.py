"""The round-trip lab tool (pgmem.lab.bench.round_trips): pgmem's calls through a local proxy that
delays every chunk, counting the client's round trips on the wire. A recall (of a one-part
message, or of part vectors) is one round trip, storing a turn two, and storing a turn in each of
20 threads in bulk two, with and without the delay; with --stores a PgmemStore put two and a
search three; its database is dropped afterwards; a bad input (no server there) is one line and
exit 1 (a malformed option: argparse's exit 2)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgmem.lab.bench import round_trips
from pgmem.lab.evaluation import common


def _gone(url: str, names: list[str]) -> bool:
    """True when none of the databases this run made is left (a count of every `pgmem_eval_`
    database raced the other test worker's evaluations, which share this server)."""
    with psycopg.connect(url) as c:
        row = c.execute("SELECT count(*) FROM pg_database WHERE datname = ANY(%s)", (names,)).fetchone()
    return row == (0,)


def test_round_trips_counts_each_calls_trips_through_the_delay(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    real = common.temporary_database

    @contextlib.contextmanager
    def recorded(*args: Any, **kwargs: Any) -> Iterator[str]:
        with real(*args, **kwargs) as name:
            made.append(name)
            yield name

    monkeypatch.setattr(round_trips, "temporary_database", recorded)
    out = tmp_path / "rt.json"
    assert round_trips.main([db_url, "--calls", "2", "--delay-ms", "0.2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    trips = {(r["call"], r["delay_ms"]): r["round_trips"] for r in rows}
    assert trips == {
        (call, delay): (2 if call.startswith("ingest") else 1) for call in round_trips.CALLS for delay in (0.0, 0.2)
    }
    assert all(r["calls"] == 2 and r["p50_ms"] > 0 for r in rows)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 15 and printed[-1].startswith("a round trip through the 0.2 ms delay cost ")
    assert made and _gone(db_url, made)

    # --stores: PgmemStore with LangGraph's index config, a put and a search (PostgresStore's rows
    # beside them are LangGraph's own and not asserted).
    assert round_trips.main([db_url, "--calls", "1", "--stores", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    store_trips = {(r["call"], r["delay_ms"]): r["round_trips"] for r in rows if r["call"].startswith("PgmemStore")}
    assert store_trips == {("PgmemStore put", 0.0): 2, ("PgmemStore put", 0.5): 2,
                           ("PgmemStore search", 0.0): 3, ("PgmemStore search", 0.5): 3}  # fmt: skip
    assert {r["call"] for r in rows} == set(round_trips.CALLS + round_trips.STORE_CALLS)
    capsys.readouterr()

    no_server = tmp_path / "no-server"
    no_server.mkdir()
    assert round_trips.main([f"postgresql://postgres@/postgres?host={no_server}", "--calls", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("round_trips: ") and "Traceback" not in err[0]
    for bad in (["--calls", "0"], ["--delay-ms", "-1"], ["--calls", "many"]):
        with pytest.raises(SystemExit) as exit_:
            round_trips.main([db_url, *bad])
        assert exit_.value.code == 2
