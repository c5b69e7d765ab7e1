"""The key-binding footer, rebuilt only when what it shows has changed.

Why: Textual's ``Footer`` recomposes on every bindings update, and the screen sends one on each
focus move, whether or not a shown key changed. Each recompose mounts a fresh ``FooterKey`` per
binding and restyles each one twice (on mount, then again when ``compact`` is bound to it). In
the console's tests that was ~180 keys mounted per test, and the restyling was the largest single
cost in the Textual profile (``Footer._watch_compact`` -> ``set_class``: 3.9 of 50 CPU-s over
the 27 tests of ``test_tui_console.py`` and ``test_tui_app.py``, under cProfile). On a loaded
2-core machine the same work delays every key press that moves the focus.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Footer
from textual.widgets._footer import FooterKey  # not exported by textual.widgets (8.2.8, pinned)

if TYPE_CHECKING:
    from textual.app import ComposeResult
    from textual.screen import Screen

# What a footer key shows: its key, label, action, whether it is enabled, its tooltip and group.
Shown = tuple[tuple[str, str, str, bool, str, str], ...]


def shown_bindings(screen: Screen) -> Shown:
    """The footer's content as data: the same selection and order ``Footer.compose`` uses."""
    return tuple(
        (
            binding.key,
            binding.description,
            binding.action,
            enabled,
            tooltip or "",
            binding.group.description if binding.group is not None else "",
        )
        for (_node, binding, enabled, tooltip) in screen.active_bindings.values()
        if binding.show
    )


class SteadyFooter(Footer):
    """``Footer`` that recomposes only when the shown bindings differ from the last ones drawn."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._drawn: Shown | None = None

    def compose(self) -> ComposeResult:
        """Textual's keys, each born with the footer's ``-compact`` class: its binding to
        ``compact`` then finds the class in place and does not restyle the key a second time."""
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                widget.set_class(self.compact, "-compact", update=False)
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if not (self.is_attached and screen is self.screen):
            return
        shown = shown_bindings(screen)
        if shown == self._drawn:
            return
        self._drawn = shown
        self.call_after_refresh(self.recompose)
