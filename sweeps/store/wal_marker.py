"""Copying a store while a live run writes it, without the writer ever waiting (issue 31).

DuckDB appends each commit to the write-ahead log (``<store>.wal``) and rewrites the main file
only at a checkpoint. So while no checkpoint runs, the main file stands still and the log only
grows, and the main file plus the log's first N bytes, N the log's length right after a commit,
is the store as of that commit: what a reader needs, copied without opening the file (DuckDB's
own lock would make the writer wait for the reader).

- The writer (every read-write connection, ``connect.connection``) never lets DuckDB checkpoint
  on its own (at a commit past its threshold, or at close). It checkpoints itself when it closes,
  and only holding the *readers lock* (``<store>.ngb-readers``, an exclusive ``flock`` taken
  without waiting): if a reader holds it, the commit stays in the log for a later write. After
  each write of a live run, before it closes, it records atomically the main file's identity
  and the log's committed length in the *marker* (``<store>.ngb-wal``, JSON); other writers
  only keep a marker that is there up to date, so a store no run wrote gets no new files.
- A reader (``snapshot.take_snapshot``) holds the readers lock shared while it copies the main
  file and exactly that prefix of the log, and keeps the copy only when the main file kept the
  identity the marker names from before the copy to after it.
- A live run (``RunWriter``, inside ``deferred_checkpoints``) checkpoints only once the log
  passes ``checkpoint_bytes`` (256 KiB to 4 MiB, more for a larger main file), and when it
  ends: the main file then stays put between its flushes, so a console's copy of it can be
  reused and only the log copied again (``snapshot``). Any other writer checkpoints at every
  close, as DuckDB does by default, so a store at rest has no log (a copy of the ``.duckdb``
  file alone is the whole store).

A marker that is missing, garbage, stale (a writer killed between its commit and its marker) or
not a regular file, or a readers lock that cannot be taken, sends the reader back to the copy
that needs no marker (``snapshot``), and a writer whose lock file is unusable checkpoints as
DuckDB would. A writer killed mid-run loses nothing: its commits are in the log, which the next
open replays. A reader stuck while holding the lock (stopped mid-copy) cannot make the log grow
without end: past ``MAX_WAL_BYTES`` the writer checkpoints anyway, and the reader sees its copy
spoilt and copies again.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import math
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

#: the marker beside the store: the main file's identity and the log's committed length
MARKER_SUFFIX = ".ngb-wal"
#: the readers lock beside the store (shared while a reader copies; exclusive to checkpoint)
LOCK_SUFFIX = ".ngb-readers"
#: a live run's writer checkpoints once its log passes ``checkpoint_bytes`` (and no reader is
#: copying): at most this (DuckDB 2.0 replays 16 MiB of log in 0.33 s, at every open)...
CHECKPOINT_BYTES = 4 * 2**20
#: ...and at least this: a checkpoint has a cost of its own, which the rule leaves out (a new
#: store, one 128-device run's writes replayed: 64 KiB 2.84 CPU-s, 128 KiB 2.75, 256 KiB
#: 2.80, 512 KiB 2.94, 4 MiB 4.11)
MIN_CHECKPOINT_BYTES = 256 * 2**10
#: replaying a byte of log at an open costs ~12 times the CPU of copying a byte of main file
#: (28 ms/MB against 2.3 ms/MB on the 2-core VM): see ``checkpoint_bytes``
REPLAY_OVER_COPY = 12
#: bytes a live run's flush adds to the log, typically (128 devices x 4 trials: 3.8 MB in 55)
FLUSH_LOG_BYTES = 64 * 2**10
#: past this a reader still holding the lock is taken for stuck: the writer checkpoints anyway
MAX_WAL_BYTES = 64 * 2**20
#: DuckDB's own automatic checkpoint at a commit: never before ours (``MAX_WAL_BYTES``)
AUTO_CHECKPOINT = "1GB"
#: the largest marker read (a real one is under 200 bytes)
MARKER_MAX_BYTES = 4096

#: (inode, size, modification time in ns) of a file
FileId = tuple[int, int, int]


@dataclass(frozen=True)
class Marker:
    """The store as of one commit: the main file (``main``) and the log's first ``wal_len``
    bytes (of the log file ``wal_ino``; 0 and 0 when there is none). ``live``: written by a
    live run's writer (``deferred_checkpoints``), ``at`` when (the marker's own mtime)."""

    main: FileId
    wal_ino: int
    wal_len: int
    live: bool = False
    at: float = 0.0


def marker_path(db: Path) -> Path:
    return Path(f"{db}{MARKER_SUFFIX}")


def lock_path(db: Path) -> Path:
    return Path(f"{db}{LOCK_SUFFIX}")


def wal_path(db: Path) -> Path:
    return Path(f"{db}.wal")


def file_id(path: Path) -> FileId | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device: never opened, never copied
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_marker(db: Path) -> Marker | None:
    """The marker, or None when it is missing, not a regular file, or not one ngb wrote."""
    try:
        # never blocks (a FIFO planted there) and never follows a link
        fd = os.open(marker_path(db), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        raw = os.read(fd, MARKER_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) > MARKER_MAX_BYTES:
        return None
    try:
        data = json.loads(raw)
        main = tuple(int(v) for v in data["main"])
        wal_ino, wal_len, live = int(data["wal_ino"]), int(data["wal_len"]), data["live"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    if len(main) != 3 or min(*main, wal_ino, wal_len) < 0 or not isinstance(live, bool):
        return None
    return Marker((main[0], main[1], main[2]), wal_ino, wal_len, live, st.st_mtime)


def live_writer(db: Path, within_s: float) -> bool:
    """A live run wrote the store within ``within_s`` (its next flush may come any moment)."""
    marker = read_marker(db)
    return marker is not None and marker.live and time.time() - marker.at < within_s


def current_marker(db: Path, *, live: bool = False) -> Marker | None:
    """What the files are now (after a write, before anyone else writes); None without a main
    file."""
    main = file_id(db)
    if main is None:
        return None
    wal = file_id(wal_path(db))
    return Marker(main, wal[0] if wal else 0, wal[1] if wal else 0, live)


def write_marker(db: Path, marker: Marker) -> None:
    """Replace the marker atomically (written beside it, renamed over it). A marker that
    cannot be written is left alone: readers then find it stale and copy without it."""
    text = json.dumps({"main": list(marker.main), "wal_ino": marker.wal_ino,
                       "wal_len": marker.wal_len, "live": marker.live})  # fmt: skip
    try:
        fd, tmp = tempfile.mkstemp(dir=db.parent, prefix=f".{db.name}.", suffix=".marker")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as out:
            os.fchmod(out.fileno(), 0o644)  # mkstemp: 0600, other users' readers would not see it
            out.write(text)
        os.replace(tmp, marker_path(db))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


class Lock(enum.Enum):
    HELD = "held"
    BUSY = "busy"  # the other side holds it
    UNUSABLE = "unusable"  # no lock file can be had (a FIFO there, a read-only folder)


def _open_lock(db: Path, *, create: bool = False) -> int | None:
    """A descriptor of the lock file (``create``: made when missing, by a live run's writer);
    None when there is none, it is not a regular file or it cannot be opened."""
    flags = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    modes = (os.O_RDWR | (os.O_CREAT if create else 0), os.O_RDONLY)  # flock needs no write
    fd = None
    for mode in modes:
        try:
            fd = os.open(lock_path(db), mode | flags, 0o644)
            break
        except OSError:
            continue
    if fd is None:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


@contextmanager
def readers_lock(db: Path, *, exclusive: bool, wait_s: float = 0.0) -> Iterator[Lock]:
    """The readers lock: shared (a reader copying) or exclusive (a writer's checkpoint), tried
    until ``wait_s`` has passed (0: once; a writer never waits). ``flock``, not ``fcntl``:
    two threads of one process (a console's query, the run's ingest) exclude each other too."""
    fd = _open_lock(db)
    if fd is None:
        yield Lock.UNUSABLE
        return
    op = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + wait_s
    state = Lock.BUSY
    try:
        while True:
            try:
                fcntl.flock(fd, op)
                state = Lock.HELD
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
            except OSError:
                state = Lock.UNUSABLE
                break
        yield state
    finally:
        os.close(fd)  # releases the lock


# -- the writer ---------------------------------------------------------------------------------
_deferred: dict[str, int] = {}
_deferred_guard = threading.Lock()


def _key(db: Path) -> str:
    return str(db.expanduser().resolve())


@contextmanager
def deferred_checkpoints(db: Path) -> Iterator[None]:
    """While inside, this process's writes to ``db`` checkpoint only past ``checkpoint_bytes``
    and keep the marker (a live run: see the module docstring). The marker and the readers
    lock appear beside a store once a live run has written it (``_mark``); other writers only
    keep a marker that is there up to date."""
    key = _key(db)
    with _deferred_guard:
        _deferred[key] = _deferred.get(key, 0) + 1
    try:
        yield
    finally:
        with _deferred_guard:
            _deferred[key] -= 1
            if not _deferred[key]:
                del _deferred[key]


def deferring(db: Path) -> bool:
    with _deferred_guard:
        return _key(db) in _deferred


def prepare_writer(conn: duckdb.DuckDBPyConnection) -> None:
    """DuckDB never checkpoints this database by itself (at close, or at a commit past its
    threshold): only ``finish_write`` does, holding the readers lock. Settings of the database,
    not of the connection, so a batch's keeper connection (``Store.batch``) shares them."""
    conn.execute("PRAGMA disable_checkpoint_on_shutdown")
    conn.execute(f"SET checkpoint_threshold = '{AUTO_CHECKPOINT}'")


def finish_write(
    conn: duckdb.DuckDBPyConnection, db: Path, *, last: bool = True, committed: bool = True
) -> None:
    """Close a read-write connection: checkpoint when it is due and no reader is copying (never
    waiting for one); ``last`` False: another connection of this process keeps the database
    open (``connect.held_open``) and checkpoints when it closes. The marker is recorded before
    the connection closes: while it is open no other process can write, so the log's length is
    that of this process's last commit. ``committed`` False (the writes failed: a store that is
    no ngb store, say): no new file is made beside it, a marker already there is kept current."""
    import duckdb

    wal = file_id(wal_path(db))
    size = wal[1] if wal else 0
    if last and size > 0 and (not deferring(db) or size >= checkpoint_bytes(db)):
        with readers_lock(db, exclusive=True) as lock:
            if lock is not Lock.BUSY or size >= MAX_WAL_BYTES:
                # a failed checkpoint (an aborted transaction) leaves the log: replayed later
                with contextlib.suppress(duckdb.Error):
                    conn.execute("CHECKPOINT")
            _mark(db, create=committed)  # before a reader may take the lock again
            conn.close()
        return
    _mark(db, create=committed)
    conn.close()


def checkpoint_bytes(db: Path) -> int:
    """How long a live run lets the log grow before it checkpoints, for a main file this size.

    Two costs pull apart. Every open (each flush of the writer, each ``ngb`` command) replays
    the log; a checkpoint changes the main file, which a console's copy then copies whole again
    (``snapshot``). With a log let grow to L, a run replays ~L/2 at each of its L/f flushes per
    checkpoint (f: ``FLUSH_LOG_BYTES``), and a reader copies the main file M once per
    checkpoint. Per byte logged that is L r / 2f + M c / L (r, c: replaying and copying a
    byte), least at L = sqrt(2 f M c / r): the 256 KiB floor up to a 6 MiB store, ~0.8 MiB
    at 64 MiB, ~1.7 MiB at 290 MiB, the 4 MiB cap from 1.5 GiB on. With 4 MiB for every store, the
    writer of a 128-device run into a new store replayed up to 3.6 MiB at its late flushes:
    4.1 CPU-s of writes, 2.9 at 256 KiB (2026-12-01, that run's writes replayed:
    ``benchmarks/writer_replay.py``)."""
    main = file_id(db)
    optimum = math.sqrt(2 * FLUSH_LOG_BYTES * (main[1] if main else 0) / REPLAY_OVER_COPY)
    return int(min(CHECKPOINT_BYTES, max(MIN_CHECKPOINT_BYTES, optimum)))


def _mark(db: Path, *, create: bool = True) -> None:
    """Record the marker: always for a live run (which also makes the readers lock file) whose
    write went in (``create``), otherwise only over one that is there (a one-off or failed
    write leaves no new file beside a store)."""
    live = deferring(db)
    if live and create:
        fd = _open_lock(db, create=True)
        if fd is not None:
            os.close(fd)
    elif not os.path.lexists(marker_path(db)):
        return
    marker = current_marker(db, live=live)
    if marker is not None:
        write_marker(db, marker)


# -- the reader ---------------------------------------------------------------------------------
#: copies ``source`` (its first ``length`` bytes; None: all of it) to ``dest``, looking at a
#: stop between chunks (``snapshot._copy_one``)
CopyOne = Callable[[Path, Path, int | None], None]


def copy_marked(
    db: Path, copy: Path, copy_one: CopyOne, *, wait_s: float, main_from: Path | None = None,
    main_id: FileId | None = None,
) -> Marker | None:  # fmt: skip
    """Copy the store as the marker names it to ``copy`` (and ``copy``.wal), holding the
    readers lock shared; the marker copied, or None when there is no usable marker or lock, or
    the main file changed meanwhile (the caller copies another way). ``main_from``: a copy of
    the main file taken earlier while it had the identity ``main_id``, hard-linked instead of
    copied when the main file still has it (a console's next query during a live run)."""
    with readers_lock(db, exclusive=False, wait_s=wait_s) as lock:
        if lock is not Lock.HELD:
            return None
        marker = read_marker(db)
        if marker is None or file_id(db) != marker.main or not log_holds(db, marker):
            return None
        Path(f"{copy}.wal").unlink(missing_ok=True)
        copy.unlink(missing_ok=True)
        linked = False
        if main_from is not None and main_id == marker.main:
            with contextlib.suppress(OSError):
                os.link(main_from, copy)
                linked = True
        if not linked:
            copy_one(db, copy, None)
        if marker.wal_len:
            copy_one(wal_path(db), Path(f"{copy}.wal"), marker.wal_len)
            if os.path.getsize(f"{copy}.wal") != marker.wal_len:  # the log was cut short
                return None
        # our checkpoints wait for the lock; anything else that rewrote the file shows here
        if file_id(db) != marker.main or not log_holds(db, marker):
            return None
        return marker


def log_holds(db: Path, marker: Marker) -> bool:
    """The log is still the one the marker names, at least as long."""
    if not marker.wal_len:
        return True
    wal = file_id(wal_path(db))
    return wal is not None and wal[0] == marker.wal_ino and wal[1] >= marker.wal_len
