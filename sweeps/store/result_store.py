"""The seam between a run and the results database: what the orchestrator needs from a store.

``ResultStore`` names the calls the orchestrator makes (``ngb.sweeps.store.database.Store`` is the
one implementation; tests may pass another). ``IngestBatch`` is what one flush of a live run writes
in one transaction; *when* to flush is decided in one place only, the orchestrator's
``RunWriter`` (``ngb.sweeps.run.writer``).

A write fails in one of three ways, and each is handled differently by the writer:

- ``DatabaseBusy`` (from ``ngb.sweeps.store.errors``): another process holds the file. Normal
  while someone queries; wait, keep everything buffered.
- ``RowRejected``: the data cannot be stored as it is (a value too large for its column...). It
  will never succeed, so retrying is pointless: the writer isolates the result and stores it as
  a failed trial with this error instead.
- ``StoreUnwritable``: the database cannot be written at all (read-only file or folder, a
  missing table, a foreign file). The run stops following its devices and says so in one line;
  the agents keep their checkpoints, so ``ngb attach`` resumes once the store is fixed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from ngb.core.records.types import TrialResult
from ngb.sweeps.rows import Event, StoreRow
from ngb.sweeps.store.errors import DatabaseBusy, RowRejected, StoreUnwritable

__all__ = ["DatabaseBusy", "IngestBatch", "ResultStore", "RowRejected", "StoreUnwritable"]

ErrorRow = tuple[str | None, str | None, str | None, float, str, str]


@dataclass
class IngestBatch:
    """Results, CPU samples, tuning progress and errors of any runs/devices, written together."""

    results: list[tuple[str, str, TrialResult]] = field(default_factory=list)
    cpu: list[tuple[str, str, Event]] = field(default_factory=list)
    tuning: list[tuple[str, str, str, Event]] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.results) + len(self.cpu) + len(self.tuning) + len(self.errors)

    def add_result(self, run_id: str, device: str, result: TrialResult) -> None:
        self.results.append((run_id, device, result))

    def add_cpu_sample(self, run_id: str, device: str, event: Event) -> None:
        self.cpu.append((run_id, device, event))

    def add_tuning(self, run_id: str, device: str, key: str, event: Event) -> None:
        self.tuning.append((run_id, device, key, event))

    def add_error(
        self, run_id: str | None, device: str | None, key: str | None, kind: str, message: str
    ) -> None:
        self.errors.append((run_id, device, key, time.time(), kind, message))


class ResultStore(Protocol):
    """What the orchestrator calls on the results database (blocking calls: run in a thread)."""

    def batch(self) -> AbstractContextManager[None]:
        """Several calls sharing one open of the database."""
        ...

    def create_run(
        self,
        run_id: str,
        sweep_name: str,
        sweep_toml: str,
        devices: Sequence[str],
        n_trials: int,
        meta: Event | None = None,
    ) -> bool: ...

    def set_run_status(self, run_id: str, status: str) -> None: ...

    def upsert_run_device(self, run_id: str, device: str, **fields: object) -> None: ...

    def upsert_run_devices(self, rows: Sequence[tuple[str, str, Mapping[str, object]]]) -> None:
        """``upsert_run_device`` for many ``(run_id, device, fields)`` at once."""
        ...

    def write_batch(self, batch: IngestBatch) -> int:
        """Write it in one transaction; returns the number of new trials stored."""
        ...

    def runs(self) -> list[StoreRow]: ...

    def run_devices(self, run_id: str | None = None) -> list[StoreRow]: ...

    def trials(
        self,
        run_id: str | None = None,
        device: str | None = None,
        *,
        status: str | None = None,
        model: str | None = None,
        compiler: str | None = None,
        key: str | None = None,
        limit: int | None = None,
    ) -> list[StoreRow]: ...

    def served_trials(self, run_id: str) -> list[StoreRow]:
        """A run's finished serving trials, as ``trials`` rows (they have none of their own)."""
        ...
