"""ngb's own connections share a DuckDB instance kept for the file (``host``): the file is
attached while they use it and detached after, so other processes see the same locks as before,
and two stores open in one process never read each other's tables."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import duckdb
import pytest
from ngb.core.base.errors import NgbError
from ngb.sweeps.store.connect import connection
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.host import attached

from tests.duckdb_opens import record_connects
from tests.other_process import run_snippet

# another process opens the file once, read-only or read-write (no retries): what it says
_OTHER = """
import sys, duckdb
try:
    duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "ro").close()
    print("opened")
except duckdb.Error as exc:
    print("refused:", str(exc).splitlines()[0])
"""


def other_process_opens(path: Path, mode: str) -> str:
    return run_snippet(_OTHER, str(path), mode)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "r.duckdb")
    s.create_run("r0", "demo", "", ["localhost"], 1)
    return s


def test_a_call_detaches_the_file_and_another_process_can_write_it(store: Store) -> None:
    assert [r["run_id"] for r in store.runs()] == ["r0"]
    assert not attached(store.path)
    assert other_process_opens(store.path, "rw") == "opened"


def test_the_file_is_locked_as_a_connect_would_lock_it_while_a_connection_is_open(
    store: Store,
) -> None:
    with connection(store.path, write=False, timeout=1) as conn:
        assert attached(store.path)
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)
        assert other_process_opens(store.path, "ro") == "opened"  # shared, as read_only=True
        assert other_process_opens(store.path, "rw").startswith("refused: IO Error: Could not set")
    with connection(store.path, write=True, timeout=1):
        assert other_process_opens(store.path, "ro").startswith("refused: IO Error: Could not set")
    assert not attached(store.path)
    assert other_process_opens(store.path, "rw") == "opened"


def test_two_stores_open_at_once_read_only_their_own_tables(tmp_path: Path, store: Store) -> None:
    foreign = tmp_path / "foreign.duckdb"
    conn = duckdb.connect(str(foreign))
    conn.execute("CREATE TABLE someone_elses (i INTEGER)")
    conn.close()
    other = Store(tmp_path / "other.duckdb")
    with store.batch():  # the first store stays attached, read-write, its tables all there
        with pytest.raises(NgbError, match="is a DuckDB file but not an ngb results database"):
            Store(foreign).runs()
        other.create_run("o1", "demo", "", ["localhost"], 1)  # a new file gets every table
        assert [r["run_id"] for r in other.runs()] == ["o1"]
        assert other.tables() == store.tables()
        assert [r["run_id"] for r in store.runs()] == ["r0"]  # a read shares the write's file
    assert not attached(store.path) and not attached(other.path)


def test_a_write_inside_a_read_only_connection_is_refused_as_duckdb_refuses_it(
    store: Store,
) -> None:
    with store.one_connection():
        with pytest.raises(NgbError, match="different configuration"):
            store.create_run("r1", "demo", "", ["localhost"], 1)
        # the operator's SQL (an instance of its own) never opens the file a second time here
        with pytest.raises(NgbError, match="different configuration"):
            store.query("SELECT 1")
    assert [r["run_id"] for r in store.runs()] == ["r0"]
    assert not attached(store.path)


def test_a_failed_attach_leaves_nothing_attached(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"not a database at all" * 500)
    with pytest.raises(NgbError, match="cannot open results database"):
        Store(garbage).runs()
    assert not attached(garbage)
    odd = Store(tmp_path / "it's a 'quoted' name.duckdb")  # the path is quoted in ATTACH
    odd.create_run("q", "demo", "", ["localhost"], 1)
    assert [r["run_id"] for r in odd.runs()] == ["q"]


def test_a_forked_child_opens_the_store_with_an_instance_of_its_own(store: Store) -> None:
    with store.one_connection():  # the parent's instance has the file attached at the fork
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            status = 1
            try:  # the parent holds the file read-only: the child (another process) reads too
                runs = Store(store.path).runs()
                os.write(write_fd, ",".join(str(r["run_id"]) for r in runs).encode())
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            answer = pipe.read().decode()
        _, wait_status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(wait_status) == 0
        assert answer == "r0"
        assert [r["run_id"] for r in store.runs()] == ["r0"]  # the parent's is untouched


def test_settings_a_streamed_read_makes_stay_on_its_own_instance(store: Store) -> None:
    asked = "SELECT current_setting('memory_limit'), current_setting('temp_directory')"
    with connection(store.path, write=False, timeout=1) as conn:
        before = conn.execute(asked).fetchone()
    with store.reading() as held:  # what ``spill`` sets to bound its query
        held.execute("SET memory_limit = '64MB'")
        held.execute("SET temp_directory = '/nonexistent/spill'")
        assert held.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    with connection(store.path, write=False, timeout=1) as conn:
        assert conn.execute(asked).fetchone() == before
    assert before is not None and before[0] != "64.0 MiB"


def test_threads_on_two_stores_never_find_one_still_attached(tmp_path: Path, store: Store) -> None:
    """Reads, writes, batches and shared reads of two stores from four threads for 4 s. With one
    DuckDB instance for every store, ~0.5 % of the opens failed ("Unique file handle conflict":
    a file detached in one thread was still attached while other threads worked on the other
    store, 9 in 10 s), and the file stayed locked for other processes meanwhile."""
    other = Store(tmp_path / "other.duckdb")
    other.create_run("o1", "demo", "", ["localhost"], 1)
    stores = [store, other]
    failures: list[str] = []
    done = [0] * 4

    def work(n: int) -> None:
        pick = random.Random(n)
        end = time.monotonic() + 4
        while time.monotonic() < end:
            s = pick.choice(stores)
            run_id = "r0" if s is store else "o1"
            try:
                step = pick.random()
                if step < 0.4:
                    assert [r["run_id"] for r in s.runs()] == [run_id]
                elif step < 0.6:
                    s.set_run_status(run_id, pick.choice(["running", "finished"]))
                elif step < 0.8:
                    with s.batch():
                        s.set_run_status(run_id, "running")
                        assert "runs" in s.tables()
                else:
                    with s.one_connection():
                        assert [r["run_id"] for r in s.runs()] == [run_id]
                done[n] += 1
            except Exception as exc:  # noqa: BLE001 - every failure is reported below
                failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert min(done) > 20  # every thread got its turns
    assert not attached(store.path) and not attached(other.path)
    assert other_process_opens(store.path, "rw") == "opened"


def test_an_idle_host_serves_the_next_file_and_leaves_the_last_one_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``MAX_HOSTS`` files, a new file takes the least recently used idle host instead of a
    new DuckDB instance; every file it served before stays readable here and writable from
    another process, and reads of each file see only its own rows."""
    from ngb.sweeps.store import host

    stores = [Store(tmp_path / f"s{i}.duckdb") for i in range(host.MAX_HOSTS + 3)]
    for i, s in enumerate(stores[: host.MAX_HOSTS]):
        s.create_run(f"r{i}", "demo", "", ["localhost"], 1)
    made = record_connects(monkeypatch)
    for i, s in enumerate(stores[host.MAX_HOSTS :], start=host.MAX_HOSTS):
        s.create_run(f"r{i}", "demo", "", ["localhost"], 1)
    assert made == []  # the three new files were served by idle hosts
    assert len(host._hosts) == host.MAX_HOSTS
    for i, s in enumerate(stores):
        assert [r["run_id"] for r in s.runs()] == [f"r{i}"]
        assert not attached(s.path)
    assert other_process_opens(stores[0].path, "rw") == "opened"
