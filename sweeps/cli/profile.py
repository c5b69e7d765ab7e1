"""``ngb profile``: where one model's time goes under each compiler
(``ngb.core.compilers.profiling``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from ngb.core.base.errors import NgbError, one_line
from ngb.core.base.scratch import scratch_dir
from ngb.sweeps.cli.own_model import own_model_options
from ngb.sweeps.report.render import FORMATS

if TYPE_CHECKING:
    from ngb.core.compilers.profiling import Profile
    from ngb.core.records.types import TrialSpec
    from ngb.sweeps.store.database import Store


@click.command("profile")
@click.argument("model")
@own_model_options
@click.option(
    "--compilers", "-c", default="identity,torchscript,onnxruntime,openvino", show_default=True,
    help="Comma-separated compilers to profile side by side.",
)  # fmt: skip
@click.option("--batch", "-b", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--width", type=click.IntRange(min=1), help="Channels / embedding (conv/mha).")
@click.option("--depth", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--calls", type=click.IntRange(min=1, max=10_000), default=20, show_default=True,
              help="Profiled calls per compiler (after the warm-up ones).")  # fmt: skip
@click.option("--warmup", type=click.IntRange(min=0, max=10_000), default=5, show_default=True)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option(
    "--db", type=click.Path(dir_okay=False), help="Store the profiles in this results file."
)
@click.option("--run", "run_id", help="Run id to store them under (default: profile-<time>).")
def profile(
    model: str, kwargs: tuple[str, ...], inputs: tuple[str, ...], code: str | None,
    sweep_file: str | None, model_name: str | None, compilers: str, batch: int,
    width: int | None, depth: int, calls: int, warmup: int, fmt: str, db: str | None,
    run_id: str | None,
) -> None:  # fmt: skip
    """Profile MODEL on this machine with each compiler's own profiler, one process each, apart
    from any timed trial, and print the operator classes and kernels side by side.

    MODEL is what `ngb measure` takes: a timm name, conv/mha (with --width), your own
    package.module:factory, file.py:factory (with -i), .onnx or .pt2 file, or a [[models]] name
    with --sweep; stored under the same name `ngb measure` gives it."""
    from ngb.core.base.isolate import call_in_child
    from ngb.core.records.types import TrialSpec
    from ngb.core.trial.profile_pass import profile_trial
    from ngb.sweeps.cli.own_model import model_source, stored_name
    from ngb.sweeps.report.catalog import render
    from ngb.sweeps.report.ops import ops_report
    from ngb.sweeps.spec.checks import check_compiler, check_timm_names, check_trial

    store = None
    if db is not None or run_id is not None:  # refused before anything is profiled
        from ngb.sweeps.store.measure import check_run_id, writable_store

        check_run_id(run_id)  # blank, a newline, an escape: one line now, as ngb measure
        store = writable_store(db)
    names = [c.strip() for c in compilers.split(",") if c.strip()]
    if not names:
        raise NgbError("--compilers names no compiler")
    source = model_source(model, kwargs, inputs, code, sweep_file, _warn)
    shown = stored_name(model, source, model_name, sweep_file is not None)
    if source is None:
        check_timm_names([model])
    specs = [
        check_trial(
            TrialSpec(model=shown, compiler=check_compiler(name, "--compilers"), batch=batch,
                      width=width, depth=depth, source=source),
            "profile",
        )
        for name in names
    ]  # fmt: skip
    profiles, failed, points = [], [], []
    for name, spec in zip(names, specs, strict=True):
        click.echo(f"profiling {spec.label} ...", err=True)
        with scratch_dir("profile") as tmp:
            try:
                found = call_in_child(f"{name}", profile_trial, spec, Path(tmp), calls, warmup)
            except Exception as exc:  # one compiler failing never stops the others
                failed.append(f"{name}: {one_line(exc)}")
                continue
        profiles.append(found)
        points.append(spec)
    if not profiles:
        raise NgbError("no compiler could be profiled: " + "; ".join(failed))
    if store is not None:
        _store(store, run_id, list(zip(points, profiles, strict=True)))
    label = f"{shown}{f' w{width}' if width else ''}{f' d{depth}' if depth > 1 else ''} b{batch}"
    click.echo(render(ops_report(label, profiles, failed), fmt), nl=False)


def _warn(line: str) -> None:
    from ngb.sweeps.cli import safe_text

    click.echo(safe_text(line), err=True)


def _store(store: Store, run_id: str | None, found: list[tuple[TrialSpec, Profile]]) -> None:
    from ngb.sweeps.store.measure import HERE, default_run_id
    from ngb.sweeps.store.profiles import ProfilePoint, save_profiles

    run = run_id or default_run_id("profile")
    store.create_run(run, "profile", "", [HERE], 0, meta={"source": "ngb profile"})
    rows = [(ProfilePoint.of(spec, HERE, p.precision), p) for spec, p in found]
    save_profiles(store, run, rows)
    store.set_run_status(run, "finished")
    click.echo(f"stored: {len(rows)} profile(s) as run {run} in {store.path}", err=True)
