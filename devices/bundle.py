"""The one-file agent bundle (``agent-<hash>.pyz``) that the workstation copies to a device.

It holds the ``ngb.core`` package and ``ngb.devices.{__init__,agent,probe}`` exactly as installed
here (found through the import system, so it works from a wheel as well as from a checkout), plus
a ``__main__`` that runs the agent. A device needs only Python with numpy and psutil (and the
compiler libraries it is asked to run): ``python3 agent.pyz run ...``.

The archive is deterministic (sorted entries, fixed timestamps and modes), and its name carries a
hash of its contents: rebuilding unchanged sources is a no-op, and the orchestrator can tell
whether a device already has this exact agent by its file name.

Bytecode rides beside the sources (``x.pyc`` next to ``x.py``, which ``zipimport`` tries first):
``zipimport`` never writes a cache, so without it every agent, every trial process and every
fresh worker interpreter compiled the ~60 modules it imports from source again (~0.1-0.3 s of
CPU each on the 2-core VM; 128 loopback devices pay that on the same two cores). The ``.pyc`` is
for this interpreter's version; a device on another Python reads the bad magic number and falls
back to the source beside it. It is hash-based and unchecked (no timestamp to disagree with the
archive's fixed dates, nothing read twice) and marshalled at version 2, the last format without
back-references, whose bytes do not depend on which objects the building process happened to
share (version 4's did: two builds gave two archive names).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import marshal
import os
import tempfile
import zipfile
import zlib
from pathlib import Path

from ngb.core.base.safe_files import is_own_folder, prune_newest, read_regular_bytes

#: modules of ngb.devices that go to the device (the rest needs the workstation's libraries)
DEVICE_MODULES = ("__init__.py", "agent.py", "agent_server.py", "probe.py")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
# The host's agent server's two commands (ngb.devices.agent_server) go there first: ``spawn``
# runs before every agent start and must not import the agent (~0.2 s).
_MAIN = (
    '"""Entry point of the ngb agent bundle."""\n'
    "import sys\n\n"
    'if sys.argv[1:2] == ["spawn"]:\n'
    "    from ngb.devices.agent_server import spawn_main\n\n"
    "    sys.exit(spawn_main(sys.argv[2:]))\n"
    'if sys.argv[1:2] == ["--agent-server"]:\n'
    "    from ngb.devices.agent_server import serve_main\n\n"
    "    sys.exit(serve_main(sys.argv[2:]))\n"
    "from ngb.devices.agent import main\n\n"
    "sys.exit(main())\n"
)
_NAMESPACE_INIT = '"""ngb, as shipped to a device: ngb.core and the agent only."""\n'
#: marshal format of the bundled bytecode: the newest without references (see the docstring)
_MARSHAL_VERSION = 2
#: archives this process built, by content hash: another cache folder (another NGB_HOME: the
#: console and a test suite open several) gets the same bytes without compiling ~100 modules
#: again (0.28 CPU-s for the first folder, 0.006 for the next on the 2-core VM). ~1 MB each.
_BUILT: dict[str, bytes] = {}


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot locate the installed package {name}")
    return Path(next(iter(spec.submodule_search_locations)))


def bundle_files(*, bytecode_too: bool = True) -> dict[str, bytes]:
    """Archive path -> contents, for everything that goes into the bundle (the sources alone
    without ``bytecode_too``: what names it)."""
    files: dict[str, bytes] = {
        "__main__.py": _MAIN.encode(),
        "ngb/__init__.py": _NAMESPACE_INIT.encode(),
    }
    core = _package_dir("ngb.core")
    for path in sorted(core.rglob("*.py")):
        rel = path.relative_to(core)
        if "__pycache__" in rel.parts:
            continue
        files[f"ngb/core/{rel.as_posix()}"] = path.read_bytes()
    devices = _package_dir("ngb.devices")
    for name in DEVICE_MODULES:
        files[f"ngb/devices/{name}"] = (devices / name).read_bytes()
    if bytecode_too:
        add_bytecode(files)
    return files


def add_bytecode(files: dict[str, bytes]) -> None:
    """A ``.pyc`` beside every module of ``files`` (not ``__main__``, which runs as a script)."""
    for name, source in list(files.items()):
        if name.endswith(".py") and name != "__main__.py":
            files[name + "c"] = bytecode(name, source)


def bytecode(name: str, source: bytes) -> bytes:
    """An unchecked hash-based ``.pyc`` of ``source`` for this interpreter, the same bytes on
    every build (``_MARSHAL_VERSION``); ``name`` (its path in the archive) is what tracebacks
    show."""
    code = compile(source, name, "exec", dont_inherit=True)
    flags = 0b01  # hash-based, source not checked
    header = importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little")
    return header + importlib.util.source_hash(source) + marshal.dumps(code, _MARSHAL_VERSION)


def content_hash(files: dict[str, bytes]) -> str:
    """The archive's name: its sources and the bytecode's version. The bytecode is a function of
    the two (``bytecode``), so it is compiled only when the archive is missing (~0.15 s a run)."""
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()[:16]


def build_agent_zipapp(dest: Path | str) -> Path:
    """Build (or reuse) ``dest/agent-<hash>.pyz`` and return its path.

    ``dest`` is a directory (created if missing). The file is written to a temporary name and
    renamed into place, so a concurrent reader never sees half an archive.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    files = bundle_files(bytecode_too=False)
    digest = content_hash(files)
    target = dest / f"agent-{digest}.pyz"
    if target.is_file():
        return target
    _write_into(dest, target.name, _archive_bytes(digest, files))
    return target


