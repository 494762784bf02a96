"""Issue 12, write side: no silent data loss, the scope never outlives a call, rebuild as the
app role, and every bad input one clear line (CLI, exit 2) or a PgmemError (Python).

Everything runs as a LOGIN member of pgmem_app, the role a service uses."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC
from pathlib import Path

import psycopg
import pytest

from pgmem import cli
from pgmem.db import connect, scoped
from pgmem.errors import InputError
from pgmem.ingest import content_hash, ingest_turns
from pgmem.rebuild import rebuild
from pgmem.recall import recall
from pgmem.turns import Turn, read_jsonl, turn_from_dict
from tests.helpers import InFlight
from tests.security_helpers import APP_LOGIN, Conn, HashEmbedder, app_conn, make_turn, role_url

__all__ = ["app_conn"]


def _line(turn: int, text: str, *, scope: str = "s", thread: str = "t", **extra: object) -> str:
    obj = {"scope": scope, "thread": thread, "turn": turn, "messages": [{"role": "user", "content": text}], **extra}
    return json.dumps(obj)


def _stored(conn: Conn, scope: str) -> dict[tuple[str, int], tuple[list[dict[str, object]], bytes]]:
    with scoped(conn, scope):
        rows = conn.execute("SELECT thread_id, turn_index, messages, content_hash FROM pgmem.turn").fetchall()
    return {(str(t), int(str(i))): (m, bytes(h)) for t, i, m, h in rows}  # type: ignore[misc,call-overload]


def _hash_of_stored(messages: list[dict[str, object]], emb: HashEmbedder) -> bytes:
    turn = Turn("s", "t", 0, None, tuple(messages))
    return content_hash(turn, model_id=emb.model_id, max_bytes=1200, weight=0.8)


# 1. Duplicate turns in one batch ---------------------------------------------------------------


def test_duplicate_turn_in_one_batch_last_line_wins_and_hash_matches(app_conn: Conn, tmp_path: Path) -> None:
    emb = HashEmbedder()
    path = tmp_path / "dup.jsonl"
    path.write_text(_line(0, "my dog is Rex") + "\n" + _line(0, "my dog is Fido") + "\n")
    report = ingest_turns(app_conn, list(read_jsonl(path)), emb)
    assert (report.inserted, report.unchanged) == (1, 0)
    assert report.superseded == [(("s", "t", 0), f"{path}:1 superseded by {path}:2")]
    messages, stored_hash = _stored(app_conn, "s")[("t", 0)]
    assert messages == [{"role": "user", "content": "my dog is Fido"}]
    assert stored_hash == _hash_of_stored(messages, emb)
    # The Fido line alone is now unchanged; the Rex line alone is an update that is stored.
    fido = tmp_path / "fido.jsonl"
    fido.write_text(_line(0, "my dog is Fido") + "\n")
    assert ingest_turns(app_conn, list(read_jsonl(fido)), emb).unchanged == 1
    rex = tmp_path / "rex.jsonl"
    rex.write_text(_line(0, "my dog is Rex") + "\n")
    assert ingest_turns(app_conn, list(read_jsonl(rex)), emb).replaced == 1
    messages, stored_hash = _stored(app_conn, "s")[("t", 0)]
    assert messages == [{"role": "user", "content": "my dog is Rex"}]
    assert stored_hash == _hash_of_stored(messages, emb)


def test_concurrent_writers_of_one_turn_leave_a_hash_that_matches_the_messages(db_url: str, app_conn: Conn) -> None:
    emb = HashEmbedder()
    url = role_url(db_url, APP_LOGIN)
    errors: list[BaseException] = []
    flight = InFlight()  # ingest calls in flight

    def writer(w: int) -> None:
        try:
            with connect(url) as c:
                for round_ in range(6):
                    versions = [make_turn("s", "t", 0, f"writer {w} round {round_} version {v}") for v in range(2)]
                    with flight():
                        ingest_turns(c, [*versions, make_turn("s", "t", 1, f"w{w} r{round_}")], emb)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert flight.most >= 2, "the writers never wrote at the same time: nothing raced"
    stored = _stored(app_conn, "s")
    assert set(stored) == {("t", 0), ("t", 1)}
    for messages, stored_hash in stored.values():
        assert stored_hash == _hash_of_stored(messages, emb)
    assert "version 1" in str(stored[("t", 0)][0])  # the last version of each batch, never the first


# 2. One malformed turn never costs the good turns after it ---------------------------------------

BAD_TOOL_CALLS: list[object] = ["call it", [1], [{"function": "oops"}], {"function": {"name": "x"}}]


@pytest.mark.parametrize("tool_calls", BAD_TOOL_CALLS, ids=["string", "list-of-int", "function-string", "object"])
def test_malformed_tool_calls_are_reported_and_every_good_turn_is_stored(
    app_conn: Conn, tmp_path: Path, tool_calls: object
) -> None:
    lines = [_line(i, f"good turn number {i}") for i in range(260)]
    bad = {
        "scope": "s",
        "thread": "t",
        "turn": 220,
        "messages": [{"role": "assistant", "content": "calling", "tool_calls": tool_calls}],
    }
    lines[220] = json.dumps(bad)
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(lines) + "\n")
    failed: list[tuple[str, str]] = []
    report = ingest_turns(app_conn, list(read_jsonl(path, failed=failed)), HashEmbedder())
    assert report.inserted == 259 and not report.failed
    assert len(failed) == 1
    where, reason = failed[0]
    assert where == f"{path}:221" and "messages[0].tool_calls" in reason
    assert len(_stored(app_conn, "s")) == 259
    # Without a list to report into, the reader names the line and stops.
    with pytest.raises(InputError, match=r"turns.jsonl:221: messages\[0\]\.tool_calls"):
        list(read_jsonl(path))


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"scope": "s\xff", "thread": "t", "turn": 5, "messages": []}', "scope"),
        (b'{"scope": "s", "thread": "t\xfe", "turn": 5, "messages": []}', "thread"),
        (b'{"scope": "s", "thread": "\\udc80", "turn": 5, "messages": []}', "thread"),
        (b'{"scope": "s", "thread": "t", "turn": 5, "time": 1e20, "messages": []}', "time"),
        (b'{"scope": "s", "thread": "t", "turn": 5, "time": NaN, "messages": []}', "time"),
        (b'{"scope": "s", "thread": "t", "turn": 5, "time": [1], "messages": []}', "time"),
        (b'{"scope": "s", "thread": "t", "turn": ' + b"9" * 5000 + b', "messages": []}', "JSON"),
        (b'{"scope": "s", "thread": "t", "turn": "abc", "messages": []}', "turn"),
        (b'{"scope": "s", "thread": "t", "turn": true, "messages": []}', "turn"),
        (b'{"scope": "s", "thread": "t", "turn": 5, "messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested"),
        (
            b'{"scope": "s", "thread": "t", "turn": 5, "messages": [{"role": "user", "content": '
            + b'{"a":' * 100
            + b"1"
            + b"}" * 100
            + b"}]}",
            "levels deep",
        ),
        (b'{"scope": "s", "thread": "t", "turn": 5, "messages": [{"role": "user", "content": NaN}]}', "content"),
        (b'{"scope": "s", "thread": "t", "turn": 5, "messages": [{"role": "user", "content": 7}]}', "content"),
        (b'{"scope": "s", "thread": "t", "turn": 5, "messages": "hi"}', "messages"),
        (b"[1, 2]", "object"),
        (b'{"scope": "s", "thread": "t", "turn": 5, "messages": [], "x": 1', "JSON"),
    ],
    ids=[
        "scope-bad-utf8",
        "thread-bad-utf8",
        "thread-lone-surrogate",
        "time-overflow",
        "time-nan",
        "time-list",
        "turn-5000-digits",
        "turn-string",
        "turn-bool",
        "nested-200000",
        "nested-100",
        "content-nan",
        "content-int",
        "messages-string",
        "not-an-object",
        "truncated",
    ],
)
def test_bad_lines_are_reported_by_line_and_field_and_the_rest_is_stored(
    app_conn: Conn, tmp_path: Path, raw: bytes, field: str
) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_bytes(_line(0, "before").encode() + b"\n" + raw + b"\n" + _line(1, "after").encode() + b"\n")
    failed: list[tuple[str, str]] = []
    report = ingest_turns(app_conn, list(read_jsonl(path, failed=failed)), HashEmbedder())
    assert report.inserted == 2 and not report.failed
    assert [w for w, _ in failed] == [f"{path}:2"]
    assert field in failed[0][1]
    assert set(_stored(app_conn, "s")) == {("t", 0), ("t", 1)}


@pytest.mark.parametrize(
    "bad",
    [
        Turn("s\udcff", "t", 3, None, ({"role": "user", "content": "x"},)),
        Turn("s", "t\x00", 3, None, ({"role": "user", "content": "x"},)),
        Turn("s", "t", 3, None, ({"role": "assistant", "tool_calls": "oops"},)),
        Turn("s", "t", 3, None, ({"role": "user", "content": {1, 2}},)),
        Turn("s", "t", 3, "yesterday", ({"role": "user", "content": "x"},)),  # type: ignore[arg-type]
        Turn("s", "t", True, None, ({"role": "user", "content": "x"},)),
    ],
    ids=["scope-surrogate", "thread-nul", "tool-calls-string", "content-set", "time-string", "index-bool"],
)
def test_bad_turns_built_in_python_are_reported_not_raised(app_conn: Conn, bad: Turn) -> None:
    good = [make_turn("s", "t", i, f"good {i}") for i in (0, 1, 2)]
    report = ingest_turns(app_conn, [good[0], bad, good[1], good[2]], HashEmbedder())
    assert report.inserted == 3 and len(report.failed) == 1
    assert set(_stored(app_conn, "s")) == {("t", 0), ("t", 1), ("t", 2)}


# 3. The scope never outlives the call ------------------------------------------------------------


def test_scope_does_not_outlive_a_call_on_a_connection_in_a_transaction(db_url: str, app_conn: Conn) -> None:
    emb = HashEmbedder()
    ingest_turns(app_conn, [make_turn("a", "t", i, f"alpha {i}") for i in range(3)], emb)
    with connect(role_url(db_url, APP_LOGIN), autocommit=False) as c:
        c.execute("SELECT 1")  # the caller's transaction is open: pgmem's block is a savepoint in it
        assert recall(c, "a", "alpha", emb, mode="vector", floor=-1.0).groups[0].hits
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert c.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)
        assert c.execute("SELECT current_setting('pgmem.scope', true)").fetchone() in ((None,), ("",))
        # The caller's own scope, set before, is put back.
        c.execute("SELECT set_config('pgmem.scope', 'b', true)")
        with scoped(c, "a"):
            assert c.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (3,)
        assert c.execute("SELECT current_setting('pgmem.scope', true)").fetchone() == ("b",)
        # A block that fails leaves the caller's scope too (the savepoint rolls it back).
        with pytest.raises(ZeroDivisionError), scoped(c, "a"):
            raise ZeroDivisionError
        assert c.execute("SELECT current_setting('pgmem.scope', true)").fetchone() == ("b",)
        c.rollback()
        # Idle, not in autocommit: the block is the transaction, committed at its end.
        with scoped(c, "a"):
            pass
        assert c.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)


# 4. Rebuild as the app role -----------------------------------------------------------------------


def test_rebuild_as_the_app_role_rebuilds_its_scope_only(app_conn: Conn, tmp_path: Path) -> None:
    emb = HashEmbedder()
    ingest_turns(app_conn, [make_turn("r", "t", i, f"turn {i}") for i in range(4)], emb)
    ingest_turns(app_conn, [make_turn("other", "t", 0, "not mine")], emb)
    res = rebuild(app_conn, emb, tmp_path / "state.json", scope="r")
    assert res.turns == 4 and res.report.replaced == 4 and not res.report.failed
    assert not (tmp_path / "state.json").exists()
    with pytest.raises(InputError, match="scope"):
        rebuild(app_conn, emb, tmp_path / "state.json", scope="")
    # The SQL function reads inside the transaction's scope only.
    with scoped(app_conn, "r"), pytest.raises(psycopg.errors.InsufficientPrivilege), app_conn.transaction():
        app_conn.execute("SELECT * FROM pgmem.pending_turns('other', now())")


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:00-14:00", "infinity"])
def test_a_turn_time_python_cannot_read_back_is_a_failed_turn(app_conn: Conn, tmp_path: Path, when: str) -> None:
    """pgmem reads stored turn times back as Python datetimes (rebuild, the MCP thread list):
    years 1 to 9999 in UTC. A time Python accepts whose UTC instant is outside them (midnight of
    year 1 at +14:00 is 1 BC in UTC), or an infinite one from SQL, is refused by SQL's turn rules
    (a failed turn naming turn_time); stored, it made every later rebuild of the scope fail with
    psycopg's "timestamp too small"."""
    emb = HashEmbedder()
    assert ingest_turns(app_conn, [make_turn("r", "t", 0, "turn 0")], emb).inserted == 1
    if when == "infinity":
        with scoped(app_conn, "r"), pytest.raises(psycopg.errors.InvalidParameterValue, match="turn_time"):
            app_conn.execute(
                """SELECT pgmem.put_turn(scope => 'r', thread => 't', turn_index => 1, turn_time => 'infinity',
                       messages => '[]', content_hash => '\\x01', model_id => %s, unit_kinds => ARRAY['user'],
                       source_indexes => ARRAY[0], labels => ARRAY['[Turn 1]'], bodies => ARRAY['x'],
                       vectors => ARRAY[%s::vector])""",
                (emb.model_id, emb.embed(["x"])[0]),
            )
    else:
        messages = [{"role": "user", "content": "turn 1"}]
        bad = turn_from_dict({"scope": "r", "thread": "t", "turn": 1, "time": when, "messages": messages})
        report = ingest_turns(app_conn, [bad], emb)
        assert report.inserted == 0 and len(report.failed) == 1 and "turn_time" in report.failed[0][1], report
    res = rebuild(app_conn, emb, tmp_path / "state.json", scope="r")
    assert res.turns == 1 and not res.report.failed


