"""Monitoring: `pgmem.stats()` (sql/idempotent/085_stats.sql), one row per scope.

What a row covers depends on the login, as in SQL: the application login sees the scope it
names here; the migrating login (a member of pgmem_owner) and a superuser see every scope, or
the one named. The recall log records no durations: latencies come from pg_stat_statements
(docs/operations.md, "Monitoring")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from pgmem.calls import Call, Query, sync
from pgmem.text import check_name

_SQL = """SELECT scope_id, threads, turns, memory_pieces, document_pieces, facts, documents, store_items,
                piece_index, piece_index_state, piece_index_bytes, fact_index, fact_index_state, fact_index_bytes,
                recalls_last_hour, recalls_last_day, last_recall_at
           FROM pgmem.stats(%s)"""


@dataclass(frozen=True)
class ScopeStats:
    """One scope's row of `pgmem.stats()`. An index state is none (searched exactly), valid,
    invalid (a failed concurrent build: `pgmem.scope_index_plan` drops it) or building (another
    session's concurrent build in progress)."""

    scope_id: str
    threads: int
    turns: int
    memory_pieces: int
    document_pieces: int
    facts: int
    documents: int
    store_items: int
    piece_index: str | None
    piece_index_state: str
    piece_index_bytes: int | None
    fact_index: str | None
    fact_index_state: str
    fact_index_bytes: int | None
    recalls_last_hour: int
    recalls_last_day: int
    last_recall_at: datetime | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def stats_call(scope: str | None = None) -> Call[list[ScopeStats]]:
    """Per-scope counts, index health and recent recalls. With `scope`, the statement runs in
    that scope (what the application login may read); without, in none (every scope for the
    migrating login or a superuser; nothing for the application login)."""
    if scope is not None:
        check_name(scope, "scope")
    rows = yield Query(scope, _SQL, (scope,))
    return [ScopeStats(*row) for row in rows]


stats = sync(stats_call)
