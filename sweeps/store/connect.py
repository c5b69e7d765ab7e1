"""Opening the results file: short-lived connections, locks, retries, and what failures mean.

DuckDB lets one process hold a file read-write, and while it does no other process can open the
file at all (not even read-only). So the store never keeps a connection open: every write opens a
read-write connection for one batch (one transaction) and closes it, and every read opens a
read-only connection and closes it. Between batches another terminal's ``ngb query`` gets in; if it
arrives during a batch it retries for a bounded time and then fails with one clear line.

Inside one process a lock serialises connections to the same file, because DuckDB also refuses two
simultaneous connections with different settings (read-write vs read-only) in one process — the TUI
may ingest and run the SQL console at once. ngb's own connections are cursors of a DuckDB
instance this process keeps for the file, the file attached to it while they are open
(``host``: an instance costs ~15 ms of CPU to make, an attachment ~1 ms); the operator's SQL
gets an instance of its own.

A read-write connection never lets DuckDB checkpoint by itself: it checkpoints when it closes,
only while no reader is copying the store, and records how long the log is (``wal_marker``), so
a reader in another process copies the store without opening it and the writer never waits.

Failures come out typed (``store_errors``): a held file is ``DatabaseBusy``; a write that cannot
happen at all is ``StoreUnwritable``; data that does not fit its column is ``RowRejected``.
Nothing here creates a file or folder unless it is about to write.
"""

from __future__ import annotations

import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError, first_line
from ngb.sweeps.store.errors import BUSY_MESSAGE, DatabaseBusy, RowRejected, StoreUnwritable
from ngb.sweeps.store.host import OTHER_SETTINGS, attach, attached, release
from ngb.sweeps.store.instances import counted, lock_for
from ngb.sweeps.store.query import is_lock_error
from ngb.sweeps.store.raw_files import read_head
from ngb.sweeps.store.recover import is_log_refusal, refusal_line
from ngb.sweeps.store.sql_files import BASE_CONFIG, FileGrant, apply_grant
from ngb.sweeps.store.wal_marker import deferring, finish_write, prepare_writer

if TYPE_CHECKING:
    import duckdb

__all__ = ["check_is_file", "connection", "held_open", "lock_for", "open_connection"]


def check_is_file(path: Path) -> None:
    """A database path must be a regular file (a FIFO or a device would hang or worse)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise NgbError(f"cannot open results database {path}: {first_line(exc)}") from None
    if not stat.S_ISREG(mode):
        raise NgbError(f"results database {path} is not a regular file")
    with suppress(OSError):  # DuckDB replays the log on open: a FIFO there hung every command
        if not stat.S_ISREG(Path(f"{path}.wal").stat().st_mode):
            raise NgbError(f"results database {path}: its log {path}.wal is not a regular file")
    # DuckDB opens a SQLite file through its SQLite extension (once fetched from the internet):
    # say what the file is instead. Not while this process holds it (``raw_files``: the read
    # would unlock it), when it is a DuckDB file anyway.
    try:
        head = read_head(path, 16)
    except OSError:
        return  # unreadable: DuckDB's own open says why
    if head == b"SQLite format 3\0":
        raise NgbError(f"results database {path} is a SQLite file, not an ngb results database")


def check_intact(conn: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Refuse a truncated file: DuckDB may answer from the blocks that are left, silently.

    Every block in use lies inside the file (DuckDB trims only free blocks off its end), so a
    file shorter than its used blocks has lost data. Blocks not yet checkpointed live in the
    write-ahead log, so with one present the check is left to DuckDB.
    """
    if Path(f"{path}.wal").exists():
        return
    row = conn.execute(
        "SELECT block_size, used_blocks FROM pragma_database_size() "
        "WHERE database_name = current_database()"
    ).fetchone()
    if row is None:  # DuckDB always answers this pragma; nothing to compare without it
        return
    block_size, used_blocks = int(row[0] or 0), int(row[1] or 0)
    expected = block_size * used_blocks
    size = path.stat().st_size
    if size < expected:
        raise NgbError(
            f"results database {path} is truncated ({size} of at least {expected} bytes); "
            "restore it from a copy"
        )


