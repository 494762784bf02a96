"""A logged recall replays as it ran: the recall log keeps every argument that decides which
turns a recall searched (thread, metadata filter, since / until), and explain_logged_recall
applies them, so its kept candidates are the hits the caller got. replay_logged_recall runs the
recall itself again (mode, time window and recency too), so its rows are the caller's hits in
the caller's order, each marked with its logged rank. As the app login, through the Python API,
its async twin and the CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import datetime
from typing import Any

import psycopg
import pytest

import pgmem.aio
from pgmem.cli import main
from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.forget import forget_turn
from pgmem.ingest import ingest_turns
from pgmem.recall import Recall, embed_query, recall, recall_vectors
from pgmem.turns import Turn, turn_from_dict

Conn = psycopg.Connection[tuple[object, ...]]
Q = "Where did we go hiking?"
#: Every piece of the scope fits in x: a hit is cut only by what decides which turns are searched.
X = 10
TURNS = [
    ("03-02", "voice", "We went hiking in the hills and saw a heron by the lake."),
    ("05-11", "chat", "We went hiking on the coast and saw seals on the rocks."),
    ("06-20", "voice", "My gym membership costs 30 dollars a month."),
]


def dated_turn(i: int, day: str, channel: str, text: str) -> Turn:
    """Turn i of thread t in scope s, on that day of 2026, with its channel as metadata."""
    return turn_from_dict(
        {
            "scope": "s",
            "thread": "t",
            "turn": i,
            "time": f"2026-{day}T10:00:00Z",
            "metadata": {"channel": channel},
            "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}],
        }
    )


@pytest.fixture
def store(conn: Conn, embedder: Embedder) -> Conn:
    turns = [dated_turn(i, day, channel, text) for i, (day, channel, text) in enumerate(TURNS)]
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


# replay_logged_recall: a diary where each logged argument changes the answer (checked below).
DIARY = [
    ("03-02", "voice", "We went hiking in the hills and saw a heron by the lake."),
    ("03-09", "chat", "We went hiking on the coast and saw seals on the rocks."),
    ("04-20", "voice", "My gym membership costs 30 dollars a month."),
    ("05-04", "voice", "We hiked up the volcano; the trail was steep."),
    ("06-15", "voice", "Hiking boots need new laces before the next trip."),
    ("07-01", "chat", "The dentist appointment moved to Friday."),
    ("07-19", "chat", "We went hiking in the hills and saw a heron by the lake."),
    ("08-02", "voice", "The car needs an oil change."),
    ("08-30", "chat", "I started learning Spanish on an app."),
    ("09-12", "voice", "Dinner with Sam is on Saturday at eight."),
]
HILLS = "Where did we go hiking in the hills?"
#: The replayed recall's arguments: hybrid (the default), a metadata filter and a time window.
VOICE_IN_MAY: dict[str, Any] = {
    "metadata_filter": {"channel": "voice"},
    "time_from": at("05-01"),
    "time_to": at("06-01"),
}
REPLAY = "SELECT part_no, rank, piece_id, turn_index, logged_rank, change FROM pgmem.replay_logged_recall('s', %s)"


def diary_turn(i: int, text: str) -> Turn:
    day, channel, _ = DIARY[i]
    return dated_turn(i, day, channel, text)


@pytest.fixture
def diary(conn: Conn, embedder: Embedder) -> Conn:
    assert ingest_turns(conn, [diary_turn(i, t) for i, (_, _, t) in enumerate(DIARY)], embedder).inserted == len(DIARY)
    return conn


def ranked(r: Recall) -> list[tuple[int, int, int]]:
    """A recall's hits as (part_no, rank, piece_id), in the caller's order."""
    return [(g.part_no, h.rank, h.piece_id) for g in r.groups for h in g.hits]


def replay(conn: Conn, recall_id: int) -> list[tuple[Any, ...]]:
    with scoped(conn, "s"):
        return conn.execute(REPLAY, (recall_id,)).fetchall()


def test_a_logged_hybrid_recall_with_a_window_and_a_filter_replays_to_the_callers_hits(
    diary: Conn, embedder: Embedder
) -> None:
    r = recall(diary, "s", HILLS, embedder, x=4, floor=-1, log=True, **VOICE_IN_MAY)
    assert r.recall_id is not None
    rows = replay(diary, r.recall_id)
    assert [(p, k, i) for p, k, i, *_ in rows] == ranked(r)
    assert all(logged == k and change == "same" for _, k, _, _, logged, change in rows)
    # The answer the replay must reproduce depends on each argument: without the window, in
    # vector mode, without the filter, or by cosine alone (explain_logged_recall) it differs.
    other = {
        "no window": recall(diary, "s", HILLS, embedder, x=4, floor=-1, metadata_filter={"channel": "voice"}),
        "vector": recall(diary, "s", HILLS, embedder, x=4, floor=-1, mode="vector", **VOICE_IN_MAY),
        "no filter": recall(diary, "s", HILLS, embedder, x=4, floor=-1, time_from=at("05-01"), time_to=at("06-01")),
    }
    for name, o in other.items():
        assert ranked(o) != ranked(r), name
    with scoped(diary, "s"):
        by_cosine = diary.execute(
            "SELECT part_no, candidate, piece_id FROM pgmem.explain_logged_recall('s', %s) WHERE verdict = 'kept'",
            (r.recall_id,),
        ).fetchall()
    assert [(int(str(p)), int(str(k)), int(str(i))) for p, k, i in by_cosine] != ranked(r)


def test_a_replay_shows_a_hit_edited_away_since_as_missing_and_marks_the_rest(diary: Conn, embedder: Embedder) -> None:
    r = recall(diary, "s", HILLS, embedder, x=4, floor=-1, log=True, **VOICE_IN_MAY)
    assert r.recall_id is not None
    logged = {i: k for _, k, i in ranked(r)}
    edited = next(h for g in r.groups for h in g.hits if h.turn_index != 3)  # a hit outside the window's turn
    assert edited.turn_index is not None
    # The hit's turn is edited (its pieces are replaced); the log row stays, a forget would delete it.
    changed = ingest_turns(diary, [diary_turn(edited.turn_index, "We stayed home and baked bread.")], embedder)
    assert changed.replaced == 1
    rows = replay(diary, r.recall_id)
    missing = [(i, k, logged_k) for _, k, i, _, logged_k, change in rows if change == "missing"]
    assert missing == [(edited.piece_id, None, logged[edited.piece_id])]
    assert rows[-1][2] == edited.piece_id  # listed after the part's hits
    now = [row for row in rows if row[5] != "missing"]
    assert [k for _, k, *_ in now] == list(range(1, 5))  # still x hits
    for _, k, i, _, logged_k, change in now:
        assert logged_k == logged.get(i)
        assert change == ("new" if i not in logged else "same" if k == logged[i] else "moved"), (k, i, logged_k)
    assert {i for _, _, i, *_, c in now if c != "new"} == set(logged) - {edited.piece_id}
    assert [c for *_, c in now].count("new") == 1
    # Forgetting a turn the recall returned deletes its log row (it holds the text): nothing to replay.
    forget_turn(diary, "s", "t", 3)
    with pytest.raises(psycopg.errors.NoDataFound, match=f"recall {r.recall_id} is not in the recall log of scope s"):
        replay(diary, r.recall_id)


def test_a_logged_recall_without_a_recency_replays_with_the_default(diary: Conn, embedder: Embedder) -> None:
    default = recall(diary, "s", HILLS, embedder, x=4, floor=-1, log=True)
    off = recall(diary, "s", HILLS, embedder, x=4, floor=-1, log=True, recency=0)
    assert default.recall_id is not None and off.recall_id is not None
    assert ranked(default) != ranked(off)  # the two heron turns: recency puts the later first
    with scoped(diary, "s"):
        logged = diary.execute(
            "SELECT recency FROM pgmem.recall_log WHERE recall_id = ANY(%s) ORDER BY recall_id",
            ([default.recall_id, off.recall_id],),
        ).fetchall()
    assert logged == [(None,), (0.0,)]
    for r in (default, off):
        assert r.recall_id is not None
        assert [(p, k, i) for p, k, i, *_ in replay(diary, r.recall_id)] == ranked(r)


@pytest.mark.parametrize("recency", [None, 0.0], ids=["no recency logged", "recency logged"])
def test_each_logged_argument_is_replayed_with_or_without_a_logged_recency(
    diary: Conn, embedder: Embedder, recency: float | None
) -> None:
    """replay_logged_recall calls memory_recall two ways (with the logged recency, or without one
    when none was logged): in each, the mode, since / until, the thread, the metadata filter and
    the time window are replayed. Each recall here is one whose answer that argument changes."""
    again = ingest_turns(diary, [dataclasses.replace(diary_turn(0, DIARY[0][2]), thread="u")], embedder)
    assert again.inserted == 1  # the hills turn again, in another thread
    rec: dict[str, Any] = {} if recency is None else {"recency": recency}
    cases: dict[str, dict[str, Any]] = {
        "vector mode": {"mode": "vector"},
        "since / until": {"since": at("04-01"), "until": at("07-10")},
        "thread": {"thread": "t"},
        "filter and window": VOICE_IN_MAY,
    }
    for name, args in cases.items():
        r = recall(diary, "s", HILLS, embedder, x=4, floor=-1, log=True, **rec, **args)
        assert r.recall_id is not None
        assert [(p, k, i) for p, k, i, *_ in replay(diary, r.recall_id)] == ranked(r), name
        assert ranked(recall(diary, "s", HILLS, embedder, x=4, floor=-1, **rec)) != ranked(r), name


@pytest.mark.parametrize(
    ("setting", "value"),
    [("pgmem.word_weight", "0"), ("pgmem.word_weight", "10"), ("pgmem.time_weight", "0"), ("pgmem.time_weight", "10")],
)
def test_a_recall_under_the_callers_settings_replays_under_them(
    diary: Conn, embedder: Embedder, setting: str, value: str
) -> None:
    """A service tunes recall with session settings (pgmem.word_weight, pgmem.time_weight, ...).
    They were not logged, so a replay from psql ran under the replaying session's settings and
    showed another answer than the caller got. The settings the caller's session set are logged
    (recall_log.settings) and the replay runs under them, whatever the replaying session set, and
    leaves that session's own settings as they were."""
    args: dict[str, Any] = {"x": 4, "floor": -1, "log": True, **VOICE_IN_MAY}
    plain = recall(diary, "s", HILLS, embedder, **args)
    diary.execute(f"SET {setting} = '{value}'")
    try:
        tuned = recall(diary, "s", HILLS, embedder, **args)
    finally:
        diary.execute(f"RESET {setting}")
    assert plain.recall_id is not None and tuned.recall_id is not None
    assert ranked(tuned) != ranked(plain), "the setting must change this recall's answer"
    with scoped(diary, "s"):
        logged = diary.execute(
            "SELECT recall_id, settings FROM pgmem.recall_log WHERE recall_id = ANY(%s) ORDER BY 1",
            ([plain.recall_id, tuned.recall_id],),
        ).fetchall()
    # Beside the settings, the model of the query vectors (0116), which no replay applies as one.
    model = {"model": {"model_id": embedder.model_id, "dims": embedder.dims}}
    assert [row[1] for row in logged] == [model, {setting: value, **model}]
    for r in (plain, tuned):
        assert r.recall_id is not None
        assert [(p, k, i) for p, k, i, *_ in replay(diary, r.recall_id)] == ranked(r)
    # Replayed from a session that set another value: the logged one (or none) still rules, and
    # the session's own value is back after the replay.
    diary.execute(f"SET {setting} = '5'")
    try:
        for r in (plain, tuned):
            assert r.recall_id is not None
            assert [(p, k, i) for p, k, i, *_ in replay(diary, r.recall_id)] == ranked(r)
            assert diary.execute("SELECT current_setting(%s)", (setting,)).fetchone() == ("5",)
    finally:
        diary.execute(f"RESET {setting}")


