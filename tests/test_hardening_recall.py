"""Issue 12, recall side, run as the app role a service uses: a multi-megabyte message in
hybrid mode (9), every recall argument checked in SQL and internal helpers out of reach (10),
reads refused with another model than the scope's (11), and unstorable text in a search
refused as an InputError / one line and exit 2 (8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest

from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents, search_documents
from pgmem.errors import InputError, ModelMismatchError, PgmemError
from pgmem.facts import Fact, add_facts, fact_recall
from pgmem.ingest import ingest_turns
from pgmem.recall import WHOLE_MESSAGE_BYTES, recall, recall_vectors
from pgmem.splitting import cap_bytes_keep_end
from tests.security_helpers import (
    APP_LOGIN,
    READER_LOGIN,
    Conn,
    HashEmbedder,
    app_conn,
    connect_as,
    hash_vector,
    make_turn,
    role_url,
)

__all__ = ["app_conn"]

STORED_MODEL = "test:hash"
SCOPE = "s"


def _populate(app: Conn) -> None:
    emb = HashEmbedder(model_id=STORED_MODEL)
    turns = [
        make_turn(SCOPE, "t", 0, "The staging deploy failed because DEPLOY_TOKEN was missing."),
        make_turn(SCOPE, "t", 1, "My dogs Biscuit and Juniper need their boosters in March."),
        make_turn(SCOPE, "t", 2, "The invoice for the zeppelin charter is overdue."),
    ]
    report = ingest_turns(app, turns, emb)
    assert report.inserted == 3 and not report.failed
    add_facts(app, SCOPE, [Fact("The dogs are called Biscuit and Juniper.")], emb)
    guide = Document("guide.md", "# Guide\n\nZeppelin charters are booked in spring.\n")
    docs = add_documents(app, SCOPE, [guide], emb)
    assert docs.inserted == 1 and not docs.failed


@pytest.fixture
def store(app_conn: Conn) -> Conn:
    _populate(app_conn)
    return app_conn


# 9. A long message in the default hybrid mode -------------------------------------------


def test_multi_megabyte_message_recalls_in_hybrid_mode(store: Conn) -> None:
    # ~2.4 MB of distinct words (the deepest word query), ending with words of a stored turn.
    filler = " ".join(f"w{i}" for i in range(330_000))
    message = f"{filler} zeppelin charter invoice overdue"
    assert len(message.encode()) > 2 * 2**20
    result = recall(store, SCOPE, message, HashEmbedder(model_id=STORED_MODEL), mode="hybrid", floor=-1.0)
    assert 1 <= len(result.groups) <= 8
    last = result.groups[-1]
    # The word search of the last part reads the part's end, which names the zeppelin turn.
    word_hits = [h for h in last.hits if h.word_rank is not None]
    assert [h.turn_index for h in word_hits] == [2]

    # In SQL, as a psql user or another language would call it: one 3 MB part text.
    with scoped(store, SCOPE):
        rows = store.execute(
            """SELECT turn_index, word_rank FROM pgmem.memory_recall(%s, %s::vector[], %s, floor => -1,
                                                                    mode => 'hybrid')""",
            (SCOPE, [hash_vector("q")], [filler + " " + filler[: 2**20] + " biscuit"]),
            binary=True,
        ).fetchall()
    assert (1, 1) in rows


def test_word_search_reads_the_same_capped_text_as_the_embedder(store: Conn) -> None:
    # Multi-byte characters put the 8,000-byte cut inside a character.
    long = "é€ " * 3000 + "biscuit juniper"
    capped = cap_bytes_keep_end(long, WHOLE_MESSAGE_BYTES)
    assert capped != long
    same = store.execute("SELECT pgmem.word_lexemes(%s) = pgmem.word_lexemes(%s)", (long, capped)).fetchone()
    assert same == (True,)
    # Normal-sized text: the english lexemes of the text, as the pieces' stored lexemes have them.
    for text in ("My dogs are called Biscuit and Juniper.", 'the "staging deploy" -prod failed or not'):
        row = store.execute(
            "SELECT pgmem.word_lexemes(%s) = tsvector_to_array(to_tsvector('english', %s))", (text, text)
        ).fetchone()
        assert row == (True,)
    # However many words a caller sends, at most 256 are searched.
    many = " ".join(f"w{i}x" for i in range(5000))
    assert store.execute("SELECT cardinality(pgmem.word_lexemes(%s))", (many,)).fetchone() == (256,)


# 10. Every argument checked in SQL; internal helpers out of the app role's reach --------------


def _refused(conn: Conn, query: str, params: tuple[object, ...], state: str, words: str) -> None:
    with pytest.raises(psycopg.Error) as err, scoped(conn, SCOPE):
        conn.execute(query, params, binary=True).fetchall()
    assert err.value.sqlstate == state, err.value
    assert words in str(err.value)


def test_recall_arguments_are_refused_in_sql(store: Conn) -> None:
    v = [hash_vector("q")]
    mem = "SELECT * FROM pgmem.memory_recall(%s, %s::vector[], ARRAY['q'], mode => 'hybrid', {})"
    _refused(store, mem.format("rrf_k => -1"), (SCOPE, v), "22023", "rrf_k must be between 0 and 10000, got -1")
    _refused(store, mem.format("rrf_k => NULL"), (SCOPE, v), "22023", "rrf_k")
    for bad in ("0", "1001", "NULL"):
        _refused(store, mem.format(f"candidates => {bad}"), (SCOPE, v), "22023", "candidates must be between 1")
    _refused(store, mem.format("ef_search => 0"), (SCOPE, v), "22023", "ef_search")
    _refused(store, mem.format("floor => 'NaN'"), (SCOPE, v), "22023", "floor is a raw cosine")
    _refused(
        store, "SELECT * FROM pgmem.fact_recall(%s, %s::vector[], ef_search => 5000)", (SCOPE, v), "22023", "ef_search"
    )
    _refused(
        store, "SELECT * FROM pgmem.explain_recall(%s, %s::vector[], show => 0)", (SCOPE, v), "22023", "show must be"
    )
    _refused(
        store,
        "SELECT * FROM pgmem.document_search(%s, %s::vector[], candidates => 5000)",
        (SCOPE, v),
        "22023",
        "candidates must be between 1 and 1000",
    )
    _refused(
        store, "SELECT * FROM pgmem.explain_logged_recall(%s, NULL)", (SCOPE,), "22004", "recall_id must not be NULL"
    )


def _comment(conn: Conn, function: str) -> str:
    row = conn.execute("SELECT obj_description(%s::regprocedure, 'pg_proc')", (function,)).fetchone()
    assert row is not None and isinstance(row[0], str)
    return row[0]


def test_the_comments_of_check_recall_args_and_reblend_say_what_they_raise(store: Conn) -> None:
    """\\df+ shows these comments: check_recall_args said 22004 for NULL, while a NULL x, floor,
    candidates, rrf_k, show or recency is 22023 like an out-of-range value; reblend's named
    neither its thread argument nor its refusals (until 0071)."""
    v = [hash_vector("q")]
    mem = "SELECT * FROM pgmem.memory_recall(%s, %s::vector[], {})"
    _refused(store, mem.format("x => NULL"), (SCOPE, v), "22023", "x must be between 1 and 1000, got NULL")
    _refused(store, mem.format("recency => NULL"), (SCOPE, v), "22023", "recency is a cosine band")
    _refused(store, "SELECT * FROM pgmem.memory_recall(%s, '{}'::vector[])", (SCOPE,), "22004", "part_vectors")
    args = (
        "pgmem.check_recall_args(text, vector[], text[], integer, double precision, text, text, text, integer, "
        "integer, integer, integer, jsonb, timestamptz, timestamptz, timestamptz, timestamptz, double precision)"
    )
    checks = _comment(store, args)
    assert "22004 (NULL)" not in checks
    assert "22004 (a NULL scope, no part_vectors, or hybrid mode without part_texts or with a NULL one" in checks
    assert "NULL or out of range" in checks and "22023 (part arrays not one-dimensional from 1" in checks
    _refused(store, "SELECT pgmem.reblend(%s, 2)", (SCOPE,), "22023", "weight must be between 0 and 1")
    with scoped(store, SCOPE):
        row = store.execute("SELECT pgmem.reblend(%s, 0.8, thread => 'nosuch')", (SCOPE,)).fetchone()
    assert row == (0,)
    with pytest.raises(psycopg.Error) as err, scoped(store, "empty"):
        store.execute("SELECT pgmem.reblend('empty', 0.8)").fetchone()
    assert err.value.sqlstate == "42704"
    reblend = _comment(store, "pgmem.reblend(text, double precision, text)")
    assert "given thread, only that thread's" in reblend
    assert "22023 otherwise" in reblend and "42704" in reblend


OK_VECTOR = str(hash_vector("q").tolist())
#: (plane, part_texts, part_vectors, x, floor, mode) of a log_recall call a recall would accept.
LOG_OK: tuple[str, list[str], list[str], int, float, str] = ("memory", ["q"], [OK_VECTOR], 5, 0.2, "vector")


@pytest.mark.parametrize(
    ("args", "state", "words"),
    [
        ((*LOG_OK[:3], -5, *LOG_OK[4:]), "22023", "x must be between 1 and 1000, got -5"),
        ((*LOG_OK[:4], float("nan"), *LOG_OK[5:]), "22023", "floor is a raw cosine between -1 and 1, got NaN"),
        ((*LOG_OK[:2], ["[1,2,3]"], *LOG_OK[3:]), "22000", "has 3 dimensions"),
        ((*LOG_OK[:5], "bogus"), "22023", "mode must be vector or hybrid, got bogus"),
        (("bogus", *LOG_OK[1:]), "22023", "plane must be memory, fact or document"),
        ((*LOG_OK[:1], ["a", "b"], *LOG_OK[2:]), "22023", "part_texts has 2 entries but part_vectors has 1"),
    ],
)
def test_log_recall_stores_only_what_a_recall_accepts(
    store: Conn, args: tuple[object, ...], state: str, words: str
) -> None:
    with scoped(store, SCOPE):  # the valid call is stored
        store.execute(
            "SELECT pgmem.log_recall(%s, %s, 'm', %s, %s::vector[], %s, %s, NULL, %s, '[]')", (SCOPE, *LOG_OK)
        )
    _refused(
        store,
        "SELECT pgmem.log_recall(%s, %s, 'm', %s, %s::vector[], %s, %s, NULL, %s, '[]')",
        (SCOPE, *args),
        state,
        words,
    )
    with scoped(store, SCOPE):
        assert store.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (1,)


@pytest.mark.parametrize("results", ["5", '"hits"', "null", "true"])
def test_log_recall_refuses_results_that_are_no_groups(store: Conn, results: str) -> None:
    """A logged recall's results are its groups (an array) or an object: a JSON scalar is one
    22023 line, and no row is written."""
    _refused(
        store,
        "SELECT pgmem.log_recall(%s, %s, 'm', %s, %s::vector[], %s, %s, NULL, %s, %s::jsonb)",
        (SCOPE, *LOG_OK, results),
        "22023",
        "results must be a JSON array (the recall's groups) or object, got a JSON",
    )
    with scoped(store, SCOPE):
        assert store.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (0,)


#: A log_recall call with room for one argument at a time: (message, part_texts, thread, results).
LOG_SIZED = "SELECT pgmem.log_recall(%s, 'memory', %s, %s, %s::vector[], 5, 0.2, %s, 'vector', %s::jsonb)"


def _sized(text: str, n: int) -> str:
    """`text` repeated and cut to exactly n UTF-8 bytes (text of one-byte characters at the end)."""
    out = (text * (n // len(text.encode()) + 1)).encode()[: n - 1].decode("utf-8", "ignore")
    return out + "x" * (n - len(out.encode()))


def _at_and_over(argument: str) -> tuple[object, object]:
    """A value of `argument` at log_recall's bound, and one a byte (or a character) over it."""
    if argument == "message":
        at = _sized("é zeppelin ", 100_000)
        return at, at + "x"
    if argument == "part_texts":
        head, tail = _sized("charter é ", 60_000), _sized("invoice ", 40_000)
        return [head, tail], [head, tail + "x"]
    if argument == "thread":
        return "t" * 200, "t" * 201
    # [{"body": "..."}] is 14 bytes around the body, as jsonb writes it.
    at, over = (json.dumps([{"body": _sized("é", n - 14)}], ensure_ascii=False) for n in (16_000_000, 16_000_001))
    return at, over


