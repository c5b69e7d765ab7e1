"""``ngb bench``: run ngb's own benchmarks (the scripts in the checkout's ``benchmarks/`` folder).

Speed and memory goals live in these scripts, which print figures, rather than in timed unit tests.
They are run from a source checkout (they are not part of the installed package).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
from ngb.core.base.errors import NgbError

#: short names for benchmarks an issue or the README names (``ngb bench console``)
ALIASES = {"console": "console_cpu"}


def benchmarks_dir() -> Path:
    import ngb.sweeps

    folder = Path(ngb.sweeps.__file__).resolve().parents[1] / "benchmarks"
    if not folder.is_dir():
        raise NgbError("benchmarks live in the ngb source checkout; run `ngb bench` from one")
    return folder


def available() -> dict[str, str]:
    """Benchmark name -> first line of its docstring."""
    found = {}
    for path in sorted(benchmarks_dir().glob("*.py")):
        if path.name.startswith("_"):
            continue
        doc = ""
        for line in path.read_text().splitlines():
            stripped = line.strip().strip('"').strip()
            if stripped and not stripped.startswith("#"):
                doc = stripped
                break
        found[path.stem] = doc
    return found


# Everything after NAME is the script's (``ngb bench loopback_devices --help`` is its help).
@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("name", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(name: str | None, args: tuple[str, ...]) -> None:
    """Run benchmark NAME (or `all`); with no NAME, list them. Extra ARGS go to the script."""
    names = available()
    if not name:
        for bench_name, doc in names.items():
            click.echo(f"{bench_name:24} {doc}")
        return
    chosen = list(names) if name == "all" else [ALIASES.get(name, name)]
    for bench_name in chosen:
        if bench_name not in names:
            from ngb.core.base.errors import UnknownNameError

            raise UnknownNameError("benchmark", bench_name, list(names))
        if len(chosen) > 1:  # `ngb bench all`: which benchmark the figures below are from;
            # one named benchmark's stdout is its own (``ngb bench eta --print-sweep > job.toml``)
            click.echo(f"== {bench_name}")
        run_script(bench_name, benchmarks_dir() / f"{bench_name}.py", args)


def run_script(name: str, script: Path, args: tuple[str, ...]) -> None:
    """Run one benchmark; its figures go to stdout as they come. Its stderr is held back: a
    failure is one line (argparse's usage and error, a traceback's last line), a success passes
    what it said on. The script dies with this process (a killed ``ngb bench`` must not leave a
    benchmark running: what it started is then cleaned up by its own watchdog)."""
    proc = subprocess.Popen(  # noqa: S603 - our own script, this interpreter
        [sys.executable, str(script), *args], stderr=subprocess.PIPE, text=True, errors="replace",
        preexec_fn=_die_with_parent(),  # noqa: PLW1509 - one prctl, nothing that can deadlock
    )  # fmt: skip
    _, said = proc.communicate()
    if proc.returncode == 0:
        sys.stderr.write(said)
        return
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exited with status {proc.returncode}"
    # argparse: "parity.py: error: argument --rounds: '0' must be at least 1"
    last = last.removeprefix(f"{script.name}: error: ")
    raise NgbError(f"benchmark {name}: {last}")


def _die_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec (Linux): the kernel sends it SIGTERM when ``ngb bench``
    dies, SIGKILL included. ctypes is loaded here: the child only makes the one call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None).prctl
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGTERM)
