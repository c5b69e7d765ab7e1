"""``ngb measure`` (one trial on this machine) and ``ngb compilers`` (what can run here).

Both import the measurement engine and rich inside the command bodies, so ``ngb --help`` stays
light.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click
from ngb.core.base.errors import ConfigError
from ngb.core.records.types import MeasureSettings
from ngb.sweeps.cli import safe_text, short_words
from ngb.sweeps.cli.options import FINITE, parse_option
from ngb.sweeps.cli.own_model import own_model_options
from ngb.sweeps.spec.checks import accuracy_table, check_timm_names
from ngb.sweeps.spec.one_trial import one_trial

if TYPE_CHECKING:
    from ngb.core.records.types import TrialResult, TrialSpec

# --help states the defaults a run records, read from the settings (not copied into the text)
_DEFAULT = MeasureSettings()


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (Python prints and native libraries' fd 1) to stderr."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real fd 1 (embedded use): redirect Python-level output only
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _fmt(value: float | None, spec: str = ".3g", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{spec}}{unit}"


@click.command("measure")
@click.argument("model")
@click.option("--compiler", "-c", required=True, help="Compiler name (see `ngb compilers`).")
@own_model_options
@click.option("--batch", "-b", type=int, default=1, show_default=True)
@click.option("--depth", type=int, default=1, show_default=True, help="Stacked blocks (conv/mha).")
@click.option("--width", type=int, help="Channels / embedding size (conv/mha blocks).")
@click.option("--input-size", type=int, help="Image side override.")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--optimisation", default="none", show_default=True)
@click.option(
    "--algorithm",
    default="default",
    show_default=True,
    help="Convolution primitive: default (the compiler's own), direct, gemm, sparse-csr, "
    "sparse-bsr[-B] (see `ngb compilers`).",
)
@click.option(
    "--option",
    "-o",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Compiler option (repeatable), e.g. -o hint=throughput.",
)
@click.option(
    "--repetitions", type=int, help="Fixed count of timed loops (default: stop on confidence)."
)
@click.option(
    "--ci-target",
    type=FINITE,
    help=f"Stop when the 95% CI is within ± this x the mean ({_DEFAULT.ci_target:g}).",
)
@click.option(
    "--min-repetitions",
    type=int,
    help=f"Adaptive: at least this many ({_DEFAULT.min_repetitions}).",
)
@click.option(
    "--max-repetitions", type=int, help=f"Adaptive: at most this many ({_DEFAULT.max_repetitions})."
)
@click.option(
    "--max-measure-s",
    type=FINITE,
    help=f"Adaptive: seconds of warm-up + timed loops, at most ({_DEFAULT.max_measure_s:g}).",
)
@click.option(
    "--workers",
    type=int,
    help=f"Worker processes, at least (adaptive; {_DEFAULT.workers}) or exactly (fixed).",
)
@click.option(
    "--max-workers",
    type=int,
    help=f"Adaptive: worker processes, at most ({_DEFAULT.max_workers}).",
)
@click.option(
    "--values-per-worker",
    type=int,
    help=f"Adaptive: timed repetitions per worker process ({_DEFAULT.values_per_worker}).",
)
@click.option(
    "--retry-disturbed",
    type=int,
    help=f"Times to wait and retry a disturbed share ({_DEFAULT.disturbed_retries}).",
)
@click.option(
    "--min-duration",
    type=FINITE,
    help=f"Seconds per timed loop, at least ({_DEFAULT.min_duration_s:g}).",
)
@click.option(
    "--min-iters", type=int, help=f"Calls per timed loop, at least ({_DEFAULT.min_iters})."
)
@click.option(
    "--warmup-iters", type=int, help=f"Warm-up calls, at least ({_DEFAULT.warmup_iters})."
)
@click.option(
    "--warmup-s", type=FINITE, help=f"CPU warm-up seconds, at least ({_DEFAULT.warmup_s:g})."
)
@click.option("--threads", type=int, help="Intra-op threads for the runtime.")
@click.option(
    "--timeout", "timeout_s", type=FINITE, help="Per-trial limit in seconds (agent only)."
)
@click.option("--no-verify", is_flag=True, help="Skip the comparison with torch eager.")
@click.option(
    "--precision",
    help="default (each vendor's own), fp32 (strict, no TF32), tf32, bf16 or fp16.",
)
@click.option(
    "--allocator",
    type=click.Choice(["retain", "system"]),
    help="system (default: glibc's defaults, as a plain python deployment and timm's "
    "benchmark.py run) or retain (glibc keeps memory freed between calls).",
)
@click.option(
    "--profile", is_flag=True,
    help="After the timed trial, one more process profiles it per operator and prints the table "
    "`ngb report ops` prints for it; the timed numbers are not touched. Stored with --db/--run.",
)  # fmt: skip
@click.option(
    "--accuracy",
    metavar="DATA",
    help="After the timed loops, run the compiled model over a labelled set, beside eager fp32: "
    "top-1 (top-5) with a 95 % interval, agreement and McNemar's test of the drop. DATA: digits "
    "(scikit-learn's load_digits), an .npz with inputs and labels, or module:loader / "
    "file.py:loader.",
)
@click.option(
    "--db",
    metavar="FILE",
    help="Store the result in this results file (default with --run: the data dir's), where "
    "`ngb report`, `ngb query` and ngb.open_results find it.",
)
@click.option(
    "--run",
    "run_id",
    metavar="ID",
    help="Run id to store the result under (default with --db: measure-<time>); an existing "
    "run collects one more trial.",
)
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
def measure(
    model: str,
    compiler: str,
    kwargs: tuple[str, ...],
    inputs: tuple[str, ...],
    code: str | None,
    sweep_file: str | None,
    model_name: str | None,
    batch: int,
    depth: int,
    width: int | None,
    input_size: int | None,
    device: str,
    optimisation: str,
    algorithm: str,
    options: tuple[str, ...],
    repetitions: int | None,
    ci_target: float | None,
    min_repetitions: int | None,
    max_repetitions: int | None,
    max_measure_s: float | None,
    workers: int | None,
    max_workers: int | None,
    values_per_worker: int | None,
    retry_disturbed: int | None,
    min_duration: float | None,
    min_iters: int | None,
    warmup_iters: int | None,
    warmup_s: float | None,
    threads: int | None,
    timeout_s: float | None,
    no_verify: bool,
    precision: str | None,
    allocator: str | None,
    profile: bool,
    accuracy: str | None,
    db: str | None,
    run_id: str | None,
    as_json: bool,
) -> None:
    """Measure MODEL compiled by one compiler, here.

    MODEL is a timm name, conv/mha (with --width), package.module:factory, path/to/file.py:factory,
    a .onnx file or a .pt2 program (torch.export.save), or a [[models]] name with --sweep. Your
    own model is stored as --name, else under its file's own name (resmlp.py:build), so runs from
    any folder, a sweep and ngb.measure form one series in `ngb history`.
    """
    from ngb.core.compilers import compiler_class
    from ngb.core.records import events
    from ngb.core.trial.measure import run_trial
    from ngb.sweeps.cli.own_model import model_source, stored_name

    compiler_class(compiler)  # unknown name -> one-line error with close matches
    source = model_source(model, kwargs, inputs, code, sweep_file, _warn)
    name = stored_name(model, source, model_name, sweep_file is not None)
    if source is not None and input_size is not None:
        raise ConfigError("--input-size applies to timm names; give img_size with -k or --input")
    settings = {
        "repetitions": repetitions,
        "ci_target": ci_target,
        "min_repetitions": min_repetitions,
        "max_repetitions": max_repetitions,
        "max_measure_s": max_measure_s,
        "workers": workers,
        "max_workers": max_workers,
        "values_per_worker": values_per_worker,
        "disturbed_retries": retry_disturbed,
        "min_duration_s": min_duration,
        "min_iters": min_iters,
        "warmup_iters": warmup_iters,
        "warmup_s": warmup_s,
        "threads": threads,
        "timeout_s": timeout_s,
        "verify": False if no_verify else None,
        "precision": precision,
        "allocator": allocator,
        "profile": True if profile else None,
        "accuracy": None if accuracy is None else accuracy_table(accuracy, "--accuracy"),
    }
    spec = one_trial(
        model=name,
        compiler=compiler,
        batch=batch,
        depth=depth,
        width=width,
        optimisation=optimisation,
        algorithm=algorithm,
        device=device,
        input_size=input_size,
        options=dict(parse_option(o) for o in options),
        settings={k: v for k, v in settings.items() if v is not None},  # an option not given
        source=source,
        settings_name="measure",
        accuracy_name="--accuracy",
    )
    if source is None:  # refused for every compiler, as ngb run
        # an unknown timm name: one line, before anything is built; against the cached list of
        # timm's names, so this process never imports timm and torch (3.4 s on the 2-core VM)
        # ahead of the trial's own worker interpreters (issue 44). After the settings' checks:
        # a cold cache is written here, and a refused setting should leave nothing behind
        check_timm_names([model])
    store, stored = None, ""
    if db is not None or run_id is not None:
        from ngb.sweeps.store import measure as measure_store

        measure_store.check_run_id(run_id)  # blank, a newline, an escape: one line now
        store = measure_store.writable_store(db)  # refused now, not after the measurement
        run_id = run_id or measure_store.default_run_id("measure")

    # Progress lines are for a person watching: only on a terminal, so that a failed trial
    # leaves exactly its one `error:` line in a log or a pipe.
    interactive = not as_json and sys.stderr.isatty()

    def show_progress(event: Mapping[str, object]) -> None:
        if not interactive:
            return
        if event["type"] == events.PHASE:
            click.echo(f"  {event['phase']} ...", err=True)
        elif event["type"] == events.TUNING:
            click.echo(f"  tuning {event.get('trials_done')}/{event.get('budget')}", err=True)
        elif event["type"] == events.LOG and event.get("level") != "debug":
            click.echo(f"  {event.get('msg')}", err=True)  # budgets, tuning milestones

    if interactive and spec.measure.repetitions is None:  # what the run will spend, up front
        from ngb.core.trial.budget import (
            upfront,  # what is decided now; a slow first call may cut it
        )

        m = spec.measure
        click.echo(
            f"  {upfront(m)}; "
            f"trial timeout {m.timeout_s:g} s"
            + ("; then a profile pass, not timed" if m.profile else "")
            + ("; accuracy after the timed loops" if m.accuracy else ""),
            err=True,
        )

    from ngb.devices.paths import get_paths

    # The long-lived cache keeps TVM tuning databases between measurements, as on a device.
    # Only the cache folder is made (measure needs no config or data folder), and a read-only
    # home measures without one: a tuning database is then rebuilt, nothing else is lost.
    cache_dir: Path | None = get_paths().cache
    try:
        get_paths().cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        cache_dir = None
    if as_json:
        with stdout_to_stderr():  # compiler chatter must not break the one JSON object
            result = run_trial(spec, emit=show_progress, cache_dir=cache_dir)
    else:
        result = run_trial(spec, emit=show_progress, cache_dir=cache_dir)
    profiled = result.extra.get("profile")  # read before a save moves it to its own tables
    ops = _trial_ops(spec, result) if profile and result.ok and not as_json else None
    if store is not None and run_id is not None:
        from ngb.sweeps.store import measure as measure_store

        stored = measure_store.save(store, run_id, result, "ngb measure")
    if as_json:
        if profiled is not None:  # the one object keeps the profile the store took apart
            result.extra["profile"] = profiled
        click.echo(events.encode(result.to_dict()))
    elif result.ok:
        _print_summary(spec, result)
        if ops is not None:
            click.echo(ops, nl=False)
    if store is not None:
        click.echo(stored, err=True)
    if not result.ok:
        # The CLI's one format: `error: <kind>: <reason>` (kind kept when it says more); with
        # --json too, on stderr, so a failed trial is never silent (stdout stays one object).
        kind = "" if result.error_kind == "error" else f"{result.error_kind}: "
        click.echo(safe_text(short_words(f"error: {kind}{result.error}")), err=True)
        sys.exit(1)


def _algorithm_line(result: TrialResult) -> list[tuple[str, str]]:
    """What ran for a trial's algorithm (ngb.core.models.algorithms) and what its format stores;
    nothing for the compiler's own choice."""
    from ngb.core.models.algorithms import facts_text

    facts = result.extra.get("algorithm")
    return [("algorithm", facts_text(facts))] if isinstance(facts, dict) else []


