"""`pgmem store import` and `import_postgres_store` (issue 28 item 7): a real LangGraph
PostgresStore fills its own database on the test server, and the import copies its items into a
PgmemStore connected as the application login, embedding them with the local model."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

pytest.importorskip("langgraph.store.postgres", reason="the [langgraph] extra is not installed")

from langgraph.store.postgres import PostgresStore

from pgmem import forget_scope, forget_thread
from pgmem.db import connect
from pgmem.embedders.base import Embedder
from pgmem.errors import ConfigError, DatabaseError, ModelRefusedError
from pgmem.integrations.langgraph import PgmemStore, field_texts, item_thread, text_hash
from pgmem.integrations.langgraph_import import ImportReport, import_postgres_store
from tests.helpers import CountingEmbedder

Conn = psycopg.Connection[tuple[object, ...]]
REPO = Path(__file__).resolve().parent.parent

#: The source's items: (namespace, key, value). Texts distinct enough for search to tell apart.
_BULK: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("bulk", f"b{i % 3}"), f"item-{i:03d}", {"text": f"Bulk note number {i} about topic {i % 5}."}) for i in range(18)
]
ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "u1"), "pets", {"text": "Luna the dog hates baths and loves the beach."}),
    (("users", "u1"), "food", {"text": "Allergic to peanuts; prefers Thai curry.", "stars": 4}),
    (("users", "u1"), "work", {"text": "Works night shifts at the harbour as a crane operator."}),
    (("users", "u2"), "pets", {"text": "Has two cats called Miso and Tofu."}),
    (("users", "u2"), "car", {"text": "Drives an old red Volvo estate with a roof box."}),
    (("users", "u2", "trips"), "2026", {"text": "Planning a ferry trip to Orkney in June.", "tags": ["sea", "June"]}),
    (("docs",), "readme", {"title": "Setup", "body": "Run make demo to start the embedded server."}),
    *_BULK,
]


def _source_db(admin_conn: Conn, db_url: str, suffix: str, *options: str) -> Iterator[str]:
    name = f"{admin_conn.info.dbname}_{suffix}"
    admin_conn.execute(sql.SQL("CREATE DATABASE {} " + " ".join(options)).format(sql.Identifier(name)))
    try:
        yield psycopg.conninfo.make_conninfo(db_url, dbname=name)
    finally:
        admin_conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def source_url(admin_conn: Conn, db_url: str) -> Iterator[str]:
    """A database of its own holding a LangGraph PostgresStore, filled through PostgresStore."""
    for url in _source_db(admin_conn, db_url, "lgsrc"):
        with PostgresStore.from_conn_string(url) as lg:
            lg.setup()
            for ns, key, value in ITEMS:
                lg.put(ns, key, value)
        yield url


@pytest.fixture
def store(conn: Conn, embedder: Embedder) -> PgmemStore:
    return PgmemStore(conn, embedder=embedder)


def _pgmem_items(store: PgmemStore) -> dict[tuple[tuple[str, ...], str], dict[str, Any]]:
    out = {}
    for ns in store.list_namespaces(limit=1000):
        for it in store.search(ns, limit=1000):
            if it.namespace == ns:
                out[(it.namespace, it.key)] = it.value
    return out


def _source_sql(url: str, query: str, params: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(query, params)


def test_import_copies_every_item_and_search_finds_them(
    source_url: str, conn: Conn, admin_conn: Conn, embedder: Embedder
) -> None:
    with PostgresStore.from_conn_string(source_url, ttl={"default_ttl": 60}) as lg:
        lg.put(("users", "u1"), "session", {"text": "Temporary session note."}, ttl=90)
        lg.put(("users", "u1"), "gone", {"text": "An expired note."}, ttl=1)
    _source_sql(source_url, "UPDATE store SET expires_at = now() - interval '1 minute' WHERE key = 'gone'")
    counting = CountingEmbedder(embedder)
    store = PgmemStore(conn, embedder=counting)
    seen: list[tuple[int, int]] = []
    report = import_postgres_store(source_url, store, page_size=4, progress=lambda r: seen.append((r.read, r.total)))
    n = len(ITEMS) + 1  # and the session note; the expired one is not copied
    assert (report.read, report.imported, report.unchanged, report.kept, report.expired) == (n + 1, n, 0, 0, 1)
    assert report.failed == [] and report.complete and report.total == n + 1
    assert seen[0] == (4, n + 1) and seen[-1][0] == n + 1 and len(seen) == -(-(n + 1) // 4)

    copied = _pgmem_items(store)
    assert copied == {(ns, k): v for ns, k, v in ITEMS} | {
        (("users", "u1"), "session"): {"text": "Temporary session note."}
    }
    assert counting.calls > 0
    ttl = admin_conn.execute(
        "SELECT ttl_minutes, expires_at > now() + interval '80 minutes' FROM pgmem.store_item"
        " WHERE item_key = 'session'"
    ).fetchone()
    assert ttl == (90, True)  # the item's TTL, counted from the import

    hits = store.search(("users",), query="Which pet is afraid of bathing?", limit=3)
    assert (hits[0].namespace, hits[0].key) == (("users", "u1"), "pets")
    hits = store.search(("users", "u2"), query="ferry to the islands", limit=1)
    assert hits[0].key == "2026"

    # A second run writes and embeds nothing.
    calls = counting.calls
    again = import_postgres_store(source_url, store)
    assert (again.read, again.imported, again.unchanged, again.expired, again.failed) == (n + 1, 0, n, 1, [])
    assert counting.calls == calls


def test_a_postgres_store_or_its_pool_can_be_the_source(source_url: str, store: PgmemStore) -> None:
    with PostgresStore.from_conn_string(source_url) as lg:
        assert import_postgres_store(lg, store, limit=5).imported == 5
        # PostgresStore's connection has dict rows and stays usable after the import.
        assert lg.get(("docs",), "readme") is not None
    with PostgresStore.from_conn_string(source_url, pool_config={"max_size": 2}) as lg:
        report = import_postgres_store(lg, store)
    assert (report.imported, report.unchanged) == (len(ITEMS) - 5, 5)


def test_an_interrupted_import_resumes_from_its_checkpoint(source_url: str, store: PgmemStore, tmp_path: Path) -> None:
    ckpt = tmp_path / "import.ckpt"
    first = import_postgres_store(source_url, store, page_size=3, limit=7, checkpoint=ckpt)
    assert (first.read, first.imported, first.complete) == (7, 7, False)
    saved = json.loads(ckpt.read_text())
    assert saved["table"] == "public.store" and len(saved["after"]) == 2
    assert len(_pgmem_items(store)) == 7

    # A run killed after writing its second page, before recording it: the rerun reads that
    # page again and finds it unchanged.
    import pgmem.integrations.langgraph_import as imp

    record = imp._write_checkpoint
    calls: list[int] = []

    def killed(*args: Any) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        record(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(imp, "_write_checkpoint", killed)
        with pytest.raises(KeyboardInterrupt):
            import_postgres_store(source_url, store, page_size=3, checkpoint=ckpt)
    assert len(_pgmem_items(store)) == 7 + 6

    rest = import_postgres_store(source_url, store, page_size=3, checkpoint=ckpt)
    assert rest.complete and not ckpt.exists()
    assert (rest.read, rest.unchanged, rest.imported) == (len(ITEMS) - 10, 3, len(ITEMS) - 13)
    assert _pgmem_items(store) == {(ns, k): v for ns, k, v in ITEMS}

    # Without a checkpoint, a rerun after the same kill passes over what is already there.
    again = import_postgres_store(source_url, store)
    assert (again.read, again.unchanged, again.imported) == (len(ITEMS), len(ITEMS), 0)


def test_a_newer_value_in_pgmem_is_kept_and_a_source_change_is_copied(source_url: str, store: PgmemStore) -> None:
    import_postgres_store(source_url, store)
    store.put(("users", "u1"), "pets", {"text": "Luna now loves baths."})  # the application, after the import
    with PostgresStore.from_conn_string(source_url) as lg:
        lg.put(("users", "u2"), "car", {"text": "Sold the Volvo; rides a bike now."})  # the source, after it too
    report = import_postgres_store(source_url, store)
    assert (report.kept, report.imported, report.unchanged) == (1, 1, len(ITEMS) - 2)
    items = _pgmem_items(store)
    assert items[(("users", "u1"), "pets")] == {"text": "Luna now loves baths."}
    assert items[(("users", "u2"), "car")] == {"text": "Sold the Volvo; rides a bike now."}


@pytest.mark.parametrize("indexed", ["pieces", "own embed"])
def test_an_application_put_between_the_imports_read_and_write_is_kept(
    source_url: str, conn: Conn, admin_conn: Conn, app_url: str, embedder: Embedder, indexed: str
) -> None:
    """The application writes a key of the page after the import read it (absent, so the
    import decided to write the source's copy) and before the import's write: the import keeps
    the application's value, its turn or its field vectors, and counts it kept (a lost update
    before put_item's unless_newer_than)."""
    own = {"dims": embedder.dims, "embed": lambda texts: embedder.embed(list(texts)).tolist()}
    kw: dict[str, Any] = {"index": own} if indexed == "own embed" else {"embedder": embedder}
    store = PgmemStore(conn, **kw)
    read = store.batch
    raced: list[str] = []

    def batch_then_app_writes(ops: Any) -> Any:
        out = read(ops)
        if not raced and any((tuple(op.namespace), op.key) == (("users", "u1"), "pets") for op in ops):
            with connect(app_url) as c:  # another connection: committed before the import writes
                app = PgmemStore(c, **kw)
                app.put(("users", "u1"), "pets", {"text": "Luna swims in the lake now."})
            raced.append("pets")
        return out

    store.batch = batch_then_app_writes  # type: ignore[method-assign]
    report = import_postgres_store(source_url, store)
    assert raced == ["pets"]
    assert (report.imported, report.kept, report.failed) == (len(ITEMS) - 1, 1, [])
    assert _pgmem_items(store)[(("users", "u1"), "pets")] == {"text": "Luna swims in the lake now."}
    hits = store.search(("users", "u1"), query="Where does Luna swim?", limit=1)
    assert [(h.key, h.value) for h in hits] == [("pets", {"text": "Luna swims in the lake now."})]
    # What search reads is the application's too: the source's turn or field vectors are not
    # written for the put kept (both are about Luna, so the search above ranks "pets" first either way).
    if indexed == "own embed":
        stored = admin_conn.execute(
            "SELECT array_agg(text_hash ORDER BY field_no) FROM pgmem.store_vector"
            " WHERE scope_id = 'users/u1' AND item_key = 'pets'"
        ).fetchone()
        texts = field_texts({"text": "Luna swims in the lake now."}, store.fields)
        assert texts and stored == ([text_hash(t) for _, t in texts],)
    else:
        bodies = [
            str(r[0])
            for r in admin_conn.execute(
                "SELECT body FROM pgmem.piece WHERE scope_id = 'users/u1' AND thread_id = 'item:pets'"
            )
        ]
        assert bodies and all("baths" not in b and "lake" in b for b in bodies), bodies


def test_a_conditional_put_item_keeps_what_is_newer_and_writes_the_rest(conn: Conn, admin_conn: Conn) -> None:
    """put_item's unless_newer_than in SQL, as the application login: an item updated after
    the time is kept (written false, value unchanged); an older one, an absent one and one
    expired before the time are written (one that expired after it is not: an expiry is a delete
    at expires_at, 0092); NULL is an ordinary put."""

    def put(key: str, value: str, since: str | None, ttl: float | None = None) -> bool:
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
            conn.execute("SELECT set_config('pgmem.scope', pgmem.store_scope(%s), true)", (["cond"],))
            row = conn.execute(
                "SELECT written FROM pgmem.put_item(pgmem.store_scope(%s), %s, %s, jsonb_build_object('v', %s::text),"
                " ttl_minutes => %s, unless_newer_than => %s::timestamptz)",
                (["cond"], ["cond"], key, value, ttl, since),
            ).fetchone()
        assert row is not None
        return bool(row[0])

    def value(key: str) -> object:
        row = admin_conn.execute(
            "SELECT value->>'v' FROM pgmem.store_item WHERE scope_id = pgmem.store_scope(%s) AND item_key = %s",
            (["cond"], key),
        ).fetchone()
        return row[0] if row else None

    assert put("k", "first", None)
    assert not put("k", "older", "2000-01-01") and value("k") == "first"
    assert put("k", "newer", "2999-01-01") and value("k") == "newer"
    assert put("absent", "new", "2000-01-01") and value("absent") == "new"
    assert put("short", "lived", None, ttl=1)
    assert not put("short", "kept", "2000-01-01") and value("short") == "lived"
    admin_conn.execute(  # expired, not yet swept
        "UPDATE pgmem.store_item SET expires_at = now() - interval '1 minute' "
        "WHERE scope_id = pgmem.store_scope(%s) AND item_key = 'short'",
        (["cond"],),
    )
    # An expiry is a delete at expires_at (0092): a copy older than it is not written, one
    # newer is (before 0092 the 2000 copy was written over the expired row).
    assert not put("short", "again", "2000-01-01") and value("short") == "lived"
    assert put("short", "again", "infinity") and value("short") == "again"
    assert put("k", "plain", None) and value("k") == "plain"
    assert not put("k", "oldest", "-infinity") and put("k", "latest", "infinity") and value("k") == "latest"
    with conn.transaction():  # deleted: a put older than the delete writes nothing, a later one does
        conn.execute("SELECT set_config('pgmem.scope', pgmem.store_scope(%s), true)", (["cond"],))
        conn.execute("SELECT pgmem.delete_item(pgmem.store_scope(%s), 'k')", (["cond"],))
    assert not put("k", "stale", "-infinity") and not put("k", "stale", "2000-01-01") and value("k") is None
    assert put("k", "fresh", "infinity") and value("k") == "fresh"


#: Items a PostgresStore table can hold that PgmemStore cannot store: (prefix, key, value as
#: JSON text, what the report says). Written by SQL, as another writer or an older version might.
HOSTILE: list[tuple[str, str, str, str]] = [
    ("bad", "list", "[1, 2]", "value must be a JSON object"),
    ("bad", "huge-number", '{"n": 1' + "0" * 400 + ".5}", "JSON has no NaN or infinity"),  # a float: inf
    ("bad", "long-int", '{"n": ' + "9" * 5000 + "}", "not JSON"),
    ("bad", "deep", '{"a": ' * 100 + "1" + "}" * 100, "nests deeper than"),
    # Deeper than Python's parser recurses: a RecursionError stopped the import with a traceback.
    ("bad", "very-deep", '{"a": ' * 3000 + "1" + "}" * 3000, "nested too deeply"),
    ("bad", "too-large", json.dumps({"text": "x" * 4_100_000}), "at most 4,000,000"),
    ("bad..empty-label", "k", '{"text": "empty label"}', "is empty"),
    ("long." + "n" * 250, "k", '{"text": "long namespace"}', "at most 200"),
    ("bad", "k" * 1500, '{"text": "long key"}', "at most 1000"),
]


@pytest.mark.long
def test_hostile_items_are_reported_with_their_key_and_the_rest_imported(
    source_url: str, store: PgmemStore, app_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(source_url, autocommit=True) as c:
        for prefix, key, value, _ in HOSTILE:
            c.execute("INSERT INTO store (prefix, key, value) VALUES (%s, %s, %s::jsonb)", (prefix, key, value))
    report = import_postgres_store(source_url, store, page_size=5)
    assert report.imported == len(ITEMS) and report.read == len(ITEMS) + len(HOSTILE)
    failed = {(tuple(ns), key): error for ns, key, error in report.failed}
    assert len(failed) == len(HOSTILE)
    for prefix, key, _, expected in HOSTILE:
        error = failed[(tuple(prefix.split(".")), key)]
        assert expected in error and "\n" not in error, (prefix, key[:20], error)
    assert _pgmem_items(store) == {(ns, k): v for ns, k, v in ITEMS}

    # The CLI: the same report, one line per failed item on stderr, and exit status 1.
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pgmem", "store", "import", source_url, "--page-size", "7"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.strip() == (
        f"read {len(ITEMS) + len(HOSTILE)} · imported 0 · unchanged {len(ITEMS)} · kept 0 (newer in pgmem) · "
        f"deleted 0 (in pgmem since) · expired 0 · failed {len(HOSTILE)}"
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("pgmem: failed: ")]
    assert len(lines) == len(HOSTILE) and all(len(line) < 700 for line in lines)
    assert "Traceback" not in done.stderr and "import [" in done.stderr  # and the progress bar


def test_a_value_column_of_text_or_json_giving_a_key_twice_is_reported(source_url: str, store: PgmemStore) -> None:
    """A source whose value column is json or text (not PostgresStore's jsonb) can hold an object
    giving a key twice: json.loads kept the last value silently, and the item was imported
    altered. It is reported now, as a turn's line giving a key twice is; so are NaN and a value
    nested deeper than Python's parser goes, and the other items are imported."""
    rows = [
        ("ns", "twice", '{"text": "first", "text": "second"}'),
        ("ns", "twice-inside", '{"a": {"b": 1, "b": 2}}'),
        ("ns", "nan", '{"n": NaN}'),
        ("ns", "very-deep", "[" * 5000 + "]" * 5000),
        ("ns", "fine", '{"text": "a fine value"}'),
    ]
    for column in ("text", "json"):
        table = f"value_{column}"
        _source_sql(source_url, f"CREATE TABLE {table} (prefix text, key text, value {column}, updated_at timestamptz)")
        with psycopg.connect(source_url, autocommit=True) as c:
            for prefix, key, value in rows:
                if column == "json" and key == "nan":
                    continue  # json refuses NaN itself
                c.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, now())", (prefix, key, value))
        report = import_postgres_store(source_url, store, table=table)
        failed = {key: error for _, key, error in report.failed}
        assert set(failed) == {"twice", "twice-inside", "very-deep"} | ({"nan"} if column == "text" else set()), failed
        assert "gives the key 'text' twice" in failed["twice"] and "'b' twice" in failed["twice-inside"]
        assert "nested too deeply" in failed["very-deep"]
        assert all("\n" not in e for e in failed.values())
    assert store.get(("ns",), "fine") is not None and store.get(("ns",), "twice") is None


