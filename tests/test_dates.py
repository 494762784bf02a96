"""A message's date expressions as a time window (pgmem.dates), relative to the message's time;
what cannot be read or makes no sense is no window, never an error."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from pgmem.dates import MAX_CHARS, Window, message_window

#: A Sunday evening.
ASKED = datetime(2023, 5, 28, 19, 47, tzinfo=UTC)


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


@pytest.mark.parametrize(
    "message,start,end",
    [
        ("What did I buy yesterday?", day(2023, 5, 27), day(2023, 5, 28)),
        ("What did I buy last Tuesday?", day(2023, 5, 23), day(2023, 5, 24)),
        ("Where did I go in March?", day(2023, 3, 1), day(2023, 4, 1)),
        ("What did I read in 2022?", day(2022, 1, 1), day(2023, 1, 1)),
        ("What did we plan on May 3?", day(2023, 5, 3), day(2023, 5, 4)),
        ("What did we talk about last week?", day(2023, 5, 15), day(2023, 5, 22)),
        ("the day before yesterday", day(2023, 5, 26), day(2023, 5, 27)),
    ],
)
def test_calendar_expressions_name_their_day_week_month_or_year(message: str, start: datetime, end: datetime) -> None:
    assert message_window(message, ASKED) == Window(start, end)


def test_a_distance_back_is_centred_on_its_point() -> None:
    w = message_window("What did I do two weeks ago?", ASKED)
    assert w is not None and w.end - w.start == timedelta(days=7)
    assert w.start < ASKED - timedelta(days=14) < w.end


def test_since_runs_to_the_message_time() -> None:
    w = message_window("What have I cooked since March?", ASKED)
    assert w is not None and w.start == day(2023, 3, 1) and w.end > ASKED


def test_the_window_follows_the_message_time_and_its_zone() -> None:
    """The days are the sender's: a message time in a zone names that zone's calendar."""
    tokyo = timezone(timedelta(hours=9))
    # 01:00 on May 29 in Tokyo (16:00 on May 28 in UTC): yesterday is Tokyo's May 28.
    assert message_window("yesterday", datetime(2023, 5, 29, 1, 0, tzinfo=tokyo)) == Window(
        datetime(2023, 5, 28, tzinfo=tokyo), datetime(2023, 5, 29, tzinfo=tokyo)
    )
    # 20:00 on May 28 in New York (00:00 on May 29 in UTC): today is New York's May 28, yesterday
    # its May 27, across the zone's daylight-saving offset.
    ny = ZoneInfo("America/New_York")
    asked = datetime(2023, 5, 28, 20, 0, tzinfo=ny)
    assert message_window("What did I do today?", asked) == Window(
        datetime(2023, 5, 28, tzinfo=ny), datetime(2023, 5, 29, tzinfo=ny)
    )
    assert message_window("What did I do yesterday?", asked) == Window(
        datetime(2023, 5, 27, tzinfo=ny), datetime(2023, 5, 28, tzinfo=ny)
    )
    # A day that starts in winter time and ends in summer time is 23 hours long.
    w = message_window("yesterday", datetime(2023, 3, 13, 9, 0, tzinfo=ny))
    assert w == Window(datetime(2023, 3, 12, tzinfo=ny), datetime(2023, 3, 13, tzinfo=ny))
    assert w.end - w.start == timedelta(hours=23)
    # A naive message time is read as UTC.
    assert message_window("yesterday", datetime(2023, 5, 28, 12, 0)) == Window(day(2023, 5, 27), day(2023, 5, 28))


@pytest.mark.parametrize(
    "message,asked",
    [
        ("What did I buy yesterday?", None),  # no message time
        ("What happened in the year 99999?", ASKED),  # not a date
        ("since the move, how often have I cooked?", ASKED),  # an event, not a date
        ("What is my current job?", ASKED),
        ("I may go now; the second thing is a plan.", ASKED),  # words dateparser reads as dates
        ("What did I buy yesterday?", datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))),  # before year 1 in UTC
        ("What will I do next year?", ASKED),  # wholly after the message
        ("", ASKED),
        ("   \n", ASKED),
        # Not a datetime: a date, an ISO string, epoch seconds (recall refuses them, one line).
        ("What did I buy yesterday?", date(2023, 5, 28)),
        ("What did I buy yesterday?", "2023-05-28T19:47:00Z"),
        ("What did I buy yesterday?", 1685303220),
    ],
)
def test_senseless_or_unreadable_dates_are_no_window(message: str, asked: datetime | None) -> None:
    assert message_window(message, asked) is None


@pytest.mark.parametrize(
    "message",
    [
        "yesterday\x00 and\x00 last Tuesday",
        "bad \udcff surrogate yesterday",
        "yesterday " * 5000,
        "🦆" * 3000 + " yesterday",
        "31/31/31 99:99 32 Febtember 0000",
    ],
)
def test_hostile_text_never_raises(message: str) -> None:
    w = message_window(message, ASKED)
    assert w is None or w.start < w.end


def test_only_the_head_of_a_long_message_is_read() -> None:
    assert message_window("x " * MAX_CHARS + "yesterday", ASKED) is None
    assert message_window("yesterday " + "x " * MAX_CHARS, ASKED) == Window(day(2023, 5, 27), day(2023, 5, 28))


def test_several_expressions_give_the_window_that_spans_them() -> None:
    w = message_window("Did I call Ana yesterday or last Tuesday?", ASKED)
    assert w == Window(day(2023, 5, 23), day(2023, 5, 28))


@pytest.mark.parametrize(
    "message",
    ["What time do I wake up on Saturday mornings?", "I swim every Monday.", "What do I cook on Fridays?",
     "How did my 10th run go?"],
)  # fmt: skip
def test_habits_and_bare_counts_are_no_dates(message: str) -> None:
    assert message_window(message, ASKED) is None
