"""`pgmem demo`: the quickstart's own command, run as the application login. It ingests the
example conversation the package ships (`pgmem.examples`) and recalls the voice message; a re-run
stores nothing new; a bad scope is one line. The whole quickstart from the wheel alone runs in
tests/test_wheel.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgmem.cli import main


def test_demo_ingests_the_shipped_conversation_and_recalls_the_voice_message(
    app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # nothing in this folder: the files come from the package
    assert main(["demo", "--json", "--scope", "demo-a"]) == 0
    report, recall = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (report["inserted"], report["failed"]) == (6, [])
    groups = recall["groups"]
    assert len(groups) == 4 and "dogs" in groups[-1]["part_text"]
    # The dogs are named in passing in turn 5; the voice message's last part asks for them.
    assert groups[-1]["hits"][0]["turn_index"] == 5
    # Again: nothing new is stored; the text report says so, then the two rankings.
    assert main(["demo", "--scope", "demo-a"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0 inserted, 0 replaced, 6 unchanged")
    assert "═══ one whole-message vector" in out and "── part 4: " in out


@pytest.mark.parametrize("scope", ["", "bad\x00scope", "x" * 300, "bad\udcffscope"])
def test_demo_refuses_a_bad_scope_in_one_line(
    scope: str, app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    assert main(["demo", "--scope", scope]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pgmem: error: --scope") and len(err.splitlines()) == 1, err


def test_the_plain_dogs_question_finds_the_dogs_turn(
    app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dogs turn is the word side's first hit ("dogs") with a raw cosine under MiniLM's floor:
    the floor keeps a strong word hit (issue 29, item 5)."""
    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    assert main(["demo", "--json", "--scope", "demo"]) == 0
    capsys.readouterr()
    assert main(["recall", "What are my dogs called?", "--scope", "demo", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["groups"][0]["hits"]
    assert hits and hits[0]["turn_index"] == 5 and hits[0]["word_rank"] == 1
    assert hits[0]["cosine"] < 0.2  # under the floor, kept for its words
