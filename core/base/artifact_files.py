"""Content-addressed files that travel to a device: users' model files and code folders, and
the labelled data of an accuracy pass.

A file's sha256 is the hash of its bytes; a folder's is the sha256 of ``"<relative posix
path>\\0<file sha256>\\n"`` lines over ``folder_files`` (sorted: a package whole, any other folder
as its ``.py`` files and packages; caches, VCS, hidden and ngb's own files such as a results
store left out); a model file with external data files, the same lines over the model and its
data files (``bundle_sha256``). On a device an artifact lives at
``<cache_dir>/artifacts/<sha256>/<name>`` (``artifact_dir``); ``ngb.devices`` uploads it there
once and checks the hash with ``sha256_of``. On the workstation the recorded local path is used
when its hash still matches (``locate``). ``ngb.core.models.model_sources`` re-exports all of it; it
lives apart so that ``ngb.core.records.types`` (an accuracy pass's data) can name ``Artifact``
without importing the model sources, which import ``types``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ngb.core.base.errors import NgbError
from ngb.core.base.safe_files import shorten

ARTIFACTS_SUBDIR = "artifacts"
SKIP_NAMES = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"})
_SKIP_SUFFIXES = (".pyc", ".pyo")
# ngb's own files wherever the operator keeps them (a results store beside the model, its WAL,
# a live run's marker and readers lock (sweeps/store/wal_marker.py),
# an export's temporary file): they change while a run measures the model and never travel
NGB_FILE_SUFFIXES = (".duckdb", ".duckdb.wal", ".wal", ".tmp", ".part", ".ngb-wal", ".ngb-readers")


def _travels(name: str) -> bool:
    """A file or folder name that can travel at all: no cache, VCS, hidden or ngb file."""
    return (
        name not in SKIP_NAMES
        and not name.startswith(".")
        and not name.endswith(_SKIP_SUFFIXES + NGB_FILE_SUFFIXES)
    )


def folder_files(folder: Path) -> Iterator[Path]:
    """The files of a code folder that travel with it and that its hash covers, sorted.

    A package (a folder with ``__init__.py``) travels whole: its modules and its data files. Any
    other folder (a ``file.py``'s own folder, a ``code =`` folder) travels as what Python imports
    from it: its ``.py`` files and its package sub-folders (each whole). So the other files a
    project keeps beside a model -- a results store, notebooks, data, logs, a virtualenv -- are
    neither hashed nor shipped, and writing them during a run does not change the model. The rule
    is idempotent: the shipped copy hashes to the same address on the device.
    """
    whole_root = (folder / "__init__.py").is_file()
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        whole = whole_root or here != folder  # below the top, only packages were entered
        dirs[:] = sorted(
            d for d in dirs if _travels(d) and (whole or (here / d / "__init__.py").is_file())
        )
        for name in sorted(files):
            if _travels(name) and (whole or name.endswith(".py")):
                yield here / name


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


_HASHES: dict[tuple[str, int, int], str] = {}
# address -> {relative name: file hash} of the folders and bundles hashed here, so a change can
# be named file by file (``changed_since``)
_LISTINGS: dict[str, dict[str, str]] = {}


def _listing_sha256(listing: Mapping[str, str]) -> str:
    lines = [f"{name}\0{listing[name]}\n" for name in sorted(listing)]
    digest = hashlib.sha256("".join(lines).encode()).hexdigest()
    _LISTINGS[digest] = dict(listing)
    return digest


def sha256_of(path: Path | str) -> str:
    """Content hash of a file or a code folder (see the module docstring for the folder form)."""
    path = Path(path)
    if path.is_file():
        stat = path.stat()
        memo = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        if memo not in _HASHES:
            _HASHES[memo] = _file_sha256(path)
        return _HASHES[memo]
    if path.is_dir():
        return _listing_sha256(
            {f.relative_to(path).as_posix(): sha256_of(f) for f in folder_files(path)}
        )
    raise NgbError(f"not found: {path}")


def bundle_sha256(path: Path, data_files: Sequence[str]) -> str:
    """A model file with the data files beside it that it reads (an ONNX model's external
    weights): the folder form over those names; without data files, the file's own hash."""
    if not data_files:
        return sha256_of(path)
    names = {path.name, *data_files}
    return _listing_sha256({name: sha256_of(path.parent / name) for name in names})


def changed_since(path: Path, expected: str, data_files: Sequence[str] = ()) -> str:
    """One line saying that ``path`` no longer has the hash ``expected``, naming the files that
    changed when the loaded version was hashed in this process."""
    before = _LISTINGS.get(expected)
    detail = ""
    if before is not None:
        try:
            now_hash = bundle_sha256(path, data_files) if path.is_file() else sha256_of(path)
        except (OSError, NgbError):
            now_hash = ""
        after = _LISTINGS.get(now_hash, {})
        edited = sorted(n for n in before if n in after and after[n] != before[n])
        added = sorted(set(after) - set(before))
        gone = sorted(set(before) - set(after))
        parts = [
            f"{label} {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
            for label, names in (("edited", edited), ("new", added), ("removed", gone))
            if names
        ]
        detail = f" ({'; '.join(parts)})" if parts else ""
    return (
        f"{shorten(path)} changed since the sweep was loaded{detail} (sha256 {expected[:12]} "
        "expected); load the sweep again to measure the new version"
    )


@dataclass(frozen=True)
class Artifact:
    """A file or folder a model needs on the device; ``local`` is where the workstation has it.

    ``data_files``: files beside a model file that it reads (an ONNX model's external weights,
    ``model.onnx.data``); they travel into the same ``<sha256>/`` folder, and ``sha256`` is then
    the bundle's hash (``bundle_sha256``). Written only when there are some, so the keys of
    trials without them stay as they were.
    """

    name: str
    sha256: str
    local: str
    role: str = "model"  # model (the .onnx/.pt2 file) | package (parent on sys.path) | folder
    data_files: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "sha256": self.sha256,
            "local": self.local,
            "role": self.role,
        }
        if self.data_files:
            out["data_files"] = list(self.data_files)
        return out

    @classmethod
    # Any: an artifact read back as JSON (a trial's spec); the loader refuses what does not fit
    def from_dict(cls, data: Mapping[str, Any]) -> Artifact:
        extra = data.get("data_files") or ()
        return cls(
            name=str(data["name"]),
            sha256=str(data["sha256"]),
            local=str(data.get("local", "")),
            role=str(data.get("role", "model")),
            data_files=tuple(str(n) for n in extra) if isinstance(extra, list | tuple) else (),
        )

    @classmethod
    def of(cls, path: Path, role: str, data_files: Sequence[str] = ()) -> Artifact:
        path = path.resolve()
        digest = bundle_sha256(path, data_files) if data_files else sha256_of(path)
        return cls(path.name, digest, str(path), role, tuple(sorted(data_files)))

    def content_sha256(self, path: Path) -> str:
        """The address of what is at ``path`` (with its data files beside it)."""
        return bundle_sha256(path, self.data_files) if self.data_files else sha256_of(path)

    def complete_at(self, path: Path) -> bool:
        """The artifact and each of its data files exist at ``path``."""
        return path.exists() and all((path.parent / n).is_file() for n in self.data_files)


def artifact_dir(cache_dir: Path | str, sha256: str) -> Path:
    """Where a device keeps an artifact: ``<cache_dir>/artifacts/<sha256>/`` holds ``<name>``
    (and its data files)."""
    return Path(cache_dir) / ARTIFACTS_SUBDIR / sha256


def locate(artifact: Artifact, cache_dir: Path | str | None) -> Path:
    """The artifact's path here: the device cache first, else the recorded local path if its
    content still has the recorded hash. One clear line when neither holds."""
    if cache_dir is not None:
        shipped = artifact_dir(cache_dir, artifact.sha256) / artifact.name
        if artifact.complete_at(shipped):
            return shipped
    local = Path(artifact.local)
    if not artifact.complete_at(local):
        missing = next(
            (
                p
                for p in (local, *(local.parent / n for n in artifact.data_files))
                if not p.exists()
            ),
            local,
        )
        raise NgbError(
            f"model file {artifact.name} (sha256 {artifact.sha256[:12]}) is not on this device "
            f"and {missing} does not exist here"
        )
    if artifact.content_sha256(local) != artifact.sha256:
        raise NgbError(changed_since(local, artifact.sha256, artifact.data_files))
    return local
