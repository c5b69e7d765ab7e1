"""The version and integrity of a store, checked on a private copy of it (``snapshot``).

A reader that opened the results file itself, even for a moment, would make a live run's writer
in another process wait for it (DuckDB lets a file be held read-write or read-only, not both), so
the first read of a ``Store`` checks the copy it is about to read; only a file of another
version is opened itself, to be upgraded or refused with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.errors import NgbError
from ngb.sweeps.store.connect import check_intact, lock_for, read_errors
from ngb.sweeps.store.sql_files import BASE_CONFIG

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store


def check_copy(store: Store, copy: Path | None) -> bool:
    """The file's version and integrity, checked once per ``Store`` on a copy of it (opening
    the file itself would make a live run's writer wait); only a file that is not of this
    ngb's version is opened itself (``check_once``: refused with why, or upgraded: False then,
    the copy is of the old version)."""
    if store._schema_checked or copy is None:  # noqa: SLF001 - the store's own once-only check
        return True
    import duckdb
    from ngb.sweeps.store import schema
    from ngb.sweeps.store.migrations import read_version

    try:
        with read_errors(store.path):
            conn = duckdb.connect(str(copy), read_only=True, config=BASE_CONFIG)
            try:
                check_intact(conn, copy)
                version = read_version(conn)
            finally:
                conn.close()
    except NgbError as exc:  # name the file, not its copy
        raise NgbError(str(exc).replace(str(copy), str(store.path))) from None
    if version == schema.latest_version():
        store._schema_checked = True  # noqa: SLF001
        return True
    check_once(store)
    return False


def check_once(store: Store) -> None:
    """The file's version and integrity, checked on the file itself (opened and closed at once)
    the first time this ``Store`` reads it, before a copy of it is trusted."""
    if not store._schema_checked:  # noqa: SLF001 - the store's own once-only check
        with lock_for(store.path), store._reader():  # noqa: SLF001
            pass
