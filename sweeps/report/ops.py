"""``ngb profile``'s, ``ngb report ops``' and ``ngb measure --profile``'s tables: per-operator
profiles of one model side by side across compilers.

Rows are the operator classes of ``ngb.core.compilers.profiling`` (one vocabulary for every
runtime), each compiler a column of milliseconds per inference and the share of what its profiler
recorded; then the kernel count per inference (fusion shows as fewer kernels), the sum of the
records, the wall time per call with the profiler on and off (the profiler's overhead, stated, not
hidden in the shares), and each compiler's ten costliest kernels with the source operators they came
from. Rendered by ``ngb.sweeps.report.catalog.render`` like every report (markdown, CSV, LaTeX,
HTML).

A model's batches are tables of their own (``by_model``: "resnet18 b1 on localhost", "resnet18
b8 on localhost"), each with its own timed latency: shares at b1 and b8 are read side by side,
never summed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ngb.core.compilers.profiling import OP_CLASSES, Profile
from ngb.sweeps.report.data import Report, ReportData, Table

if TYPE_CHECKING:
    from ngb.core.records.types import TrialResult, TrialSpec
    from ngb.sweeps.store.profiles import ProfilePoint


def _ms(value: float) -> str:
    return f"{value:.3g}"


def _share(part: float, whole: float) -> str:
    return f"{_ms(part)} ({100 * part / whole:.0f} %)" if whole > 0 else "-"


def ops_report(
    label: str,
    profiles: Sequence[Profile],
    failed: Sequence[str] = (),
    names: Sequence[str] | None = None,
) -> Report:
    """The tables of one model side by side; ``names`` head the columns (default: compilers)."""
    names = list(names) if names is not None else [p.compiler for p in profiles]
    by_class = Table(
        f"{label}: time per inference by operator class (ms, share)", ["class", *names]
    )
    shares = [p.by_class() for p in profiles]
    for cls in OP_CLASSES:
        cells = []
        for p, per in zip(profiles, shares, strict=True):
            total = p.kernel_ms
            cells.append(f"{_ms(per[cls])} ({100 * per[cls] / total:.0f} %)" if total else "-")
        by_class.rows.append([cls, *cells])
    by_class.rows += [
        ["kernels / inference", *(f"{p.kernels_per_inference:.0f}" for p in profiles)],
        ["fused kernels / inference", *(f"{fused_kernels(p):.0f}" for p in profiles)],
        ["recorded ms / inference", *(_ms(p.kernel_ms) for p in profiles)],
        # what the profiler saw pass but no record holds: its own cost between ops, Python
        ["not attributed", *(_unattributed(p) for p in profiles)],
        ["profiled ms / call", *(_ms(p.profiled_ms) for p in profiles)],
        ["plain ms / call", *(_ms(p.plain_ms) for p in profiles)],
        ["profiled / plain", *(f"{p.profiled_ms / p.plain_ms:.2f}x" for p in profiles)],
    ]
    by_class.notes += [
        _over_wall_note(n, p) for n, p in zip(names, profiles, strict=True) if _over_wall(p)
    ]
    by_class.notes.append(
        "profilers: "
        + "; ".join(
            f"{n}: {p.profiler}, ran {p.precision or '?'}"
            for n, p in zip(names, profiles, strict=True)
        )
    )
    by_class.notes.append(
        "a profile pass apart from the timed trials: plain = the same compiled model without "
        "the profiler, measured first; shares are of the recorded time (torch: each operator "
        "the model called, what it called inside it counted once; ONNX Runtime: kernel "
        "events; OpenVINO: executed nodes' real time)"
    )
    by_class.machine = _machine(by_class.title, names, profiles)
    top = Table(
        f"{label}: the ten costliest kernels per compiler",
        ["compiler", "kernel", "op type", "class", "fused", "us / inference", "from"],
    )
    for name, p in zip(names, profiles, strict=True):
        for r in p.top(10):
            source = ", ".join(r.source_ops[:4]) + (" ..." if len(r.source_ops) > 4 else "")
            top.rows.append(
                [name, r.name, r.op_type + (f" [{r.kernel}]" if r.kernel else ""),
                 r.op_class, "yes" if r.fused else "", f"{r.us_per_inference:.1f}", source]
            )  # fmt: skip
    report = Report("ops", f"Per-operator profile of {label}", [by_class, top])
    report.notes += [f"not profiled: {line}" for line in failed]
    return report


def _number(value: float, places: int = 4) -> float:
    """A plain decimal for CSV: rounded, never in scientific notation (``repr`` of a float
    rounded to ``places`` decimals is plain down to 1e-4)."""
    return round(value, places) + 0.0  # + 0.0: no "-0.0"


def _machine(title: str, names: Sequence[str], profiles: Sequence[Profile]) -> Table:
    """The by-class table as CSV writes it: a "ms" and a "share %" column per compiler, in the
    order the columns were asked for, one plain decimal a cell ("" where none)."""
    columns = ["row"]
    for name in names:
        columns += [f"{name} ms", f"{name} share %"]
    table = Table(title, columns)
    shares = [p.by_class() for p in profiles]

    def row(label: str, pairs: Sequence[tuple[object, object]]) -> None:
        table.rows.append([label, *(v for pair in pairs for v in pair)])

    for cls in OP_CLASSES:
        row(cls, [
            (_number(per[cls]), _number(100 * per[cls] / p.kernel_ms, 2) if p.kernel_ms else "")
            for p, per in zip(profiles, shares, strict=True)
        ])  # fmt: skip
    row("kernels / inference", [(_number(p.kernels_per_inference, 2), "") for p in profiles])
    row("fused kernels / inference", [(_number(fused_kernels(p), 2), "") for p in profiles])
    row("recorded ms / inference", [(_number(p.kernel_ms), "") for p in profiles])
    row("not attributed", [
        (_number(max(p.profiled_ms - p.kernel_ms, 0.0)),
         _number(100 * max(p.profiled_ms - p.kernel_ms, 0.0) / p.profiled_ms, 2)
         if p.profiled_ms > 0 else "")
        for p in profiles
    ])  # fmt: skip
    row("records / wall", [
        (_number(p.kernel_ms / p.profiled_ms) if p.profiled_ms > 0 else "", "") for p in profiles
    ])  # fmt: skip
    row("profiled ms / call", [(_number(p.profiled_ms), "") for p in profiles])
    row("plain ms / call", [(_number(p.plain_ms), "") for p in profiles])
    row("profiled / plain", [
        (_number(p.profiled_ms / p.plain_ms) if p.plain_ms > 0 else "", "") for p in profiles
    ])  # fmt: skip
    return table


def fused_kernels(p: Profile) -> float:
    """Fused kernels run per inference: what the runtime's own graph shows fused (ORT's saved
    optimised model, OpenVINO's runtime model, TorchScript's folded batch norms)."""
    return sum(r.calls_per_inference for r in p.records if r.fused)


def _over_wall(p: Profile) -> bool:
    """Whether the records add up to more than the wall time of the profiled calls."""
    return p.profiled_ms > 0 and p.kernel_ms > p.profiled_ms


def _unattributed(p: Profile) -> str:
    """The profiled wall time no record holds; where the records exceed it (OpenVINO's counters
    run on per-node timers, not the call's clock) none is unattributed and the excess is said."""
    if _over_wall(p):
        return f"0 (records {p.kernel_ms / p.profiled_ms:.2f}x wall)"
    return _share(p.profiled_ms - p.kernel_ms, p.profiled_ms)


def _over_wall_note(name: str, p: Profile) -> str:
    return (
        f"{name}: its records sum to {p.kernel_ms:.3g} ms per inference, "
        f"{100 * (p.kernel_ms / p.profiled_ms - 1):.1f} % above the {p.profiled_ms:.3g} ms the "
        "profiled calls took on the wall clock: the runtime times each node on its own timer "
        "(OpenVINO's PERF_COUNT: a node's start to end), not the call's clock; their sum "
        "stays below the wall time as a rule (0.93x to 0.99x for resnet18 at batch 1, quiet "
        "and beside three CPU hogs on 2 cores), so here the timers and the clock disagreed; "
        "shares are of the records, and nothing is left unattributed"
    )


def column_names(points: Sequence[ProfilePoint]) -> list[str]:
    """A column per profile: the compiler, with its precision where the model's profiles ran at
    more than one, and its optimisation where it had one (int8, pruning: the DLAS rows)."""
    precisions = {pt.precision for pt in points}
    out = []
    for pt in points:
        name = pt.compiler
        if len(precisions) > 1 and pt.precision:
            name += f" {pt.precision}"
        if pt.optimisation not in ("", "none"):
            name += f" {pt.optimisation}"
        out.append(name)
    return out


def ops(data: ReportData) -> Report:
    """``ngb report ops``: the stored profiles (``ngb profile --db``, a sweep's ``profile =
    true``), one pair of tables per model, batch and device, a column per compiler, precision and
    optimisation, with each one's timed latency per call beside its profiled one where a timed
    trial of the same point is in the store."""
    stored, timed = load_with_timed(data)
    if not stored:
        empty = Table("Per-operator profiles", ["class"])
        empty.notes.append(
            "no profiles stored: `ngb profile MODEL --db FILE`, `ngb measure MODEL --profile --db "
            "FILE` or a sweep with `profile = true` in its [measure] (`ngb run --profile`) "
            "takes them"
        )
        return Report("ops", "Per-operator profiles", [empty])
    if data.compilers is not None:
        stored = in_order(stored, data.compilers)
    out = Report("ops", "Per-operator profiles", [])
    for label, found in by_model(stored):
        cells = [timed.get(_timed_key(pt), (0.0, "-"))[1] for pt, _ in found]
        out.tables += point_report(label, found, cells).tables
    out.notes.append(_TIMED_NOTE)
    return out


def in_order(
    stored: Sequence[tuple[ProfilePoint, Profile]], compilers: Sequence[str]
) -> list[tuple[ProfilePoint, Profile]]:
    """The profiles of ``compilers`` only, in the order they were asked for (``-c``); one not
    stored at all is named, not dropped in silence."""
    from ngb.core.base.errors import UnknownNameError

    known = {pt.compiler for pt, _ in stored}
    for name in compilers:
        if name not in known:
            raise UnknownNameError("compiler with profiles", name, sorted(known))
    rank = {name: i for i, name in enumerate(compilers)}
    kept = [(pt, p) for pt, p in stored if pt.compiler in rank]
    return sorted(kept, key=lambda found: rank[found[0].compiler])  # stable: ties keep order


_TIMED_NOTE = (
    "timed ms / call: batch / throughput of the trial the profile pass followed (a sweep's "
    "profile = true, `ngb measure --profile`), else of the newest timed trial of the same point "
    "(precision and optimisation included), its interval carried over; '-' where none is stored. "
    "'k in flight': that trial kept k requests running (OpenVINO, asynchronous runtimes), so a "
    "call finished every timed ms while each took up to k times that; the pass runs one call at "
    "a time and reads up to k times the timed figure"
)


def profiled_over_timed(p: Profile) -> str:
    """The profiled latency over the timed one, marked where the timed trial kept several
    requests in flight (the console's Operators view prints the same)."""
    if not p.timed_ms:
        return "-"
    ratio = f"{p.profiled_ms / p.timed_ms:.2f}x"
    return f"{ratio} ({p.timed_in_flight} in flight)" if p.timed_in_flight > 1 else ratio


def point_report(
    label: str, found: Sequence[tuple[ProfilePoint, Profile]], timed: Sequence[str]
) -> Report:
    """One model, batch and device: ``ops_report``'s tables, a column per profile, with each
    one's timed ms per call (``timed``: printed with its interval, "-" where none) and its
    profiled / timed ratio below. ``ops`` and ``ngb measure --profile`` both print this."""
    part = ops_report(label, [p for _, p in found], names=column_names([pt for pt, _ in found]))
    ratios = [profiled_over_timed(p) for _, p in found]
    part.tables[0].rows += [["timed ms / call [95 %]", *timed], ["profiled / timed", *ratios]]
    machine = part.tables[0].machine
    if machine is not None:  # the timed figure as a number; its interval stays in the table
        profiles = [p for _, p in found]
        machine.rows += [
            ["timed ms / call", *(v for p in profiles
                                  for v in (_number(p.timed_ms) if p.timed_ms else "", ""))],
            ["profiled / timed", *(v for p in profiles for v in (
                _number(p.profiled_ms / p.timed_ms) if p.timed_ms else "", ""))],
        ]  # fmt: skip
    return part


def trial_ops(
    spec: TrialSpec, result: TrialResult, row: Mapping[str, object], device: str
) -> Report | str:
    """``ngb measure --profile``: the tables ``ngb report ops`` prints for this trial once it is
    stored under ``device`` (the same label, column and rows), from the result itself: its
    profile pass (``extra["profile"]``) and its timed latency from ``row``, the result as the
    store's columns name it (what ``derived.throughput`` reads). A pass that left no profile
    gives its one-line reason instead."""
    from ngb.sweeps.store.profile_rows import ProfilePoint

    data = result.extra.get("profile")
    if not isinstance(data, Mapping):
        return "no profile pass ran (the trial failed, or profile is off)"
    if "records" not in data:
        return str(data.get("error") or "no profile")
    profile = Profile.from_dict(data)
    # as the store files it (``profile_rows.take_profiles``): what ran, keyed to the trial
    point = ProfilePoint.of(spec, device, result.precision or profile.precision, result.key)
    ((label, found),) = by_model([(point, profile)])
    timed = timed_cell(row, spec.batch)
    report = point_report(label, found, [timed[1] if timed else "-"])
    report.notes.append(_TIMED_NOTE)
    return report


def by_model(
    stored: Sequence[tuple[ProfilePoint, Profile]],
) -> list[tuple[str, list[tuple[ProfilePoint, Profile]]]]:
    """Profiles grouped per model, batch and device (one table pair, one figure each), with the
    group's label ("resnet18 b8 on localhost")."""
    groups: dict[tuple[object, ...], list[tuple[ProfilePoint, Profile]]] = {}
    for point, p in stored:
        where = (point.device, point.model, point.width, point.depth, point.batch)
        groups.setdefault(where, []).append((point, p))
    out = []
    for (device, model, width, depth, batch), found in groups.items():
        label = f"{model}{f' w{width}' if width else ''}{f' d{depth}' if depth != 1 else ''}"
        out.append((f"{label} b{batch} on {device}", found))
    return out


def _timed_key(point: ProfilePoint) -> tuple[object, ...]:
    return (point.trial_key,) if point.trial_key else point.key_tuple()


def load_with_timed(
    data: ReportData,
) -> tuple[list[tuple[ProfilePoint, Profile]], dict[tuple[object, ...], tuple[float, str, int]]]:
    """The stored profiles in the report's scope, and the timed trials' ms per call (see
    ``_timed_ms``); a profile taken apart from any trial (``ngb profile --db``) gets the timed
    latency of the newest trial of its point as ``timed_ms``, where the store has one."""
    from ngb.sweeps.store.profiles import load_profiles

    stored = load_profiles(data.store, data.run_id, data.model)
    if data.model is not None and not stored:
        from ngb.core.base.errors import UnknownNameError

        known = sorted({pt.model for pt, _ in load_profiles(data.store, data.run_id)})
        raise UnknownNameError("model with profiles", data.model, known)
    if data.device is not None:
        stored = [(pt, p) for pt, p in stored if pt.device == data.device]
    timed = _timed_ms(data) if stored else {}
    for point, p in stored:
        if _timed_key(point) not in timed:
            continue
        ms, _, flight = timed[_timed_key(point)]
        if p.timed_ms is None:
            p.timed_ms = ms
        # the store's profiles table keeps no count: the trial's own extra says it
        p.timed_in_flight = max(p.timed_in_flight, flight)
    return stored, timed


def _timed_ms(data: ReportData) -> dict[tuple[object, ...], tuple[float, str, int]]:
    """Point (and trial key) -> the timed trial's milliseconds per call, that with its
    printed interval, and the requests it kept in flight."""
    from ngb.core.compilers.profiling import requests_in_flight

    out: dict[tuple[object, ...], tuple[float, str, int]] = {}
    for r in data.trials():
        batch = int(r["batch"])
        timed = timed_cell(r, batch)
        if timed is None:
            continue
        opt = r.get("optimisation") or "none"
        key = (r["device"], r["model"], r.get("width"), r.get("depth") or 1, batch,
               r["compiler"], r.get("precision") or "", opt)  # fmt: skip
        out[key] = out[(r.get("key"),)] = (*timed, requests_in_flight(r.get("extra")))
    return out


def timed_cell(row: Mapping[str, object], batch: int) -> tuple[float, str] | None:
    """A timed result's milliseconds per call (batch / throughput) and that printed with its
    interval (the throughput's, carried over: its bounds swap); None without a throughput."""
    from ngb.sweeps.report import derived
    from ngb.sweeps.report.numbers import format_interval, format_value

    tput = derived.throughput(row)
    if not tput.value > 0:
        return None
    ms = 1000.0 * batch / tput.value
    low, high = tput.low, tput.high
    if low and high:
        return ms, format_interval(ms, 1000.0 * batch / high, 1000.0 * batch / low)
    return ms, format_value(ms)
