"""Reading and writing the operator's files without destroying or hanging on anything.

- ``check_readable`` / ``read_text`` / ``read_bytes``: only regular files are read. The kind is
  looked up first and the file is opened with ``O_NONBLOCK`` and checked again on the open
  descriptor, so a FIFO put where a config file should be is refused in one line instead of
  blocking ``open()`` forever (and a file swapped for one in between is caught too).
- ``write_atomic``: output replaces only regular files. A device node (``/dev/full``,
  ``/dev/null``), FIFO, socket or directory is refused whatever ``--force`` says, because
  "replacing" one means deleting it. The new content is written beside the target in the same
  folder, fsynced and renamed over it, so a reader sees the old file or the new one; a full disk
  (``ENOSPC``) is an error, never a silently short file. A symlinked target is written through:
  the link stays, the file it points to is replaced (``devices.toml`` kept in a dotfiles repo).
- ``refuse_protected``: outputs must not land on ngb's own files (inventory, known hosts, the
  results store and its WAL) unless writing them is the command's job; callers pass the list.

Stdlib only (the device agent bundle carries ``ngb.core``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ngb.core.base.errors import NgbError, first_line

MAX_SHOWN = 120  # characters of a value echoed in a message

Writer = Callable[[Path], None]


def shorten(value: object, limit: int = MAX_SHOWN) -> str:
    """``str(value)`` cut to ``limit`` characters with an ellipsis (a 10,000-character name
    echoed in full buries the message)."""
    text = str(value)
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def kind_name(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words, for the error line."""
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def check_readable(path: str | os.PathLike[str], what: str = "") -> None:
    """Raise a one-line NgbError unless ``path`` (after symlinks) is a regular file.

    A missing file raises ``FileNotFoundError`` as usual: callers decide what absence means.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NgbError(_not_regular(path, st.st_mode, what, "read"))


def _not_regular(path: str | os.PathLike[str], mode: int, what: str, verb: str) -> str:
    label = f"{what} " if what else ""
    shown = shorten(os.fspath(path))
    return f"cannot {verb} {label}{shown}: it is a {kind_name(mode)}, not a regular file"


def read_bytes(path: str | os.PathLike[str], what: str = "") -> bytes:
    """The bytes of a regular file; never blocks on a FIFO or device (see module docstring)."""
    check_readable(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped between the stat and the open
            raise NgbError(_not_regular(path, mode, what, "read"))
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], what: str = "", encoding: str = "utf-8") -> str:
    """The text of a regular file (``UnicodeDecodeError`` passes to the caller)."""
    return read_bytes(path, what).decode(encoding)


def resolve_target(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` should replace: symlinks followed (a dangling link gives
    where it points), so the link itself survives the rename."""
    p = Path(path)
    if p.is_symlink():
        return Path(os.path.realpath(p))
    return p


def check_writable(path: str | os.PathLike[str], what: str = "") -> Path:
    """The real target of a write to ``path``; refuses anything existing that is not a regular
    file (device, FIFO, socket, directory) whatever an overwrite flag says."""
    target = resolve_target(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(st.st_mode):
        raise NgbError(_not_regular(path, st.st_mode, what, "write"))
    return target


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | str | Writer,
    *,
    what: str = "",
    overwrite: bool = True,
    make_parent: bool = False,
) -> Path:
    """Replace ``path`` with ``data`` (bytes, text, or a callable writing to the path it gets).

    Written beside the target, fsynced, renamed over it; the folder is fsynced too. Returns the
    file actually written (the link's target for a symlink). Errors are one-line NgbErrors.
    """
    target = check_writable(path, what)
    shown = shorten(os.fspath(path))
    if not overwrite and target.exists():
        raise NgbError(f"{shown} exists already; give --force to replace it")
    folder = target.parent
    if make_parent:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise NgbError(f"cannot write {shown}: {_reason(exc)}") from None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".part", dir=folder)
    except OSError as exc:
        raise NgbError(f"cannot write {shown}: {_reason(exc)}") from None
    tmp = Path(tmp_name)
    try:
        if callable(data):
            os.close(fd)
            fd = -1
            data(tmp)
            fd = os.open(tmp, os.O_RDONLY)
        else:
            raw = data.encode("utf-8") if isinstance(data, str) else data
            _write_all(fd, raw)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        try:
            os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        except FileNotFoundError:
            os.chmod(tmp, 0o666 & ~_umask())
        check_writable(target, what)  # something may have appeared there meanwhile
        if not overwrite and target.exists():
            raise NgbError(f"{shown} exists already; give --force to replace it")
        os.replace(tmp, target)
        _fsync_dir(folder)
    except NgbError:
        raise
    except Exception as exc:  # OSError, or a library's own error from a writer callable
        raise NgbError(f"cannot write {shown}: {_reason(exc)}") from None
    finally:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
    return target


def _write_all(fd: int, raw: bytes) -> None:
    """os.write until everything is written; a write that makes no progress is ENOSPC."""
    view = memoryview(raw)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "no space left on device (nothing was replaced)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return first_line(exc)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename is done
    finally:
        os.close(dfd)


def is_own_folder(folder: Path) -> bool:
    """Whether ``folder`` is a real folder of this user's that no one else may write: what a
    cache in the shared temp dir must be before it is read or written there, since another user
    could have made the folder first or put a link to elsewhere in its place (a planted entry
    would then pass for this user's own)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o022


def read_regular_bytes(path: Path) -> bytes | None:
    """A regular file's bytes, not through a link; None for anything else there or nothing (a
    FIFO would block a reader, a link may point anywhere, a folder cannot be read): what a cache
    in the shared temp dir reads."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # checked first: fdopen raises on a folder
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def prune_newest(
    folder: Path,
    keep: int,
    kept: Callable[[str], object],
    partial: Callable[[str], object],
    stale_s: float,
) -> None:
    """In a cache folder: only the ``keep`` newest regular files whose names ``kept`` accepts
    stay, and no unfinished write (a name ``partial`` accepts) older than ``stale_s``. Nothing
    else there is touched; a file gone meanwhile is no error."""
    now = time.time()
    done: list[tuple[float, str]] = []
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                mtime = entry.stat(follow_symlinks=False).st_mtime
                if kept(entry.name) and entry.is_file(follow_symlinks=False):
                    done.append((mtime, entry.path))
                elif partial(entry.name) and now - mtime > stale_s:
                    os.unlink(entry.path)
    for _, path in sorted(done, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            os.unlink(path)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file (by inode when both exist, else by resolved path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_protected(
    path: str | os.PathLike[str], protected: Mapping[str, str | os.PathLike[str]]
) -> None:
    """Refuse an output that would land on one of ngb's own files (label -> path)."""
    for label, own in protected.items():
        if same_file(path, own):
            raise NgbError(f"refusing to write over ngb's {label} ({shorten(os.fspath(path))})")
