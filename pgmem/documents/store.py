"""Add, remove and search Markdown documents: chunk, derive units, pack, embed, then one
`pgmem.put_document` call per document (one transaction) and `pgmem.document_search`.

A document whose content hash (text, resolved transclusion titles, model and unit
settings) is unchanged is skipped before embedding: re-adding writes nothing and calls
no embedding endpoint."""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg

from pgmem.blend import DEFAULT_WEIGHT, F32
from pgmem.calls import Call, Embed, Query, sync, work
from pgmem.documents.chunking import Chunk, chunk_markdown, document_title
from pgmem.documents.units import MODES, Unit, derive_units, slug_of
from pgmem.embedders.base import Embedder
from pgmem.errors import DatabaseError, InputError
from pgmem.ingest import refused_scopes
from pgmem.packing import pack_text, utf8_len
from pgmem.pieces import DEFAULT_MAX_BYTES
from pgmem.recall import _vector_rows, blend_query, check_parts, check_target, query_inputs
from pgmem.splitting import cap_bytes_keep_end
from pgmem.text import check_bool, check_int, check_name, check_number, check_text

#: Bumped whenever chunking or unit derivation changes what a document's units are (2: a
#: heading without text no longer titles the document nor labels its units).
UNITS_VERSION = 2
#: Units are blended 80/20 with their chunk context (unit mean of the chunk's units), like
#: memory pieces with their turn: on both development sets this measured as good as or
#: slightly better than unblended units overall (docs/documents.md). pgmem.reblend_documents
#: changes it without embedding.
DEFAULT_UNIT_WEIGHT = 0.8
DEFAULT_DOC_FLOOR = 0.2
DEFAULT_DOC_X = 5
DEFAULT_CANDIDATES = 50
#: A label longer than this keeps its end (the deepest headings).
MAX_LABEL_BYTES = 300
#: Default cap on a document's text (UTF-8 bytes): every unit of a document is embedded before it
#: is stored, and 4 MB is about 3,500 units, a minute of the local model on two cores (the store's
#: cap on an item's value, the same). A 50 MB file took 2.8 GB and had not finished in 24 minutes.
DEFAULT_MAX_DOCUMENT_BYTES = 4_000_000
#: Default cap on the units (texts to embed) of one document, checked before any is embedded. The
#: byte cap alone did not bound them: a unit is a heading, a list or a link as well as 1,200 bytes
#: of prose, and 4 MB of short headings ("# h1" a line) made about 450,000 units (100,000 headings:
#: 100,000 units from 0.9 MB; 20,000 links on one 209 kB line: 20,176).
DEFAULT_MAX_DOCUMENT_UNITS = 20_000
#: The fewest of the model's tokens a label leaves for a unit's text: a longer label is cut to fit.
MIN_TEXT_TOKENS = 8
MARKDOWN_SUFFIXES = (".md", ".markdown")

Progress = Callable[[int, int, int], None]  # documents done, total, units written


@dataclass(frozen=True)
class Document:
    id: str
    text: str


@dataclass(frozen=True)
class StoredUnit:
    chunk: int  # chunk ordinal
    unit: Unit
    body: str  # this piece of the unit (a unit over budget is packed into several)

    @property
    def embed_text(self) -> str:
        return f"{self.unit.label}\n{self.body}" if self.body else self.unit.label


@dataclass(frozen=True)
class Prepared:
    document: Document
    title: str
    chunks: list[Chunk]
    pieces: list[StoredUnit]
    content_hash: bytes


