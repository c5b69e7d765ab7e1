"""The console's main screens, in one place: key, name, title, help text and how to build each.

``NgbApp`` derives its number-key bindings (and so the footer), the command palette entries, the
``--screen`` choices and the help table from ``SCREENS``. Adding a screen is one entry here (plus
the screen's own module); nothing else lists screens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ngb.tui.backend import Backend
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.screens.devices import DevicesScreen
from ngb.tui.screens.history import HistoryScreen
from ngb.tui.screens.results import ResultsScreen
from ngb.tui.screens.run import RunScreen
from ngb.tui.screens.runs import RunsScreen
from ngb.tui.screens.sql import SqlScreen


@dataclass(frozen=True)
class ScreenEntry:
    key: str  # the global key that shows it (also in the footer)
    name: str  # the screen id, ``--screen NAME`` and ``action_show('NAME')``
    title: str  # footer and palette label
    summary: str  # one line of help: what the screen is for
    build: Callable[[Backend], ConsoleScreen]


SCREENS: tuple[ScreenEntry, ...] = (
    ScreenEntry(
        "1", "devices", "Devices", "the inventory, probe details, host keys", DevicesScreen
    ),
    ScreenEntry("2", "run", "Run", "choose a sweep and devices, start, watch live", RunScreen),
    ScreenEntry(
        "3", "results", "Results", "charts and tables of one run, with spread", ResultsScreen
    ),
    ScreenEntry("4", "sql", "SQL", "queries over the results database, export", SqlScreen),
    ScreenEntry("5", "runs", "Runs", "every run (store and devices): attach, cancel", RunsScreen),
    ScreenEntry(
        "6", "history", "History", "a point's results over runs, change points", HistoryScreen
    ),
)

BY_NAME = {entry.name: entry for entry in SCREENS}
