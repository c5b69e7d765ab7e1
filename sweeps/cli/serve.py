"""``ngb serve``: a model under load on this machine (``ngb.sweeps.api.serving``, issue 43).

The options are ``ngb.serve``'s; this module parses them, prints each compiler's lines as it is
served, and the compilers side by side at the end (or one JSON object with ``--json``).
"""

from __future__ import annotations

import json
import sys

import click
from ngb.core.records.serve_settings import SCENARIOS
from ngb.sweeps.cli.options import NON_NEGATIVE, POSITIVE


@click.command("serve")
@click.argument("model")
@click.option(
    "--compiler", "-c", required=True,
    help="Compiler, or several comma-separated: served one after another, side by side.",
)  # fmt: skip
@click.option("--scenario", type=click.Choice(SCENARIOS), default="server", show_default=True,
              help="server: open loop at --qps; the others are MLPerf LoadGen's.")  # fmt: skip
@click.option("--qps", type=POSITIVE, help="Offered queries per second (server; a peak search "
              "starts here, default half the warm-up's closed-loop rate).")  # fmt: skip
@click.option(
    "--duration",
    type=POSITIVE,
    default=30.0,
    show_default=True,
    help="Seconds of load (server, single/multistream; offline: at the warm-up rate).",
)
@click.option("--p99-ms", type=POSITIVE, help="Latency budget: does the p99 show it is met?")
@click.option("--find-peak", is_flag=True, help="Search the highest QPS whose p99 meets "
              "--p99-ms: QPS* with its 95 % interval.")  # fmt: skip
