"""A large results store for ``ngb bench store --size-gb``: generated in SQL, measured at scale.

The store is what a long-lived lab's file looks like: many runs measuring the same points again
(the newest result per point is what reports and ``advise`` read), every trial with its
repetitions (``measurements``), CPU samples and timed-call latencies. The rows are made by DuckDB
itself (``INSERT ... SELECT ... FROM range``), so 1 GB takes a minute or two, not an ingest of
hours. Created once at a path and reused (the size is checked, not the contents).

Measured here, each in a child process where memory is the question:
- peak RSS of ``ngb report energy`` and ``ngb advise`` (``RUSAGE_CHILDREN``, one child each);
- a live run's ingest delay while a long ``ngb query`` and a long ``ngb export`` run.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store

COMPILERS = ("identity", "torchscript", "onnxruntime", "openvino", "tvm")
BATCHES = (1, 2, 4, 8, 16, 32)
DEVICES = ("lab-a", "lab-b")
#: trials per GiB of file (measured: 60 repetitions, 20 CPU samples and 64 latencies each, ~2.2 kB)
TRIALS_PER_GB = 480_000


def generate(path: Path, size_gb: float, points: int, reps: int = 60) -> None:
    """Write a store of about ``size_gb`` at ``path``: ``points`` points per run, as many runs as
    the size needs (every run measures every point again)."""
    import duckdb
    from ngb.sweeps.store.database import Store

    Store(path).create_run("seed", "seed", "", list(DEVICES), 0)  # the schema, as ngb makes it
    trials = max(points, int(size_gb * TRIALS_PER_GB))
    runs = max(1, trials // points)
    t0 = time.perf_counter()
    conn = duckdb.connect(str(path))
    try:
        conn.execute("SET preserve_insertion_order = false")
        conn.execute("SET enable_progress_bar = false")
        conn.execute(  # numbers only
            "INSERT INTO runs (run_id, sweep_name, sweep_toml, devices, "  # noqa: S608
            "n_trials, status, created_at, updated_at, finished_at, meta) "
            "SELECT printf('run-%05d', r), 'scale', 'baseline = \"identity\"', "
            f"'[\"lab-a\", \"lab-b\"]', {points}, 'done', "
            "TIMESTAMP '2026-01-01' + to_minutes(r::BIGINT * 30), "
            "TIMESTAMP '2026-01-01' + to_minutes(r::BIGINT * 30 + 20), "
            "TIMESTAMP '2026-01-01' + to_minutes(r::BIGINT * 30 + 20), '{}' "
            f"FROM range({runs}) t(r)"
        )
        compilers = "[" + ", ".join(f"'{c}'" for c in COMPILERS) + "]"
        batches = "[" + ", ".join(str(b) for b in BATCHES) + "]"
        nc, nb, nd = len(COMPILERS), len(BATCHES), len(DEVICES)
        # point p: device p % 2, compiler, batch, and a width that makes the rest distinct
        conn.execute(
            f"""
            INSERT INTO trials (run_id, device, key, label, model, family, compiler, batch, depth,
              width, optimisation, target, status, export_s, compile_s, first_call_s,
              repetitions, throughput_mean, throughput_std, throughput_median, throughput_cov,
              cpu_percent_mean, peak_rss_mb, max_abs_err, host, versions, measure, spec, extra,
              started_at, finished_at, ingested_at, throughput_ci_half, verdict,
              verdict_reason, disturbed, workers, precision, energy_j_per_sample,
              energy_j_per_sample_ci_half, energy_above_idle_j_per_sample, samples_per_j,
              power_w_mean, idle_power_w, energy_source, energy_note, latency_p99_ms,
              latency_p99_hi_ms, latency_calls)
            SELECT printf('run-%05d', r), ['lab-a', 'lab-b'][p % {nd} + 1], printf('k%06d', p),
              'conv', 'conv', 'block', {compilers}[(p // {nd}) % {nc} + 1],
              {batches}[(p // {nd * nc}) % {nb} + 1], 1, 8 + p // {nd * nc * nb}, 'none', 'cpu',
              'ok', 0.5, 2.0 + (p % 5), 0.1, {reps}, thr, thr * 0.02, thr, 0.02, 150.0, 400.0,
              1e-6, 'bench', '{{"torch": "2.5.0", "onnxruntime": "1.20.0"}}',
              '{{"min_time_s": 1.0, "max_time_s": 10.0, "warmup_s": 1.0}}',
              printf('{{"model": "conv", "width": %d, "depth": 1, "batch": %d, "compiler": "%s"}}',
                     p, p % 32, 'x'),
              '{{"allocator": "glibc retain (M_MMAP_MAX=0)"}}',
              t, t + INTERVAL 20 SECOND, t + INTERVAL 21 SECOND, thr * 0.01, 'VALID', '',
              false, 4, 'fp32', 0.002 * (1 + p % 7), 0.0001, 0.001, 500.0 / (1 + p % 7),
              40.0, 12.0, 'rapl', 'rapl package counter', 12.0, 13.0, 1000
            FROM (SELECT r, p, (100.0 + (p % 97)) * (0.95 + 0.1 * random()) AS thr,
                         TIMESTAMP '2026-01-01' + to_minutes(r::BIGINT * 30) AS t
                  FROM range({runs}) a(r), range({points}) b(p))
            """  # noqa: S608 - numbers only
        )
        trial_rows = (
            "SELECT run_id, device, key, compiler, batch, width, throughput_mean FROM trials"
        )
        conn.execute(
            f"""
            INSERT INTO measurements (run_id, device, key, model, compiler, batch, depth, width,
              optimisation, rep, iters, elapsed_s, throughput, worker)
            SELECT run_id, device, key, 'conv', compiler, batch, 1, width, 'none', rep, 50,
                   0.5 * (0.98 + 0.04 * random()), throughput_mean * (0.98 + 0.04 * random()),
                   rep % 4
            FROM ({trial_rows}) t, range({reps}) s(rep)
            """  # noqa: S608
        )
        conn.execute(
            f"""
            INSERT INTO cpu_samples SELECT run_id, device, key, 'trial', NULL, s * 0.5,
                   20.0 + 9 * random(), 95.0 + 5 * random() FROM ({trial_rows}) t, range(20) q(s)
            """  # noqa: S608
        )
        conn.execute(
            f"""
            INSERT INTO latencies SELECT run_id, device, key, c, 10.0 + random()
            FROM ({trial_rows}) t, range(64) q(c)
            """  # noqa: S608
        )
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
    size = path.stat().st_size / 2**30
    print(
        f"generated {path}: {runs} runs x {points} points = {runs * points:,} trials, "
        f"{runs * points * reps:,} repetitions, {size:.2f} GiB in {time.perf_counter() - t0:.0f} s"
    )


def ensure_store(path: Path, size_gb: float, points: int) -> None:
    if path.exists():
        size = path.stat().st_size / 2**30
        print(f"reusing {path} ({size:.2f} GiB)")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    generate(path, size_gb, points)


def peak_rss_mb(argv: list[str]) -> tuple[float, float, int]:
    """(peak RSS of one child in MiB, its wall seconds, its exit status): ``ru_maxrss`` of the
    children is the largest of any waited-for child, so each is measured in a fresh helper."""
    probe = (
        "import resource, subprocess, sys, time\n"
        "t0 = time.perf_counter()\n"
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "wall = time.perf_counter() - t0\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(peak, wall, rc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def ngb(*args: str) -> list[str]:
    return [sys.executable, "-m", "ngb.sweeps.cli", *args]


def memory(path: Path) -> None:
    print(f"peak RSS (child process, ru_maxrss), load {os.getloadavg()[0]:.1f}:")
    for label, argv in (
        ("ngb report energy", ngb("report", "energy", "--db", str(path))),
        ("ngb advise conv8x1 --device lab-a",
         ngb("advise", "conv8x1", "--device", "lab-a", "--db", str(path))),
        ("ngb advise conv8x1 --device lab-a --objective energy",
         ngb("advise", "conv8x1", "--device", "lab-a", "--objective", "energy", "--db",
             str(path))),
    ):  # fmt: skip
        peak, wall, rc = peak_rss_mb(argv)
        verdict = "ok" if peak < 300 else "ABOVE GOAL"
        print(f"  {label}: {peak:.0f} MiB in {wall:.1f} s (goal < 300 MiB: {verdict})"
              + (f" exit status {rc}" if rc else ""))  # fmt: skip


def _live_writer(path: Path) -> tuple[contextlib.AbstractContextManager[None], Callable[[], None]]:
    """How a live run's writer writes (checkpoints deferred) and what it does at the end."""
    try:
        from ngb.sweeps.store.connect import checkpoint
        from ngb.sweeps.store.wal_marker import deferred_checkpoints
    except ImportError:  # an ngb from before the writer's marker: the baseline
        return contextlib.nullcontext(), lambda: None
    return deferred_checkpoints(path), lambda: checkpoint(path, timeout=600)


def ingest_delay(path: Path, reader: list[str], label: str, every_s: float) -> None:
    """A live run's writes (one small transaction every ``every_s``: a run's flush interval is
    1 s, 10 s on localhost) while ``reader`` runs in another process: how many found the file
    held by the reader and waited, and how long each took. The writer defers its checkpoints
    as a live run's does (``wal_marker.deferred_checkpoints``; an ngb without it: the baseline)."""
    from ngb.sweeps.store.database import Store

    live, settle = _live_writer(path)
    # a write first tries the file at once: one that finds a reader holding it (DatabaseBusy)
    # is counted, then waits as a run's would (what a write took beyond that is the machine:
    # CPU, and the disk the reader's copy keeps busy)
    at_once = Store(path, write_timeout_s=0.0)
    patient = Store(path, write_timeout_s=600)
    held: list[float] = []
    with live:
        quiet = sorted(_one_write(at_once, patient, []) for _ in range(3))[1]
        began = time.perf_counter()
        proc = subprocess.Popen(
            reader, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        time.sleep(0.5)  # the reader has opened the file
        waits = []
        while proc.poll() is None:
            waits.append(_one_write(at_once, patient, held))
            time.sleep(every_s)
        _, err = proc.communicate()
    settle()  # the run's end: the store at rest has no log
    took = time.perf_counter() - began
    late = max(waits) if waits else math.nan
    median = statistics.median(waits) if waits else math.nan
    verdict = "ok" if waits and not held else "DELAYED"
    failed = err.strip().splitlines()[-1] if proc.returncode and err.strip() else ""
    print(
        f"  {label} ({took:.0f} s), a write every {every_s:g} s: {len(waits)} writes during "
        f"it; {len(held)} found the file held by the reader and waited "
        f"{sum(held):.2f} s in all, at most {max(held, default=0.0):.2f} s (goal: none: "
        f"{verdict}); each write took {median:.2f} s median, {late:.2f} s at most (the same "
        f"write on a quiet store {quiet:.2f} s), load {os.getloadavg()[0]:.1f}"
        + (f"; the reader failed: {failed}" if failed else "")
    )


def _one_write(at_once: Store, patient: Store, held: list[float]) -> float:
    """One small transaction, as a run's flush; a wait for a reader is appended to ``held``."""
    from ngb.sweeps.store.database import DatabaseBusy

    run_id = f"live-{time.time_ns()}"
    t0 = time.perf_counter()
    try:
        at_once.create_run(run_id, "live", "", ["lab-a"], 1)
    except DatabaseBusy:
        t1 = time.perf_counter()
        patient.create_run(run_id, "live", "", ["lab-a"], 1)
        held.append(time.perf_counter() - t1)
    return time.perf_counter() - t0


def long_query(path: Path, seconds: float) -> str:
    """A read-only query that runs about ``seconds`` on this machine (a cross join, calibrated
    on a tenth of it)."""

    def sql(rows: int) -> str:
        return f"SELECT sum((a.range * b.range) % 7) FROM range({rows}) a, range(40000) b"  # noqa: S608

    t0 = time.perf_counter()
    subprocess.run(ngb("query", sql(2000), "--db", str(path)), capture_output=True, check=True)
    per_row = (time.perf_counter() - t0) / 2000
    return sql(max(1000, int(seconds / per_row)))


def delays(path: Path, query_s: float, every_s: tuple[float, ...]) -> None:
    print(f"a live run's writes while another process reads, load {os.getloadavg()[0]:.1f}:")
    sql = long_query(path, query_s)
    out = path.parent / f"bench-export-{os.getpid()}.parquet"
    for every in every_s:
        query = ngb("query", sql, "--db", str(path))
        ingest_delay(path, query, f"during a ~{query_s:.0f} s ngb query", every)
        export = ngb(
            "export", "--db", str(path), "--table", "measurements", "-o", str(out), "--force"
        )
        try:
            ingest_delay(path, export, "during ngb export --table measurements", every)
        finally:
            out.unlink(missing_ok=True)


def main(
    path: Path,
    size_gb: float,
    points: int,
    query_s: float,
    console: Callable[[Store], int],
    every_s: tuple[float, ...] = (1.0, 10.0),
    *,
    delays_only: bool = False,
) -> int:
    """Generate (or reuse) the store at ``path``, then every figure (``delays_only``: the
    writer's waits alone); ``console`` times the console's queries (``store.console_latency``)."""
    from ngb.sweeps.store.database import Store

    ensure_store(path, size_gb, points)
    print(f"uptime: {_uptime()}")
    if not delays_only:
        memory(path)
        console(Store(path))
    delays(path, query_s, every_s)
    print(f"uptime: {_uptime()}")
    return 0


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