def test_text_that_is_not_utf8_is_reported_and_resumes_over_bytes(
    admin_conn: Conn, db_url: str, store: PgmemStore, tmp_path: Path
) -> None:
    """A SQL_ASCII database stores any bytes; psycopg hands its text over as bytes."""
    for url in _source_db(
        admin_conn, db_url, "ascii", "ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
    ):
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(
                "CREATE TABLE store (prefix text NOT NULL, key text NOT NULL, value jsonb NOT NULL,"
                " created_at timestamptz DEFAULT now(), updated_at timestamptz DEFAULT now(),"
                " PRIMARY KEY (prefix, key))"
            )
            rows = [
                (b"notes", b"caf\xc3\xa9", '{"text": "Caf\u00e9 au lait every morning."}'.encode()),
                (b"notes", b"bad-value", b'{"text": "broken \xff byte"}'),
                (b"notes", b"surrogate-\xed\xa0\x80", b'{"text": "a CESU-8 surrogate in the key"}'),
                (b"notes", b"zebra", b'{"text": "Zebras at the zoo."}'),
            ]
            for p, k, v in rows:
                c.execute(
                    "INSERT INTO store (prefix, key, value) VALUES (convert_from(%s, 'SQL_ASCII'),"
                    " convert_from(%s, 'SQL_ASCII'), convert_from(%s, 'SQL_ASCII')::jsonb)",
                    (p, k, v),
                )
        ckpt = tmp_path / "ascii.ckpt"
        first = import_postgres_store(url, store, page_size=1, limit=2, checkpoint=ckpt)
        assert first.read == 2 and json.loads(ckpt.read_text())["bytes"] is True
        rest = import_postgres_store(url, store, page_size=1, checkpoint=ckpt)
        assert rest.complete and first.read + rest.read == 4
        failed = first.failed + rest.failed
        assert sorted(k for _, k, _ in failed) == ["bad-value", "surrogate-\udced\udca0\udc80"]
        assert all("not valid UTF-8" in e for _, _, e in failed)
        assert _pgmem_items(store) == {
            (("notes",), "café"): {"text": "Café au lait every morning."},
            (("notes",), "zebra"): {"text": "Zebras at the zoo."},
        }