@pytest.mark.parametrize(
    ("argument", "words"),
    [
        ("message", "message is 100001 bytes; at most 100,000"),
        ("part_texts", "part_texts are 100001 bytes together; at most 100,000"),
        ("thread", "thread must be 1 to 200 characters, got 201"),
        ("results", "results is 16000001 bytes as JSON text; at most 16,000,000"),
    ],
)
def test_log_recall_refuses_a_row_of_any_size(store: Conn, argument: str, words: str) -> None:
    """log_recall stored its message, part texts, thread and results whatever their size, so a caller
    could write a log row of any size. Each is bounded: at the bound the row is written, one byte
    (or character) over it is one 22023 line naming the argument and its bound, and nothing is written."""
    at, over = _at_and_over(argument)
    base: dict[str, object] = {"message": "m", "part_texts": ["q", "r"], "thread": None, "results": "[]"}
    vectors = [OK_VECTOR, OK_VECTOR]

    def args(value: object) -> tuple[object, ...]:
        a = {**base, argument: value}
        return (SCOPE, a["message"], a["part_texts"], vectors, a["thread"], a["results"])

    with scoped(store, SCOPE):
        store.execute(LOG_SIZED, args(at))
        row = store.execute("SELECT message, part_texts, thread_id, results FROM pgmem.recall_log").fetchone()
        assert row is not None
        stored = dict(zip(("message", "part_texts", "thread", "results"), row, strict=True))
        assert stored[argument] == (json.loads(str(at)) if argument == "results" else at)
    _refused(store, LOG_SIZED, args(over), "22023", words)
    with scoped(store, SCOPE):
        assert store.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (1,)


