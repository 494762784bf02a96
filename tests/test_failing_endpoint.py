"""A failing OpenAI-compatible embedding endpoint: a local server on 127.0.0.1 answers 429
with Retry-After, 500, 503, times out, drops connections, returns short batches, wrong
dimensions, NaN and malformed JSON at a seeded rate over 1,000 turns. Ingest must lose no
turn, store no partial turn, never wait less than Retry-After and never store a bad vector;
a 401 fails at once and the key appears nowhere."""

from __future__ import annotations

import base64
import json
import logging
import random
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from psycopg import sql

from pgmem.db import scoped
from pgmem.embedders.openai_compat import OpenAIEmbedder
from pgmem.errors import EmbeddingError
from pgmem.ingest import ingest_turns
from pgmem.pieces import turn_pieces
from tests.helpers import send
from tests.security_helpers import DIMS, Conn, app_conn, hash_vector, make_turn, sentence

__all__ = ["app_conn"]

KEY = "sk-proj-SECRETKEY-abc123XYZ"
TURNS = 1000
POISON = b"poison"  # salt of the vectors in bad responses: such a vector must never be stored

#: (behaviour, weight) of each answer; "ok" answers correctly.
BEHAVIOURS = [
    ("ok", 60),
    ("429", 8),
    ("500", 5),
    ("503", 5),
    ("timeout", 3),
    ("drop", 4),
    ("short", 4),
    ("wrong-dims", 4),
    ("nan", 3),
    ("malformed", 4),
]


@dataclass
class Endpoint:
    url: str
    seed: int
    mode: str = "flaky"  # or "401"
    max_bad_in_a_row: int = 6  # below the client's 8 attempts: every request succeeds eventually
    log: list[tuple[str, float]] = field(default_factory=list)  # (behaviour, retry-after) per request
    auth: list[str] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    bad_in_a_row: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self) -> tuple[str, float]:
        with self.lock:
            if self.mode == "401":
                choice = "401"
            elif self.bad_in_a_row >= self.max_bad_in_a_row:
                choice = "ok"
            else:
                choice = self.rng.choices([b for b, _ in BEHAVIOURS], [w for _, w in BEHAVIOURS])[0]
            self.bad_in_a_row = 0 if choice == "ok" else self.bad_in_a_row + 1
            retry_after = float(self.rng.choice([1, 2.5, 7])) if choice == "429" else 0.0
            self.log.append((choice, retry_after))
            return choice, retry_after


def _embeddings_body(vectors: list[list[float]], model: str, as_base64: bool) -> bytes:
    data: list[dict[str, object]] = []
    for i, v in enumerate(vectors):
        emb: object = base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() if as_base64 else v
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return json.dumps(
        {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 1, "total_tokens": 1}}
    ).encode()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    ep = Endpoint(url="", seed=20261130)
    ep.rng.seed(ep.seed)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def answer(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
            send(self, status, payload, headers)

        def client_gone(self) -> bool:
            """The client hung up (its 1 s timeout passed while this thread waited for a core):
            such a request is logged as "gone", not answered: the client's wait was for its
            timeout, not for a 429 the log would otherwise say it was answered."""
            timeout = self.connection.gettimeout()
            self.connection.setblocking(False)
            try:
                return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
            except BlockingIOError:
                return False
            except OSError:
                return True
            finally:
                self.connection.settimeout(timeout)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.client_gone():
                with ep.lock:
                    ep.log.append(("gone", 0.0))
                    # A failure the client saw: counted, so it still gets an answer within its attempts.
                    ep.bad_in_a_row += 1
                return
            ep.auth.append(self.headers.get("Authorization", ""))
            texts = [str(t) for t in body["input"]]
            dims = int(body.get("dimensions") or DIMS)
            b64 = body.get("encoding_format") == "base64"
            behaviour, retry_after = ep.pick()
            error = b'{"error": {"message": "try again", "type": "server_error"}}'
            try:
                if behaviour == "ok":
                    vectors = [hash_vector(t, dims).tolist() for t in texts]
                    self.answer(200, _embeddings_body(vectors, body["model"], b64))
                elif behaviour == "401":
                    # like the real service, echo (part of) the key back in the message
                    auth = self.headers.get("Authorization", "")
                    msg = {"error": {"message": f"Incorrect API key provided: {auth[7:]}", "type": "invalid"}}
                    self.answer(401, json.dumps(msg).encode())
                elif behaviour == "429":
                    self.answer(429, error, {"Retry-After": f"{retry_after:g}"})
                elif behaviour in ("500", "503"):
                    self.answer(int(behaviour), error)
                elif behaviour == "timeout":
                    time.sleep(2.0)  # the client gives up after 1 s
                    self.answer(200, _embeddings_body([], body["model"], b64))
                elif behaviour == "drop":
                    self.connection.shutdown(socket.SHUT_RDWR)
                elif behaviour == "short":
                    vectors = [hash_vector(t, dims, POISON).tolist() for t in texts[:-1]]
                    self.answer(200, _embeddings_body(vectors, body["model"], b64))
                elif behaviour == "wrong-dims":
                    vectors = [hash_vector(t, dims - 1, POISON).tolist() for t in texts]
                    self.answer(200, _embeddings_body(vectors, body["model"], b64))
                elif behaviour == "nan":
                    vectors = [hash_vector(t, dims, POISON).tolist() for t in texts]
                    vectors[0][5] = float("nan")
                    self.answer(200, _embeddings_body(vectors, body["model"], False))
                else:  # malformed
                    self.answer(200, b'{"object": "list", "data": [{"object": "embedding", "index": 0, "embe')
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass  # the client hung up first (timeouts)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ep.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield ep
    server.shutdown()
    server.server_close()


def make_embedder(ep: Endpoint, sleeps: list[float]) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        dimensions=DIMS,
        api_key=KEY,
        base_url=ep.url,
        sleep=sleeps.append,  # recorded, not slept: the test checks every wait
        max_inputs=16,
        timeout=1.0,
        backoff_base=0.05,
    )


