"""Issue 27 parts 4, 5 and 7: text a metadata filter cannot carry is refused naming the filter;
an empty answer says why (a misspelt scope or thread is not "nothing above the floor") in SQL,
Python and the CLI; and no read command starts the embedded server behind the user's back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents, search_documents
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.facts import Fact, add_facts, fact_recall
from pgmem.ingest import ingest_turns
from pgmem.recall import embed_query, recall
from pgmem.turns import turn_from_dict

Conn = psycopg.Connection[tuple[object, ...]]


def store(conn: Conn, embedder: Embedder) -> None:
    turns = [
        turn_from_dict(
            {
                "scope": "demo",
                "thread": "t1",
                "turn": i,
                "metadata": {"channel": "voice"},
                "messages": [{"role": "user", "content": text}],
            }
        )
        for i, text in enumerate(["My dogs are Biscuit and Juniper.", "The Q4 cloud budget is 48k a month."])
    ]
    assert ingest_turns(conn, turns, embedder).inserted == 2


def deep(levels: int) -> dict[str, object]:
    value: dict[str, object] = {"a": 1}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("flt", "named"),
    [
        ({"k": "a\x00b"}, "metadata_filter['k'] contains a NUL"),
        ({"a\x00": "v"}, "a key of metadata_filter contains a NUL"),
        (
            {"tags": ["x", {"deep": ["ok", "\udc80"]}]},
            "metadata_filter['tags'][1]['deep'][1] contains an invalid UTF-8",
        ),
        ({"k": "\ud800"}, "metadata_filter['k'] contains an invalid UTF-8"),
        (deep(40), "nests deeper"),
        ({"k": [float("inf")]}, "metadata_filter['k'][0] is inf, a number JSON cannot carry"),
        ({"k": float("nan")}, "metadata_filter['k'] is nan"),
    ],
)
def test_unstorable_text_in_a_filter_is_refused_naming_it(
    conn: Conn, embedder: Embedder, flt: dict[str, object], named: str
) -> None:
    store(conn, embedder)
    with pytest.raises(InputError) as err:
        recall(conn, "demo", "my dogs", embedder, metadata_filter=flt)
    assert named in str(err.value)
    # nothing stored was lost, and a good filter still works
    ok = recall(conn, "demo", "my dogs", embedder, metadata_filter={"channel": "voice"}, floor=-1.0)
    assert ok.groups[0].hits and ok.empty_reason is None


def test_an_empty_answer_says_why(conn: Conn, embedder: Embedder) -> None:
    store(conn, embedder)
    cases = [
        ("demoo", None, None, "scope_empty", "scope demoo holds no memory"),
        ("demo", "t9", None, "thread_empty", "thread t9 has no turns in scope demo"),
        ("demo", None, {"channel": "chat"}, "filter_empty", 'has metadata containing {"channel": "chat"}'),
        ("demo", None, None, "below_floor", "no memory above the floor"),
    ]
    for scope, thread, flt, reason, text in cases:
        floor = 0.99 if reason == "below_floor" else 0.2
        r = recall(conn, scope, "my dogs", embedder, thread=thread, metadata_filter=flt, floor=floor)
        assert all(not g.hits for g in r.groups)
        assert r.empty_reason == reason and r.empty_message is not None and text in r.empty_message
        assert r.nothing_searched == (reason != "below_floor")
        assert r.as_dict()["empty_reason"] == reason
    assert recall(conn, "demo", "my dogs", embedder, floor=-1.0).empty_reason is None


def test_an_empty_answer_is_a_notice_in_sql(conn: Conn, admin_conn: Conn, embedder: Embedder) -> None:
    store(conn, embedder)
    vec = embed_query("my dogs", embedder).blended[0]
    for c in (conn, admin_conn):  # the application login and a superuser alike
        notices: list[str] = []

        def heard(d: psycopg.errors.Diagnostic, notices: list[str] = notices) -> None:
            notices.append(f"{d.message_primary} | {d.message_detail}")

        c.add_notice_handler(heard)
        for scope, args, want in [
            ("demoo", "", "scope demoo holds no memory"),
            ("demo", ", thread => 't9'", "thread t9 has no turns in scope demo"),
            ("demo", ", floor => 0.99", "no memory above the floor"),
        ]:
            notices.clear()
            with c.transaction(), scoped(c, scope):
                rows = c.execute(
                    f"SELECT * FROM pgmem.memory_recall(%s, ARRAY[%s::vector]{args})", (scope, vec)
                ).fetchall()
            assert rows == [] and len(notices) == 1 and want in notices[0] and "empty_recall_reason" in notices[0]
        notices.clear()
        with c.transaction(), scoped(c, "demo"):
            assert c.execute(
                "SELECT count(*) FROM pgmem.memory_recall('demo', ARRAY[%s::vector], floor => -1)", (vec,)
            ).fetchone() != (0,)
        assert notices == []  # a non-empty answer says nothing


def test_an_empty_answer_under_since_until_says_no_turn_is_within_them(conn: Conn, embedder: Embedder) -> None:
    """since / until keeping no turn is bounds_empty, not below_floor ("none close enough"), in
    Python and in memory_recall's NOTICE; bounds that keep a turn still say below_floor."""
    turn = {"scope": "demo", "thread": "t1", "turn": 0, "time": "2026-10-16T14:02:00Z"}
    turn["messages"] = [{"role": "user", "content": "My dogs are Biscuit and Juniper."}]
    assert ingest_turns(conn, [turn_from_dict(turn)], embedder).inserted == 1
    late, early = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 10, 1, tzinfo=UTC)
    r = recall(conn, "demo", "my dogs", embedder, since=late, floor=-1.0)
    assert r.empty_reason == "bounds_empty" and r.nothing_searched and r.empty_message is not None
    assert "within since 2026-11-01T00:00:00Z / until (open)" in r.empty_message
    conn.execute("SET TimeZone = 'Asia/Tokyo'")  # the message is in UTC whatever the session's zone
    tokyo = recall(conn, "demo", "my dogs", embedder, since=late, until=datetime(2027, 1, 1, tzinfo=UTC)).empty_message
    conn.execute("RESET TimeZone")
    assert tokyo is not None and "since 2026-11-01T00:00:00Z / until 2027-01-01T00:00:00Z" in tokyo
    assert recall(conn, "demo", "my dogs", embedder, until=early, thread="t1").empty_reason == "bounds_empty"
    assert recall(conn, "demo", "my dogs", embedder, since=early, floor=0.99).empty_reason == "below_floor"
    assert recall(conn, "demoo", "my dogs", embedder, since=late).empty_reason == "scope_empty"
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(f"{d.message_primary} | {d.message_detail}"))
    vec = embed_query("my dogs", embedder).blended[0]
    with conn.transaction(), scoped(conn, "demo"):
        sql = "SELECT * FROM pgmem.memory_recall('demo', ARRAY[%s::vector], floor => -1, since => %s)"
        assert conn.execute(sql, (vec, late)).fetchall() == []
    assert len(notices) == 1 and "empty_recall_reason: bounds_empty" in notices[0]