@dataclass
class DocumentReport:
    inserted: int = 0
    replaced: int = 0
    unchanged: int = 0
    empty: int = 0  # documents with no text: nothing to store, skipped
    units: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    #: Empty documents (of the `empty`) whose id the scope holds: that stored version is kept,
    #: still searchable; `remove_document` removes it.
    empty_kept: list[str] = field(default_factory=list)
    #: With prune: the stored documents this add was not given, removed (remove_document).
    removed: list[str] = field(default_factory=list)

    def count(self, status: str, units: int) -> None:
        """One document put_document stored or left: its status and units written. A status this
        pgmem does not know (a newer schema's) is a DatabaseError, never counted as unchanged."""
        if status not in ("inserted", "replaced", "unchanged"):
            raise DatabaseError(f"put_document returned the status {status!r:.40}, which this pgmem does not know")
        setattr(self, status, getattr(self, status) + 1)
        self.units += units

    def as_dict(self) -> dict[str, object]:
        return {
            "inserted": self.inserted,
            "replaced": self.replaced,
            "unchanged": self.unchanged,
            "empty": self.empty,
            "units": self.units,
            "failed": [{"document": d, "error": e} for d, e in self.failed],
            "empty_kept": list(self.empty_kept),
            "removed": list(self.removed),
        }


def read_documents(paths: Iterable[Path], *, failed: list[tuple[str, str]] | None = None) -> list[Document]:
    """Markdown files named directly (id = the path as given) or found under folders
    (id = the path relative to that folder), in a stable order. A file that is not UTF-8 text
    raises an InputError; with `failed`, it is appended there as (id, reason) and the others
    are read (as add_documents reports a document it cannot store)."""
    docs: list[Document] = []

    def read(doc_id: str, file: Path) -> None:
        try:
            docs.append(Document(doc_id, _read(file)))
        except InputError as exc:
            if failed is None:
                raise
            failed.append((doc_id, str(exc)))

    for path in paths:
        if path.is_dir():
            for f in _markdown_files(path, failed):
                read(f.relative_to(path).as_posix(), f)
        elif path.is_file():
            read(path.as_posix(), path)
        elif path.exists():  # a FIFO (which would wait for a writer), a device, a socket
            raise InputError(f"cannot read {path}: not a regular file or a folder")
        elif path.is_symlink():  # was "no such file or folder", of a link that is there
            raise InputError(f"cannot read {path}: {_dangling(path)}")
        else:
            raise InputError(f"no such file or folder: {path}")
    return docs


