"""Time from `ngb run` to its first stored result: a Slurm slot of the one-machine test cluster
against the built-in localhost (docs/SLURM.md quotes the figures).

Starts the test cluster of ``tests/slurm.py`` (root, Debian's slurm-wlm and munge) under a
temporary directory, adds a one-node ``part`` entry of its ``debug`` partition to a temporary
inventory, then launches ``ngb run SWEEP -d DEVICE --db ...`` for each sweep, alternating the
devices, and reads the first trial's ``ingested_at`` from the store. Prints ``uptime`` before
and after: the figures mean little without the load they were taken at.

    .venv/bin/python scripts/slurm_first_result.py [--repeats 3] [--conv-repeats 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.noop_sweeps import noop_sweep  # noqa: E402 - after the path above
from tests.slurm import SlurmCluster, missing  # noqa: E402

CONV = """name = "first"
device = "cpu"
[measure]
warmup_iters = 2
warmup_s = 0.05
min_iters = 5
min_duration_s = 0.15
quiet_check_s = 0.1
repetitions = 6
workers = 3
timeout_s = 60.0
[[matrix]]
models = ["conv"]
widths = [32]
depths = [1]
compilers = ["identity"]
batches = [1, 8]
"""


def first_result(sweep: Path, device: str, db: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from launching `ngb run` to its first stored result, and to its end."""
    argv = [sys.executable, "-m", "ngb.sweeps.cli", "run", str(sweep), "-d", device, "--db",
            str(db)]  # fmt: skip
    t0 = time.time()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=True)
    total = time.time() - t0
    run_id = next(line.split()[1] for line in res.stdout.splitlines() if "started" in line)
    with duckdb.connect(str(db), read_only=True) as conn:
        row = conn.execute(
            "SELECT epoch(min(ingested_at)) FROM trials WHERE run_id = ?", [run_id]
        ).fetchone()
    assert row is not None and row[0] is not None, f"run {run_id} stored no result"
    return float(row[0]) - t0, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="noop sweeps per device")
    parser.add_argument("--conv-repeats", type=int, default=2, help="conv sweeps per device")
    args = parser.parse_args()
    why = missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ngb-slurm-") as tmp:
        root = Path(tmp)
        cluster = SlurmCluster.create(root / "cluster", cpus=2)
        cluster.start()
        try:
            env = {**cluster.env(), "NGB_HOME": str(root / "home")}
            add = [sys.executable, "-m", "ngb.sweeps.cli", "devices", "add-slurm", "part",
                   "--partition", "debug", "--python", sys.executable, "--workdir",
                   str(root / "w")]  # fmt: skip
            subprocess.run(add, env=env, capture_output=True, check=True, timeout=120)
            noop, conv = root / "noop.toml", root / "conv.toml"
            noop.write_text(noop_sweep(2, name="first").to_toml())
            conv.write_text(CONV)
            print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
            for sweep, repeats in ((noop, args.repeats), (conv, args.conv_repeats)):
                for _ in range(repeats):
                    for device in ("part", "localhost"):
                        first, total = first_result(sweep, device, root / "r.duckdb", env)
                        print(f"{sweep.stem:5} {device:9} first result {first:5.1f} s, "
                              f"run {total:5.1f} s", flush=True)  # fmt: skip
            print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        finally:
            cluster.cancel_all()
            cluster.stop()
    return 0


if __name__ == "__main__":
    os.environ.pop("SLURM_CONF", None)  # the test cluster's own, through cluster.env()
    raise SystemExit(main())
