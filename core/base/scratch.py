"""ngb's scratch folders in the temp dir, and the removal of those a killed process left.

A process that is killed (``kill -9``, an OOM kill, a trial past its timeout, the console's
terminal closed) runs none of its clean-up, so its ``TemporaryDirectory`` stays in ``/tmp``:
on 2026-11-29 this machine held 265 ``ngb-trial-*`` and 47 ``ngb-query-*`` folders, and a
``ngb-query-*`` folder holds a whole copy of the results store (issue 31: a store of 1 GB).

So every scratch folder's name says which process owns it: ``ngb-<kind>-<owner>-<random>``,
the owner being the pid namespace, the pid and the process's start time (``/proc``): a pid that
was reused names another process, whose start time differs. The first scratch folder a process
makes removes the folders whose owner is gone (``sweep_stale``): only in this temp dir, only
this user's, only owners in this pid namespace (another container's pids mean nothing here), and
never where ``/proc`` cannot tell (then nothing is removed).

Stdlib only (the device agent bundle carries ``ngb.core``).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import threading
import weakref
from pathlib import Path

#: ``ngb-<kind>-n<pid namespace inode>p<pid>s<start time>-<random>``
_NAME = re.compile(r"^ngb-(?P<kind>[a-z]+)-n(?P<ns>\d+)p(?P<pid>\d+)s(?P<start>\d+)-")
_swept = False
_tags: dict[int, str | None] = {}  # owner_tag by pid
_sweep_guard = threading.Lock()
#: this process's scratch folders still open, for ``remove_own`` (a process that ends with
#: ``os._exit`` runs no finalizer); each with the pid that made it, as a forked child inherits them
_open: weakref.WeakKeyDictionary[tempfile.TemporaryDirectory[str], int] = (
    weakref.WeakKeyDictionary()
)


def _namespace() -> int | None:
    """This process's pid namespace; None where ``/proc`` cannot say, or is another namespace's
    (a host's ``/proc`` in a container: its pids are not this process's pids)."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, ``/proc/<pid>/stat`` field 22); None
    when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) may hold spaces and parentheses: fields 3.. follow the last ")"
    return int(text.rsplit(")", 1)[1].split()[19])


def owner_tag() -> str | None:
    """This process as scratch names carry it; None where ``/proc`` cannot say (not Linux).
    Read once per process (a forked child is another process: keyed by pid)."""
    pid = os.getpid()
    if pid not in _tags:
        _tags[pid] = _read_owner_tag(pid)
    return _tags[pid]


def _read_owner_tag(pid: int) -> str | None:
    namespace = _namespace()
    if namespace is None:
        return None
    try:
        start = _start_time(pid)
    except (OSError, ValueError, IndexError):
        return None
    return None if start is None else f"n{namespace}p{pid}s{start}"


def scratch_dir(kind: str) -> tempfile.TemporaryDirectory[str]:
    """A ``TemporaryDirectory`` named for this process (``ngb-<kind>-<owner>-...``); the first
    one a process makes removes what dead owners left (``sweep_stale``)."""
    if not re.fullmatch(r"[a-z]+", kind):
        raise ValueError(f"scratch kind must be lower-case letters, not {kind!r}")
    sweep_once()
    tag = owner_tag()
    prefix = f"ngb-{kind}-{tag}-" if tag else f"ngb-{kind}-"
    # a clean-up error (a file still open) must not hide the exception the block raised
    folder = tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True)
    with _sweep_guard:
        _open[folder] = os.getpid()
    return folder


def remove_own() -> None:
    """Remove the scratch folders this process made and still holds: for a process about to
    end with ``os._exit`` (the console), which skips the finalizers that would. Never those a
    forked child inherited: they are its parent's."""
    with _sweep_guard:
        mine = [folder for folder, pid in _open.items() if pid == os.getpid()]
    for folder in mine:
        folder.cleanup()


def sweep_once() -> None:
    """``sweep_stale`` on the first call in this process, a no-op after it."""
    global _swept
    with _sweep_guard:
        if _swept:
            return
        _swept = True
    sweep_stale()


def sweep_stale(folder: Path | None = None) -> list[Path]:
    """Remove the scratch folders in ``folder`` (the temp dir) whose owning process is gone;
    returns what it removed. Never raises: a folder it cannot read or remove stays."""
    namespace = _namespace()
    if namespace is None:
        return []
    where = Path(folder or tempfile.gettempdir())
    removed = []
    try:
        names = os.listdir(where)
    except OSError:
        return []
    for name in names:
        match = _NAME.match(name)
        if match is None or int(match["ns"]) != namespace:
            continue
        path = where / name
        try:
            info = path.lstat()  # a symlink is not followed: only a real folder goes
            if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
                continue
            if _start_time(int(match["pid"])) == int(match["start"]):
                continue  # its owner still runs
        except (OSError, ValueError, IndexError):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed
