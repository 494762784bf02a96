"""Hostile input to the CLI, the MCP server and the LangGraph importer, found by a red-team pass:
each is one line (the CLI's on stderr, with a non-zero status and no traceback; the library's a
PgmemError; the MCP server's a tool error) and what was stored before is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.security_helpers import make_turn

Conn = psycopg.Connection[tuple[object, ...]]
REPO = Path(__file__).resolve().parent.parent


def pgmem(app_url: str, home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real CLI, as the application login. A call that blocks (a FIFO opened for reading
    waits for a writer) fails the test at `timeout` instead of hanging it."""
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "pgmem", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pgmem: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture
def not_files(tmp_path: Path) -> dict[str, Path]:
    """Paths a command reading a file may be given that are no readable regular file."""
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    paths = {
        "missing": tmp_path / "missing.jsonl",
        "folder": folder,
        "fifo": fifo,  # opening it for reading waited for a writer: forever
        "device": Path("/dev/null"),
        "io-error": Path("/proc/self/mem"),  # a regular file whose read fails (EIO)
    }
    if os.geteuid() != 0:  # root reads a file of mode 000
        unreadable = tmp_path / "unreadable.jsonl"
        unreadable.write_text('{"body": "x"}\n')
        unreadable.chmod(0)
        paths["unreadable"] = unreadable
    return paths


@pytest.mark.long
def test_a_turns_or_facts_file_that_cannot_be_read_is_one_line(
    app_url: str, admin_conn: Conn, tmp_path: Path, not_files: dict[str, Path]
) -> None:
    """`pgmem ingest` raised a traceback on a file it could not read (PermissionError, or EIO
    from /proc/self/mem); `pgmem facts add` waited forever on a FIFO and read /dev/null as an
    empty file. Each is refused in one line naming the path; nothing stored is touched."""
    from pgmem.db import connect
    from pgmem.ingest import ingest_turns
    from tests.security_helpers import HashEmbedder

    with connect(app_url) as conn:
        assert ingest_turns(conn, [make_turn("s", "t", 0, "kept")], HashEmbedder()).inserted == 1
    for what, path in not_files.items():
        for args in (["ingest", str(path)], ["facts", "add", str(path), "--scope", "s"]):
            line = one_line_error(pgmem(app_url, tmp_path, *args, timeout=20))
            assert str(path) in line, (what, line)
    assert admin_conn.execute("SELECT thread_id, turn_index FROM pgmem.turn").fetchall() == [("t", 0)]
    assert admin_conn.execute("SELECT count(*) FROM pgmem.fact").fetchone() == (0,)


@pytest.mark.long
def test_a_rebuild_state_file_that_cannot_be_kept_or_read_is_one_line(
    app_url: str, admin_conn: Conn, tmp_path: Path
) -> None:
    """`pgmem rebuild` keeps its state in PGMEM_HOME. A PGMEM_HOME that is a file raised
    FileExistsError, and a state file that is not one (cut short by a full disk, edited) raised
    JSONDecodeError or TypeError, each with a traceback. Now one line naming the file; the stored
    turn and the state file are left as they were."""
    from pgmem.db import connect
    from pgmem.ingest import ingest_turns
    from pgmem.rebuild import database, state_file_name
    from tests.security_helpers import HashEmbedder

    with connect(app_url) as conn:
        assert ingest_turns(conn, [make_turn("s", "t", 0, "kept")], HashEmbedder()).inserted == 1
    a_file = tmp_path / "home-is-a-file"
    a_file.write_text("not a folder")
    line = one_line_error(pgmem(app_url, a_file, "rebuild", "--scope", "s"))
    assert str(a_file) in line, line
    home = tmp_path / "home"
    home.mkdir()
    with connect(app_url) as conn:
        state = home / state_file_name(database(conn, "s"), "s")
    for text in ("", "garbage{", "[1]", '{"started": 5}', '{"started": ["2026-01-01"]}'):
        state.write_text(text)
        line = one_line_error(pgmem(app_url, home, "rebuild", "--scope", "s"))
        assert str(state) in line and state.read_text() == text, line
    assert admin_conn.execute("SELECT thread_id, turn_index FROM pgmem.turn").fetchall() == [("t", 0)]