def _markdown_files(folder: Path, failed: list[tuple[str, str]] | None) -> list[Path]:
    """The Markdown files under `folder`, sorted (symlinked folders are not entered). A Markdown
    name that is no regular file (a symbolic link to nothing, a FIFO) is an InputError, or with
    `failed` appended there as (id, reason) and the others read. A folder
    that cannot be listed (no permission, an I/O error) is an InputError, or with `failed` a
    subfolder is appended there as ("sub/", reason) and the others are read: Path.rglob skipped
    it silently, and a folder of documents nobody could read was "0 inserted"."""
    files: list[Path] = []

    def unlisted(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else folder
        reason = f"cannot read folder {where}: {exc.strerror or exc}"
        if failed is None or where == folder:
            raise InputError(reason)
        failed.append((where.relative_to(folder).as_posix() + "/", reason))

    for root, _dirs, names in os.walk(folder, onerror=unlisted):
        files += [Path(root, n) for n in names if Path(n).suffix.lower() in MARKDOWN_SUFFIXES]
    found = []
    for f in sorted(files):
        if f.is_file():
            found.append(f)
            continue
        # A Markdown name that is no file to read was left out without a word ("2 inserted" of 3).
        what = _dangling(f) if f.is_symlink() and not f.exists() else "not a regular file"
        reason = f"cannot read {f}: {what}"
        if failed is None:
            raise InputError(reason)
        failed.append((f.relative_to(folder).as_posix(), reason))
    return found


def _dangling(link: Path) -> str:
    """What a symbolic link that leads to no file is: one to nothing, or one of a loop (ELOOP,
    which was called "a symbolic link to nothing" too)."""
    try:
        link.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link in a loop (it leads back to itself)"
    return "a symbolic link to nothing"


def _read(path: Path) -> str:
    try:
        # utf-8-sig: a byte order mark is no text (it hid the first heading: "\ufeff# Title").
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text: {exc}") from None
    except OSError as exc:  # no permission, gone since it was listed, an I/O error
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def prepare(
    doc: Document,
    titles: Mapping[str, str],
    embedder: Embedder | None,
    *,
    mode: str = "units",
    weight: float = DEFAULT_UNIT_WEIGHT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Prepared:
    """Chunks and packed units of `doc`; `titles` maps slugs to document titles (for transclusions)."""
    if not doc.id or len(doc.id) > 1000:
        raise InputError(f"document id must be 1 to 1000 characters, got {len(doc.id)}")
    if not doc.text.strip():
        raise InputError(f"document {doc.id} is empty")
    chunks = chunk_markdown(doc.text)
    title = document_title(chunks, doc.id)
    used: dict[str, str | None] = {}

    def resolve(target: str) -> str | None:
        used[target] = titles.get(slug_of(target))
        return used[target]

    pieces: list[StoredUnit] = []
    labels: dict[str, str] = {}
    for c in chunks:
        for u in derive_units(c, title=title, resolve=resolve, mode=mode):
            if u.label not in labels:
                labels[u.label] = _fit_label(u.label, embedder)
            u = Unit(u.kind, u.index, u.span_start, u.span_end, labels[u.label], u.text)
            pieces.extend(StoredUnit(c.ordinal, u, body) for body in _pack(u, embedder, max_bytes))
    payload = {
        "v": UNITS_VERSION,
        "model": embedder.model_id if embedder else None,
        "mode": mode,
        "weight": weight,
        "max_bytes": max_bytes,
        "text": doc.text,
        "resolved": sorted(used.items(), key=lambda kv: kv[0]),
    }
    digest = hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass")).digest()
    return Prepared(doc, title, chunks, pieces, digest)


def _fit_label(label: str, embedder: Embedder | None) -> str:
    """`label` cut, keeping its end (the deepest heading), to MAX_LABEL_BYTES and to leave
    MIN_TEXT_TOKENS of the model's token limit. A heading of hundreds of "-", "=" or "|" is a token
    per character: its path left no room, and the whole document was refused."""
    label = cap_bytes_keep_end(label, MAX_LABEL_BYTES)
    if embedder is None:
        return label
    budget = embedder.max_input_tokens - MIN_TEXT_TOKENS
    if embedder.count_tokens([label])[0] <= budget:
        return label
    keep, over = 0, len(label)  # label[-keep:] fits (or keep is 0), label[-over:] does not
    while over - keep > 1:
        mid = (keep + over) // 2
        if embedder.count_tokens([label[-mid:]])[0] <= budget:
            keep = mid
        else:
            over = mid
    return label[len(label) - keep :]


def _pack(u: Unit, embedder: Embedder | None, max_bytes: int) -> list[str]:
    """The unit's text under the byte budget and the model's token limit, label counted (as pieces.py)."""
    if not u.text.strip():
        return [""]
    label_bytes = utf8_len(u.label) + 1
    max_tokens = None
    if embedder is not None:
        max_tokens = embedder.max_input_tokens - embedder.count_tokens([u.label])[0]
        if max_tokens < MIN_TEXT_TOKENS:  # only with a model whose whole limit is under that
            raise InputError(f"label {u.label!r} leaves no room under the model's token limit")
    return pack_text(
        u.text,
        max_bytes - label_bytes,
        max_tokens=max_tokens,
        count_tokens=embedder.count_tokens if embedder is not None else None,
    ) or [""]


def stored_titles_call(scope: str) -> Call[dict[str, str]]:
    rows = yield Query(scope, "SELECT document_id, title FROM pgmem.document_titles(%s)", (scope,))
    return {slug_of(str(i)): str(t) for i, t in rows}


stored_titles = sync(stored_titles_call)


def add_documents_call(
    scope: str,
    docs: Iterable[Document],
    embedder: Embedder,
    *,
    mode: str = "units",
    weight: float = DEFAULT_UNIT_WEIGHT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    group_units: int = 512,
    reembed: bool = False,
    force: bool = False,
    progress: Progress | None = None,
    prune: bool = False,
    keep: Sequence[str] = (),
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    max_document_units: int = DEFAULT_MAX_DOCUMENT_UNITS,
) -> Call[DocumentReport]:
    """Store `docs` in `scope` (idempotently), one transaction per document. Transclusions
    resolve against these documents and those already stored in the scope.

    With `prune`, the scope is then made to hold only these documents: every stored document
    whose id is not one of `docs` (stored, unchanged, empty or failed alike) nor kept by `keep`
    (ids, such as files a read could not read; one ending in "/" keeps every id under that
    folder, such as one a read could not list) is removed, each with `remove_document` (its
    facts and recall-log rows too), and listed in `report.removed`. Prune with no documents is
    an InputError (it would remove every one), and nothing is removed when the scope's model
    refused the documents. A document whose text is over `max_document_bytes` (UTF-8) fails,
    before anything is embedded; so does one of more than `max_document_units` units (the texts
    embedded: headings, prose runs, code blocks, lists, links, each packed), before it is embedded."""
    check_name(scope, "scope")
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r:.80}")
    weight = check_number(weight, "weight", 0, 1)
    # A unit's label takes up to MAX_LABEL_BYTES of its piece, and at least 4 bytes must be left.
    max_bytes = check_int(max_bytes, "max_bytes", MAX_LABEL_BYTES + 5, 1 << 20)
    group_units = check_int(group_units, "group_units", 1, 1 << 20)
    max_document_bytes = check_int(max_document_bytes, "max_document_bytes", 1, 1 << 30)
    max_document_units = check_int(max_document_units, "max_document_units", 1, 1 << 24)
    if isinstance(docs, str | bytes) or not isinstance(docs, Iterable):
        raise InputError(f"docs must be a list of Document, got {type(docs).__name__}")
    # True or False only: prune="no" pruned the scope, force=1 or reembed=1 reached put_document
    # as an integer and was reported as a missing schema ("function ... does not exist").
    check_bool(force, "force")
    check_bool(reembed, "reembed")
    check_bool(prune, "prune")
    # Called after each document is stored: one that cannot be called failed after the first
    # (a TypeError, the report lost), so it is checked before anything is written.
    if progress is not None and not callable(progress):
        raise InputError(f"progress must be a callable or None, got {type(progress).__name__}")
    # Read once: a generator of ids was used up by the check, so prune kept none of them.
    if isinstance(keep, str | bytes) or not isinstance(keep, Iterable):
        raise InputError(f"keep must be a list of document ids (a folder's ends in /), got {type(keep).__name__}")
    keep = tuple(keep)
    if not all(isinstance(k, str) and k for k in keep):
        raise InputError("keep must be a list of document ids (a folder's ends in /)")
    folders = tuple(k for k in keep if k.endswith("/"))
    report = DocumentReport()
    given: set[object] = set(keep)  # every id given, stored or not: prune keeps them all
    # A document Postgres cannot store (an id or text that is no string, NUL, a lone surrogate)
    # is reported and left out of everything below: it must not cost the others.
    all_docs: list[Document] = []
    for i, d in enumerate(docs):
        if not isinstance(d, Document):
            raise InputError(f"docs[{i}] must be a Document, got {type(d).__name__}")
        if isinstance(d.id, str):  # another id fails below (a list is not even hashable)
            given.add(d.id)
        try:
            check_name(d.id, "document id", max_chars=1000)
            check_text(d.text, f"document {d.id}: text")
            if len(d.text) > max_document_bytes // 4 and (size := utf8_len(d.text)) > max_document_bytes:
                raise InputError(
                    f"document {d.id} is {size:,} bytes, over the {max_document_bytes:,} a document may hold "
                    "(max_document_bytes): split it"
                )
        except InputError as exc:
            report.failed.append((d.id if isinstance(d.id, str) else repr(d.id)[:80], str(exc)))
            continue
        all_docs.append(d)
    if prune and not given:
        raise InputError("prune with no documents would remove every document of the scope: nothing removed")
    if prune:
        # Links resolve against what the scope holds after the prune: against every stored title,
        # a link to a document this prune removes kept naming it ("→ Its Title") until the next add.
        rows = yield Query(scope, "SELECT document_id, title FROM pgmem.document_titles(%s)", (scope,))
        titles = {slug_of(str(i)): str(t) for i, t in rows if str(i) in given or str(i).startswith(folders)}
    else:
        titles = yield from stored_titles_call(scope)
    # Links resolve to what is stored: of two documents with one id, the first (the second is
    # refused below), not the last.
    titled: set[str] = set()
    for d in all_docs:
        if d.id not in titled:
            titled.add(d.id)
            if d.text.strip():  # an empty first copy stores nothing: the stored title stands
                titles[slug_of(d.id)] = document_title(chunk_markdown(d.text), d.id)
    rows = yield Query(
        scope,
        "SELECT document_id, content_hash FROM pgmem.document_hashes(%s, %s)",
        (scope, [d.id for d in all_docs]),
    )
    existing = {str(i): bytes(h) for i, h in rows}
    if not reembed:
        # The model check runs before anything is embedded (pgmem.model_refusal).
        refused = yield from refused_scopes([scope], embedder, "piece")
        if scope in refused:
            for d in all_docs:
                report.failed.append((d.id, f"22000: {refused[scope]}"))
            return report
    done = 0
    group: list[Prepared] = []
    size = 0
    seen: set[str] = set()

    def flush() -> Call[None]:
        nonlocal done, group, size
        if not group:
            return
        vectors = yield Embed(embedder, [p.embed_text for g in group for p in g.pieces])
        offset = 0
        for g in group:
            vecs = vectors[offset : offset + len(g.pieces)]
            yield from _put(scope, g, vecs, embedder.model_id, weight, reembed, force, report)
            offset += len(g.pieces)
            done += 1
            if progress:
                progress(done, len(all_docs), report.units)
        group, size = [], 0

    for d in all_docs:
        # The first copy of an id decides, empty or not: an empty copy and one with text were the
        # one stored and the other reported "kept ID: the file is empty" beside it.
        if d.id in seen:
            report.failed.append((d.id, f"document {d.id} is given twice"))
            done += 1
            continue
        seen.add(d.id)
        if not d.text.strip():
            report.empty += 1
            if d.id in existing:
                report.empty_kept.append(d.id)
            done += 1
            continue
        try:
            # Chunked, packed and token-counted off the event loop (pgmem.aio), as a turn is.
            prep = yield from work(
                functools.partial(prepare, d, titles, embedder, mode=mode, weight=weight, max_bytes=max_bytes)
            )
            if len(prep.pieces) > max_document_units:
                raise InputError(
                    f"document {d.id} has {len(prep.pieces):,} units to embed, over the {max_document_units:,} a "
                    "document may have (max_document_units): split it"
                )
        except InputError as exc:
            report.failed.append((d.id, str(exc)))
            done += 1
            continue
        if not force and existing.get(d.id) == prep.content_hash:
            report.unchanged += 1
            done += 1
            continue
        group.append(prep)
        size += len(prep.pieces)
        if size >= group_units:
            yield from flush()
    yield from flush()
    if progress:
        progress(len(all_docs), len(all_docs), report.units)
    if prune:
        rows = yield Query(scope, "SELECT document_id FROM pgmem.document_titles(%s)", (scope,))
        for doc_id in sorted(str(r[0]) for r in rows):  # code point order: bytewise, as the lock order
            if doc_id in given or doc_id.startswith(folders):
                continue
            # False: another client removed it first (it is not counted here).
            if (yield from remove_document_call(scope, doc_id)):
                report.removed.append(doc_id)
    return report


add_documents = sync(add_documents_call)


def _put(
    scope: str,
    prep: Prepared,
    vectors: F32,
    model_id: str,
    weight: float,
    reembed: bool,
    force: bool,
    report: DocumentReport,
) -> Call[None]:
    ps = prep.pieces
    try:
        row = yield Query(
            scope,
            """SELECT status, pieces FROM pgmem.put_document(
                   scope => %s, document_id => %s, title => %s, body => %s, content_hash => %s,
                   model_id => %s, chunk_heading_paths => %s::jsonb, chunk_bodies => %s,
                   unit_chunks => %s, unit_kinds => %s, unit_indexes => %s, span_starts => %s,
                   span_ends => %s, labels => %s, bodies => %s, vectors => %b::vector[],
                   weight => %s, reembed => %s, force => %s)""",
            (
                scope,
                prep.document.id,
                prep.title,
                prep.document.text,
                prep.content_hash,
                model_id,
                json.dumps([list(c.heading_path) for c in prep.chunks], ensure_ascii=False),
                [c.body for c in prep.chunks],
                [p.chunk for p in ps],
                [p.unit.kind for p in ps],
                [p.unit.index for p in ps],
                [p.unit.span_start for p in ps],
                [p.unit.span_end for p in ps],
                [p.unit.label for p in ps],
                [p.body for p in ps],
                list(vectors),
                weight,
                reembed,
                force,
            ),
            one=True,
        )
    # This document's data, not the connection: a value the rules let through that a table or
    # index refused (54000: an id of 1,000 wide characters is too long for the id's index).
    except (psycopg.DataError, psycopg.IntegrityError, psycopg.errors.ProgramLimitExceeded) as exc:
        report.failed.append((prep.document.id, f"{exc.sqlstate or 'client'}: {exc.diag.message_primary or exc}"))
        return
    report.count(str(row[0]), int(row[1]))


def remove_document_call(scope: str, document_id: str) -> Call[bool]:
    """Remove one stored document: its chunks and units, the facts about it (their section is
    its id or `id#anchor`) and the recall-log rows that returned them. False, and nothing removed,
    when the scope holds no such document: `pgmem.forget_document` also forgets the facts that
    name an id no document has, and says how many."""
    check_name(document_id, "document_id", max_chars=1000)
    row = yield Query(
        scope, "SELECT pgmem.remove_document(%s, %s)", (scope, document_id), one=True, read_committed=True
    )
    return bool(row and row[0])


remove_document = sync(remove_document_call)


@dataclass(frozen=True)
class DocHit:
    rank: int
    chunk_id: int
    document_id: str
    heading_path: list[str]
    chunk_body: str
    piece_id: int
    unit_kind: str
    span_start: int
    span_end: int
    cosine: float
    score: float

    @property
    def matched(self) -> str:
        """The matched unit's text, as it stands in the chunk."""
        return self.chunk_body[self.span_start : self.span_end]


@dataclass
class DocGroup:
    part_no: int
    part_text: str
    hits: list[DocHit] = field(default_factory=list)


@dataclass
class DocSearch:
    message: str
    groups: list[DocGroup]
    #: Why no group holds a hit (pgmem.empty_recall_reason, plane document), None when one does:
    #: "scope_empty" (the scope holds no documents: often a misspelt scope) or "below_floor".
    empty_reason: str | None = None
    #: The reason in words, for people.
    empty_message: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "message": self.message,
            "empty_reason": self.empty_reason,
            "empty_message": self.empty_message,
            "groups": [asdict(g) for g in self.groups],
        }

    @property
    def nothing_searched(self) -> bool:
        """The scope holds no documents: not a question of the floor."""
        return self.empty_reason == "scope_empty"