def test_a_logged_recall_of_a_message_over_100000_bytes_is_refused_before_it_is_embedded(store: Conn) -> None:
    """A recall with log=True of a message over 100,000 bytes is one InputError, before the message is
    embedded, and no log row is written; one of exactly 100,000 bytes is recalled and logged whole."""
    emb = HashEmbedder(model_id=STORED_MODEL)
    at = _sized("Is the zeppelin charter invoice overdue? Ça coûte cher. ", 100_000)
    with pytest.raises(PgmemError, match=r"^message is 100001 bytes; at most 100,000 in a logged recall$"):
        recall(store, SCOPE, at + "x", emb, log=True)
    assert emb.calls == 0
    with scoped(store, SCOPE):
        assert store.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (0,)
    result = recall(store, SCOPE, at, emb, log=True, floor=-1.0)
    assert result.recall_id is not None and result.groups[-1].hits
    with scoped(store, SCOPE):
        assert store.execute("SELECT message FROM pgmem.recall_log").fetchall() == [(at,)]
    # Without logging, a message of any size is recalled as before.
    assert recall(store, SCOPE, at * 3, emb, floor=-1.0).groups
    # recall_vectors with log=True checks its message and its part texts together the same way,
    # before the recall runs (the SQL refusal, after it, has no "in a logged recall").
    head, tail = _sized("charter é ", 60_000), _sized("invoice ", 40_000)
    vectors = hash_vector("q")[None, :].repeat(2, axis=0)
    for message, texts, says in [
        (at + "x", ["q", "r"], "message is 100001 bytes"),
        ("m", [head, tail + "x"], "part_texts are 100001 bytes together"),
    ]:
        with pytest.raises(InputError, match=rf"^{says}; at most 100,000 in a logged recall$"):
            recall_vectors(store, SCOPE, texts, vectors, message=message, log=True, floor=-1.0)
    assert recall_vectors(store, SCOPE, [head, tail], vectors, message="m", log=True, floor=-1.0).recall_id
    with scoped(store, SCOPE):
        assert store.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (2,)