# 8. The CLI: one line, exit 2 ---------------------------------------------------------------------


@pytest.fixture
def cli_env(db_url: str, app_conn: Conn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI as a service account runs it: DATABASE_URL names the app login."""
    monkeypatch.setenv("DATABASE_URL", role_url(db_url, APP_LOGIN))
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    path = tmp_path / "t.jsonl"
    path.write_text(_line(0, "my dog is Rex", scope="demo") + "\n")
    assert cli.main(["ingest", str(path)]) == 0
    return path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["ingest", "{file}", "--scope", "\udcff"], "--scope contains an invalid UTF-8 byte"),
        (["recall", "dogs", "--scope", "\udcff"], "invalid UTF-8"),
        (["reblend", "--scope", "\udcff", "--weight", "0.5"], "invalid UTF-8"),
        (["reblend", "--scope", "demo", "--weight", "nan"], "weight must be between 0 and 1"),
        (["reblend", "--scope", "demo", "--weight", "2"], "weight must be between 0 and 1"),
        (["reblend", "--scope", "nosuch", "--weight", "0.5"], "scope nosuch has no memory stored"),
        (["rebuild", "--scope", "\x00"], "NUL"),
        (["recall", "dogs", "--scope", "demo", "--filter", "[1]"], "--filter must be a JSON object"),
        (["recall", "dogs", "--scope", "demo", "--filter", "{bad"], "--filter is not JSON"),
    ],
    ids=[
        "ingest-scope",
        "recall-scope",
        "reblend-scope",
        "weight-nan",
        "weight-2",
        "unknown-scope",
        "rebuild-nul",
        "filter-list",
        "filter-bad-json",
    ],
)
def test_cli_bad_arguments_give_one_line_and_exit_2(
    cli_env: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    capsys.readouterr()
    code = cli.main([a.replace("{file}", str(cli_env)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_cli_ingest_reports_bad_lines_duplicates_and_stores_the_rest(
    cli_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], app_conn: Conn
) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(
            [
                _line(1, "my cat is Tom", scope="demo"),
                '{"scope": "demo", "thread": "t", "turn": 2, "messages": [{"role": "assistant", "tool_calls": "x"}]}',
                _line(3, "my dog is Rex", scope="demo"),
                _line(3, "my dog is Fido", scope="demo"),
            ]
        )
        + "\n"
    )
    capsys.readouterr()
    assert cli.main(["ingest", str(path)]) == 1  # some turns failed: said, and the rest stored
    out, err = capsys.readouterr()
    assert out.startswith("2 inserted, 0 replaced, 0 unchanged, 1 superseded,") and "1 failed" in out
    assert f"{path}:2: messages[0].tool_calls" in err
    assert f"{path}:3 superseded by {path}:4" in err
    assert "Traceback" not in err
    stored = _stored(app_conn, "demo")
    assert set(stored) == {("t", 0), ("t", 1), ("t", 3)}
    assert "Fido" in str(stored[("t", 3)][0])


def test_reblend_cli_works_for_a_known_scope(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli.main(["reblend", "--scope", "demo", "--weight", "0.7"]) == 0
    assert "reblended 1 pieces of scope 'demo' at weight 0.7" in capsys.readouterr().out


def test_turn_from_dict_names_the_field() -> None:
    with pytest.raises(InputError, match=r"turn: messages\[0\]\.tool_calls\[0\]"):
        turn_from_dict({"scope": "s", "thread": "t", "turn": 0, "messages": [{"role": "assistant", "tool_calls": [1]}]})


def test_jsonl_lines_end_at_line_feeds_only(tmp_path: Path) -> None:
    """A carriage return between a line's tokens is JSON whitespace (RFC 8259), and a JSON Lines
    line ends at LF (CR LF too). read_jsonl split lines at a lone CR as well: a valid line was
    read as two broken ones, reported as lines 1 and 2 of a file of one line."""
    path = tmp_path / "cr.jsonl"
    one = '{"scope": "s", "thread": "t",\r"turn": 0, "messages": [{"role": "user", "content": "cr"}]}'
    path.write_bytes(one.encode() + b"\n" + _line(1, "crlf").encode() + b"\r\n" + _line(2, "last").encode())
    failed: list[tuple[str, str]] = []
    turns = list(read_jsonl(path, failed=failed))
    assert failed == []
    assert [(t.index, t.origin) for t in turns] == [(0, f"{path}:1"), (1, f"{path}:2"), (2, f"{path}:3")]


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        ("2026-01-02T03:04:05z", "2026-01-02T03:04:05+00:00"),
        ("2026-01-02t03:04:05Z", "2026-01-02T03:04:05+00:00"),
        ("2026-01-02T04:04:05+01:00", "2026-01-02T03:04:05+00:00"),
        ("2026-01-02T03:04:05", "2026-01-02T03:04:05+00:00"),
    ],
)
def test_a_turns_time_is_rfc_3339_with_either_case_of_z(text: str, utc: str) -> None:
    """RFC 3339 allows a lower-case "z" for UTC; a JSONL line's, an MCP call's and a LangGraph
    filter's time (turns.parse_time) and the CLI's --since / --until refused it as "not ISO 8601"."""
    from pgmem.cli.memory import _time

    line = {"scope": "s", "thread": "t", "turn": 0, "time": text, "messages": [{"role": "user", "content": "z"}]}
    parsed = turn_from_dict(line).time
    assert parsed is not None and parsed.astimezone(UTC).isoformat() == utc
    cli_time = _time(text, "--since")
    assert cli_time is not None and cli_time.astimezone(UTC).isoformat() == utc
    with pytest.raises(InputError, match="is not ISO 8601"):
        turn_from_dict({**line, "time": text + "x"})


# 5. `pgmem ingest` streams its file --------------------------------------------------------------


def test_cli_ingest_streams_the_file_a_batch_at_a_time(
    app_url: str, app_conn: Conn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pgmem ingest` read the whole file before storing a turn (list(read_jsonl(...))): its memory
    grew with the file. It reads and stores a batch at a time now (here 3 turns), with hostile
    lines among good ones: each bad line is one line naming its number, every good turn is stored
    (those before a bad line too), a turn twice in a batch is stored once (superseded), twice in
    two batches is written at each (the later last)."""
    import pgmem.embedders
    import pgmem.ingest
    from pgmem.cli import memory

    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(pgmem.embedders, "_LOCAL", HashEmbedder())
    monkeypatch.setattr(memory, "INGEST_BATCH_TURNS", 3, raising=False)
    sizes: list[int] = []
    whole = pgmem.ingest.ingest_turns

    def counted(db: object, turns: list[Turn], *args: object, **kwargs: object) -> object:
        sizes.append(len(turns))
        return whole(db, turns, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pgmem.ingest, "ingest_turns", counted)
    path = tmp_path / "stream.jsonl"
    lines = [
        _line(0, "my cat is Tom").encode(),
        b'{"scope": "s", "thread": "t", "turn": 9, "messages": [{"role": "user", "content": "dog\xffs"}]}',
        _line(1, "my dog is Rex").encode(),
        _line(8, "a NUL \x00 here").encode(),
        b'{"scope": "s", "thread": "t", "turn": 7, "messages": [{"role": "user", "content": "' + b"x" * 2_000_000,
        b"[" * 100_000,
        b'{"scope": "s", "thread": "t", "turn": "abc", "messages": []}',
        _line(2, "the ferry leaves at nine").encode(),
        _line(0, "my cat is Felix").encode(),
        _line(3, "the bus is late").encode(),
        _line(3, "the bus is early").encode(),
        _line(4, "tea at five").encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    capsys.readouterr()
    assert cli.main(["ingest", str(path)]) == 1
    out, err = capsys.readouterr()
    assert sizes == [3, 3, 3]  # lines 2 and 4 are turns Postgres cannot store: refused in their batch
    assert out.startswith("5 inserted, 1 replaced, 0 unchanged, 1 superseded,") and "5 failed" in out, out
    failed = [line for line in err.splitlines() if line.startswith("  failed ")]
    assert sorted(re.search(r"stream\.jsonl:(\d+)", line)[1] for line in failed) == ["2", "4", "5", "6", "7"], failed  # type: ignore[index]
    assert "Traceback" not in err and f"{path}:10 superseded by {path}:11" in err
    stored = _stored(app_conn, "s")
    assert set(stored) == {("t", i) for i in range(5)}
    assert "Felix" in str(stored[("t", 0)][0]) and "early" in str(stored[("t", 3)][0])
    # Again: the same rows (the turn given in two batches is written at each, the later last).
    sizes.clear()
    assert cli.main(["ingest", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["inserted"], report["replaced"], report["unchanged"]) == (0, 2, 4)
    assert len(report["unreadable"]) + len(report["failed"]) == 5 and sizes == [3, 3, 3]
    assert _stored(app_conn, "s") == stored


#: `pgmem ingest` in a process of its own with the test embedder, printing the peak of the memory
#: Python allocated while it ran (tracemalloc: the process's peak RSS is set before, by what
#: connecting and the embedder load, about 130 MB, and hid a file of 50 MB held whole).
PEAK_CLIENT = r"""
import sys, tracemalloc
import pgmem.embedders
from tests.security_helpers import HashEmbedder
pgmem.embedders._LOCAL = HashEmbedder()
from pgmem.cli import main
tracemalloc.start()
code = main(["ingest", sys.argv[1]])
print("peak-kb", tracemalloc.get_traced_memory()[1] // 1024, file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.long
def test_cli_ingest_memory_is_flat_in_the_file_size(app_url: str, tmp_path: Path, app_conn: Conn) -> None:
    """Peak memory of `pgmem ingest` for a file of 10 MB and one of 50 MB (10 kB lines, each a later
    version of one turn: little to store, all to read). It held the whole file as turns first:
    the larger file cost the process 40 MB more. It reads a batch at a time now."""
    import os
    import subprocess
    import sys

    def peak(n: int) -> int:
        path = tmp_path / f"big-{n}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for i in range(n):
                f.write(_line(0, f"version {i} " + "word " * 2000, thread=f"t{n}") + "\n")
        env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path / "home")}
        done = subprocess.run(
            [sys.executable, "-c", PEAK_CLIENT, str(path)],
            env=env,
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith("1 inserted, ") and done.stdout.strip().endswith(" 0 failed"), done.stdout
        kb = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("peak-kb ")]
        path.unlink()
        return int(kb[0])

    small, large = peak(1000), peak(5000)
    # 40 MB more of file: at most 10 MB more of process (it was over 40 MB more).
    assert large - small < 10_000, (small, large)
    stored = _stored(app_conn, "s")
    assert "version 4999 " in str(stored[("t5000", 0)][0])
