"""A store DuckDB refuses to open because of its log: what happened, and ``ngb recover``.

DuckDB replays the write-ahead log (``<store>.wal``) when it opens a file. It refuses the file
when the log belongs to another checkpoint than the main file ("the WAL checkpoint iteration
does not match"): a second writer checkpointed the main file while the first still wrote its
log (issue 41, before ``raw_files``). A log torn at its end is not such a case: DuckDB stops at
the first entry whose checksum fails and opens the rest.

The recovery that loses least: the main file holds every commit up to its last checkpoint
(each finished run of the issue's store), and the refused log holds commits DuckDB cannot apply
to it. So the log is moved aside under a dated name, never deleted, the main file opened alone,
and what it holds is counted. Runs that were in flight lose what only the log held; their
devices keep every finished trial in their checkpoints, which ``ngb attach`` reads again.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError

if TYPE_CHECKING:
    import duckdb

#: words of DuckDB's refusals that are about the log, not the main file
_LOG_REFUSALS = (
    "wal checkpoint iteration",
    "wal was created for",
    "replaying wal",
    "replaying the wal",
    "write-ahead log",
)


def is_log_refusal(message: str) -> bool:
    """True when DuckDB refused the store because of its write-ahead log."""
    lowered = message.lower()
    return any(words in lowered for words in _LOG_REFUSALS)


def refusal_line(path: Path, message: str) -> str:
    """The one line a command prints for such a store: what happened and the command."""
    detail = message.strip().splitlines()[0] if message.strip() else "refused"
    if "iteration" in detail.lower():
        detail = "its log was written for an older checkpoint of the file"
    return (
        f"results database {path} cannot be opened: {detail} (two writers, or a copy of the "
        f"log from another time); `ngb recover --db {path}` opens it without that log, which "
        "it keeps aside"
    )


@dataclass(frozen=True)
class Recovery:
    """What ``recover`` did: the log kept aside (None: nothing to do) and what the store holds."""

    path: Path
    kept_aside: Path | None
    runs: int
    trials: int
    unfinished: tuple[str, ...]

    def text(self) -> str:
        if self.kept_aside is None:
            return f"{self.path} opens as it is: nothing to recover ({self.runs} runs)"
        lines = [
            f"recovered {self.path}: {self.runs} runs, {self.trials} trials readable",
            f"the refused log is kept as {self.kept_aside} (never deleted by ngb)",
        ]
        if self.unfinished:
            lines.append(
                "runs that were not finished may miss their last trials: "
                + ", ".join(self.unfinished)
                + " -- `ngb attach RUN` reads them again from the devices' checkpoints"
            )
        return "\n".join(lines)


def recover(path: Path) -> Recovery:
    """Open ``path`` without a log DuckDB refuses, keeping the log aside (see module)."""
    import duckdb

    path = Path(path).expanduser()
    if not path.is_file():
        raise NgbError(f"no results file at {path}")
    wal = Path(f"{path}.wal")
    try:
        counts = _counts(duckdb.connect(str(path), read_only=True))
        return Recovery(path, None, *counts)
    except NgbError as exc:
        raise NgbError(f"cannot recover {path}: {exc}") from None
    except duckdb.Error as exc:
        if not is_log_refusal(str(exc)):
            first = str(exc).strip().splitlines()[0]
            raise NgbError(f"cannot recover {path}: {first} (not a refused log)") from None
    if not os.access(path.parent, os.W_OK):
        raise NgbError(f"cannot recover {path}: its folder is not writable")
    kept = _aside_name(wal)
    os.rename(wal, kept)  # atomic, same folder; the log is kept, never deleted
    try:
        runs, trials, unfinished = _counts(duckdb.connect(str(path), read_only=True))
    except duckdb.Error as exc:  # the main file is damaged too: put the log back as it was
        os.rename(kept, wal)
        first = str(exc).strip().splitlines()[0]
        raise NgbError(f"cannot recover {path}: the main file alone fails too: {first}") from None
    return Recovery(path, kept, runs, trials, unfinished)


def _aside_name(wal: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(1000):
        candidate = Path(f"{wal}.refused-{stamp}" + (f"-{n}" if n else ""))
        if not os.path.lexists(candidate):
            return candidate
    raise NgbError(f"cannot recover: too many kept logs beside {wal}")


def _counts(conn: duckdb.DuckDBPyConnection) -> tuple[int, int, tuple[str, ...]]:
    try:
        tables = {
            row[0] for row in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        }
        if not {"runs", "trials"} <= tables:
            raise NgbError("not an ngb results database (no runs and trials tables)")
        runs = int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])  # type: ignore[index]
        trials = int(conn.execute("SELECT count(*) FROM trials").fetchone()[0])  # type: ignore[index]
        unfinished = tuple(
            str(row[0])
            for row in conn.execute(
                "SELECT run_id FROM runs WHERE status NOT IN ('finished', 'failed', 'cancelled') "
                "ORDER BY run_id"
            ).fetchall()
        )
        return runs, trials, unfinished
    finally:
        conn.close()
