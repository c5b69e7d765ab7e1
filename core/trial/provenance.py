"""Provenance complete enough to explain a change: the environment a trial ran in, hashed.

Why: a slowdown between two runs is explained by what changed between them, and the usual
culprits are not all in ``versions`` (the benchmark's own libraries, ``ngb.core.trial.versions``): a
transitive dependency (an OpenMP runtime, ``mkl``, ``tbb``), the kernel, a container image
rebuilt under the same tag, or the user's own model code. ``read()`` records, per trial:

- ``packages``: every installed distribution as ``name==version``, sorted (diffable line by
  line; ``ngb.core.base.installed``, cached on disk), and ``packages_sha``, the first 16 hex of
  its sha256. The store keeps the hash per trial and the list once per hash (``environments``
  table), so a sweep of 1000 trials stores it once;
- ``kernel``: ``platform.release()`` (the governor, boost and clocks are ``device_state``);
- ``container``: whether this is a container, and the image (digest where the runtime tells it:
  podman's ``/run/.containerenv``, or ``NGB_IMAGE_DIGEST`` / ``CONTAINER_IMAGE`` set by whoever
  starts it; a Docker container does not see its own image digest from inside);
- the git commit and dirty state of a user's model code, read on the workstation at ingest
  (``git_state``), where the checkout lives (the device only has the shipped copy).

Stdlib only (it ships in the agent). Reads are best-effort: what cannot be read is None.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import TypedDict

from ngb.core.base.installed import packages


class Container(TypedDict):
    runtime: str  # docker | podman | kubernetes | container (cgroup says so, runtime unknown)
    image: str | None  # name or digest, where the runtime or the environment tells it


class Provenance(TypedDict):
    packages: list[str]
    packages_sha: str
    kernel: str
    container: Container | None


class GitState(TypedDict):
    commit: str
    dirty: bool


def packages_sha(lines: tuple[str, ...] | list[str]) -> str:
    """The environment's identity: sha256 over the sorted lines, 16 hex characters."""
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:16]


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return path.read_text()
    return None


def container(root: Path = Path("/")) -> Container | None:
    """The container this process runs in, or None on a bare machine (see module)."""
    image = os.environ.get("NGB_IMAGE_DIGEST") or os.environ.get("CONTAINER_IMAGE")
    containerenv = _read(root / "run/.containerenv")
    if containerenv is not None:  # podman writes image="..." and imageid="..." here
        fields = dict(line.split("=", 1) for line in containerenv.splitlines() if "=" in line)
        found = fields.get("imageid") or fields.get("image")
        return {"runtime": "podman", "image": image or (found.strip('"') if found else None)}
    if (root / ".dockerenv").exists():
        return {"runtime": "docker", "image": image}
    cgroup = _read(root / "proc/1/cgroup") or ""
    for marker, runtime in (("kubepods", "kubernetes"), ("docker", "docker"), ("libpod", "podman")):
        if marker in cgroup:
            return {"runtime": runtime, "image": image}
    named = os.environ.get("container")  # noqa: SIM112 - systemd's lowercase convention
    if named:  # lxc, systemd-nspawn, podman set it
        return {"runtime": named, "image": image}
    return None


def read() -> Provenance:
    """This process's environment (see module)."""
    lines = packages()
    return {
        "packages": list(lines),
        "packages_sha": packages_sha(lines),
        "kernel": platform.release(),
        "container": container(),
    }


# git state of a user's code, cached briefly: an ingest of 100 trials asks for one folder 100 times
_GIT_CACHE: dict[str, tuple[float, GitState | None]] = {}
_GIT_TTL_S = 10.0


def git_state(path: str | Path) -> GitState | None:
    """The commit and dirty state of the git checkout holding ``path`` (None: not in one)."""
    folder = Path(path)
    folder = folder if folder.is_dir() else folder.parent
    cached = _GIT_CACHE.get(str(folder))
    if cached is not None and time.monotonic() - cached[0] < _GIT_TTL_S:
        return cached[1]
    state = _git_state(folder)
    _GIT_CACHE[str(folder)] = (time.monotonic(), state)
    return state


def _git_state(folder: Path) -> GitState | None:
    git = shutil.which("git")
    if git is None or not folder.is_dir():
        return None

    def run(*args: str) -> str | None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [git, "-C", str(folder), *args],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            if done.returncode == 0:
                return done.stdout.strip()
        return None

    commit = run("rev-parse", "HEAD")
    if not commit:
        return None
    # only the model's own folder counts: an edit elsewhere in the repository changes nothing
    status = run("status", "--porcelain", "--untracked-files=no", "--", ".")
    return {"commit": commit, "dirty": bool(status)}


def diff_packages(old: list[str], new: list[str]) -> list[str]:
    """``name old -> new`` for changed versions, ``+name==v`` / ``-name==v`` for the rest."""

    def split(lines: list[str]) -> dict[str, str]:
        return dict(line.partition("==")[::2] for line in lines)

    a, b = split(old), split(new)
    out = []
    for name in sorted(set(a) | set(b)):
        if name in a and name in b:
            if a[name] != b[name]:
                out.append(f"{name} {a[name]} -> {b[name]}")
        elif name in b:
            out.append(f"+{name}=={b[name]}")
        else:
            out.append(f"-{name}=={a[name]}")
    return out
