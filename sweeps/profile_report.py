"""``ngb profile``'s tables: per-operator profiles of one model side by side across compilers.

Rows are the operator classes of ``ngb.core.profiling`` (one vocabulary for every runtime), each
compiler a column of milliseconds per inference and the share of what its profiler recorded; then
the kernel count per inference (fusion shows as fewer kernels), the sum of the records, the wall
time per call with the profiler on and off (the profiler's overhead, stated, not hidden in the
shares), and each compiler's ten costliest kernels with the source operators they came from.
Rendered by ``ngb.sweeps.reports.render`` like every report (markdown, CSV, LaTeX, HTML).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ngb.core.profiling import OP_CLASSES, Profile
from ngb.sweeps.report_data import Report, ReportData, Table

if TYPE_CHECKING:
    from ngb.sweeps.store_profiles import ProfilePoint


def _ms(value: float) -> str:
    return f"{value:.3g}"


def _share(part: float, whole: float) -> str:
    return f"{_ms(part)} ({100 * part / whole:.0f} %)" if whole > 0 else "-"


def ops_report(label: str, profiles: Sequence[Profile], failed: Sequence[str] = ()) -> Report:
    names = [p.compiler for p in profiles]
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
        ["fused kernels", *(str(sum(1 for r in p.records if r.fused)) for p in profiles)],
        ["recorded ms / inference", *(_ms(p.kernel_ms) for p in profiles)],
        # what the profiler saw pass but no record holds: its own cost between ops, Python
        ["not attributed", *(_share(p.profiled_ms - p.kernel_ms, p.profiled_ms) for p in profiles)],
        ["profiled ms / call", *(_ms(p.profiled_ms) for p in profiles)],
        ["plain ms / call", *(_ms(p.plain_ms) for p in profiles)],
        ["profiled / plain", *(f"{p.profiled_ms / p.plain_ms:.2f}x" for p in profiles)],
    ]
    by_class.notes.append(
        "profilers: "
        + "; ".join(f"{p.compiler}: {p.profiler}, ran {p.precision or '?'}" for p in profiles)
    )
    by_class.notes.append(
        "a profile pass apart from the timed trials: plain = the same compiled model without "
        "the profiler, measured first; shares are of the recorded time (torch: each op's self "
        "time; ONNX Runtime: kernel events; OpenVINO: executed nodes' real time)"
    )
    top = Table(
        f"{label}: the ten costliest kernels per compiler",
        ["compiler", "kernel", "op type", "class", "fused", "us / inference", "from"],
    )
    for p in profiles:
        for r in p.top(10):
            source = ", ".join(r.source_ops[:4]) + (" ..." if len(r.source_ops) > 4 else "")
            top.rows.append(
                [p.compiler, r.name, r.op_type + (f" [{r.kernel}]" if r.kernel else ""),
                 r.op_class, "yes" if r.fused else "", f"{r.us_per_inference:.1f}", source]
            )  # fmt: skip
    report = Report("ops", f"Per-operator profile of {label}", [by_class, top])
    report.notes += [f"not profiled: {line}" for line in failed]
    return report


def ops(data: ReportData) -> Report:
    """``ngb report ops``: the stored profiles (``ngb profile --db``), one pair of tables per
    model, batch and device, with each compiler's timed latency per call beside its profiled
    one where a timed trial of the same point is in the store."""
    from ngb.sweeps.store_profiles import load_profiles

    stored = load_profiles(data.store, data.run_id)
    if data.device is not None:
        stored = [(pt, p) for pt, p in stored if pt.device == data.device]
    if not stored:
        empty = Table("Per-operator profiles", ["class"])
        empty.notes.append("no profiles stored: `ngb profile MODEL --db FILE` takes them")
        return Report("ops", "Per-operator profiles", [empty])
    timed = _timed_ms(data)
    groups: dict[tuple[object, ...], list[tuple[ProfilePoint, Profile]]] = {}
    for point, p in stored:
        groups.setdefault((point.device, point.model, point.width, point.depth, point.batch), [])
        groups[(point.device, point.model, point.width, point.depth, point.batch)].append(
            (point, p)
        )
    out = Report("ops", "Per-operator profiles", [])
    for (device, model, width, depth, batch), found in groups.items():
        label = (
            f"{model}{f' w{width}' if width else ''}{f' d{depth}' if depth != 1 else ''} b{batch}"
        )
        part = ops_report(f"{label} on {device}", [p for _, p in found])
        part.tables[0].rows.append(
            ["timed ms / call [95 %]", *(timed.get(pt.key_tuple(), "-") for pt, _ in found)]
        )
        out.tables += part.tables
    out.notes.append(
        "timed ms / call: batch / throughput of the newest timed trial of the same point "
        "(precision included), its interval carried over; '-' where none is stored"
    )
    return out


def _timed_ms(data: ReportData) -> dict[tuple[object, ...], str]:
    """Point -> the timed trial's milliseconds per call with its printed interval."""
    from ngb.sweeps import derived
    from ngb.sweeps.numbers import format_interval, format_value

    out: dict[tuple[object, ...], str] = {}
    for r in data.trials():
        batch = int(r["batch"])
        tput = derived.throughput(r)
        if not tput.value > 0:
            continue
        ms = 1000.0 * batch / tput.value
        low, high = tput.low, tput.high
        text = (
            format_interval(ms, 1000.0 * batch / high, 1000.0 * batch / low)
            if low and high
            else format_value(ms)
        )
        key = (r["device"], r["model"], r.get("width"), r.get("depth") or 1, batch,
               r["compiler"], r.get("precision") or "")  # fmt: skip
        out[key] = text
    return out
