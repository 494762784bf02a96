"""Rebuild: re-piece and re-embed stored turns from their stored messages.

Resumable: the moment a rebuild begins is written to a state file; a turn stored after
that moment is done. An interrupted rebuild, run again, picks up the turns still older
than its start, and the state file is removed once every turn is done."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pgmem.calls import Call, Db, Query, run
from pgmem.embedders.base import Embedder
from pgmem.errors import ConfigError, InputError, ModelRefusedError
from pgmem.ingest import (
    DEFAULT_WEIGHT,
    IngestReport,
    Progress,
    check_write_settings,
    ingest_turns,
    refused_scopes,
)
from pgmem.pieces import DEFAULT_MAX_BYTES
from pgmem.text import check_name
from pgmem.turns import Turn, turn_from_dict


@dataclass
class RebuildResult:
    started: str
    resumed: bool
    turns: int
    report: IngestReport


#: A stored turn the rebuild cannot read back as a Turn: its key and why.
Unreadable = tuple[tuple[str, str, int], str]


def pending_turns(db: Db, scope: str, started: str) -> list[tuple[Turn, bytes]]:
    """The scope's turns stored before `started`, with their metadata and stored content hash,
    read inside the scope (row-level security); those that cannot be read back are left out
    (`rebuild` reports them)."""
    return run(db, _pending_turns(scope, started))[0]


def _pending_turns(scope: str, started: str) -> Call[tuple[list[tuple[Turn, bytes]], list[Unreadable]]]:
    rows = yield Query(
        scope,
        """SELECT thread_id, turn_index, turn_time, messages, metadata, content_hash
             FROM pgmem.pending_turns(%s, %s::timestamptz)""",
        (scope, started),
    )
    pending: list[tuple[Turn, bytes]] = []
    unreadable: list[Unreadable] = []
    for r in rows:
        # The SQL API stores turns Python's rules refuse (a blank thread name, a message without
        # a role: put_turn checks only that messages are a JSON array): such a turn cannot be
        # pieced again. It is reported, and the scope's other turns are rebuilt; one such turn
        # failed the whole rebuild before anything was written.
        try:
            turn = turn_from_dict(
                {"scope": scope, "thread": r[0], "turn": r[1], "time": r[2], "messages": r[3], "metadata": r[4] or None}
            )
        except InputError as exc:
            unreadable.append(((scope, str(r[0]), int(str(r[1]))), f"the stored turn cannot be rebuilt: {exc}"))
            continue
        pending.append((turn, bytes(r[5])))
    return pending, unreadable


def _now(scope: str) -> Call[str]:
    row = yield Query(scope, "SELECT now()::text", one=True)
    return str(row[0])


#: The database a rebuild runs in: its name and its cluster's system identifier (the name alone
#: is the same on many servers), or the name alone where pg_control_system() is not granted.
DATABASE = """SELECT current_database()::text || '@' || coalesce(
    CASE WHEN has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')
         THEN (SELECT system_identifier::text FROM pg_catalog.pg_control_system()) END, '')"""


def _database(scope: str) -> Call[str]:
    row = yield Query(scope, DATABASE, one=True)
    return str(row[0])


def database(db: Db, scope: str) -> str:
    """The database `db` reaches, as a rebuild's state file records it (`pgmem rebuild` names
    its state file by it and the scope)."""
    return run(db, _database(scope))


def state_file_name(database: str, scope: str) -> str:
    """`pgmem rebuild`'s state file of `scope` in `database` (a digest: a scope is caller text
    and must never become a path). Named by the scope alone until rt59, a rebuild of a scope
    interrupted in one database was resumed by a rebuild of the same scope name in another, from
    the first one's start: the other database's turns stored after it were left as they were."""
    digest = hashlib.sha256(f"{database}\n{scope}".encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"rebuild-{digest}.json"


def _read_state(state_file: Path, scope: str, database: str) -> str:
    """When the interrupted rebuild began, from its state file; a file that is not one (cut short
    by a full disk, edited), or that is the state of a rebuild of another scope or in another
    database, is a ConfigError naming it, and left as it is."""
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
        started = state["started"]
    except (OSError, ValueError, LookupError, TypeError, RecursionError):
        state, started = None, None
    if not isinstance(started, str) or not isinstance(state, dict):
        raise ConfigError(
            f'{state_file} is not a rebuild state file ({{"started": TIME, ...}}): remove it to begin the rebuild again'
        )
    # Resumed elsewhere, the rebuild would redo only what was stored there before that one began.
    for what, ours in (("scope", scope), ("database", database)):
        theirs = state.get(what, ours)  # a file written before rt59 names no database
        if theirs != ours:
            raise ConfigError(
                f"{state_file} is the state of a rebuild of {what} {str(theirs)!r:.120}, not {ours!r:.120}: "
                "finish that rebuild, or remove the file to begin this one"
            )
    return started


def rebuild(
    db: Db,
    embedder: Embedder,
    state_file: Path,
    *,
    scope: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    weight: float = DEFAULT_WEIGHT,
    group_pieces: int = 512,
    progress: Progress | None = None,
) -> RebuildResult:
    """Re-piece and re-embed every turn of `scope` stored before the rebuild began, with the
    scope's own model (a model change is `pgmem.reembed`, which serves the old model until one
    transaction swaps the new one in), keeping each turn's metadata. A turn forgotten or
    written again while the rebuild runs is left as it is (`report.skipped`). A rebuild runs
    inside one scope, like every read and write (row-level security). `state_file` records the
    scope and the database; one of another scope or database is a ConfigError, never resumed
    (`state_file_name` names one per database and scope, as `pgmem rebuild` does)."""
    check_name(scope, "scope")
    # Checked before the state file is written: a rebuild refused here did nothing, and a state
    # file it left made the next rebuild "resume" from its start, taking every turn stored since
    # for done (`--max-bytes 5`, or a model the scope refuses: each turn failed, the file stayed).
    max_bytes, weight, group_pieces = check_write_settings(max_bytes, weight, group_pieces)
    where = database(db, scope)
    resumed = state_file.exists()
    if resumed:
        started = _read_state(state_file, scope, where)
    else:
        try:
            state_file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot write the rebuild state file {state_file}: {exc.strerror or exc}") from None
        refused = run(db, refused_scopes([scope], embedder, "piece")).get(scope)
        if refused is not None:
            raise ModelRefusedError(
                refused,
                sqlstate="22000",
                hint="Rebuild with the scope's model; a model change is `pgmem reembed --to MODEL --scope SCOPE`.",
            )
        started = run(db, _now(scope))
        # Written whole or not at all (as the store import's checkpoint): a write cut short (a
        # full disk, a kill) left a part of the file, which every later rebuild refused as "not a
        # rebuild state file" until it was removed by hand.
        tmp = state_file.with_name(f"{state_file.name}.tmp")
        try:
            tmp.write_text(json.dumps({"started": started, "scope": scope, "database": where}), encoding="utf-8")
            os.replace(tmp, state_file)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ConfigError(f"cannot write the rebuild state file {state_file}: {exc.strerror or exc}") from None
    pending, unreadable = run(db, _pending_turns(scope, started))
    turns = [t for t, _ in pending]
    # Each turn replaced only while it is the one read here: one forgotten or written again
    # while the rebuild embeds is left as it is (report.skipped), never brought back.
    report = ingest_turns(
        db,
        turns,
        embedder,
        max_bytes=max_bytes,
        weight=weight,
        force=True,
        group_pieces=group_pieces,
        progress=progress if turns else None,  # no bar of 0 of 0 before "no stored turns"
        replace_hashes={t.key: h for t, h in pending},
    )
    report.failed.extend(unreadable)
    if not report.failed:
        state_file.unlink(missing_ok=True)
    return RebuildResult(started, resumed, len(turns) + len(unreadable), report)
