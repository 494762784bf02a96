"""The README's and the docs' figures as data: tables rendered from results files.

A results file is what `pgmem eval SUITE ... --record docs/results/NAME.json` wrote: the run's
figures with the command, the commit, the date and the model. A page holds a rendered table
between two comments:

    <!-- figures KIND FILE... -->
    (the table, written by this module)
    <!-- /figures -->

KIND names a renderer below (`methods`, `compare`, `coverage`, ...), FILE the results files it
reads (`longmemeval-oracle` for docs/results/longmemeval-oracle.json). Each table ends with
the command, commit and date it came from.

Figures quoted in prose, outside those blocks, must each be a number of one of the page's
sources: docs/results/*.json, or the files a `<!-- sources: GLOB... -->` comment names
(relative to docs/, such as the benchmark outputs in docs/bench/). A number matches at the
precision the page shows it, as a share or a percentage.

`python -m pgmem.lab.evaluation.figures` checks every page (exit 1 with one line per stale
table or unmatched figure); `--write` renders the tables again. tests/test_docs.py runs the
check in the default suite, so a stale number fails it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The pages checked, relative to the repository root.
PAGE_GLOBS = ("README.md", "docs/*.md")
RESULTS = "docs/results"

BLOCK = re.compile(r"^<!-- figures (?P<spec>[^>]*?) -->\n(?P<body>.*?)^<!-- /figures -->$", re.S | re.M)
SOURCES = re.compile(r"<!-- sources: (?P<globs>[^>]*?) -->")
FENCE = re.compile(r"^(```|~~~).*?^\1$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)")
#: A figure: a number with a decimal part, or followed by % or ×. Not part of a version
#: (3.11, 0.8.5), an identifier or a path.
FIGURE = re.compile(r"(?<![\w.\-/#:])[−+\-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:%|×)?(?![\w.]?\d)(?!\w)")
#: A unit that makes a whole number a measured figure (`244 ms`, `313 MB`, `533/s`).
UNIT_AFTER = re.compile(r"\s?(ms|s|min|MB|GB|KB|/s|(pieces|texts|rows|turns|ops|units)/s)\b")
VERSION_BEFORE = re.compile(r"(Python|PostgreSQL|Postgres|pgvector|version|v)\s*$", re.I)

#: How methods are named in the tables, in the order they are listed.
METHOD_NAMES = {
    "hybrid": "**hybrid (the default)**",
    "blended": "blended pieces, vector only",
    "pieces": "pieces, unblended",
    "per_part": "**per-part groups (the default)**",
    "units": "**derived units (the default)**",
    "PgmemStore": "**PgmemStore**",
    "per_message": "one vector per message",
    "user_turns": "one vector per user message (the paper's turn index)",
    "fixed_chunks": "LangChain 1,000/200 chunks",
    "whole_turn": "one vector per whole turn",
    "one_query": "the message as one hybrid query",
    "one_vector": "one vector for the message",
    "chunk": "one vector per chunk",
    "PostgresStore": "LangGraph PostgresStore",
}


class FiguresError(Exception):
    """A block names an unknown renderer or a results file that is missing."""


@dataclass(frozen=True)
class Record:
    name: str
    data: dict[str, Any]

    @property
    def result(self) -> dict[str, Any]:
        r: dict[str, Any] = self.data["result"]
        return r

    def provenance(self) -> str:
        load = self.data.get("load_average") or [0.0]
        return (
            f"`{self.data['command']}` · commit {self.data['commit']} · {self.data['date']} · "
            f"{self.data['seconds']:,.0f} s, load {load[0]:.1f}"
        )


def load(root: Path, name: str) -> Record:
    path = root / RESULTS / f"{name}.json"
    try:
        return Record(name, json.loads(path.read_text(encoding="utf-8")))
    except OSError:
        raise FiguresError(f"no results file {path.relative_to(root)}") from None


# Formatting: shares as percentages with one decimal, scores with three, differences signed.
def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def pct_ci(x: float, low: float, high: float) -> str:
    return f"{100 * x:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def num_ci(x: float, low: float, high: float) -> str:
    return f"{x:.3f} [{low:.3f}, {high:.3f}]"


def diff_points(d: Mapping[str, float]) -> str:
    return f"{100 * d['diff']:+.1f} [{100 * d['diff_low']:+.1f}, {100 * d['diff_high']:+.1f}]"


def diff_score(d: Mapping[str, float]) -> str:
    return f"{d['diff']:+.3f} [{d['diff_low']:+.3f}, {d['diff_high']:+.3f}]"


def _questions(pair: Mapping[str, float]) -> int:
    return int(pair["won"] + pair["lost"] + pair["tied"])


def won_lost(d: Mapping[str, float]) -> str:
    return f"{int(d['won'])} / {int(d['lost'])} / {int(d['tied'])}"


def method_name(m: str) -> str:
    return METHOD_NAMES.get(m, m)


def ordered(methods: Sequence[str]) -> list[str]:
    rank = {m: i for i, m in enumerate(METHOD_NAMES)}
    return sorted(methods, key=lambda m: (rank.get(m, len(rank)), m))


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _pair_name(key: str) -> str:
    a, _, b = re.split(r"( vs | − )", key, maxsplit=1)
    return f"{method_name(a).strip('*')} − {method_name(b)}"


# Renderers: each takes the records its block names and returns the table's lines.
def render_methods(recs: Sequence[Record]) -> list[str]:
    """Conversation suites (LongMemEval, toolqa): one row per method."""
    (rec,) = recs
    res, ci = rec.result["results"], rec.result.get("ci", {})
    top, mrr = ("top1_message", "mrr_message") if "top1_message" in next(iter(res.values())) else ("top1", "mrr")
    rows = []
    for m in ordered(list(res)):
        c = ci.get(m, {})
        row = [
            method_name(m),
            pct_ci(res[m][top], c[f"{top}_low"], c[f"{top}_high"]) if c else pct(res[m][top]),
            num_ci(res[m][mrr], c[f"{mrr}_low"], c[f"{mrr}_high"]) if c else f"{res[m][mrr]:.3f}",
        ]
        if "recall_at_5" in res[m]:
            row.append(pct(res[m]["recall_at_5"]))
        rows.append(row)
    head = ["method", "top-1 [95% CI]", "MRR [95% CI]"] + (["recall@5"] if len(rows[0]) > 3 else [])
    return table(head, rows)


def render_compare(recs: Sequence[Record]) -> list[str]:
    """The paired comparisons of a run: the difference, its interval and won/lost/tied."""
    (rec,) = recs
    pairs: dict[str, Any] = rec.result.get("comparisons") or rec.result.get("paired") or {}
    if "pgmem_minus_postgres" in rec.result:
        pairs = {"PgmemStore − PostgresStore": rec.result["pgmem_minus_postgres"]}
    rows = []
    for key, row in pairs.items():
        top = next(k for k in ("top1", "top1_message", "coverage") if k in row)
        mrr = next((k for k in ("mrr", "mrr_message") if k in row), None)
        rows.append(
            [
                _pair_name(key),
                diff_points(row[top]),
                won_lost(row[top]),
                diff_score(row[mrr]) if mrr else "–",
            ]
        )
    return table(["paired comparison", "top-1 points [95% CI]", "won / lost / tied", "MRR [95% CI]"], rows)


def render_coverage(recs: Sequence[Record]) -> list[str]:
    (rec,) = recs
    res = rec.result["results"]
    rows = [
        [method_name(m), pct_ci(res[m]["coverage"], res[m]["ci_low"], res[m]["ci_high"])] for m in ordered(list(res))
    ]
    rows += [
        [_pair_name(k), f"{diff_points(d)} points, won / lost / tied {won_lost(d)}"]
        for k, d in rec.result["paired"].items()
    ]
    return table([f"{rec.result['messages']} messages", "coverage [95% CI]"], rows)


def render_kinds(recs: Sequence[Record]) -> list[str]:
    """toolqa by where the answer sits: top-1 message per method."""
    (rec,) = recs
    kinds = rec.result["by_kind"]
    methods = ordered(list(rec.result["results"]))
    rows = [
        [f"{k} ({v['questions']})", *(pct(v["results"][m]["top1_message"]) for m in methods)] for k, v in kinds.items()
    ]
    return table(["gold message (questions)", *(method_name(m) for m in methods)], rows)


def render_docs(recs: Sequence[Record]) -> list[str]:
    """Document sets: one row per set, chunks against units."""
    rows = []
    for rec in recs:
        res, ci, pair = rec.result["results"], rec.result["ci"], rec.result["paired"]["units − chunk"]
        for m in ("chunk", "units"):
            c = ci[m]
            rows.append(
                [
                    rec.name.removeprefix("docs-"),
                    "derived units, vector only" if m == "units" and rec.name.endswith("-vector") else method_name(m),
                    pct_ci(res[m]["top1"], c["top1_low"], c["top1_high"]),
                    num_ci(res[m]["mrr"], c["mrr_low"], c["mrr_high"]),
                ]
            )
        rows.append(
            [rec.name.removeprefix("docs-"), "units − chunk", diff_points(pair["top1"]), diff_score(pair["mrr"])]
        )
    return table(["set", "method", "top-1 [95% CI]", "MRR [95% CI]"], rows)


def render_targets(recs: Sequence[Record]) -> list[str]:
    """A document set by what the gold section is: chunks against units."""
    (rec,) = recs
    rows = [
        [f"{k} ({v['n']})", pct(v["chunk"]["top1"]), pct(v["units"]["top1"]), f"{v['chunk']['mrr']:.3f}",
         f"{v['units']['mrr']:.3f}"]
        for k, v in rec.result["by_target"].items()
    ]  # fmt: skip
    return table(["gold (questions)", "chunk top-1", "units top-1", "chunk MRR", "units MRR"], rows)


def render_sweep(recs: Sequence[Record]) -> list[str]:
    """The floor sweep: what each floor keeps and lets through, at the default weight."""
    (rec,) = recs
    rows = [
        [f"{r['floor']:.2f}", pct(r["mixed_gold_kept"]), pct(r["negatives_above"]), f"{r['precision']:.3f}",
         pct(r["top1_above_floor"])]
        for r in rec.result["floor_curve"]
        if round(r["floor"] * 100) % 5 == 0 and r["floor"] <= 0.5
    ]  # fmt: skip
    head = ["floor", "gold hits kept in mixed messages", "unrelated parts returning a hit", "precision",
            "top-1 above the floor"]  # fmt: skip
    return table(head, rows)


def render_families(recs: Sequence[Record]) -> list[str]:
    conditions = ("clean", "stored_distractions", "query_distractions", "both")
    rows = []
    for rec in recs:
        for m, vals in rec.result["results"].items():
            rows.append([rec.name.removeprefix("families-"), m, *(pct(vals[c]) for c in conditions)])
    return table(["set", "method", *(c.replace("_", " ") for c in conditions)], rows)


def render_langgraph(recs: Sequence[Record]) -> list[str]:
    (rec,) = recs
    res = rec.result["results"]
    rows = [
        [
            method_name(name),
            pct_ci(r["top1"], r["top1_ci_low"], r["top1_ci_high"]),
            num_ci(r["mrr"], r["mrr_ci_low"], r["mrr_ci_high"]),
            f"{r['put_p50_ms']:.0f} / {r['put_p95_ms']:.0f}",
            f"{r['search_p50_ms']:.0f} / {r['search_p95_ms']:.0f}",
            f"{r['searches_short_of_k']:,}",
        ]
        for name, r in sorted(res.items(), key=lambda kv: ordered(list(res)).index(kv[0]))
    ]
    return table(["store", "top-1 [95% CI]", "MRR [95% CI]", "put p50 / p95 ms", "search p50 / p95 ms",
                  "searches short of k"], rows)  # fmt: skip


def render_lme(recs: Sequence[Record]) -> list[str]:
    """LongMemEval's own retrieval metrics (its paper's script): recall_all@5 / @10 and
    NDCG@10, at turn level (user turns) and session level, one row per method and file; a
    level where every method is perfect is left out."""
    rows = []
    for rec in recs:
        res, n = rec.result["results"], rec.result["lme_questions"]
        for level in ("turn", "session"):
            if all(res[m][f"{level}_{k}"] == 1.0 for m in res for k in ("recall_all_at_5", "ndcg_at_10")):
                continue  # every method perfect (oracle's sessions are all evidence): nothing to read
            for m in ordered(list(res)):
                r = res[m]
                rows.append(
                    [rec.name.removeprefix("longmemeval-"), f"{level} ({n[level]})", method_name(m),
                     *(f"{r[f'{level}_{k}']:.3f}" for k in ("recall_all_at_5", "recall_all_at_10", "ndcg_at_10"))]
                )  # fmt: skip
    return table(["set", "level (questions)", "method", "recall_all@5", "recall_all@10", "NDCG@10"], rows)


def render_types(recs: Sequence[Record]) -> list[str]:
    """Top-1 by LongMemEval question type, one column per method."""
    (rec,) = recs
    by_type = rec.result["by_type"]
    methods = ordered([m for m in next(iter(by_type.values())) if m != "questions"])
    rows = [[f"{t} ({v['questions']})", *(pct(v[m]["top1"]) for m in methods)] for t, v in by_type.items()]
    return table(["question type (questions)", *(method_name(m) for m in methods)], rows)


#: What the decision runs' comparison files changed (`FILE.json:hybrid` sides), by file name.
ALTERNATIVES = {
    "word_weight_1": "word weight 1 (default 2)",
    "word_share_0.2": "word share 0.2 (default 0.1)",
    "query_split": "every part alone: no subject merging",
    "time_weight_0": "no time window (time weight 0, default 2)",
    "recency_0": "recency 0 (default 0.05)",
    "word_keep_rank_0": "no floor exception for a word match (word_keep_rank 0)",
    "head0": "no floor exception for a related part (floor_head 0)",
    "window_head_0": "no floor exception for a named time (window_head 0)",
    "ww1": "word weight 1 (e5's registry value 2)",
}


def _alternative(key: str) -> str:
    side = key.split(" vs ", 1)[1].rsplit(":", 1)[0]
    stem = Path(side).stem
    return next((label for k, label in ALTERNATIVES.items() if k in stem), stem)


def _set_label(name: str) -> str:
    """The set a tune/confirm record is of: `longmemeval-oracle-confirm` -> `oracle`."""
    base = name.removesuffix("-tune").removesuffix("-confirm").removesuffix("-decisions")
    base = base.removeprefix("longmemeval-").removeprefix("docs-")
    labels = {"own": "oracle", "own-time": "oracle", "floor-head": "oracle", "pooled-time": "pooled",
              "e5-word-weight": "oracle, e5 (first 100)", "window-head": "oracle"}  # fmt: skip
    return labels.get(base, base)


def _pairs(rec: Record) -> dict[str, tuple[dict[str, Any], dict[str, Any] | None]]:
    """A record's paired comparisons of the default, by what it is against: (top-1, MRR)."""
    r = rec.result
    out: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}
    for key, c in (r.get("comparisons") or {}).items():
        side = key.split(" vs ", 1)[1]
        what = _alternative(key) if side.endswith(":hybrid") else method_name(side)
        top = "top1_message" if "top1_message" in c else "top1"
        out[what] = (c[top], c.get(top.replace("top1", "mrr")))
    for key, c in (r.get("paired") or {}).items():
        what = method_name(key.split(" − ", 1)[1])
        out[what] = (c["top1"], c["mrr"]) if "top1" in c else (c, None)
    return out