def test_two_imports_and_a_writer_at_once_lose_nothing(source_url: str, app_url: str, embedder: Embedder) -> None:
    """Two imports of the same source and an application writing the same namespaces, each on
    its own connection as the app login: every source item and every write is there after, and
    each item was written once."""
    errors: list[BaseException] = []
    reports: list[ImportReport] = []
    written: dict[tuple[tuple[str, ...], str], dict[str, Any]] = {}

    def importer() -> None:
        with connect(app_url) as c:
            try:
                reports.append(import_postgres_store(source_url, PgmemStore(c, embedder=embedder), page_size=4))
            except BaseException as exc:
                errors.append(exc)

    def writer() -> None:
        with connect(app_url) as c:
            s = PgmemStore(c, embedder=embedder)
            try:
                for i in range(12):
                    ns = ("users", "u1") if i % 2 else ("bulk", f"b{i % 3}")
                    value = {"text": f"The application's own note {i}."}
                    s.put(ns, f"app-{i}", value)
                    written[(ns, f"app-{i}")] = value
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=f) for f in (importer, importer, writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert len(reports) == 2 and all(r.failed == [] and r.read == len(ITEMS) for r in reports)
    assert all(r.imported + r.unchanged + r.kept == len(ITEMS) for r in reports)
    # Each item is written by one import: the other finds it unchanged, or, when it read the
    # item before the first's write committed, keeps it (a conditional put, never a second write).
    assert sum(r.imported for r in reports) == len(ITEMS)
    with connect(app_url) as c:
        items = _pgmem_items(PgmemStore(c, embedder=embedder))
    assert items == {(ns, k): v for ns, k, v in ITEMS} | written


@pytest.mark.long
def test_bad_sources_and_options_are_one_line(source_url: str, store: PgmemStore, app_url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no table 'nope'"):
        import_postgres_store(source_url, store, table="nope")
    for table in (None, "", "nul\x00", "lone\udcff"):
        with pytest.raises(ConfigError, match="table must be"):
            import_postgres_store(source_url, store, table=table)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="page_size"):
        import_postgres_store(source_url, store, page_size=0)
    for conninfo in ("nul\x00", "lone\udcff", "host=/nonexistent dbname=x"):
        with pytest.raises(ConfigError, match="cannot connect to the source"):
            import_postgres_store(conninfo, store)
    with pytest.raises(ConfigError, match="source must be"):
        import_postgres_store(42, store)
    with pytest.raises(ConfigError, match="directory does not exist"):
        import_postgres_store(source_url, store, checkpoint=tmp_path / "nowhere" / "x.ckpt")
    with pytest.raises(ConfigError, match="no table"):
        import_postgres_store(source_url, store, table="a b;c")
    # The source refusing a read is one line, with its SQLSTATE.
    _source_sql(
        source_url,
        "CREATE VIEW broken AS SELECT 'p'::text AS prefix, ('k' || 1 / (random() * 0)::int)::text AS key,"
        " '{}'::jsonb AS value, now() AS updated_at",
    )
    with pytest.raises(DatabaseError, match="division by zero"):
        import_postgres_store(source_url, store, table="broken")
    bad = tmp_path / "bad.ckpt"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not an import checkpoint"):
        import_postgres_store(source_url, store, checkpoint=bad)
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path)}
    for args, expected in [
        ([source_url, "--table", "public.nope"], "no table 'public.nope'"),
        (["postgresql://nobody@/nowhere?host=/nonexistent"], "cannot connect to the source"),
        ([source_url, "--field", ""], "index fields"),
        ([source_url, "--page-size", "0"], "page_size must be"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "pgmem", "store", "import", *args], env=env, cwd=REPO, capture_output=True, text=True
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr


def test_a_checkpoint_file_that_is_not_one_is_refused_and_kept(
    source_url: str, store: PgmemStore, tmp_path: Path
) -> None:
    """A checkpoint file that is no import checkpoint is a ConfigError of one line, the file is
    left as it is and nothing is imported. Before: a FIFO waited forever for a writer; `after`
    holding numbers with `bytes` raised AttributeError, nesting too deep a RecursionError, NUL
    a psycopg DataError; `after` of two nulls read nothing, called the import complete and removed
    the file; a string of two characters was read as a prefix and a key."""
    good: dict[str, Any] = {"table": "public.store", "after": ["docs", "readme"], "bytes": False}
    bad: dict[str, str] = {
        "numbers-as-bytes": json.dumps({**good, "after": [1, 2], "bytes": True}),
        "numbers": json.dumps({**good, "after": [1, 2]}),
        "nulls": json.dumps({**good, "after": [None, None]}),
        "a-string": json.dumps({**good, "after": "ab"}),
        "three": json.dumps({**good, "after": ["a", "b", "c"]}),
        "nul": json.dumps({**good, "after": ["a\x00", "b"]}),
        "bytes-not-bool": json.dumps({**good, "bytes": "no"}),
        "table-not-text": json.dumps({**good, "table": ["public.store"]}),
        "a-list": json.dumps([good]),
        "deep": "[" * 100_000 + "]" * 100_000,
    }
    for name, text in bad.items():
        path = tmp_path / f"{name}.ckpt"
        path.write_text(text)
        with pytest.raises(ConfigError, match="is not an import checkpoint") as refused:
            import_postgres_store(source_url, store, checkpoint=path)
        assert "\n" not in str(refused.value) and path.read_text() == text, name
    fifo = tmp_path / "fifo.ckpt"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.ckpt"
    folder.mkdir()
    for path in (fifo, folder):
        with pytest.raises(ConfigError, match="not a regular file"):
            import_postgres_store(source_url, store, checkpoint=path)
    assert _pgmem_items(store) == {}


def test_a_null_value_a_null_column_and_a_naive_time_in_the_source(source_url: str, store: PgmemStore) -> None:
    """A source row whose value is JSON null used to become PutOp(value=None), a delete: the item
    pgmem held went, counted as imported. A NULL value, prefix or key raised AttributeError and
    stopped the import; a source table whose updated_at has no time zone raised TypeError when
    compared with pgmem's. Now each such row is reported as failed, the rest imported, and a
    naive time is read as UTC."""
    store.put(("users", "alice"), "profile", {"name": "Alice"})
    later = "now() + interval '1 hour'"
    odd = "(prefix text, key text, value jsonb, created_at {t} DEFAULT now(), updated_at {t} DEFAULT now(),"
    odd += " expires_at {t}, ttl_minutes float)"
    with psycopg.connect(source_url, autocommit=True) as c:
        c.execute(
            f"INSERT INTO store (prefix, key, value, updated_at) VALUES ('users.alice', 'profile', 'null', {later})"
        )
        c.execute("INSERT INTO store (prefix, key, value) VALUES ('users.carol', 'k', '{\"ok\": true}')")
        c.execute("CREATE TABLE store_nulls " + odd.format(t="timestamptz"))
        c.execute(
            "INSERT INTO store_nulls (prefix, key, value) VALUES ('users.bob', 'k', NULL), (NULL, 'k', '{}'),"
            " ('users.dan', NULL, '{}'), ('users.erin', 'k', '{\"ok\": 1}')"
        )
        c.execute("CREATE TABLE store_naive " + odd.format(t="timestamp"))
        c.execute(
            "INSERT INTO store_naive (prefix, key, value, updated_at)"
            " VALUES ('users.alice', 'profile', '{\"name\": \"v3\"}', '2000-01-01')"
        )
    report = import_postgres_store(source_url, store)
    assert report.imported == len(ITEMS) + 1 and store.get(("users", "carol"), "k") is not None
    (failed,) = report.failed
    assert failed[:2] == (("users", "alice"), "profile") and "value must be a JSON object, got null" in failed[2]
    item = store.get(("users", "alice"), "profile")
    assert item is not None and item.value == {"name": "Alice"}  # not deleted
    nulls = import_postgres_store(source_url, store, table="store_nulls")
    assert nulls.imported == 1 and store.get(("users", "erin"), "k") is not None
    assert sorted(error.split(" is NULL")[0] for _, _, error in nulls.failed) == ["key", "namespace", "value"]
    naive = import_postgres_store(source_url, store, table="store_naive")
    assert (naive.kept, naive.failed) == (1, [])  # pgmem's is newer than 2000-01-01 UTC


_SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    "source",
    [
        f"postgresql://u:{_SECRET}%zz@localhost/db",  # libpq quotes a percent-escape it cannot decode
        f"postgresql://u:{_SECRET} x@localhost/db",  # and a token with spaces
        f"host=/nowhere password={_SECRET}%zz dbname=x junk",
        f"postgresql://u:{_SECRET}@[::1/db",
    ],
)
def test_a_source_password_is_never_printed(source: str, store: PgmemStore, app_url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot connect to the source") as caught:
        import_postgres_store(source, store)
    assert _SECRET not in str(caught.value) and "\n" not in str(caught.value)
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pgmem", "store", "import", source], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 2 and "cannot connect to the source" in done.stderr, done.stderr
    assert _SECRET not in done.stdout + done.stderr


def test_a_source_column_of_another_type_is_one_line(source_url: str, store: PgmemStore) -> None:
    """A table with PostgresStore's column names but other types (an integer prefix, a text
    updated_at, a date, a text ttl_minutes) raised AttributeError or ValueError midway: now it
    is refused before anything is read, naming the column and its type."""
    shapes = [
        ("prefix", "prefix int, key text, value jsonb, updated_at timestamptz"),
        ("key", "prefix text, key text[], value jsonb, updated_at timestamptz"),
        ("updated_at", "prefix text, key text, value jsonb, updated_at text"),
        ("updated_at", "prefix text, key text, value jsonb, updated_at date"),
        ("ttl_minutes", "prefix text, key text, value jsonb, updated_at timestamptz, ttl_minutes text"),
        ("expires_at", "prefix text, key text, value jsonb, updated_at timestamptz, expires_at int"),
    ]
    for i, (_, shape) in enumerate(shapes):
        _source_sql(source_url, f"CREATE TABLE odd_{i} ({shape})")
        _source_sql(source_url, f"INSERT INTO odd_{i} VALUES ('1', '{{1}}', '{{\"x\": 1}}', '2020-01-01')")
    for i, (column, _) in enumerate(shapes):
        with pytest.raises(ConfigError, match=f"is not a PostgresStore table: column {column} is ") as caught:
            import_postgres_store(source_url, store, table=f"odd_{i}")
        assert "\n" not in str(caught.value)
    assert store.list_namespaces() == []


def test_rows_with_a_null_prefix_or_key_are_reported_whatever_the_page(
    source_url: str, store: PgmemStore, tmp_path: Path
) -> None:
    """Keyset pages compare (prefix, key): a row whose prefix was NULL sorted last and was never
    read once a page had ended before it (not imported, not reported: read < total), and a page
    ending on a NULL key wrote the checkpoint's key as the text "None"."""
    _source_sql(source_url, "CREATE TABLE loose (prefix text, key text, value jsonb, updated_at timestamptz)")
    _source_sql(
        source_url,
        "INSERT INTO loose VALUES ('p1', 'k', '{\"a\": 1}', now()), ('p2', NULL, '{\"a\": 2}', now()),"
        " ('p3', 'k', '{\"a\": 3}', now()), (NULL, 'k', '{\"a\": 4}', now()), (NULL, 'j', '{\"a\": 5}', now())",
    )
    for page_size in (1, 2, 100):
        report = import_postgres_store(source_url, store, table="loose", page_size=page_size)
        assert (report.read, report.total, len(report.failed), report.complete) == (5, 5, 3, True), page_size
    ckpt = tmp_path / "loose.ckpt"
    reads = []
    for _ in range(6):
        report = import_postgres_store(source_url, store, table="loose", page_size=1, limit=2, checkpoint=ckpt)
        reads.append(report.read)
        assert not ckpt.exists() or "None" not in ckpt.read_text()
        if report.complete:
            break
    assert sum(reads) == 5 and not ckpt.exists()
    assert _pgmem_items(store) == {(("p1",), "k"): {"a": 1}, (("p3",), "k"): {"a": 3}}


def test_a_checkpoint_of_another_source_database_is_refused(
    source_url: str, admin_conn: Conn, db_url: str, store: PgmemStore, tmp_path: Path
) -> None:
    """The checkpoint named the table (public.store) but not its database: a run on another
    PostgresStore's database given the same file started after the first one's last key and
    skipped every item before it, reporting itself complete."""
    ckpt = tmp_path / "import.ckpt"
    first = import_postgres_store(source_url, store, limit=len(ITEMS) - 2, checkpoint=ckpt)
    assert not first.complete and ckpt.exists()
    for other in _source_db(admin_conn, db_url, "lgsrc2"):
        with PostgresStore.from_conn_string(other) as lg:
            lg.setup()
            lg.put(("aaa",), "first", {"text": "Sorts before every item of the first source."})
        with pytest.raises(ConfigError, match="another database"):
            import_postgres_store(other, store, checkpoint=ckpt)
        assert store.get(("aaa",), "first") is None
    rest = import_postgres_store(source_url, store, checkpoint=ckpt)  # its own source continues
    assert (rest.read, rest.imported, rest.complete) == (2, 2, True)


def test_a_checkpoint_of_an_import_into_another_store_is_refused(
    source_url: str, conn: Conn, embedder: Embedder, store: PgmemStore, tmp_path: Path
) -> None:
    """The checkpoint named the source but not the target: an import of the same source into
    another store (another directory) given the same file started after the first import's last
    key and skipped every item before it, reporting itself complete."""
    ckpt = tmp_path / "import.ckpt"
    first = import_postgres_store(source_url, store, limit=len(ITEMS) - 2, checkpoint=ckpt)
    assert not first.complete and ckpt.exists()
    other = PgmemStore(conn, embedder=embedder, directory="another")
    with pytest.raises(ConfigError, match="into another store"):
        import_postgres_store(source_url, other, checkpoint=ckpt)
    assert other.list_namespaces() == []
    rest = import_postgres_store(source_url, store, checkpoint=ckpt)  # the first store's continues
    assert (rest.read, rest.imported, rest.complete) == (2, 2, True)


def test_an_import_into_a_second_directory_lists_every_namespace(
    source_url: str, conn: Conn, embedder: Embedder, store: PgmemStore
) -> None:
    """Items are stored per namespace, shared by the directories; an import into a second
    directory found them unchanged (or kept, newer in pgmem) and wrote nothing, so their
    namespaces were never listed there: list_namespaces and a search by prefix in the second
    directory missed them. They are recorded now, without writing or embedding the items."""
    import_postgres_store(source_url, store)
    store.put(("docs",), "readme", {"title": "Setup", "body": "Run make up."})  # newer in pgmem: kept
    counting = CountingEmbedder(embedder)
    other = PgmemStore(conn, embedder=counting, directory="tenant-b")
    report = import_postgres_store(source_url, other, page_size=5)
    assert (report.imported, report.unchanged, report.kept, report.failed) == (0, len(ITEMS) - 1, 1, [])
    assert counting.calls == 0
    namespaces = sorted({ns for ns, _, _ in ITEMS})
    assert other.list_namespaces(limit=1000) == namespaces == store.list_namespaces(limit=1000)
    assert [it.key for it in other.search(("docs",))] == ["readme"]
    assert {it.key for it in other.search(("users", "u2"))} == {"pets", "car", "2026"}
    assert import_postgres_store(source_url, other).unchanged == len(ITEMS) - 1  # a rerun: the same

    # Kept under the item's lock (put_item's unless_newer_than): the source changed, and the
    # application wrote the key between the import's read and its write.
    with PostgresStore.from_conn_string(source_url) as lg:
        lg.put(("docs",), "readme", {"title": "Setup", "body": "Run make start."})
    third = PgmemStore(conn, embedder=embedder, directory="tenant-c")
    read = third.batch

    def batch_then_app_writes(ops: Any) -> Any:
        out = read(ops)
        if any((tuple(op.namespace), op.key) == (("docs",), "readme") for op in ops):
            store.put(("docs",), "readme", {"title": "Setup", "body": "Run make run."})
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(third, "batch", batch_then_app_writes)
        report = import_postgres_store(source_url, third)
    assert (report.imported, report.unchanged, report.kept) == (0, len(ITEMS) - 1, 1)
    assert third.list_namespaces(limit=1000) == namespaces


def test_note_store_namespace_lists_only_a_namespace_that_holds_items(
    conn: Conn, admin_conn: Conn, embedder: Embedder
) -> None:
    """pgmem.note_store_namespace as the application login: the namespace of the scope's items
    is listed in the transaction's directory, once; a scope without items lists nothing; a NULL,
    another scope, no directory, another type and a huge scope are refused (or list nothing)
    and nothing stored is lost."""
    ns = ("notes", "a/b")
    PgmemStore(conn, embedder=embedder).put(ns, "k", {"text": "kept"}, index=False)
    scope = "notes/a\\/b"

    def note(arg: object, *, directory: str | None = "tenant-b", scope_setting: str = scope) -> object:
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.store_directory', %s, true)", (directory or "",))
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope_setting,))
            row = conn.execute("SELECT pgmem.note_store_namespace(%s)", (arg,)).fetchone()
        return row[0] if row else None

    other = PgmemStore(conn, embedder=embedder, directory="tenant-b")
    assert other.list_namespaces() == []
    assert note(scope) is True and note(scope) is False
    assert other.list_namespaces() == [ns]
    assert note("empty", scope_setting="empty") is False
    # A scope that exists but holds no item (its one item deleted): nothing to list either.
    PgmemStore(conn, embedder=embedder).put(("gone",), "k", {"text": "gone"}, index=False)
    PgmemStore(conn, embedder=embedder).delete(("gone",), "k")
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope WHERE scope_id = 'gone'").fetchone() == (1,)
    assert note("gone", scope_setting="gone") is False
    assert note("x" * 1_000_000, scope_setting="x" * 1_000_000) is False
    for arg, kwargs, error in [
        (None, {}, psycopg.errors.NullValueNotAllowed),
        (scope, {"scope_setting": "another"}, psycopg.errors.InsufficientPrivilege),
        (scope, {"directory": None}, psycopg.errors.InsufficientPrivilege),
        (42, {}, psycopg.errors.UndefinedFunction),
    ]:
        with pytest.raises(error) as caught:
            note(arg, **kwargs)  # type: ignore[arg-type]
        assert "\n" not in str(caught.value.diag.message_primary)
    assert other.list_namespaces() == [ns] and PgmemStore(conn, embedder=embedder).list_namespaces() == [ns]
    rows = admin_conn.execute("SELECT directory, namespace, scope_name FROM pgmem.store_namespace ORDER BY 1")
    assert rows.fetchall() == [("default", list(ns), scope), ("tenant-b", list(ns), scope)]
    assert PgmemStore(conn, embedder=embedder).get(ns, "k").value == {"text": "kept"}  # type: ignore[union-attr]


