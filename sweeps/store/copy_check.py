"""The version and integrity of a store, checked on a private copy of it (``snapshot``).

A reader that opened the results file itself, even for a moment, would make a live run's writer
in another process wait for it (DuckDB lets a file be held read-write or read-only, not both), so
the first read of a ``Store`` checks the copy it is about to read. A copy of an older ngb's file
is upgraded itself (``older``): a reader never upgrades the file (issue 41), and a copy of a
newer or foreign file is refused in the store's own words.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError
from ngb.sweeps.store.connect import check_intact, read_errors
from ngb.sweeps.store.older import copy_lock, is_upgraded, upgrade_copy
from ngb.sweeps.store.sql_files import BASE_CONFIG

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store


def check_copy(store: Store, copy: Path | None) -> bool:
    """The file's version and integrity, checked once per ``Store`` on a copy of it (opening
    the file itself would make a live run's writer wait). A copy of an older version is
    upgraded in place (``older.upgrade_copy``; the file stays as it is) and checked again on
    every read, since it tells nothing of the file's version. True: the copy can be read (kept
    for callers that took False as "copy again")."""
    if store._schema_checked or copy is None or is_upgraded(copy):  # noqa: SLF001
        return True
    with copy_lock:  # a console's other query may be upgrading this shared copy right now
        if is_upgraded(copy):
            return True
        return _check(store, copy)


def _check(store: Store, copy: Path) -> bool:
    import duckdb
    from ngb.sweeps.store import schema
    from ngb.sweeps.store.migrations import read_version

    try:
        with read_errors(store.path):
            conn = duckdb.connect(str(copy), read_only=True, config=BASE_CONFIG)
            try:
                check_intact(conn, copy)
                version = read_version(conn)
                if version != schema.latest_version():  # newer or foreign: refused with why
                    store._check_readable(conn, version)  # noqa: SLF001 - names the store
            finally:
                conn.close()
    except NgbError as exc:  # name the file, not its copy
        raise NgbError(str(exc).replace(str(copy), str(store.path))) from None
    if version == schema.latest_version():
        store._schema_checked = True  # noqa: SLF001 - the store's own once-only check
        return True
    upgrade_copy(copy, store.path)
    return True