def _archive_bytes(digest: str, files: dict[str, bytes]) -> bytes:
    """The archive named ``digest``: built by this process before, or by another of this user's
    (``_shared_folder``), or built now and left there for the next."""
    if digest not in _BUILT:
        shared = _shared_folder()
        name = f"agent-{digest}.pyz"
        raw = read_regular_bytes(shared / name) if shared is not None else None
        if raw is None or not _whole_archive(raw):
            raw = _archive(files)
            if shared is not None:
                with contextlib.suppress(OSError):
                    _write_into(shared, name, raw)
                    _prune(shared)
        _BUILT[digest] = raw
    return _BUILT[digest]


def _write_into(folder: Path, name: str, raw: bytes) -> None:
    """``folder/name`` holds ``raw``, executable: written beside it and renamed into place, so a
    concurrent reader never sees half an archive."""
    fd, tmp_name = tempfile.mkstemp(prefix=".agent-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        os.chmod(tmp_name, 0o755)
        os.replace(tmp_name, folder / name)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _shared_folder() -> Path | None:
    """This user's archives in the temp dir, for every process and every ``NGB_HOME`` here: a
    new home (the console's, each test's, a second checkout's) compiled ~100 modules again,
    ~0.23 CPU-s, the test suite about 19 times a run. None where the folder is not this user's
    alone (``is_own_folder``): an archive planted there would run on every device."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"ngb-agent-{uid}"
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
    return folder if is_own_folder(folder) else None


def _whole_archive(raw: bytes) -> bool:
    """Whether ``raw`` is an agent archive whose every member reads back intact (CRC-checked,
    ~10 ms): a copy cut short or damaged on disk is built again rather than shipped to every
    device, where it would fail only when the agent starts."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            return "__main__.py" in zf.namelist() and zf.testzip() is None
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError):
        return False


#: archives kept in the shared folder, the newest (each source edit makes another, ~1 MB)
SHARED_KEPT = 8


def _prune(folder: Path, keep: int = SHARED_KEPT) -> None:
    """Only the ``keep`` newest archives stay; unfinished writes older than an hour go."""
    prune_newest(
        folder, keep, lambda name: name.startswith("agent-") and name.endswith(".pyz"),
        lambda name: name.startswith(".agent-"), stale_s=3600.0,
    )  # fmt: skip


def _archive(files: dict[str, bytes]) -> bytes:
    """The bundle's bytes: a shebang line, then the zip of ``files`` with their bytecode."""
    files = dict(files)
    add_bytecode(files)
    raw = io.BytesIO()
    raw.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, files[name])
    return raw.getvalue()
