"""`docs add --prune` / `add_documents(prune=True)`: a folder added again leaves the scope holding
its documents only (a renamed or deleted file's old id removed), never what it could not read."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest

from pgmem.documents.store import Document, add_documents, remove_document, search_documents
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError

Conn = psycopg.Connection[tuple[object, ...]]

FERNS = "# Ferns\n\nFerns want shade and damp soil; water the fronds in the morning.\n"
ROSES = "# Roses\n\nPrune the roses in late winter, just above an outward facing bud.\n"
BEES = "# Bees\n\nThe hive is inspected every nine days in summer for queen cells.\n"


def _stored(conn: Conn, scope: str) -> list[str]:
    from pgmem.db import scoped

    with scoped(conn, scope):
        return [str(r[0]) for r in conn.execute("SELECT document_id FROM pgmem.document_titles(%s)", (scope,))]


@pytest.fixture
def garden(app_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding ferns.md and roses.md, and the CLI pointed at the app's database."""
    monkeypatch.setenv("DATABASE_URL", app_url)
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    folder = tmp_path / "garden"
    folder.mkdir()
    (folder / "ferns.md").write_text(FERNS, encoding="utf-8")
    (folder / "roses.md").write_text(ROSES, encoding="utf-8")
    return folder


def test_prune_removes_a_renamed_files_old_id_and_nothing_else(
    conn: Conn, embedder: Embedder, garden: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main

    folder = garden
    assert main(["docs", "add", str(folder), "--scope", "p"]) == 0
    capsys.readouterr()
    (folder / "roses.md").rename(folder / "roses-care.md")
    # Without --prune the old id stays, searchable beside the new one (as documented).
    assert main(["docs", "add", str(folder), "--scope", "p"]) == 0
    assert "removed" not in capsys.readouterr().out
    assert _stored(conn, "p") == ["ferns.md", "roses-care.md", "roses.md"]
    assert main(["docs", "add", str(folder), "--scope", "p", "--prune"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "0 inserted, 0 replaced, 2 unchanged, 0 empty (skipped), 0 units written, 0 failed, 1 removed"
    assert err.splitlines()[-1] == "  removed roses.md" and err.count("removed") == 1
    assert _stored(conn, "p") == ["ferns.md", "roses-care.md"]
    hits = [h.document_id for g in search_documents(conn, "p", "when to prune roses", embedder).groups for h in g.hits]
    assert "roses.md" not in hits and "roses-care.md" in hits
    # Run again: nothing left to remove; --json lists what was removed.
    assert main(["docs", "add", str(folder), "--scope", "p", "--prune", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == []


@pytest.mark.long
def test_prune_keeps_what_it_could_not_read_and_refuses_an_empty_folder(
    conn: Conn, garden: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main

    folder = garden
    (folder / "sub").mkdir()
    (folder / "sub" / "bees.md").write_text(BEES, encoding="utf-8")
    (folder / "empty.md").write_text(BEES, encoding="utf-8")
    assert main(["docs", "add", str(folder), "--scope", "q"]) == 0
    capsys.readouterr()
    # roses.md is no longer UTF-8, sub/bees.md a link to nothing, empty.md emptied: each stays stored.
    (folder / "roses.md").write_bytes(b"# Roses\n\n\xff\xfe not text\n")
    (folder / "sub" / "bees.md").unlink()
    (folder / "sub" / "bees.md").symlink_to(tmp_path / "nowhere.md")
    (folder / "empty.md").write_text("\n", encoding="utf-8")
    assert main(["docs", "add", str(folder), "--scope", "q", "--prune"]) == 1  # 2 failed reads
    out, err = capsys.readouterr()
    assert "2 failed, 0 removed" in out, out
    assert "kept empty.md" in err and "failed roses.md" in err and "failed sub/bees.md" in err
    assert _stored(conn, "q") == ["empty.md", "ferns.md", "roses.md", "sub/bees.md"]
    # ferns.md renamed: its old id is pruned; the unreadable ones stay.
    (folder / "ferns.md").rename(folder / "keep.md")
    assert main(["docs", "add", str(folder), "--scope", "q", "--prune"]) == 1
    assert "  removed ferns.md" in capsys.readouterr().err
    assert _stored(conn, "q") == ["empty.md", "keep.md", "roses.md", "sub/bees.md"]
    # A folder with no Markdown file would remove every document: one line, nothing removed.
    (tmp_path / "none").mkdir()
    assert main(["docs", "add", str(tmp_path / "none"), "--scope", "q", "--prune"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "pgmem: error: prune with no documents would remove every document of the scope: nothing removed"
    ], err
    assert "Traceback" not in out + err
    assert _stored(conn, "q") == ["empty.md", "keep.md", "roses.md", "sub/bees.md"]


def test_prune_from_python_keeps_a_folder_it_could_not_list_and_checks_its_arguments(
    conn: Conn, embedder: Embedder
) -> None:
    docs = [Document("a.md", FERNS), Document("b/c.md", ROSES), Document("b/d.md", BEES)]
    assert add_documents(conn, "r", docs, embedder).inserted == 3
    report = add_documents(conn, "r", [Document("a.md", FERNS)], embedder, prune=True, keep=["b/"])
    assert report.unchanged == 1 and report.removed == []
    assert _stored(conn, "r") == ["a.md", "b/c.md", "b/d.md"]
    report = add_documents(conn, "r", [Document("a.md", FERNS)], embedder, prune=True, keep=["b/d.md"])
    assert report.removed == ["b/c.md"] and _stored(conn, "r") == ["a.md", "b/d.md"]
    for keep in ("b/", [""], [None], [3]):
        with pytest.raises(InputError, match="keep must be a list of document ids"):
            add_documents(conn, "r", [Document("a.md", FERNS)], embedder, prune=True, keep=keep)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="prune with no documents"):
        add_documents(conn, "r", [], embedder, prune=True)
    assert _stored(conn, "r") == ["a.md", "b/d.md"]


def test_prune_force_and_reembed_must_be_booleans_and_keep_is_read_once(conn: Conn, embedder: Embedder) -> None:
    """prune="no" pruned (any truthy value was True); force=1 or reembed=1 reached put_document as
    an integer, reported as a missing schema; keep=None was a TypeError; a generator of ids to keep
    was used up by its check, so prune removed them all. Each is one InputError now, nothing
    removed; a generator keeps what it names."""
    docs = [Document("a.md", FERNS), Document("b.md", ROSES)]
    assert add_documents(conn, "g", docs, embedder).inserted == 2
    for arg in ({"prune": "no"}, {"force": 1}, {"reembed": 1}, {"prune": None}):
        name = next(iter(arg))
        with pytest.raises(InputError, match=rf"^{name} must be True or False, got "):
            add_documents(conn, "g", [Document("a.md", ROSES)], embedder, **arg)
    with pytest.raises(InputError, match=r"^keep must be a list of document ids"):
        add_documents(conn, "g", [Document("a.md", FERNS)], embedder, prune=True, keep=None)  # type: ignore[arg-type]
    assert _stored(conn, "g") == ["a.md", "b.md"]
    report = add_documents(conn, "g", [Document("a.md", FERNS)], embedder, prune=True, keep=(k for k in ["b.md"]))  # type: ignore[arg-type]
    assert report.unchanged == 1 and report.removed == []
    assert _stored(conn, "g") == ["a.md", "b.md"]


def test_a_progress_that_cannot_be_called_is_refused_before_anything_is_written(conn: Conn, embedder: Embedder) -> None:
    """progress=5 was called after the first document was stored: a TypeError traceback, the
    report lost, the batch half written. Now one InputError, nothing written."""
    with pytest.raises(InputError, match=r"^progress must be a callable or None, got int$"):
        add_documents(conn, "p", [Document("a.md", FERNS), Document("b.md", ROSES)], embedder, progress=5)  # type: ignore[arg-type]
    assert _stored(conn, "p") == []


def test_a_link_to_a_document_the_prune_removes_is_resolved_as_gone_in_the_same_run(
    conn: Conn, embedder: Embedder
) -> None:
    """a.md links [[b]]; b.md is no longer given, and the prune removes it. Its links resolved
    against the titles stored before the prune: a.md stayed "unchanged", its link unit still naming
    "→ Bravo guide", a document the same run had removed (until a second add). Now a.md is
    replaced in that run, its link to no such document; a kept id's title still resolves."""
    from pgmem.db import scoped

    def links() -> list[str]:
        with scoped(conn, "l"):
            rows = conn.execute("SELECT body FROM pgmem.piece WHERE unit_kind = 'transclusion' ORDER BY 1")
            return [str(r[0]) for r in rows]

    a = Document("a.md", "# Alpha\n\nSee [[b]] and [[c]] for the rest.\n")
    b = Document("b.md", "# Bravo guide\n\nThe bravo steps.\n")
    c = Document("sub/c.md", "# Charlie notes\n\nThe charlie steps.\n")
    assert add_documents(conn, "l", [a, b, c], embedder).inserted == 3
    assert sorted(links()) == [
        "See [[b]] and [[c]] for the rest. → Bravo guide",
        "See [[b]] and [[c]] for the rest. → Charlie notes",
    ]
    report = add_documents(conn, "l", [a], embedder, prune=True, keep=["sub/"])
    assert report.removed == ["b.md"] and report.replaced == 1, report
    assert sorted(links()) == [
        "See [[b]] and [[c]] for the rest. → (no such document)",
        "See [[b]] and [[c]] for the rest. → Charlie notes",
    ]
    # The next run finds nothing to change.
    assert add_documents(conn, "l", [a], embedder, prune=True, keep=["sub/"]).unchanged == 1


def _race(app_url: str, embedder: Embedder, folder: list[Document], gone: str) -> list[list[str]]:
    """Two `add_documents(prune=True)` of `folder` and a `remove_document` of `gone`, started at
    once on their own connections: what each reported removed."""
    removed: list[list[str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def run(prune: bool) -> None:
        try:
            with psycopg.connect(app_url, autocommit=True) as c:
                start.wait()
                if prune:
                    removed.append(add_documents(c, "s", folder, embedder, prune=True).removed)
                else:
                    removed.append([gone] if remove_document(c, "s", gone) else [])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(p,)) for p in (True, True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    return removed


def test_two_pruning_adds_and_a_remove_side_by_side_each_remove_a_document_once(
    app_url: str, conn: Conn, embedder: Embedder
) -> None:
    """Three clients race over stale documents each round: two `add --prune` of the same folder
    and a `remove_document`; each stale id is reported removed by exactly one of them, no client
    fails, and the folder's documents are all that is left."""
    folder = [Document("a.md", FERNS), Document("b.md", ROSES)]
    add_documents(conn, "s", folder, embedder)
    for rnd in range(4):
        stale = [Document(f"old{rnd}-{i}.md", BEES.replace("nine", f"{rnd}{i}")) for i in range(3)]
        add_documents(conn, "s", stale, embedder)
        removed = _race(app_url, embedder, folder, f"old{rnd}-1.md")
        assert sorted(i for r in removed for i in r) == sorted(d.id for d in stale)
        assert _stored(conn, "s") == ["a.md", "b.md"]