def render_decisions(recs: Sequence[Record]) -> list[str]:
    """The default against each alternative setting or baseline, on the tuning half and on the
    confirmation half, with the gap between the two. The records come in pairs: NAME-tune and
    NAME (or NAME-confirm), the same command on each half."""
    rows = []
    tunes = {r.name.removesuffix("-tune"): r for r in recs if r.name.endswith("-tune")}
    for rec in (r for r in recs if not r.name.endswith("-tune")):
        tune = _pairs(tunes[rec.name.removesuffix("-confirm")])
        for alt, (c_top, c_mrr) in _pairs(rec).items():
            if alt not in tune:
                continue  # compared on the confirmation half only
            t_top = tune[alt][0]
            rows.append(
                [_set_label(rec.name), alt, diff_points(t_top), diff_points(c_top),
                 f"{100 * (t_top['diff'] - c_top['diff']):+.1f}", diff_score(c_mrr) if c_mrr else "–"]
            )  # fmt: skip
    head = ["set", "the default against", "tune: top-1 points", "confirm: top-1 points", "tune − confirm",
            "confirm: MRR"]  # fmt: skip
    return table(head, rows)


def render_headline(recs: Sequence[Record]) -> list[str]:
    """The README's table: per suite, the default against the best baseline, with the paired
    interval of the difference. A record may be a whole set (NAME) or a half (NAME-confirm)."""
    by = {r.name.removesuffix("-confirm"): r for r in recs}
    rows = []

    def conversation(name: str, what: str, top: str = "top1") -> None:
        rec = by[name]
        res, comps = rec.result["results"], rec.result["comparisons"]
        best = max(("per_message", "fixed_chunks", "whole_turn"), key=lambda m: res[m][top])
        key = f"hybrid vs {best}"
        d = comps[key][top] if key in comps else None
        n = rec.result["questions"]
        rows.append(
            [
                what.format(n=f"{n:,}"),
                f"{pct(res['hybrid'][top])}",
                f"{pct(res[best][top])} ({method_name(best)})",
                f"{diff_points(d)}" if d else "–",
            ]
        )

    if "longmemeval-oracle" in by:
        conversation("longmemeval-oracle", "LongMemEval oracle, each question's own history ({n}): top-1")
    if "longmemeval-pooled" in by:
        conversation("longmemeval-pooled", "LongMemEval oracle, every history in one store ({n}): top-1")
    if "longmemeval-s" in by:
        conversation("longmemeval-s", "LongMemEval s, {n} full 50-session histories: top-1")
    if "toolqa" in by:
        conversation("toolqa", "answers inside tool results, toolqa ({n}): top-1 message", top="top1_message")
    if "coverage" in by:
        res, pair = by["coverage"].result["results"], by["coverage"].result["paired"]
        n = by["coverage"].result["messages"]
        rows.append(
            [
                f"messages with several questions ({n}): questions covered",
                pct(res["per_part"]["coverage"]),
                f"{pct(res['one_query']['coverage'])} ({method_name('one_query')})",
                diff_points(pair["per_part − one_query"]),
            ]
        )
    for name in ("docs-raydocs", "docs-handbook"):
        if name in by:
            res, pair = by[name].result["results"], by[name].result["paired"]["units − chunk"]
            rows.append(
                [
                    f"documents, {name.removeprefix('docs-')} ({_questions(pair['top1'])}): top-1",
                    pct(res["units"]["top1"]),
                    f"{pct(res['chunk']['top1'])} ({method_name('chunk')})",
                    diff_points(pair["top1"]),
                ]
            )
    if "langgraph" in by:
        res, pair = by["langgraph"].result["results"], by["langgraph"].result["pgmem_minus_postgres"]
        rows.append(
            [
                f"LangGraph store on LongMemEval oracle ({_questions(pair['top1'])}): top-1",
                pct(res["PgmemStore"]["top1"]),
                f"{pct(res['PostgresStore']['top1'])} ({method_name('PostgresStore')})",
                diff_points(pair["top1"]),
            ]
        )
    return table(["suite (questions)", "pgmem default", "best baseline", "difference, points [95% CI]"], rows)


