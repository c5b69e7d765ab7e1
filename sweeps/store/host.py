"""One DuckDB instance per process; a store file is attached to it while ngb's connections use it.

A new DuckDB instance builds its catalog of built-in functions first: ~15 ms of CPU on the
2-core VM, against ~1 ms to ``ATTACH`` a file to an instance that exists and ``DETACH`` it
again. The store opens its file for every read and every write (``connect``: other processes
must be able to take it between calls), so ``make test`` made ~4,800 instances and the console
paid one per poll. Here the process keeps one in-memory *host* instance, and each of ngb's own
connections to a store is a cursor of the host whose default database (``USE``) is the file,
attached under its own name for as long as any of this process's connections use it. The file is
locked exactly as a ``duckdb.connect`` of it would lock it (shared for ``READ_ONLY``, exclusive
otherwise) and released at the ``DETACH`` that follows the last cursor's close, so what other
processes see is unchanged.

Only ngb's own statements come here: the operator's SQL (``sql_files``) locks its connection's
configuration, which would lock the host's, and a streamed read (``Store.reading``) bounds its
memory and spill folder with settings that are the instance's, so both keep an instance of their
own (``connect.open_connection``), never beside an attachment of the same file.

Settings ``wal_marker.prepare_writer`` makes (no checkpoint at close or past a threshold) are
the instance's, so they hold for every file the host attaches: only ``wal_marker.finish_write``
checkpoints, as before.

A forked child must not use or destroy the parent's instance (its threads are not there): the
child forgets it (never closes it; ngb's forked children leave through ``os._exit``) and makes
its own when it needs one.
"""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.sweeps.store.instances import key_of
from ngb.sweeps.store.sql_files import BASE_CONFIG

if TYPE_CHECKING:
    import duckdb

#: DuckDB's message when one process opens a file it holds with other settings (kept as it was)
OTHER_SETTINGS = (
    "Can't open a connection to same database file with a different configuration than "
    "existing connections"
)


@dataclass
class _Attached:
    alias: str
    write: bool
    users: int


_guard = threading.Lock()
_host: duckdb.DuckDBPyConnection | None = None
_attached: dict[str, _Attached] = {}
_names = itertools.count(1)
#: instances inherited through a fork: kept referenced so the child never destroys them
_forgotten: list[object] = []


def _forget_in_child() -> None:
    global _host
    if _host is not None:
        _forgotten.append(_host)
    _host = None
    _attached.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def attach(path: Path, *, write: bool) -> duckdb.DuckDBPyConnection:
    """A connection whose default database is ``path`` (read-write when ``write``), attached
    now or shared with this process's connections that use it already (a read shares a write's
    attachment; a write inside a read-only one is refused as DuckDB refuses it). Give it back
    with ``release(path)`` after closing it. The caller holds ``instances.lock_for(path)``.
    DuckDB's own errors (a lock held elsewhere, a log it refuses) come out as they are."""
    import duckdb

    global _host
    key = key_of(path)
    with _guard:
        if _host is None:
            _host = duckdb.connect(":memory:", config=BASE_CONFIG)
        cursor = _host.cursor()
        held = _attached.get(key)
    try:
        if held is None:
            alias = f"ngb_store_{next(_names)}"
            mode = "" if write else ", READ_ONLY"
            cursor.execute(f"ATTACH {_quoted(path)} AS {alias} (TYPE DUCKDB{mode})")
            held = _Attached(alias, write, 0)
            with _guard:
                _attached[key] = held
        elif write and not held.write:
            raise duckdb.ConnectionException(OTHER_SETTINGS)
        cursor.execute(f"USE {held.alias}")
    except BaseException:
        cursor.close()
        if held is not None and held.users == 0:
            _drop(key, held)
        raise
    held.users += 1
    return cursor


def release(path: Path) -> None:
    """One connection of ``attach`` is closed; the file is detached (unlocked) after the last."""
    key = key_of(path)
    with _guard:
        held = _attached.get(key)
    if held is None:  # forgotten in a forked child, or never attached
        return
    held.users -= 1
    if held.users <= 0:
        _drop(key, held)


def _drop(key: str, held: _Attached) -> None:
    with _guard:
        _attached.pop(key, None)
        host = _host
    if host is None:
        return
    cursor = host.cursor()
    try:
        cursor.execute(f"DETACH DATABASE IF EXISTS {held.alias}")
    finally:
        cursor.close()


def attached(path: Path) -> bool:
    """This process has ``path`` attached to its host now (``connect`` then refuses a second
    instance of the file)."""
    with _guard:
        return key_of(path) in _attached
