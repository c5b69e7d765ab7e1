"""Reading a store an older ngb wrote, without upgrading the file.

A read-only command (``compare``, ``history``, ``report``, ``figures``, ``status``, ``query``
without ``--write``, ``advise``, ``export``, the console) must leave the file as it found it: the
older ngb may still read it, and a store kept as the record of a paper must keep its bytes (issue
41: ``ngb compare --db old.duckdb`` upgraded the file in place). So a reader works on a private
copy upgraded to this ngb's schema, as ``ngb import`` does with the file it merges; the file
itself is upgraded by the next write (``Store._ensure_schema``), which changes it anyway.

A reader's own copy is made by DuckDB on a read-only connection to the file (``COPY FROM
DATABASE``: one transaction's view, log included, and no byte of the file read by this process,
which would drop DuckDB's locks on it: ``instances``), and kept for the next reads while the file
is unchanged, since a report reads the store a few dozen times. A console's copy (``snapshot``)
is upgraded in place; an upgraded copy is marked (``is_upgraded``), so no later copy hard-links its
main file as the store's own, and its version is never taken for the file's (``copy_check``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError
from ngb.core.base.scratch import scratch_dir
from ngb.sweeps.store.connect import connection, read_errors
from ngb.sweeps.store.sql_files import BASE_CONFIG, FileGrant, apply_grant

if TYPE_CHECKING:
    import duckdb

#: beside an upgraded copy: its schema is this ngb's, not the file's it was copied from
UPGRADED_SUFFIX = ".upgraded"
#: held while a copy's version is read or upgraded: two console queries may share one copy, and
#: DuckDB refuses a read-only and a read-write connection to one file in one process
copy_lock = threading.RLock()


def is_upgraded(copy: Path) -> bool:
    """True for a copy ``upgrade_copy`` upgraded (not the file's own version any more)."""
    return Path(f"{copy}{UPGRADED_SUFFIX}").exists()


def upgrade_copy(copy: Path, store_path: Path) -> None:
    """Upgrade a private copy of ``store_path`` to this ngb's schema in place; errors name the
    store, not the copy (a newer or foreign file is refused as the store would be)."""
    with copy_lock:
        if not is_upgraded(copy):  # another thread's query may have upgraded it meanwhile
            _upgrade(copy, store_path)


def _upgrade(copy: Path, store_path: Path) -> None:
    import duckdb
    from ngb.sweeps.store.migrations import migrate

    _unshare(copy)
    try:
        with read_errors(store_path):
            conn = duckdb.connect(str(copy), config=BASE_CONFIG)
            try:
                migrate(conn, copy)
                conn.execute("CHECKPOINT")  # no log left: the copy opens read-only as it is
            finally:
                conn.close()
    except NgbError as exc:
        raise NgbError(str(exc).replace(str(copy), str(store_path))) from None
    Path(f"{copy}{UPGRADED_SUFFIX}").touch()


def _unshare(copy: Path) -> None:
    """A copy's main file may be a hard link to an earlier copy's (``wal_marker.copy_marked``):
    upgrading it in place would change that copy too, so it gets a file of its own first."""
    if os.stat(copy).st_nlink > 1:
        own = copy.with_name(f"{copy.name}.own")
        shutil.copyfile(copy, own)
        os.replace(own, copy)


# -- a reader's copies, kept while the file is unchanged -----------------------------------------

#: (inode, size, mtime_ns) of the store and of its log (None when it has none)
Signature = tuple[tuple[int, int, int], tuple[int, int, int] | None]


@dataclass
class _Kept:
    signature: Signature
    folder: tempfile.TemporaryDirectory[str]
    users: int = 0
    current: bool = True

    @property
    def copy(self) -> Path:
        return Path(self.folder.name) / "results.duckdb"


_kept: dict[str, _Kept] = {}
_guard = threading.Lock()


def _signature(path: Path) -> Signature:
    def stat_of(p: Path) -> tuple[int, int, int] | None:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    main = stat_of(path)
    if main is None:
        raise NgbError(f"results database {path} disappeared while it was read")
    return main, stat_of(Path(f"{path}.wal"))


def _quoted(text: str, quote: str) -> str:
    return quote + text.replace(quote, quote * 2) + quote


def copy_of(path: Path, copy: Path, *, timeout: float) -> None:
    """``path``'s tables, views and rows into a new DuckDB file ``copy``, by DuckDB itself on a
    read-only connection (one transaction: what a reader of the file would see)."""
    with read_errors(path), connection(path, write=False, timeout=timeout) as conn:
        row = conn.execute("SELECT current_database()").fetchone()
        name = str(row[0]) if row else ""
        alias = "ngb_reader_copy" if name != "ngb_reader_copy" else "ngb_reader_copy_2"
        conn.execute(f"ATTACH {_quoted(str(copy), chr(39))} AS {alias} (READ_WRITE)")
        try:
            conn.execute(f"COPY FROM DATABASE {_quoted(name, chr(34))} TO {alias}")
        finally:
            conn.execute(f"DETACH {alias}")


def _acquire(path: Path, timeout: float) -> _Kept:
    """The upgraded copy of the store as it is now: the kept one, or a new one."""
    key = str(path.resolve())
    signature = _signature(path)
    with _guard:
        kept = _kept.get(key)
        if kept is not None and kept.signature == signature:
            kept.users += 1
            return kept
    fresh = _Kept(signature, scratch_dir("older"), users=1)
    try:
        copy_of(path, fresh.copy, timeout=timeout)
        upgrade_copy(fresh.copy, path)
    except BaseException:
        fresh.folder.cleanup()
        raise
    with _guard:
        old = _kept.get(key)
        _kept[key] = fresh
        if old is not None:
            old.current = False
            if old.users == 0:
                old.folder.cleanup()
    return fresh


def _release(kept: _Kept) -> None:
    with _guard:
        kept.users -= 1
        if kept.users == 0 and not kept.current:
            kept.folder.cleanup()


@contextmanager
def reading(
    path: Path, *, timeout: float, external_access: bool | FileGrant = True
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to an upgraded copy of the store at ``path`` (an older ngb's
    file, already checked to be one), restricted as a connection to the file itself would be
    (``external_access``)."""
    import duckdb

    kept = _acquire(path, timeout)
    try:
        config = dict(BASE_CONFIG)
        if external_access is False:
            config["enable_external_access"] = False
        with read_errors(path):
            conn = duckdb.connect(str(kept.copy), read_only=True, config=config)
        try:
            apply_grant(conn, external_access)
            yield conn
        finally:
            conn.close()
    finally:
        _release(kept)
