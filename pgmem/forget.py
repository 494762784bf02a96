"""Forget: remove a turn, a thread, a whole scope, a fact or a document, with everything derived
from it (pieces, facts, recall-log rows). Each call is one SQL function (sql/idempotent/
070_forget.sql) run inside the scope; forgetting what is not there removes nothing."""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass

from psycopg import sql

from pgmem.calls import Call, Query, sync
from pgmem.errors import InputError
from pgmem.text import check_name

#: The largest turn index and fact id the tables can hold (integer, bigint).
MAX_TURN_INDEX = 2**31 - 1
MAX_FACT_ID = 2**63 - 1


@dataclass(frozen=True)
class Forgotten:
    """How many rows of each kind one forget call removed. `store_items` (LangGraph store items,
    with or without a turn) is counted by forget_scope; the other forgets remove an item with its
    thread's turn, which `threads` and `turns` count."""

    threads: int = 0
    turns: int = 0
    pieces: int = 0
    facts: int = 0
    documents: int = 0
    recall_logs: int = 0
    store_items: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def total(self) -> int:
        return sum(asdict(self).values())


def _whole(value: object, what: str, upper: int) -> int:
    # Any integer, numpy's included (a fact id or turn index read from an array), stored as an
    # int: as a Fact's turn takes it (check_fact), not "must be an integer ..., got np.int64(5)".
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not 0 <= int(value) <= upper:
        raise InputError(f"{what} must be an integer between 0 and {upper}, got {value!r:.40}")
    return int(value)


def _forget(function: str, args: tuple[object, ...]) -> Call[Forgotten]:
    scope = check_name(args[0], "scope")
    # A scope forget also counts its LangGraph store items, which go with the scope row: an item
    # without a turn (index=False, field vectors, blank texts) is in no count of forget_scope's,
    # and `pgmem forget scope` of such a namespace said "nothing to forget" after erasing it. Read
    # in the same statement, so as of its start (the function's deletes come later in it).
    items = sql.SQL(
        ", (SELECT count(*) FROM pgmem.store_item i WHERE i.scope_id = %s)" if function == "forget_scope" else ""
    )
    query = sql.SQL("SELECT f.threads, f.turns, f.pieces, f.facts, f.documents, f.recall_logs{} FROM {}({}) f").format(
        items, sql.Identifier("pgmem", function), sql.SQL(", ").join(sql.Placeholder() * len(args))
    )
    if function == "forget_scope":
        args = (scope, *args)
    row = yield Query(scope, query, args, one=True, read_committed=True)
    return Forgotten(*(int(v) for v in row))


def forget_turn_call(scope: str, thread: str, turn_index: int) -> Call[Forgotten]:
    """Forget one turn: its pieces, the facts tied to it, the recall-log rows that returned
    them, and its thread when nothing else of it remains."""
    check_name(thread, "thread")
    turn_index = _whole(turn_index, "turn_index", MAX_TURN_INDEX)
    return _forget("forget_turn", (scope, thread, turn_index))


forget_turn = sync(forget_turn_call)


def forget_thread_call(scope: str, thread: str) -> Call[Forgotten]:
    """Forget a whole thread: its turns, pieces, facts and the recall-log rows about it."""
    check_name(thread, "thread")
    return _forget("forget_thread", (scope, thread))


forget_thread = sync(forget_thread_call)


def forget_fact_call(scope: str, fact_id: int) -> Call[Forgotten]:
    """Forget one fact (its id as `fact_recall` returns it) and the recall-log rows that returned it."""
    fact_id = _whole(fact_id, "fact_id", MAX_FACT_ID)
    return _forget("forget_fact", (scope, fact_id))


forget_fact = sync(forget_fact_call)


def forget_document_call(scope: str, document_id: str) -> Call[Forgotten]:
    """Forget a document: its chunks and units, the facts whose section is its id (or
    `id#anchor`), and the recall-log rows that returned them."""
    check_name(document_id, "document_id", max_chars=1000)
    return _forget("forget_document", (scope, document_id))


forget_document = sync(forget_document_call)


def forget_scope_call(scope: str) -> Call[Forgotten]:
    """Forget everything of a scope, the scope itself included (its model binding)."""
    return _forget("forget_scope", (scope,))


forget_scope = sync(forget_scope_call)
