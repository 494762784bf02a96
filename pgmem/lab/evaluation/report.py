"""Markdown tables and bar plots for any suite's result object.

Generic over the suites' JSON: a mapping whose values are mappings of numbers becomes a
table (one row per key, one column per inner key) and a grouped bar plot; a mapping of
numbers becomes a two-column table; deeper nesting (``by_kind``, ``by_target``) becomes
one table per inner key. Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Names of floats that are not shares of queries: shown as plain numbers, not percentages.
_PLAIN = re.compile(
    r"^(mrr.*|(best_|floor_)?weight|(best_)?floor|cosine.*|score|threshold|.*_ms|.*_seconds|seconds|ms"
    r"|.*_load|.*_load_(before|after)|load_average|p_.*|diff.*)$",
    re.I,
)


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[tuple[str, list[Any]]]

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, int | float) and not isinstance(v, bool) for _, vals in self.rows for v in vals)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _flat_row(row: object) -> dict[str, Any] | None:
    """A row's cells: numbers as they are, a mapping of numbers as `key.inner` cells."""
    if not isinstance(row, Mapping) or not row:
        return None
    cells: dict[str, Any] = {}
    for key, value in row.items():
        if _is_number(value):
            cells[str(key)] = value
        elif isinstance(value, Mapping) and value and all(_is_number(x) for x in value.values()):
            cells.update({f"{key}.{k}": x for k, x in value.items()})
        else:
            return None
    return cells


def _is_table(v: object) -> bool:
    """A mapping of rows, each a mapping of numbers (or of one more level of numbers, flattened).
    Rows made only of sub-mappings (method -> metric per kind) are split into one table each."""
    if not isinstance(v, Mapping) or not v:
        return False
    if not all(_flat_row(row) is not None for row in v.values()):
        return False
    return not all(isinstance(x, Mapping) for row in v.values() for x in row.values())


def _scalar(v: object) -> bool:
    return _is_number(v) or isinstance(v, str | bool) or v is None


def tables(result: Mapping[str, Any], title: str = "") -> list[Table]:
    """Every table found in `result`, in key order. The scalars of the top level form a
    `summary` table; nested scalars (a group's `questions`) label that group's tables."""
    out: list[Table] = []
    scalars = [(str(k), [v]) for k, v in result.items() if _scalar(v)]
    if title and scalars and any(isinstance(v, Mapping) for v in result.values()):
        title = f"{title} ({', '.join(f'{k} {fmt(v[0], percent=False)}' for k, v in scalars)})"
        scalars = []
    for key, value in result.items():
        name = f"{title} / {key}" if title else str(key)
        if _is_table(value):
            flat = {str(r): _flat_row(vals) or {} for r, vals in value.items()}
            cols = list(dict.fromkeys(c for row in flat.values() for c in row))
            rows = [(r, [vals.get(c) for c in cols]) for r, vals in flat.items()]
            out.append(Table(name, cols, rows))
        elif isinstance(value, Mapping) and value and all(_is_number(x) for x in value.values()):
            out.append(Table(name, ["value"], [(str(k), [v]) for k, v in value.items()]))
        elif isinstance(value, Mapping):
            out.extend(tables(value, name))
    if scalars:
        out.insert(0, Table(title or "summary", ["value"], scalars))
    return out


def _percent(column: str, row: str, table: str) -> bool:
    names = (column.rsplit(".", 1)[-1], row, table.split(" / ")[-1])
    return not any(_PLAIN.match(s) for s in names)


def fmt(value: Any, *, percent: bool) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool) or not _is_number(value):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if percent and 0.0 <= value <= 1.0:
        return f"{100 * value:.1f}%"
    return f"{value:.3f}"


def markdown_table(table: Table, *, row_header: str = "") -> str:
    head = [row_header or "", *table.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for name, vals in table.rows:
        cells = [fmt(v, percent=_percent(c, name, table.title)) for c, v in zip(table.columns, vals, strict=True)]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def markdown(result: Mapping[str, Any], *, heading_level: int = 3) -> str:
    """All tables of `result` as Markdown, each under its own heading."""
    parts = []
    for t in tables(result):
        parts.append("#" * heading_level + f" {t.title}\n\n{markdown_table(t)}\n")
    return "\n".join(parts)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "table"


def bar_plot(table: Table, path: Path, *, title: str) -> Path:
    """Grouped bars: one group per column (metric or condition), one bar per row (method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_rows, n_cols = len(table.rows), len(table.columns)
    width = 0.8 / max(n_rows, 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * n_cols + 2.5), 4.2))
    pct = all(_percent(c, r, table.title) for c in table.columns for r, _ in table.rows)
    for i, (name, vals) in enumerate(table.rows):
        ys = [float(v) * (100 if pct else 1) if v is not None else 0.0 for v in vals]
        xs = [j + (i - (n_rows - 1) / 2) * width for j in range(n_cols)]
        bars = ax.bar(xs, ys, width, label=name)
        if n_rows * n_cols <= 32:
            ax.bar_label(bars, fmt="%.1f" if pct else "%.3f", fontsize=7, padding=1)
    ax.set_xticks(range(n_cols), table.columns, rotation=15 if n_cols > 4 else 0)
    ax.set_ylabel("%" if pct else "value")
    if pct:
        ax.set_ylim(0, 105)
    ax.set_title(title)
    if n_rows > 1:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plots(suite: str, result: Mapping[str, Any], out_dir: Path, *, max_rows: int = 12) -> list[Path]:
    """One PNG per numeric table of rows × columns (key/value tables, count columns such as
    `n`, and tables of more than `max_rows` rows are not plotted)."""
    paths = []
    for t in tables(result):
        if not t.numeric or t.columns == ["value"] or len(t.rows) > max_rows:
            continue
        keep = [j for j, _ in enumerate(t.columns) if not all(isinstance(vals[j], int) for _, vals in t.rows)]
        t = Table(t.title, [t.columns[j] for j in keep], [(r, [vals[j] for j in keep]) for r, vals in t.rows])
        if len(t.rows) * len(t.columns) < 2:
            continue
        paths.append(bar_plot(t, out_dir / f"{suite}-{_slug(t.title)}.png", title=f"{suite}: {t.title}"))
    return paths


def write_report(
    suite: str,
    result: Mapping[str, Any],
    out_dir: Path,
    *,
    command: str,
    extra_plots: Iterable[Path] = (),
    notes: Sequence[str] = (),
) -> Path:
    """Write `<suite>.md` with the tables, the command and the plots (PNG) into `out_dir`.
    A suite's own plots (`extra_plots`) replace the generic bar plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = list(extra_plots) or plots(suite, result, out_dir)
    lines = [f"# pgmem eval {suite}", "", "Reproduce with:", "", "```sh", command, "```", ""]
    lines += [f"{n}\n" for n in notes]
    lines.append(markdown(result, heading_level=2))
    for p in images:
        rel = p.relative_to(out_dir) if p.is_relative_to(out_dir) else p
        lines.append(f"![{p.stem}]({rel})\n")
    path = out_dir / f"{suite}.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