def test_arguments_of_another_type_are_config_errors(source_url: str, store: PgmemStore, tmp_path: Path) -> None:
    """A checkpoint path holding NUL raised ValueError, one that is no path TypeError, a store
    that is no PgmemStore AttributeError once the first page was read, and a progress that is no
    callable TypeError after the first page was written."""
    for kwargs in (
        {"checkpoint": str(tmp_path / "a\x00b")},
        {"checkpoint": 42},
        {"progress": "print"},
    ):
        with pytest.raises(ConfigError):
            import_postgres_store(source_url, store, **kwargs)
    with pytest.raises(ConfigError, match="store must be a PgmemStore"):
        import_postgres_store(source_url, None)  # type: ignore[arg-type]
    assert store.list_namespaces() == []


def test_an_item_deleted_in_pgmem_is_not_imported_again(source_url: str, store: PgmemStore, conn: Conn) -> None:
    """An item the application deleted in pgmem after the source's copy was written stays
    deleted: by `delete` (also of a key no import had written yet) and by a forget of the item's
    thread. A source copy written after the delete is imported; an application put after it
    writes the key again as always (and the next import keeps it)."""
    store.delete(("docs",), "readme")  # before any import: the source's copy is older
    first = import_postgres_store(source_url, store)
    assert (first.imported, first.deleted, first.failed) == (len(ITEMS) - 1, 1, [])
    store.delete(("users", "u1"), "pets")
    forget_thread(conn, "users/u2", item_thread("car"))  # the item goes with its thread
    again = import_postgres_store(source_url, store)
    assert (again.imported, again.unchanged, again.deleted) == (0, len(ITEMS) - 3, 3)
    assert "deleted 3 (in pgmem since)" in again.summary()
    items = _pgmem_items(store)
    gone = {(("docs",), "readme"), (("users", "u1"), "pets"), (("users", "u2"), "car")}
    assert items == {(ns, k): v for ns, k, v in ITEMS if (ns, k) not in gone}
    assert all(h.key != "pets" for h in store.search(("users", "u1"), query="Luna the dog and baths", limit=5))

    with PostgresStore.from_conn_string(source_url) as lg:  # the source, after the delete
        lg.put(("users", "u1"), "pets", {"text": "Luna has a new collar."})
    store.put(("docs",), "readme", {"title": "Setup", "body": "Run make up."})  # the application, again
    third = import_postgres_store(source_url, store)
    assert (third.imported, third.kept, third.deleted) == (1, 1, 1)  # pets; readme; car
    items = _pgmem_items(store)
    assert items[(("users", "u1"), "pets")] == {"text": "Luna has a new collar."}
    assert items[(("docs",), "readme")] == {"title": "Setup", "body": "Run make up."}
    assert (("users", "u2"), "car") not in items