def search_vectors_call(
    scope: str,
    part_texts: Sequence[str],
    part_vectors: F32,
    *,
    x: int = DEFAULT_DOC_X,
    floor: float | None = None,
    candidates: int = DEFAULT_CANDIDATES,
    message: str = "",
    model_id: str | None = None,
    mode: str = "auto",
) -> Call[DocSearch]:
    """One `pgmem.document_search` call for all parts (vectors already blended). `model_id`, the
    model that embedded the parts, must be the model of the scope's units (ModelMismatchError).
    `mode`: auto (SQL's default for given part texts), vector or hybrid; SQL checks it."""
    x, floor, candidates = _check_search(x, floor, candidates, mode)
    check_target(scope)
    part_texts = check_parts(part_texts, model_id)
    part_vectors = _vector_rows(part_vectors)
    groups = [DocGroup(i + 1, t) for i, t in enumerate(part_texts)]
    rows = yield Query(
        scope,
        """SELECT part_no, rank, chunk_id, document_id, heading_path, chunk_body, piece_id, unit_kind,
                  span_start, span_end, cosine, score
             FROM pgmem.document_search(scope => %s, part_vectors => %b::vector[], part_texts => %s,
                                        x => %s, floor => %s, candidates => %s, model_id => %s, mode => %s)""",
        (scope, list(part_vectors), list(part_texts), x, floor, candidates, model_id, mode),
    )
    for r in rows:
        path = r[4]
        groups[int(r[0]) - 1].hits.append(
            DocHit(
                int(r[1]),
                int(r[2]),
                str(r[3]),
                [str(h) for h in path] if isinstance(path, list) else [],
                str(r[5]),
                int(r[6]),
                str(r[7]),
                int(r[8]),
                int(r[9]),
                float(r[10]),
                float(r[11]),
            )
        )
    result = DocSearch(message, groups)
    if not rows:
        why = yield Query(
            scope, "SELECT reason, message FROM pgmem.empty_recall_reason(%s, plane => 'document')", (scope,), one=True
        )
        if why is not None:
            result.empty_reason, result.empty_message = str(why[0]), str(why[1])
    return result