def test_candidate_helpers_keep_the_public_caps(store: Conn) -> None:
    many = [hash_vector(f"q{i}") for i in range(65)]
    for helper in ("_memory_candidates", "_fact_candidates"):
        _refused(
            store,
            f"SELECT count(*) FROM pgmem.{helper}(%s, %s::vector[], 5)",
            (SCOPE, many),
            "22023",
            "at most 64 parts",
        )
        _refused(
            store,
            f"SELECT count(*) FROM pgmem.{helper}(%s, %s::vector[], 1001)",
            (SCOPE, many[:1]),
            "22023",
            "x must be between 1 and 1000, got 1001",
        )


def test_internal_functions_are_not_granted_to_app_or_reader(store: Conn, admin_conn: Conn, db_url: str) -> None:
    callable_helpers = {
        "_memory_candidates",
        "_fact_candidates",
        "_window_candidates",
        "_scope_index_name",
        "_lexeme",
        "_word_postings",
        "_recall_setting_names",
        "_recall_settings",
        "_apply_recall_settings",
        "_check_logged_model",  # the replays' model check (0116): reads the scope's model, raises
    }
    rows = admin_conn.execute(
        """SELECT p.proname, p.oid::regprocedure::text,
                  has_function_privilege('pgmem_app', p.oid, 'EXECUTE'),
                  has_function_privilege('pgmem_reader', p.oid, 'EXECUTE')
             FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname LIKE '\\_%'"""
    ).fetchall()
    internal = [r for r in rows if r[0] not in callable_helpers]
    assert any(r[0] == "_write_scope" for r in internal)
    assert [r[1] for r in internal if r[2] or r[3]] == []
    with pytest.raises(psycopg.errors.InsufficientPrivilege), scoped(store, SCOPE):
        store.execute("SELECT pgmem._write_scope(%s)", (SCOPE,))
    # The recall functions run as the caller, so the read-only role still recalls in psql.
    reader = connect_as(db_url, READER_LOGIN)
    try:
        with scoped(reader, SCOPE):
            for query in (
                "SELECT count(*) FROM pgmem.memory_recall(%s, %s::vector[], '{dogs}', floor => -1, mode => 'hybrid')",
                "SELECT count(*) FROM pgmem.fact_recall(%s, %s::vector[], floor => -1)",
            ):
                row = reader.execute(query, (SCOPE, [hash_vector("q")]), binary=True).fetchone()
                assert row is not None and int(str(row[0])) > 0, query
    finally:
        reader.close()


