"""`pgmem ingest`, `pgmem recall`, `pgmem rebuild`, `pgmem reblend`, `pgmem facts`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from pgmem.cli.common import Progress, embedder_for, json_line, open_conn, settings, shown
from pgmem.errors import InputError
from pgmem.recall import DEFAULT_FLOOR, DEFAULT_MODE, DEFAULT_X, MODES, Recall
from pgmem.text import check_json_text, check_name, json_loads_once
from pgmem.turns import Turn, iso_time


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ingest", help="ingest sealed turns from a JSONL file (one turn per line)")
    p.add_argument("file", type=Path)
    p.add_argument("--scope", help="scope for every turn (overrides the file's)")
    p.add_argument("--max-bytes", type=int, default=1200, help="piece budget, label included")
    p.add_argument("--weight", type=float, default=0.8, help="blend weight of the piece")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--bulk",
        action="store_true",
        help="backfill: store each scope's turns a few thousand pieces at a time with pgmem.put_turns (same rows)",
    )
    p.set_defaults(func=_ingest)

    r = sub.add_parser("recall", help="per-part memory recall for a message")
    r.add_argument("message")
    r.add_argument("--scope", required=True)
    r.add_argument("--thread")
    r.add_argument(
        "--filter",
        metavar="JSON",
        help='keep turns whose metadata contains this JSON object, e.g. \'{"channel": "voice"}\'',
    )
    r.add_argument("-x", type=int, default=DEFAULT_X, help="hits kept per part")
    r.add_argument(
        "--floor", type=float, default=None, help=f"raw cosine floor (default: the model's; MiniLM {DEFAULT_FLOOR})"
    )
    r.add_argument("--mode", choices=MODES, default=DEFAULT_MODE, help="hybrid = vector + word search (default)")
    r.add_argument("--since", metavar="TIME", help="only turns at or after TIME (ISO 8601; no zone: UTC)")
    r.add_argument("--until", metavar="TIME", help="only turns before TIME (ISO 8601; no zone: UTC)")
    r.add_argument(
        "--message-time",
        metavar="TIME",
        help="when the message was sent (ISO 8601, or 'now' in this machine's zone): its dates "
        "('last Tuesday') then rank turns of that time first (the [dates] extra)",
    )
    r.add_argument("--log", action="store_true", help="log the request for explain/replay in psql")
    r.add_argument(
        "--compare", action="store_true", help="first show what one whole-message vector returns (top x·parts)"
    )
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_recall)

    b = sub.add_parser(
        "rebuild", help="re-piece and re-embed stored turns with the scope's model (resumable; new model: reembed)"
    )
    b.add_argument("--scope", required=True, help="the scope to rebuild (a rebuild runs inside one scope)")
    b.add_argument("--max-bytes", type=int, default=1200)
    b.add_argument("--weight", type=float, default=0.8)
    b.set_defaults(func=_rebuild)

    w = sub.add_parser("reblend", help="rewrite a scope's search vectors with a new weight (no embedding)")
    w.add_argument("--scope", required=True)
    w.add_argument("--weight", type=float, required=True)
    w.set_defaults(func=_reblend)

    f = sub.add_parser("facts", help="add or search fact sentences")
    fsub = f.add_subparsers(dest="facts_command", required=True, metavar="ACTION")
    fa = fsub.add_parser(
        "add", help="add facts from a JSONL file of {body, thread? (or thread_id), turn? (or turn_index), section?}"
    )
    fa.add_argument("file", type=Path)
    fa.add_argument("--scope", required=True)
    fa.set_defaults(func=_facts_add)
    fs = fsub.add_parser("search", help="per-part fact recall")
    fs.add_argument("message")
    fs.add_argument("--scope", required=True)
    fs.add_argument("--thread", help="only the facts tied to this thread")
    fs.add_argument("-x", type=int, default=DEFAULT_X)
    fs.add_argument("--floor", type=float, default=0.35)
    fs.add_argument("--json", action="store_true")
    fs.set_defaults(func=_facts_search)


def _ingest(args: argparse.Namespace) -> int:
    return ingest_command(
        args.file, scope=args.scope, max_bytes=args.max_bytes, weight=args.weight, as_json=args.json, bulk=args.bulk
    )


#: Pieces embedded and stored together by `pgmem ingest --bulk`: one put_turns call per scope.
BULK_GROUP_PIECES = 4096
#: `pgmem ingest` reads, checks and stores a file this many turns at a time, or fewer when their
#: messages pass INGEST_BATCH_BYTES (a batch ends at the turn that passes it): its memory is a
#: batch's, flat in the file's size. It read the whole file first (a 2 GB export held the process
#: at several times that). A turn given twice within a batch is stored once (the later line;
#: the earlier is reported superseded); lines farther apart are each written, the later last.
INGEST_BATCH_TURNS = 1000
INGEST_BATCH_BYTES = 8 << 20


def _text_bytes(value: object) -> int:
    """About the bytes of the strings in `value` (a turn's messages): what a batch holds."""
    size, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            size += len(v)
        elif isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
        else:
            size += 8
    return size


def _batches(turns: Iterator[Turn]) -> Iterator[list[Turn]]:
    """`turns` in lists of at most INGEST_BATCH_TURNS turns and about INGEST_BATCH_BYTES."""
    batch: list[Turn] = []
    size = 0
    for t in turns:
        batch.append(t)
        size += _text_bytes(t.messages)
        if len(batch) >= INGEST_BATCH_TURNS or size >= INGEST_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def ingest_command(
    file: Path,
    *,
    scope: str | None,
    max_bytes: int = 1200,
    weight: float = 0.8,
    as_json: bool = False,
    bulk: bool = False,
) -> int:
    """`pgmem ingest FILE`: the report on stdout, failures on stderr, exit 1 if any turn failed.
    The file is read and stored a batch at a time (INGEST_BATCH_TURNS): a bad line is reported
    with its number and the turns around it are stored; a batch stored stays stored if a later
    one stops the run (an embedding endpoint down), and a run again skips it (unchanged)."""
    from pgmem.ingest import IngestReport, ingest_turns
    from pgmem.turns import read_jsonl

    if scope is not None:
        check_name(scope, "--scope")
    unreadable: list[tuple[str, str]] = []
    batches = _batches(read_jsonl(file, scope=scope, failed=unreadable))
    # The first batch before connecting: a path that is no file is refused before the server is asked.
    batch: list[Turn] | None = next(batches, [])
    report = IngestReport()
    progress = Progress("ingest")
    read = 0
    with open_conn() as conn:
        emb = embedder_for(conn)
        while batch is not None:
            done, pieces = read, report.pieces

            def streamed(d: int, _total: int, p: int, done: int = done, pieces: int = pieces) -> None:
                progress(done + d, -1, pieces + p)

            report.add(
                ingest_turns(
                    conn,
                    batch,
                    emb,
                    max_bytes=max_bytes,
                    weight=weight,
                    progress=streamed,
                    bulk=bulk,
                    group_pieces=BULK_GROUP_PIECES if bulk else 512,
                )
            )
            read += len(batch)
            batch = None  # the next batch is read with this one's turns gone
            batch = next(batches, None)
        progress(read, read, report.pieces)
    failed = len(unreadable) + len(report.failed)
    if as_json:
        out = report.as_dict()
        out["unreadable"] = [{"line": where, "error": err} for where, err in unreadable]
        print(json.dumps(out))
    else:
        superseded = f", {len(report.superseded)} superseded" if report.superseded else ""
        print(
            f"{report.inserted} inserted, {report.replaced} replaced, {report.unchanged} unchanged{superseded}, "
            f"{report.pieces} pieces written, {failed} failed"
        )
        lines = [f"  failed {err}" for _, err in unreadable]
        lines += [f"  failed turn {key}: {err}" for key, err in report.failed]
        _listed(lines, "failed")
        _listed([f"  superseded turn {key}: {note}" for key, note in report.superseded], "superseded")
    return 1 if failed else 0


#: The most lines of one kind `pgmem ingest` lists on stderr; --json lists every one.
LISTED = 100


def _listed(lines: list[str], what: str) -> None:
    """`lines` on stderr, the first LISTED of them and a count of the rest: a file that is no
    JSONL at all (a gzip, a CSV given by mistake) printed a line for each of its lines."""
    for line in lines[:LISTED]:
        print(shown(line), file=sys.stderr)
    if len(lines) > LISTED:
        print(f"  ... and {len(lines) - LISTED} more {what} (--json lists every one)", file=sys.stderr)


def print_recall(result: Recall, out: TextIO | None = None) -> None:
    """The groups for a person: stored text with its control characters shown, not acted on
    (`shown`), each body on one line."""
    out = sys.stdout if out is None else out  # read at call time: sys.stdout may be replaced
    for g in result.groups:
        print(f"── part {g.part_no}: {shown(g.part_text)}", file=out)
        if not g.hits:
            print("   (no memory above the floor)", file=out)
        for h in g.hits:
            body = " ".join(h.body.split())
            if len(body) > 160:
                body = body[:157] + "..."
            print(f"   {h.rank}. cos {h.cosine:.3f}  {shown(h.label)} {shown(body)}", file=out)


def _recall(args: argparse.Namespace) -> int:
    return recall_command(
        args.message,
        scope=args.scope,
        thread=args.thread,
        metadata_filter=_json_object(args.filter, "--filter"),
        x=args.x,
        floor=args.floor,
        mode=args.mode,
        log=args.log,
        compare=args.compare,
        as_json=args.json,
        since=_time(args.since, "--since"),
        until=_time(args.until, "--until"),
        message_time=_time(args.message_time, "--message-time"),
    )


def _time(text: str | None, what: str) -> datetime | None:
    """An ISO 8601 time (a bare date is its midnight; no zone: UTC), or 'now' in this machine's
    zone (a message's dates are read as days of its time's zone: the terminal's calendar)."""
    if text is None:
        return None
    if text.strip().lower() == "now":
        return datetime.now().astimezone()
    try:
        value = iso_time(text)
    except ValueError:
        raise InputError(
            f"{what} must be an ISO 8601 time such as 2026-05-01 or 2026-05-01T09:30+02:00, got {text[:80]!r}"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def recall_command(
    message: str,
    *,
    scope: str,
    thread: str | None = None,
    metadata_filter: dict[str, object] | None = None,
    x: int = DEFAULT_X,
    floor: float | None = None,
    mode: str = DEFAULT_MODE,
    log: bool = False,
    compare: bool = False,
    as_json: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    message_time: datetime | None = None,
) -> int:
    """`pgmem recall MESSAGE`: the groups on stdout; exit 1 when nothing was searched."""
    from pgmem.recall import recall

    with open_conn() as conn:
        emb = embedder_for(conn)
        result = recall(
            conn,
            scope,
            message,
            emb,
            x=x,
            floor=floor,
            thread=thread,
            mode=mode,
            log=log,
            metadata_filter=metadata_filter,
            since=since,
            until=until,
            message_time=message_time,
        )
        if compare and not as_json:
            from pgmem.recall import whole_message_recall

            k = x * len(result.groups)
            # The baseline the seed replaced: one vector for the whole message, one ranked list.
            base = whole_message_recall(conn, scope, message, emb, k=k, floor=floor, thread=thread, mode="vector")
            print(f"═══ one whole-message vector, top {k} by cosine ═══")
            for h in base.groups[0].hits:
                body = " ".join(h.body.split())
                print(f"   {h.rank}. cos {h.cosine:.3f}  {shown(h.label)} {shown(body[:110])}")
            print(f"═══ per-part groups ({len(result.groups)} parts, up to {x} each, {mode}) ═══")
    if as_json:
        print(json_line(result.as_dict()))
    elif result.nothing_searched:
        # A misspelt scope or thread is not "nothing above the floor": one line, exit 1.
        print(f"pgmem: error: {shown(str(result.empty_message))}", file=sys.stderr)
    else:
        print_recall(result)
    if result.recall_id is not None and not as_json:
        # Logged even when nothing was searched: the id is what --log was asked for.
        # Runs in psql as printed, as any login: without the scope set first, only a superuser's
        # ran (42501 for the application or reader login: no scope is set).
        literal = shown(scope.replace("'", "''"))
        print(
            f"(logged as recall {result.recall_id}: SET pgmem.scope = '{literal}'; "
            f"SELECT * FROM pgmem.explain_logged_recall('{literal}', {result.recall_id});)"
        )
    elif log and not as_json:
        # A scope with no row (misspelt, or never written) is not made for a log: nothing logged (0113).
        print(f"(not logged: scope {shown(scope)!r} does not exist)")
    return 1 if result.nothing_searched else 0


def _json_object(text: str | None, what: str) -> dict[str, object] | None:
    if text is None:
        return None

    try:
        value = json_loads_once(text, what, allow_nan=False)
    except InputError:
        raise
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InputError(f"{what} must be a JSON object, got {type(value).__name__}")
    check_json_text(value, what)
    return value


def _rebuild(args: argparse.Namespace) -> int:
    from pgmem.rebuild import database, rebuild, state_file_name

    s = settings()
    check_name(args.scope, "--scope")
    with open_conn() as conn:
        # Named by the database and the scope (a digest: a scope is caller text and must never
        # become a path), so a rebuild interrupted in one database is resumed there only.
        state_file = s.home / state_file_name(database(conn, args.scope), args.scope)
        emb = embedder_for(conn)
        t0 = time.monotonic()
        res = rebuild(
            conn,
            emb,
            state_file,
            scope=args.scope,
            max_bytes=args.max_bytes,
            weight=args.weight,
            progress=Progress("rebuild"),
        )
    report = res.report
    if res.turns == 0 and not res.resumed:
        # As reblend says of a scope with no memory (42704), rather than "rebuilt 0 of 0".
        print(f"pgmem: error: scope {args.scope!r} has no stored turns to rebuild", file=sys.stderr)
        state_file.unlink(missing_ok=True)
        return 2
    if res.resumed:
        print(f"resumed the rebuild begun at {res.started}", file=sys.stderr)
    skipped = f", {report.skipped} skipped (forgotten or written again meanwhile)" if report.skipped else ""
    print(
        f"rebuilt {report.inserted + report.replaced} of {res.turns} turns into {report.pieces} pieces in "
        f"{time.monotonic() - t0:.1f}s; {len(report.failed)} failed{skipped}"
    )
    for key, err in report.failed:
        print(shown(f"  failed turn {key}: {err}"), file=sys.stderr)
    return 1 if report.failed else 0


def _reblend(args: argparse.Namespace) -> int:
    from pgmem.db import scoped

    with open_conn() as conn, scoped(conn, args.scope):
        n = conn.execute("SELECT pgmem.reblend(%s, %s)", (args.scope, args.weight)).fetchone()
    print(f"reblended {n[0] if n else 0} pieces of scope {args.scope!r} at weight {args.weight}")
    return 0


def _facts_add(args: argparse.Namespace) -> int:
    from pgmem.facts import add_facts, read_facts

    check_name(args.scope, "--scope")
    facts = read_facts(args.file)  # InputError naming the line and the field
    with open_conn() as conn:
        ids = add_facts(conn, args.scope, facts, embedder_for(conn, "fact"))
    # Idempotent by content: facts the scope holds already (or repeated in the file) are skipped.
    print(f"added {len(ids)} facts ({len(facts) - len(ids)} already stored)")
    return 0


def _facts_search(args: argparse.Namespace) -> int:
    from pgmem.facts import fact_recall

    with open_conn() as conn:
        result = fact_recall(
            conn, args.scope, args.message, embedder_for(conn, "fact"), x=args.x, floor=args.floor, thread=args.thread
        )
    if args.json:
        print(json_line(result.as_dict()))
    elif result.nothing_searched:
        # A misspelt scope or thread is not "nothing above the floor": one line, exit 1.
        print(f"pgmem: error: {shown(str(result.empty_message))}", file=sys.stderr)
    else:
        print_recall(result)
    return 1 if result.nothing_searched else 0
