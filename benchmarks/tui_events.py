"""Drive the Run screen with 100 simulated devices x 10 events/s and print handling and frame times.

Synthetic ``RunEvent`` records (the orchestrator's own class) are injected straight into
``RunScreen.handle_run_event`` on the app's event loop, paced in real time, while the app runs
headless at 160x48. Printed figures:

- handling: time of one ``handle_run_event`` call (the fold; what every event costs);
- flush: time of one throttled redraw (``RunScreen.flush``: update the dirty device panels and
  the log; runs at most 10 times a second);
- loop lag: how late a 10 ms pacing sleep wakes up, i.e. how long the event loop was busy
  (Textual's own layout and paint included), which is what an operator feels as input latency.

Usage: ``python benchmarks/tui_events.py [--devices 100] [--rate 10] [--seconds 10]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from ngb.sweeps.run.orchestrator import RunEvent
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend

TICK_S = 0.01


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def synthetic_event(run_id: str, device: str, n: int, total: int) -> RunEvent:
    """The mix a busy device sends: mostly CPU samples, then progress, phases, trial ends, logs."""
    step = n % 20
    if step == 0:
        done = (n // 20) % total
        return RunEvent(
            run_id,
            device,
            "agent",
            state="running",
            total=total,
            done=done,
            event={"type": "trial_started", "label": f"conv64x{done % 4 + 1}/tvm-ms/b8"},
        )
    if step in (5, 10):
        return RunEvent(run_id, device, "agent", event={"type": "phase", "phase": "measure"})
    if step == 15:
        return RunEvent(
            run_id,
            device,
            "agent",
            event={"type": "log", "level": "info", "msg": f"{device}: trial step {n}"},
        )
    if step == 19:
        return RunEvent(
            run_id,
            device,
            "agent",
            total=total,
            done=(n // 20) % total + 1,
            event={"type": "trial_done", "key": f"k{n}"},
        )
    if step % 4 == 1 and device.endswith("0"):
        return RunEvent(
            run_id,
            device,
            "agent",
            event={
                "type": "tuning",
                "trials_done": n,
                "budget": 1500,
                "best_ms": 1.0 + 1 / (n + 1),
                "tasks": [
                    {"name": "fused_conv2d", "trials": n // 2, "best_ms": 0.7},
                    {"name": "dense", "trials": n - n // 2, "best_ms": 0.3},
                ],
            },
        )
    if step % 2:
        return RunEvent(
            run_id, device, "agent", event={"type": "progress", "rep": step, "reps": 20}
        )
    return RunEvent(
        run_id,
        device,
        "agent",
        event={"type": "cpu", "percent": float(n * 7 % 100), "proc_percent": 90.0},
    )


async def drive(devices: int, rate: float, seconds: float) -> dict[str, list[float]]:
    tmp = Path(tempfile.mkdtemp(prefix="ngb-tui-bench-"))
    app = NgbApp(
        Backend(db_path=tmp / "r.duckdb", inventory_path=tmp / "devices.toml"),
        attach_on_start=False,
    )
    handle_ms: list[float] = []
    flush_ms: list[float] = []
    lag_ms: list[float] = []
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.run_screen
        await pilot.pause(0.5)
        original_flush = screen.flush

        def timed_flush() -> None:
            t0 = time.perf_counter()
            original_flush()
            flush_ms.append((time.perf_counter() - t0) * 1e3)

        screen.flush = timed_flush  # type: ignore[method-assign]
        names = [f"dev-{i:03d}" for i in range(devices)]
        # Warm-up: every device reports once and its panel is mounted before timing starts (the
        # one-off mount cost is printed separately).
        t0 = time.perf_counter()
        for name in names:
            screen.handle_run_event(
                RunEvent("bench", name, "connection", state="running", total=50, done=0)
            )
        await pilot.pause(0.2)
        while len(screen._panels) < devices or screen._dirty:
            await pilot.pause(0.05)
        mount_s = time.perf_counter() - t0
        flush_ms.clear()
        sent = 0
        start = time.perf_counter()
        next_tick = start
        while (now := time.perf_counter()) - start < seconds:
            due = int((now - start) * devices * rate)  # paced by wall time, not by ticks
            while sent < due:
                device = names[sent % devices]
                ev = synthetic_event("bench", device, sent // devices, total=50)
                t0 = time.perf_counter()
                screen.handle_run_event(ev)
                handle_ms.append((time.perf_counter() - t0) * 1e3)
                sent += 1
            next_tick += TICK_S
            delay = max(0.0, next_tick - time.perf_counter())
            t_sleep = time.perf_counter()
            await asyncio.sleep(delay)
            lag_ms.append(max(0.0, (time.perf_counter() - t_sleep - delay) * 1e3))
        elapsed = time.perf_counter() - start
        await pilot.pause(0.3)
        panels = len(screen._panels)
    return {
        "handle": handle_ms,
        "flush": flush_ms,
        "lag": lag_ms,
        "meta": [sent, elapsed, panels, mount_s],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--rate", type=float, default=10.0, help="events per device per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    out = asyncio.run(drive(args.devices, args.rate, args.seconds))
    sent, elapsed, panels, mount_s = out["meta"]
    print(
        f"ngb-tui Run screen: {args.devices} devices x {args.rate:g} events/s for "
        f"{elapsed:.1f} s -> {sent} events ({sent / elapsed:.0f}/s achieved), "
        f"{panels} device panels (first mount of all panels: {mount_s:.2f} s)"
    )
    for name, label in (
        ("handle", "event handling (fold)"),
        ("flush", "throttled redraw"),
        ("lag", "event-loop lag"),
    ):
        values = out[name]
        print(
            f"  {label:24s} n={len(values):6d}  p50={pct(values, 50):8.3f} ms  "
            f"p99={pct(values, 99):8.3f} ms  max={max(values, default=float('nan')):8.3f} ms"
            f"  mean={statistics.fmean(values) if values else float('nan'):8.3f} ms"
        )
    redraw_hz = len(out["flush"]) / elapsed if elapsed else 0.0
    print(f"  redraws: {len(out['flush'])} ({redraw_hz:.1f}/s; throttle is 4/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
