"""``ngb compare RUN_A RUN_B``: what moved between two runs, and what changed (see
``ngb.sweeps.report.compare``).

``--fail-above 5%`` makes it a regression gate for CI with three outcomes (``report/gate.py``):
pass, fail, or undecidable (A or B INVALID, no interval, an interval wider than the threshold,
a failure of the harness rather than the model, a point not measured in B). The table is printed
first; then exactly one summary line on stderr, on every exit, says the outcome and why.

Exit status (also in ``--help`` and docs/DESIGN.md):

- 0: pass (and without ``--fail-above``: the comparison was printed); an undecidable gate
  under ``--on-undecided pass`` or ``warn``;
- 1: an error (a bad option, an unknown run, an unreadable store, no shared point);
- 2: fail: a point slower than the threshold with 95 % confidence, or broken in B;
- 3: undecidable, under ``--on-undecided fail`` (the default).

Why undecidable fails by default: a gate exists to stop what nobody looked at, and an undecidable
comparison is exactly that -- a collapsed run on a loaded CI machine or a harness fault would
otherwise go green without anyone reading the table. Its own status (3, not 2) lets a pipeline
re-run the measurement instead of blaming the change; ``warn`` keeps the line and exits 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from ngb.sweeps.cli.options import emit_text, results_db_options

if TYPE_CHECKING:
    from ngb.sweeps.report.compare import Comparison

FORMATS = ("table", "markdown", "csv", "html")
GATE_FAILED = 2  # exit status of a failed --fail-above (1 stays "error")
GATE_UNDECIDED = 3  # exit status of an undecidable gate under --on-undecided fail
ON_UNDECIDED = ("fail", "pass", "warn")


@click.command(
    "compare",
    epilog="Exit status: 0 pass (or no gate; undecidable under --on-undecided pass/warn), "
    "1 error, 2 fail (slower beyond the threshold with 95 % confidence, or broken in RUN_B), "
    "3 undecidable under --on-undecided fail (RUN_A or RUN_B INVALID, no interval, an interval "
    "wider than the threshold, an infrastructure failure, a point not measured in RUN_B). One "
    "summary line on stderr on every exit.",
)
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--fail-above", "fail_above", default=None, metavar="PCT",
    help="Gate: exit 2 when a point is slower in RUN_B by more than PCT (5% or 0.05), 95 % sure.",
)  # fmt: skip
@click.option(
    "--on-undecided", type=click.Choice(ON_UNDECIDED), default="fail", show_default=True,
    help="What an undecidable gate does: fail (exit 3), pass (exit 0) or warn (exit 0, "
    "the summary line says undecidable).",
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
    run_a: str, run_b: str, fail_above: str | None, on_undecided: str, device: str | None,
    fmt: str, output: str | None, db: str | None, wait: float,
) -> None:  # fmt: skip
    """Every point RUN_A and RUN_B share: B / A, its verdict and what differs."""
    from ngb.core.base.errors import ConfigError
    from ngb.sweeps.report import compare as compare_runs
    from ngb.sweeps.report.compare_report import report as compare_report
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
    built = compare_report(comparison, threshold, package_lookup(store))
    if fmt == "html":
        from ngb.sweeps.figures.html_report import single_report_page

        text = single_report_page(built)
    else:
        text = render(built, fmt)
    emit_text(text, output, store.path)
    if threshold is None:
        click.echo(_plain_summary(comparison), err=True)
        return
    _finish_gate(comparison, threshold, on_undecided)


def _plain_summary(comparison: Comparison) -> str:
    """The one line of a comparison without a gate: how many points moved which way."""
    from ngb.sweeps.report.compare import FASTER, SLOWER

    verdicts = [c.verdict for c in comparison.points]
    slower, faster = verdicts.count(SLOWER), verdicts.count(FASTER)
    rest = len(verdicts) - slower - faster
    broken = f", {len(comparison.broken)} failed in B" if comparison.broken else ""
    return (
        f"compare: {len(verdicts)} shared point(s): {slower} slower, {faster} faster, "
        f"{rest} not significant{broken} (no gate: --fail-above not given)"
    )


def _finish_gate(comparison: Comparison, threshold: float, on_undecided: str) -> None:
    """Print the gate's one summary line and exit with its status (see module)."""
    from ngb.sweeps.cli import safe_text
    from ngb.sweeps.report.gate import FAIL, UNDECIDABLE, gate

    judged = gate(comparison, threshold)
    line = judged.summary()
    if judged.outcome == UNDECIDABLE and on_undecided != "fail":
        line += f" (--on-undecided {on_undecided}: exit 0)"
    click.echo(safe_text(line), err=True)
    if judged.outcome == FAIL:
        raise SystemExit(GATE_FAILED)
    if judged.outcome == UNDECIDABLE and on_undecided == "fail":
        raise SystemExit(GATE_UNDECIDED)
