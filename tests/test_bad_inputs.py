"""Table-driven bad-input suite: every case is data in ``tests/bad_inputs/*.toml``.

Each case gets a fresh folder holding ``home/`` (NGB_HOME) and ``work/`` (the current directory),
writes its setup files there, runs one ``ngb`` command and checks that

- the exit status is the expected one (1 for bad input, unless the case says otherwise);
- stderr is exactly one line (none for cases expected to succeed), with the expected text, and no
  traceback;
- every file under the folder is byte-identical afterwards, except those the case names in
  ``creates`` (new files allowed) or ``changes`` (files allowed to change).

Commands run in-process through click's CliRunner (fast: 150+ cases in well under a minute once
torch is imported). Cases with ``readonly = true`` make ``home/`` read-only; as root (CI here)
permissions do not bind, so those run as a real process under user ``nobody`` (setpriv).

Case keys (see the data files for examples):
``id``, ``argv`` (list; ``{home}``, ``{work}``, ``{db}`` are replaced), ``exit`` (default 1),
``stderr`` (substring of the single line), ``files`` (path under the case folder -> text),
``db`` (a results database to put at ``home/data/results.duckdb``: demo, truncated, foreign,
garbage, empty, sqlite, newer, no-trials, older: the demo's rows in the schema before this one,
run id ``old-run``), ``env``, ``input`` (stdin), ``readonly``, ``creates``,
``changes``, ``expect_files`` (path -> substring, or list of substrings, it must contain
afterwards), ``stdout``, ``stdout_excludes``, ``xfail`` (a defect owned elsewhere, e.g.
"orch #1": strict xfail), ``fifos`` (paths made named pipes), ``symlinks`` (path -> target),
``keep_kind`` (absolute paths outside the folder, such as ``/dev/full``, whose file type must not
change: replacing a device node is damage), ``fsize`` (a real process whose files may grow to this
many bytes: a write past it fails as on a full disk), ``closed_stdout`` (a real process whose
stdout is a pipe nobody reads: ``ngb report | head``), ``quiet`` (no stderr even on failure),
``process`` (a real process: what libraries write to file descriptor 2 is seen too). Every stderr
line is at most ``MAX_LINE`` characters (long values are shortened, not echoed in full).
Symlinks and FIFOs in the folder are compared by what they are, never opened.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomllib
from click.testing import CliRunner
from ngb.sweeps.cli import cli

from tests.cli_helpers import scaled

CASES_DIR = Path(__file__).parent / "bad_inputs"
MAX_LINE = 1000  # a stderr line longer than this echoes some value in full
DB_KINDS = (
    "demo", "truncated", "foreign", "garbage", "empty", "sqlite", "newer", "no-trials", "older",
)  # fmt: skip
CASE_KEYS = {
    "id", "argv", "exit", "stderr", "files", "db", "env", "input", "readonly", "creates",
    "changes", "expect_files", "stdout", "stdout_excludes", "xfail", "note", "binary",
    "fifos", "symlinks", "keep_kind", "fsize", "closed_stdout", "quiet", "process",
}  # fmt: skip
# Placeholders for file contents too large or too odd to write in the data files.
GENERATED = {
    "{{nest}}": "[" * 5000 + "]" * 5000,  # TOML nested past the parser's recursion limit
    "{{yamlnest}}": "all:\n  hosts:\n    nano: " + "[" * 5000 + "]" * 5000 + "\n",
}


@dataclass
class Case:
    id: str
    area: str
    argv: list[str]
    exit: int = 1
    stderr: str = ""
    files: dict[str, str] = field(default_factory=dict)
    db: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    input: str | None = None
    readonly: bool = False
    creates: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    expect_files: dict[str, str | list[str]] = field(default_factory=dict)
    stdout: str = ""
    stdout_excludes: list[str] = field(default_factory=list)
    xfail: str = ""
    note: str = ""
    binary: dict[str, str] = field(default_factory=dict)  # path -> hex bytes (not UTF-8 text)
    fifos: list[str] = field(default_factory=list)
    symlinks: dict[str, str] = field(default_factory=dict)
    keep_kind: list[str] = field(default_factory=list)
    fsize: int = 0
    closed_stdout: bool = False
    quiet: bool = False
    process: bool = False


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for path in sorted(CASES_DIR.glob("*.toml")):
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        area = doc.get("area", path.stem)
        for raw in doc["case"]:
            unknown = set(raw) - CASE_KEYS
            assert not unknown, f"{path.name}: case {raw.get('id')}: unknown keys {unknown}"
            assert raw.get("db") in (None, *DB_KINDS), f"{raw['id']}: bad db {raw['db']!r}"
            cases.append(Case(area=area, **raw))
    ids = Counter(c.id for c in cases)
    assert not [i for i, n in ids.items() if n > 1], "duplicate case ids"
    return cases


CASES = load_cases()


# ---------------------------------------------------------------- outcomes (for the summary)

OUTCOMES: dict[str, tuple[str, str]] = {}  # case id -> (area, outcome)


def classify(case: Case, exit_code: int, lines: list[str], traceback: bool, lost: list[str]) -> str:
    if traceback:
        return "traceback"
    if lost:
        return "data lost"
    if case.exit != 0 and exit_code == 0:
        return "silent accept"
    if case.quiet:
        return "handled" if exit_code == case.exit and not lines else "wrong status"
    if case.exit != 0:
        return "one-line error" if len(lines) == 1 else "not one line"
    return "handled" if exit_code == 0 else "wrong status"


@pytest.fixture(scope="module", autouse=True)
def _summary(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    if not OUTCOMES:
        return
    by_area: dict[str, Counter[str]] = {}
    for area, outcome in OUTCOMES.values():
        by_area.setdefault(area, Counter())[outcome] += 1
    total = Counter(outcome for _, outcome in OUTCOMES.values())
    lines = [f"bad-input suite: {len(OUTCOMES)} cases in {time.monotonic() - started:.1f} s"]
    for area, counts in sorted(by_area.items()):
        lines.append(f"  {area:<12} {sum(counts.values()):>4}  {dict(sorted(counts.items()))}")
    lines.append(f"  {'total':<12} {len(OUTCOMES):>4}  {dict(sorted(total.items()))}")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line)
    if os.environ.get("NGB_BAD_INPUTS_SUMMARY"):
        Path(os.environ["NGB_BAD_INPUTS_SUMMARY"]).write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- databases

DEMO_SWEEP = """
name = "demo-db"
[measure]
warmup_iters = 0
warmup_s = 0
min_iters = 1
min_duration_s = 0.05  # a CPU figure for the figures' cases: no sample under 50 ms (MIN_SAMPLE_S)
repetitions = 2
verify = false
workers = 1
cpu_interval_s = 0.05
[[matrix]]
models = ["conv"]
widths = [8]
compilers = ["noop"]
batches = [1, 2]
"""


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Real results files: one from a real (no-op) run on localhost, and broken variants."""
    root = tmp_path_factory.mktemp("bad-inputs-db")
    sweep = root / "demo-db.toml"
    sweep.write_text(DEMO_SWEEP)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NGB_HOME", str(root / "home"))
        mp.delenv("NGB_DB", raising=False)
        # In-process trials: one agent process instead of one child per trial (setup time).
        r = CliRunner().invoke(
            cli, ["run", str(sweep), "-d", "localhost", "--isolate", "inprocess"]
        )
    assert r.exit_code == 0, r.output
    demo = (root / "home" / "data" / "results.duckdb").read_bytes()
    import duckdb

    foreign = root / "foreign.duckdb"
    with duckdb.connect(str(foreign)) as conn:
        conn.execute("CREATE TABLE inventory_items (id INTEGER, label VARCHAR)")
        conn.execute("INSERT INTO inventory_items VALUES (1, 'chair'), (2, 'desk')")
    newer = root / "newer.duckdb"
    newer.write_bytes(demo)
    with duckdb.connect(str(newer)) as conn:
        conn.execute("INSERT INTO schema_version VALUES (999, 'from the future', now())")
    no_trials = root / "no-trials.duckdb"  # a results file someone dropped a table from
    no_trials.write_bytes(demo)
    with duckdb.connect(str(no_trials)) as conn:
        conn.execute("DROP TABLE trials CASCADE")
    older = root / "older.duckdb"
    older_store(root / "home" / "data" / "results.duckdb", older)
    lite = root / "lite.db"
    with sqlite3.connect(lite) as sconn:
        sconn.execute("CREATE TABLE trials (id INTEGER)")
    return {
        "demo": demo,
        "truncated": demo[: len(demo) // 3],
        "foreign": foreign.read_bytes(),
        "garbage": bytes(range(256)) * 64,
        "empty": b"",
        "sqlite": lite.read_bytes(),
        "newer": newer.read_bytes(),
        "no-trials": no_trials.read_bytes(),
        "older": older.read_bytes(),
    }


def older_store(demo: Path, path: Path) -> None:
    """The demo's rows in a file an ngb one schema version older wrote: every migration step
    but the last, and the columns of each table that the older schema has (issue 41: a reader
    must not upgrade it). Its run is ``old-run``, a name the cases can give."""
    import duckdb
    from ngb.sweeps.store import schema

    with duckdb.connect(str(path)) as conn:
        conn.execute(schema.VERSION_TABLE)
        for version, (description, statements) in enumerate(schema.MIGRATIONS[:-1], start=1):
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?, now())", [version, description])
        conn.execute(f"ATTACH '{demo}' AS demo (READ_ONLY)")
        tables = conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "AND table_name <> 'schema_version'"
        ).fetchall()
        for (table,) in tables:
            columns = conn.execute(
                "SELECT column_name FROM duckdb_columns() WHERE database_name = "
                "current_database() AND table_name = ? ORDER BY column_index",
                [table],
            ).fetchall()
            names = ", ".join(f'"{c}"' for (c,) in columns)
            conn.execute(f'INSERT INTO "{table}" ({names}) SELECT {names} FROM demo."{table}"')  # noqa: S608
            if ("run_id",) in columns:
                conn.execute(f"UPDATE \"{table}\" SET run_id = 'old-run'")  # noqa: S608
        conn.execute("DETACH demo")