def _warn(line: str) -> None:
    click.echo(safe_text(line), err=True)


def _reference_name(spec: TrialSpec) -> str:
    """What the output was checked against (``core/model_build.reference_output``): eager
    PyTorch, except for an ONNX file, whose reference is ONNX Runtime with optimisations off."""
    source = getattr(spec, "source", None)
    if isinstance(source, Mapping) and source.get("kind") == "onnx":
        return "ONNX Runtime (unoptimised)"
    return "eager"


def _as_row(result: TrialResult) -> dict[str, object]:
    """The columns of a stored result that ``derived.throughput`` reads (the store's names)."""
    return {
        "throughput_mean": result.throughput.mean,
        "throughput_ci_half": result.ci_half_width,
        "repetitions": result.throughput.n,
        "extra": result.extra,
    }


def _trial_ops(spec: TrialSpec, result: TrialResult) -> str:
    """The profile pass as ``ngb report ops`` prints it once stored (``ops.trial_ops``), or the
    one line saying why there is none."""
    from ngb.sweeps.report.ops import trial_ops
    from ngb.sweeps.report.render import render
    from ngb.sweeps.store.measure import HERE

    found = trial_ops(spec, result, _as_row(result), HERE)
    if isinstance(found, str):
        return safe_text(f"profile: none ({found})") + "\n"
    return render(found)


