"""PgmemStore and AsyncPgmemStore held to the behaviours LangGraph's own PostgresStore suites
check (langgraph-checkpoint-postgres's test_store.py and test_async_store.py, read for what is
expected; these tests are pgmem's own): batch order, get/put/delete, list_namespaces, search
with prefix, filters, limit, offset and score, vector search with each index config, TTL, sync,
pipeline and pool connections, and the async twin of each.

Real Postgres as the application login. Index-config tests embed with `WordEmbeddings`, a real
LangChain `Embeddings` (words hashed to vectors), so they are fast and deterministic; pgmem's
default path embeds with the hash embedder of tests/security_helpers.py."""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

pytest.importorskip("langgraph.store.base", reason="the [langgraph] extra is not installed")

from langchain_core.embeddings import Embeddings
from langgraph.store.base import GetOp, Item, ListNamespacesOp, PutOp, SearchOp

from pgmem.errors import ConfigError, EmbeddingError, ModelMismatchError, ModelRefusedError, PgmemError
from pgmem.integrations.langgraph import AsyncPgmemStore, PgmemStore, namespace_scope
from tests.helpers import InFlight, sent
from tests.security_helpers import HashEmbedder

Conn = psycopg.Connection[tuple[object, ...]]
MODES = ("conn", "pipeline", "pool")
DISTANCES = ("cosine", "inner_product", "l2")


