"""Run the operator's model code in a child process when ngb itself needs an answer from it.

Trials already run user code in forked workers (``workers.py``). A few commands call it directly
to check or describe a model (``ngb sweeps check`` imports factories, ``ngb models --file`` builds
each model to count its parameters); a factory that calls ``os._exit(0)`` or ``sys.exit()`` there
would end ngb itself with status 0 and no output. ``call_in_child`` forks, runs the function, and
hands back its value or its exception; a child that ends without answering is a one-line
``NgbError`` naming how it ended.

Stdlib only; POSIX (``os.fork``). Where fork is missing the function runs in this process.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ngb.core.base.errors import NgbError, one_line

T = TypeVar("T")
P = ParamSpec("P")


def call_in_child(what: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` run in a forked child; its value or exception comes back here."""
    if not hasattr(os, "fork"):
        return fn(*args, **kwargs)
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, then leave without running atexit hooks
        status = 0
        try:
            os.close(read_fd)
            data = _answer(what, lambda: fn(*args, **kwargs))
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(data)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - the child must never return into ngb's caller
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _, wait_status = os.waitpid(pid, 0)
    if not data:
        raise NgbError(
            f"{what}: the process running it {_how_it_ended(wait_status)} without an answer"
        )
    kind, value = pickle.loads(data)  # noqa: S301 - our own child's bytes, through a private pipe
    if kind == "value":
        return value  # type: ignore[no-any-return]
    if kind == "exception":
        raise value
    raise NgbError(value)


def _answer(what: str, call: Callable[[], object]) -> bytes:
    """The pickled ("value", v), ("exception", e) or ("message", text) for the parent."""
    failure: BaseException | None = None
    try:
        result: tuple[str, object] = ("value", call())
    except SystemExit as exc:  # sys.exit() in the user's code is a failure here, not ngb's exit
        result = ("message", f"{what}: the code called sys.exit({exc.code!r})")
    except BaseException as exc:  # noqa: BLE001 - handed back to the parent as it was
        failure = exc
        result = ("exception", exc)
    try:
        data = pickle.dumps(result)
        pickle.loads(data)  # noqa: S301 - an exception whose __init__ cannot be re-run fails here
        return data
    except Exception:  # noqa: BLE001 - unpicklable value or exception: its one line travels
        if failure is not None:
            return pickle.dumps(("message", f"{what}: {one_line(failure)}"))
        return pickle.dumps(("message", f"{what}: its answer cannot be passed back"))


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"was killed by {name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"
