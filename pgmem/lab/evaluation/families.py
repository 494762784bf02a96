"""The seed's controlled test: sentence families (format of `data/families/`, see its README).

Each family is one shared sentence used word for word in four passages. Each record is
stored as one vector; each record query should find its own record among the records of
its block. Four representations:

- ``isolated``: the shared sentence alone (stored) against each query part alone;
- ``whole``: the whole passage against the whole query message;
- ``blended``: blend(sentence, passage) against blend(part, whole message), both at the
  same weight, with :func:`pgmem.blend.blend` (the SQL twin is ``pgmem.blend``);
- ``query_only_blend``: blended query parts against whole-passage stored vectors.

Four conditions add five distractor sentences (chosen deterministically, see
:func:`distractor_lines`) to the stored passage, the query, neither or both.

Search is exact cosine in numpy (every vector is unit length, so a dot product is the
cosine), within a block. A query with several parts scores each record by its best part
(max over parts). Metric: correct-record top-1, ties split: with *k* records sharing
the top score (within :data:`TIE_TOLERANCE`) and the gold among them, the query scores
1/k. Every distinct text is embedded once, so equal texts get equal vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pgmem.blend import DEFAULT_WEIGHT, blend, unit
from pgmem.embedders.base import Embedder, QueryEmbedder, Side, embed_side
from pgmem.errors import InputError
from pgmem.recall import WHOLE_MESSAGE_BYTES, blend_query, subject_cosine_for
from pgmem.splitting import SplitRules, cap_bytes_keep_end, split_prompt_chunks
from pgmem.text import read_json_lines, read_text

F64 = npt.NDArray[np.float64]

#: What the generic check queries with: the file's `generic_query`, or the shared sentence
#: itself (the seed's reference study).
GENERIC_TEXTS = ("generic_query", "sentence")
REPRESENTATIONS = ("isolated", "whole", "blended", "query_only_blend")
CONDITIONS = ("clean", "stored_distractions", "query_distractions", "both")
#: Scores closer than this are a tie (README: "within 1e-6 of each other").
TIE_TOLERANCE = 1e-6
#: Distractor sentences appended per stored passage or query in the noisy conditions.
DISTRACTORS_PER_TEXT = 5
#: A query's distractors start this many records after its own record's passage lines,
#: so a query never gets its own record's distractors (README: lines 5j+20 ...).
QUERY_DISTRACTOR_OFFSET = 20

_FAMILY_KEYS = {"family", "block", "sentence", "records", "generic_query"}
_RECORD_KEYS = {"id", "passage", "queries"}


@dataclass(frozen=True)
class Record:
    id: str
    passage: str
    queries: tuple[str, ...]


@dataclass(frozen=True)
class Family:
    name: str
    block: str
    sentence: str
    records: tuple[Record, ...]
    generic_query: str


# --------------------------------------------------------------------------- reading


def _text(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: {key!r} must be a non-empty string")
    return value


def read_families(path: Path, *, limit: int | None = None) -> list[Family]:
    """Families of a JSONL file, in file order (the first `limit` when given)."""
    if not path.is_file():
        raise InputError(f"families file not found: {path}")
    families: list[Family] = []
    seen: set[str] = set()
    for where, obj in read_json_lines(path):  # one InputError line: unreadable, not UTF-8, not JSON
        if not isinstance(obj, dict) or not set(obj) >= _FAMILY_KEYS:
            raise InputError(f"{where}: a family needs the keys {sorted(_FAMILY_KEYS)}")
        name = _text(obj, "family", where)
        if name in seen:
            raise InputError(f"{where}: duplicate family {name!r}")
        seen.add(name)
        sentence = _text(obj, "sentence", where)
        raw_records = obj["records"]
        if not isinstance(raw_records, list) or len(raw_records) < 2:
            raise InputError(f"{where}: family {name!r} needs a list of at least 2 records")
        records = []
        for k, rec in enumerate(raw_records):
            rwhere = f"{where}: records[{k}]"
            if not isinstance(rec, dict) or not set(rec) >= _RECORD_KEYS:
                raise InputError(f"{rwhere}: a record needs the keys {sorted(_RECORD_KEYS)}")
            queries = rec["queries"]
            if (
                not isinstance(queries, list)
                or not queries
                or not all(isinstance(q, str) and q.strip() for q in queries)
            ):
                raise InputError(f"{rwhere}: 'queries' must be a non-empty list of non-empty strings")
            passage = _text(rec, "passage", rwhere)
            if sentence not in passage:
                raise InputError(f"{rwhere}: the family's sentence does not occur in the passage")
            records.append(Record(_text(rec, "id", rwhere), passage, tuple(queries)))
        families.append(
            Family(name, _text(obj, "block", where), sentence, tuple(records), _text(obj, "generic_query", where))
        )
        if limit is not None and len(families) >= limit:
            break
    if not families:
        raise InputError(f"{path}: no families")
    ids = [r.id for f in families for r in f.records]
    if len(set(ids)) != len(ids):
        raise InputError(f"{path}: record ids are not unique")
    return families


def read_distractors(path: Path) -> list[str]:
    """Distractor sentences, one per non-blank line."""
    if not path.is_file():
        raise InputError(f"distractors file not found: {path}")
    lines = [ln.strip() for ln in read_text(path).splitlines() if ln.strip()]
    if len(lines) < DISTRACTORS_PER_TEXT:
        raise InputError(f"{path}: {len(lines)} distractor sentences, need at least {DISTRACTORS_PER_TEXT}")
    return lines


def distractor_lines(
    record_no: int, query_no: int | None, n_lines: int, per_text: int = DISTRACTORS_PER_TEXT
) -> list[int]:
    """Distractor line numbers for record `record_no` (0-based, file order): its passage
    (``query_no=None``) gets lines 5j..5j+4, its query q gets 5j+20+5q..5j+24+5q, mod the
    number of lines (README protocol, generalised to any count of lines and queries)."""
    start = per_text * record_no
    if query_no is not None:
        start += QUERY_DISTRACTOR_OFFSET + per_text * query_no
    return [(start + i) % n_lines for i in range(per_text)]


def with_distractors(text: str, lines: Sequence[int], distractors: Sequence[str]) -> str:
    """Append the distractor sentences with single spaces (they become extra sentences)."""
    return " ".join([text, *(distractors[i] for i in lines)])


# --------------------------------------------------------------------------- metrics


def top1_share(scores: F64, gold: int, *, tol: float = TIE_TOLERANCE) -> float:
    """1/k when the gold is among the k records tied at the top score, else 0."""
    if scores.ndim != 1 or not 0 <= gold < scores.shape[0]:
        raise ValueError("scores must be one row and gold an index into it")
    top = scores >= scores.max() - tol
    return 1.0 / int(top.sum()) if top[gold] else 0.0


def takes_top(scores: F64, members: Sequence[int], *, tol: float = TIE_TOLERANCE) -> bool:
    """Do `members` take the top len(members) positions, strictly above every other record?
    A non-member tied (within `tol`) with the weakest member does not count as beaten."""
    mask = np.zeros(scores.shape[0], dtype=bool)
    mask[list(members)] = True
    if mask.all():
        return True
    return bool(scores[mask].min() > scores[~mask].max() + tol)


def part_scores(query_rows: F64, stored: F64) -> F64:
    """Score of each stored row: its best cosine over the query's parts (max over parts)."""
    out: F64 = (query_rows @ stored.T).max(axis=0)
    return out


