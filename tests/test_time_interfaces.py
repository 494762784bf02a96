"""since / until (and the message time) through every way in: the CLI, the MCP server driven by
the MCP SDK's own client, and the LangGraph store; bad values are one line, nothing stored is
lost."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgmem.cli import main
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.ingest import ingest_turns
from pgmem.turns import turn_from_dict

Conn = psycopg.Connection[tuple[object, ...]]

HIKES = [
    ("2026-03-02T10:00:00Z", "We went hiking in the hills and saw a heron by the lake."),
    ("2026-05-11T10:00:00Z", "We went hiking on the coast and saw seals on the rocks."),
]


@pytest.fixture
def hikes(conn: Conn, embedder: Embedder) -> Conn:
    turns = [
        turn_from_dict(
            {
                "scope": "s",
                "thread": "t1",
                "turn": i,
                "time": when,
                "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}],
            }
        )
        for i, (when, text) in enumerate(HIKES)
    ]
    assert ingest_turns(conn, turns, embedder).inserted == 2
    return conn


def cli_turns(capsys: pytest.CaptureFixture[str], *args: str) -> set[int]:
    assert main(["recall", "Where did we go hiking?", "--scope", "s", "--floor", "-1", "--json", *args]) == 0
    out = json.loads(capsys.readouterr().out)
    return {h["turn_index"] for g in out["groups"] for h in g["hits"]}


def test_cli_since_until_and_message_time(
    hikes: Conn, app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    assert cli_turns(capsys) == {0, 1}
    assert cli_turns(capsys, "--since", "2026-04-01") == {1}
    assert cli_turns(capsys, "--until", "2026-04-01T00:00:00+02:00") == {0}
    # Bounds that keep no turn: nothing searched (exit 1), and the answer says why (0111).
    assert main(["recall", "Where did we go hiking?", "--scope", "s", "--floor", "-1", "--json",
                 "--since", "2026-04-01", "--until", "2026-04-02"]) == 1  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["empty_reason"] == "bounds_empty" and not any(g["hits"] for g in out["groups"])
    assert main(["recall", "Where did we go hiking in March?", "--scope", "s", "--json", "--floor", "-1",
                 "--message-time", "2026-05-25T09:00:00Z"]) == 0  # fmt: skip
    first = json.loads(capsys.readouterr().out)["groups"][0]["hits"][0]
    assert first["turn_index"] == 0
    assert main(["recall", "Where did we go hiking?", "--scope", "s", "--message-time", "now"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--since", "last week"], "--since must be an ISO 8601 time"),
        (["--until", "2026-13-40"], "--until must be an ISO 8601 time"),
        (["--message-time", "\x00"], "--message-time must be an ISO 8601 time"),
        (["--since", "2026-05-01", "--until", "2026-04-01"], "until"),
        (["--since", "2026-05-01", "--until", "2026-05-01"], "must be later than since"),
    ],
)
def test_cli_bad_times_are_one_line(
    hikes: Conn,
    app_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    assert main(["recall", "Where did we go hiking?", "--scope", "s", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pgmem: error:") and message in err and len(err.splitlines()) == 1, err


def test_mcp_recall_takes_since_and_until(db_url: str, tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the [mcp] extra is not installed")
    from mcp import Client

    from tests.test_mcp_server import _data, _error, _params

    async def body(client: Client) -> dict[str, Any]:
        for when, text in HIKES:
            _data(await client.call_tool("remember", {"note": text, "thread": "hikes", "time": when}))
        q = "Where did we go hiking?"
        out: dict[str, Any] = {
            "all": _data(await client.call_tool("recall", {"query": q, "floor": -1})),
            "since": _data(await client.call_tool("recall", {"query": q, "floor": -1, "since": "2026-04-01"})),
            "until": _data(await client.call_tool("recall", {"query": q, "floor": -1, "until": "2026-04-01T00:00Z"})),
            "errors": [
                _error(await client.call_tool("recall", {"query": q, "since": "last week"})),
                _error(await client.call_tool("recall", {"query": q, "until": {"a": 1}})),
                _error(await client.call_tool("recall", {"query": q, "since": "2026-05-01", "until": "2026-04-01"})),
                _error(await client.call_tool("recall", {"query": q, "since": "2026-05-01\x00"})),
            ],
            "yesterday": _data(await client.call_tool("recall", {"query": "What did we do yesterday?", "floor": -1})),
        }
        return out

    async def main_() -> dict[str, Any]:
        async with Client(_params(db_url, "s", tmp_path), read_timeout_seconds=120) as client:
            return await body(client)

    out = asyncio.run(main_())

    def found(r: dict[str, Any]) -> set[int]:
        return {h["turn_index"] for g in r["groups"] for h in g["hits"]}

    assert found(out["all"]) == {0, 1} and found(out["since"]) == {1} and found(out["until"]) == {0}
    assert "ISO 8601" in out["errors"][0] and "ISO 8601" in out["errors"][1]
    assert "must be later than since" in out["errors"][2] and "ISO 8601" in out["errors"][3]
    # Nothing of the message's "yesterday" was stored then: a boost, not a filter, so both remain.
    assert found(out["yesterday"]) == {0, 1}


def test_store_search_takes_since_and_until_in_its_filter(conn: Conn, embedder: Embedder) -> None:
    pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")
    from pgmem.integrations.langgraph import PgmemStore

    store = PgmemStore(conn, embedder=embedder, floor=-1.0)
    store.put(("u",), "heron", {"text": HIKES[0][1]})
    time.sleep(0.05)
    middle = datetime.now(UTC)
    time.sleep(0.05)
    store.put(("u",), "seals", {"text": HIKES[1][1]})
    q = "Where did we go hiking?"
    assert {i.key for i in store.search(("u",), query=q)} == {"heron", "seals"}
    assert {i.key for i in store.search(("u",), query=q, filter={"$since": middle.isoformat()})} == {"seals"}
    assert {i.key for i in store.search(("u",), query=q, filter={"$until": middle})} == {"heron"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"$since": "last week"}, "ISO 8601"),
        ({"$since": middle, "$until": middle}, "must be later than since"),
        ({"$until": [1]}, "ISO 8601"),
        ({"$since": "2026-05-01" + "x" * 100_000}, "ISO 8601"),
    ]
    for bad, message in cases:
        # Under a prefix that holds no namespace too: no recall runs there, the window is refused.
        for prefix in (("u",), ("nobody",)):
            with pytest.raises(InputError, match=message) as exc:
                store.search(prefix, query=q, filter=bad)
            assert len(str(exc.value)) < 400, len(str(exc.value))  # the bad value is quoted, not echoed whole
    with pytest.raises(InputError, match="bound a search with a query"):
        store.search(("u",), filter={"$since": middle})
    assert {i.key for i in store.search(("u",), query=q)} == {"heron", "seals"}
    # The bounds are the item's first put (created_at, its turn's time), not its last
    # (updated_at): LangGraph's stores have no time filter (PostgresStore and InMemoryStore read
    # "$since" as a value field, which no item has), and pgmem's window applies in SQL before
    # the ranking, to the turns, whose time a put again keeps (review rt54, docs/langgraph.md).
    store.put(("u",), "heron", {"text": HIKES[0][1] + " Again."})
    heron = store.get(("u",), "heron")
    assert heron is not None and heron.updated_at > middle > heron.created_at
    assert {i.key for i in store.search(("u",), query=q, filter={"$since": middle.isoformat()})} == {"seals"}
    assert store.search(("u",))[0].key == "heron"  # a listing: newest put first


def test_cli_now_is_this_machines_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dates are read as days of the message time's zone: 'now' at a terminal is the terminal's
    zone (it was UTC, so 'yesterday' typed in a New York evening read New York's today)."""
    from zoneinfo import ZoneInfo

    from pgmem.cli.memory import _time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        now = _time("now", "--message-time")
        assert now is not None
        assert now.utcoffset() == datetime.now(ZoneInfo("America/New_York")).utcoffset()
    finally:
        monkeypatch.undo()
        time.tzset()
