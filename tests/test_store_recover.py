"""A store DuckDB refuses because of its log opens through ``ngb recover`` (issue 41)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from ngb.core.base.errors import NgbError
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.recover import is_log_refusal, recover

from tests.cli_helpers import ngb

#: the store left by `ngb run` beside the console with the job cancelled from outside
SHARED_CASE = Path(__file__).resolve().parents[2] / "shared/data/store-wal-mismatch-2026-11-28"


def stale_log_store(tmp_path: Path) -> Path:
    """A store whose log is from the checkpoint before its main file's: what two writers left."""
    path = tmp_path / "results.duckdb"
    store = Store(path)
    store.create_run("kept", "demo", "", ["localhost"], 1)
    conn = duckdb.connect(str(path))
    conn.execute("PRAGMA disable_checkpoint_on_shutdown")
    conn.execute("SET checkpoint_threshold = '1GB'")
    conn.execute("INSERT INTO runs SELECT * REPLACE ('in-log' AS run_id) FROM runs")
    shutil.copyfile(f"{path}.wal", tmp_path / "old.wal")  # the first writer's log
    conn.execute("CHECKPOINT")  # the second writer's checkpoint moves the file on
    conn.close()
    shutil.copyfile(tmp_path / "old.wal", f"{path}.wal")
    return path


def test_a_refused_log_is_one_line_naming_the_command_and_recover_keeps_the_log(
    tmp_path: Path,
) -> None:
    path = stale_log_store(tmp_path)
    log = Path(f"{path}.wal").read_bytes()
    said = ngb("status", "--db", str(path))
    assert said.returncode == 1
    lines = said.stderr.strip().splitlines()
    assert len(lines) == 1 and "older checkpoint" in lines[0], said.stderr
    assert f"ngb recover --db {path}" in lines[0]
    out = ngb("recover", "--db", str(path))
    assert out.returncode == 0, out.stderr
    kept = list(tmp_path.glob("results.duckdb.wal.refused-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == log  # kept aside, byte for byte
    assert str(kept[0]) in out.stdout
    runs = [r[0] for r in Store(path).query("SELECT run_id FROM runs ORDER BY 1")[1]]
    assert runs == ["in-log", "kept"]  # every checkpointed commit is there
    again = ngb("recover", "--db", str(path))
    assert again.returncode == 0 and "nothing to recover" in again.stdout


def test_recover_refuses_what_is_not_a_refused_log_and_changes_nothing(tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    with pytest.raises(NgbError, match=f"cannot recover {other}: not an ngb results database"):
        recover(other)
    broken = tmp_path / "broken.duckdb"
    broken.write_bytes(b"not a database at all" * 100)
    with pytest.raises(NgbError, match="not a refused log"):
        recover(broken)
    assert broken.read_bytes() == b"not a database at all" * 100
    with pytest.raises(NgbError, match="no results file"):
        recover(tmp_path / "missing.duckdb")


@pytest.mark.skipif(not SHARED_CASE.is_dir(), reason="needs ../shared beside the checkout")
def test_the_store_from_the_field_opens_through_recovery_with_every_finished_run_intact(
    tmp_path: Path,
) -> None:
    for file in SHARED_CASE.glob("results.duckdb*"):
        shutil.copyfile(file, tmp_path / file.name)  # copyfile: without the read-only bits
    path = tmp_path / "results.duckdb"
    with pytest.raises(duckdb.Error) as refused:
        duckdb.connect(str(path), read_only=True)
    assert is_log_refusal(str(refused.value))
    done = recover(path)
    assert done.kept_aside is not None and done.unfinished == ("noop4-20261128-002641-7856",)
    rows = Store(path).query(
        "SELECT run_id, count(*) FILTER (WHERE t.status = 'ok') FROM runs "
        "LEFT JOIN trials t USING (run_id) WHERE runs.status = 'finished' GROUP BY 1 ORDER BY 1"
    )[1]
    assert dict(rows) == {
        "long2-20261128-001750-b5bd": 0,
        "noop2-20261128-001623-9a70": 2,
        "noop3-20261128-001658-24e9": 2,
        "noop4-20261128-002204-50dd": 4,
        "noop4-20261128-002235-bec1": 4,
        "noopq-20261128-001756-f717": 3,
    }
