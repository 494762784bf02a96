"""The fact plane: short sentences about what happened in a turn or section."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pgmem.blend import DEFAULT_WEIGHT
from pgmem.calls import Call, Embed, Query, sync
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.recall import (
    DEFAULT_FACT_FLOOR,
    DEFAULT_X,
    Group,
    Hit,
    Recall,
    blend_query,
    check_message_args,
    check_target,
    query_inputs,
)
from pgmem.splitting import SplitRules
from pgmem.text import check_int, check_name, check_number, check_text, json_loads_once, read_lines
from pgmem.turns import check_one_name_each


@dataclass(frozen=True)
class Fact:
    """A fact sentence, optionally tied to a thread and turn or to a section. Two facts are the
    same when their scope, body, thread, turn and section are equal, exactly (case and spaces
    count; an empty or blank section is no section): adding a fact the scope holds already stores
    nothing. A body and a section are at most MAX_FACT_BYTES (UTF-8)."""

    body: str
    thread: str | None = None
    turn_index: int | None = None
    section: str | None = None


#: The largest turn index Postgres stores (integer).
_MAX_TURN = 2**31 - 1
#: The most UTF-8 bytes a fact's body, and its section, may hold: SQL's pgmem.add_facts refuses
#: more too (0118). A fact is a sentence or a few; a section names a document (an id of up to
#: 1,000 characters, or id#anchor) or a part of one.
MAX_FACT_BYTES = 8000


def _check_size(text: str, what: str) -> None:
    # A character is at most 4 bytes: a shorter text is not encoded to be measured.
    if len(text) > MAX_FACT_BYTES // 4 and (n := len(text.encode("utf-8"))) > MAX_FACT_BYTES:
        raise InputError(
            f"{what} is {n:,} bytes; at most {MAX_FACT_BYTES:,} (a fact is a sentence or a few: split a longer "
            "text into facts, or store it as a document)"
        )


def check_fact(fact: Fact, where: str) -> Fact:
    """`fact` if every field can be stored; else an InputError naming `where` and the field."""
    if not isinstance(fact, Fact):
        raise InputError(f"{where} must be a Fact, got {type(fact).__name__}")
    if not isinstance(fact.body, str) or not fact.body.strip():
        raise InputError(f"{where}: body must be a non-empty string, got {fact.body!r:.80}")
    check_text(fact.body, f"{where}: body")
    _check_size(fact.body, f"{where}: body")
    if fact.thread is not None:
        check_name(fact.thread, f"{where}: thread")
    turn = fact.turn_index
    if turn is not None:
        # Any integer (numpy's included, as every other integer argument), stored as an int.
        turn = check_int(turn, f"{where}: turn", 0, _MAX_TURN)
        if fact.thread is None:
            raise InputError(f"{where}: turn {turn} needs its thread (a turn is a thread's)")
    section = fact.section
    if section is not None:
        check_text(section, f"{where}: section")
        _check_size(section, f"{where}: section")
        # An empty or blank section is none, as SQL stores it (0118): one fact, not two.
        section = section if section.strip() else None
    if turn is None and section is fact.section:
        return fact
    return replace(fact, turn_index=turn, section=section)


_FACT_KEYS = frozenset({"body", "thread", "thread_id", "turn", "turn_index", "section"})


def fact_from_dict(obj: object, where: str) -> Fact:
    """A fact from one JSON object `{"body": ..., "thread"?: ..., "turn"?: ..., "section"?: ...}`;
    `thread_id` and `turn_index` name the thread and turn too, as in a turn's line (and in
    fact_recall's hits)."""
    if not isinstance(obj, dict):
        raise InputError(f'{where}: expected an object {{"body": ..., "thread"?, "turn"?, "section"?}}')
    if "body" not in obj:
        keys = ", ".join(sorted(str(k)[:40] for k in obj)[:5]) or "no key"
        raise InputError(f'{where}: a fact line needs "body" (its text); it has {keys}')
    # A misspelt key would store the fact tied to nothing, out of reach of forget_thread.
    unknown = sorted(k for k in obj if k not in _FACT_KEYS)
    if unknown:
        raise InputError(
            f"{where}: unknown key {unknown[0]!r:.60}: a fact line takes body, thread (or thread_id), "
            "turn (or turn_index) and section"
        )
    check_one_name_each(obj, where)
    thread, turn = obj.get("thread", obj.get("thread_id")), obj.get("turn", obj.get("turn_index"))
    fact = Fact(obj["body"], thread, turn, obj.get("section"))
    return check_fact(fact, where)


