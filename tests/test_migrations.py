"""Migrations are reproducible: fresh install, downgrade-then-upgrade and the offline
script give the same catalog (pg_dump --schema-only); upgrading at head is a no-op; a
released run-once SQL file that changes fails its checksum."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgmem import forget_turn, server
from pgmem.db import connect, scoped
from pgmem.ingest import ingest_turns
from pgmem.migrate import downgrade, head_revision, upgrade
from pgmem.sqlfiles import SQL_DIR, InstallParams
from tests.conftest import TEST_DIMS, conninfo_url, scratch_database
from tests.security_helpers import (
    APP_LOGIN,
    Conn,
    HashEmbedder,
    ensure_login_roles,
    hash_vector,
    make_turn,
    repo_root,
    role_url,
)

PARAMS = InstallParams(TEST_DIMS, TEST_DIMS)
INCREMENTAL = SQL_DIR / "incremental"


def schema_dump(url: str) -> str:
    """The catalog as pg_dump --schema-only prints it, minus lines that differ per run."""
    proc = subprocess.run(
        [str(server.bin_dir() / "pg_dump"), "--schema-only", "--no-comments", "-d", url],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    proc_c = subprocess.run(  # comments too, separately: they are part of the contract
        [str(server.bin_dir() / "pg_dump"), "--schema-only", "-d", url],
        capture_output=True,
        text=True,
        check=True,
    )
    keep = []
    for line in (proc.stdout + proc_c.stdout).splitlines():
        if line.startswith(("\\restrict", "\\unrestrict", "-- Dumped", "-- PostgreSQL database dump")):
            continue
        keep.append(line)
    return "\n".join(keep)


def _diff(a: str, b: str) -> str:
    import difflib

    return "\n".join(list(difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=1))[:60])


def _version(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as c:
        return c.execute("SELECT version_num FROM pgmem.alembic_version").fetchall()


@pytest.fixture
def fresh_url(admin_conn: Conn) -> Iterator[str]:
    """A database migrated now, from the files as they are (the session's template database
    was migrated when the session started)."""
    name = f"{admin_conn.info.dbname}_fresh"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = conninfo_url(name)
        upgrade(url, params=PARAMS)
        yield url
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.long
def test_downgrade_then_upgrade_gives_the_fresh_catalog(db_url: str, fresh_url: str) -> None:
    fresh = schema_dump(fresh_url)
    assert "CREATE TABLE pgmem.piece" in fresh and "ROW LEVEL SECURITY" in fresh
    downgrade(db_url, "base", params=PARAMS)
    with psycopg.connect(db_url) as c:
        left = c.execute(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace AND relname <> 'alembic_version'"
            " AND relkind IN ('r', 'p', 'v', 'm')"
        ).fetchone()
        assert left == (0,)
    upgrade(db_url, params=PARAMS)
    again = schema_dump(db_url)
    assert again == fresh, _diff(fresh, again)


def test_upgrade_head_twice_is_a_no_op(db_url: str) -> None:
    before, version = schema_dump(db_url), _version(db_url)
    upgrade(db_url, params=PARAMS)
    upgrade(db_url, params=PARAMS)
    assert _version(db_url) == version
    after = schema_dump(db_url)
    assert after == before, _diff(before, after)


@pytest.mark.long
def test_reapplying_every_idempotent_file_changes_nothing(fresh_url: str) -> None:
    """The re-runnable files really are: applying them all again leaves the same catalog
    (policies recreated, grants reapplied, SECURITY DEFINER reasons not appended twice)."""
    from pgmem.sqlfiles import idempotent_files, render

    before = schema_dump(fresh_url)
    with psycopg.connect(fresh_url, autocommit=True) as c:
        for path in idempotent_files():
            c.execute(render(path.read_text(encoding="utf-8"), PARAMS).encode())
    after = schema_dump(fresh_url)
    assert after == before, _diff(before, after)


@pytest.mark.long
def test_offline_sql_script_installs_the_same_catalog(fresh_url: str, admin_conn: Conn) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "alembic",
            "-c",
            "migrations/alembic.ini",
            "-x",
            f"piece_dims={TEST_DIMS}",
            "-x",
            f"fact_dims={TEST_DIMS}",
            "upgrade",
            "head",
            "--sql",
        ],
        capture_output=True,
        text=True,
        cwd=repo_root(),
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = proc.stdout
    assert "CREATE TABLE pgmem.piece" in script and "@PIECE_DIMS@" not in script
    name = f"{admin_conn.info.dbname}_offline"
    admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = conninfo_url(name)
        psql = subprocess.run(
            [str(server.bin_dir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url],
            input=script,
            capture_output=True,
            text=True,
            check=False,
        )
        assert psql.returncode == 0, psql.stderr[-3000:]
        offline, fresh = schema_dump(url), schema_dump(fresh_url)
        assert offline == fresh, _diff(fresh, offline)
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


# --- checksums of released run-once files ----------------------------------------------


def checksum_problems(folder: Path) -> list[str]:
    """Every file listed in CHECKSUMS must exist unchanged; returns what is wrong."""
    listing = folder / "CHECKSUMS"
    problems = []
    for n, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([0-9a-f]{64})  (\S+\.sql)", line)
        if not match:
            problems.append(f"CHECKSUMS line {n} is not '<sha256>  <file>.sql': {line!r}")
            continue
        digest, name = match.groups()
        path = folder / name
        if not path.exists():
            problems.append(f"released file {name} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(
                f"released run-once file {name} changed (sha256 differs from CHECKSUMS): "
                "add a new numbered file instead"
            )
    return problems


def test_released_run_once_files_are_unchanged() -> None:
    assert (INCREMENTAL / "CHECKSUMS").exists(), "sql/incremental/CHECKSUMS is missing"
    assert checksum_problems(INCREMENTAL) == []
    listed = {line.split()[1] for line in (INCREMENTAL / "CHECKSUMS").read_text().splitlines() if line[:1].isalnum()}
    assert "001_schema.sql" in listed
    # every listed file is a numbered run-once file that a revision applies
    revisions = "\n".join(p.read_text() for p in (repo_root() / "migrations" / "versions").glob("*.py"))
    for name in listed:
        assert re.fullmatch(r"\d{3}_[a-z0-9_]+\.sql", name) and f"incremental/{name}" in revisions


def test_checksum_test_catches_a_changed_file(tmp_path: Path) -> None:
    shutil.copytree(INCREMENTAL, tmp_path / "incremental")
    folder = tmp_path / "incremental"
    assert checksum_problems(folder) == []
    target = folder / "001_schema.sql"
    target.write_text(target.read_text() + "\n-- a harmless-looking edit\n")
    assert any("001_schema.sql changed" in p for p in checksum_problems(folder))
    target.unlink()
    assert any("missing" in p for p in checksum_problems(folder))


@pytest.mark.parametrize("folder", ["incremental", "idempotent"])
def test_sql_folders_state_their_rule(folder: str) -> None:
    text = (SQL_DIR / folder / "README.md").read_text(encoding="utf-8")
    assert ("CHECKSUMS" in text) if folder == "incremental" else ("CREATE OR REPLACE" in text)


# --- an upgrade of a database that holds data ---------------------------------------------

#: The revision the data is written at: the first, so that every revision that rewrites or
#: derives stored rows runs over it (see test_data_written_at_0001_survives_the_upgrade_to_head).
OLD_REVISION = "0001"
OLD_MODEL = "test:hash"


def _vec(text: str) -> str:
    """A 384-d unit vector determined by the text, as pgvector's text input."""
    return "[" + ",".join(repr(float(v)) for v in hash_vector(text)) + "]"