def test_a_delete_between_the_imports_read_and_write_stays(source_url: str, store: PgmemStore, app_url: str) -> None:
    """The application deletes a key after the import read it (stored, older than the source's
    changed copy) and before the import's write: the key stays deleted."""
    import_postgres_store(source_url, store)
    with PostgresStore.from_conn_string(source_url) as lg:
        lg.put(("users", "u1"), "work", {"text": "Now drives the harbour's night ferry."})
    read = store.batch
    raced: list[str] = []

    def batch_then_app_deletes(ops: Any) -> Any:
        out = read(ops)
        if not raced and any((tuple(op.namespace), op.key) == (("users", "u1"), "work") for op in ops):
            with connect(app_url) as c:
                PgmemStore(c).delete(("users", "u1"), "work")
            raced.append("work")
        return out

    store.batch = batch_then_app_deletes  # type: ignore[method-assign]
    report = import_postgres_store(source_url, store)
    assert raced == ["work"]
    assert (report.imported, report.deleted, report.failed) == (0, 1, [])
    assert (("users", "u1"), "work") not in _pgmem_items(store)


def _cond_put(c: Conn, key: str) -> tuple[bool, bool]:
    """A conditional put_item of `key` in the open transaction of `c`: (written, created_at is NULL)."""
    c.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
    c.execute("SELECT set_config('pgmem.scope', 'race', true)")
    row = c.execute(
        "SELECT written, created_at IS NULL FROM pgmem.put_item('race', '{race}', %s, '{\"v\": 1}',"
        " unless_newer_than => '2000-01-01')",
        (key,),
    ).fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


def _waiting(admin_conn: Conn, pid: int) -> bool:
    row = admin_conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "Lock"


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # reported by the test
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _wait_until(cond: Any) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _put_when_b_commits(admin_conn: Conn, a: Conn, b: Conn) -> list[Any]:
    """A conditional put of "k" on `a`, in its own transaction and thread, while `b` holds what
    it waits for: checked to be waiting, then `b` commits. The put's answer (or its error)."""

    def put() -> object:
        with a.transaction():
            return _cond_put(a, "k")

    t, out = _in_thread(put)
    _wait_until(lambda: _waiting(admin_conn, a.info.backend_pid))
    b.execute("COMMIT")
    t.join(30)
    return out


@pytest.mark.parametrize("first", ["import", "delete", "forget"])
def test_a_delete_and_an_imports_put_of_one_key_at_once(app_url: str, admin_conn: Conn, first: str) -> None:
    """A conditional put (an import) and a delete of the same key in flight at once, each on its
    own connection as the app login: whichever commits first, the key ends deleted and
    remembered. `import` first: the put inserted a new row the delete cannot see yet, so the
    delete waits for the key's lock. `delete` first: the put waits for it and writes nothing.
    `forget` first: a forget of the item's thread holds the row; the put waits for it and
    writes nothing."""
    with connect(app_url) as setup, setup.transaction():  # an indexed item for the forget to take
        setup.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
        setup.execute("SELECT set_config('pgmem.scope', 'race', true)")
        setup.execute("SELECT pgmem.put_item('race', '{race}', 'other', '{\"v\": 0}')")
        if first == "forget":
            setup.execute("SELECT pgmem.put_item('race', '{race}', 'k', '{\"v\": 0}', thread => 'item:k')")
    with connect(app_url) as a, connect(app_url) as b:
        if first == "import":
            a.execute("BEGIN")
            assert _cond_put(a, "k") == (True, False)

            def delete() -> object:
                with b.transaction():
                    b.execute("SELECT set_config('pgmem.scope', 'race', true)")
                    return b.execute("SELECT pgmem.delete_item('race', 'k')").fetchone()

            t, out = _in_thread(delete)
            _wait_until(lambda: _waiting(admin_conn, b.info.backend_pid))
            a.execute("COMMIT")
            t.join(30)
            assert out == [(True,)]  # it saw the put's row once the put committed
        else:
            b.execute("BEGIN")
            b.execute("SELECT set_config('pgmem.scope', 'race', true)")
            if first == "delete":
                b.execute("SELECT pgmem.delete_item('race', 'k')")
            else:
                b.execute("SELECT pgmem.forget_thread('race', 'item:k')")
            assert _put_when_b_commits(admin_conn, a, b) == [(False, True)]  # not written: deleted after its time
    stored = admin_conn.execute("SELECT item_key FROM pgmem.store_item WHERE scope_id = 'race' ORDER BY 1").fetchall()
    assert stored == [("other",)]
    tombs = admin_conn.execute("SELECT key_hash FROM pgmem.store_tombstone WHERE scope_id = 'race'").fetchall()
    assert tombs == [(hashlib.sha256(b"k").digest(),)]


