"""A DuckDB instance kept per store file; the file is attached to it while ngb's connections use it.

A new DuckDB instance builds its catalog of built-in functions first: ~15 ms of CPU on the
2-core VM, against ~1 ms to ``ATTACH`` a file to an instance that exists and ``DETACH`` it
again. The store opens its file for every read and every write (``connect``: other processes
must be able to take it between calls), so ``make test`` made ~4,800 instances and the console
paid one per poll. Here the process keeps an in-memory *host* instance for each store file it
uses (the ``MAX_HOSTS`` most recent), and each of ngb's own connections to the file is a cursor
of that host whose default database (``USE``) is the file, attached under its own name for as
long as any of this process's connections use it. The file is locked exactly as a
``duckdb.connect`` of it would lock it (shared for ``READ_ONLY``, exclusive otherwise) and
released at the ``DETACH`` that follows the last cursor's close, so what other processes see is
unchanged.

One host per file, not one per process: a detached database lives on (its file open and locked)
until every transaction that began before the ``DETACH`` on the same instance has ended, so
another thread's read of a second store kept the first one attached, and this process's next
connection to it failed ("Unique file handle conflict"). Connections to one file are serialised
(``instances.lock_for``), so its host has no other transaction then.

Only ngb's own statements come here: the operator's SQL (``sql_files``) locks its connection's
configuration, which would lock the host's, and a streamed read (``Store.reading``) bounds its
memory and spill folder with settings that are the instance's, so both keep an instance of their
own (``connect.open_connection``), never beside an attachment of the same file.

Settings ``wal_marker.prepare_writer`` makes (no checkpoint at close or past a threshold) are
the instance's, so they hold for every attachment of the file: only ``wal_marker.finish_write``
checkpoints, as before.

A forked child must not use or destroy the parent's instances (their threads are not there):
the child forgets them (never closes them; ngb's forked children leave through ``os._exit``) and
makes its own when it needs one.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
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


#: host instances kept for files not attached now (a process uses one or two stores; a test
#: worker makes hundreds, so the least recently used idle ones are closed)
MAX_HOSTS = 4

_guard = threading.Lock()
#: store file (resolved) -> its host instance, least recently used first
_hosts: OrderedDict[str, duckdb.DuckDBPyConnection] = OrderedDict()
_attached: dict[str, _Attached] = {}
_names = itertools.count(1)
#: instances inherited through a fork: kept referenced so the child never destroys them
_forgotten: list[object] = []


def _forget_in_child() -> None:
    global _guard
    _guard = threading.Lock()  # another thread of the parent may have held it at the fork
    _forgotten.extend(_hosts.values())
    _hosts.clear()
    _attached.clear()


def _host_for(key: str) -> duckdb.DuckDBPyConnection:
    """The file's host instance (made now if needed; idle ones past ``MAX_HOSTS`` closed).
    Called holding ``_guard``."""
    import duckdb

    host = _hosts.get(key)
    if host is None:
        idle = [k for k in _hosts if k not in _attached]
        if len(_hosts) >= MAX_HOSTS and idle:
            # the least recently used idle host serves this file now: its file is detached and
            # none of its cursors is open, so no transaction of it keeps that file (the reason
            # for one host per file), and a new instance costs ~18 ms of CPU to make and close
            # (test processes make hundreds of store files)
            host = _hosts.pop(idle[0])
        else:
            host = duckdb.connect(":memory:", config=BASE_CONFIG)
        _hosts[key] = host
    _hosts.move_to_end(key)
    idle = [k for k in _hosts if k not in _attached and k != key]
    for old in idle[: max(0, len(_hosts) - MAX_HOSTS)]:
        _hosts.pop(old).close()
    return host


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

    key = key_of(path)
    # all under the guard (~1 ms): no other thread closes this host meanwhile (``_host_for``)
    with _guard:
        cursor = _host_for(key).cursor()
        held = _attached.get(key)
        try:
            if held is None:
                alias = f"ngb_store_{next(_names)}"
                mode = "" if write else ", READ_ONLY"
                cursor.execute(f"ATTACH {_quoted(path)} AS {alias} (TYPE DUCKDB{mode})")
                held = _attached[key] = _Attached(alias, write, 0)
            elif write and not held.write:
                raise duckdb.ConnectionException(OTHER_SETTINGS)
            cursor.execute(f"USE {held.alias}")
        except BaseException:
            cursor.close()
            if held is not None and held.users == 0:
                _detach(key, held)
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
            _detach(key, held)


def _detach(key: str, held: _Attached) -> None:
    """Called holding ``_guard``."""
    _attached.pop(key, None)
    host = _hosts.get(key)
    if host is None:  # forgotten in a forked child
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