@pytest.mark.long
def test_flaky_endpoint_over_1000_turns(app_conn: Conn, endpoint: Endpoint) -> None:
    rng = np.random.default_rng(3)
    turns = [
        make_turn("s", f"t{i % 7}", i, sentence(rng), tool=sentence(rng, 20) if i % 3 == 0 else None)
        for i in range(TURNS)
    ]
    sleeps: list[float] = []
    emb = make_embedder(endpoint, sleeps)
    expected = {t.index: turn_pieces(t, emb) for t in turns}
    report = ingest_turns(app_conn, turns, emb)
    assert (report.inserted, report.failed) == (TURNS, [])

    behaviours = [b for b, _ in endpoint.log]
    bad = [(b, ra) for b, ra in endpoint.log if b != "ok"]
    assert {b for b, _ in BEHAVIOURS} <= set(behaviours), "every failure kind was exercised"
    # One wait per failed request, never shorter than the Retry-After it answered: counted by
    # threshold, since a request whose client gave up may be logged after the retry that
    # followed it (its thread waited for a core).
    assert len(sleeps) == len(bad)
    for t in sorted({ra for b, ra in bad if b == "429"}):
        assert sum(w >= t for w in sleeps) >= sum(b == "429" and ra >= t for b, ra in bad), (t, sleeps, bad)

    with scoped(app_conn, "s"):
        rows = app_conn.execute(
            "SELECT turn_index, label, body, raw_embedding FROM pgmem.piece ORDER BY turn_index, source_index, seq"
        ).fetchall()
        turn_count = app_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone()
    assert turn_count == (TURNS,)  # 0 lost
    per_turn: dict[int, int] = {}
    wrong = 0
    for idx, label, body, raw in rows:
        per_turn[int(str(idx))] = per_turn.get(int(str(idx)), 0) + 1
        good = hash_vector(f"{label} {body}", DIMS)
        if float(np.dot(raw.to_numpy(), good)) < 0.9999:  # type: ignore[attr-defined]
            wrong += 1
    assert wrong == 0  # no vector from a bad response was stored
    assert per_turn == {i: len(ps) for i, ps in expected.items()}  # 0 partial
    print(
        f"requests: {len(endpoint.log)}; bad answers: {len(bad)} "
        f"({', '.join(f'{b}={behaviours.count(b)}' for b, _ in BEHAVIOURS if b != 'ok')}); "
        f"turns stored: {TURNS}; lost 0; partial 0; waits checked: {len(sleeps)}"
    )


def test_401_fails_at_once_and_the_key_appears_nowhere(
    app_conn: Conn, admin_conn: Conn, endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint.mode = "401"
    sleeps: list[float] = []
    emb = make_embedder(endpoint, sleeps)
    turns = [make_turn("s", "t", i, f"turn {i}") for i in range(5)]
    with pytest.raises(EmbeddingError) as err:
        ingest_turns(app_conn, turns, emb)
    # At once: one request, no wait (every wait goes through `sleeps`), no retry.
    assert len(endpoint.log) == 1 and sleeps == []
    assert endpoint.auth == [f"Bearer {KEY}"]  # the key was sent (so it could have leaked)
    assert "401" in str(err.value)
    texts = [
        str(err.value),
        repr(err.value),
        "".join(traceback.format_exception(err.value)),
        caplog.text,
        "\n".join(str(r.__dict__) for r in caplog.records),
    ]
    for text in texts:
        assert KEY not in text and "SECRETKEY" not in text
    # and nothing was written anywhere
    tables = [
        str(r[0])
        for r in admin_conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'r'"
        ).fetchall()
    ]
    assert "turn" in tables
    for table in tables:
        query = sql.SQL("SELECT count(*) FROM {} t WHERE t::text LIKE '%%SECRETKEY%%'").format(
            sql.Identifier("pgmem", table)
        )
        hits = admin_conn.execute(query).fetchone()
        assert hits == (0,), table
    assert admin_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (0,)
