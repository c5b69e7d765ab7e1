"""Which stores this process holds open through DuckDB, and the per-file lock around them.

DuckDB keeps a database file (and its write-ahead log) for itself with POSIX record locks
(``fcntl``). POSIX ties those locks to the process and drops *all* of them when the process
closes *any* descriptor of the file: one ``open(store).read(16)`` in a process that holds the
store open silently unlocks it, and another process then opens it read-write beside the first.
Two writers of one file lose commits and can leave a log that belongs to another checkpoint
than the main file, which no command can open again (issue 41: the console copying the store
for a query while its ingest held it, next to ``ngb run`` following the same run).

So every DuckDB instance of a store opened by ngb is counted here, under the per-file lock, and
``raw_files`` reads the store's bytes in this process only while the count is zero.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_process_locks: dict[str, threading.RLock] = {}
_process_locks_guard = threading.Lock()
#: DuckDB instances of each store (by resolved path) open in this process right now
_open: dict[str, int] = {}


def key_of(path: Path) -> str:
    return str(Path(path).resolve())


def lock_for(path: Path) -> threading.RLock:
    """The lock that serialises this process's connections to one file (DuckDB refuses a
    read-write and a read-only connection to one file in one process at once)."""
    key = key_of(path)
    with _process_locks_guard:
        return _process_locks.setdefault(key, threading.RLock())


@contextmanager
def counted(path: Path) -> Iterator[None]:
    """Around the life of one DuckDB connection to ``path`` (taken inside ``lock_for``)."""
    key = key_of(path)
    with _process_locks_guard:
        _open[key] = _open.get(key, 0) + 1
    try:
        yield
    finally:
        with _process_locks_guard:
            _open[key] -= 1
            if not _open[key]:
                del _open[key]


def open_here(path: Path) -> bool:
    """True while this process holds ``path`` open through DuckDB (its locks are live)."""
    with _process_locks_guard:
        return key_of(path) in _open
