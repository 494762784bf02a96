"""Rebuild: re-piece and re-embed stored turns from their stored messages.

Resumable: the moment a rebuild begins is written to a state file; a turn stored after
that moment is done. An interrupted rebuild, run again, picks up the turns still older
than its start, and the state file is removed once every turn is done."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.ingest import DEFAULT_WEIGHT, IngestReport, Progress, ingest_turns
from pgmem.pieces import DEFAULT_MAX_BYTES
from pgmem.text import check_name
from pgmem.turns import Turn, turn_from_dict


@dataclass
class RebuildResult:
    started: str
    resumed: bool
    turns: int
    report: IngestReport


def pending_turns(conn: psycopg.Connection[tuple[object, ...]], scope: str, started: str) -> list[Turn]:
    """The scope's turns stored before `started`, read inside the scope (row-level security)."""
    with scoped(conn, scope):
        rows = conn.execute(
            "SELECT thread_id, turn_index, turn_time, messages FROM pgmem.pending_turns(%s, %s::timestamptz)",
            (scope, started),
        ).fetchall()
    return [
        turn_from_dict({"scope": scope, "thread": r[0], "turn": r[1], "time": r[2], "messages": r[3]}) for r in rows
    ]


def rebuild(
    conn: psycopg.Connection[tuple[object, ...]],
    embedder: Embedder,
    state_file: Path,
    *,
    scope: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    weight: float = DEFAULT_WEIGHT,
    reembed: bool = False,
    group_pieces: int = 512,
    progress: Progress | None = None,
) -> RebuildResult:
    """Re-piece and re-embed every turn of `scope` stored before the rebuild began. A rebuild
    runs inside one scope, like every read and write (row-level security)."""
    check_name(scope, "scope")
    resumed = state_file.exists()
    if resumed:
        started = str(json.loads(state_file.read_text())["started"])
    else:
        row = conn.execute("SELECT now()::text").fetchone()
        assert row is not None
        started = str(row[0])
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps({"started": started, "scope": scope}))
    turns = pending_turns(conn, scope, started)
    report = ingest_turns(
        conn,
        turns,
        embedder,
        max_bytes=max_bytes,
        weight=weight,
        reembed=reembed,
        force=True,
        group_pieces=group_pieces,
        progress=progress,
    )
    if not report.failed:
        state_file.unlink(missing_ok=True)
    return RebuildResult(started, resumed, len(turns), report)