#: (scope, thread, turn, time, user message, pieces as (unit_kind, label, body)).
OLD_TURNS: list[tuple[str, str, int, str | None, str, list[tuple[str, str, str]]]] = [
    (
        "alpha",
        "trip",
        0,
        "2026-10-16 14:02:00+00",
        "Plan the trip to Friedrichshafen.",
        [("user", "[Turn 0 · User · Oct 16, 2:02 PM]", "Plan the trip to Friedrichshafen, please.")],
    ),
    (
        "alpha",
        "trip",
        1,
        "2026-10-16 14:05:00+00",
        "Book the zeppelin flight.",
        [
            ("user", "[Turn 1 · User · Oct 16, 2:05 PM]", "Book the zeppelin flight over Lake Constance."),
            ("assistant", "[Turn 1 · Assistant · Oct 16, 2:05 PM]", "The zeppelin seats are held until Friday."),
        ],
    ),
    (
        "alpha",
        "pets",
        0,
        None,
        "Which animal smiles?",
        [("user", "[Turn 0 · User]", "The quokka on Rottnest Island always smiles.")],
    ),
    (
        "beta",
        "baking",
        0,
        "2026-11-02 09:30:00+00",
        "Almond paste for the cake.",
        [("user", "[Turn 0 · User · Nov 2, 9:30 AM]", "Shape the marzipan roses before the icing sets.")],
    ),
]
#: (scope, thread, turn, section, body, created_at); the first two are the same content.
OLD_FACTS: list[tuple[str, str | None, int | None, str | None, str, str]] = [
    ("alpha", "trip", 1, None, "The zeppelin flight is booked for Friday.", "2026-10-16 14:06+00"),
    ("alpha", "trip", 1, None, "The zeppelin flight is booked for Friday.", "2026-10-17 09:00+00"),
    ("alpha", None, None, "notes/ferns.md#Ferns", "Bracken spreads by rhizomes.", "2026-11-03 10:00+00"),
    ("beta", "baking", 0, None, "Marzipan roses are shaped before icing.", "2026-11-02 09:31+00"),
]
DOC_BODY = "# Ferns\n\nBracken spreads through shaded woodland by its rhizomes."


