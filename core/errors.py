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
