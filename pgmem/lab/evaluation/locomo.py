"""`pgmem eval locomo FILE`: the same seven methods and metrics as LongMemEval, on the
LoCoMo format.

A file holds a list of conversations (a single object is accepted too), each:

    {"sample_id": "...",
     "conversation": {"speaker_a": "A", "speaker_b": "B",
                      "session_1_date_time": "1:56 pm on 8 May, 2023",
                      "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "..."}, ...], ...},
     "qa": [{"question": "...", "answer": "...", "evidence": ["D1:3"], "category": 2}, ...]}

One thread per conversation, sessions in number order. `speaker_a` (else the first
speaker) plays the user: a turn is one of their messages and the other speaker's
replies after it. A message is stored as `Name: text` (plus the caption of a shared
image), so names can be searched; dia ids are never stored. Every turn carries its
session's date when it parses. Gold = the turns holding an evidence dia id; category 5
(adversarial) and questions without usable evidence are skipped. With `limit`, a seeded
sample of the questions is run.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgmem.blend import DEFAULT_WEIGHT
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.lab.evaluation.common import check_split, in_split, progress, temporary_database
from pgmem.lab.evaluation.conversations import METHODS, bar_plot, check_methods
from pgmem.lab.evaluation.longmemeval import METRICS, compare_methods, eval_connections, evaluate_threads
from pgmem.recall import DEFAULT_FLOOR
from pgmem.sqlfiles import InstallParams
from pgmem.text import read_json_file
from pgmem.turns import Turn

_SESSION = re.compile(r"^session_(\d+)$")
_DIA = re.compile(r"D\d+:\d+")
_DATE_FORMATS = (
    "%I:%M %p on %d %B, %Y",
    "%I:%M %p on %d %b, %Y",
    "%d %B %Y",
    "%d %B, %Y",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
)
SKIP_CATEGORY = 5

Item = tuple[str, str, Sequence[Turn], frozenset[tuple[str, int]]]


def parse_date(value: object) -> datetime | None:
    """LoCoMo dates look like `1:56 pm on 8 May, 2023`; None when absent or unparseable."""
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def conversation_turns(conv: Mapping[str, Any], thread: str, where: str) -> tuple[list[Turn], dict[str, int]]:
    """Turns of one conversation and, for every dia id, the index of the turn holding it."""
    sessions = sorted((int(m.group(1)), k) for k in conv if (m := _SESSION.match(k)))
    if not sessions:
        raise InputError(f"{where}: conversation has no session_N lists")
    user = conv.get("speaker_a")
    turns: list[Turn] = []
    where_dia: dict[str, int] = {}
    for n, key in sessions:
        msgs = conv[key]
        if not isinstance(msgs, list):
            raise InputError(f"{where}: {key} must be a list of messages")
        date = parse_date(conv.get(f"session_{n}_date_time"))
        groups: list[tuple[list[dict[str, Any]], list[str]]] = []
        for i, m in enumerate(msgs):
            if not isinstance(m, Mapping) or not isinstance(m.get("text"), str):
                raise InputError(f"{where}: {key}[{i}] must be an object with a text")
            speaker = str(m.get("speaker") or "")
            if user is None:
                user = speaker
            role = "user" if speaker == user else "assistant"
            if role == "user" or not groups:
                groups.append(([], []))
            text = f"{speaker}: {m['text']}" if speaker else str(m["text"])
            if isinstance(m.get("blip_caption"), str) and m["blip_caption"].strip():
                text += f" [shared an image: {m['blip_caption']}]"
            groups[-1][0].append({"role": role, "content": text})
            if m.get("dia_id") is not None:
                groups[-1][1].append(str(m["dia_id"]))
        for messages, dias in groups:
            for d in dias:
                where_dia[d] = len(turns)
            turns.append(Turn("eval", thread, len(turns), date, tuple(messages)))
    return turns, where_dia


def load(path: Path) -> list[Item]:
    """(store name, question, turns, gold keys) for every scored question of the file."""
    data = read_json_file(path)  # one InputError line: unreadable, not UTF-8, not JSON
    samples = data if isinstance(data, list) else [data]
    items: list[Item] = []
    for i, sample in enumerate(samples):
        where = f"{path}: conversation {i}"
        if not isinstance(sample, Mapping) or not isinstance(sample.get("conversation"), Mapping):
            raise InputError(f"{where}: needs a 'conversation' object")
        qa = sample.get("qa") or []
        if not isinstance(qa, list):
            raise InputError(f"{where}: 'qa' must be a list")
        thread = str(sample.get("sample_id") or f"conv{i}")
        turns, where_dia = conversation_turns(sample["conversation"], thread, where)
        for q in qa:
            if not isinstance(q, Mapping) or not isinstance(q.get("question"), str):
                raise InputError(f"{where}: every qa entry needs a question")
            if str(q.get("category")) == str(SKIP_CATEGORY):
                continue
            ev = q.get("evidence") or []
            ids = _DIA.findall(" ".join(str(e) for e in ev)) if isinstance(ev, list) else _DIA.findall(str(ev))
            gold = frozenset((thread, where_dia[d]) for d in ids if d in where_dia)
            if gold:
                items.append((f"c{i}", q["question"], turns, gold))
    if not items:
        raise InputError(f"{path}: no question with evidence (category 5 is skipped)")
    return items


def run(
    path: Path,
    *,
    server_url: str,
    embedder: Embedder,
    limit: int | None = None,
    seed: int = 0,
    floor: float = DEFAULT_FLOOR,
    weight: float = DEFAULT_WEIGHT,
    depth: int = 10,
    methods: Sequence[str] = METHODS,
    compare: Sequence[Sequence[str]] = (),
    split: str = "all",
    **_: object,
) -> dict[str, Any]:
    check_split(split)
    check_methods(methods)
    # A question's half is keyed by its conversation and its text (LoCoMo has no question ids).
    items = [it for it in load(path) if in_split(f"{it[0]}:{it[1]}", split)]
    if limit is not None and limit < len(items):
        keep = sorted(random.Random(seed).sample(range(len(items)), limit))
        items = [items[i] for i in keep]
    progress(f"locomo: {len(items)} questions over {len({it[0] for it in items})} conversations")
    with (
        temporary_database(server_url, InstallParams(embedder.dims, embedder.dims)) as url,
        eval_connections(url) as conns,
    ):
        out = evaluate_threads(
            conns, embedder, items, methods=methods, floor=floor, weight=weight, depth=depth, what="locomo"
        )
    result = {"questions": len(items), "split": split, **out}
    if compare:
        result["comparisons"] = compare_methods(result, compare)
    return result


def plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "locomo.png"
    bar_plot(result["results"], METRICS, f"LoCoMo ({result['questions']} questions)", path)
    return [path]