def test_a_deleted_key_is_remembered_by_its_hash_for_30_days(conn: Conn, admin_conn: Conn) -> None:
    """pgmem.store_tombstone holds the sha256 of a deleted key and the time, never the key; a
    delete removes its scope's records older than 30 days (not another scope's); forget_scope
    removes the scope's."""
    store = PgmemStore(conn)
    for ns in (("t", "a"), ("t", "b")):
        store.put(ns, "alice@example.com", {"note": "x"})
        store.delete(ns, "alice@example.com")
    dump = admin_conn.execute("SELECT t::text FROM pgmem.store_tombstone t").fetchall()
    assert len(dump) == 2 and not any("alice" in str(r[0]) for r in dump)
    admin_conn.execute("UPDATE pgmem.store_tombstone SET deleted_at = now() - interval '31 days'")
    store.delete(("t", "a"), "bob")  # a missing key: remembered all the same
    rows = admin_conn.execute("SELECT scope_id, key_hash FROM pgmem.store_tombstone ORDER BY 1").fetchall()
    assert rows == [("t/a", hashlib.sha256(b"bob").digest()), ("t/b", hashlib.sha256(b"alice@example.com").digest())]
    forget_scope(conn, "t/b")
    assert admin_conn.execute("SELECT scope_id FROM pgmem.store_tombstone").fetchall() == [("t/a",)]


def test_a_forgotten_scope_is_not_imported_again(
    source_url: str, store: PgmemStore, conn: Conn, admin_conn: Conn
) -> None:
    """A namespace whose scope was forgotten (forget_scope) after the source's copies were
    written is not written again by an import, and no empty scope row is left for it; what the
    application or the source writes after the forget is. The record is the scope's sha256,
    which neither pgmem_app nor pgmem_reader may read."""
    import_postgres_store(source_url, store)
    forget_scope(conn, "users/u1")
    again = import_postgres_store(source_url, store)
    assert (again.imported, again.unchanged, again.deleted, again.failed) == (0, len(ITEMS) - 3, 3, [])
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope WHERE scope_id = 'users/u1'").fetchone() == (0,)
    assert all(ns != ("users", "u1") for ns, _ in _pgmem_items(store))
    assert admin_conn.execute("SELECT scope_hash FROM pgmem.forgotten_scope").fetchall() == [
        (hashlib.sha256(b"users/u1").digest(),)
    ]
    with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
        conn.execute("SELECT * FROM pgmem.forgotten_scope")

    with PostgresStore.from_conn_string(source_url) as lg:  # the source, after the forget
        lg.put(("users", "u1"), "pets", {"text": "Luna has a new collar."})
    store.put(("users", "u1"), "food", {"text": "Vegetarian since May."})  # the application, after it
    third = import_postgres_store(source_url, store)
    assert (third.imported, third.kept, third.deleted) == (1, 1, 1)  # pets; food; work
    items = {k: v for (ns, k), v in _pgmem_items(store).items() if ns == ("users", "u1")}
    assert items == {"pets": {"text": "Luna has a new collar."}, "food": {"text": "Vegetarian since May."}}


def test_a_forget_scope_in_flight_holds_back_an_imports_put(app_url: str, admin_conn: Conn) -> None:
    """forget_scope holds the scope row while it deletes; an import's put into the scope waits
    for it, then writes nothing and leaves no scope row behind. Older records of forgotten scopes
    (30 days) go with the next forget_scope."""
    admin_conn.execute(
        "INSERT INTO pgmem.forgotten_scope VALUES (sha256('old'::bytea), now() - interval '31 days'),"
        " (sha256('recent'::bytea), now() - interval '29 days')"
    )
    with connect(app_url) as setup, setup.transaction():
        setup.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
        setup.execute("SELECT set_config('pgmem.scope', 'race', true)")
        setup.execute("SELECT pgmem.put_item('race', '{race}', 'k', '{\"v\": 0}')")
    with connect(app_url) as a, connect(app_url) as b:
        b.execute("BEGIN")
        b.execute("SELECT set_config('pgmem.scope', 'race', true)")
        b.execute("SELECT * FROM pgmem.forget_scope('race')")
        assert _put_when_b_commits(admin_conn, a, b) == [(False, True)]
    assert admin_conn.execute("SELECT count(*) FROM pgmem.scope WHERE scope_id = 'race'").fetchone() == (0,)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.store_item WHERE scope_id = 'race'").fetchone() == (0,)
    hashes = {r[0] for r in admin_conn.execute("SELECT scope_hash FROM pgmem.forgotten_scope")}
    assert hashes == {hashlib.sha256(s).digest() for s in (b"race", b"recent")}


def test_a_source_row_without_a_time_is_older_than_pgmem(source_url: str, store: PgmemStore) -> None:
    """A source row whose updated_at is NULL is older than anything pgmem holds or deleted: a
    key the application deleted stays deleted, a key it wrote is kept, and a new key is imported."""
    store.delete(("users", "zed"), "gone")
    store.put(("users", "zed"), "mine", {"text": "the application's"})
    with psycopg.connect(source_url, autocommit=True) as c:
        c.execute("CREATE TABLE store_untimed (prefix text, key text, value jsonb, updated_at timestamptz)")
        c.execute(
            "INSERT INTO store_untimed VALUES ('users.zed', 'gone', '{\"text\": \"old\"}', NULL),"
            " ('users.zed', 'mine', '{\"text\": \"old\"}', NULL), ('users.zed', 'new', '{\"text\": \"new\"}', NULL)"
        )
    report = import_postgres_store(source_url, store, table="store_untimed")
    assert (report.imported, report.kept, report.deleted, report.failed) == (1, 1, 1, [])
    assert store.get(("users", "zed"), "gone") is None
    mine, new = store.get(("users", "zed"), "mine"), store.get(("users", "zed"), "new")
    assert mine is not None and mine.value == {"text": "the application's"}
    assert new is not None and new.value == {"text": "new"}


@pytest.mark.parametrize(
    ("scope", "key", "sqlstate"),
    [
        (None, "k", "22004"),
        ("ok", None, "22004"),
        ("s" * 300, "k", None),  # no namespace has so long a scope: nothing to delete
        ("", "k", "42501"),
        ("ok", "k" * 2_000_000, None),  # no such key: nothing to delete, remembered by its hash
        ("ok", "", None),
    ],
)
def test_delete_item_hostile_arguments(conn: Conn, admin_conn: Conn, scope: Any, key: Any, sqlstate: Any) -> None:
    """delete_item as the app login with NULL, oversized or empty arguments: one SQLSTATE or a
    plain false, and the item stored beside it is untouched."""
    PgmemStore(conn).put(("ok",), "keep", {"v": 1})
    count = "SELECT count(*)::int FROM pgmem.store_tombstone"
    before = int(str(admin_conn.execute(count).fetchone()[0]))  # type: ignore[index]
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', %s, true)", (scope if scope is not None else "ok",))
            row = conn.execute("SELECT pgmem.delete_item(%s, %s)", (scope, key)).fetchone()
        assert sqlstate is None and row == (False,)
        assert admin_conn.execute(count).fetchone() == (before + 1,)
    except psycopg.Error as exc:
        assert exc.sqlstate == sqlstate, exc
        assert "\n" not in str(exc.diag.message_primary)
    item = PgmemStore(conn).get(("ok",), "keep")
    assert item is not None and item.value == {"v": 1}


def test_a_put_held_back_by_a_delete_leaves_no_scope_row(app_url: str, admin_conn: Conn) -> None:
    """A key deleted before its namespace stored anything leaves no scope row (delete_item
    creates none); an import's conditional put of an older copy writes nothing, and the scope row
    it created on its way goes again, as for a forgotten scope. A scope that held an item keeps
    its row."""
    scope_rows = "SELECT count(*) FROM pgmem.scope WHERE scope_id = 'race'"
    with connect(app_url) as c:
        with c.transaction():
            c.execute("SELECT set_config('pgmem.scope', 'race', true)")
            c.execute("SELECT pgmem.delete_item('race', 'k')")
        assert admin_conn.execute(scope_rows).fetchone() == (0,)
        with c.transaction():
            assert _cond_put(c, "k") == (False, True)
        assert admin_conn.execute(scope_rows).fetchone() == (0,)
        with c.transaction():  # the next put of another key creates it as always
            assert _cond_put(c, "other") == (True, False)
            assert _cond_put(c, "k") == (False, True)
        assert admin_conn.execute(scope_rows).fetchone() == (1,)
    stored = admin_conn.execute("SELECT item_key FROM pgmem.store_item WHERE scope_id = 'race'").fetchall()
    assert stored == [("other",)]