def test_a_turns_or_facts_file_starting_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """A JSONL file saved with a byte order mark (as some Windows editors do) was refused at its
    first line ("Unexpected UTF-8 BOM"), while `docs add` read Markdown so saved. The mark is no
    text now; one inside the file is still the line's error."""
    from pgmem.errors import InputError
    from pgmem.facts import read_facts
    from pgmem.turns import read_jsonl

    turns = tmp_path / "turns.jsonl"
    line = '{"scope": "s", "thread": "t", "turn": 0, "messages": [{"role": "user", "content": "hi"}]}'
    turns.write_bytes(b"\xef\xbb\xbf" + line.encode() + b"\n")
    assert [(t.scope, t.thread, t.index) for t in read_jsonl(turns)] == [("s", "t", 0)]
    facts = tmp_path / "facts.jsonl"
    facts.write_bytes(b'\xef\xbb\xbf{"body": "The dogs are Biscuit and Juniper."}\n')
    assert [f.body for f in read_facts(facts)] == ["The dogs are Biscuit and Juniper."]
    facts.write_bytes(b'{"body": "one"}\n\xef\xbb\xbf{"body": "two"}\n')
    with pytest.raises(InputError, match=":2: "):
        read_facts(facts)


def test_docs_add_names_a_path_that_is_no_file_or_folder(tmp_path: Path) -> None:
    """`docs add` called a FIFO or a device "no such file or folder"."""
    from pgmem.documents.store import read_documents
    from pgmem.errors import InputError

    fifo = tmp_path / "notes.md"
    os.mkfifo(fifo)
    for path, says in [
        (fifo, "not a regular file or a folder"),
        (Path("/dev/null"), "not a regular file or a folder"),
        (tmp_path / "gone.md", "no such file or folder"),
    ]:
        with pytest.raises(InputError, match=says):
            read_documents([path])


def test_docs_add_of_a_folder_reports_a_markdown_name_that_is_no_file(tmp_path: Path) -> None:
    """Under a folder, a symbolic link to nothing (a moved file, a checkout without its LFS
    objects) or a FIFO named *.md was left out without a word: "1 inserted", exit 0, for a
    folder of three. Each is reported failed, and the others are read; without `failed` it is
    one line."""
    from pgmem.documents.store import read_documents
    from pgmem.errors import InputError

    (tmp_path / "a.md").write_text("# A\n\nreadable\n", encoding="utf-8")
    (tmp_path / "moved.md").symlink_to(tmp_path / "nowhere" / "moved.md")
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "sub" / "pipe.md")
    (tmp_path / "linked.md").symlink_to(tmp_path / "a.md")  # a link to a file is read
    failed: list[tuple[str, str]] = []
    docs = read_documents([tmp_path], failed=failed)
    assert sorted(d.id for d in docs) == ["a.md", "linked.md"]
    assert [(i, r.rsplit(": ", 1)[1]) for i, r in failed] == [
        ("moved.md", "a symbolic link to nothing"),
        ("sub/pipe.md", "not a regular file"),
    ]
    with pytest.raises(InputError, match=r"moved\.md: a symbolic link to nothing"):
        read_documents([tmp_path])


def test_docs_add_reports_a_folder_it_cannot_list(tmp_path: Path) -> None:
    """`docs add FOLDER` walked with Path.rglob, which skips a folder it cannot list without a
    word: a folder of documents nobody could read was "0 inserted", exit 0. The folder is one
    line now, and an unreadable subfolder is reported as failed while the others are read. Run
    as an unprivileged user (root reads a folder of mode 000): `nobody` through setpriv when
    the tests run as root."""
    import shutil
    import tempfile

    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root lists any folder, and setpriv is missing to drop that")
    base = Path(tempfile.mkdtemp(prefix="pgmem-unlisted-"))  # tmp_path is root's alone
    try:
        base.chmod(0o755)
        (base / "open").mkdir()
        (base / "open" / "a.md").write_text("# A\n\nreadable\n")
        (base / "shut").mkdir()
        (base / "shut" / "b.md").write_text("# B\n\nhidden\n")
        (base / "shut").chmod(0)
        (base / "open").chmod(0o755)
        (base / "open" / "a.md").chmod(0o644)
        script = (
            "import sys\nfrom pathlib import Path\nfrom pgmem.documents.store import read_documents\n"
            "from pgmem.errors import InputError\n"
            "failed = []\ndocs = read_documents([Path(sys.argv[1])], failed=failed)\n"
            "print([d.id for d in docs], failed)\n"
            "try:\n    read_documents([Path(sys.argv[1]) / 'shut'])\nexcept InputError as e:\n    print(e)\n"
        )
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        probe = subprocess.run([*drop, sys.executable, "-c", "import pgmem"], capture_output=True, env=env, cwd="/")
        if probe.returncode != 0:
            pytest.skip("the unprivileged user cannot read this checkout")
        argv = [*drop, sys.executable, "-c", script, str(base)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd="/")
        assert done.returncode == 0, done.stderr
        listed, refused = done.stdout.strip().splitlines()
        assert listed == f"['open/a.md'] [('shut/', 'cannot read folder {base}/shut: Permission denied')]"
        assert refused == f"cannot read folder {base}/shut: Permission denied"
    finally:
        (base / "shut").chmod(0o755)
        shutil.rmtree(base)


