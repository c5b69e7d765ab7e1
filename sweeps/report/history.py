"""``ngb history``: every run's result of a point over time, and where its level changed.

A series is one point (``run_points``: the same device, model, compiler, precision, batch ... and
swept settings) across the store's runs, oldest first by when the trial finished; each entry is
the trial's throughput with its stored interval (``derived.throughput``). Change points come from
``changepoints.detect`` over the series, fed each run's relative standard error from its stored
interval (``derived.mean_of``); each is named with what differs between the last run before it
and the first run after it (settings, versions, device state, provenance). The console's History
screen and ``ngb history --figure`` draw the same ``Series``.

An INVALID or disturbed run is always shown, flagged; ``valid_only`` (``--valid-only``) leaves it
out of the search, because one collapsed run can look like a level of its own to a test that
treats every run as a sample of the level (its wide interval already lowers its weight, but a
run disturbed without a wide interval keeps full weight). The search needs ``MIN_SEGMENT`` runs
on each side of a change, and the report says so where a series is shorter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ngb.sweeps.report import derived
from ngb.sweeps.report.changepoint_thresholds import threshold
from ngb.sweeps.report.changepoints import MIN_SEGMENT, ChangePoint, detect
from ngb.sweeps.report.compare import PackageLookup, changes_text
from ngb.sweeps.report.data import Report, Table
from ngb.sweeps.report.derived import Derived
from ngb.sweeps.report.paper import UNCERTAINTY_NOTE, cell
from ngb.sweeps.report.points import (
    AXES,
    Change,
    Point,
    differences,
    label,
    point_of,
    swept_settings,
)
from ngb.sweeps.rows import StoreRow, mapping
from ngb.sweeps.store.database import Store

# what `ngb history` filters on: option name -> trials column
FILTERS = ("device", "model", "compiler", "batch", "precision_asked", "optimisation")


@dataclass(frozen=True)
class Entry:
    run_id: str
    when: str  # the trial's finish time, as stored (UTC)
    row: StoreRow
    throughput: Derived
    left_out: str = ""  # why the change-point search did not use this run ("": it did)

    @property
    def flags(self) -> tuple[str, ...]:
        """The run's own warnings (INVALID, unstable, disturbed)."""
        return derived.result_flags(self.row)

    @property
    def compiler_version(self) -> str:
        versions = mapping(self.row.get("versions"))
        value = versions.get(str(self.row.get("compiler")))
        return str(value) if value else "-"


@dataclass(frozen=True)
class NamedChange:
    """A change point with the run it starts at and what differs there."""

    at: ChangePoint
    run_id: str
    changes: tuple[Change, ...]

    @property
    def percent(self) -> float:
        return 100 * (self.at.ratio - 1)

    def text(self, packages: PackageLookup | None = None) -> str:
        """``from run R: -5.1 % (what differs)``; ``packages`` expands an environment change."""
        why = changes_text(self.changes, packages) or "nothing recorded differs"
        return f"from run {self.run_id}: {self.percent:+.1f} % ({why})"


@dataclass(frozen=True)
class Series:
    point: Point
    entries: list[Entry]
    changes: list[NamedChange]

    @property
    def label(self) -> str:
        return label(self.point)

    @property
    def searched(self) -> int:
        """How many runs the change-point search used."""
        return sum(1 for e in self.entries if not e.left_out)

    def search_note(self) -> str:
        """What the search could do with this series: the runs it needs, the threshold it used,
        the runs it left out."""
        n, need = self.searched, 2 * MIN_SEGMENT
        if n < need:
            text = (f"too few runs to find a change point: {n} searched, {need} needed "
                    f"({MIN_SEGMENT} on each side of a change)")  # fmt: skip
        else:
            text = f"{n} runs searched: a change needs a t above {threshold(n):.2f} at this length"
        out = [e for e in self.entries if e.left_out]
        if out:
            reasons = sorted({e.left_out for e in out})
            text += f"; left out: {len(out)} run(s) ({', '.join(reasons)})"
        return text


def _left_out(row: StoreRow, value: Derived, valid_only: bool) -> str:
    """Why the search skips this run: no value, or (``valid_only``) INVALID or disturbed."""
    if not (math.isfinite(value.value) and value.value > 0):
        return "no value"
    if not valid_only:
        return ""
    reasons = []
    if str(row.get("verdict") or "").upper().startswith("INVALID"):
        reasons.append("INVALID")
    if row.get("disturbed"):
        reasons.append("disturbed")
    return " ".join(reasons)


def _rel_se(row: StoreRow) -> float | None:
    mean = derived.mean_of(row)
    return mean.se / mean.value if mean.known and mean.value > 0 else None


