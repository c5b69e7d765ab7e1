"""Storing a measurement made here: ``ngb measure --db/--run`` and ``ngb.measure(db=, run=)``.

One door for both, so a command-line measurement and a notebook's land in the store the same way
(device ``localhost``, one run per ``run`` id, a run id given again collects more trials), where
``ngb report``, ``ngb.open_results`` and ``ngb.compare`` find them.

The store is checked *before* anything is measured (``writable_store``): a FIFO, a directory,
``/dev/null``, a read-only file or folder, a file that is not a results store or one of a newer
schema is one line at once, instead of after a measurement that would then be lost. Nothing is
created by the check (a run is recorded only with its result), so an interrupted measurement
leaves no empty run behind.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.base.safe_files import shorten
from ngb.core.records.types import TrialResult
from ngb.sweeps.store.connect import check_intact, check_is_file, connection, read_errors
from ngb.sweeps.store.database import Store

#: the device name measurements made here are stored under (``ngb measure`` runs here)
HERE = "localhost"


def default_run_id(prefix: str) -> str:
    """``<prefix>-<local time>``: a new run per measurement unless a run id is given."""
    return time.strftime(f"{prefix}-%Y%m%d-%H%M%S")


def check_run_id(run_id: str | None, option: str = "--run") -> str | None:
    """A run id given by the operator (``--run``): it names the run in every listing and line
    ngb prints, so a blank one, or one with a newline or an escape sequence (which a terminal
    would obey), is refused in one line before anything is measured."""
    if run_id is None:
        return None
    if not run_id.strip():
        raise ConfigError(f"{option} wants a non-empty run id")
    if not run_id.isprintable():
        bad = next(c for c in run_id if not c.isprintable())
        raise ConfigError(f"{option}: control character {bad!r} in {shorten(repr(run_id))}")
    return run_id


def writable_store(db: str | Path | None) -> Store:
    """The store for ``db`` (None: ngb's own), refused in one line when it cannot take a result."""
    store = Store(db)
    path = store.path
    check_is_file(path)  # a FIFO, device or directory: without opening it (a FIFO would block)
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise NgbError(f"cannot write results database {path}: permission denied")
        _check_kind(store)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:  # the store makes missing folders
        folder = folder.parent
    if not folder.is_dir():
        raise NgbError(f"cannot write results database {path}: {folder} is not a folder")
    # DuckDB writes a WAL beside the file, so the folder must take new files even when the
    # store exists already
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NgbError(f"cannot write results database {path}: folder {folder} is read-only")
    return store


def _check_kind(store: Store) -> None:
    """The file is an ngb store this ngb can write (an older one is upgraded by the write): a
    damaged file, another program's DuckDB file or a newer schema is one line, as the write
    would have said after the measurement (a foreign file: only when it tried to upgrade it)."""
    from ngb.sweeps.store import schema
    from ngb.sweeps.store.migrations import other_tables, read_version

    path = store.path
    with read_errors(path), connection(path, write=False, timeout=store.busy_timeout_s) as conn:
        check_intact(conn, path)
        version = read_version(conn)
        foreign = version == 0 and other_tables(conn) > 0
    if foreign:
        raise NgbError(f"{path} is a DuckDB file but not an ngb results database")
    if version > schema.latest_version():
        raise NgbError(
            f"results database {path} has schema version {version}, newer than this ngb "
            f"understands ({schema.latest_version()}); upgrade ngb or use another file"
        )


def save(store: Store, run_id: str, trial: TrialResult, origin: str) -> str:
    """Record ``trial`` under run ``run_id`` (created on first use) on device ``localhost``;
    returns the line to tell the user. A run keeps one result per trial key (the store's
    exactly-once rule), so the same settings measured again under the same run id are not
    stored twice: the line says so."""
    store.create_run(run_id, origin, "", [HERE], 1, meta={"source": origin})
    added = store.ingest_results(run_id, HERE, [trial])
    store.set_run_status(run_id, "finished")
    if not added:
        return (
            f"not stored: run {run_id} in {store.path} already holds trial {trial.key} (these "
            "settings); give another run id to keep both"
        )
    return f"stored: run {run_id} in {store.path}"