def test_docs_add_names_a_symbolic_link_loop_as_one(tmp_path: Path) -> None:
    """A symbolic link in a loop (a.md -> b.md -> a.md) given to `docs add` was "no such file or
    folder" (the link is there), and under a folder "a symbolic link to nothing": each is named a
    loop now, in one line; a link to nothing is still called one."""
    from pgmem.documents.store import read_documents
    from pgmem.errors import InputError

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").symlink_to(folder / "b.md")
    (folder / "b.md").symlink_to(folder / "a.md")
    (folder / "gone.md").symlink_to(folder / "nowhere.md")
    with pytest.raises(InputError, match=r"a\.md: a symbolic link in a loop"):
        read_documents([folder / "a.md"])
    with pytest.raises(InputError, match=r"gone\.md: a symbolic link to nothing"):
        read_documents([folder / "gone.md"])
    failed: list[tuple[str, str]] = []
    assert read_documents([folder], failed=failed) == []
    assert [(i, r.rsplit(": ", 1)[1]) for i, r in failed] == [
        ("a.md", "a symbolic link in a loop (it leads back to itself)"),
        ("b.md", "a symbolic link in a loop (it leads back to itself)"),
        ("gone.md", "a symbolic link to nothing"),
    ]


@pytest.mark.parametrize(
    "args",
    [("recall", "hello", "--scope", "nobody", "--json"), ("docs", "search", "hello", "--scope", "nobody", "--json")],
)
def test_a_reader_of_stdout_gone_is_no_traceback(app_url: str, tmp_path: Path, args: tuple[str, ...]) -> None:
    """`pgmem recall ... --json | head -c 100`: when the reader of stdout had gone before pgmem
    wrote (or while it wrote), print raised BrokenPipeError, a traceback on stderr (and at exit
    "Exception ignored ... BrokenPipeError"). Now pgmem stops quietly, with the shell's status
    for SIGPIPE (141)."""
    env = {**os.environ, "DATABASE_URL": app_url, "PGMEM_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgmem", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before pgmem writes a byte
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err


@pytest.mark.long
def test_ingest_of_a_file_that_is_no_jsonl_lists_a_hundred_failures(
    app_url: str, tmp_path: Path, admin_conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    """`pgmem ingest` of a file that is no JSONL (a CSV given by mistake) printed a failure line
    for each of its lines: 5,000 lines of stderr. Now the first 100 and a count of the rest, as
    `pgmem store import` does; --json still lists every one; the file's good line is stored."""
    path = tmp_path / "export.csv"
    good = '{"scope": "s", "thread": "t", "turn": 0, "messages": [{"role": "user", "content": "kept"}]}'
    path.write_text(good + "\n" + "".join(f"row {i},a,b\n" for i in range(5000)), encoding="utf-8")
    done = pgmem(app_url, tmp_path, "ingest", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stdout.strip().endswith("5000 failed")
    failures = [line for line in done.stderr.splitlines() if line.startswith("  failed ")]
    assert len(failures) == 100 and "  ... and 4900 more failed (--json lists every one)" in done.stderr
    listed = pgmem(app_url, tmp_path, "ingest", str(path), "--json")
    assert len(json.loads(listed.stdout)["unreadable"]) == 5000
    assert admin_conn.execute("SELECT count(*) FROM pgmem.turn").fetchone() == (1,)