# ---------------------------------------------------------------- running one case


def tree(root: Path) -> dict[str, str]:
    """relative path -> sha256 (files), "dir" (folders), "link:<target>" (symlinks, not
    followed) or "kind:<mode>" (FIFOs, sockets: never opened), for the whole case folder."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            else:
                out[rel] = f"kind:{stat.S_IFMT(st.st_mode):o}"
    return out


def kinds(paths: list[str]) -> dict[str, str]:
    """Absolute path -> its file type (octal S_IFMT), "missing" when absent."""
    out = {}
    for p in paths:
        try:
            out[p] = f"{stat.S_IFMT(os.lstat(p).st_mode):o}"
        except FileNotFoundError:
            out[p] = "missing"
    return out


def _expand(text: str, root: Path) -> str:
    home, work = root / "home", root / "work"
    for placeholder, generated in GENERATED.items():
        text = text.replace(placeholder, generated)
    return (
        text.replace("{home}", str(home))
        .replace("{work}", str(work))
        .replace("{db}", str(home / "data" / "results.duckdb"))
    )


def _set_writable(path: Path, writable: bool) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue  # chmod would follow it (outside the folder, or nowhere)
            mode = os.stat(p).st_mode
            os.chmod(p, (mode | stat.S_IWUSR) if writable else (mode & ~0o222) | 0o444)
    mode = os.stat(path).st_mode
    os.chmod(path, (mode | stat.S_IWUSR) if writable else (mode & ~0o222) | 0o555)


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str
    traceback: str  # "" when none


def run_inprocess(case: Case, root: Path, argv: list[str], env: dict[str, str]) -> Ran:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("NGB_DB", raising=False)
        for key, value in env.items():
            mp.setenv(key, value)
        mp.chdir(root / "work")
        r = CliRunner().invoke(cli, argv, input=case.input)
    tb = ""
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(r.exception))
    return Ran(r.exit_code, r.stdout, r.stderr, tb)


def run_subprocess(case: Case, root: Path, argv: list[str], env: dict[str, str]) -> Ran:
    """A real process; as root, under user nobody so file permissions bind."""
    prefix: list[str] = []
    if case.readonly and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: cannot make NGB_HOME read-only")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    full_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root / "work"),
        "LANG": "C.UTF-8",
        # A file-size limit (``fsize``) would also cut Python's own .pyc writes short in the
        # checkout, breaking every later import: no bytecode written from these processes.
        "PYTHONDONTWRITEBYTECODE": "1",
        **env,
    }
    limit = case.fsize

    def limits() -> None:  # in the child: files may not grow past `fsize` bytes (EFBIG)
        if limit:
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    read_end = write_end = None
    if case.closed_stdout:  # stdout is a pipe whose reader is gone, as after `| head` exits
        read_end, write_end = os.pipe()
        os.close(read_end)
    try:
        p = subprocess.run(
            [*prefix, sys.executable, "-m", "ngb.sweeps.cli", *argv],
            cwd=root / "work",
            env=full_env,
            input=case.input or "",
            stdout=write_end if write_end is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=scaled(120),
            preexec_fn=limits if limit else None,  # noqa: PLW1509 - no threads started here
        )
    finally:
        if write_end is not None:
            os.close(write_end)
    tb = p.stderr if "Traceback (most recent call last)" in p.stderr else ""
    if "Exception ignored" in p.stderr:
        tb = p.stderr  # e.g. a BrokenPipeError at interpreter exit: a traceback by another name
    return Ran(p.returncode, p.stdout or "", p.stderr, tb)


@pytest.fixture
def case_root(case: Case) -> Iterator[Path]:
    # Read-only cases run as user nobody: the folder must be reachable by others.
    root = Path(tempfile.mkdtemp(prefix=f"ngb-bad-{case.id}-"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        _set_writable(root, True)
        shutil.rmtree(root, ignore_errors=True)


def _params() -> list[Any]:
    out = []
    for c in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", _params())
def test_bad_input(case: Case, case_root: Path, databases: dict[str, bytes]) -> None:
    root = case_root
    (root / "home").mkdir()
    (root / "work").mkdir()
    for rel, text in case.files.items():
        target = root / _expand(rel, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_expand(text, root), encoding="utf-8")
    for rel, hexbytes in case.binary.items():
        target = root / _expand(rel, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bytes.fromhex(hexbytes))
    if case.db:
        db = root / "home" / "data" / "results.duckdb"
        db.parent.mkdir(parents=True, exist_ok=True)
        db.write_bytes(databases[case.db])
    for rel in case.fifos:
        target = root / _expand(rel, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(target)
    for rel, link_to in case.symlinks.items():
        target = root / _expand(rel, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(_expand(link_to, root))
    argv = [_expand(a, root) for a in case.argv]
    env = {"NGB_HOME": str(root / "home"), **{k: _expand(v, root) for k, v in case.env.items()}}

    before = tree(root)
    kinds_before = kinds(case.keep_kind)
    if case.readonly:
        os.chmod(root / "work", 0o777)  # the unprivileged user may write its own files there
        _set_writable(root / "home", False)
        try:
            ran = run_subprocess(case, root, argv, env)
        finally:
            _set_writable(root / "home", True)
    elif case.fsize or case.closed_stdout or case.process:
        ran = run_subprocess(case, root, argv, env)
    else:
        ran = run_inprocess(case, root, argv, env)
    after = tree(root)
    kinds_after = kinds(case.keep_kind)

    allowed_new = [*case.creates, *case.changes]
    lost = [p for p, h in before.items() if after.get(p) != h and not _matches(p, case.changes)]
    lost += [p for p, kind in kinds_before.items() if kinds_after[p] != kind]
    created = [p for p in after if p not in before and not _matches(p, allowed_new)]
    lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]
    OUTCOMES[case.id] = (case.area, classify(case, ran.exit_code, lines, bool(ran.traceback), lost))

    where = (
        f"[{case.id}] exit {ran.exit_code}\nstderr:\n{ran.stderr}\nstdout:\n{ran.stdout[-2000:]}"
    )
    assert not ran.traceback, f"{where}\ntraceback:\n{ran.traceback}"
    assert ran.exit_code == case.exit, where
    too_long = [ln[:200] for ln in lines if len(ln) > MAX_LINE]
    assert not too_long, f"stderr line over {MAX_LINE} characters: {too_long}\n{where}"
    if case.quiet:
        assert not lines, f"expected no stderr\n{where}"
    elif case.exit != 0 or case.stderr:
        assert len(lines) == 1, f"expected exactly one stderr line\n{where}"
        assert case.stderr in lines[0], f"expected {case.stderr!r} in stderr\n{where}"
    else:
        assert not lines, f"expected no stderr\n{where}"
    if case.stdout:
        assert case.stdout in ran.stdout, where
    for text in case.stdout_excludes:
        assert _expand(text, root) not in ran.stdout, f"stdout has {text!r}\n{where}"
    assert not lost, f"files changed or removed: {lost}\n{where}"
    assert not created, f"files created: {created}\n{where}"
    for rel, wanted in case.expect_files.items():
        content = (root / rel).read_text(encoding="utf-8")
        for text in [wanted] if isinstance(wanted, str) else wanted:
            assert text in content, f"{rel} lacks {text!r}:\n{content}"


def _matches(path: str, patterns: list[str]) -> bool:
    return any(
        fnmatch.fnmatch(path, pat) or path.startswith(pat.rstrip("/") + "/") for pat in patterns
    )


def test_suite_is_large_enough() -> None:
    assert len(CASES) >= 150, len(CASES)
    areas = Counter(c.area for c in CASES)
    for area in ("inventory", "ansible", "sweeps", "measure", "query", "export", "database",
                 "readonly"):  # fmt: skip
        assert areas[area] >= 5, (area, areas)