def test_an_empty_answer_reason_refuses_what_the_recall_refuses(conn: Conn) -> None:
    """empty_recall_reason answered filter_empty ("no turn ... has metadata containing [1]") for a
    filter memory_recall refuses, and empty_memory_recall_reason scope_empty for reversed bounds:
    a reason for a recall that could not have run. Both refuse them as the recall does (22023)."""
    bad = [
        ("SELECT * FROM pgmem.empty_recall_reason('demo', NULL, '[1]')", "must be a JSON object, got a JSON array"),
        ("SELECT * FROM pgmem.empty_recall_reason('demo', NULL, '\"x\"')", "got a JSON string"),
        ("SELECT * FROM pgmem.empty_recall_reason('demo', NULL, %s::jsonb)", "at most 4,096"),
        (
            "SELECT * FROM pgmem.empty_memory_recall_reason('demo', since => '2026-02-01', until => '2026-01-01')",
            "must be later than since",
        ),
    ]
    for sql, named in bad:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=named), conn.transaction(), scoped(conn, "demo"):
            conn.execute(sql, (json.dumps({"k": "v" * 5000}),) if "%s" in sql else None)
    with conn.transaction(), scoped(conn, "demo"):
        assert conn.execute("SELECT reason FROM pgmem.empty_recall_reason('demo', NULL, '{}')").fetchone() == (
            "scope_empty",
        )


def test_an_explain_with_no_candidate_says_why(conn: Conn, embedder: Embedder) -> None:
    """explain_recall with a misspelt thread (or bounds no turn is within) returned no rows and
    no word, where memory_recall's NOTICE says why; it says the same now."""
    store(conn, embedder)
    vec = embed_query("my dogs", embedder).blended[0]
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(f"{d.message_primary} | {d.message_detail}"))
    for args, want in [
        (", thread => 't9'", "thread_empty"),
        (", since => '2030-01-01'", "bounds_empty"),
        (', metadata_filter => \'{"channel": "chat"}\'', "filter_empty"),
    ]:
        notices.clear()
        with conn.transaction(), scoped(conn, "demo"):
            sql = f"SELECT * FROM pgmem.explain_recall('demo', ARRAY[%s::vector]{args})"
            assert conn.execute(sql, (vec,)).fetchall() == []
        assert len(notices) == 1 and notices[0].startswith("explain_recall: ") and want in notices[0], notices
    with conn.transaction(), scoped(conn, "demo"):  # candidates, cut or kept: no NOTICE
        assert conn.execute(
            "SELECT * FROM pgmem.explain_recall('demo', ARRAY[%s::vector], floor => 0.99)", (vec,)
        ).fetchall()
    assert len(notices) == 1


