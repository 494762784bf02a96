"""Document search evaluation: one vector per chunk against derived search units.

Both representations are stored from the same chunks in two scopes of the given
database, and every question is searched in each: one query vector per question (the
whole question as one part), ranked chunks from `pgmem.document_search` (each chunk
once, by its best unit). Scores: top-1 (the first chunk is gold) and MRR over the top
`RANK_DEPTH` chunks.

Question files (JSON lines) come in two shapes, read by their fields:
- raydocs: `file`, `heading` (null = the whole page) and `heading_path`; a chunk is
  gold when it is in `file` and its heading path starts with `heading_path` (chunks cut
  at every heading, so the gold section's subsections count too).
- handbook: `file`, `heading_path` and `target` (code, prose, heading, transclusion,
  list); a chunk is gold when it is exactly that section. A `question_kinds.jsonl`
  beside the questions adds its kinds (buried, direct, ...).

`by_target` breaks the scores down by labelled target (`code`, ...), by question kind
(`kind:buried`, ...) and by the shape of the gold section's own chunk
(`shape:mixed`, `shape:prose-only`, `shape:heading-only`, `shape:page` for whole-page
golds): the seed's claim is about mixed-content against prose-only chunks.

`invisible_chunks` counts the chunks of the units index that no query finds: neither their
heading path, nor their own heading, nor the start of their own text returns them within
the top 5 (heading-only chunks have only the first two)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pgmem.blend import F32
from pgmem.db import scoped
from pgmem.documents.chunking import chunk_markdown
from pgmem.documents.store import (
    DEFAULT_UNIT_WEIGHT,
    DocHit,
    Document,
    Progress,
    add_documents,
    read_documents,
    search_vectors,
)
from pgmem.documents.units import chunk_shape
from pgmem.embedders.base import Embedder, embed_side
from pgmem.errors import InputError
from pgmem.lab.evaluation.common import check_split, in_split, progress
from pgmem.lab.evaluation.stats import intervals, paired
from pgmem.text import read_json_lines

RANK_DEPTH = 20
CANDIDATES = 400
#: document_search takes at most 64 parts per call; each question is one part.
PARTS_PER_CALL = 64
VISIBLE_WITHIN = 5


@dataclass(frozen=True)
class Question:
    text: str
    file: str
    heading_path: tuple[str, ...]
    whole_page: bool
    exact: bool  # handbook: the gold is exactly this section; raydocs: the section and its subsections
    target: str | None
    kind: str | None


def read_questions(path: Path) -> list[Question]:
    kinds: dict[str, str] = {}
    kinds_file = path.with_name("question_kinds.jsonl")
    if kinds_file.is_file():
        for where, obj in read_json_lines(kinds_file):  # one InputError line: unreadable, not UTF-8, not JSON
            if not isinstance(obj, dict) or not isinstance(obj.get("question"), str) or "kind" not in obj:
                raise InputError(f"{where}: expected an object with a question and its kind")
            kinds[obj["question"]] = obj["kind"]
    out: list[Question] = []
    for where, obj in read_json_lines(path):
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected an object with question, file and heading_path")
        try:
            exact = "target" in obj
            out.append(
                Question(
                    obj["question"],
                    obj["file"],
                    tuple(obj["heading_path"]),
                    not exact and obj.get("heading") is None,
                    exact,
                    obj.get("target"),
                    kinds.get(obj["question"]),
                )
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"{where}: expected question, file and heading_path: {exc}") from None
    return out


def is_gold(q: Question, document_id: str, heading_path: Sequence[str]) -> bool:
    if document_id != q.file:
        return False
    if q.whole_page:
        return True
    path = tuple(heading_path)
    return path == q.heading_path if q.exact else path[: len(q.heading_path)] == q.heading_path


def gold_shape(q: Question, docs: dict[str, Document]) -> str:
    if q.whole_page:
        return "page"
    doc = docs.get(q.file)
    if doc is None:
        return "missing"
    for c in chunk_markdown(doc.text):
        if c.heading_path == q.heading_path:
            return chunk_shape(c)
    return "missing"


def _search_all(
    conn: psycopg.Connection[tuple[object, ...]],
    scope: str,
    texts: Sequence[str],
    vectors: F32,
    depth: int,
    mode: str = "auto",
) -> list[list[DocHit]]:
    """Ranked chunk lists, one per query, PARTS_PER_CALL queries per SQL call."""
    out: list[list[DocHit]] = []
    for i in range(0, len(texts), PARTS_PER_CALL):
        res = search_vectors(
            conn,
            scope,
            list(texts[i : i + PARTS_PER_CALL]),
            vectors[i : i + PARTS_PER_CALL],
            x=depth,
            floor=-1.0,
            candidates=CANDIDATES,
            mode=mode,
        )
        out.extend(g.hits for g in res.groups)
    return out


def _score(ranks: Sequence[int | None]) -> dict[str, float]:
    n = max(len(ranks), 1)
    return {
        "top1": round(sum(1 for r in ranks if r == 1) / n, 4),
        "mrr": round(sum(1.0 / r for r in ranks if r) / n, 4),
    }


def _ranks(questions: Sequence[Question], lists: Sequence[list[DocHit]]) -> list[int | None]:
    out: list[int | None] = []
    for q, hits in zip(questions, lists, strict=True):
        out.append(next((h.rank for h in hits if is_gold(q, h.document_id, h.heading_path)), None))
    return out


def _invisible(conn: psycopg.Connection[tuple[object, ...]], scope: str, embedder: Embedder) -> int:
    """Chunks that none of three queries returns within the top VISIBLE_WITHIN: the chunk's heading
    path, its own heading, and the start of its own text. A heading-only chunk has only the first two.
    Searched by vector: the check is that the vector side sees every chunk (the word side only adds
    hits), and 8,000 hybrid searches of 300-character texts would cost most of a run."""
    with scoped(conn, scope):
        rows = conn.execute(
            """SELECT c.chunk_id, c.heading_path, d.title, c.body FROM pgmem.chunk c
                 JOIN pgmem.document d USING (scope_id, document_id)
                WHERE c.scope_id = %s ORDER BY c.document_id, c.ordinal""",
            (scope,),
        ).fetchall()
        orphans = conn.execute(
            """SELECT count(*) FROM pgmem.chunk c WHERE c.scope_id = %s
                  AND NOT EXISTS (SELECT 1 FROM pgmem.piece p
                                   WHERE p.scope_id = c.scope_id AND p.chunk_id = c.chunk_id)""",
            (scope,),
        ).fetchone()
    assert orphans is not None
    if int(str(orphans[0])):
        raise AssertionError(f"{orphans[0]} chunks have no search unit")
    todo: dict[int, list[str]] = {}
    for r in rows:
        path = [str(h) for h in r[1]] if isinstance(r[1], list) else []
        body = str(r[3])
        text = " ".join((body.split("\n", 1)[1] if path and "\n" in body else ("" if path else body)).split())
        queries = [" > ".join(path) if path else str(r[2]), path[-1] if path else ""]
        todo[int(str(r[0]))] = [q for q in [*queries, text[:300]] if q]
    for stage in range(3):
        ids = [c for c, qs in todo.items() if len(qs) > stage]
        if not ids:
            break
        texts = [todo[c][stage] for c in ids]
        found = _search_all(conn, scope, texts, embed_side(embedder, texts, "query"), VISIBLE_WITHIN, mode="vector")
        for c, hits in zip(ids, found, strict=True):
            if any(h.chunk_id == c for h in hits):
                del todo[c]
    return len(todo)


def run_docs_eval(
    conn: psycopg.Connection[tuple[object, ...]],
    embedder: Embedder,
    corpus_dir: Path,
    questions_file: Path,
    *,
    limit: int | None = None,
    unit_weight: float = DEFAULT_UNIT_WEIGHT,
    split: str = "all",
    chunk_search: str = "vector",
    unit_search: str = "auto",
    word_weight: float | None = None,
    word_share: float | None = None,
) -> dict[str, object]:
    """Chunk-vs-units scores on one development set (see the module docstring). `conn`
    must be autocommit on a migrated database; the two scopes are removed afterwards.
    `limit` keeps the first questions only (the whole corpus is always indexed).
    `chunk_search` / `unit_search`: document_search's mode for each (the baseline is one vector
    per chunk searched by vector; units get pgmem's default); `word_weight` / `word_share`: the
    settings pgmem.doc_word_weight / pgmem.doc_word_share for this run."""
    if not corpus_dir.is_dir():
        raise InputError(f"no such corpus folder: {corpus_dir}")
    if not questions_file.is_file():
        raise InputError(f"no such questions file: {questions_file}")
    docs = read_documents([corpus_dir])
    by_id = {d.id: d for d in docs}
    check_split(split)
    # A document question's half is keyed by its text (the sets have no question ids).
    questions = [q for q in read_questions(questions_file) if in_split(q.text, split)][:limit]
    if not questions:
        raise InputError(f"{questions_file} holds no questions")
    missing = sorted({q.file for q in questions} - by_id.keys())
    if missing:
        raise InputError(f"gold files not in {corpus_dir}: {missing[:5]}")
    for name, value in (("pgmem.doc_word_weight", word_weight), ("pgmem.doc_word_share", word_share)):
        if value is not None:
            conn.execute("SELECT set_config(%s, %s, false)", (name, str(float(value))))
    qvecs = embed_side(embedder, [q.text for q in questions], "query")
    texts = [q.text for q in questions]
    tag = secrets.token_hex(3)
    ranks: dict[str, list[int | None]] = {}
    invisible = 0
    for mode in ("chunk", "units"):
        scope = f"eval-docs-{mode}-{tag}"
        weight = unit_weight if mode == "units" else 1.0
        progress(f"docs eval: indexing {len(docs)} documents as {mode} (weight {weight})")
        report = add_documents(conn, scope, docs, embedder, mode=mode, weight=weight, progress=_doc_progress(mode))
        if report.failed:
            progress(f"docs eval: {len(report.failed)} documents failed, first: {report.failed[0]}")
        try:
            search = chunk_search if mode == "chunk" else unit_search
            ranks[mode] = _ranks(questions, _search_all(conn, scope, texts, qvecs, RANK_DEPTH, mode=search))
            if mode == "units":
                progress("docs eval: looking for invisible chunks (heading path, heading, own text)")
                invisible = _invisible(conn, scope, embedder)
        finally:
            with conn.transaction():
                conn.execute("DELETE FROM pgmem.scope WHERE scope_id = %s", (scope,))
    groups: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        keys = [f"shape:{gold_shape(q, by_id)}"]
        if q.target:
            keys.insert(0, q.target)
        if q.kind:
            keys.append(f"kind:{q.kind}")
        for k in keys:
            groups.setdefault(k, []).append(i)
    by_target = {
        k: {
            "n": len(idx),
            "chunk": _score([ranks["chunk"][i] for i in idx]),
            "units": _score([ranks["units"][i] for i in idx]),
        }
        for k, idx in sorted(groups.items())
    }
    per = {
        m: {"top1": [1.0 if r == 1 else 0.0 for r in rs], "mrr": [1.0 / r if r else 0.0 for r in rs]}
        for m, rs in ranks.items()
    }
    return {
        "questions": len(questions),
        "split": split,
        "results": {"chunk": _score(ranks["chunk"]), "units": _score(ranks["units"])},
        "ci": intervals(per),
        "paired": {"units − chunk": {k: paired(per["units"][k], per["chunk"][k]) for k in ("top1", "mrr")}},
        "by_target": by_target,
        "invisible_chunks": invisible,
    }


def _doc_progress(mode: str) -> Progress:
    last = [0]

    def report(done: int, total: int, units: int) -> None:
        if done == total or done - last[0] >= 50:
            last[0] = done
            progress(f"  {mode}: {done}/{total} documents, {units} units")

    return report
