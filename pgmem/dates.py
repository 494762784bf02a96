"""A message's date expressions as a time window on `turn_time`, relative to the message's own
time: "yesterday", "last Tuesday", "two weeks ago", "in March", "since May 3".

The expressions are found and read by dateparser (the `[dates]` extra); this module only
decides which of them count and how wide a window each one opens:

- a named day ("yesterday", "last Tuesday", "on May 3"): that calendar day;
- a named month or year ("in March", "in 2022", "last year"): that calendar month or year;
- a distance back ("two weeks ago", "a month ago", "10 days ago"): the period it names,
  centred on that point (two weeks ago: the week around the day 14 days back);
- "since" / "after" a date: from the start of its period to the message's time.

Days, months and years are the message time's zone's (the sender's calendar: "yesterday" asked
at 20:00 in New York is New York's yesterday); the window is returned in UTC.

Several expressions give the window that spans them all. "since the move", "before the
wedding" name an event, not a date: the message's time cannot date the event (only the
memory can), so they open no window; the event's own words still search for it. A caller
that knows the date passes `since` / `until`. What cannot be read or makes no sense
(a year past 9999, an expression without a message time, a window wholly after the message,
one that ends before it starts) is no window, never an error."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pgmem.extras import require

#: A matched expression counts only if it has one of these: dateparser's search also reads
#: "now", "a", "second" or "may" ("I may") as dates.
_DATE_WORD = re.compile(
    r"\d|\b(yesterday|today|ago|week|weekend|month|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|january|february|march|april|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b",
    re.IGNORECASE,
)
_MAY = re.compile(r"\b(in|of|since|after|during|early|late|mid)\s+may\b|\bmay\s+\d", re.IGNORECASE)
_WEEKDAY = r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
#: A bare weekday that names a habit, not a day: "on Saturday mornings", "every Monday", "Fridays".
_HABIT_AFTER = re.compile(r"s\b|\s+(mornings|afternoons|evenings|nights)\b", re.IGNORECASE)
_HABIT_BEFORE = re.compile(r"\b(every|each)\s+$", re.IGNORECASE)
#: A bare number or ordinal ("10th", "3"): a count more often than a date.
_BARE_NUMBER = re.compile(r"(the\s+)?\d+(st|nd|rd|th)?", re.IGNORECASE)
_SINCE = re.compile(r"\b(since|after|from)\s*$", re.IGNORECASE)
#: Longest message searched for dates (a long voice message or pasted log: its dates are not
#: the question's, and dateparser's search is slow on long text).
MAX_CHARS = 2000


@dataclass(frozen=True)
class Window:
    """turn_time >= start and turn_time < end."""

    start: datetime
    end: datetime


def message_window(message: str, message_time: datetime | None) -> Window | None:
    """The time window `message`'s date expressions name, relative to `message_time` (an aware
    datetime; a naive one is read as UTC) and in its zone's calendar (the sender's days), or
    None: no expression, none readable, no message time (or one that is not a datetime), or a
    window that makes no sense."""
    if not isinstance(message_time, datetime) or not isinstance(message, str) or not message.strip():
        return None
    zone = message_time.tzinfo or UTC
    # The sender's wall-clock time: "yesterday" and "in March" are days of their calendar.
    base = message_time.replace(tzinfo=None)
    text = message[:MAX_CHARS]
    windows = [w for w in (_window(text, m, base) for m in _matches(text, base)) if w is not None]
    if not windows:
        return None
    start, end = min(w.start for w in windows), max(w.end for w in windows)
    if not start < end or start > base:
        return None
    try:
        start, end = start.replace(tzinfo=zone).astimezone(UTC), end.replace(tzinfo=zone).astimezone(UTC)
    except (OverflowError, ValueError):  # a day past year 9999 or before year 1 in UTC
        return None
    return Window(start, end) if start < end else None


def _settings(base: datetime) -> dict[str, Any]:
    return {"RELATIVE_BASE": base, "PREFER_DATES_FROM": "past", "RETURN_AS_TIMEZONE_AWARE": False}


def _matches(text: str, base: datetime) -> list[tuple[str, int]]:
    """The date expressions dateparser finds, each with its offset in `text`."""
    search = require("dateparser.search", "dates", "reading dates in a message")
    try:
        found = search.search_dates(text, languages=["en"], settings=_settings(base)) or []
    except (ValueError, OverflowError, TypeError, RecursionError):
        return []
    out: list[tuple[str, int]] = []
    at = 0
    for expr, _ in found:
        i = text.find(expr, at)
        if i < 0:
            continue
        at = i + len(expr)
        if _BARE_NUMBER.fullmatch(expr.strip()):
            continue
        if re.fullmatch(rf"(on\s+)?{_WEEKDAY}", expr.strip(), re.IGNORECASE) and (
            _HABIT_AFTER.match(text, at) or _HABIT_BEFORE.search(text[max(0, i - 8) : i])
        ):
            continue
        if _DATE_WORD.search(expr) or _MAY.search(text[max(0, i - 12) : at + 3]):
            out.append((expr, i))
    return out


def _window(text: str, match: tuple[str, int], base: datetime) -> Window | None:
    expr, at = match
    dateparser = require("dateparser", "dates", "reading dates in a message")
    try:
        data = dateparser.DateDataParser(languages=["en"], settings=_settings(base)).get_date_data(expr)
    except (ValueError, OverflowError, TypeError, RecursionError):
        return None
    when, period = data.date_obj, data.period or "day"
    if not isinstance(when, datetime):
        return None
    when = when.replace(tzinfo=None) if when.tzinfo is not None else when
    try:
        if re.search(r"\bago\b", expr, re.IGNORECASE):
            half = {"week": timedelta(days=3.5), "month": timedelta(days=15), "year": timedelta(days=182)}.get(
                period, timedelta(hours=12)
            )
            start, end = when - half, when + half
        else:
            start, end = _calendar(when, period)
        if _SINCE.search(text[max(0, at - 8) : at]) or re.match(r"\s*(since|after)\b", expr, re.IGNORECASE):
            end = base + timedelta(days=1)
    except (OverflowError, ValueError):
        return None
    return Window(start, end) if start < end else None


def _calendar(when: datetime, period: str) -> tuple[datetime, datetime]:
    """The calendar day, week, month or year holding `when`."""
    day = when.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "year":
        return day.replace(month=1, day=1), day.replace(year=day.year + 1, month=1, day=1)
    if period == "month":
        first = day.replace(day=1)
        return first, (first + timedelta(days=32)).replace(day=1)
    if period == "week":
        monday = day - timedelta(days=day.weekday())
        return monday, monday + timedelta(days=7)
    return day, day + timedelta(days=1)