@click.option("--batch", "-b", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--width", type=click.IntRange(min=1), help="Channels / embedding (conv/mha).")
@click.option("--depth", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--input-size", type=click.IntRange(min=1), help="Image side override.")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--precision", help="default, fp32, tf32, bf16 or fp16.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="Compiler option (repeatable), e.g. -o nireq=4.")  # fmt: skip
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the arrival schedule (a peak search's probe i uses seed + i).",
)
@click.option("--burstiness", type=POSITIVE, default=1.0, show_default=True,
              help="Gamma shape of the gaps: 1 Poisson, below 1 burstier.")  # fmt: skip
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    help="Requests in flight (default: the runtime's own; OpenVINO's nireq).",
)
@click.option(
    "--max-batch",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Dynamic batching: at most this many requests a call (compiled at it).",
)
@click.option(
    "--max-queue-delay-ms",
    type=NON_NEGATIVE,
    default=0.0,
    show_default=True,
    help="Dynamic batching: how long the oldest request waits for others.",
)
@click.option("--samples-per-query", type=click.IntRange(min=1), default=8, show_default=True,
              help="multistream: requests per query.")  # fmt: skip
@click.option(
    "--probe-s",
    type=POSITIVE,
    default=60.0,
    show_default=True,
    help="Peak search: seconds of a boundary probe (bracket probes: a quarter).",
)
@click.option("--max-probe-s", type=POSITIVE, help="Peak search: a probe lengthened to reach "
              "--target, at most (default 8 x --probe-s).")  # fmt: skip
@click.option("--max-probes", type=click.IntRange(min=4), default=10, show_default=True)
@click.option(
    "--target",
    type=POSITIVE,
    default=0.05,
    show_default=True,
    help="Peak search: stop at this half-width of the interval (share of QPS*).",
)
@click.option("--warmup", type=NON_NEGATIVE, default=2.0, show_default=True,
              help="Seconds every runner is called before the load.")  # fmt: skip
@click.option("--threads", type=click.IntRange(min=1), help="Intra-op threads of the runtime.")
@click.option("--db", metavar="FILE", help="Store the answers in this results file, where "
              "`ngb advise --p99-ms` finds the server-scenario p99.")  # fmt: skip
@click.option("--run", "run_id", metavar="ID", help="Run id to store them under "
              "(default with --db: serve-<time>).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
def serve(
    model: str, compiler: str, scenario: str, qps: float | None, duration: float,
    p99_ms: float | None, find_peak: bool, batch: int, width: int | None, depth: int,
    input_size: int | None, device: str, precision: str | None, options: tuple[str, ...],
    seed: int, burstiness: float, concurrency: int | None, max_batch: int,
    max_queue_delay_ms: float, samples_per_query: int, probe_s: float,
    max_probe_s: float | None, max_probes: int, target: float, warmup: float,
    threads: int | None, db: str | None, run_id: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Serve MODEL compiled by each compiler here, under load, and print the latency from the
    scheduled time (p50/p90/p99 with 95 % intervals), the rates, the issue lag and the verdict;
    with --find-peak --p99-ms X, QPS* and its interval, compilers side by side."""
    from ngb.core.base.errors import NgbError
    from ngb.sweeps.api.serving import serve as serve_api
    from ngb.sweeps.cli.measure import stdout_to_stderr
    from ngb.sweeps.cli.options import parse_option

    names = [c.strip() for c in compiler.split(",") if c.strip()]

    def call() -> object:
        return serve_api(
            model, names, scenario, qps=qps, duration=duration, p99_ms=p99_ms,
            find_peak=find_peak, batch=batch, width=width, depth=depth, input_size=input_size,
            device=device, precision=precision, options=dict(parse_option(o) for o in options),
            seed=seed, burstiness=burstiness, concurrency=concurrency, max_batch=max_batch,
            max_queue_delay_ms=max_queue_delay_ms, samples_per_query=samples_per_query,
            probe_s=probe_s, max_probe_s=max_probe_s, max_probes=max_probes, target=target,
            warmup=warmup, threads=threads, db=db, run=run_id, progress=not as_json,
        )  # fmt: skip

    if as_json:
        with stdout_to_stderr():  # compiler chatter must not break the one JSON object
            answers = call()
    else:
        answers = call()
    assert isinstance(answers, list)
    if as_json:
        click.echo(json.dumps({"served": [a.to_dict() for a in answers]}, default=_plain))
    else:
        for a in answers:
            _print_one(a)
        if len(answers) > 1:
            click.echo(_side_by_side(answers), nl=False)
    failed = [a for a in answers if not a.ok]
    if failed:
        lines = "; ".join(f"{a.compiler}: {a.error}" for a in failed)
        if len(failed) == len(answers):
            raise NgbError(lines)
        click.echo(f"error: {lines}", err=True)
        sys.exit(1)


def _plain(value: object) -> object:
    """JSON for what ``json`` does not know (NaN stays a float; numpy numbers as numbers)."""
    if hasattr(value, "item"):
        return value.item()  # type: ignore[union-attr]
    return str(value)


def _print_one(a: object) -> None:
    from ngb.core.serving.serve_stats import describe
    from ngb.sweeps.api.serving import Served

    assert isinstance(a, Served)
    if a.outcome is None:
        return
    o = a.outcome
    head = f"== {o.label} ({o.host}): {o.settings.scenario}"
    if o.precision:
        head += f", {o.precision}"
    click.echo(head)
    if o.summary is not None:
        for line in describe(o.summary):
            click.echo(f"  {line}")
    if o.peak is not None:
        click.echo(f"  {o.peak.describe()}")
        click.echo(f"  search: {o.finished_at - o.started_at:.0f} s wall in all")


def _side_by_side(answers: list[object]) -> str:
    """One line per compiler: QPS* and its interval, or the p99 and verdict of the run."""
    from ngb.core.serving.serve_stats import describe_tail
    from ngb.sweeps.api.serving import Served

    rows = []
    for a in answers:
        assert isinstance(a, Served)
        o = a.outcome
        if o is None:
            rows.append(f"{a.compiler:14} failed: {a.error}")
        elif o.peak is not None:
            p = o.peak
            rows.append(
                f"{a.compiler:14} {p.text()}  ({len(p.probes)} probes,"
                f" {o.finished_at - o.started_at:.0f} s)"
            )
        elif o.summary is not None:
            s = o.summary
            rows.append(f"{a.compiler:14} {describe_tail(s.latency['p99'])}  {s.verdict}")
    return "side by side:\n" + "\n".join(f"  {r}" for r in rows) + "\n"