#: The stress test's scopes (one-label namespaces) and keys.
_STRESS_SCOPES = ("st-a", "st-b", "st-c")
#: Deleted by the application before anything was stored in it; written and forgotten at once.
_GONE, _RACED = "st-gone", "st-raced"
_STRESS_KEYS = tuple(f"k{i}" for i in range(8))


def _in_txn(c: Conn, scope: str, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Run the statements in one transaction of `scope` (any error, a deadlock included, fails
    the test)."""
    with c.transaction():
        c.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
        c.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
        for query, params in statements:
            c.execute(query, params)


_PUT = "SELECT pgmem.put_item(%s, %s, %s, %s::jsonb, thread => %s)"
_COND_PUT = "SELECT pgmem.put_item(%s, %s, %s, %s::jsonb, thread => %s, unless_newer_than => '2000-01-01')"


def test_imports_deletes_puts_and_forgets_at_once_keep_every_deletion(app_url: str, admin_conn: Conn) -> None:
    """Two imports (conditional puts of every key, older than anything, a page of keys a
    transaction in key order as the import writes them) run again and again while each scope's
    application worker deletes, puts (plain or indexed), forgets an item's thread, runs a batch
    that deletes a key then puts another, or forgets the whole scope, and a sweeper expires
    items; each on its own connection as the app login. Whatever the interleaving: no
    transaction fails (no deadlock, no error); each key the application touched ends as its
    last operation left it (an import never brings back a deleted, forgotten or forgotten-scope
    key, nor replaces the application's value); a key it never touched holds the import's copy;
    no namespace is listed without items, and no record of a key outlives its scope's forget."""
    rng = random.Random(20261206)
    errors: list[BaseException] = []
    # Each scope's worker runs its own random plan; `model` is what its operations leave.
    plans: dict[str, list[tuple[str, str, str]]] = {}
    model: dict[str, dict[str, dict[str, Any] | None]] = {}
    touched: dict[str, set[str]] = {}
    no_scope_row: set[str] = set()  # forgotten, and no application put since
    for scope in _STRESS_SCOPES:
        plan: list[tuple[str, str, str]] = []
        state: dict[str, dict[str, Any] | None] = {}
        seen: set[str] = set()
        for n in range(40):
            ops = ["put", "put", "indexed", "delete", "delete", "forget", "batch", "batch"]
            op = "scope" if n % 13 == 12 else rng.choice(ops)
            a, b = sorted(rng.sample(_STRESS_KEYS, 2))
            plan.append((op, a, b))
            if op in ("put", "indexed"):
                state[a] = {"app": n}
                seen.add(a)
            elif op == "delete":
                state[a] = None
                seen.add(a)
            elif op == "forget":  # the thread of an indexed item: the item goes with it
                if (state.get(a) or {}).get("indexed"):
                    state[a] = None
            elif op == "batch":  # delete a, then put b, in one transaction (key order)
                state[a], state[b] = None, {"app": n}
                seen |= {a, b}
            else:  # forget_scope: every key is gone, and remembered as gone
                state = {k: None for k in _STRESS_KEYS}
                seen = set(_STRESS_KEYS)
            if op == "indexed":
                state[a] = {"app": n, "indexed": True}
            if op == "scope":
                no_scope_row.add(scope)
            elif op in ("put", "indexed", "batch"):
                no_scope_row.discard(scope)
        plans[scope], model[scope], touched[scope] = plan, state, seen

    def app(scope: str) -> None:
        with connect(app_url) as c:
            for n, (op, a, b) in enumerate(plans[scope]):
                stmts: list[tuple[str, tuple[Any, ...]]]
                if op == "put":
                    stmts = [(_PUT, (scope, [scope], a, json.dumps({"app": n}), None))]
                elif op == "indexed":
                    stmts = [(_PUT, (scope, [scope], a, json.dumps({"app": n, "indexed": True}), f"item:{a}"))]
                elif op == "delete":
                    stmts = [("SELECT pgmem.delete_item(%s, %s)", (scope, a))]
                elif op == "forget":
                    stmts = [("SELECT pgmem.forget_thread(%s, %s)", (scope, f"item:{a}"))]
                elif op == "batch":
                    stmts = [
                        ("SELECT pgmem.delete_item(%s, %s)", (scope, a)),
                        (_PUT, (scope, [scope], b, json.dumps({"app": n}), None)),
                    ]
                else:
                    stmts = [("SELECT pgmem.forget_scope(%s)", (scope,))]
                _in_txn(c, scope, stmts)

    def batcher() -> None:  # deletes a key, then puts another, while the scope is forgotten
        turn = random.Random(7)
        with connect(app_url) as c:
            for n in range(40):
                a, b = sorted(turn.sample(_STRESS_KEYS, 2))
                delete = ("SELECT pgmem.delete_item(%s, %s)", (_RACED, a))
                _in_txn(c, _RACED, [delete, (_PUT, (_RACED, [_RACED], b, json.dumps({"app": n}), None))])

    def forgetter() -> None:
        with connect(app_url) as c:
            for _ in range(15):
                _in_txn(c, _RACED, [("SELECT pgmem.forget_scope(%s)", (_RACED,))])

    def importer(seed: int) -> None:
        keys = [(s, k) for s in (*_STRESS_SCOPES, _GONE, _RACED) for k in _STRESS_KEYS]
        order = random.Random(seed)
        with connect(app_url) as c:
            for _ in range(6):
                size = order.randint(2, 6)
                for i in range(0, len(keys), size):
                    page = keys[i : i + size]
                    with c.transaction():
                        c.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
                        for scope, k in page:
                            c.execute("SELECT set_config('pgmem.scope', %s, true)", (scope,))
                            c.execute(_COND_PUT, (scope, [scope], k, json.dumps({"src": k}), None))

    def sweeper() -> None:
        with connect(app_url) as c:
            for _ in range(30):
                for scope in _STRESS_SCOPES:
                    _in_txn(c, scope, [("SELECT pgmem.expire_items(%s)", (scope,))])

    def run(fn: Any, *args: Any) -> threading.Thread:
        def go() -> None:
            try:
                fn(*args)
            except BaseException as exc:  # reported below
                errors.append(exc)

        t = threading.Thread(target=go)
        t.start()
        return t

    with connect(app_url) as c:
        for k in _STRESS_KEYS:
            _in_txn(c, _GONE, [("SELECT pgmem.delete_item(%s, %s)", (_GONE, k))])
    workers = [run(app, s) for s in _STRESS_SCOPES] + [run(batcher), run(forgetter)]
    workers += [run(importer, 1), run(importer, 2), run(sweeper)]
    for t in workers:
        t.join(300)
    assert not any(t.is_alive() for t in workers), "timed out"
    assert errors == []
    with connect(app_url) as c:
        _in_txn(c, _RACED, [("SELECT pgmem.forget_scope(%s)", (_RACED,))])
    importer(3)  # one more import, after everything: it brings nothing back
    with connect(app_url) as c:  # entries a delete left while a put was in flight go now
        for scope in _STRESS_SCOPES:
            _in_txn(c, scope, [("SELECT pgmem.expire_items(%s)", (scope,))])
    stored = {
        (str(r[0]), str(r[1])): r[2]
        for r in admin_conn.execute("SELECT scope_id, item_key, value FROM pgmem.store_item").fetchall()
    }
    for scope in _STRESS_SCOPES:
        for k in _STRESS_KEYS:
            want = model[scope].get(k) if k in touched[scope] else {"src": k}
            assert stored.get((scope, k)) == want, (scope, k, plans[scope])
    empty = admin_conn.execute(
        "SELECT scope_name FROM pgmem.store_namespace n"
        " WHERE NOT EXISTS (SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = n.scope_name)"
    ).fetchall()
    assert empty == []
    stale = admin_conn.execute(
        "SELECT t.scope_id FROM pgmem.store_tombstone t JOIN pgmem.forgotten_scope f"
        " ON f.scope_hash = sha256(convert_to(t.scope_id, 'UTF8')) WHERE t.deleted_at < f.forgotten_at"
    ).fetchall()
    assert stale == []
    assert not any(scope in (_GONE, _RACED) for scope, _ in stored)
    rows = {str(r[0]) for r in admin_conn.execute("SELECT scope_id FROM pgmem.scope").fetchall()}
    assert rows & (no_scope_row | {_GONE, _RACED}) == set()
    kept = admin_conn.execute("SELECT count(*) FROM pgmem.store_tombstone WHERE scope_id = %s", (_RACED,)).fetchone()
    assert kept == (0,)


def _hash_embed(texts: list[str]) -> list[list[float]]:
    """An application's own `embed` (8 dimensions, from each text's sha256)."""
    return [[b / 255 + 0.01 for b in hashlib.sha256(t.encode()).digest()[:8]] for t in texts]


def test_an_app_that_keeps_its_index_embed_imports_through_its_own_store(
    source_url: str, conn: Conn, app_url: str, tmp_path: Path
) -> None:
    """The README's two steps for a PostgresStore with an `index` (`embed`): `pgmem store import`,
    then the one-line switch with the same `index`. The CLI stores the items as pgmem's pieces,
    and a store with an `embed` refuses a namespace of pieces, so every put and search of an
    imported namespace failed after the switch. docs/langgraph.md says so and names the way: the
    Python twin through a store opened with the app's `index`."""
    index = {"dims": 8, "embed": _hash_embed, "fields": ["text"]}
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pgmem", "store", "import", source_url, "--limit", str(len(_BULK))],
        env=env, cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    app = PgmemStore(conn, index=index)
    with pytest.raises(ModelRefusedError, match="pieces"):
        app.put(("bulk", "b0"), "new", {"text": "A note written after the switch."})
    with pytest.raises(ModelRefusedError, match="pieces"):
        app.search(("bulk", "b0"), query="topic")
    report = import_postgres_store(source_url, app)
    assert report.failed == [] and (report.imported, report.unchanged) == (len(ITEMS) - len(_BULK), len(_BULK))
    app.put(("users", "u1"), "pets", {"text": "Luna now likes baths."})
    assert [i.key for i in app.search(("users", "u1"), query="Luna now likes baths.", limit=1)] == ["pets"]
    doc = (REPO / "docs" / "langgraph.md").read_text(encoding="utf-8")
    assert "An application that keeps an `index` with an `embed`" in doc


_APP_INDEX_MODULE = """
import hashlib

def embed(texts):
    return [[b / 255 + 0.01 for b in hashlib.sha256(t.encode()).digest()[:8]] for t in texts]

INDEX = {"dims": 8, "embed": embed, "fields": ["text"]}
NOT_A_DICT = ["text"]
BAD_EMBED = {"dims": 8, "embed": 42}
"""


@pytest.mark.long
def test_the_command_imports_with_the_apps_own_index(
    source_url: str, conn: Conn, admin_conn: Conn, app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pgmem store import --index MODULE:NAME` opens the store with the application's own index
    (read from its module, the current folder first), so the namespaces hold field vectors of its
    `embed` and the application, switched with that index, writes and searches them. Before,
    the command stored pgmem's pieces only, and an app keeping its `embed` had to import
    through Python."""
    (tmp_path / "appindex.py").write_text(_APP_INDEX_MODULE, encoding="utf-8")
    (tmp_path / "boom.py").write_text("raise RuntimeError('the app cannot start here')\n", encoding="utf-8")
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgmem", "store", "import", source_url, *args],
            env=env, cwd=tmp_path, capture_output=True, text=True,
        )  # fmt: skip

    for args, expected in [
        (["--index", "appindex"], "--index must be MODULE:NAME"),
        (["--index", "appindex:"], "--index must be MODULE:NAME"),
        (["--index", "app-index:INDEX"], "--index must be MODULE:NAME"),
        (["--index", "no_such_module_here:INDEX"], "cannot import 'no_such_module_here': ModuleNotFoundError"),
        (["--index", "boom:INDEX"], "cannot import 'boom': RuntimeError: the app cannot start here"),
        (["--index", "appindex:NOPE"], "'appindex' has no 'NOPE'"),
        (["--index", "appindex:NOT_A_DICT"], "is a list, not a dict"),
        (["--index", "appindex:BAD_EMBED"], "index embed must be"),
        (["--index", "appindex:INDEX", "--field", "text"], "not both"),
    ]:
        done = cli(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, (args, done.stderr)
    assert conn.execute("SELECT count(*) FROM pgmem.store_item").fetchone() == (0,)
    done = cli("--index", "appindex:INDEX")
    assert done.returncode == 0, done.stderr
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.delitem(sys.modules, "appindex", raising=False)
    import appindex  # type: ignore[import-not-found]  # the application's module, written above

    app = PgmemStore(conn, index=appindex.INDEX)
    assert _pgmem_items(app) == {(ns, k): v for ns, k, v in ITEMS}
    assert [
        i.key for i in app.search(("users", "u2"), query="Drives an old red Volvo estate with a roof box.", limit=1)
    ] == ["car"]
    app.put(("bulk", "b0"), "new", {"text": "A note written after the switch."})
    assert [i.key for i in app.search(("bulk", "b0"), query="A note written after the switch.", limit=1)] == ["new"]
    # Field vectors of every item with the index's field (the readme has none), and no pieces.
    vectors = admin_conn.execute("SELECT count(DISTINCT (scope_id, item_key)) FROM pgmem.store_vector").fetchone()
    assert vectors == (sum("text" in v for _, _, v in ITEMS) + 1,)
    assert admin_conn.execute("SELECT count(*) FROM pgmem.piece").fetchone() == (0,)


def test_a_store_without_an_embed_refuses_to_search_a_namespace_of_field_vectors(conn: Conn, store: PgmemStore) -> None:
    """The other way round: a namespace an application wrote with its `embed`, searched by a
    store opened without it (a debugging script, a service without the app's `index`), answered
    nothing, without a word, where a put was refused. Now the search is refused too, in one line
    naming the model, and a listing (no query) still lists the items."""
    app = PgmemStore(conn, index={"dims": 8, "embed": _hash_embed, "fields": ["text"]})
    app.put(("users", "u9"), "pets", {"text": "Luna the dog hates baths."})
    with pytest.raises(ModelRefusedError, match=r"field vectors of model callable:.*_hash_embed") as err:
        store.search(("users", "u9"), query="Which pet hates baths?")
    assert "\n" not in str(err.value)
    assert [i.key for i in store.search(("users", "u9"))] == ["pets"]
    assert [i.key for i in app.search(("users", "u9"), query="Luna the dog hates baths.")] == ["pets"]


def test_a_source_holding_two_rows_of_one_key_is_refused_before_anything_is_written(
    source_url: str, store: PgmemStore, app_url: str, tmp_path: Path
) -> None:
    """A table (or view) that is not PostgresStore's can hold two rows of one (prefix, key): both
    were read as that item, the store kept either, and a page ending between them skipped the
    second (keyset `(prefix, key) > the last`): the import of 10 rows said "read 8 · imported 5 ·
    kept 3 (newer in pgmem)". Now it is refused in one line naming the key, nothing written; a
    view with one row per key imports as the table does."""
    _source_sql(source_url, "CREATE TABLE twice (prefix text, key text, value jsonb, updated_at timestamptz)")
    _source_sql(
        source_url,
        "INSERT INTO twice SELECT 'dup.ns', 'k' || (i / 2), jsonb_build_object('text', 'version ' || i), now()"
        " FROM generate_series(0, 9) i",
    )
    for page_size in (3, 100):
        with pytest.raises(ConfigError, match=r"holds 2 rows of namespace \('dup', 'ns'\) key 'k\d'") as caught:
            import_postgres_store(source_url, store, table="twice", page_size=page_size)
        assert "\n" not in str(caught.value)
    assert store.list_namespaces() == []
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pgmem", "store", "import", source_url, "--table", "twice", "--page-size", "3"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "holds 2 rows" in done.stderr, done.stderr
    assert store.list_namespaces() == []
    # One row per key (a view has no index: it is read once to see) imports whole.
    _source_sql(source_url, "CREATE VIEW newest AS SELECT DISTINCT ON (prefix, key) * FROM twice ORDER BY prefix, key")
    report = import_postgres_store(source_url, store, table="newest", page_size=3)
    assert (report.read, report.imported, report.failed) == (5, 5, [])


def test_a_source_time_python_cannot_hold_fails_its_item_only(
    source_url: str, store: PgmemStore, app_url: str, tmp_path: Path
) -> None:
    """A source row whose updated_at is infinity, -infinity, a BC date or after year 9999 failed
    the read of its whole page in psycopg ("timestamp too large (after year 10K)"): the import
    stopped there, one line, every run, and no item after it could ever be imported. Now that row
    fails, named, and the others are imported."""
    _source_sql(
        source_url,
        "CREATE TABLE times (prefix text, key text, value jsonb, updated_at timestamptz, expires_at timestamptz)",
    )
    times = ["2024-01-01", "infinity", "-infinity", "0044-03-15 BC", "20000-01-01", "2024-01-02", "9999-12-31 23:00+00"]
    for i, t in enumerate(times):
        _source_sql(
            source_url,
            "INSERT INTO times (prefix, key, value, updated_at) VALUES ('tm', %s, %s, %s::timestamptz)",
            (f"k{i}", json.dumps({"text": f"item {i}"}), t),
        )
    report = import_postgres_store(source_url, store, table="times", page_size=2)
    assert (report.read, report.imported, report.complete) == (len(times), 2, True)
    failed = {key: error for _, key, error in report.failed}
    assert sorted(failed) == ["k1", "k2", "k3", "k4", "k6"]
    assert all("is not a time from year 1 to 9999" in e for e in failed.values()), failed
    assert {k for (_, k) in _pgmem_items(store)} == {"k0", "k5"}
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pgmem", "store", "import", source_url, "--table", "times"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith(f"read {len(times)} · imported 0 · unchanged 2"), done.stdout
