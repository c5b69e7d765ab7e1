"""What the console remembers between starts: the theme and the SQL history.

One small JSON file (``tui.json``) in ngb's config dir, written atomically (temporary file +
rename), so two consoles quitting at once leave one whole file. A missing or unreadable file means
defaults: remembering is a convenience and never stops the console from starting.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

FILE_NAME = "tui.json"
HISTORY_KEEP = 200  # SQL queries remembered


def settings_file(path: Path | None = None) -> Path:
    if path is not None:
        return path
    from ngb.devices.paths import get_paths

    return get_paths().config / FILE_NAME


def load_settings(path: Path | None = None) -> dict[str, object]:
    """The remembered values (JSON from a file anyone may have edited: callers check each one)."""
    try:
        data = json.loads(settings_file(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_settings(settings: Mapping[str, object], path: Path | None = None) -> None:
    """Write ``settings``; a failure (read-only home) is ignored: the console goes on."""
    target = settings_file(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tui-", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(settings, fh, indent=1)
        os.replace(tmp, target)
    except OSError:
        return


class Settings:
    """The remembered values of one console (read once, written on every change)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.data = load_settings(path)

    def get(self, key: str, default: object = None) -> object:
        return self.data.get(key, default)

    def set(self, key: str, value: object) -> None:
        """Remember ``value`` (JSON-serialisable: text, numbers, lists of them)."""
        if self.data.get(key) != value:
            self.data[key] = value
            save_settings(self.data, self.path)
