"""A logged recall replays as it ran: the recall log keeps every argument that decides which
turns a recall searched (thread, metadata filter, since / until), and explain_logged_recall
applies them, so its kept candidates are the hits the caller got. As the app login, through
the Python API, its async twin and the CLI."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import psycopg
import pytest

import pgmem.aio
from pgmem.cli import main
from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.ingest import ingest_turns
from pgmem.recall import Recall, embed_query, recall, recall_vectors
from pgmem.turns import turn_from_dict

Conn = psycopg.Connection[tuple[object, ...]]
Q = "Where did we go hiking?"
#: Every piece of the scope fits in x: a hit is cut only by what decides which turns are searched.
X = 10
TURNS = [
    ("03-02", "voice", "We went hiking in the hills and saw a heron by the lake."),
    ("05-11", "chat", "We went hiking on the coast and saw seals on the rocks."),
    ("06-20", "voice", "My gym membership costs 30 dollars a month."),
]


@pytest.fixture
def store(conn: Conn, embedder: Embedder) -> Conn:
    turns = [
        turn_from_dict(
            {
                "scope": "s",
                "thread": "t",
                "turn": i,
                "time": f"2026-{day}T10:00:00Z",
                "metadata": {"channel": channel},
                "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}],
            }
        )
        for i, (day, channel, text) in enumerate(TURNS)
    ]
    assert ingest_turns(conn, turns, embedder).inserted == len(TURNS)
    return conn


def at(day: str) -> datetime:
    return datetime.fromisoformat(f"2026-{day}T00:00:00+00:00")


def hits(groups: list[dict[str, Any]]) -> set[tuple[int, int]]:
    """The hits of a recall's JSON groups (`pgmem recall --json`)."""
    return {(int(g["part_no"]), int(h["piece_id"])) for g in groups for h in g["hits"]}


def got(r: Recall) -> set[tuple[int, int]]:
    return {(g.part_no, h.piece_id) for g in r.groups for h in g.hits}


def turns_of(store: Conn, found: set[tuple[int, int]]) -> set[int]:
    with scoped(store, "s"):
        rows = store.execute(
            "SELECT DISTINCT turn_index FROM pgmem.piece WHERE scope_id = 's' AND piece_id = ANY(%s)",
            ([p for _, p in found],),
        ).fetchall()
    return {int(str(r[0])) for r in rows}


def replayed(store: Conn, recall_id: int) -> tuple[tuple[object, ...], set[tuple[int, int]]]:
    """The logged row's filter and bounds, and what explain_logged_recall keeps."""
    with scoped(store, "s"):
        row = store.execute(
            "SELECT metadata_filter, since, until FROM pgmem.recall_log WHERE recall_id = %s", (recall_id,)
        ).fetchone()
        kept = store.execute(
            "SELECT part_no, piece_id FROM pgmem.explain_logged_recall('s', %s) WHERE verdict = 'kept'",
            (recall_id,),
        ).fetchall()
    assert row is not None
    return row, {(int(str(p)), int(str(i))) for p, i in kept}


def logged_recall(
    how: str,
    store: Conn,
    app_url: str,
    embedder: Embedder,
    *,
    metadata_filter: dict[str, object] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[int, set[tuple[int, int]]]:
    """A logged recall of Q in scope s by `how`: its recall id and its hits."""
    flt, s, u = metadata_filter, since, until
    if how == "sync":
        r = recall(store, "s", Q, embedder, x=X, floor=-1, log=True, metadata_filter=flt, since=s, until=u)
    elif how == "vectors":
        q = embed_query(Q, embedder)
        r = recall_vectors(
            store, "s", q.texts, q.blended, message=Q, x=X, floor=-1, log=True, metadata_filter=flt, since=s, until=u
        )
    else:

        async def run() -> Recall:
            async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as db:
                return await pgmem.aio.recall(
                    db, "s", Q, embedder, x=X, floor=-1, log=True, metadata_filter=flt, since=s, until=u
                )

        r = asyncio.run(run())
    assert r.recall_id is not None
    return r.recall_id, got(r)


@pytest.mark.parametrize("how", ["sync", "vectors", "aio"])
def test_a_logged_recall_with_a_metadata_filter_replays_with_it(
    store: Conn, app_url: str, embedder: Embedder, how: str
) -> None:
    recall_id, found = logged_recall(how, store, app_url, embedder, metadata_filter={"channel": "chat"})
    assert turns_of(store, found) == {1}  # the filter held
    row, kept = replayed(store, recall_id)
    assert kept == found
    assert row == ({"channel": "chat"}, None, None)


def test_a_logged_recall_with_a_metadata_filter_replays_with_it_from_the_cli(
    store: Conn, app_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", app_url)
    args = ["recall", Q, "--scope", "s", "--filter", '{"channel": "chat"}', "-x", str(X), "--floor", "-1"]
    assert main([*args, "--log", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    found = hits(out["groups"])
    assert turns_of(store, found) == {1}
    row, kept = replayed(store, int(out["recall_id"]))
    assert kept == found
    assert row == ({"channel": "chat"}, None, None)


@pytest.mark.parametrize("how", ["sync", "aio"])
def test_a_logged_recall_with_since_until_replays_inside_them(
    store: Conn, app_url: str, embedder: Embedder, how: str
) -> None:
    recall_id, found = logged_recall(how, store, app_url, embedder, since=at("04-01"), until=at("06-01"))
    assert turns_of(store, found) == {1}
    row, kept = replayed(store, recall_id)
    assert kept == found
    assert row == (None, at("04-01"), at("06-01"))
    # With the filter too: both apply.
    recall_id, found = logged_recall(
        how, store, app_url, embedder, since=at("04-01"), metadata_filter={"channel": "voice"}
    )
    assert turns_of(store, found) == {2}
    row, kept = replayed(store, recall_id)
    assert kept == found
    assert row == ({"channel": "voice"}, at("04-01"), None)
