"""ngb from a notebook: measure two compilers on a small conv block, read the run back as pandas
DataFrames, and ask whether one is faster -- with the significance test the reports use.

    python examples/notebook_api.py [RESULTS.duckdb]

Settings are kept tiny (2 worker processes x 2 repetitions of ~50 ms) so it runs in seconds; drop
them to get ngb's defaults (stop once the 95 % interval is within +-2 %).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import ngb

QUICK = {"repetitions": 4, "workers": 2, "min_duration_s": 0.05, "warmup_s": 0.0,
         "quiet_check_s": 0.0, "verify": False}  # fmt: skip


def main(db: Path) -> None:
    run = "notebook-demo"
    eager = ngb.measure("conv", compiler="identity", width=16, batch=1, db=db, run=run, **QUICK)
    noop = ngb.measure("conv", compiler="noop", width=16, batch=1, db=db, run=run, **QUICK)
    for r in (eager, noop):
        # the throughput with its 95 % interval, as every report prints it (both bounds > 0)
        print(f"{r.label}: {r.summary()}")

    results, samples = ngb.open_results(db, run=run)
    print(results[["compiler", "batch", "throughput_mean", "throughput_ci_half", "verdict"]])
    print(samples.groupby("key")["throughput"].agg(["count", "mean"]))

    # noop does no work, so it is "faster" than eager by a wide, significant margin
    print("noop over eager:", ngb.compare(noop, eager))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "results.duckdb")
