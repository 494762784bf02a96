"""Turn metadata and metadata-filtered recall (issue 15 item 3, SQL side), in plain SQL as the
app login: put_turn(metadata => ...) validates and stores a small JSON object once per turn;
memory_recall / explain_recall (metadata_filter => ...) keep pieces of turns whose metadata
contains the filter, on the exact path and on a scope's partial HNSW index, never short."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import numpy.typing as npt
import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.conftest import TEST_DIMS
from tests.lifecycle_helpers import Conn, in_scope, put_turn, vec

F32 = npt.NDArray[np.float32]


def _meta(admin: Conn, scope: str, thread: str, index: int) -> object:
    row = admin.execute(
        "SELECT metadata FROM pgmem.turn WHERE scope_id = %s AND thread_id = %s AND turn_index = %s",
        (scope, thread, index),
    ).fetchone()
    return None if row is None else row[0]


def test_metadata_is_stored_once_per_turn_and_validated(conn: Conn, admin_conn: Conn) -> None:
    with conn.transaction():
        in_scope(conn, "m")
        put_turn(
            conn,
            "m",
            "t",
            0,
            ["a call about the atlas rollout", "second piece"],
            metadata={"channel": "voice", "project": "atlas", "tags": ["x", {"deep": [1, 2]}]},
        )
        put_turn(conn, "m", "t", 1, ["no metadata given"])
    assert _meta(admin_conn, "m", "t", 0) == {"channel": "voice", "project": "atlas", "tags": ["x", {"deep": [1, 2]}]}
    assert _meta(admin_conn, "m", "t", 1) == {}  # NULL is {}
    # The same content with new metadata: nothing re-embedded, the metadata kept.
    with conn.transaction():
        in_scope(conn, "m")
        row = put_turn(conn, "m", "t", 1, ["no metadata given"], metadata={"channel": "chat"})
    assert row == ("unchanged", 0)
    assert _meta(admin_conn, "m", "t", 1) == {"channel": "chat"}

    bad: list[tuple[object, type[psycopg.Error], str]] = [
        (["a", "list"], psycopg.errors.InvalidParameterValue, "metadata must be a JSON object, got a JSON array"),
        ("just text", psycopg.errors.InvalidParameterValue, "got a JSON string"),
        (42, psycopg.errors.InvalidParameterValue, "got a JSON number"),
        ({"big": "x" * 5000}, psycopg.errors.InvalidParameterValue, "at most 4,096"),
        ({"nul": "a\x00b"}, psycopg.errors.UntranslatableCharacter, "unsupported Unicode escape"),
    ]
    for metadata, err, msg in bad:
        with pytest.raises(err, match=msg), conn.transaction():
            in_scope(conn, "m")
            put_turn(conn, "m", "t", 0, ["replaced?"], metadata=metadata)
    # Text that is not JSON, a lone surrogate, and nesting past the parser's depth.
    for text in ('{"a": ', '{"a": "\\ud800"}', "{" + '"a":' * 3):
        with pytest.raises(psycopg.DataError), conn.transaction():
            in_scope(conn, "m")
            conn.execute(
                "SELECT pgmem.put_turn('m', 't', 0, NULL, '[]', '\\x00', 'test:hash', ARRAY['user'],"
                " ARRAY[0], ARRAY['l'], ARRAY['b'], ARRAY[%s::vector], metadata => %s::jsonb)",
                (vec("b"), text),
            )
    for deep in ("[" * 100_000 + "]" * 100_000, '{"a":' * 200_000 + "1" + "}" * 200_000):
        # deeper than the server's stack allows: refused by the server (54001), nothing stored
        with pytest.raises(psycopg.errors.StatementTooComplex), conn.transaction():
            in_scope(conn, "m")
            conn.execute(
                "SELECT pgmem.put_turn('m', 't', 0, NULL, '[]', '\\x00', 'test:hash', ARRAY['user'],"
                " ARRAY[0], ARRAY['l'], ARRAY['b'], ARRAY[%s::vector], metadata => %s::jsonb)",
                (vec("b"), deep),
            )
    # Nothing stored was lost.
    assert _meta(admin_conn, "m", "t", 0) == {"channel": "voice", "project": "atlas", "tags": ["x", {"deep": [1, 2]}]}
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece WHERE scope_id = 'm'").fetchone() == (3,)


def _labels(conn: Conn, scope: str, query: str, **kw: object) -> list[str]:
    extra = "".join(f", {k} => %({k})s" for k in kw)
    with conn.transaction():
        in_scope(conn, scope)
        rows = conn.execute(
            f"SELECT body FROM pgmem.memory_recall(%(s)s, ARRAY[%(q)s::vector], x => 10, floor => -1{extra})"
            " ORDER BY rank",
            {"s": scope, "q": query, **kw},
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_filtered_recall_on_the_exact_path(conn: Conn) -> None:
    turns = [
        ("voice call about atlas", {"channel": "voice", "project": "atlas"}),
        ("chat about atlas", {"channel": "chat", "project": "atlas"}),
        ("voice call about zephyr", {"channel": "voice", "project": "zephyr"}),
        ("no metadata at all", None),
    ]
    with conn.transaction():
        in_scope(conn, "f")
        for i, (body, meta) in enumerate(turns):
            put_turn(conn, "f", "t" if i < 3 else "u", i, [body], metadata=meta)
    q = vec("anything")
    assert sorted(_labels(conn, "f", q)) == sorted(b for b, _ in turns)
    voice = json.dumps({"channel": "voice"})
    assert sorted(_labels(conn, "f", q, metadata_filter=voice)) == ["voice call about atlas", "voice call about zephyr"]
    both = json.dumps({"channel": "voice", "project": "atlas"})
    assert _labels(conn, "f", q, metadata_filter=both) == ["voice call about atlas"]
    assert _labels(conn, "f", q, metadata_filter=json.dumps({"channel": "fax"})) == []
    assert sorted(_labels(conn, "f", q, metadata_filter="{}")) == sorted(b for b, _ in turns)  # {} filters nothing
    # Combined with a thread filter, hybrid mode, exact => true.
    assert _labels(conn, "f", q, metadata_filter=voice, thread="u") == []
    assert sorted(_labels(conn, "f", q, metadata_filter=voice, exact=True)) == [
        "voice call about atlas",
        "voice call about zephyr",
    ]
    with conn.transaction():
        in_scope(conn, "f")
        rows = conn.execute(
            "SELECT body FROM pgmem.memory_recall('f', ARRAY[%s::vector], ARRAY['atlas'], mode => 'hybrid',"
            " floor => -1, metadata_filter => %s::jsonb)",
            (q, json.dumps({"project": "atlas"})),
        ).fetchall()
        assert sorted(str(r[0]) for r in rows) == ["chat about atlas", "voice call about atlas"]
        explained = conn.execute(
            "SELECT piece_id FROM pgmem.explain_recall('f', ARRAY[%s::vector], floor => -1,"
            " metadata_filter => %s::jsonb)",
            (q, voice),
        ).fetchall()
        assert len(explained) == 2
        # A logged recall keeps its filter, and its replay applies it.
        rid = conn.execute(
            "SELECT pgmem.log_recall('f', 'memory', 'm', ARRAY['m'], ARRAY[%s::vector], 5, -1, NULL, 'vector', '[]',"
            " metadata_filter => %s::jsonb)",
            (q, voice),
        ).fetchone()
        assert rid is not None
        replay = conn.execute("SELECT piece_id FROM pgmem.explain_logged_recall('f', %s)", (rid[0],)).fetchall()
        assert sorted(replay) == sorted(explained)
    for bad, msg in (
        ("[]", "must be a JSON object, got a JSON array"),
        ('"voice"', "got a JSON string"),
        (json.dumps({"k": "x" * 5000}), "at most 4,096"),
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=msg):
            _labels(conn, "f", q, metadata_filter=bad)


# --- the index path -------------------------------------------------------------------------

SCOPE = "indexed"
TURNS = 40
PER_TURN = 200  # 8,000 pieces: atlas 30 turns (6,000 pieces), zephyr 10 turns (2,000)


def _unit(rng: np.random.Generator, n: int) -> F32:
    a = rng.standard_normal((n, TEST_DIMS)).astype(np.float32)
    out: F32 = (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)
    return out


def _cluster(rng: np.random.Generator, n: int, centre: F32) -> F32:
    """Unit vectors around a centre (cosine about 0.6 within a cluster, about 0 across)."""
    a = centre + 0.8 * rng.standard_normal((n, TEST_DIMS)).astype(np.float32) / np.sqrt(TEST_DIMS)
    out: F32 = (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)
    return out


#: Each project's pieces lie around their own direction.
CENTRES = dict(zip(("atlas", "zephyr"), _unit(np.random.default_rng(1), 2), strict=True))


@pytest.fixture
def indexed(conn: Conn, admin_conn: Conn) -> Conn:
    register_vector(conn)
    rng = np.random.default_rng(15)
    for t in range(TURNS):
        project = "atlas" if t % 4 else "zephyr"
        vs = _cluster(rng, PER_TURN, CENTRES[project])
        with conn.transaction():
            in_scope(conn, SCOPE)
            conn.execute(
                """SELECT pgmem.put_turn(scope => %s, thread => %s, turn_index => %s, turn_time => NULL,
                       messages => '[]'::jsonb, content_hash => %s, model_id => 'random', unit_kinds => %s,
                       source_indexes => %s, labels => %s, bodies => %s, vectors => %s::vector[],
                       metadata => %s::jsonb)""",
                (
                    SCOPE,
                    f"th{t % 3}",
                    t,
                    hashlib.sha256(f"{t}".encode()).digest(),
                    ["user"] * PER_TURN,
                    list(range(PER_TURN)),
                    [f"[{t}]"] * PER_TURN,
                    [f"piece {i}" for i in range(PER_TURN)],
                    list(vs),
                    json.dumps({"project": project, "turn": t}),
                ),
                binary=True,
            )
    # Index maintenance, as a DBA runs it (pgmem's default graph: m = 24, ef_construction = 400).
    admin_conn.execute("SELECT * FROM pgmem.index_large_scopes(min_pieces => 2000)")
    admin_conn.execute("ANALYZE pgmem.piece")
    admin_conn.execute("ANALYZE pgmem.turn")
    return conn


def _groups(
    conn: Conn, queries: F32, flt: dict[str, object], setup: str = "", x: int = 10, **kw: object
) -> tuple[list[list[int]], int]:
    """Per-part piece ids of a filtered recall, and how many scans this transaction made of the
    scope's partial HNSW index (pg_stat_get_xact_numscans)."""
    extra = "".join(f", {k} => %({k})s" for k in kw)
    with conn.transaction():
        in_scope(conn, SCOPE)
        if setup:
            conn.execute(setup)
        # Pending counts may include earlier transactions not yet flushed: take the difference.
        before = conn.execute(
            "SELECT pg_stat_get_xact_numscans(pgmem.scope_ann_index('piece', %s))", (SCOPE,)
        ).fetchone()
        rows = conn.execute(
            "SELECT part_no, piece_id FROM pgmem.memory_recall(%(s)s, %(v)s::vector[], x => %(x)s, floor => -1,"
            f" metadata_filter => %(f)s::jsonb{extra}) ORDER BY part_no, rank",
            {"s": SCOPE, "v": list(queries), "x": x, "f": json.dumps(flt), **kw},
            binary=True,
        ).fetchall()
        scans = conn.execute(
            "SELECT pg_stat_get_xact_numscans(pgmem.scope_ann_index('piece', %s))", (SCOPE,)
        ).fetchone()
    groups: list[list[int]] = [[] for _ in range(len(queries))]
    for part, pid in rows:
        groups[int(str(part)) - 1].append(int(str(pid)))
    assert scans is not None and before is not None
    return groups, int(str(scans[0] or 0)) - int(str(before[0] or 0))