# --------------------------------------------------------------------------- the run


@dataclass
class QueryOutcome:
    record_id: str
    query_no: int
    representation: str
    condition: str
    share: float
    top_ids: list[str]


@dataclass
class FamiliesResult:
    """Accuracies per representation and condition, the generic-query count, and details."""

    accuracy: dict[str, dict[str, float]]
    generic_hit: int
    generic_of: int
    queries: int
    weight: float
    generic: str
    outcomes: list[QueryOutcome] = field(default_factory=list)
    generic_misses: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of issue 6 (accuracies are fractions 0..1)."""
        return {
            "results": {rep: dict(conds) for rep, conds in self.accuracy.items()},
            "generic_top4": {"hit": self.generic_hit, "of": self.generic_of},
        }


class _Vectors:
    """Embeds each distinct text exactly once, in one batch, on one side (stored or query)."""

    def __init__(self, embedder: Embedder, texts: Sequence[str], side: Side = "passage") -> None:
        uniq = list(dict.fromkeys(texts))
        vecs = unit(np.asarray(embed_side(embedder, uniq, side), dtype=np.float32))
        self._index = {t: i for i, t in enumerate(uniq)}
        self._vecs = vecs

    def __call__(self, text: str) -> npt.NDArray[np.float32]:
        row: npt.NDArray[np.float32] = self._vecs[self._index[text]]
        return row


@dataclass(frozen=True)
class _Query:
    parts: tuple[str, ...]
    whole: str


def _query(message: str, rules: SplitRules) -> _Query:
    """Parts and capped whole message, exactly as pgmem.recall.embed_query builds them (the
    merge of parts of one subject follows in `query_rows`, from their vectors)."""
    parts = split_prompt_chunks(message, rules)
    if not parts:
        raise InputError(f"empty query message: {message!r}")
    whole = cap_bytes_keep_end(" ".join(message.split()), WHOLE_MESSAGE_BYTES)
    return _Query(tuple(cap_bytes_keep_end(p, WHOLE_MESSAGE_BYTES) for p in parts), whole)


def evaluate(
    families: Sequence[Family],
    distractors: Sequence[str],
    embedder: Embedder,
    *,
    weight: float = DEFAULT_WEIGHT,
    rules: SplitRules = SplitRules(),
    generic: str = "generic_query",
    progress: Callable[[str], None] | None = None,
) -> FamiliesResult:
    """Run every representation and condition on `families` (see the module docstring)."""
    say = progress or (lambda _msg: None)
    records = [(fam, rec) for fam in families for rec in fam.records]
    n_lines = len(distractors)
    noisy_passage = {
        rec.id: with_distractors(rec.passage, distractor_lines(j, None, n_lines), distractors)
        for j, (_, rec) in enumerate(records)
    }
    queries: dict[tuple[str, int, bool], _Query] = {}
    for j, (_, rec) in enumerate(records):
        for q, message in enumerate(rec.queries):
            queries[(rec.id, q, False)] = _query(message, rules)
            noisy = with_distractors(message, distractor_lines(j, q, n_lines), distractors)
            queries[(rec.id, q, True)] = _query(noisy, rules)
    if generic not in GENERIC_TEXTS:
        raise InputError(f"generic must be one of {GENERIC_TEXTS}, got {generic!r}")
    generic_q = {
        fam.name: _query(fam.sentence if generic == "sentence" else fam.generic_query, rules) for fam in families
    }

    texts: list[str] = []
    for fam, rec in records:
        texts += [fam.sentence, rec.passage, noisy_passage[rec.id]]
    qtexts: list[str] = []
    for qq in [*queries.values(), *generic_q.values()]:
        qtexts += [*qq.parts, qq.whole]
    n_texts = len(set(texts)) + len(set(qtexts))
    say(f"families: {len(families)} families, {len(records)} records; embedding {n_texts} distinct texts")
    # One batch for a symmetric model; a model with a query side embeds queries apart.
    sided = isinstance(embedder, QueryEmbedder)
    vec = _Vectors(embedder, texts if sided else [*texts, *qtexts])
    qvec = _Vectors(embedder, qtexts, "query") if sided else vec

    def stored(rep: str, rec_fam: Family, rec: Record, noisy: bool) -> npt.NDArray[np.float32]:
        passage = vec(noisy_passage[rec.id] if noisy else rec.passage)
        if rep == "isolated":
            return vec(rec_fam.sentence)
        if rep in ("whole", "query_only_blend"):
            return passage
        return blend(vec(rec_fam.sentence), passage, weight)

    def query_rows(rep: str, qq: _Query) -> F64:
        whole = qvec(qq.whole)
        if rep == "whole":
            return whole[None, :].astype(np.float64)
        raw = np.stack([qvec(p) for p in qq.parts])
        if rep == "isolated":
            return raw.astype(np.float64)
        # pgmem's query: parts of one subject merged (the model's subject_cosine), each blended.
        q = blend_query(list(qq.parts), np.vstack([raw, whole[None, :]]), weight, subject_cosine_for(embedder))
        return q.blended.astype(np.float64)

    blocks: dict[str, list[tuple[Family, Record]]] = {}
    for fam, rec in records:
        blocks.setdefault(fam.block, []).append((fam, rec))

    accuracy: dict[str, dict[str, float]] = {}
    outcomes: list[QueryOutcome] = []
    n_queries = sum(len(rec.queries) for _, rec in records)
    for rep in REPRESENTATIONS:
        accuracy[rep] = {}
        for cond in CONDITIONS:
            noisy_stored = cond in ("stored_distractions", "both")
            noisy_query = cond in ("query_distractions", "both")
            total = 0.0
            for members in blocks.values():
                ids = [rec.id for _, rec in members]
                matrix = np.stack([stored(rep, f, r, noisy_stored) for f, r in members]).astype(np.float64)
                for gold, (_, rec) in enumerate(members):
                    for q in range(len(rec.queries)):
                        scores = part_scores(query_rows(rep, queries[(rec.id, q, noisy_query)]), matrix)
                        share = top1_share(scores, gold)
                        total += share
                        top = np.flatnonzero(scores >= scores.max() - TIE_TOLERANCE)
                        outcomes.append(QueryOutcome(rec.id, q, rep, cond, share, [ids[i] for i in top]))
            accuracy[rep][cond] = total / n_queries
        say("families: " + rep + " " + " ".join(f"{c}={accuracy[rep][c]:.3f}" for c in CONDITIONS))

    hit, misses = 0, []
    for members in blocks.values():
        matrix = np.stack([stored("blended", f, r, False) for f, r in members]).astype(np.float64)
        for fam in dict.fromkeys(f for f, _ in members):
            scores = part_scores(query_rows("blended", generic_q[fam.name]), matrix)
            own = [i for i, (f, _) in enumerate(members) if f is fam]
            if takes_top(scores, own):
                hit += 1
            else:
                misses.append(fam.name)
    say(f"families: generic queries, own records in the top {len(families[0].records)}: {hit} of {len(families)}")
    return FamiliesResult(accuracy, hit, len(families), n_queries, weight, generic, outcomes, misses)


def run(
    path: Path,
    *,
    embedder: Embedder,
    distractors: Path,
    limit: int | None = None,
    weight: float = DEFAULT_WEIGHT,
    generic: str = "generic_query",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """`pgmem eval families`: read the files, evaluate, return the issue's JSON object."""
    return evaluate_files(
        path, embedder=embedder, distractors=distractors, limit=limit, weight=weight, generic=generic, progress=progress
    ).as_dict()