RENDERERS: dict[str, Callable[[Sequence[Record]], list[str]]] = {
    "methods": render_methods,
    "compare": render_compare,
    "coverage": render_coverage,
    "kinds": render_kinds,
    "docs": render_docs,
    "targets": render_targets,
    "sweep": render_sweep,
    "families": render_families,
    "langgraph": render_langgraph,
    "lme": render_lme,
    "types": render_types,
    "decisions": render_decisions,
    "headline": render_headline,
}


def render_block(root: Path, spec: str) -> str:
    kind, *names = spec.split()
    if kind not in RENDERERS:
        raise FiguresError(f"unknown figures block {kind!r}; known: {', '.join(RENDERERS)}")
    if not names:
        raise FiguresError(f"figures block {kind!r} names no results file")
    recs = [load(root, n) for n in names]
    lines = RENDERERS[kind](recs)
    lines.append("")
    lines += [f"<sub>{r.name}: {r.provenance()}</sub><br>" for r in recs]
    return "\n".join(lines) + "\n"


def render_page(root: Path, text: str, problems: list[str] | None = None) -> str:
    """The page with every figures block rendered from its results files. With `problems`, a
    block that cannot be rendered is left as it is and its error appended; without, it raises."""

    def one(m: re.Match[str]) -> str:
        try:
            return f"<!-- figures {m['spec']} -->\n{render_block(root, m['spec'])}<!-- /figures -->"
        except (FiguresError, KeyError, ValueError) as exc:
            if problems is None:
                raise
            problems.append(f"{exc}" if isinstance(exc, FiguresError) else f"block {m['spec']!r}: {exc!r}")
            return m.group(0)

    return BLOCK.sub(one, text)