def test_an_empty_fact_search_says_why(conn: Conn, embedder: Embedder) -> None:
    add_facts(conn, "demo", [Fact("The dogs are called Biscuit and Juniper.")], embedder)
    assert fact_recall(conn, "demoo", "dogs", embedder).empty_reason == "scope_empty"
    assert fact_recall(conn, "demo", "dogs", embedder, thread="t9").empty_reason == "thread_empty"
    assert fact_recall(conn, "demo", "dogs", embedder, floor=0.99).empty_reason == "below_floor"
    # fact_recall takes no metadata filter: a reason for a filtered one was the unfiltered one's (rt74).
    with conn.transaction(), scoped(conn, "demo"):
        for thread in ("NULL", "'t9'"):
            with (
                pytest.raises(psycopg.errors.InvalidParameterValue, match="a fact recall has no metadata filter"),
                conn.transaction(),
            ):
                conn.execute(f"SELECT * FROM pgmem.empty_recall_reason('demo', {thread}, '{{\"a\": 1}}', 'fact')")
        row = conn.execute("SELECT reason FROM pgmem.empty_recall_reason('demo', NULL, '{}', 'fact')").fetchone()
        assert row == ("below_floor",)


def store_document(conn: Conn, embedder: Embedder) -> None:
    doc = Document("deploys.md", "# Deploys\n\nThe staging deploy reads DEPLOY_TOKEN from .env.local.\n")
    assert add_documents(conn, "docs", [doc], embedder).inserted == 1