def _matching(admin: Conn, flt: dict[str, object]) -> set[int]:
    """The pieces of the turns whose metadata contains flt (the ground truth, as the DBA)."""
    rows = admin.execute(
        """SELECT p.piece_id FROM pgmem.piece p JOIN pgmem.turn t USING (scope_id, thread_id, turn_index)
            WHERE p.scope_id = %s AND t.metadata @> %s::jsonb""",
        (SCOPE, json.dumps(flt)),
    ).fetchall()
    return {int(str(r[0])) for r in rows}


@pytest.mark.long
def test_filtered_recall_on_an_indexed_scope_is_never_short(indexed: Conn, admin_conn: Conn) -> None:
    conn = indexed
    assert admin_conn.execute("SELECT pgmem.scope_ann_index('piece', %s) IS NOT NULL", (SCOPE,)).fetchone() == (True,)
    # Queries about what is stored: four near each project's pieces.
    queries = np.concatenate(
        [
            _cluster(np.random.default_rng(99), 4, CENTRES["atlas"]),
            _cluster(np.random.default_rng(98), 4, CENTRES["zephyr"]),
        ]
    )
    atlas, zephyr = _matching(admin_conn, {"project": "atlas"}), _matching(admin_conn, {"project": "zephyr"})
    assert (len(atlas), len(zephyr)) == (6000, 2000)

    # Unfiltered: the index path (sanity check of the fixture).
    _, scans = _groups(conn, queries, {})
    assert scans > 0

    # A broad filter (6,000 matching pieces, more than the exact-path cap of 5,000): the index,
    # with pgvector's iterative scan. As many hits as the exact search, all matching.
    got, scans = _groups(conn, queries, {"project": "atlas"})
    exact, _ = _groups(conn, queries, {"project": "atlas"}, exact=True)
    assert scans > 0
    assert [len(g) for g in got] == [len(g) for g in exact] == [10] * 8
    assert all(set(g) <= atlas for g in got)
    overlap = sum(len(set(a) & set(b)) for a, b in zip(got, exact, strict=True)) / 80
    # Half the queries are near zephyr's pieces, filtered to atlas: the graph's nearest region is
    # the wrong one, which the filtered path's wider search (1,000 candidates) makes up for.
    assert overlap >= 0.95, overlap

    # A selective filter (2,000 pieces): searched exactly over the matching pieces, no index scan.
    got, scans = _groups(conn, queries, {"project": "zephyr"})
    exact, _ = _groups(conn, queries, {"project": "zephyr"}, exact=True)
    assert scans == 0
    assert got == exact and all(len(g) == 10 and set(g) <= zephyr for g in got)

    # A filter matching one turn (200 pieces) and one matching nothing.
    turn5 = _matching(admin_conn, {"turn": 5})
    assert len(turn5) == 200
    got, _ = _groups(conn, queries, {"turn": 5})
    assert all(len(g) == 10 and set(g) <= turn5 for g in got)
    got, _ = _groups(conn, queries, {"project": "nobody"})
    assert got == [[]] * 8

    # Queries in zephyr's cluster, filtered to atlas, with a search width of 10: the first
    # candidates the graph yields are all zephyr pieces, and max_scan_tuples = 1 stops the
    # iterative scan before it reaches atlas, so the index path comes back short. The call is
    # searched again exactly: the groups are full, and are the exact ones.
    near_zephyr = _cluster(np.random.default_rng(5), 8, CENTRES["zephyr"])
    got, scans = _groups(
        conn, near_zephyr, {"project": "atlas"}, setup="SET LOCAL hnsw.max_scan_tuples = 1", ef_search=10
    )
    exact, _ = _groups(conn, near_zephyr, {"project": "atlas"}, exact=True)
    assert scans > 0
    assert [len(g) for g in got] == [10] * 8
    assert got == exact