def read_facts(path: Path) -> list[Fact]:
    """Facts from a JSONL file, one object a line; the first bad line raises an InputError
    naming the line and the field (invalid UTF-8 and NUL included)."""
    facts = []
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        check_text(line, where)
        try:
            obj = json_loads_once(line, where)
        except InputError:
            raise
        except (ValueError, RecursionError) as exc:
            raise InputError(f"{where}: not valid JSON ({exc!s:.200})") from None
        facts.append(fact_from_dict(obj, where))
    return facts


def add_facts_call(scope: str, facts: Sequence[Fact], embedder: Embedder) -> Call[list[int]]:
    """Embed and store facts (at the fact plane's own dimension); returns the ids of the facts
    stored now. Idempotent by content: a fact the scope holds already (same body, thread, turn
    and section), or one repeated in `facts`, is not stored again and has no id in the result."""
    check_name(scope, "scope")
    if not isinstance(facts, list | tuple):
        raise InputError(f"facts must be a list of Fact, got {type(facts).__name__}")
    facts = [check_fact(f, f"facts[{i}]") for i, f in enumerate(facts)]
    if not facts:
        return []
    vectors = yield Embed(embedder, [f.body for f in facts])
    rows = yield Query(
        scope,
        """SELECT * FROM pgmem.add_facts(scope => %s, model_id => %s, bodies => %s,
               vectors => %b::vector[], thread_ids => %s, turn_indexes => %s, sections => %s)""",
        (
            scope,
            embedder.model_id,
            [f.body for f in facts],
            list(vectors),
            [f.thread for f in facts],
            [f.turn_index for f in facts],
            [f.section for f in facts],
        ),
    )
    return [int(r[0]) for r in rows]


add_facts = sync(add_facts_call)


def fact_recall_call(
    scope: str,
    message: str,
    embedder: Embedder,
    *,
    x: int = DEFAULT_X,
    floor: float = DEFAULT_FACT_FLOOR,
    thread: str | None = None,
    weight: float = DEFAULT_WEIGHT,
    rules: SplitRules = SplitRules(),
) -> Call[Recall]:
    """Per-part groups over the fact plane (seed: x = 5, cosine >= 0.35). The embedder must be
    the model the scope's facts were stored with (ModelMismatchError)."""
    x = check_int(x, "x", 1, 1000)
    floor = check_number(floor, "floor (a raw cosine)", -1, 1)
    weight = check_message_args(weight, rules)
    check_target(scope, thread)
    parts, inputs = query_inputs(message, rules=rules)
    q = blend_query(parts, (yield Embed(embedder, inputs, "query")), weight)
    groups = [Group(i + 1, t) for i, t in enumerate(q.texts)]
    rows = yield Query(
        scope,
        """SELECT part_no, rank, fact_id, thread_id, turn_index, section, body, cosine, score
             FROM pgmem.fact_recall(scope => %s, part_vectors => %b::vector[], x => %s,
                                    floor => %s, thread => %s, model_id => %s)""",
        (scope, list(np.asarray(q.blended)), x, floor, thread, embedder.model_id),
    )
    for r in rows:
        groups[int(r[0]) - 1].hits.append(
            Hit(
                int(r[1]),
                int(r[2]),
                None if r[3] is None else str(r[3]),
                None if r[4] is None else int(r[4]),
                "" if r[5] is None else str(r[5]),
                str(r[6]),
                float(r[7]),
                float(r[8]),
            )
        )
    result = Recall(message, groups)
    if not rows:
        why = yield Query(
            scope,
            "SELECT reason, message FROM pgmem.empty_recall_reason(%s, %s, NULL, 'fact')",
            (scope, thread),
            one=True,
        )
        if why is not None:
            result.empty_reason, result.empty_message = str(why[0]), str(why[1])
    return result


fact_recall = sync(fact_recall_call)