def _numbers(data: object) -> Iterator[float]:
    if isinstance(data, bool):
        return
    if isinstance(data, int | float):
        yield float(data)
    elif isinstance(data, Mapping):
        for v in data.values():
            yield from _numbers(v)
    elif isinstance(data, list):
        for v in data:
            yield from _numbers(v)
    elif isinstance(data, str):
        yield from _text_numbers(data)


def _text_numbers(text: str) -> Iterator[float]:
    for m in re.finditer(r"\d[\d,]*(?:\.\d+)?", text):
        try:
            yield float(m.group(0).replace(",", ""))
        except ValueError:
            continue


def source_numbers(root: Path, page_text: str) -> set[float]:
    """Every number of the page's sources (results files, and the files `<!-- sources: -->` names)."""
    paths = sorted((root / RESULTS).glob("*.json"))
    for m in SOURCES.finditer(page_text):
        for pattern in m["globs"].split():
            paths += sorted((root / "docs").glob(pattern))
    out: set[float] = set()
    for p in paths:
        text = p.read_text(encoding="utf-8")
        out.update(_numbers(json.loads(text)) if p.suffix == ".json" else _text_numbers(text))
    return out


def prose(text: str) -> str:
    """The page without what is not prose: code, comments, figures blocks, link targets."""
    for pattern in (BLOCK, FENCE, COMMENT, INLINE_CODE, LINK_TARGET):
        text = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return text