def test_a_replay_in_another_scope_or_of_an_unknown_id_is_refused(diary: Conn, embedder: Embedder) -> None:
    r = recall(diary, "s", HILLS, embedder, x=4, floor=-1, log=True)
    assert r.recall_id is not None
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="cannot read scope s"), scoped(diary, "other"):
        diary.execute(REPLAY, (r.recall_id,))
    with scoped(diary, "other"), pytest.raises(psycopg.errors.NoDataFound) as err:
        diary.execute("SELECT * FROM pgmem.replay_logged_recall('other', %s)", (r.recall_id,))
    assert "is not in the recall log of scope other" in str(err.value)
    assert "log=True" in (err.value.diag.message_hint or "")
    for unknown in (r.recall_id + 1, 9223372036854775807):
        with pytest.raises(psycopg.errors.NoDataFound, match=f"recall {unknown} is not in the recall log"):
            replay(diary, unknown)


@pytest.mark.parametrize(
    ("args", "sqlstate", "message"),
    [
        ((None, 1), "22004", "scope and recall_id must not be NULL"),
        (("s", None), "22004", "scope and recall_id must not be NULL"),
        (("s", -1), "22023", "recall_id must be a positive id from the recall log, got -1"),
        (("s", 0), "22023", "recall_id must be a positive id from the recall log, got 0"),
    ],
)
def test_hostile_replay_arguments_raise_one_clear_error(
    diary: Conn, args: tuple[object, object], sqlstate: str, message: str
) -> None:
    with pytest.raises(psycopg.Error, match=message) as err, scoped(diary, "s"):
        diary.execute("SELECT * FROM pgmem.replay_logged_recall(%s, %s::bigint)", args)
    assert err.value.sqlstate == sqlstate