def series_of(
    rows: Iterable[StoreRow],
    *,
    min_effect: float = 0.0,
    swept: frozenset[str] | None = None,
    valid_only: bool = False,
) -> list[Series]:
    """Successful trials -> one series per point, change points detected (see module);
    ``valid_only``: INVALID and disturbed runs are shown but not searched."""
    ok = [r for r in rows if r.get("status") == "ok"]
    swept = swept_settings(ok) if swept is None else swept
    by_point: dict[Point, list[Entry]] = {}
    for row in sorted(ok, key=lambda r: (str(r.get("finished_at") or ""), str(r["run_id"]))):
        value = derived.throughput(row)
        entry = Entry(
            str(row["run_id"]), str(row.get("finished_at") or ""), row, value,
            _left_out(row, value, valid_only),
        )  # fmt: skip
        by_point.setdefault(point_of(row, swept), []).append(entry)
    out = []
    for point, entries in by_point.items():
        usable = [e for e in entries if not e.left_out]
        found = detect(
            [e.throughput.value for e in usable],
            [_rel_se(e.row) for e in usable],
            min_effect=min_effect,
        )
        named = [
            NamedChange(
                c,
                usable[c.index].run_id,
                tuple(differences(usable[c.index - 1].row, usable[c.index].row, swept)),
            )
            for c in found
        ]
        out.append(Series(point, entries, named))
    out.sort(key=lambda s: [str(v) for _, v in s.point])
    return out


def load(store: Store, filters: Mapping[str, object]) -> list[StoreRow]:
    """The successful trials matching ``filters`` (trials columns in ``FILTERS``)."""
    unknown = set(filters) - set(FILTERS)
    if unknown:
        raise ValueError(f"cannot filter on {sorted(unknown)}")
    device, model, compiler = (filters.get(n) for n in ("device", "model", "compiler"))
    rows = store.trials(
        device=str(device) if device is not None else None,
        status="ok",
        model=str(model) if model is not None else None,
        compiler=str(compiler) if compiler is not None else None,
    )
    rest = {
        k: v
        for k, v in filters.items()
        if v is not None and k not in ("device", "model", "compiler")
    }
    return [r for r in rows if all(str(r.get(k)) == str(v) for k, v in rest.items())]


def package_lookup(store: Store) -> PackageLookup:
    """``env_hash -> package list`` from the store's ``environments`` table (cached)."""
    cache: dict[str, list[str] | None] = {}

    def lookup(env_hash: str) -> list[str] | None:
        if env_hash not in cache:
            _, rows = store.select(
                "SELECT packages FROM environments WHERE env_hash = ?", [env_hash]
            )
            listed = json.loads(str(rows[0][0])) if rows and rows[0][0] else None
            cache[env_hash] = [str(x) for x in listed] if isinstance(listed, list) else None
        return cache[env_hash]

    return lookup


def report(series: Sequence[Series], packages: PackageLookup | None = None) -> Report:
    """Each series as a table: run, when, throughput [interval], compiler version, what changed
    since the run before; change points marked, and listed with their causes in the notes."""
    tables = []
    for s in series:
        starts = {c.run_id: c for c in s.changes}
        table = Table(
            f"{s.label}: throughput (samples/s), oldest first",
            [
                "run",
                "finished",
                "throughput",
                "compiler version",
                "flags",
                "change",
                "differs from the run before",
            ],
        )
        prev: StoreRow | None = None
        for e in s.entries:
            mark = f"{starts[e.run_id].percent:+.1f} %" if e.run_id in starts else ""
            moved = differences(prev, e.row) if prev is not None else []
            table.rows.append(
                [
                    e.run_id,
                    e.when[:19],
                    cell(e.throughput),
                    e.compiler_version,
                    " ".join([*e.flags, *(["left out"] if e.left_out else [])]) or "-",
                    mark,
                    changes_text(moved, packages) or "-",
                ]
            )
            prev = e.row
        table.notes += [f"change point {c.text(packages)}" for c in s.changes] or [
            "no change point"
        ]
        table.notes.append(s.search_note())
        tables.append(table)
    notes = [
        "change points: binary segmentation; at each split a weighted two-sample t on log "
        "throughput (weights from each run's stored interval, the scale from the runs' spread "
        "around the two levels), the largest against a threshold simulated for the series' "
        f"length (1 % false alarms per series); {MIN_SEGMENT} runs needed on each side of a "
        "change (ngb.sweeps.report.changepoints)",
        UNCERTAINTY_NOTE,
    ]
    return Report("history", "ngb history", tables, notes)


def axes_text(point: Point) -> dict[str, object]:
    """The point's axes by name (for JSON and the console)."""
    return {name: value for name, value in point if name in AXES or value is not None}