def _write_old_data(url: str) -> None:
    """Rows as 0001's write path stored them (put_turn, put_document, add_facts, log_recall),
    written directly with SQL: the tables of that revision, its identity columns and its
    generated piece.tsv. Two facts of alpha are the same content (0001 stored duplicates)."""
    with psycopg.connect(url) as c:
        key = c.execute(
            "INSERT INTO pgmem.embedding_model (model_id, dims, first_used) VALUES (%s, %s, '2026-10-01 08:00+00')"
            " RETURNING model_key",
            (OLD_MODEL, TEST_DIMS),
        ).fetchone()
        assert key is not None
        for scope in ("alpha", "beta"):
            c.execute(
                "INSERT INTO pgmem.scope (scope_id, piece_model_key, fact_model_key, created_at)"
                " VALUES (%s, %s, %s, '2026-10-01 08:00+00')",
                (scope, key[0], key[0]),
            )
        for scope, thread, turn, at, message, pieces in OLD_TURNS:
            c.execute(
                "INSERT INTO pgmem.thread (scope_id, thread_id, created_at) VALUES (%s, %s, '2026-10-01 08:00+00')"
                " ON CONFLICT DO NOTHING",
                (scope, thread),
            )
            c.execute(
                """INSERT INTO pgmem.turn (scope_id, thread_id, turn_index, turn_time, messages, content_hash,
                                           context, blend_weight, model_key, ingested_at)
                   VALUES (%s, %s, %s, %s, %s::jsonb, sha256(convert_to(%s, 'UTF8')), %s::vector, 0.8, %s,
                           '2026-11-03 10:00+00')""",
                (
                    scope,
                    thread,
                    turn,
                    at,
                    f'[{{"role": "user", "content": "{message}"}}]',
                    message,
                    _vec(message),
                    key[0],
                ),
            )
            for source, (unit_kind, label, body) in enumerate(pieces):
                c.execute(
                    """INSERT INTO pgmem.piece (scope_id, kind, unit_kind, thread_id, turn_index, source_index, label,
                                                body, raw_embedding, embedding, model_key)
                       VALUES (%s, 'memory', %s, %s, %s, %s, %s, %s, %s::vector, %s::vector, %s)""",
                    (scope, unit_kind, thread, turn, source, label, body, _vec(body), _vec("blend " + body), key[0]),
                )
        c.execute(
            "INSERT INTO pgmem.document (scope_id, document_id, title, body, content_hash, updated_at)"
            " VALUES ('alpha', 'notes/ferns.md', 'Ferns', %s, sha256(convert_to(%s, 'UTF8')), '2026-11-03 10:00+00')",
            (DOC_BODY, DOC_BODY),
        )
        chunk = c.execute(
            "INSERT INTO pgmem.chunk (scope_id, document_id, ordinal, heading_path, body)"
            " VALUES ('alpha', 'notes/ferns.md', 0, '{Ferns}', %s) RETURNING chunk_id",
            (DOC_BODY,),
        ).fetchone()
        assert chunk is not None
        prose = DOC_BODY.split("\n\n")[1]
        c.execute(
            """INSERT INTO pgmem.piece (scope_id, kind, unit_kind, source_index, chunk_id, span_start, span_end,
                                        label, body, raw_embedding, embedding, model_key)
               VALUES ('alpha', 'document', 'prose', 1, %s, %s, %s, 'Ferns', %s, %s::vector, %s::vector, %s)""",
            (chunk[0], DOC_BODY.index(prose), len(DOC_BODY), prose, _vec(prose), _vec(prose), key[0]),
        )
        for fact in OLD_FACTS:
            c.execute(
                """INSERT INTO pgmem.fact (scope_id, thread_id, turn_index, section, body, embedding, model_key,
                                           created_at)
                   VALUES (%s, %s, %s, %s, %s, %s::vector::halfvec, %s, %s)""",
                (*fact[:5], _vec(fact[4]), key[0], fact[5]),
            )
        # A logged recall whose results name the zeppelin pieces (as pgmem.recall writes them).
        c.execute(
            """INSERT INTO pgmem.recall_log (scope_id, created_at, plane, message, part_texts, part_vectors, x, floor,
                                             thread_id, mode, results)
               SELECT 'alpha', '2026-10-18 12:00+00', 'memory', 'zeppelin?', '{zeppelin?}',
                      ARRAY[%s::vector], 5, 0.2, NULL, 'hybrid',
                      jsonb_build_array(jsonb_build_object('part_no', 1, 'text', 'zeppelin?', 'hits',
                          jsonb_agg(jsonb_build_object('piece_id', p.piece_id, 'thread_id', p.thread_id,
                                                       'turn_index', p.turn_index, 'body', p.body)
                                    ORDER BY p.piece_id)))
                 FROM pgmem.piece p WHERE p.scope_id = 'alpha' AND p.body LIKE '%%zeppelin%%'""",
            (_vec("zeppelin?"),),
        )