def evaluate_files(
    path: Path,
    *,
    embedder: Embedder,
    distractors: Path,
    limit: int | None = None,
    weight: float = DEFAULT_WEIGHT,
    generic: str = "generic_query",
    progress: Callable[[str], None] | None = None,
) -> FamiliesResult:
    """:func:`evaluate` on a families file and a distractors file (details kept)."""
    fams = read_families(path, limit=limit)
    return evaluate(fams, read_distractors(distractors), embedder, weight=weight, generic=generic, progress=progress)


def report_notes(result: FamiliesResult, *, against: str = "whole", rep: str = "blended") -> list[str]:
    """Markdown paragraphs for `--out`: how the run was scored, and where `rep` lost to
    `against` (query by query), so a report says where pgmem loses."""
    notes = [
        f"Exact cosine search in numpy within each block; weight {result.weight}; "
        f"{result.queries} record queries; a query with several parts scores a record by its best part; "
        f"ties within {TIE_TOLERANCE:g} are split. Generic queries ({result.generic}): blended query against "
        "clean blended stored vectors; a family counts when its own records take the top positions strictly.",
    ]
    by_key = {(o.record_id, o.query_no, o.representation, o.condition): o for o in result.outcomes}
    lines = []
    other_family = 0
    for cond in CONDITIONS:
        for o in result.outcomes:
            if o.representation != rep or o.condition != cond:
                continue
            base = by_key[(o.record_id, o.query_no, against, cond)]
            if o.share < base.share:
                other_family += o.record_id.split("/")[0] not in {t.split("/")[0] for t in o.top_ids}
                lines.append(
                    f"| {cond} | {o.record_id} | {o.query_no + 1} | {', '.join(o.top_ids)} | {base.share:.2f} → "
                    f"{o.share:.2f} |"
                )
    if lines:
        head = [
            f"Queries where {rep} scored below {against}: {len(lines)}, of which {other_family} put a record "
            "of another family first:",
            "",
            f"| condition | record | query | {rep} top-1 | share {against} → {rep} |",
            "|---|---|---|---|---|",
        ]
        notes.append("\n".join(head + lines))
    if result.generic_misses:
        notes.append("Generic queries whose family did not take the top: " + ", ".join(result.generic_misses))
    return notes