@pytest.mark.long
def test_an_empty_document_search_says_why(conn: Conn, admin_conn: Conn, embedder: Embedder, app_url: str) -> None:
    """A misspelt scope searched for documents printed "(no document above the floor)" and
    exited 0, where `pgmem recall` says the scope holds no memory: now the same answer, from
    pgmem.empty_recall_reason's document plane, in SQL, Python and the CLI."""
    store(conn, embedder)  # memory is not documents: a scope holding turns only has none
    store_document(conn, embedder)
    for scope, floor, reason, text in [
        ("docss", None, "scope_empty", "scope docss holds no documents (check the scope name)"),
        ("demo", None, "scope_empty", "scope demo holds no documents"),
        ("docs", 0.99, "below_floor", "no document above the floor"),
    ]:
        r = search_documents(conn, scope, "where does the deploy read its token", embedder, floor=floor)
        assert all(not g.hits for g in r.groups)
        assert r.empty_reason == reason and r.empty_message is not None and text in r.empty_message
        assert r.nothing_searched == (reason == "scope_empty")
        assert r.as_dict()["empty_reason"] == reason
    found = search_documents(conn, "docs", "where does the deploy read its token", embedder, floor=-1.0)
    assert found.groups[0].hits and found.empty_reason is None and not found.nothing_searched
    with conn.transaction(), scoped(conn, "docs"):
        for args in (", thread => 't1'", ", metadata_filter => '{\"a\": 1}'"):
            with (
                pytest.raises(psycopg.errors.InvalidParameterValue, match="no thread or metadata filter"),
                conn.transaction(),
            ):
                conn.execute(f"SELECT * FROM pgmem.empty_recall_reason('docs'{args}, plane => 'document')")
    env = {**os.environ, "DATABASE_URL": app_url}
    typo = cli(env, "docs", "search", "deploy token", "--scope", "docss")
    assert typo.returncode == 1 and typo.stdout == ""
    assert typo.stderr.strip() == "pgmem: error: scope docss holds no documents (check the scope name)"
    as_json = cli(env, "docs", "search", "deploy token", "--scope", "docss", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["empty_reason"] == "scope_empty"
    at_floor = cli(env, "docs", "search", "deploy token", "--scope", "docs", "--floor", "0.99")
    assert at_floor.returncode == 0 and "(no document above the floor)" in at_floor.stdout
    hit = cli(env, "docs", "search", "deploy token", "--scope", "docs", "--floor", "-1")
    assert hit.returncode == 0 and "DEPLOY_TOKEN" in hit.stdout


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgmem", *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.long
def test_cli_empty_answers_and_filters(conn: Conn, app_url: str, embedder: Embedder) -> None:
    store(conn, embedder)
    env = {**os.environ, "DATABASE_URL": app_url}
    typo = cli(env, "recall", "What are my dogs called?", "--scope", "demoo")
    assert typo.returncode == 1 and typo.stdout == ""
    assert typo.stderr.strip() == "pgmem: error: scope demoo holds no memory (check the scope name)"
    thread = cli(env, "recall", "my dogs", "--scope", "demo", "--thread", "t9")
    assert thread.returncode == 1 and "thread t9 has no turns in scope demo" in thread.stderr
    as_json = cli(env, "recall", "my dogs", "--scope", "demoo", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["empty_reason"] == "scope_empty"
    # --log when nothing was searched (no turn within --since): one error line, exit 1, and the
    # id of the logged recall, which was dropped before.
    logged = cli(env, "recall", "my dogs", "--scope", "demo", "--since", "2030-01-01", "--log")
    assert logged.returncode == 1 and logged.stderr.strip() == (
        "pgmem: error: no turn of scope demo has a time within since 2030-01-01T00:00:00Z / until (open)"
        " (a turn without a time is in none)"
    )
    assert logged.stdout.startswith("(logged as recall ") and "explain_logged_recall('demo', " in logged.stdout
    # The printed statements run as printed by the application login (which sets no scope itself).
    printed = logged.stdout.strip().split(": ", 1)[1].removesuffix(")")
    conn.execute(printed)
    conn.execute("RESET pgmem.scope")
    floor = cli(env, "recall", "my dogs", "--scope", "demo", "--floor", "0.99")
    assert floor.returncode == 0 and "(no memory above the floor)" in floor.stdout
    found = cli(env, "recall", "my dogs", "--scope", "demo")
    assert found.returncode == 0 and "Biscuit" in found.stdout
    for text, named in [
        ('{"k": "a\\u0000b"}', "--filter['k'] contains a NUL"),
        ('{"k": ["x", "\\ud800"]}', "--filter['k'][1] contains an invalid UTF-8"),
        ("[1, 2]", "--filter must be a JSON object"),
        ('{"k": 1, "k": 2}', "--filter gives the key 'k' twice"),
        ('{"k": NaN}', "--filter"),
        ('{"k": [1e400]}', "--filter['k'][0] is inf, a number JSON cannot carry"),
        ('{"a": ' * 5000 + "1" + "}" * 5000, "--filter"),
    ]:
        bad = cli(env, "recall", "my dogs", "--scope", "demo", "--filter", text)
        assert bad.returncode != 0 and named in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.long
def test_a_negative_floor_is_taken_space_separated(conn: Conn, app_url: str, embedder: Embedder) -> None:
    """`--floor -1e-3` failed in argparse ("expected one argument": a negative number in
    scientific notation looked like an option to it; `--floor=-1e-3` worked). Every numeric
    option takes a negative number space-separated now; a value that is no number is one line."""
    from pgmem.cli import build_parser

    store(conn, embedder)
    env = {**os.environ, "DATABASE_URL": app_url}
    done = cli(env, "recall", "my dogs", "--scope", "demo", "--floor", "-1e-3", "--json")  # end to end once
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout)["empty_reason"] is None
    for value in ["-1e-3", "-0.5", "-.5"]:
        for argv in (
            ["recall", "q", "--scope", "s"],
            ["facts", "search", "q", "--scope", "s"],
            ["docs", "search", "q", "--scope", "s"],
        ):
            assert build_parser().parse_args([*argv, "--floor", value]).floor == float(value)
    for value, says in [
        ("abc", "invalid float value: 'abc'"),
        ("-1e", "invalid float value: '-1e'"),
        ("-abc", "expected one argument"),
    ]:
        bad = cli(env, "recall", "my dogs", "--scope", "demo", "--floor", value)
        assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert bad.stderr.startswith("pgmem recall: error: argument --floor: ") and says in bad.stderr, bad.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["recall", "my dogs", "--scope", "demo"],
        ["facts", "search", "my dogs", "--scope", "demo"],
        ["docs", "search", "deploys", "--scope", "demo"],
        ["stats"],
        ["db", "url"],
        ["migrate"],
        ["reembed", "--to", "e5", "--scope", "demo"],
        ["roles", "show"],
    ],
)
def test_no_command_starts_the_server_silently(tmp_path: Path, args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["PGMEM_HOME"] = str(tmp_path / "home")
    res = cli(env, *args)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "not running" in res.stderr and "pgmem db start" in res.stderr, res.stderr
    assert not (tmp_path / "home" / "pgdata" / "postmaster.pid").exists()
