"""The lab (pgmem.lab: `pgmem eval`, `pgmem bench`, the benchmark scripts) stays apart from the
library: nothing in the core imports it, and its commands name the `[eval]` extra when a
package of it is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import pgmem.lab
from pgmem import cli

#: Run in a fresh interpreter: import every module of pgmem outside the lab, build the CLI's
#: parser and parse a core command, then report what got loaded.
_PROBE = """
import importlib, json, pkgutil, sys
names, todo = [], ["pgmem"]
while todo:  # (pkgutil.walk_packages would import pgmem.lab itself to look inside)
    package = importlib.import_module(todo.pop())
    for m in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        # optional extras, and package data (the migrations run alembic when imported)
        if m.name in ("pgmem.lab", "pgmem.__main__", "pgmem.integrations", "pgmem.migrations", "pgmem.sql"):
            continue
        names.append(m.name)
        if m.ispkg:
            todo.append(m.name)
        else:
            importlib.import_module(m.name)
from pgmem.cli import build_parser
build_parser().parse_args(["recall", "--scope", "s", "hello"])
build_parser().parse_args(["docs", "search", "--scope", "s", "hello"])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("matplotlib", "langchain_text_splitters")
                or m.startswith("pgmem.lab"))
print(json.dumps({"imported": names, "loaded": loaded}))
"""


def test_core_never_imports_the_lab() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    # The probe really walked the core (a walk that found nothing would pass vacuously).
    for name in ("pgmem.ingest", "pgmem.recall", "pgmem.facts", "pgmem.documents.store", "pgmem.cli.memory"):
        assert name in report["imported"]
    assert report["loaded"] == []


def test_lab_commands_are_listed_and_load_when_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    listing = capsys.readouterr().out
    for command, (_, text) in cli.LAB_COMMANDS.items():
        assert f"{command}  " in listing and text.split()[0] in listing
    with pytest.raises(SystemExit) as exit_:
        cli.main(["eval", "--help"])
    assert exit_.value.code == 0
    assert "longmemeval" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--help"])
    assert exit_.value.code == 0
    assert "--size" in capsys.readouterr().out


@pytest.mark.parametrize("missing", pgmem.lab.EVAL_MODULES)
def test_eval_without_its_extra_names_the_extra(
    missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # import and find_spec now see it as absent
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    f = tmp_path / "families.jsonl"
    f.write_text("", encoding="utf-8")
    assert cli.main(["eval", "families", str(f), "--distractors", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert missing in err and "pip install 'pgmem[eval]'" in err
    assert not (tmp_path / "home" / "cache").exists()  # refused before any work


def test_lab_module_with_a_missing_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "_probe_cli.py").write_text("import pgmem_no_such_package\n", encoding="utf-8")
    monkeypatch.setattr(pgmem.lab, "__path__", [*pgmem.lab.__path__, str(tmp_path)])
    monkeypatch.setitem(cli.LAB_COMMANDS, "bench", ("pgmem.lab._probe_cli", "probe"))
    modules = tuple("pgmem.lab._probe_cli" if m == "pgmem.lab.bench.cli" else m for m in cli.COMMAND_MODULES)
    monkeypatch.setattr(cli, "COMMAND_MODULES", modules)
    assert cli.main(["bench", "--size", "tiny"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "pgmem_no_such_package" in err and "pip install 'pgmem[eval]'" in err
    # The other commands do not load the lab command's module, so they still parse.
    assert cli.build_parser().parse_args(["recall", "--scope", "s", "x"]).command == "recall"


@pytest.mark.parametrize("script", ["hnsw_params", "doc_exclusion", "ingest"])
def test_benchmark_scripts_run_as_documented(script: str) -> None:
    """`python -m pgmem.lab.bench.<script>` (the commands in README.md and docs/) starts."""
    done = subprocess.run(
        [sys.executable, "-m", f"pgmem.lab.bench.{script}", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")
