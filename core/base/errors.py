"""User-facing errors.

An ``NgbError`` carries one line meant for an operator (bad inventory, unknown model, malformed
sweep...). Front ends print ``str(err)`` without a traceback; everything else is a bug and keeps its
traceback.
"""

from __future__ import annotations


class NgbError(Exception):
    """An error with a clear one-line message for the operator."""


class ConfigError(NgbError):
    """A config value (compiler flags, measure settings, sweep, inventory) is invalid."""


class UnknownNameError(NgbError):
    """A name (model, compiler, device, preset) is not known; the message lists close matches."""

    def __init__(self, kind: str, name: str, choices: list[str] | tuple[str, ...]) -> None:
        import difflib

        close = difflib.get_close_matches(name, list(choices), n=5, cutoff=0.5)
        hint = f"; did you mean: {', '.join(close)}?" if close else ""
        super().__init__(f"unknown {kind} {name!r}{hint}")
        self.kind, self.name, self.close = kind, name, close


class CompilerUnavailable(NgbError):
    """The compiler's library or hardware is missing on this machine (reason in the message)."""


class UnsupportedTrial(NgbError):
    """This model/optimisation/precision/device cannot go through this compiler.

    A trial that raises it is recorded with ``error_kind`` ``unsupported``: a fact about the
    compiler, not a bug. Lives here (not in ``measure``) so compilers and ``optimise`` can raise
    it without importing the measurement engine.
    """


class UnsupportedOptimisation(UnsupportedTrial):
    """``spec.optimisation`` names something this build or this compiler cannot take."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of the message, or the type's name when there is none."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` for operators (at most 400 characters).

    NgbError messages are already written for humans, so they go bare. This is the one formatter
    every layer uses for errors it shows or records.
    """
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    if len(first) > 400:
        first = first[:397] + "..."
    if isinstance(exc, NgbError):
        return first or type(exc).__name__
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
