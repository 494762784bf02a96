"""The fact plane: short sentences about what happened in a turn or section."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from pgmem.blend import DEFAULT_WEIGHT
from pgmem.db import scoped
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.recall import DEFAULT_FACT_FLOOR, DEFAULT_X, Group, Hit, Recall, embed_query
from pgmem.splitting import SplitRules


@dataclass(frozen=True)
class Fact:
    body: str
    thread: str | None = None
    turn_index: int | None = None
    section: str | None = None


def add_facts(
    conn: psycopg.Connection[tuple[object, ...]],
    scope: str,
    facts: Sequence[Fact],
    embedder: Embedder,
) -> list[int]:
    """Embed and store facts (at the fact plane's own dimension); returns their ids."""
    for i, f in enumerate(facts):
        if not f.body or not f.body.strip():
            raise InputError(f"facts[{i}]: body is empty")
    if not facts:
        return []
    vectors = embedder.embed([f.body for f in facts])
    with scoped(conn, scope):
        rows = conn.execute(
            """SELECT * FROM pgmem.add_facts(scope => %s, model_id => %s, bodies => %s,
                   vectors => %s::vector[], thread_ids => %s, turn_indexes => %s, sections => %s)""",
            (
                scope,
                embedder.model_id,
                [f.body for f in facts],
                list(vectors),
                [f.thread for f in facts],
                [f.turn_index for f in facts],
                [f.section for f in facts],
            ),
            binary=True,
        ).fetchall()
    return [int(str(r[0])) for r in rows]


def fact_recall(
    conn: psycopg.Connection[tuple[object, ...]],
    scope: str,
    message: str,
    embedder: Embedder,
    *,
    x: int = DEFAULT_X,
    floor: float = DEFAULT_FACT_FLOOR,
    thread: str | None = None,
    weight: float = DEFAULT_WEIGHT,
    rules: SplitRules = SplitRules(),
) -> Recall:
    """Per-part groups over the fact plane (seed: x = 5, cosine >= 0.35)."""
    q = embed_query(message, embedder, rules=rules, weight=weight)
    groups = [Group(i + 1, t) for i, t in enumerate(q.texts)]
    with scoped(conn, scope):
        rows = conn.execute(
            """SELECT part_no, rank, fact_id, thread_id, turn_index, section, body, cosine, score
                 FROM pgmem.fact_recall(scope => %s, part_vectors => %s::vector[], x => %s,
                                        floor => %s, thread => %s)""",
            (scope, list(np.asarray(q.blended)), x, floor, thread),
            binary=True,
        ).fetchall()
    for r in rows:
        groups[int(str(r[0])) - 1].hits.append(
            Hit(
                int(str(r[1])),
                int(str(r[2])),
                None if r[3] is None else str(r[3]),
                None if r[4] is None else int(str(r[4])),
                "" if r[5] is None else str(r[5]),
                str(r[6]),
                float(str(r[7])),
                float(str(r[8])),
            )
        )
    return Recall(message, groups)
