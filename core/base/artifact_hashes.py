"""The device side of shipped model artifacts: verify each one's hash before a trial uses it.

The workstation uploads a user's model files into the device's cache
(``<cache_dir>/artifacts/<sha256>/<name>``, see ``ngb.devices.artifacts``); the model loader
finds them there (``ngb.core.models.model_sources.locate``). Before a trial runs, the agent calls
``verify_shipped``: every artifact of the trial's source that is in the cache must still hash to
its address. One that does not (a disk fault, a hand edit, a half-copied folder) fails the trial
with one line naming it (an ONNX model with external data is checked with its data files, as one
bundle); the entry is removed, so the next run uploads it again, and the agent
remembers the verdict for the rest of the run so later trials fail the same way without hashing
again. An artifact that is not in the cache is left to the loader, which says so in one line.

Hashing is memoised by (path, size, mtime) in ``model_sources.sha256_of``, so a long run does not
re-read a large ONNX file for every trial.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, MutableMapping
from pathlib import Path

MISMATCH = "hash mismatch on the device"


def verify_shipped(
    source: Mapping[str, object] | None,
    cache_dir: Path | str | None,
    verdicts: MutableMapping[str, str] | None = None,
) -> str | None:
    """None when every cached artifact of ``source`` has its hash; else the one-line reason.

    ``verdicts`` (hash -> reason) carries failures across the trials of one run.
    """
    if not source or cache_dir is None:
        return None
    from ngb.core.base.artifact_files import Artifact, artifact_dir

    verdicts = {} if verdicts is None else verdicts
    listed = source.get("artifacts") or ()
    # a malformed list is left to the model loader, which refuses it in one line
    for art in listed if isinstance(listed, list | tuple) else ():
        if not isinstance(art, Mapping) or "name" not in art or "sha256" not in art:
            continue
        artifact = Artifact.from_dict(art)
        sha, name = artifact.sha256, artifact.name
        if sha in verdicts:
            return verdicts[sha]
        entry = artifact_dir(cache_dir, sha)
        path = entry / name
        if not artifact.complete_at(path):
            continue
        try:
            actual = artifact.content_sha256(path)
        except OSError as exc:
            actual = f"unreadable ({exc.strerror or exc})"
        if actual != sha:
            shutil.rmtree(entry, ignore_errors=True)
            verdicts[sha] = (
                f"{MISMATCH}: {name} is not what was uploaded (expected sha256 {sha[:12]}, "
                f"found {actual[:12]}); removed from the device cache, the next run uploads it "
                "again"
            )
            return verdicts[sha]
    return None
