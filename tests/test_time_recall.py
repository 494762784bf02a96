"""Time-aware recall: the time window that boosts (time_from / time_to), the hard since /
until filter, recency, and the floor's exception for a strong word hit, in SQL and through
the Python API, hostile inputs included."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest

from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.errors import ArgumentError, InputError
from pgmem.ingest import ingest_turns
from pgmem.recall import embed_query, recall, recall_vectors
from pgmem.turns import Turn, turn_from_dict

Conn = psycopg.Connection[tuple[object, ...]]


def turn(i: int, day: str, user: str, thread: str = "t1") -> Turn:
    return turn_from_dict(
        {
            "scope": "s",
            "thread": thread,
            "turn": i,
            "time": f"2026-{day}T10:00:00Z",
            "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": "Noted."}],
        }
    )


TURNS = [
    turn(1, "03-02", "We went hiking in the hills and saw a heron by the lake."),
    turn(2, "05-11", "We went hiking on the coast and saw seals on the rocks."),
    turn(3, "06-20", "My gym membership costs 30 dollars a month.", thread="t2"),
    turn(4, "09-14", "My gym membership now costs 45 dollars a month.", thread="t2"),
    # The same two facts, told in the other order: recency must follow time, not text.
    turn(1, "06-20", "My gym membership now costs 45 dollars a month.", thread="t3"),
    turn(2, "09-14", "My gym membership costs 30 dollars a month.", thread="t3"),
]


@pytest.fixture
def store(conn: Conn, embedder: Embedder) -> Conn:
    assert ingest_turns(conn, TURNS, embedder).inserted == len(TURNS)
    return conn


def at(day: str) -> datetime:
    return datetime.fromisoformat(f"2026-{day}T00:00:00+00:00")


def turns(r: object) -> list[int | None]:
    """The turns of the hits, each at its first (best) hit."""
    seen = [h.turn_index for g in r.groups for h in g.hits]  # type: ignore[attr-defined]
    return list(dict.fromkeys(seen))


@pytest.mark.parametrize("mode", ["hybrid", "vector"])
def test_the_window_ranks_its_turns_first_and_hides_none(store: Conn, embedder: Embedder, mode: str) -> None:
    q = "Where did we go hiking?"
    march = recall(
        store, "s", q, embedder, thread="t1", floor=-1, mode=mode, time_from=at("03-01"), time_to=at("04-01")
    )
    may = recall(store, "s", q, embedder, thread="t1", floor=-1, mode=mode, time_from=at("05-01"), time_to=at("06-01"))
    assert turns(march) == [1, 2] and turns(may) == [2, 1]
    # Open at one end: everything from June on.
    late = recall(store, "s", q, embedder, thread="t1", floor=-1, mode=mode, time_from=at("05-01"))
    assert turns(late) == [2, 1]


def test_the_message_time_reads_the_messages_dates(store: Conn, embedder: Embedder) -> None:
    asked = datetime(2026, 5, 25, 9, 0, tzinfo=UTC)
    q = "Where did we go hiking two weeks ago?"
    assert turns(recall(store, "s", q, embedder, thread="t1", floor=-1, message_time=asked))[0] == 2
    q = "Where did we go hiking in March?"
    assert turns(recall(store, "s", q, embedder, thread="t1", floor=-1, message_time=asked))[0] == 1
    # An explicit window wins over the message's dates.
    r = recall(store, "s", q, embedder, thread="t1", floor=-1, message_time=asked, time_from=at("05-01"))
    assert turns(r)[0] == 2


def test_since_and_until_keep_only_the_turns_inside(store: Conn, embedder: Embedder) -> None:
    q = "Where did we go hiking?"
    assert turns(recall(store, "s", q, embedder, thread="t1", floor=-1, since=at("04-01"))) == [2]
    assert turns(recall(store, "s", q, embedder, thread="t1", floor=-1, until=at("04-01"))) == [1]
    assert turns(recall(store, "s", q, embedder, thread="t1", floor=-1, mode="vector", until=at("04-01"))) == [1]
    r = recall(store, "s", q, embedder, thread="t1", floor=-1, since=at("10-01"))
    assert turns(r) == [] and r.empty_reason == "bounds_empty"  # no turn of t1 since (0111)
    # A window outside the bounds boosts nothing and drops nothing inside them.
    r = recall(store, "s", q, embedder, thread="t1", floor=-1, since=at("04-01"), time_to=at("04-01"))
    assert turns(r) == [2]


@pytest.mark.parametrize("mode", ["hybrid", "vector"])
@pytest.mark.parametrize("thread,newest", [("t2", 4), ("t3", 2)])
def test_recency_ranks_the_latest_of_close_answers_first(
    store: Conn, embedder: Embedder, thread: str, newest: int, mode: str
) -> None:
    q = "How much does my gym membership cost?"
    r = recall(store, "s", q, embedder, thread=thread, floor=-1, recency=0.2, mode=mode)
    assert turns(r)[0] == newest


def test_recency_never_moves_a_hit_outside_the_band(store: Conn, embedder: Embedder) -> None:
    q = "How much does my gym membership cost?"
    off = recall(store, "s", q, embedder, floor=-1, recency=0)
    on = recall(store, "s", q, embedder, floor=-1, recency=1e-9)
    assert [h.piece_id for h in on.groups[0].hits] == [h.piece_id for h in off.groups[0].hits]


def sql_recall(conn: Conn, embedder: Embedder, args: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    v = embed_query("Where did we go hiking?", embedder).blended[0]
    with scoped(conn, "s"):
        return conn.execute(
            f"SELECT * FROM pgmem.memory_recall('s', ARRAY[%s]::vector[], ARRAY['hiking'], floor => -1, {args})",
            (v, *params),
        ).fetchall()


@pytest.mark.parametrize(
    "args,message",
    [
        ("time_from => '2026-05-01', time_to => '2026-04-01'", "time_to .* must be later than time_from"),
        ("time_from => '2026-05-01', time_to => '2026-05-01'", "time_to .* must be later than time_from"),
        ("time_from => 'infinity'", "time_from must be a finite time"),
        ("time_to => '-infinity'", "time_to must be a finite time"),
        ("since => '2026-05-01', until => '2026-01-01'", "until .* must be later than since"),
        ("until => 'infinity'", "until must be a finite time"),
        ("recency => -0.1", "recency is a cosine band between 0 and 1"),
        ("recency => 1.5", "recency is a cosine band"),
        ("recency => 'NaN'", "recency is a cosine band"),
        ("recency => NULL", "recency is a cosine band"),
    ],
)
def test_a_bad_window_is_one_line_with_sqlstate_and_hint(
    store: Conn, embedder: Embedder, args: str, message: str
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message) as exc:
        sql_recall(store, embedder, args)
    assert exc.value.diag.message_hint and "\n" not in str(exc.value.diag.message_primary)


def test_the_sql_window_arguments_work_by_name(store: Conn, embedder: Embedder) -> None:
    rows = sql_recall(store, embedder, "thread => 't1', time_from => %s, time_to => %s", (at("03-01"), at("04-01")))
    assert list(dict.fromkeys(r[4] for r in rows)) == [1, 2]
    rows = sql_recall(store, embedder, "thread => 't1', mode => 'vector', since => %s", (at("04-01"),))
    assert {r[4] for r in rows} == {2}
    # A window cut to nothing by the bounds is no window, not an error.
    rows = sql_recall(store, embedder, "thread => 't1', time_from => %s, until => %s", (at("05-01"), at("04-01")))
    assert {r[4] for r in rows} == {1}


def test_the_window_helper_checks_its_own_arguments(store: Conn, embedder: Embedder) -> None:
    v = embed_query("hiking", embedder).blended[0]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must be later"), scoped(store, "s"):
        store.execute(
            "SELECT * FROM pgmem._window_candidates('s', ARRAY[%s]::vector[], 5, NULL, %s, %s)",
            (v, at("05-01"), at("01-01")),
        )
    with scoped(store, "s"):
        rows = store.execute(
            """SELECT c.piece_id, p.thread_id, p.turn_index
                 FROM pgmem._window_candidates('s', ARRAY[%s]::vector[], 5, 't1', %s, %s) c
                 JOIN pgmem.piece p USING (piece_id)""",
            (v, at("03-01"), at("04-01")),
        ).fetchall()
        march = store.execute("SELECT piece_id FROM pgmem.piece WHERE thread_id = 't1' AND turn_index = 1").fetchall()
    # k (5) is more than the thread's pieces (4): the window and the thread alone keep turn 2 out.
    assert {(r[1], r[2]) for r in rows} == {("t1", 1)}
    assert {r[0] for r in rows} == {r[0] for r in march} and len(rows) == len(march) == 2
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="x must be between 1 and 1000"), scoped(store, "s"):
        store.execute("SELECT * FROM pgmem._window_candidates('s', ARRAY[%s]::vector[], 5000)", (v,))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"time_from": "2026-05-01"}, "time_from must be a datetime"),
        ({"since": 1700000000}, "since must be a datetime"),
        ({"until": datetime(2026, 5, 1)}, "until must be an aware datetime"),
        ({"message_time": "yesterday"}, "message_time must be a datetime"),
        ({"message_time": datetime(2026, 5, 1)}, "message_time must be an aware datetime"),
        ({"recency": "0.1"}, "recency must be a number"),
        ({"recency": True}, "recency must be a number"),
    ],
)
def test_python_refuses_wrong_types_in_one_line(
    store: Conn, embedder: Embedder, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        recall(store, "s", "Where did we go hiking?", embedder, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"time_from": at("05-01"), "time_to": at("04-01")},
        {"since": at("05-01"), "until": at("05-01")},
        {"recency": math.nan},
        {"recency": 2.0},
        {"recency": -1},
    ],
)
def test_python_passes_bad_values_to_sql_and_gets_one_line(
    store: Conn, embedder: Embedder, kwargs: dict[str, object]
) -> None:
    with pytest.raises(ArgumentError) as exc:
        recall(store, "s", "Where did we go hiking?", embedder, **kwargs)  # type: ignore[arg-type]
    assert exc.value.sqlstate == "22023" and exc.value.hint and "\n" not in str(exc.value)
    # Nothing stored was touched: the same recall without the bad argument still finds both.
    assert set(turns(recall(store, "s", "Where did we go hiking?", embedder, thread="t1", floor=-1))) == {1, 2}


def test_senseless_message_dates_mean_no_window(store: Conn, embedder: Embedder) -> None:
    def logged_window(message: str, when: datetime) -> tuple[object, ...] | None:
        r = recall(store, "s", message, embedder, thread="t1", floor=-1, message_time=when, log=True)
        with scoped(store, "s"):
            return store.execute(
                "SELECT time_from, time_to FROM pgmem.recall_log WHERE recall_id = %s", (r.recall_id,)
            ).fetchone()

    # A readable date is a window, and the log shows it ...
    sensible = logged_window("Where did we go hiking two weeks ago?", datetime(2026, 5, 25, 9, 0, tzinfo=UTC))
    assert sensible is not None and sensible[0] is not None and sensible[1] is not None
    far = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))
    for message, when in [
        ("Where did we go hiking in the year 99999?", datetime(2026, 5, 25, tzinfo=UTC)),
        # This week, in the sender's zone, ends in year 10000.
        ("Where did we go hiking this week?", far),
        ("Where did we go hiking yesterday?", datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))),
    ]:
        plain = turns(recall(store, "s", message, embedder, thread="t1", floor=-1))
        assert turns(recall(store, "s", message, embedder, thread="t1", floor=-1, message_time=when)) == plain
        # ... a senseless one is none at all (a window outside every turn would rank the same).
        assert logged_window(message, when) == (None, None), (message, when)


def test_aware_times_in_any_zone_are_the_same_instant(store: Conn, embedder: Embedder) -> None:
    east = timezone(timedelta(hours=9))
    q = "Where did we go hiking?"
    a = recall(store, "s", q, embedder, thread="t1", floor=-1, until=at("04-01"))
    b = recall(store, "s", q, embedder, thread="t1", floor=-1, until=at("04-01").astimezone(east))
    assert turns(a) == turns(b) == [1]


def test_recall_vectors_takes_the_window_too(store: Conn, embedder: Embedder) -> None:
    q = embed_query("Where did we go hiking?", embedder)
    r = recall_vectors(
        store, "s", q.texts, q.blended, thread="t1", floor=-1, time_from=at("05-01"), time_to=at("06-01")
    )
    assert turns(r)[0] == 2


def test_a_logged_recall_keeps_its_time_arguments(store: Conn, embedder: Embedder) -> None:
    r = recall(
        store, "s", "Where did we go hiking?", embedder, thread="t1", floor=-1, log=True,
        time_from=at("03-01"), time_to=at("04-01"), recency=0.05, until=at("06-01"),
    )  # fmt: skip
    assert r.recall_id is not None
    with scoped(store, "s"):
        row = store.execute(
            "SELECT time_from, time_to, recency, since, until FROM pgmem.recall_log WHERE recall_id = %s",
            (r.recall_id,),
        ).fetchone()
    assert row == (at("03-01"), at("04-01"), 0.05, None, at("06-01"))
    v = embed_query("hiking", embedder).blended[0]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must be later"), scoped(store, "s"):
        store.execute(
            "SELECT pgmem.log_recall('s', 'memory', 'm', ARRAY['m'], ARRAY[%s]::vector[], 5, 0.2, NULL, 'hybrid', "
            "'[]'::jsonb, since => %s, until => %s)",
            (v, at("05-01"), at("04-01")),
        )


def test_a_time_window_turns_recency_off(store: Conn, embedder: Embedder) -> None:
    q = "How much does my gym membership cost?"
    june = recall(
        store, "s", q, embedder, thread="t2", floor=-1, recency=0.2, time_from=at("06-01"), time_to=at("07-01")
    )
    assert turns(june)[0] == 3
    assert turns(recall(store, "s", q, embedder, thread="t2", floor=-1, recency=0.2))[0] == 4


@pytest.mark.parametrize("mode", ["hybrid", "vector"])
def test_a_named_time_keeps_its_first_hit_under_the_floor(store: Conn, embedder: Embedder, mode: str) -> None:
    """pgmem.window_head (default 1): with a time window, the fused first hit that the window
    found is kept whatever its cosine; without a window, or with none of its turns first, the
    floor decides as before."""
    q = "Where did we go hiking?"

    def hiking(time_from: datetime | None = None, time_to: datetime | None = None) -> list[int | None]:
        return turns(
            recall(store, "s", q, embedder, thread="t1", floor=0.99, mode=mode, time_from=time_from, time_to=time_to)
        )

    assert hiking() == []  # nothing clears this floor
    assert hiking(time_from=at("03-01"), time_to=at("04-01")) == [1]
    assert hiking(time_from=at("05-01"), time_to=at("06-01")) == [2]
    assert hiking(time_from=at("11-01"), time_to=at("12-01")) == []  # no turn inside the window
    try:
        store.execute("SELECT set_config('pgmem.window_head', '0', false)")
        assert hiking(time_from=at("03-01"), time_to=at("04-01")) == []
        store.execute("SELECT set_config('pgmem.window_head', '-1', false)")
        with pytest.raises(InputError, match="window_head"):
            hiking(time_from=at("03-01"), time_to=at("04-01"))
    finally:
        store.execute("RESET pgmem.window_head")


def test_the_async_api_reads_dates_off_the_event_loop(
    store: Conn, app_url: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a message's dates can take seconds for a long text dense with them: pgmem.aio
    reads them in a worker thread (a Work step), as it embeds, never on the event loop; the
    sync API reads them where it runs. The same window either way."""
    import asyncio
    import importlib

    import pgmem.aio
    from pgmem.dates import message_window

    on_loop: list[bool] = []

    def watched(message: str, when: datetime) -> object:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return message_window(message, when)

    monkeypatch.setattr(importlib.import_module("pgmem.recall"), "message_window", watched)
    when = datetime(2026, 5, 25, 9, 0, tzinfo=UTC)
    q = "Where did we go hiking in March?"
    sync_turns = turns(recall(store, "s", q, embedder, thread="t1", floor=-1, message_time=when))

    async def main() -> list[int | None]:
        db = await psycopg.AsyncConnection.connect(app_url, autocommit=True)
        async with db:
            r = await pgmem.aio.recall(db, "s", q, embedder, thread="t1", floor=-1, message_time=when)
        return turns(r)

    assert asyncio.run(main()) == sync_turns
    assert on_loop == [False, False]
