"""A trial's provenance (``ngb.core.trial.provenance``) as store rows: columns per trial, lists
once.

The device sends the whole package list with every trial (``extra["provenance"]``); here the list
leaves the trial's ``extra`` and goes to the ``environments`` table once per hash, and the trial
keeps the hash (``env_hash``), so two trials' environments are compared by one string and
diffed, line by line, only when they differ. The git state of a user's model code is read here,
on the workstation, where the checkout is (the artifact's ``local`` path); the artifact's sha256
in the spec already says whether the code itself changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ngb.core.records.types import TrialResult
from ngb.core.trial.provenance import git_state

if TYPE_CHECKING:
    import duckdb


def _provenance(result: TrialResult) -> dict[str, object]:
    found = result.extra.get("provenance") if result.extra else None
    return dict(found) if isinstance(found, Mapping) else {}


def take_environments(results: Iterable[TrialResult]) -> dict[str, list[str]]:
    """``{env_hash: packages}`` of the results, each list removed from its trial's ``extra``."""
    out: dict[str, list[str]] = {}
    for result in results:
        found = _provenance(result)
        listed = found.pop("packages", None)
        sha = found.get("packages_sha")
        if isinstance(sha, str) and isinstance(listed, list):
            out.setdefault(sha, [str(line) for line in listed])
        if found or listed is not None:
            result.extra["provenance"] = found
    return out


def insert_environments(conn: duckdb.DuckDBPyConnection, envs: Mapping[str, list[str]]) -> int:
    """Store the package lists not stored yet (inside the caller's transaction)."""
    if not envs:
        return 0
    known = {
        row[0]
        for row in conn.execute(
            "SELECT env_hash FROM environments WHERE list_contains(?, env_hash)", [list(envs)]
        ).fetchall()
    }
    fresh = [(sha, json.dumps(lines)) for sha, lines in envs.items() if sha not in known]
    if fresh:
        conn.executemany(
            "INSERT INTO environments VALUES (?, ?, current_timestamp::TIMESTAMP)", fresh
        )
    return len(fresh)


def _model_git(spec: Mapping[str, object]) -> tuple[str | None, bool | None]:
    source = spec.get("source")
    artifacts = source.get("artifacts") if isinstance(source, Mapping) else None
    for artifact in artifacts if isinstance(artifacts, list) else ():
        local = artifact.get("local") if isinstance(artifact, Mapping) else None
        if isinstance(local, str) and local:
            state = git_state(local)
            if state is not None:
                return state["commit"], state["dirty"]
    return None, None


def trial_columns(result: TrialResult) -> dict[str, object]:
    """The provenance columns of a ``trials`` row (``schema._TRIAL_COLUMNS_V6``)."""
    found = _provenance(result)
    sha, kernel, box = found.get("packages_sha"), found.get("kernel"), found.get("container")
    image = None
    if isinstance(box, Mapping):
        image = " ".join(str(v) for v in (box.get("runtime"), box.get("image")) if v)
    commit, dirty = _model_git(result.spec or {})
    return {
        "env_hash": sha if isinstance(sha, str) else None,
        "kernel": kernel if isinstance(kernel, str) else None,
        "container_image": image or None,
        "model_git_commit": commit,
        "model_git_dirty": dirty,
    }