search_vectors = sync(search_vectors_call)


#: document_search's modes: auto (hybrid when the parts' texts are given), vector or hybrid.
SEARCH_MODES = ("auto", "vector", "hybrid")


def _check_search(x: object, floor: object, candidates: object, mode: object) -> tuple[int, float | None, int]:
    """x, floor and candidates as document_search takes them (numpy's numbers too), and its mode,
    else an InputError: a mode or model_id of another type reached SQL as no text and was reported
    as a missing schema ("function pgmem.document_search(...) does not exist")."""
    if not isinstance(mode, str) or mode not in SEARCH_MODES:
        raise InputError(f"mode must be one of {SEARCH_MODES}, got {mode!r:.80}")
    return (
        check_int(x, "x", 1, 1000),
        None if floor is None else check_number(floor, "floor (a raw cosine)", -1, 1),
        check_int(candidates, "candidates", 1, 1000),
    )


def search_documents_call(
    scope: str,
    message: str,
    embedder: Embedder,
    *,
    x: int = DEFAULT_DOC_X,
    floor: float | None = None,
    candidates: int = DEFAULT_CANDIDATES,
    mode: str = "auto",
) -> Call[DocSearch]:
    """Per-part document search: the message is split and blended as for memory recall;
    each part's group holds up to `x` whole chunks with the matched unit's span. The embedder
    must be the model the scope's units were stored with (ModelMismatchError)."""
    _check_search(x, floor, candidates, mode)
    check_target(scope)
    parts, inputs = query_inputs(message)
    q = blend_query(parts, (yield Embed(embedder, inputs, "query")), DEFAULT_WEIGHT)
    return (
        yield from search_vectors_call(
            scope,
            q.texts,
            q.blended,
            x=x,
            floor=floor,
            candidates=candidates,
            message=message,
            model_id=embedder.model_id,
            mode=mode,
        )
    )


search_documents = sync(search_documents_call)
