"""`pgmem eval coverage DIR`: the seed's motivating failure, measured on LongMemEval.

One store holds the haystacks of all the questions in the run (each question's
sessions are one thread of the same scope, as one user's long memory), as blended
labelled pieces. Each test message carries two or three questions of different
question types, in random order, optionally with a long unrelated paragraph (a message
from a held-out question's haystack, flattened to one line like a voice transcript)
inserted at a random place. Everything is drawn from a seeded generator, so runs repeat.

Coverage of a message = the share of its questions whose gold turn (a turn holding a
`has_answer` message) appears anywhere in the returned results; the suite reports the
mean over messages. Two ways to search the same store with the same budget:

- `one_vector`: one vector for the whole message and vector search only, top X·parts
  hits (parts = how many parts the message splits into, before a message that is one
  subject becomes one part): what a store of one vector per
  message does with the message.
- `one_query`: the whole message as one query in recall's default mode (hybrid: its
  vector and its distinctive words), top X·parts hits. Against `per_part` it isolates
  the split.
- `per_part`: pgmem's recall: each part blended with the whole message, a group of up
  to X hits per part.

`floor` (raw cosine) applies to all three; by default there is none, so only the
allocation of result slots (and, for `one_vector`, the word side) differs. Each coverage
has a bootstrap interval over messages, and `paired` compares `per_part` with both
one-query searches message by message.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgmem.blend import DEFAULT_WEIGHT
from pgmem.db import connect
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.ingest import ingest_turns
from pgmem.lab.evaluation.common import check_split, in_split, progress, temporary_database
from pgmem.lab.evaluation.conversations import (
    check_piece_options,
    check_query,
    piece_embedder,
    piece_turns,
    query_variant,
    word_settings,
)
from pgmem.lab.evaluation.longmemeval import Question, compare_methods, load_dir
from pgmem.lab.evaluation.stats import bootstrap_ci, paired
from pgmem.pieces import DEFAULT_MAX_BYTES
from pgmem.recall import DEFAULT_X, embed_query, recall_vectors, subject_cosine_for
from pgmem.sqlfiles import InstallParams
from pgmem.turns import Turn, content_text

SCOPE = "coverage"
PARAGRAPH_CHARS = (600, 2000)


@dataclass(frozen=True)
class TestMessage:
    text: str
    questions: tuple[int, ...]  # indexes into the store's questions


def paragraphs_from(questions: Sequence[Question]) -> list[str]:
    """Long messages of the given (held-out) haystacks, each flattened to one line."""
    out = []
    for q in questions:
        for t in q.turns:
            for m in t.messages:
                text = " ".join(content_text(m.get("content")).split())
                if PARAGRAPH_CHARS[0] <= len(text) <= PARAGRAPH_CHARS[1]:
                    out.append(text)
    return out


def build_messages(
    questions: Sequence[Question], paragraphs: Sequence[str], *, count: int, rng: random.Random
) -> list[TestMessage]:
    """`count` messages of 2-3 questions of different types (+ a paragraph if any)."""
    if len(questions) < 2:
        raise InputError("coverage needs at least two questions in the store")
    by_type: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        by_type.setdefault(q.qtype, []).append(i)
    out = []
    for _ in range(count):
        k = rng.choice((2, 3))
        types = rng.sample(sorted(by_type), min(k, len(by_type)))
        picked = [rng.choice(by_type[t]) for t in types]
        while len(picked) < k:  # fewer types than k: any other question
            extra = rng.randrange(len(questions))
            if extra not in picked:
                picked.append(extra)
        rng.shuffle(picked)
        texts = [" ".join(questions[i].question.split()) for i in picked]
        if paragraphs:
            texts.insert(rng.randrange(len(texts) + 1), rng.choice(paragraphs))
        out.append(TestMessage(" ".join(texts), tuple(picked)))
    return out


def sample_questions(path: Path, *, limit: int | None, seed: int, paragraph: bool) -> tuple[list[Question], list[str]]:
    """The same seeded sample as `longmemeval --limit` (so embeddings are shared) and,
    with `paragraph`, paragraphs from held-out questions drawn after it."""
    n_all = len(list(path.glob("*.json"))) if path.is_dir() else 0
    wanted = None if limit is None else limit + (max(1, limit // 10) if paragraph else 0)
    pool = load_dir(path, limit=wanted if wanted is not None and wanted < n_all else None, seed=seed)
    held: list[Question] = []
    if paragraph:
        n_held = max(1, (limit if limit is not None else len(pool)) // 10)
        n_held = min(n_held, len(pool) - 2)
        pool, held = pool[: len(pool) - n_held], pool[len(pool) - n_held :]
    paragraphs = paragraphs_from(held)
    if paragraph and not paragraphs:
        raise InputError(
            f"{path}: no message of {PARAGRAPH_CHARS[0]}-{PARAGRAPH_CHARS[1]} characters to use as a paragraph"
        )
    return (pool[:limit] if limit is not None else pool), paragraphs


def run(
    path: Path,
    *,
    server_url: str,
    embedder: Embedder,
    limit: int | None = None,
    seed: int = 0,
    messages: int = 200,
    paragraph: bool = False,
    x: int = DEFAULT_X,
    floor: float | None = None,
    weight: float = DEFAULT_WEIGHT,
    piece_bytes: int = DEFAULT_MAX_BYTES,
    label: str = "embedded",
    short_turns: str = "per_role",
    query: str = "parts",
    context: str = "mean",
    word_share: float | None = None,
    word_weight: float | None = None,
    compare: Sequence[Sequence[str]] = (),
    split: str = "all",
    **_: object,
) -> dict[str, Any]:
    """`limit` = questions whose haystacks form the store (a seeded sample; default all);
    `piece_bytes` / `label` / `short_turns` / `context`: the piece ablations of
    `pgmem.lab.evaluation.conversations`; `query`: how `per_part` splits the message
    (`conversations.query_variant`; X hits per resulting part); `word_share` /
    `word_weight`: hybrid's settings, for all three searches; `compare`: pairs of searches
    to compare message by message, a side being a search of this run or
    `FILE.json:SEARCH` of an earlier one (`longmemeval.compare_methods`)."""
    check_split(split)
    check_piece_options(piece_bytes, label, short_turns, context)
    check_query(query)
    rng = random.Random(seed)
    store_qs, paragraphs = sample_questions(path, limit=limit, seed=seed, paragraph=paragraph)
    # The store holds every question's history; with `split` the messages ask only that half's.
    asked = [i for i, q in enumerate(store_qs) if in_split(q.qid, split)]
    tests = [
        TestMessage(m.text, tuple(asked[j] for j in m.questions))
        for m in build_messages([store_qs[i] for i in asked], paragraphs, count=messages, rng=rng)
    ]
    turns = piece_turns(
        [Turn(SCOPE, q.qid, t.index, t.time, t.messages) for q in store_qs for t in q.turns],
        piece_bytes=piece_bytes,
        short_turns=short_turns,
    )
    progress(f"coverage: store of {len(store_qs)} questions, {len(turns)} turns; {len(tests)} messages")
    gold = [{(q.qid, t) for t in q.gold} for q in store_qs]
    f = -1.0 if floor is None else floor
    shares: dict[str, list[float]] = {"one_vector": [], "one_query": [], "per_part": []}
    with temporary_database(server_url, InstallParams(embedder.dims, embedder.dims)) as url, connect(url) as conn:
        word_settings(conn, word_share, word_weight)
        emb = piece_embedder(embedder, turns, piece_bytes=piece_bytes, label=label)
        report = ingest_turns(
            conn, turns, emb, weight=weight, max_bytes=piece_bytes, context=context, progress=_ingest_progress()
        )
        if report.failed:
            raise RuntimeError(f"coverage: ingest failed for {report.failed[:3]}")
        for n, msg in enumerate(tests, 1):
            parts = embed_query(msg.text, embedder, weight=weight, merge=False)
            # The one-query searches get X per part of pgmem's split whatever `query` is.
            whole_x = min(1000, x * len(parts.texts))
            q = query_variant(parts, query, subject_cosine_for(embedder))
            results = {
                "one_vector": recall_vectors(
                    conn, SCOPE, [msg.text], q.whole[None, :], x=whole_x, floor=f, mode="vector"
                ),
                "one_query": recall_vectors(conn, SCOPE, [msg.text], q.whole[None, :], x=whole_x, floor=f),
                "per_part": recall_vectors(conn, SCOPE, q.texts, q.blended, x=x, floor=f),
            }
            for name, res in results.items():
                found = {(h.thread_id, h.turn_index) for g in res.groups for h in g.hits}
                shares[name].append(sum(1 for i in msg.questions if found & gold[i]) / len(msg.questions))
            if n % 25 == 0 or n == len(tests):
                progress(
                    f"coverage: {n}/{len(tests)} messages · "
                    + " · ".join(f"{k} {_mean(v):.3f}" for k, v in shares.items())
                )
    result: dict[str, Any] = {
        "results": {k: _coverage(v) for k, v in shares.items()},
        "paired": {
            f"per_part − {base}": _difference(shares["per_part"], shares[base]) for base in ("one_vector", "one_query")
        },
        "messages": len(tests),
        "split": split,
        # A message is named by its place and its questions, so `--compare` pairs runs of the
        # same messages (same seed, limit and count).
        "ids": [f"{n}:" + "+".join(store_qs[i].qid for i in m.questions) for n, m in enumerate(tests)],
        "per_question": {k: {"coverage": v} for k, v in shares.items()},
    }
    if compare:
        result["comparisons"] = compare_methods(result, compare)
    return result


def _mean(v: Sequence[float]) -> float:
    return sum(v) / len(v) if v else 0.0


def _coverage(shares: Sequence[float]) -> dict[str, float]:
    mean, low, high = bootstrap_ci(shares)
    return {"coverage": mean, "ci_low": low, "ci_high": high}


def _difference(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    p = paired(a, b)
    return {k: p[k] for k in ("diff", "diff_low", "diff_high", "won", "lost", "tied", "p_bootstrap")}


def _ingest_progress() -> Callable[[int, int, int], None]:
    last = 0

    def report(done: int, total: int, pieces: int) -> None:
        nonlocal last
        if done == total or done - last >= 200:
            last = done
            progress(f"coverage: ingested {done}/{total} turns, {pieces} pieces")

    return report


def plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "coverage.png"
    names = list(result["results"])
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.bar(
        names, [result["results"][n]["coverage"] for n in names], color=["#999999", "#bbbbbb", "#1f77b4"][: len(names)]
    )
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of the message's questions covered")
    ax.set_title(f"Coverage ({result['messages']} messages)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
