"""The base of the console's main screens: each is given the app's ``Backend`` when it is built.

Passing the backend in (rather than reaching for ``self.app.backend``) keeps the screens typed
end to end and lets a test build a screen on any backend.
"""

from __future__ import annotations

from ngb.tui.backend import Backend
from ngb.tui.settings import Settings
from ngb.tui.widgets.cursor import apply_cursor_blink
from textual.screen import Screen


class ConsoleScreen(Screen[None]):
    """A main screen of ``ngb-tui`` (installed once, kept alive while others are shown)."""

    def __init__(self, backend: Backend, *, id: str) -> None:
        super().__init__(id=id)
        self.backend = backend
        self._own_settings: Settings | None = None

    def on_mount(self) -> None:
        apply_cursor_blink(self)

    @property
    def settings(self) -> Settings:
        """What the console remembers between starts (the app's; a private one elsewhere)."""
        found = getattr(self.app, "settings", None)
        if isinstance(found, Settings):
            return found
        if self._own_settings is None:
            self._own_settings = Settings()
        return self._own_settings
