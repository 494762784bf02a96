"""PgmemStore and LangGraph's PostgresStore run side by side on the same calls, each on its own
database of the test server: where a call succeeds on PostgresStore, PgmemStore gives the same
answer (or, where docs/langgraph.md says why it differs, the one line it documents).

Real Postgres: PostgresStore as the superuser on a database of its own (it creates its tables),
PgmemStore as the application login on the test's migrated database."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.store.postgres", reason="the [langgraph] extra is not installed")

from langgraph.store.base import BaseStore, GetOp, PutOp, SearchOp
from langgraph.store.postgres import PostgresStore

from pgmem.errors import InputError
from pgmem.integrations.langgraph import PgmemStore
from tests.conftest import scratch_database
from tests.security_helpers import HashEmbedder
from tests.test_langgraph_parity import WordEmbeddings

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture
def lg_url(admin_conn: Conn) -> Iterator[str]:
    """A database of its own for a LangGraph PostgresStore, set up."""
    with scratch_database(admin_conn, "lgside") as url:
        with PostgresStore.from_conn_string(url) as lg:
            lg.setup()
        yield url


def _listing(store: BaseStore, prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return sorted((i.namespace, i.key, i.value) for i in store.search(prefix, limit=100))


#: Chat messages with no text in any of them: a tool call's step awaiting its result has a
#: null content, an image has no text part, a message may have an empty or no content.
NO_TEXT_MESSAGES: dict[str, list[dict[str, Any]]] = {
    "null content": [{"role": "user", "content": None}],
    "empty content": [{"role": "user", "content": ""}, {"role": "assistant", "content": "   "}],
    "no content": [{"role": "user"}],
    "image only": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}],
}


def test_chat_messages_without_text_are_stored_as_postgres_store_stores_them(lg_url: str, app_url: str) -> None:
    """An item whose indexed path holds chat messages with no text is stored (a plain row, no
    turn: the module's rule for an item with no text at its paths). It failed the whole batch
    ("the turn has no text in any message"), where PostgresStore stores it."""
    ns = ("chat",)
    with (
        PostgresStore.from_conn_string(lg_url) as lg,
        PgmemStore.from_conn_string(app_url, embedder=HashEmbedder(), index={"fields": ["messages"]}) as pm,
    ):
        for store in (lg, pm):
            store.put(ns, "kept", {"messages": [{"role": "user", "content": "the dog hates baths"}]})
            for key, messages in NO_TEXT_MESSAGES.items():
                store.put(ns, key, {"messages": messages})  # the store's fields
                store.put(ns, f"{key} (index)", {"messages": messages}, index=["messages"])  # the put's own
            store.batch(
                [PutOp(ns, "in a batch", {"messages": NO_TEXT_MESSAGES["null content"]}), PutOp(ns, "next", {"n": 1})]
            )
        assert _listing(pm, ns) == _listing(lg, ns)
        assert len(_listing(pm, ns)) == 2 * len(NO_TEXT_MESSAGES) + 3
        for key in NO_TEXT_MESSAGES:
            got = pm.get(ns, key)
            assert got is not None and got.value == {"messages": NO_TEXT_MESSAGES[key]}
        # Nothing to search in them: a query finds the item with text only.
        assert [i.key for i in pm.search(ns, query="which pet dislikes bathing?", limit=3)] == ["kept"]
        # An item put again with messages holding no text loses its turn, as with index=False.
        pm.put(ns, "kept", {"messages": NO_TEXT_MESSAGES["null content"]})
        assert pm.search(ns, query="which pet dislikes bathing?", limit=3) == []


#: Lists of chat messages in shapes pgmem's turns do not read: LangChain's own tool calls
#: (`name`, `args`, `id`, which LangChain accepts in a message dict), a content that is a number.
OTHER_SHAPES: dict[str, list[dict[str, Any]]] = {
    "langchain tool calls": [
        {"role": "user", "content": "what is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "weather", "args": {"city": "Paris"}, "id": "c1"}],
        },
        {"role": "tool", "content": "sunny in Paris", "tool_call_id": "c1"},
    ],
    "numeric content": [{"role": "user", "content": "the harbour crane count"}, {"role": "tool", "content": 5}],
    "tool_calls not a list": [{"role": "assistant", "content": "volcano eruption", "tool_calls": "none"}],
}


def test_chat_messages_of_other_shapes_are_stored_and_searched_as_text(lg_url: str, app_url: str) -> None:
    """A messages path whose list pgmem's turn check refuses (check_messages) failed the whole
    batch ("messages[1].tool_calls[0] must be an object whose function is an object with a
    string name"), where PostgresStore stores it; it is now indexed as the path's text."""
    ns = ("shapes",)
    with (
        PostgresStore.from_conn_string(lg_url) as lg,
        PgmemStore.from_conn_string(app_url, embedder=HashEmbedder(), index={"fields": ["messages"]}) as pm,
    ):
        for store in (lg, pm):
            store.batch([PutOp(ns, key, {"messages": messages}) for key, messages in OTHER_SHAPES.items()])
            store.put(ns, "one by one", {"messages": OTHER_SHAPES["langchain tool calls"]}, index=["messages"])
        assert _listing(pm, ns) == _listing(lg, ns)
        assert len(_listing(pm, ns)) == len(OTHER_SHAPES) + 1
        # Their text is searchable (the hash embedder: the exact words find it first).
        assert pm.search(ns, query="volcano eruption", limit=1)[0].key == "tool_calls not a list"


def test_a_blank_query_lists_items_as_postgres_store_does(lg_url: str, app_url: str) -> None:
    """On pgmem's pieces, a query of whitespace only failed ("message is empty (or only
    whitespace): nothing to recall"), while an empty one lists the items. PostgresStore without
    an embed lists them for any query; a blank one now lists them in PgmemStore too, filter,
    limit and offset applied, score None."""
    ns = ("blank",)
    with (
        PostgresStore.from_conn_string(lg_url) as lg,
        PgmemStore.from_conn_string(app_url, embedder=HashEmbedder()) as pm,
    ):
        for store in (lg, pm):
            for i in range(4):
                store.put(ns, f"k{i}", {"text": f"note {i}", "n": i})
        for query in ("", " ", "\n\t "):
            for kw in ({}, {"filter": {"n": {"$gte": 2}}}, {"limit": 2, "offset": 1}):
                got = pm.search(ns, query=query, **kw)
                want = lg.search(ns, query=query, **kw)
                assert [(i.key, i.value, i.score) for i in got] == [(i.key, i.value, i.score) for i in want]
        (answer,) = pm.batch([SearchOp(ns, query="  ", limit=10)])
        assert isinstance(answer, list) and len(answer) == 4
        # A query with words still searches the pieces.
        assert pm.search(ns, query="note 3", limit=1)[0].score is not None


@pytest.mark.parametrize("label", [" ", "\t", "\n  "])
def test_a_namespace_of_one_blank_label_is_refused_in_one_line_before_anything_runs(
    lg_url: str, app_url: str, label: str
) -> None:
    """PostgresStore stores a namespace whose only label is whitespace; pgmem's scope names need
    a non-blank character (docs/langgraph.md, Limits), so PgmemStore refuses it. The refusal
    named "scope", pgmem's word, not the namespace, and came from the driver, after the batch's
    other ops had been planned; now it is an InputError naming the namespace, for a get as for a
    put, and a batch holding one stores nothing. A search of it finds nothing to search."""
    ns = (label,)
    with (
        PostgresStore.from_conn_string(lg_url) as lg,
        PgmemStore.from_conn_string(app_url, embedder=HashEmbedder()) as pm,
    ):
        lg.put(ns, "k", {"text": "x"})
        lg_item = lg.get(ns, "k")
        assert lg_item is not None  # PostgresStore stores it
        pm.put(("kept",), "k", {"text": "stored before"})
        for ops in (
            [PutOp(("kept",), "also", {"text": "same batch"}), PutOp(ns, "k", {"text": "x"})],
            [GetOp(ns, "k")],
        ):
            with pytest.raises(InputError) as err:
                pm.batch(ops)
            message = str(err.value)
            assert "\n" not in message and "namespace" in message and "blank" in message, message
        assert pm.search(ns) == [] and pm.get(("kept",), "also") is None
        kept = pm.get(("kept",), "k")
        assert kept is not None and kept.value == {"text": "stored before"}
        # A blank label beside another one is a scope with text, stored as PostgresStore stores it.
        for store in (lg, pm):
            store.put(("x", label), "k", {"text": "x"})
        assert _listing(pm, ("x", label)) == _listing(lg, ("x", label))


def test_blank_field_texts_get_no_vector_as_documented(lg_url: str, app_url: str) -> None:
    """docs/langgraph.md, "Blank texts get no vector": with an `embed`, PostgresStore embeds an
    empty or blank field and a query returns the item; PgmemStore sends no blank text to the
    embed, so a query never returns it. Both store and list it alike."""
    ns = ("blanks",)
    emb = WordEmbeddings()
    index: Any = {"dims": 64, "embed": emb, "fields": ["text"]}
    with (
        PostgresStore.from_conn_string(lg_url, index=index) as lg,
        PgmemStore.from_conn_string(app_url, index=index) as pm,
    ):
        lg.setup()  # its vector table
        for store in (lg, pm):
            store.batch([PutOp(ns, "empty", {"text": ""}), PutOp(ns, "blank", {"text": "  \n"}),
                         PutOp(ns, "words", {"text": "red apple pie"})])  # fmt: skip
        assert emb.texts == 3 + 1  # PostgresStore's three texts, PgmemStore's one
        assert _listing(pm, ns) == _listing(lg, ns)
        assert {i.key for i in lg.search(ns, query="apple", limit=10)} == {"empty", "blank", "words"}
        assert [i.key for i in pm.search(ns, query="apple", limit=10)] == ["words"]


def test_a_key_too_long_in_bytes_for_the_index_is_refused_in_one_line(lg_url: str, app_url: str) -> None:
    """1,000 characters of CJK (3,000 bytes) pass the documented key limit of 1,000 characters
    but not Postgres's btree (2,704 bytes an entry): both stores failed at the insert, pgmem with
    the index's error ("index row size 3016 exceeds btree version 4 maximum 2704 for index
    "store_item_pkey" ...", naming pgmem's table); now an InputError names the key's bytes before
    anything runs. A key of 1,000 ASCII characters, or 600 CJK ones, is stored by both."""
    ns = ("keys",)
    cjk = "".join(chr(0x4E00 + i) for i in range(1000))
    with (
        PostgresStore.from_conn_string(lg_url) as lg,
        PgmemStore.from_conn_string(app_url, embedder=HashEmbedder()) as pm,
    ):
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):
            lg.put(ns, cjk, {"text": "x"})
        pm.put(ns, "kept", {"text": "stored before"})
        with pytest.raises(InputError) as err:
            pm.batch([PutOp(ns, "also", {"text": "same batch"}), PutOp(ns, cjk, {"text": "x"})])
        message = str(err.value)
        assert "bytes as UTF-8" in message and "\n" not in message and "index row" not in message, message
        assert pm.get(ns, "also") is None and pm.get(ns, cjk) is None and lg.get(ns, cjk) is None
        pm.delete(ns, cjk)  # a delete of such a key finds nothing, as in PostgresStore
        lg.delete(ns, cjk)
        for store in (lg, pm):
            store.put(ns, "k" * 1000, {"text": "ascii"})
            store.put(ns, cjk[:600], {"text": "cjk"})
        assert [it for it in _listing(pm, ns) if it[1] != "kept"] == _listing(lg, ns)
        assert len(_listing(lg, ns)) == 2


@pytest.mark.parametrize(
    ("flt", "where"),
    [
        ({"text": "a\x00b"}, "filter.text contains a NUL"),
        ({"text\x00": 1}, "filter key 'text\\x00' contains a NUL"),
        ({"text": {"$eq": "\udcff"}}, "filter.text.$eq contains an invalid UTF-8 byte"),
        ({"n": {"$eq": float("nan")}}, "filter.n.$eq is nan"),
        ({"n": {1, 2}}, "filter.n is a set: a filter holds JSON types only"),
        ({"n": 10**5000}, "filter is not JSON"),
    ],
)
def test_a_hostile_filter_is_refused_in_one_line_naming_the_filter(
    lg_url: str, app_url: str, flt: dict[str, Any], where: str
) -> None:
    """PostgresStore fails on each of these filters too (a driver or database error); PgmemStore
    refused them in one line that named the filter "value" ("value.text contains a NUL ..."),
    the word of a put's value, which the search has none of."""
    ns = ("flt",)
    with (
        PostgresStore.from_conn_string(lg_url) as lg,
        PgmemStore.from_conn_string(app_url, embedder=HashEmbedder()) as pm,
    ):
        for store in (lg, pm):
            store.put(ns, "k", {"text": "kept", "n": 1})
        with pytest.raises(Exception):  # noqa: B017 - PostgresStore's errors vary: psycopg's, json's
            lg.search(ns, filter=flt)
        with pytest.raises(InputError) as err:
            pm.search(ns, filter=flt)
        message = str(err.value)
        assert message.startswith(where) and "\n" not in message, message
        assert [i.value for i in pm.search(ns)] == [i.value for i in lg.search(ns)] == [{"text": "kept", "n": 1}]
