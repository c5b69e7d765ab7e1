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

from ngb.core.errors import NgbError
from ngb.core.types import TrialResult
from ngb.sweeps.store.connect import check_is_file
from ngb.sweeps.store.database import Store

#: the device name measurements made here are stored under (``ngb measure`` runs here)
HERE = "localhost"


def default_run_id(prefix: str) -> str:
    """``<prefix>-<local time>``: a new run per measurement unless a run id is given."""
    return time.strftime(f"{prefix}-%Y%m%d-%H%M%S")


def writable_store(db: str | Path | None) -> Store:
    """The store for ``db`` (None: ngb's own), refused in one line when it cannot take a result."""
    from ngb.sweeps.store import schema

    store = Store(db)
    path = store.path
    check_is_file(path)  # a FIFO, device or directory: without opening it (a FIFO would block)
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise NgbError(f"cannot write results database {path}: permission denied")
        version = store.schema_version()  # a damaged or foreign file: one line from the store
        if version > schema.latest_version():
            raise NgbError(
                f"results database {path} has schema version {version}, newer than this ngb "
                f"understands ({schema.latest_version()}); upgrade ngb or use another file"
            )
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