def _print_summary(spec: TrialSpec, result: TrialResult) -> None:
    from ngb.sweeps.report import derived
    from ngb.sweeps.report.numbers import format_value
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    t, lat = result.throughput, result.latency_ms
    table = Table(title=f"{spec.label}  ({result.host})")
    table.add_column("")
    table.add_column("throughput (samples/s)", justify="right")
    table.add_column("latency (ms/call)", justify="right")
    for stat in ("mean", "std", "median", "p90", "p99", "min", "max"):
        # 4 significant digits, never in exponent form (38360, not 3.836e+04), as elsewhere
        table.add_row(stat, format_value(getattr(t, stat)), format_value(getattr(lat, stat)))
    table.add_row("CoV", _fmt(t.cov, ".2%"), _fmt(lat.cov, ".2%"))
    table.add_row("n", str(t.n), str(lat.n))
    console.print(table)
    facts = [
        (
            "repetitions",
            f"{t.n} ({sum(r['iters'] for r in result.repetitions)} calls) "
            f"in {result.workers} process(es)",
        ),
        # the one number to quote, rounded to what its interval supports (ngb.sweeps.report.numbers,
        # as every report and the console print it)
        (
            "throughput",
            f"{derived.throughput(_as_row(result)).number()} samples/s "
            f"(95 % interval over {result.workers} process(es){_time_part(result)})",
        ),
        ("latency per call", _tails_line(result)),
        ("verdict", f"{result.verdict}: {result.verdict_reason}"),
        ("disturbed", "YES" if result.disturbed else "no"),
        ("unstable", "YES (CoV above threshold)" if result.unstable else "no"),
        (
            "export / compile / tune",
            " / ".join(
                _fmt(v, ".3g", " s") for v in (result.export_s, result.compile_s, result.tune_s)
            ),
        ),
        ("measure (warm-up + timed loops)", _measure_seconds(result)),
        ("first call", _fmt(result.first_call_s, ".3g", " s")),
        (
            "cpu (system mean / max)",
            f"{_fmt(result.cpu_percent_mean, '.0f', '%')} / "
            f"{_fmt(result.cpu_percent_max, '.0f', '%')}",
        ),
        (
            "cpu (this process)",
            _fmt(result.proc_cpu_percent_mean, ".0f", " % (100 % = one core)"),
        ),
        ("peak RSS", _fmt(result.peak_rss_mb, ".0f", " MiB") + _phases_text(result)),
        ("precision", f"{result.precision or '-'} (asked: {spec.measure.precision})"),
        ("allocator", str(result.extra.get("allocator", "-"))),
        *_algorithm_line(result),
        (
            f"max |err| vs {_reference_name(spec)}",
            _fmt(result.max_abs_err, ".3g") + _fidelity_text(result.extra.get("fidelity")),
        ),
        ("energy", _energy_line(result)),
        ("params / MACs", f"{_fmt(result.params, ',')} / {_fmt(result.macs, ',')}"),
        ("threads", ", ".join(f"{k}={v}" for k, v in result.threads.items() if v is not None)),
        ("versions", ", ".join(f"{k} {v}" for k, v in result.versions.items())),
    ]
    if spec.measure.accuracy is not None:
        from ngb.core.statistics.accuracy_stats import summary

        said = result.extra.get("accuracy_error")
        record = result.extra.get("accuracy")
        line = f"error: {said}" if said else summary(record) if isinstance(record, dict) else "-"
        facts.append((f"accuracy ({escape(spec.measure.accuracy.data)})", escape(line)))
    tuning = result.extra.get("tuning")
    if isinstance(tuning, dict) and tuning.get("reused"):
        from ngb.core.compilers.tvm_tuning import provenance_line

        facts.append(("tuning", provenance_line(tuning)))  # type: ignore[arg-type]
    if result.gpu_mem_mb is not None:
        facts.append(
            ("GPU memory", f"{_fmt(result.gpu_mem_mb, '.0f', ' MiB')} ({result.gpu_mem_source})")
        )
    for name, value in facts:
        console.print(f"[bold]{name}:[/] {value}", highlight=False)