def _table_rows(url: str, columns: dict[str, list[str]]) -> dict[str, list[list[str | None]]]:
    """Every row of each table, its named columns as text, in a stable order."""
    out: dict[str, list[list[str | None]]] = {}
    with psycopg.connect(url) as c:
        for table, names in columns.items():
            query = sql.SQL("SELECT ARRAY[{}] FROM {}").format(
                sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in names),
                sql.Identifier("pgmem", table),
            )
            out[table] = sorted((list(r[0]) for r in c.execute(query).fetchall()), key=repr)
    return out


@pytest.mark.long
def test_data_written_at_0001_survives_the_upgrade_to_head(admin_conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DBA's upgrade: a database holding data written at an old revision is migrated to head;
    every row stays, with the same values, and is read, searched and forgotten as if head had
    written it.

    Why 0001. `upgrade(url, <rev>)` to an intermediate revision applies this checkout's
    sql/idempotent at <rev> (apply_idempotent and functions_only apply it at the run's last
    revision), and those files read what later revisions add: every revision before 0033 fails
    there (0001-0002 on scope.scope_no, 0003-0018 on model_setting, 0020-0021 on
    word_keep_rank, 0022-0023 on piece_word, 0024-0027 on piece_word.lexemes, 0028-0032 on
    word_fold_head). 0033 is the oldest that works as it is, but it comes after the revisions
    that rewrite or derive stored rows: 0003 (scope numbers, model keys, fact content keys with
    duplicates removed), 0005 (turn metadata), 0024 (the words copied into piece_word), 0025
    (stripped) and 0028 (as lexemes). So the database is brought to 0001 with the re-runnable
    set withheld: 0001's tables as its run-once file made them (that revision's functions are
    not in this checkout), filled directly with SQL as 0001's write path stored rows (its
    generated piece.tsv included); then it is upgraded to head as `pgmem migrate` does, the
    re-runnable set applied once at the end. Not covered here: 0036's samples of existing word
    folds (no fold exists before 0033)."""
    from pgmem import sqlfiles

    with scratch_database(admin_conn, "old_data") as url:
        with monkeypatch.context() as m:
            m.setattr(sqlfiles, "idempotent_files", lambda: [])
            upgrade(url, OLD_REVISION, params=PARAMS)
        assert _version(url) == [(OLD_REVISION,)]
        _write_old_data(url)
        with psycopg.connect(url) as c:
            found = c.execute(
                """SELECT table_name::text, array_agg(column_name::text ORDER BY ordinal_position)
                     FROM information_schema.columns
                    WHERE table_schema = 'pgmem' AND table_name <> 'alembic_version' AND column_name <> 'tsv'
                    GROUP BY table_name"""
            ).fetchall()
            old_columns = {str(t): [str(n) for n in names] for t, names in found}
            old_words = {
                int(str(p)): str(w)
                for p, w in c.execute("SELECT piece_id, array_to_string(tsvector_to_array(tsv), ' ') FROM pgmem.piece")
            }
        assert set(old_columns) >= {"scope", "thread", "turn", "piece", "fact", "document", "chunk", "recall_log"}
        before = _table_rows(url, old_columns)
        assert len(before["piece"]) == 6 and len(before["fact"]) == 4 and len(before["recall_log"]) == 1

        upgrade(url, params=PARAMS)
        assert _version(url) == [(head_revision(),)]

        # Every row is still there with the same values, but the later of the two equal facts:
        # 0003 keeps the oldest of a content.
        after = _table_rows(url, old_columns)
        id_at, body_at = old_columns["fact"].index("fact_id"), old_columns["fact"].index("body")
        twins = sorted(int(str(r[id_at])) for r in before["fact"] if "zeppelin" in str(r[body_at]))
        assert len(twins) == 2
        kept = [r for r in before.pop("fact") if r[id_at] != str(twins[1])]
        assert sorted(int(str(r[id_at])) for r in after["fact"]) == sorted(int(str(r[id_at])) for r in kept)
        assert after.pop("fact") == kept
        assert after == before

        with psycopg.connect(url) as c:
            # What 0003 derives: each scope's number, on its pieces and facts; the facts' content key
            # as add_facts computes it.
            assert c.execute("""SELECT count(*), count(DISTINCT s.scope_no) FROM pgmem.scope s""").fetchone() == (2, 2)
            for table in ("piece", "fact"):
                wrong = c.execute(
                    sql.SQL(
                        "SELECT count(*) FROM {} x JOIN pgmem.scope s USING (scope_id) WHERE x.scope_no <> s.scope_no"
                    ).format(sql.Identifier("pgmem", table))
                ).fetchone()
                assert wrong == (0,), table
            assert c.execute(
                """SELECT count(*) FILTER (WHERE content_hash = pgmem._fact_hash(thread_id, turn_index, section, body)),
                          count(*) FROM pgmem.fact"""
            ).fetchone() == (3, 3)
            assert c.execute("SELECT DISTINCT metadata FROM pgmem.turn").fetchall() == [({},)]
            # What 0024, 0025 and 0028 derive: one row of words a piece, what the insert trigger
            # (pgmem._piece_words) writes for a new piece, and the lexemes 0001's tsv held.
            words = c.execute(
                """SELECT p.piece_id, w.scope_no = p.scope_no AND w.kind = p.kind
                                       AND w.thread_id IS NOT DISTINCT FROM p.thread_id,
                          w.lexemes, pgmem.piece_lexemes(p.label, p.body)
                     FROM pgmem.piece p LEFT JOIN pgmem.piece_word w USING (scope_id, piece_id)"""
            ).fetchall()
            assert len(words) == 6 and c.execute("SELECT count(*) FROM pgmem.piece_word").fetchone() == (6,)
            for piece_id, same_keys, lexemes, expected in words:
                assert same_keys is True and lexemes == expected == old_words[piece_id], piece_id
            zeppelin_ids = [
                int(r[0])
                for r in c.execute(
                    "SELECT piece_id FROM pgmem.piece WHERE body LIKE '%zeppelin%' ORDER BY piece_id"
                ).fetchall()
            ]

        # The public functions on the upgraded rows, as a service calls them.
        ensure_login_roles(admin_conn)
        with connect(role_url(url, APP_LOGIN)) as app:

            def recall(scope: str, text: str) -> list[tuple[int, int | None]]:
                with scoped(app, scope):
                    rows = app.execute(
                        """SELECT piece_id, word_rank FROM pgmem.memory_recall(%s, ARRAY[%s::vector],
                                  part_texts => ARRAY[%s], x => 10, floor => -1, mode => 'hybrid')""",
                        (scope, _vec("unrelated"), text),
                    ).fetchall()
                return [(int(str(p)), None if w is None else int(str(w))) for p, w in rows]

            words_found = {p for p, w in recall("alpha", "zeppelin") if w is not None}
            assert words_found == set(zeppelin_ids)
            assert [w for _, w in recall("alpha", "marzipan")] == [None] * 4  # beta's word, not alpha's
            assert any(w is not None for _, w in recall("beta", "marzipan"))
            with scoped(app, "alpha"):
                docs = app.execute(
                    """SELECT document_id FROM pgmem.document_search('alpha', ARRAY[%s::vector],
                              part_texts => ARRAY['bracken'], floor => -1, mode => 'hybrid')""",
                    (_vec("unrelated"),),
                ).fetchall()
            assert docs == [("notes/ferns.md",)]
            # A turn written at head into an upgraded thread: its model key is the stored one,
            # its words written by the trigger.
            report = ingest_turns(app, [make_turn("alpha", "pets", 1, "The narwhal tusk is a tooth.")], HashEmbedder())
            assert report.inserted == 1
            assert {p for p, w in recall("alpha", "narwhal") if w is not None} != set()

            gone = forget_turn(app, "alpha", "trip", 1)
            assert (gone.turns, gone.pieces, gone.facts, gone.recall_logs) == (1, 2, 1, 1)
            assert not {p for p, w in recall("alpha", "zeppelin") if w is not None}
        with psycopg.connect(url) as c:
            assert c.execute(
                "SELECT count(*) FROM pgmem.piece_word WHERE piece_id = ANY(%s)", (zeppelin_ids,)
            ).fetchone() == (0,)
            assert c.execute("SELECT count(*) FROM pgmem.piece_word").fetchone() == (5,)  # 6 - 2 + narwhal's
            models = c.execute("SELECT model_key FROM pgmem.embedding_model").fetchall()
            assert len(models) == 1 and c.execute("SELECT DISTINCT model_key FROM pgmem.piece").fetchall() == models
            assert c.execute(
                "SELECT count(*) FROM pgmem.piece p JOIN pgmem.piece_word w USING (scope_id, piece_id)"
                " WHERE w.lexemes <> pgmem.piece_lexemes(p.label, p.body)"
            ).fetchone() == (0,)
