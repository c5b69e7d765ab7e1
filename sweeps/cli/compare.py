"""``ngb compare RUN_A RUN_B``: what moved between two runs, and what changed (see
``ngb.sweeps.report.compare``).

``--fail-above 5%`` makes it a regression gate for CI: exit status 2 (errors keep 1) when a
point is slower in B by more than the threshold with 95 % confidence, or ran in A and failed in
B, with one line on stderr naming the points; the table is printed first either way.
"""

from __future__ import annotations

import click
from ngb.sweeps.cli.options import emit_text, results_db_options

FORMATS = ("table", "markdown", "csv", "html")
GATE_FAILED = 2  # exit status of a failed --fail-above (1 stays "error")


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--fail-above", "fail_above", default=None, metavar="PCT",
    help="Exit 2 when a point is slower in RUN_B by more than PCT (5% or 0.05), 95 % sure.",
)  # fmt: skip
@click.option("--device", default=None, help="Only this testbed device.")
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
    help="Output format (html: a self-contained page).",
)  # fmt: skip
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
    help="Write to this file instead of stdout.",
)  # fmt: skip
@results_db_options
def compare(
    run_a: str, run_b: str, fail_above: str | None, device: str | None, fmt: str,
    output: str | None, db: str | None, wait: float,
) -> None:  # fmt: skip
    """Every point RUN_A and RUN_B share: B / A, its verdict and what differs."""
    from ngb.core.errors import ConfigError
    from ngb.sweeps.report import compare as compare_runs
    from ngb.sweeps.report.history import package_lookup
    from ngb.sweeps.report.render import render
    from ngb.sweeps.store.database import Store

    threshold = None
    if fail_above is not None:
        try:
            threshold = compare_runs.parse_threshold(fail_above)
        except ValueError as exc:
            raise ConfigError(f"--fail-above: {exc}") from None
    store = Store(db, busy_timeout_s=wait)
    for run_id in (run_a, run_b):
        store.run(run_id)  # an unknown run: one line naming the known ones
    rows_a = store.trials(run_a, device)
    rows_b = store.trials(run_b, device)
    comparison = compare_runs.compare(run_a, rows_a, run_b, rows_b)
    if not comparison.points and not comparison.broken:
        raise ConfigError(
            f"runs {run_a} and {run_b} share no successful point"
            + (f" on device {device}" if device else "")
        )
    built = compare_runs.report(comparison, threshold, package_lookup(store))
    if fmt == "html":
        from ngb.sweeps.figures.html_report import single_report_page

        text = single_report_page(built)
    else:
        text = render(built, fmt)
    emit_text(text, output, store.path)
    if threshold is not None:
        failing, _ = compare_runs.regressions(comparison, threshold)
        if failing or comparison.broken:
            labels = [c.label for c in failing] + [f"{n} (failed)" for n, _ in comparison.broken]
            more = f" (+{len(labels) - 5} more)" if len(labels) > 5 else ""
            click.echo(
                f"fail: {len(failing)} point(s) slower than {fail_above} with 95 % confidence, "
                f"{len(comparison.broken)} failed in {run_b}: {', '.join(labels[:5])}{more}",
                err=True,
            )
            raise SystemExit(GATE_FAILED)