def open_connection(
    path: Path,
    *,
    write: bool,
    external_access: bool | FileGrant,
    timeout: float,
    own_instance: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection, retried while another process holds the file (up to ``timeout``).

    ``external_access``: ``True`` for ngb's own statements, ``False`` (no other file) or a
    ``FileGrant`` (exactly those files) for an operator's SQL, whose connection is then locked
    (``sql_files``). Those get a DuckDB instance of their own, as do ngb's statements that
    change the instance's settings (``own_instance``: ``Store.reading``); the rest share the
    instance this process keeps for the file (``host``). Extensions are never autoloaded or
    installed. The caller holds ``lock_for(path)`` and counts the connection
    (``instances.counted``) for its whole life, and gives it back with ``close``
    (``conn.close()`` alone would leave the file attached).
    """
    import duckdb

    hosted = external_access is True and not own_instance
    if write:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnwritable(
                f"cannot write results database {path}: {first_line(exc)}"
            ) from None
    config = dict(BASE_CONFIG)
    if external_access is False:
        config["enable_external_access"] = False
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            if hosted:
                conn = attach(path, write=write)
            elif attached(path):  # a second instance of the file in this process: never
                raise duckdb.ConnectionException(OTHER_SETTINGS)
            else:
                conn = duckdb.connect(str(path), read_only=not write, config=config)
        except duckdb.Error as exc:
            if is_log_refusal(str(exc)):  # no retry helps: say what does (``recover``)
                raise NgbError(refusal_line(path, str(exc))) from None
            if not is_lock_error(exc):
                kind = StoreUnwritable if write else NgbError
                verb = "write" if write else "open"
                raise kind(f"cannot {verb} results database {path}: {first_line(exc)}") from None
            if time.monotonic() >= deadline:
                raise DatabaseBusy(BUSY_MESSAGE) from None
        else:
            try:
                if write:  # only ngb checkpoints, never while a reader copies (wal_marker)
                    prepare_writer(conn)
                if external_access is not True:
                    apply_grant(conn, external_access)  # locks the settings: after ours
            except BaseException:
                close(conn, path, hosted=hosted)
                raise
            return conn
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


@contextmanager
def connection(
    path: Path,
    *,
    write: bool,
    timeout: float,
    external_access: bool | FileGrant = True,
    own_instance: bool = False,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for a block (``open_connection``), closed after it: a writer's
    checkpoint and marker (``wal_marker``), then the file detached from the instance this
    process keeps for it after its last connection."""
    hosted = external_access is True and not own_instance
    with lock_for(path):
        check_is_file(path)  # before this process opens it (``raw_files``)
        with counted(path):
            conn = open_connection(
                path,
                write=write,
                external_access=external_access,
                timeout=timeout,
                own_instance=own_instance,
            )
            committed = False
            try:
                yield conn
                committed = True
            finally:
                try:
                    if write:  # checkpoint unless a reader is copying (or held_open does); marker
                        last = not _held.get(str(path.resolve()))
                        finish_write(conn, path, last=last, committed=committed)
                    else:
                        conn.close()
                finally:
                    if hosted:
                        release(path)


def close(conn: duckdb.DuckDBPyConnection, path: Path, *, hosted: bool = True) -> None:
    """Close a connection ``open_connection`` made; ``hosted`` (ngb's own statements): the
    file is detached from its kept instance after its last connection."""
    try:
        conn.close()
    finally:
        if hosted:
            release(path)


#: paths a ``held_open`` of this process keeps open (only its thread writes them meanwhile)
_held: dict[str, int] = {}


@contextmanager
def held_open(path: Path) -> Iterator[None]:
    """Several writes sharing one open of the file (``Store.batch``): DuckDB shares one database
    instance among a process's connections to a file, so the writes inside only attach to it,
    and the checkpoint (``finish_write``) happens once, when this connection closes. The file
    stays held meanwhile, this process's lock too (re-entrant): its other threads wait."""
    with lock_for(path):
        check_is_file(path)  # before this process opens it (``raw_files``)
        with counted(path):
            keeper = _keeper(path)
            if keeper is None:
                yield
                return
            key = str(path.resolve())
            _held[key] = _held.get(key, 0) + 1
            committed = False
            try:
                yield
                committed = True
            finally:
                _held[key] -= 1
                if not _held[key]:
                    del _held[key]
                try:
                    finish_write(keeper, path, last=not _held.get(key), committed=committed)
                finally:
                    release(path)


def _keeper(path: Path) -> duckdb.DuckDBPyConnection | None:
    """``held_open``'s connection, or None while the file is busy (the writes inside then
    retry on their own)."""
    import duckdb

    with suppress(duckdb.Error):
        opened = attach(path, write=True)
        try:
            prepare_writer(opened)
        except duckdb.Error:
            close(opened, path)
            raise
        return opened
    return None


def _arrow_errors() -> tuple[type[Exception], ...]:
    """pyarrow's conversion errors, where pyarrow is loaded: where it is not, nothing raised
    them, and importing it for the ``except`` cost every write ~70 ms of CPU."""
    pa = sys.modules.get("pyarrow")
    return (pa.ArrowInvalid, pa.ArrowTypeError) if pa is not None else ()


@contextmanager
def write_errors(path: Path) -> Iterator[None]:
    """Translate what a failed write raised into the store's error types (see module doc)."""
    import duckdb

    try:
        yield
    except (duckdb.DataError, duckdb.IntegrityError, OverflowError, UnicodeError) as exc:
        raise RowRejected(f"cannot store this data: {first_line(exc)}") from None
    except duckdb.Error as exc:
        if is_lock_error(exc):
            raise DatabaseBusy(BUSY_MESSAGE) from None
        raise StoreUnwritable(f"cannot write results database {path}: {first_line(exc)}") from None
    except OSError as exc:
        raise StoreUnwritable(f"cannot write results database {path}: {first_line(exc)}") from None
    except (ValueError, TypeError) as exc:  # pyarrow's ArrowInvalid and ArrowTypeError are these
        if isinstance(exc, _arrow_errors()):
            raise RowRejected(f"cannot store this data: {first_line(exc)}") from None
        raise


@contextmanager
def read_errors(path: Path) -> Iterator[None]:
    """A damaged file fails a read with one line, not a DuckDB traceback."""
    import duckdb

    try:
        yield
    except duckdb.Error as exc:
        if is_lock_error(exc):
            raise DatabaseBusy(BUSY_MESSAGE) from None
        if is_log_refusal(str(exc)):
            raise NgbError(refusal_line(path, str(exc))) from None
        raise NgbError(f"cannot read results database {path}: {first_line(exc)}") from None


def checkpoint(path: Path, *, timeout: float) -> None:
    """Fold the store's log into its main file now (a live run's end), unless a reader is
    copying it (the next write does it then): a store at rest has no log. Nothing to do
    without a log, nor while this process's live run defers its checkpoints."""
    if deferring(path) or not Path(f"{path}.wal").exists():
        return
    with write_errors(path), connection(path, write=True, timeout=timeout):
        pass  # closing it checkpoints (wal_marker.finish_write)