class WordEmbeddings(Embeddings):
    """Each word (lower case) hashed to a fixed random vector; a text is the sum of its words'
    vectors, not normalised (so inner product and L2 differ from cosine)."""

    def __init__(self, dims: int = 64, model: str = "words-v1") -> None:
        self.dims = dims
        self.model = model
        self.calls = 0
        self.texts = 0

    def _word(self, w: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        seed = int.from_bytes(hashlib.sha256((self.model + w).encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dims)

    def vector(self, text: str) -> list[float]:
        words = re.findall(r"\w+", text.lower()) or ["<empty>"]
        return [float(x) for x in np.sum([self._word(w) for w in words], axis=0)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.texts += len(texts)
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vector(text)


def expected_score(distance: str, query: list[float], doc: list[float]) -> float:
    q, d = np.asarray(query), np.asarray(doc)
    if distance == "cosine":
        return float(q @ d / (np.linalg.norm(q) * np.linalg.norm(d)))
    if distance == "inner_product":
        return float(q @ d)
    return -float(np.linalg.norm(q - d))


@contextmanager
def sync_store(url: str, mode: str, **options: Any) -> Iterator[PgmemStore]:
    options.setdefault("embedder", None if "index" in options and "embed" in options["index"] else HashEmbedder())
    if options["embedder"] is None:
        del options["embedder"]
    extra: dict[str, Any] = {"pipeline": True} if mode == "pipeline" else {}
    if mode == "pool":
        extra = {"pool_config": {"min_size": 1, "max_size": 4}}
    with PgmemStore.from_conn_string(url, **extra, **options) as store:
        yield store


@asynccontextmanager
async def async_store(url: str, mode: str, **options: Any) -> AsyncIterator[AsyncPgmemStore]:
    options.setdefault("embedder", None if "index" in options and "embed" in options["index"] else HashEmbedder())
    if options["embedder"] is None:
        del options["embedder"]
    extra: dict[str, Any] = {"pipeline": True} if mode == "pipeline" else {}
    if mode == "pool":
        extra = {"pool_config": {"min_size": 1, "max_size": 4}}
    async with AsyncPgmemStore.from_conn_string(url, **extra, **options) as store:
        yield store


# -- batch order, get/put/delete, list_namespaces, search: sync and async ----------------------


def _batch_ops() -> list[Any]:
    return [
        GetOp(("test", "foo"), "key1"),
        PutOp(("test", "bar"), "key2", {"data": "value2"}),
        SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(("test",), "key3"),
    ]


def _check_batch(results: Sequence[Any]) -> None:
    assert len(results) == 5
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"} and results[0].key == "key1"
    assert results[1] is None
    assert [i.key for i in results[2]] == ["key1"]
    assert ("test", "foo") in results[3] and ("test", "bar") in results[3]
    assert results[4] is None


@pytest.mark.parametrize("mode", MODES)
def test_batch_results_come_back_in_the_order_of_the_ops(app_url: str, mode: str) -> None:
    with sync_store(app_url, mode) as store:
        store.put(("test", "foo"), "key1", {"data": "value1"})
        store.put(("test", "bar"), "key2", {"data": "value2"})
        _check_batch(store.batch(_batch_ops()))


@pytest.mark.parametrize("mode", MODES)
def test_abatch_results_come_back_in_the_order_of_the_ops(app_url: str, mode: str) -> None:
    async def main() -> None:
        async with async_store(app_url, mode) as store:
            await store.aput(("test", "foo"), "key1", {"data": "value1"})
            await store.aput(("test", "bar"), "key2", {"data": "value2"})
            _check_batch(await store.abatch(_batch_ops()))
            again = await store.abatch(
                [SearchOp(("test",), limit=5), PutOp(("test",), "key3", {"data": "value3"}), GetOp(("test",), "key3")]
            )
            assert (
                isinstance(again[0], list) and len(again[0]) == 2 and again[1] is None and again[2] is None
            )  # reads run before the writes
            assert (await store.aget(("test",), "key3")) is not None

    asyncio.run(main())


def _one_call_each(store: Any) -> list[tuple[str, Callable[[], Any]]]:
    """Single calls of five callers: two refused (a NUL in a value, a negative limit), one the
    database refuses (a put into a namespace of field vectors from a store of pieces)."""
    return [
        ("good put", lambda: store.aput(("calls",), "good", {"text": "the pallets shipped"})),
        ("NUL value", lambda: store.aput(("calls",), "bad", {"text": "a\x00b"})),
        ("get", lambda: store.aget(("calls",), "seen")),
        ("bad limit", lambda: store.asearch(("calls",), limit=-1)),
        ("other kind", lambda: store.aput(("vectors",), "k", {"text": "x"})),
        ("namespaces", lambda: store.alist_namespaces(prefix=("calls",))),
        ("delete", lambda: store.adelete(("calls",), "gone")),
    ]


def _outcome(result: object) -> str:
    if isinstance(result, BaseException):
        return f"{type(result).__name__}: {result}"
    return repr(result.value if isinstance(result, Item) else result)


@pytest.mark.parametrize("mode", ("conn", "pool"))
def test_a_refused_call_gathered_with_other_callers_fails_alone(app_url: str, mode: str) -> None:
    """LangGraph gathers the single calls (aput, aget, ...) made in one tick of the loop into one
    abatch; a refusal of one of them failed every op of the batch with its error, the others'
    puts not stored (a graph node putting a value with a NUL lost its sibling nodes' puts), where
    PgmemStore, a batch a call, refuses that call only. Now each call gets what it gets when it
    runs alone: the same results and errors as the sync store's."""
    with sync_store(app_url, "conn", index={"embed": WordEmbeddings(), "fields": ["text"]}) as vectors:
        vectors.put(("vectors",), "k0", {"text": "a namespace of field vectors"})
    with sync_store(app_url, "conn") as store:
        store.put(("calls",), "seen", {"text": "stored before"})
        store.put(("calls",), "gone", {"text": "deleted by a caller"})
        alone: dict[str, str] = {}
        for name, sync_call in (
            ("good put", lambda: store.put(("calls",), "good", {"text": "the pallets shipped"})),
            ("NUL value", lambda: store.put(("calls",), "bad", {"text": "a\x00b"})),
            ("get", lambda: store.get(("calls",), "seen")),
            ("bad limit", lambda: store.search(("calls",), limit=-1)),
            ("other kind", lambda: store.put(("vectors",), "k", {"text": "x"})),
            ("namespaces", lambda: store.list_namespaces(prefix=("calls",))),
            ("delete", lambda: store.delete(("calls",), "gone")),
        ):
            try:
                alone[name] = _outcome(sync_call())
            except PgmemError as exc:
                alone[name] = _outcome(exc)
        store.delete(("calls",), "good")  # the async calls put it again
        store.put(("calls",), "gone", {"text": "deleted by a caller"})
        assert alone["other kind"].startswith("ModelRefusedError") and alone["NUL value"].startswith("InputError")

    async def main() -> dict[str, str]:
        async with async_store(app_url, mode) as astore:
            calls = _one_call_each(astore)
            results = await asyncio.gather(*(call() for _, call in calls), return_exceptions=True)
            found = {name: _outcome(r) for (name, _), r in zip(calls, results, strict=True)}
            assert await astore.aget(("calls",), "good") is not None
            assert await astore.aget(("calls",), "gone") is None
            return found

    assert asyncio.run(main()) == alone


def test_an_integer_key_is_its_text_in_both_stores(app_url: str) -> None:
    """BaseStore's get, put and delete (PgmemStore's) take str(key), as AsyncPostgresStore's aput
    stores it; AsyncPgmemStore refused it: `InputError: key must be a string, got int`."""
    with sync_store(app_url, "conn") as store:
        store.put(("ids",), 7, {"text": "user seven"})  # type: ignore[arg-type]
        assert store.get(("ids",), 7).key == "7"  # type: ignore[arg-type,union-attr]

    async def main() -> None:
        async with async_store(app_url, "conn") as astore:
            assert (await astore.aget(("ids",), 7)).value == {"text": "user seven"}  # type: ignore[arg-type,union-attr]
            await astore.aput(("ids",), 8, {"text": "user eight"})  # type: ignore[arg-type]
            assert (await astore.aget(("ids",), "8")) is not None
            await astore.adelete(("ids",), 7)  # type: ignore[arg-type]
            assert [i.key for i in await astore.asearch(("ids",))] == ["8"]

    asyncio.run(main())


def _namespaces() -> list[tuple[str, ...]]:
    return [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "private"),
    ]


def _check_listing(listed: Callable[..., list[tuple[str, ...]]]) -> None:
    assert sorted(listed()) == sorted(_namespaces())
    assert sorted(listed(prefix=("test",))) == sorted(n for n in _namespaces() if n[0] == "test")
    assert sorted(listed(suffix=("public",))) == sorted(n for n in _namespaces() if n[-1] == "public")
    assert sorted(listed(prefix=("test",), suffix=("private",))) == [
        ("test", "documents", "private"),
        ("test", "images", "private"),
    ]
    assert sorted(listed(max_depth=2)) == [("prod", "documents"), ("test", "documents"), ("test", "images")]
    page1, page2 = listed(limit=3), listed(limit=3, offset=3)
    assert len(page1) == 3 and len(page2) == 3 and not set(page1) & set(page2)


@pytest.mark.parametrize("mode", MODES)
def test_list_namespaces_prefix_suffix_depth_and_pages(app_url: str, mode: str) -> None:
    with sync_store(app_url, mode) as store:
        for ns in _namespaces():
            store.put(ns, "dummy", {"content": "dummy"})
        _check_listing(store.list_namespaces)
        for ns in _namespaces():
            store.delete(ns, "dummy")
        assert store.list_namespaces() == []


def test_alist_namespaces_prefix_suffix_depth_and_pages(app_url: str) -> None:
    async def main() -> None:
        async with async_store(app_url, "pool") as store:
            await asyncio.gather(*(store.aput(ns, "dummy", {"content": "dummy"}) for ns in _namespaces()))
            results: dict[str, list[tuple[str, ...]]] = {}
            calls = {
                "all": {},
                "test": {"prefix": ("test",)},
                "public": {"suffix": ("public",)},
                "depth": {"max_depth": 2},
            }
            for name, kw in calls.items():
                results[name] = await store.alist_namespaces(**kw)  # type: ignore[arg-type]
            assert sorted(results["all"]) == sorted(_namespaces())
            assert all(n[0] == "test" for n in results["test"]) and len(results["test"]) == 4
            assert all(n[-1] == "public" for n in results["public"]) and len(results["public"]) == 3
            assert sorted(results["depth"]) == [("prod", "documents"), ("test", "documents"), ("test", "images")]

    asyncio.run(main())


def _docs() -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [
        (("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "score": 2}),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "score": 9}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "score": 10}),
        (("test", "images"), "img2", {"title": "Image 2", "author": "Carol", "score": 11.5}),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_get_put_delete_and_search_without_a_query(app_url: str, mode: str) -> None:
    with sync_store(app_url, mode) as store:
        for ns, key, value in _docs():
            store.put(ns, key, value)
        first = store.get(("test", "docs"), "doc1")
        assert first is not None and first.value["title"] == "First Doc"
        store.put(("test", "docs"), "doc1", {"title": "Updated", "author": "Alice", "score": 2})
        again = store.get(("test", "docs"), "doc1")
        assert again is not None and again.value["title"] == "Updated" and again.updated_at > first.updated_at
        assert again.created_at == first.created_at
        assert store.get(("test", "other"), "doc1") is None
        assert len(store.search(("test",))) == 4
        assert {i.key for i in store.search(("test", "docs"))} == {"doc1", "doc2"}
        assert {i.key for i in store.search(("test",), filter={"author": "Alice"})} == {"doc1", "img1"}
        assert {i.key for i in store.search(("test",), filter={"score": {"$gte": 10}})} == {"img1", "img2"}
        assert {i.key for i in store.search(("test",), filter={"score": {"$lt": 10}})} == {"doc1", "doc2"}
        assert {i.key for i in store.search(("test",), filter={"author": {"$ne": "Alice"}})} == {"doc2", "img2"}
        page1, page2 = store.search(("test",), limit=2), store.search(("test",), limit=2, offset=2)
        assert len(page1) == 2 and len(page2) == 2 and not {i.key for i in page1} & {i.key for i in page2}
        assert all(i.score is None for i in page1)
        store.delete(("test", "docs"), "doc1")
        assert store.get(("test", "docs"), "doc1") is None
        assert len(store.search(("test",), limit=10)) == 3


@pytest.mark.parametrize("mode", MODES)
def test_async_get_put_delete_and_search_without_a_query(app_url: str, mode: str) -> None:
    async def main() -> None:
        async with async_store(app_url, mode) as store:
            for ns, key, value in _docs():
                await store.aput(ns, key, value)
            got = await store.aget(("test", "images"), "img2")
            assert got is not None and got.value["score"] == 11.5
            assert {i.key for i in await store.asearch(("test",), filter={"score": {"$gt": 9}})} == {"img1", "img2"}
            assert len(await store.asearch(("test",), limit=2, offset=3)) == 1
            await store.adelete(("test", "images"), "img2")
            assert await store.aget(("test", "images"), "img2") is None

    asyncio.run(main())


# -- vector search with each index config --------------------------------------------------


def _vector_index(emb: Any, distance: str, **extra: Any) -> dict[str, Any]:
    return {"dims": 64, "embed": emb, "distance_type": distance, **extra}


@pytest.mark.parametrize("distance", DISTANCES)
def test_vector_scores_are_postgres_store_s_for_each_distance_type(app_url: str, distance: str) -> None:
    emb = WordEmbeddings()
    with sync_store(app_url, "conn", index=_vector_index(emb, distance, fields=["text"])) as store:
        assert store.index_config is not None and store.index_config["embed"] is emb
        docs = {"d1": "red apple pie", "d2": "red sports car", "d3": "green apple tree", "d4": "blue car wash"}
        store.batch([PutOp(("v",), k, {"text": t, "n": i}) for i, (k, t) in enumerate(docs.items())])
        assert emb.calls == 1 and emb.texts == 4  # one request for the whole batch
        results = store.search(("v",), query="apple", limit=10)
        q = emb.vector("apple")
        want = sorted(((expected_score(distance, q, emb.vector(t)), k) for k, t in docs.items()), reverse=True)
        assert [r.key for r in results] == [k for _, k in want]
        for r, (s, _) in zip(results, want, strict=True):
            assert r.score == pytest.approx(s, rel=1e-4, abs=1e-4)
        # with a filter, every match, still ranked
        red = store.search(("v",), query="apple", filter={"text": {"$ne": "blue car wash"}, "n": {"$lte": 1}})
        assert [r.key for r in red] == [k for _, k in want if k in ("d1", "d2")]
        # pages are stable
        page1, page2 = store.search(("v",), query="car", limit=2), store.search(("v",), query="car", limit=2, offset=2)
        assert [r.key for r in page1 + page2] == [r.key for r in store.search(("v",), query="car", limit=4)]


def test_fields_give_one_vector_per_text_and_an_item_scores_its_best_field(app_url: str) -> None:
    emb = WordEmbeddings()
    with sync_store(app_url, "pool", index=_vector_index(emb, "cosine", fields=["key0", "key1", "key3"])) as store:
        store.put(("f",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})  # no key0: not an error
        store.put(("f",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
        both = store.search(("f",), query="xxx")
        assert len(both) == 2 and both[0].score == pytest.approx(1.0, abs=1e-4)
        assert both[1].score == pytest.approx(1.0, abs=1e-4)
        assert store.search(("f",), query="uuu")[0].key == "doc2"
        assert store.search(("f",), query="zzz")[0].key == "doc1"
        # key2 is not indexed: both items come back (an exact scan, no floor), neither near 1
        www = store.search(("f",), query="www")
        assert {r.key for r in www} == {"doc1", "doc2"} and all((r.score or 0) < 0.9 for r in www), www
        # a put's own index paths, and index=False (a plain row, listed but never a vector hit)
        store.put(("f",), "doc3", {"key0": "aaa", "key5": "ggg"}, index=["key5"])
        assert store.search(("f",), query="ggg")[0].key == "doc3"
        store.put(("f",), "doc4", {"key1": "ggg"}, index=False)
        assert "doc4" not in {r.key for r in store.search(("f",), query="ggg")}
        assert "doc4" in {r.key for r in store.search(("f",))}
        # paths holding several texts are named path.i, as PostgresStore names them
        store.put(("f",), "doc5", {"key0": ["one", "two"]}, index=["key0[*]"])
        with psycopg.connect(app_url, autocommit=True) as c, c.transaction():
            c.execute("SELECT set_config('pgmem.scope', %s, true)", (namespace_scope(("f",)),))
            rows = c.execute("SELECT field_path FROM pgmem.store_vector WHERE item_key = 'doc5' ORDER BY 1").fetchall()
        assert rows == [("key0[*].0",), ("key0[*].1",)]


def test_an_update_re_embeds_and_a_whole_value_index_embeds_the_json(app_url: str) -> None:
    emb = WordEmbeddings()
    with sync_store(app_url, "conn", index=_vector_index(emb, "cosine")) as store:  # fields default: $
        store.put(("u",), "doc1", {"text": "zany zebra Xerxes"})
        store.put(("u",), "doc2", {"text": "something about dogs"})
        before = store.search(("u",), query="zany Xerxes")
        assert before[0].key == "doc1"
        store.put(("u",), "doc1", {"text": "new text about dogs"})
        after = {r.key: r.score for r in store.search(("u",), query="zany Xerxes")}
        assert (after["doc1"] or 0) < (before[0].score or 0)
        assert len(store.search(("u",), query="")) == 2  # no query: a listing, no scores
        assert all(r.score is None for r in store.search(("u",), query=None))


@pytest.mark.parametrize("distance", DISTANCES)
def test_async_vector_search_for_each_distance_type(app_url: str, distance: str) -> None:
    emb = WordEmbeddings()

    async def main() -> None:
        async with async_store(app_url, "pool", index=_vector_index(emb, distance, fields=["text"])) as store:
            docs = [
                ("doc1", "red apple", "red", 4.5),
                ("doc2", "red car", "red", 3.0),
                ("doc3", "green apple", "green", 4.0),
            ]
            await asyncio.gather(*(store.aput(("t",), k, {"text": t, "color": c, "score": s}) for k, t, c, s in docs))
            found = await store.asearch(("t",), query="apple", filter={"color": "red"})
            assert [r.key for r in found][:1] == ["doc1"] and len(found) == 2
            q = emb.vector("apple")
            assert found[0].score == pytest.approx(expected_score(distance, q, emb.vector("red apple")), abs=1e-4)
            assert [
                r.key
                for r in await store.asearch(("t",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
            ] == ["doc3"]

    asyncio.run(main())


def test_embed_as_sync_and_async_functions(app_url: str) -> None:
    emb = WordEmbeddings()

    def sync_fn(texts: list[str]) -> list[list[float]]:
        return emb.embed_documents(texts)

    async def async_fn(texts: list[str]) -> list[list[float]]:
        return emb.embed_documents(texts)

    with sync_store(app_url, "conn", index={"dims": 64, "embed": sync_fn, "fields": ["text"]}) as store:
        store.put(("fn", "sync"), "a", {"text": "the red apple"})
        assert store.search(("fn", "sync"), query="apple")[0].key == "a"
    with pytest.raises(ConfigError, match="async function") as err:
        PgmemStore(psycopg.connect(app_url, autocommit=True), index={"dims": 64, "embed": async_fn})
    assert "\n" not in str(err.value)

    async def main() -> None:
        async with async_store(app_url, "conn", index={"dims": 64, "embed": async_fn, "fields": ["text"]}) as store:
            await store.aput(("fn", "async"), "a", {"text": "the blue car"})
            assert (await store.asearch(("fn", "async"), query="car"))[0].key == "a"

    asyncio.run(main())


def test_another_model_on_a_namespace_is_a_one_line_error_and_nothing_is_stored(app_url: str) -> None:
    with sync_store(app_url, "conn", index=_vector_index(WordEmbeddings(model="words-v1"), "cosine")) as store:
        store.put(("m",), "a", {"text": "first"})
    other = WordEmbeddings(model="words-v2")
    with sync_store(app_url, "conn", index=_vector_index(other, "cosine")) as store:
        with pytest.raises(ModelMismatchError, match="words-v1") as err:
            store.put(("m",), "b", {"text": "second"})
        assert "\n" not in str(err.value) and other.calls == 0  # refused before embedding
        # A search too: a ModelMismatchError (ModelRefusedError from store_search's 22000; an
        # ArgumentError before, which `except ModelMismatchError` missed).
        with pytest.raises(ModelMismatchError, match="words-v1") as err:
            store.search(("m",), query="first")
        assert isinstance(err.value, ModelRefusedError) and "\n" not in str(err.value)
        assert store.get(("m",), "b") is None
    # pgmem's own pieces cannot be mixed into a namespace of field vectors either, nor field
    # vectors into a namespace of pieces
    with sync_store(app_url, "conn") as store, pytest.raises(ModelMismatchError, match="field vectors"):
        store.put(("m",), "c", {"text": "third"})
    with sync_store(app_url, "conn") as store:
        store.put(("pieces",), "a", {"text": "stored as pieces"})
    with (
        sync_store(app_url, "conn", index=_vector_index(other, "cosine")) as store,
        pytest.raises(ModelMismatchError, match="pieces"),
    ):
        store.put(("pieces",), "b", {"text": "a field vector"})


def test_hostile_embeddings_are_one_line_errors_and_nothing_is_stored(app_url: str) -> None:
    bad: dict[str, Callable[[list[str]], Any]] = {
        "shape": lambda texts: [[0.0, 1.0]] * (len(texts) + 1),
        "nan": lambda texts: [[float("nan")] * 64 for _ in texts],
        "dims": lambda texts: [[1.0] * 8 for _ in texts],
        "type": lambda texts: "not vectors",
        "raises": lambda texts: 1 / 0,
    }
    for name, fn in bad.items():
        with sync_store(app_url, "conn", index={"dims": 64, "embed": fn}) as store:
            with pytest.raises(PgmemError) as err:
                store.put(("h", name), "k", {"text": "hello"})
            assert "\n" not in str(err.value) and isinstance(err.value, EmbeddingError | ConfigError), name
            assert store.get(("h", name), "k") is None
    with pytest.raises(ConfigError, match="langchain") as cerr:
        PgmemStore(
            psycopg.connect(app_url, autocommit=True), index={"dims": 1536, "embed": "openai:text-embedding-3-small"}
        )
    assert "\n" not in str(cerr.value)


# -- TTL, async ----------------------------------------------------------------------------


def test_async_ttl_refresh_on_read_and_the_sweeper(app_url: str, admin_conn: Conn) -> None:
    ns = ("ttl", "async")

    def expire(key: str) -> None:
        admin_conn.execute(
            "UPDATE pgmem.store_item SET expires_at = now() - interval '1 second' "
            "WHERE scope_id = %s AND item_key = %s",
            (namespace_scope(ns), key),
        )

    def expiry(key: str) -> Any:
        row = admin_conn.execute(
            "SELECT expires_at FROM pgmem.store_item WHERE scope_id = %s AND item_key = %s", (namespace_scope(ns), key)
        ).fetchone()
        return row[0] if row else None

    async def main() -> None:
        ttl = {"default_ttl": 60, "refresh_on_read": True, "sweep_interval_minutes": 0.5 / 60}
        async with async_store(app_url, "pool", ttl=ttl) as store:
            await store.aput(ns, "a", {"text": "the red apple"})
            await store.aput(ns, "b", {"text": "the blue car"}, ttl=None)
            first = expiry("a")
            await store.aget(ns, "a")
            assert expiry("a") > first  # refreshed on read
            moved = expiry("a")
            await store.aget(ns, "a", refresh_ttl=False)
            assert expiry("a") == moved
            expire("a")
            assert await store.aget(ns, "a") is None  # invisible at once
            assert [i.key for i in await store.asearch(ns, query="red apple")] == ["b"]
            task = await store.start_ttl_sweeper()
            assert (await store.start_ttl_sweeper()) is task
            for _ in range(100):
                if expiry("a") is None and admin_conn.execute(
                    "SELECT count(*) FROM pgmem.store_item WHERE scope_id = %s", (namespace_scope(ns),)
                ).fetchone() == (1,):
                    break
                await asyncio.sleep(0.1)
            assert admin_conn.execute(
                "SELECT item_key FROM pgmem.store_item WHERE scope_id = %s", (namespace_scope(ns),)
            ).fetchall() == [("b",)]
            assert await store.stop_ttl_sweeper(timeout=5)
            assert task.done()
            assert await store.sweep_ttl() == 0

    asyncio.run(main())


# -- the async store's sync methods, connections, concurrency -------------------------------


def test_async_store_sync_methods_refuse_the_loop_thread_and_work_from_others(app_url: str) -> None:
    async def main() -> None:
        async with async_store(app_url, "conn") as store:
            with pytest.raises(asyncio.InvalidStateError):
                store.put(("foo", "bar"), "baz", {"val": "baz"})
            with pytest.raises(asyncio.InvalidStateError):
                store.batch([GetOp(("foo",), "baz")])
            with ThreadPoolExecutor(max_workers=1) as pool:
                await asyncio.wrap_future(pool.submit(store.put, ("foo", "bar"), "baz", {"val": "baz"}))
                got = await asyncio.wrap_future(pool.submit(store.get, ("foo", "bar"), "baz"))
                assert got is not None and got.value == {"val": "baz"}
                assert await asyncio.wrap_future(pool.submit(store.list_namespaces, prefix=("foo",))) == [
                    ("foo", "bar")
                ]

    asyncio.run(main())


def test_the_stores_refuse_the_other_driver_s_connections(app_url: str) -> None:
    with psycopg.connect(app_url, autocommit=True) as c, pytest.raises(ConfigError, match="AsyncPgmemStore takes"):

        async def make() -> None:
            AsyncPgmemStore(c, embedder=HashEmbedder())

        asyncio.run(make())

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as ac:
            with pytest.raises(ConfigError, match="PgmemStore takes"):
                PgmemStore(ac, embedder=HashEmbedder())

    asyncio.run(main())


def test_a_dict_row_connection_works_as_postgres_store_s_does(app_url: str) -> None:
    from psycopg.rows import dict_row

    with psycopg.connect(app_url, autocommit=True, row_factory=dict_row) as c:
        store = PgmemStore(c, embedder=HashEmbedder())
        store.put(("rows",), "k", {"text": "dict rows"})
        got = store.get(("rows",), "k")
        assert got is not None and got.value == {"text": "dict rows"}
        assert [i.key for i in store.search(("rows",), query="dict rows")] == ["k"]


def _four_clients(store: PgmemStore, batches: Callable[[int], Iterable[list[Any]]]) -> None:
    """Clients 0..3 on four threads at once, each sending store.batch(b) for b in batches(c);
    none may raise, and batches of two clients must have run at the same time (else nothing
    raced)."""
    errors: list[BaseException] = []
    flight = InFlight()  # batches in flight

    def run(c: int) -> None:
        try:
            for batch in batches(c):
                with flight():
                    store.batch(batch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors[:3]
    assert flight.most >= 2, "no two clients' batches ran at the same time"


def _client_ops(client: int, n: int) -> list[list[Any]]:
    """n ops in batches of 100: puts of shared keys (each client in its own order), deletes,
    gets and searches, so concurrent batches write the same items."""
    ops: list[Any] = []
    for i in range(n):
        key = f"k{(i * (client + 1)) % 50}"
        ns = ("load", f"n{i % 3}")
        kind = i % 5
        if kind < 3:
            ops.append(PutOp(ns, key, {"text": f"client {client} item {i} about apples", "c": client}))
        elif kind == 3:
            ops.append(PutOp(ns, key, None))
        else:
            ops.append(GetOp(ns, key) if i % 2 else SearchOp(("load",), query="apples", limit=5))
    return [ops[i : i + 100] for i in range(0, n, 100)]


def _check_load(store_items: list[Any]) -> None:
    for it in store_items:
        assert it.value["text"].startswith(f"client {it.value['c']} ")


def test_concurrent_batches_through_a_pool_do_not_deadlock(app_url: str) -> None:
    """4 clients x 800 ops, each batch in one transaction, the same keys in every client."""
    with sync_store(app_url, "pool") as store:
        _four_clients(store, lambda c: _client_ops(c, 800))
        items = store.search(("load",), limit=1000)
        assert items and len({(i.namespace, i.key) for i in items}) == len(items)
        _check_load(items)
        found = store.search(("load",), query="apples", limit=1000)
        assert {(i.namespace, i.key) for i in found} == {(i.namespace, i.key) for i in items}


def test_concurrent_async_clients_through_a_pool_do_not_deadlock(app_url: str) -> None:
    async def main() -> None:
        async with async_store(app_url, "pool") as store:
            flight = InFlight()  # batches in flight

            async def client(c: int) -> None:
                for batch in _client_ops(c, 800):
                    with flight():
                        await store.abatch(batch)

            await asyncio.gather(*(client(c) for c in range(4)))
            assert flight.most >= 2, "no two clients' batches ran at the same time"
            # single ops gathered by LangGraph's batching, as test_large_batches_async sends them
            coros = []
            for i in range(250):
                ns = ("load", f"n{i % 2}")
                coros += [
                    store.aput(ns, f"g{i}", {"text": f"gathered {i}", "c": -1}),
                    store.aget(ns, f"g{i}"),
                    store.asearch(("load",)),
                    store.adelete(ns, f"g{i}"),
                ]
            assert len(await asyncio.gather(*coros)) == 1000
            items = await store.asearch(("load",), limit=1000)
            assert not any(i.key.startswith("g") for i in items)
            for it in items:
                assert it.value["text"].startswith(f"client {it.value['c']} ")

    asyncio.run(main())


# -- embedding across a batch, unchanged text ----------------------------------------------


def test_a_batch_of_puts_is_embedded_in_one_request_and_unchanged_text_is_not_embedded_again(app_url: str) -> None:
    emb = HashEmbedder()
    with sync_store(app_url, "conn", embedder=emb) as store:
        ops = [PutOp(("e",), f"k{i}", {"text": f"memory number {i}"}) for i in range(20)]
        store.batch(ops)
        assert emb.calls == 1
        store.batch(ops)  # the same values again: nothing to embed
        assert emb.calls == 1
        store.batch([*ops[:19], PutOp(("e",), "k19", {"text": "a changed memory"})])
        assert emb.calls == 2
        got = store.get(("e",), "k19")
        assert got is not None and got.value == {"text": "a changed memory"}


def test_concurrent_batches_of_field_vectors_do_not_deadlock(app_url: str) -> None:
    """The field-vector write path (put_item, then put_item_vectors) under 4 clients x 500 ops."""
    emb = WordEmbeddings()
    with sync_store(app_url, "pool", index=_vector_index(emb, "inner_product", fields=["text"])) as store:
        _four_clients(store, lambda c: _client_ops(c, 500))
        items = store.search(("load",), limit=1000)
        _check_load(items)
        found = store.search(("load",), query="apples", limit=1000)
        assert {(i.namespace, i.key) for i in found} == {(i.namespace, i.key) for i in items}
        q = emb.vector("apples")
        for it in found:
            assert it.score == pytest.approx(expected_score("inner_product", q, emb.vector(it.value["text"])), abs=1e-3)


# -- field vectors: unchanged text is not embedded again -----------------------------------------


def _vector_rows(app_url: str, ns: tuple[str, ...]) -> dict[str, list[tuple[Any, ...]]]:
    """Each item's field vectors: (field_no, field_path, text_hash, xmin), in field order. xmin
    changes when a row is written again, so an equal xmin means the vector was kept."""
    with psycopg.connect(app_url, autocommit=True) as c, c.transaction():
        c.execute("SELECT set_config('pgmem.scope', %s, true)", (namespace_scope(ns),))
        rows = c.execute(
            """SELECT item_key, field_no, field_path, text_hash, xmin::text FROM pgmem.store_vector
                WHERE scope_id = %s ORDER BY item_key, field_no""",
            (namespace_scope(ns),),
        ).fetchall()
    out: dict[str, list[tuple[Any, ...]]] = {}
    for key, *rest in rows:
        out.setdefault(str(key), []).append(tuple(rest))
    return out


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def _spent(emb: WordEmbeddings, write: Callable[[], object]) -> tuple[int, int]:
    """The embedding requests and texts a write cost (a search's query is a request too)."""
    calls, texts = emb.calls, emb.texts
    write()
    return emb.calls - calls, emb.texts - texts


async def _aspent(emb: WordEmbeddings, write: Any) -> tuple[int, int]:
    calls, texts = emb.calls, emb.texts
    await write
    return emb.calls - calls, emb.texts - texts


def test_a_text_held_twice_is_embedded_once_by_either_store(app_url: str) -> None:
    """PgmemStore sends each distinct text of a batch to the model once (embed_side); the async
    store sent every copy to `aembed_documents` (two items of one text, or one item holding it in
    two fields: two inputs, paid twice, and a provider could give the copies two vectors)."""
    values = {"a": {"text": "same words"}, "b": {"text": "same words"}}
    emb = WordEmbeddings()
    with sync_store(app_url, "conn", index=_vector_index(emb, "cosine")) as store:
        assert _spent(emb, lambda: store.batch([PutOp(("twice",), k, v) for k, v in values.items()])) == (1, 1)

    async def main() -> tuple[int, int]:
        aemb = WordEmbeddings()
        async with async_store(app_url, "conn", index=_vector_index(aemb, "cosine")) as astore:
            return await _aspent(aemb, astore.abatch([PutOp(("twice-a",), k, v) for k, v in values.items()]))

    assert asyncio.run(main()) == (1, 1)


def test_a_re_put_of_the_same_field_texts_embeds_nothing_and_keeps_the_vectors(app_url: str) -> None:
    emb = WordEmbeddings()
    ns = ("skip",)
    index = _vector_index(emb, "cosine", fields=["text", "tags[*]"])
    values = {
        "a": {"text": "red apple pie", "tags": ["fruit", "baking"], "n": 1},
        "b": {"text": "blue car wash", "tags": ["car"], "n": 2},
    }
    with sync_store(app_url, "conn", index=index) as store:
        assert _spent(emb, lambda: store.batch([PutOp(ns, k, v) for k, v in values.items()])) == (1, 5)
        before, scored = _vector_rows(app_url, ns), store.search(ns, query="apple pie")
        assert [r[1:3] for r in before["a"]] == [
            ("text", _sha("red apple pie")),
            ("tags[*].0", _sha("fruit")),
            ("tags[*].1", _sha("baking")),
        ]
        # The same values again, one by one and as a batch: no request, the same rows.
        assert _spent(emb, lambda: store.put(ns, "a", values["a"])) == (0, 0)
        assert _spent(emb, lambda: store.batch([PutOp(ns, k, v) for k, v in values.items()])) == (0, 0)
        assert _vector_rows(app_url, ns) == before
        again = store.search(ns, query="apple pie")
        assert [(r.key, r.score) for r in again] == [(r.key, r.score) for r in scored]
        # A changed value whose indexed texts are unchanged keeps its vectors too.
        assert _spent(emb, lambda: store.put(ns, "a", {**values["a"], "n": 99, "extra": "not indexed"})) == (0, 0)
        assert _vector_rows(app_url, ns) == before
        got = store.get(ns, "a")
        assert got is not None and got.value["n"] == 99
        assert store.search(ns, query="apple pie")[0].score == scored[0].score
        # A changed text: only that item's texts are embedded, its vectors written again.
        changed = [
            PutOp(ns, "a", {"text": "green apple tree", "tags": ["fruit", "baking"]}),
            PutOp(ns, "b", values["b"]),
        ]
        assert _spent(emb, lambda: store.batch(changed)) == (1, 3)
        after = _vector_rows(app_url, ns)
        assert after["b"] == before["b"] and after["a"][0][2] == _sha("green apple tree")
        assert all(x[3] != y[3] for x, y in zip(after["a"], before["a"], strict=True))
        want = expected_score("cosine", emb.vector("apple tree"), emb.vector("green apple tree"))
        assert store.search(ns, query="apple tree")[0].score == pytest.approx(want, abs=1e-4)
        # Other index paths for the same value: other fields, embedded again.
        assert _spent(emb, lambda: store.put(ns, "b", values["b"], index=["text"])) == (1, 1)
        assert [r[1] for r in _vector_rows(app_url, ns)["b"]] == ["text"]
        # index=False drops the vectors (PostgresStore: a plain row); the next indexed put embeds.
        assert _spent(emb, lambda: store.put(ns, "b", values["b"], index=False)) == (0, 0)
        assert "b" not in _vector_rows(app_url, ns) and "b" not in {r.key for r in store.search(ns, query="car wash")}
        assert "b" in {r.key for r in store.search(ns)}
        assert _spent(emb, lambda: store.put(ns, "b", values["b"])) == (1, 2)
        assert store.search(ns, query="car wash")[0].key == "b"
        # A value without any indexed text keeps no vector either.
        assert _spent(emb, lambda: store.put(ns, "b", {"other": "no text here"})) == (0, 0)
        assert "b" not in _vector_rows(app_url, ns)


def test_async_re_puts_of_the_same_field_texts_embed_nothing(app_url: str) -> None:
    emb = WordEmbeddings()
    ns = ("askip",)

    async def main() -> None:
        async with async_store(app_url, "pool", index=_vector_index(emb, "l2", fields=["text"])) as store:
            docs = {f"k{i}": {"text": f"memory {i} about apples"} for i in range(6)}
            assert await _aspent(emb, store.abatch([PutOp(ns, k, v) for k, v in docs.items()])) == (1, 6)
            before, scored = _vector_rows(app_url, ns), await store.asearch(ns, query="memory 3", limit=3)
            gathered = asyncio.gather(*(store.aput(ns, k, v) for k, v in docs.items()))  # one batch
            assert await _aspent(emb, gathered) == (0, 0)
            assert await _aspent(emb, store.aput(ns, "k0", {"text": "memory 0 about apples", "seen": True})) == (0, 0)
            assert _vector_rows(app_url, ns) == before
            assert [(r.key, r.score) for r in await store.asearch(ns, query="memory 3", limit=3)] == [
                (r.key, r.score) for r in scored
            ]
            assert await _aspent(emb, store.aput(ns, "k1", {"text": "memory 1 about pears"})) == (1, 1)
            await store.aput(ns, "k2", docs["k2"], index=False)
            assert "k2" not in _vector_rows(app_url, ns)

    asyncio.run(main())


def test_a_put_that_found_its_vectors_current_and_lost_them_to_a_concurrent_put_embeds_after_all(
    app_url: str,
) -> None:
    """The check before embedding takes no lock; put_item decides again under the item's lock
    (keep_vectors). A concurrent put changes the item between the two: put_item raises 40001,
    the batch runs again and embeds the text then. A SQL caller gets the same 40001."""
    emb, other = WordEmbeddings(), WordEmbeddings()
    ns = ("race",)
    index = _vector_index(emb, "cosine", fields=["text"])
    with (
        sync_store(app_url, "conn", index=index) as store,
        sync_store(app_url, "conn", index=_vector_index(other, "cosine", fields=["text"])) as rival,
    ):
        store.put(ns, "k", {"text": "first words"})
        _, _, writes = store._plan([PutOp(ns, "k", {"text": "first words"})])

        def interfered(call: Any) -> Any:
            step, done = next(call), False
            while True:
                if not done and "pgmem.put_item(" in getattr(step, "sql", ""):
                    rival.put(ns, "k", {"text": "second words"})  # commits before this put locks the item
                    done = True
                try:
                    step = call.send((yield step))
                except StopIteration as stop:
                    return stop.value

        make = store._writes_calls(writes)
        store._run(lambda: interfered(make()))
        assert (emb.calls, emb.texts) == (2, 2) and other.calls == 1  # the run again: one text
        rows = _vector_rows(app_url, ns)["k"]
        assert [r[1:3] for r in rows] == [("text", _sha("first words"))]
        assert store.search(ns, query="first words")[0].score == pytest.approx(1.0, abs=1e-4)
        assert store.field_embedder is not None
        model = store.field_embedder.model_id

    with psycopg.connect(app_url) as c:
        c.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
        c.execute("SELECT set_config('pgmem.scope', %s, true)", (namespace_scope(ns),))
        with pytest.raises(psycopg.errors.SerializationFailure, match="changed since they were read as current"):
            c.execute(
                "SELECT * FROM pgmem.put_item(%s, %s, 'k', %s::jsonb, model_id => %s, field_paths => '{text}',"
                " text_hashes => %s, keep_vectors => true)",
                (namespace_scope(ns), list(ns), '{"text": "third words"}', model, [_sha("third words")]),
            )
        c.rollback()
    assert [r[1:3] for r in _vector_rows(app_url, ns)["k"]] == [("text", _sha("first words"))]


def test_a_put_of_field_vectors_waits_for_its_read_and_its_commit_only(app_url: str, tmp_path: Path) -> None:
    """With field vectors nothing after the read of which vectors are current is waited for
    (Query.wait): a put and a batch of three (an unchanged put, a new one, a delete) each wait
    twice, counted in libpq's trace (4 and 6 before), and store what they did before."""
    emb = WordEmbeddings()
    ns = ("waits",)
    with sync_store(app_url, "conn", index=_vector_index(emb, "cosine", fields=["text"])) as store:
        store.put(ns, "warm", {"text": "the connection's types are read once, before"})
        conn = store._conn
        assert isinstance(conn, psycopg.Connection)
        trace = tmp_path / "libpq.trace"
        waits: list[tuple[int, tuple[int, int]]] = []
        with trace.open("w") as f:
            conn.pgconn.trace(f.fileno())
            try:
                for op in (
                    lambda: store.put(ns, "a", {"text": "one apple"}),
                    lambda: store.batch(
                        [
                            PutOp(ns, "a", {"text": "one apple"}),
                            PutOp(ns, "b", {"text": "two pears"}),
                            PutOp(ns, "warm", None),
                        ]
                    ),
                ):
                    before = sent(trace, "Sync", "Flush", "Query")
                    spent = _spent(emb, op)
                    waits.append((sent(trace, "Sync", "Flush", "Query") - before, spent))
            finally:
                conn.pgconn.untrace()
        assert waits == [(2, (1, 1)), (2, (1, 1))]  # the unchanged put embeds nothing
        assert sorted(_vector_rows(app_url, ns)) == ["a", "b"]
        assert [i.key for i in store.search(ns, query="two pears", limit=1)] == ["b"]


def test_concurrent_re_puts_of_the_same_keys_leave_one_set_of_vectors_per_item(app_url: str) -> None:
    """4 clients re-put the same 20 keys, mostly with the value already stored, sometimes with
    another text: no deadlock, no error, and each item ends with exactly the vectors of its own
    value's texts."""
    emb = WordEmbeddings()
    ns = ("same",)
    index = _vector_index(emb, "inner_product", fields=["text", "tags[*]"])

    def value(k: int, variant: int) -> dict[str, Any]:
        return {"text": f"item {k} variant {variant} apples", "tags": [f"t{k}", f"v{variant}"]}

    with sync_store(app_url, "pool", index=index) as store:
        store.batch([PutOp(ns, f"k{k}", value(k, 0)) for k in range(20)])

        def batches(c: int) -> Iterator[list[Any]]:
            for round_ in range(25):
                order = [(k * (c + 1) + round_) % 20 for k in range(20)]
                yield [PutOp(ns, f"k{k}", value(k, 1 if (k + round_ + c) % 7 == 0 else 0)) for k in order]

        _four_clients(store, batches)
        rows = _vector_rows(app_url, ns)
        items = {i.key: i.value for i in store.search(ns, limit=100)}
        assert set(rows) == set(items) and len(items) == 20
        for key, v in items.items():
            texts = [v["text"], *v["tags"]]
            assert [r[:3] for r in rows[key]] == [
                (i, p, _sha(t)) for i, (p, t) in enumerate(zip(["text", "tags[*].0", "tags[*].1"], texts, strict=True))
            ]
        q = emb.vector("apples")
        for it in store.search(ns, query="apples", limit=100):
            best = max(expected_score("inner_product", q, emb.vector(t)) for t in [it.value["text"], *it.value["tags"]])
            assert it.score == pytest.approx(best, abs=1e-3)


def test_a_re_put_of_pieces_embeds_nothing_and_writes_no_piece(app_url: str, admin_conn: Conn) -> None:
    """pgmem's own path: an unchanged turn (its content hash) is skipped before put_turn, so a
    re-put neither embeds nor rewrites the turn or its pieces; a batch's turns share a request."""
    emb = HashEmbedder()
    ns = ("pskip",)

    def rows() -> list[tuple[Any, ...]]:
        return admin_conn.execute(
            """SELECT 'turn', thread_id, xmin::text FROM pgmem.turn WHERE scope_id = %(s)s
               UNION ALL SELECT 'piece', piece_id::text, xmin::text FROM pgmem.piece WHERE scope_id = %(s)s
               ORDER BY 1, 2""",
            {"s": namespace_scope(ns)},
        ).fetchall()

    with sync_store(app_url, "pool", embedder=emb, index={"fields": ["text"]}) as store:
        values = {f"k{i}": {"text": f"a memory about item {i}. It has two sentences."} for i in range(8)}
        store.batch([PutOp(ns, k, v) for k, v in values.items()])
        assert emb.calls == 1
        before = rows()
        assert len([r for r in before if r[0] == "piece"]) >= 8
        store.batch([PutOp(ns, k, v) for k, v in values.items()])
        store.put(ns, "k0", {**values["k0"], "n": 1})  # another value, the same indexed text
        assert emb.calls == 1 and rows() == before
        store.put(ns, "k1", {"text": "a changed memory"})
        assert emb.calls == 2 and rows() != before


@pytest.mark.parametrize(
    ("sql", "args", "expect"),
    [
        (
            "SELECT * FROM pgmem.store_vectors_current(%s, 'm', '{a,b}', '{1}', '{p}', ARRAY['\\x00'::bytea])",
            (),
            "2 item keys, 1 field counts",
        ),
        (
            "SELECT * FROM pgmem.store_vectors_current(%s, 'm', '{a}', '{2}', '{p}', ARRAY['\\x00'::bytea])",
            (),
            "summing to 2",
        ),
        ("SELECT * FROM pgmem.store_vectors_current(%s, 'm', '{a}', '{-1}', '{}', '{}')", (), "counts >= 0"),
        (
            "SELECT * FROM pgmem.store_vectors_current(%s, 'm', '{a}', ARRAY[NULL]::int[], '{}', '{}')",
            (),
            "one count per key",
        ),
    ],
)
def test_store_vectors_current_refuses_arrays_that_do_not_line_up(
    app_url: str, sql: str, args: tuple[Any, ...], expect: str
) -> None:
    with psycopg.connect(app_url, autocommit=True) as c, c.transaction():
        c.execute("SELECT set_config('pgmem.scope', 'vcur', true)")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            c.execute(sql, ("vcur", *args))
        message = err.value.diag.message_primary or ""
        assert expect in message and "\n" not in message


def test_put_item_vectors_refuses_hashes_that_are_not_one_sha256_per_vector(app_url: str) -> None:
    with psycopg.connect(app_url, autocommit=True) as c, c.transaction():
        c.execute("SELECT set_config('pgmem.scope', 'vhash', true)")
        c.execute("SELECT set_config('pgmem.store_directory', 'default', true)")
        c.execute("SELECT * FROM pgmem.put_item('vhash', '{vhash}', 'k', '{\"text\": \"x\"}'::jsonb)")
        for hashes in ("ARRAY['\\x00'::bytea]", "ARRAY[NULL]::bytea[]", "'{}'::bytea[]"):
            with c.transaction(force_rollback=True), pytest.raises(psycopg.errors.InvalidParameterValue) as err:
                c.execute(
                    f"SELECT pgmem.put_item_vectors('vhash', 'k', 'm', '{{text}}', ARRAY['[1,2]'::vector], {hashes})"
                )
            assert "one sha256 (32 bytes) per vector" in (err.value.diag.message_primary or "")
        # Without hashes the vectors are stored as before, and never found current.
        c.execute("SELECT pgmem.put_item_vectors('vhash', 'k', 'm', '{text}', ARRAY['[1,2]'::vector])")
        row = c.execute("SELECT pgmem.item_vectors_current('vhash', 'k', 'm', '{text}', ARRAY[sha256('x')])").fetchone()
        assert row == (False,)