def test_a_replay_reads_hostile_logged_results_without_an_error(diary: Conn, embedder: Embedder) -> None:
    """log_recall stores any JSON a caller sends as results: the replay still runs, marking only
    well-formed hits, and a fact-plane log is refused with one error."""
    r = recall(diary, "s", HILLS, embedder, x=2, floor=-1)
    first = r.groups[0].hits[0]
    q = embed_query(HILLS, embedder)
    results = [
        5,
        {"part_no": 1e30, "hits": "x"},
        {"part_no": 1, "hits": [{"piece_id": "abc", "rank": 1}, {"piece_id": 1e40, "rank": 1}, 7,
                                {"piece_id": first.piece_id, "rank": 2, "turn_index": 1e20}]},
    ]  # fmt: skip
    with scoped(diary, "s"):
        log = "SELECT pgmem.log_recall('s', %s, %s, %s, %s::vector[], 2, -1, NULL, %s, %s::jsonb)"
        args = (HILLS, q.texts, list(q.blended))
        rid = diary.execute(log, ("memory", *args, "hybrid", json.dumps(results))).fetchone()
        fact_rid = diary.execute(log, ("fact", *args, "vector", "[]")).fetchone()
    assert rid is not None and fact_rid is not None
    rows = replay(diary, int(str(rid[0])))
    assert [(p, k, i) for p, k, i, *_ in rows] == ranked(r)
    assert [(logged, change) for *_, logged, change in rows] == [(2, "moved"), (None, "new")]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="only memory recalls can be replayed"):
        replay(diary, int(str(fact_rid[0])))