# 11. Reads refuse another model than the scope's ----------------------------------------------


def test_recall_with_another_model_names_both(store: Conn) -> None:
    other = HashEmbedder(model_id="test:other")
    checks: list[Callable[[], object]] = [
        lambda: recall(store, SCOPE, "What are my dogs called?", other),
        lambda: recall(store, SCOPE, "What are my dogs called?", other, mode="vector"),
        lambda: fact_recall(store, SCOPE, "What are my dogs called?", other),
        lambda: search_documents(store, SCOPE, "zeppelin booking", other),
    ]
    for call in checks:
        with pytest.raises(ModelMismatchError) as err:
            call()
        assert STORED_MODEL in str(err.value) and "test:other" in str(err.value)
    with pytest.raises(psycopg.Error) as sql_err, scoped(store, SCOPE):
        store.execute(
            "SELECT * FROM pgmem.explain_recall(%s, %s::vector[], model_id => 'test:other')",
            (SCOPE, [hash_vector("q")]),
            binary=True,
        ).fetchall()
    assert sql_err.value.sqlstate == "22000" and STORED_MODEL in str(sql_err.value)
    # The scope's own model still reads.
    same = HashEmbedder(model_id=STORED_MODEL)
    assert recall(store, SCOPE, "What are my dogs called?", same, floor=-1.0).groups[0].hits
    assert fact_recall(store, SCOPE, "What are my dogs called?", same, floor=-1.0).groups[0].hits
    assert search_documents(store, SCOPE, "zeppelin booking", same, floor=-1.0).groups[0].hits
    # Vectors given directly without a model id: no check (a SQL caller may not know it).
    assert recall_vectors(store, SCOPE, ["q"], hash_vector("q")[None, :], floor=-1.0, mode="vector").groups[0].hits