def quoted_figures(text: str) -> list[tuple[int, str]]:
    """(line, figure) for each figure quoted in the page's prose."""
    body = prose(text)
    out = []
    for m in FIGURE.finditer(body):
        tok = m.group(0)
        unit = UNIT_AFTER.match(body, m.end())
        if not ("." in tok or tok.endswith(("%", "×")) or unit):
            continue
        if VERSION_BEFORE.search(body[max(0, m.start() - 12) : m.start()]):
            continue
        out.append((body.count("\n", 0, m.start()) + 1, tok))
    return out


def matches(figure: str, numbers: set[float]) -> bool:
    t = figure.lstrip("−+-").rstrip("%×").replace(",", "")
    value = float(t)
    places = len(t.split(".")[1]) if "." in t else 0
    return any(round(abs(n) * scale, places) == value for n in numbers for scale in (1, 100))


def pages(root: Path) -> list[Path]:
    return [p for g in PAGE_GLOBS for p in sorted(root.glob(g))]


def check(root: Path) -> list[str]:
    """One line per stale table or quoted figure that is in none of its page's sources."""
    problems = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(root)
        errors: list[str] = []
        if render_page(root, text, errors) != text:
            problems.append(f"{rel}: a figures table differs from its results file (render with --write)")
        problems += [f"{rel}: {e}" for e in errors]
        numbers = source_numbers(root, text)
        for line, fig in quoted_figures(text):
            if not matches(fig, numbers):
                problems.append(f"{rel}:{line}: {fig} is in no results file of this page")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pgmem.lab.evaluation.figures", description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (default: here)")
    ap.add_argument("--write", action="store_true", help="render every figures block again")
    args = ap.parse_args(argv)
    if args.write:
        for page in pages(args.root):
            text = page.read_text(encoding="utf-8")
            new = render_page(args.root, text, [])
            if new != text:
                page.write_text(new, encoding="utf-8")
                print(f"rendered {page.relative_to(args.root)}")
    problems = check(args.root)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
