"""What shipping a user's model costs: first upload, a later run's reuse check, the device's hash.

One real OpenSSH sshd on loopback (``tests/sshd.py``), one device. A model file of ``--mb``
megabytes (random bytes: the transfer cannot compress it) and a small code folder are shipped with
``ngb.devices.artifacts.ship_artifacts`` twice: the first call uploads both (SFTP + one install
command that checks each upload's sha256), the second only asks the device which hashes its cache
holds. Then the agent's check before use (``ngb.core.base.artifact_hashes.verify_shipped``) is timed
cold (the
file is hashed) and warm (memoised by path, size and mtime, as for a run's later trials).

Figures from a shared, busy workstation are noisy; loopback SFTP is no network.

Usage: python benchmarks/artifact_shipping.py [--mb 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


async def bench(args: argparse.Namespace, tmp: Path) -> None:
    sys.path.insert(0, str(ROOT))
    import dataclasses

    from ngb.core.base import artifact_files
    from ngb.core.base.artifact_hashes import verify_shipped
    from ngb.core.models import model_sources
    from ngb.devices.artifacts import ShipItem, ship_artifacts
    from ngb.devices.ssh import SshTransport

    from tests.sshd import SshdServer

    server = SshdServer.create(tmp / "sshd", names=("dev-a",))
    server.start()
    try:
        os.environ["NGB_HOME"] = str(tmp / "home")
        known = [server.write_known_hosts(tmp / "known_hosts")]
        model = tmp / "model.onnx"
        with open(model, "wb") as fh:
            for _ in range(args.mb):
                fh.write(os.urandom(1 << 20))
        code = tmp / "src" / "tinynet"
        code.mkdir(parents=True)
        for i in range(20):
            (code / f"layer{i}.py").write_text(f"def build():\n    return {i}\n" * 50)
        items = [ShipItem(model_sources.sha256_of(p), p.name, str(p)) for p in (model, code)]
        uploads, reuses, cold, warm = [], [], [], []
        for i in range(args.repeat):
            dev = dataclasses.replace(server.device("dev-a"), workdir=str(tmp / f"device{i}"))
            async with SshTransport(dev, known_hosts=known, ssh_config=[]) as t:
                t0 = time.perf_counter()
                first = await ship_artifacts(t, dev, items)
                t1 = time.perf_counter()
                again = await ship_artifacts(t, dev, items)
                t2 = time.perf_counter()
            assert len(first.uploaded) == 2 and len(again.reused) == 2
            uploads.append(t1 - t0)
            reuses.append(t2 - t1)
            source = {"artifacts": [{"name": it.name, "sha256": it.sha256} for it in items]}
            artifact_files._HASHES.clear()  # cold: as the first trial of a run sees it
            t3 = time.perf_counter()
            assert verify_shipped(source, Path(first.workdir) / "cache") is None
            t4 = time.perf_counter()
            assert verify_shipped(source, Path(first.workdir) / "cache") is None
            t5 = time.perf_counter()
            cold.append(t4 - t3)
            warm.append(t5 - t4)
        med = statistics.median
        print(f"model file {args.mb} MB + code folder (20 files), {args.repeat} fresh devices, "
              f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
        print(f"  first run, upload + verified install: median {med(uploads):.2f} s "
              f"({args.mb / med(uploads):.0f} MB/s)")  # fmt: skip
        print(f"  later run, reuse check (one command): median {med(reuses) * 1000:.0f} ms")
        print(f"  device check before use, cold hash:   median {med(cold) * 1000:.0f} ms")
        print(f"  device check before use, memoised:    median {med(warm) * 1000:.2f} ms")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ngb-ship-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()