def _fidelity_text(fidelity: object) -> str:
    """``; SQNR 42.1 dB, top-1 agreement 8/8`` on the verify batch (``measure.fidelity``)."""
    if not isinstance(fidelity, dict):
        return ""
    parts = []
    sqnr = fidelity.get("sqnr_db")
    if fidelity.get("exact"):
        parts.append("outputs equal")
    elif isinstance(sqnr, int | float):
        parts.append(f"SQNR {sqnr:.1f} dB")
    share, rows = fidelity.get("top1_agreement"), fidelity.get("rows")
    if isinstance(share, int | float) and isinstance(rows, int):
        parts.append(f"top-1 agreement {round(share * rows)}/{rows}")
    return f"; {', '.join(parts)}" if parts else ""


def _time_part(result: TrialResult) -> str:
    """What re-runs added to the interval (ngb.core.statistics.reruns), as the trial recorded it."""
    measure = result.extra.get("measure")
    said = measure.get("reruns") if isinstance(measure, dict) else None
    note = said.get("note") if isinstance(said, dict) else None
    return f", {note}" if note else ""


def _tails_line(result: TrialResult) -> str:
    """p50/p90/p99 with their order-statistic intervals, or why one is not claimed."""
    from ngb.core.statistics.percentiles import describe_all

    lat = result.latency_ms
    values = {"p50": lat.p50, "p90": lat.p90, "p99": lat.p99}
    return describe_all(values, result.latency_ci_ms, result.latency_calls) + " (95 %)"