@pytest.fixture
def openai_endpoint() -> Iterator[str]:
    """A local OpenAI-compatible /v1/embeddings endpoint (no network): hash vectors."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            dims = int(body.get("dimensions") or 384)
            data = [
                {"object": "embedding", "index": i, "embedding": hash_vector(t, dims).tolist()}
                for i, t in enumerate(body["input"])
            ]
            usage = {"prompt_tokens": 1, "total_tokens": 1}
            payload = json.dumps({"object": "list", "data": data, "model": body["model"], "usage": usage}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _cli(db_url: str, tmp_path: Path, args: list[str | bytes], **env: str) -> subprocess.CompletedProcess[bytes]:
    full_env = {
        **os.environ,
        "PGMEM_HOME": str(tmp_path / "home"),
        "DATABASE_URL": role_url(db_url, APP_LOGIN),
        **env,
    }
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"pgmem", *[a.encode() if isinstance(a, str) else a for a in args]],
        env=full_env,
        capture_output=True,
        timeout=300,
        check=False,
    )


def _one_line_error(proc: subprocess.CompletedProcess[bytes]) -> str:
    err = proc.stderr.decode("utf-8", "replace").strip()
    assert proc.returncode == 2, (proc.returncode, proc.stdout, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.long
def test_cli_recall_with_another_model_fails_naming_both(
    store: Conn, db_url: str, tmp_path: Path, openai_endpoint: str
) -> None:
    env = {
        "PGMEM_EMBEDDER": "openai",
        "PGMEM_PIECE_DIMS": "384",
        "PGMEM_FACT_DIMS": "384",
        "OPENAI_BASE_URL": openai_endpoint,
        "OPENAI_API_KEY": "sk-test",
    }
    for args in (
        ["recall", "What are my dogs called?", "--scope", SCOPE],
        ["facts", "search", "What are my dogs called?", "--scope", SCOPE],
        ["docs", "search", "zeppelin booking", "--scope", SCOPE],
    ):
        err = _one_line_error(_cli(db_url, tmp_path, list(args), **env))
        assert STORED_MODEL in err and "text-embedding-3-small" in err, err


# 8. Unstorable text in a search --------------------------------------------------------------


@pytest.mark.parametrize("bad", ["dog\x00s", "dog\udcffs", "\ud800"])
def test_unstorable_text_in_a_search_is_an_input_error(store: Conn, bad: str) -> None:
    emb = HashEmbedder(model_id=STORED_MODEL)
    calls: list[Callable[[], object]] = [
        lambda: recall(store, SCOPE, bad, emb),
        lambda: recall(store, bad, "my dogs", emb),
        lambda: recall(store, SCOPE, "my dogs", emb, thread=bad),
        lambda: recall_vectors(store, SCOPE, [bad], hash_vector("q")[None, :]),
        lambda: fact_recall(store, SCOPE, bad, emb),
        lambda: fact_recall(store, bad, "my dogs", emb),
        lambda: search_documents(store, SCOPE, bad, emb),
        lambda: search_documents(store, bad, "zeppelin", emb),
    ]
    for call in calls:
        with pytest.raises(InputError, match=r"NUL|invalid UTF-8"):
            call()


@pytest.mark.long
def test_cli_search_with_invalid_bytes_is_one_line_and_exit_2(store: Conn, db_url: str, tmp_path: Path) -> None:
    for args in (
        [b"recall", b"dog\xffs", b"--scope", SCOPE.encode()],
        [b"recall", b"dogs", b"--scope", b"\xff"],
        [b"recall", b"dogs", b"--scope", SCOPE.encode(), b"--thread", b"t\xfe"],
        [b"facts", b"search", b"dog\xffs", b"--scope", SCOPE.encode()],
        [b"docs", b"search", b"dog\xffs", b"--scope", SCOPE.encode()],
    ):
        err = _one_line_error(_cli(db_url, tmp_path, list(args)))
        assert "invalid UTF-8" in err, err


@pytest.mark.parametrize("log", ["no", 1, None, [True]])
def test_log_must_be_true_or_false_and_nothing_is_logged_otherwise(store: Conn, log: object) -> None:
    """`log` took any truthy value for True: `log="no"` logged the message. Anything but True
    or False is one line, before anything is embedded or logged."""
    emb = HashEmbedder(model_id=STORED_MODEL)
    with pytest.raises(InputError, match=f"^log must be True or False, got {type(log).__name__}$"):
        recall(store, SCOPE, "my dogs", emb, log=log)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^log must be True or False"):
        recall_vectors(store, SCOPE, ["my dogs"], emb.embed(["my dogs"]), log=log, model_id=STORED_MODEL)  # type: ignore[arg-type]
    with scoped(store, SCOPE):
        assert store.execute("SELECT count(*) FROM pgmem.recall_log").fetchone() == (0,)
    assert recall(store, SCOPE, "my dogs", emb, log=True, floor=-1.0).recall_id is not None


def test_part_texts_are_a_list_of_text_and_model_id_text(store: Conn) -> None:
    """recall_vectors searched part_texts="dogs" as one part a character, took a generator (read
    twice: no groups came back), and sent model_id=5 to SQL, where the caller was told the schema
    was missing ("function pgmem.memory_recall(...) does not exist"). SQL (0109) refuses part
    arrays it would misread: part_texts '[0:0]={...}' paired no text with the vector, and a
    hybrid search went without its word side, silently, as with a NULL part text."""
    emb = HashEmbedder(model_id=STORED_MODEL)
    v = emb.embed(["my dogs"])
    for texts, model_id, line in (
        ("my dogs", STORED_MODEL, "^part_texts must be a list of strings, one a part, got str$"),
        (None, STORED_MODEL, "^part_texts must be a list of strings, one a part, got NoneType$"),
        (["my dogs"], 5, "^model_id must be a string"),
    ):
        with pytest.raises(InputError, match=line):
            recall_vectors(store, SCOPE, texts, v, model_id=model_id, floor=-1.0)  # type: ignore[arg-type]
    listed = recall_vectors(store, SCOPE, ["my dogs"], v, model_id=STORED_MODEL, floor=-1.0)
    generated = recall_vectors(store, SCOPE, (t for t in ["my dogs"]), v, model_id=STORED_MODEL, floor=-1.0)  # type: ignore[arg-type]
    assert generated == listed and listed.groups[0].hits
    for texts, state in (("'[0:0]={dogs}'", "22023"), ("'{{dogs}}'", "22023"), ("ARRAY[NULL]::text[]", "22004")):
        for call in (
            f"SELECT * FROM pgmem.memory_recall('s', ARRAY[%(v)s::vector], {texts}, mode => 'hybrid', floor => -1)",
            f"SELECT * FROM pgmem.document_search('s', ARRAY[%(v)s::vector], {texts}, mode => 'hybrid', floor => -1)",
        ):
            with pytest.raises(psycopg.Error) as err, scoped(store, SCOPE):
                store.execute(call, {"v": v[0]})
            assert err.value.sqlstate == state, (call, err.value)
