"""A live run's store writes, recorded once and replayed: the writer's CPU, free of fleet noise.

The writer's CPU in a fleet run (``loopback_devices.py``) moves by ~10 % from run to run with
everything else on the two cores. This records what a run hands the store (every ``Store``
write, in order, with its arguments) and replays it into a new store, or a copy of an existing
one, as the run's writer does (inside ``deferred_checkpoints``, a results batch and the device
rows in one ``Store.batch``), once for each log length given, in a fresh process each:

    python benchmarks/writer_replay.py record writes.pkl -- --devices 128 --trials 4 --sleep 5
    python benchmarks/writer_replay.py replay writes.pkl [--store DB] [--log-bytes auto 4194304]

``auto`` is ngb's own rule (``wal_marker.checkpoint_bytes``); a number fixes the log length at
which the run checkpoints. Printed per replay: the CPU of the writes, the longest log, how
often the main file changed (each change makes a console's copy copy it whole again).

The recording is a pickle this script wrote: replay only your own.
"""

from __future__ import annotations

import argparse
import atexit
import os
import pickle
import runpy
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the ``Store`` methods a run writes through (the writer thread and the orchestrator)
WRITES = (
    "write_batch", "upsert_run_devices", "create_run", "upsert_run_device", "set_run_status",
    "record_error", "upsert_device", "ingest_results", "ingest_cpu_samples", "ingest_tuning",
    "record_probe",
)  # fmt: skip


def record(out: Path, bench_args: list[str]) -> None:
    """Run ``loopback_devices.py`` here with every ``Store`` write also pickled to ``out``."""
    from ngb.sweeps.store.database import Store

    calls: list[bytes] = []
    guard = threading.Lock()

    def recorded(name: str) -> None:
        write = getattr(Store, name)

        def wrapper(self: Store, *args: object, **kwargs: object) -> object:
            blob = pickle.dumps((name, args, kwargs))
            with guard:
                calls.append(blob)
            return write(self, *args, **kwargs)

        setattr(Store, name, wrapper)

    for name in WRITES:
        if hasattr(Store, name):
            recorded(name)

    def save() -> None:
        with guard:
            out.write_bytes(pickle.dumps(calls))
        print(f"recorded {len(calls)} store writes to {out}", file=sys.stderr)

    atexit.register(save)
    sys.argv = [str(HERE / "loopback_devices.py"), *bench_args]
    sys.path.insert(0, str(HERE))
    runpy.run_path(str(HERE / "loopback_devices.py"), run_name="__main__")


def replay_once(recording: Path, store: Path | None, log_bytes: str) -> str:
    """One replay in this process: the line to print."""
    from ngb.sweeps.store import wal_marker
    from ngb.sweeps.store.database import Store

    if log_bytes != "auto":
        fixed = int(log_bytes)
        wal_marker.checkpoint_bytes = lambda db: fixed  # type: ignore[assignment]
    try:
        calls = [pickle.loads(blob) for blob in pickle.loads(recording.read_bytes())]  # noqa: S301
        if not all(isinstance(c, tuple) and len(c) == 3 and c[0] in WRITES for c in calls):
            raise ValueError("not a list of store writes")
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        why = f"writer_replay.py: {recording}: not a recording of `record` ({exc})"
        raise SystemExit(why) from None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.duckdb"
        if store is not None:
            shutil.copyfile(store, path)
        db = Store(path)
        with db.batch():  # the schema, made (or checked) before the clock
            pass
        wal = wal_marker.wal_path(path)
        longest = changes = 0
        main_before = wal_marker.file_id(path)
        cpu0 = time.process_time()
        with wal_marker.deferred_checkpoints(path):
            i = 0
            while i < len(calls):
                name, args, kwargs = calls[i]
                after = calls[i + 1] if i + 1 < len(calls) else None
                if name == "write_batch" and after is not None and after[0] == "upsert_run_devices":
                    with db.batch():  # as the writer thread does (``RunWriter._write``)
                        db.write_batch(*args, **kwargs)
                        db.upsert_run_devices(*after[1], **after[2])
                    i += 2
                else:
                    getattr(db, name)(*args, **kwargs)
                    i += 1
                size = wal.stat().st_size if wal.exists() else 0
                longest = max(longest, size)
                main = wal_marker.file_id(path)
                changes += main != main_before
                main_before = main
        cpu = time.process_time() - cpu0
        size_mb = path.stat().st_size / 2**20
    return (
        f"log {log_bytes:>8}: writes {cpu:6.3f} CPU-s ({len(calls)} calls), longest log "
        f"{longest / 2**20:5.2f} MiB, main file changed {changes:3d} times, ends {size_mb:.1f} MiB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="run loopback_devices.py, recording its store writes")
    rec.add_argument("out", type=Path)
    rec.add_argument("bench_args", nargs=argparse.REMAINDER)
    rep = sub.add_parser("replay", help="replay a recording, once per log length")
    rep.add_argument("recording", type=Path)
    rep.add_argument("--store", type=Path, default=None, help="replay into a copy of this store")
    rep.add_argument("--log-bytes", nargs="+", default=["auto", str(4 * 2**20)])
    rep.add_argument("--once", default=None, help=argparse.SUPPRESS)  # the child's own
    args = parser.parse_args()
    if args.cmd == "record":
        bench = [a for a in args.bench_args if a != "--"]
        record(args.out, bench)
        return 0
    if args.once is not None:
        print(replay_once(args.recording, args.store, args.once), flush=True)
        return 0
    if not args.recording.is_file():  # a FIFO would block the read
        parser.error(f"{args.recording}: not a regular file")
    if args.store is not None and not args.store.is_file():
        parser.error(f"--store {args.store}: not a regular file")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for value in args.log_bytes:
        if value != "auto" and not value.isdigit():
            parser.error(f"--log-bytes: {value!r} is neither auto nor a byte count")
        argv = [sys.executable, __file__, "replay", str(args.recording), "--once", value]
        if args.store is not None:
            argv += ["--store", str(args.store)]
        done = subprocess.run(argv, check=False)  # a fresh process: imports and caches as a run's
        if done.returncode:
            return done.returncode
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