def _phases_text(result: TrialResult) -> str:
    """`` (compile 410 / warmup 420 / timed 430 MiB, vmhwm-per-phase)`` where recorded."""
    phases = result.peak_rss_phase_mb
    if not phases:
        return ""
    body = " / ".join(f"{name} {mb:.0f}" for name, mb in phases.items())
    return f" ({body} MiB, {result.rss_source})"


def _measure_seconds(result: TrialResult) -> str:
    """Seconds of warm-up and timed loops over every worker (apart from compile and tuning)."""
    workers = result.extra.get("workers")
    if not isinstance(workers, list):
        return "-"
    total = sum(float(w.get("measure_s") or 0) + float(w.get("warmup_s") or 0) for w in workers)
    return f"{total:.3g} s in {len(workers)} process(es)"


def _energy_line(result: TrialResult) -> str:
    from ngb.core.trial.energy import summary

    return summary(result)


@click.command("compilers")
@click.option("--all", "show_all", is_flag=True, help="Include internal ones (noop).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def compilers(show_all: bool, as_json: bool) -> None:
    """List registered compilers, whether each can run on this machine, and why not."""
    from ngb.core.compilers import compiler_class, list_compilers

    rows = []
    for name in list_compilers(include_internal=show_all):
        try:
            cls = compiler_class(name)
            ok, reason = cls.available()
            description = cls.description
        except ModuleNotFoundError as exc:
            ok, reason, description = (
                False,
                f"not in this ngb build (module {exc.name} missing)",
                "",
            )
        rows.append(
            {"name": name, "available": bool(ok), "reason": reason, "description": description}
        )
    if as_json:
        click.echo(json.dumps({r["name"]: r for r in rows}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="compilers")
    for col in ("name", "here", "description / reason"):
        table.add_column(col)
    for r in rows:
        here = "[green]yes[/]" if r["available"] else "[red]no[/]"
        table.add_row(
            str(r["name"]), here, str(r["description"] if r["available"] else r["reason"])
        )
    Console().print(table)