def test_logged_results_nested_too_deep_are_one_clear_line_and_nothing_is_logged(store: Conn) -> None:
    """log_recall stores what its caller sends as results and reads it recursively: an array
    nested 1,000 deep failed with 54001 "stack depth limit exceeded", whose hint says to raise
    max_stack_depth. Results nested deeper than 64 levels are refused in one line (22023), as
    put_item bounds a value; 64 levels are logged (in scope s, which has a row: since 0113 nothing is
    logged for a scope without one)."""
    log = (
        "SELECT pgmem.log_recall('s', 'memory', 'm', ARRAY['m'], ARRAY[array_fill(0.1::real, ARRAY[384])::vector],"
        " 5, 0.2, NULL, 'vector', %s::jsonb)"
    )
    with scoped(store, "s"):
        assert store.execute(log, ("[" * 64 + "]" * 64,)).fetchone() is not None
    for depth in (65, 1000):
        with pytest.raises(psycopg.errors.InvalidParameterValue) as exc, scoped(store, "s"):
            store.execute(log, ("[" * depth + "]" * depth,))
        assert str(exc.value).splitlines()[0] == "results nests deeper than 64 levels"
    with scoped(store, "s"):
        assert store.execute("SELECT count(*) FROM pgmem.recall_log WHERE scope_id = 's'").fetchone() == (1,)


def test_a_logged_recall_of_a_misspelt_scope_logs_nothing_and_makes_no_scope(
    store: Conn,
    admin_conn: Conn,
    embedder: Embedder,
    app_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`pgmem recall --log` of a misspelt scope inserted that scope's row (log_recall made it, to
    log under it): a typo left a new empty scope behind. Since 0113 nothing is logged for a scope
    with no row, and none is made (recall_id None; the CLI says so)."""
    out = recall(store, "ss", Q, embedder, log=True)
    assert out.recall_id is None and out.empty_reason == "scope_empty"
    monkeypatch.setenv("DATABASE_URL", app_url)
    assert main(["recall", Q, "--scope", "sss", "--log"]) == 1
    assert "(not logged: scope 'sss' does not exist)" in capsys.readouterr().out
    rows = admin_conn.execute("SELECT scope_id FROM pgmem.scope ORDER BY 1").fetchall()
    assert rows == [("s",)]
    assert admin_conn.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (0,)
    assert recall(store, "s", Q, embedder, log=True).recall_id is not None  # a scope that exists: logged
