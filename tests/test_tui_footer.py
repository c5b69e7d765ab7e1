"""The console's footer (``tui/widgets/steady_footer.py``): the same keys as Textual's own
``Footer`` at every step, drawn again only when they changed. A focus move between widgets that
bring no shown key keeps the key widgets as they were; a widget with a key of its own, or an
action turned off, draws the footer again with the change."""

from __future__ import annotations

from typing import Any

from ngb.tui.widgets.steady_footer import SteadyFooter
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Input, Static
from textual.widgets._footer import FooterKey

from tests.test_tui_support import wait_for


class WithKey(Static, can_focus=True):
    BINDINGS = [Binding("x", "extra", "Extra")]

    def action_extra(self) -> None:
        pass


class Demo(App[None]):
    BINDINGS = [Binding("f2", "alpha", "Alpha"), Binding("ctrl+q", "quit", "Quit")]

    def __init__(self, footer: type[Footer]) -> None:
        super().__init__()
        self.footer_type = footer
        self.alpha_on = True

    def compose(self) -> ComposeResult:
        yield Input(id="one")
        yield Input(id="two")
        yield WithKey("keys", id="keys")
        yield self.footer_type(compact=True, show_command_palette=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "alpha":
            return True if self.alpha_on else None  # None: shown, but dimmed
        return True

    def action_alpha(self) -> None:
        pass


def keys(app: App[Any]) -> list[tuple[str, str, bool, bool]]:
    return [
        (k.key, k.description, k.has_class("-disabled"), k.has_class("-compact"))
        for k in app.query_one(Footer).query(FooterKey)
    ]


async def steps(footer: type[Footer]) -> tuple[list[list[tuple[str, str, bool, bool]]], bool]:
    """What the footer shows after each step, and whether the focus moves between the two
    inputs left its key widgets in place."""
    app = Demo(footer)
    shown = []
    async with app.run_test(size=(80, 10)) as pilot:
        await wait_for(pilot, lambda: keys(app), timeout=10)
        app.query_one("#one").focus()
        await pilot.pause(0.2)
        shown.append(keys(app))
        drawn = list(app.query(FooterKey))
        app.query_one("#two").focus()
        await pilot.pause(0.2)
        app.query_one("#one").focus()
        await pilot.pause(0.2)
        kept = list(app.query(FooterKey)) == drawn
        shown.append(keys(app))
        app.query_one("#keys").focus()
        await wait_for(pilot, lambda: any(k[0] == "x" for k in keys(app)), timeout=10)
        shown.append(keys(app))
        app.alpha_on = False
        app.refresh_bindings()
        await wait_for(pilot, lambda: any(k[0] == "f2" and k[2] for k in keys(app)), timeout=10)
        shown.append(keys(app))
    return shown, kept


async def test_the_steady_footer_shows_what_textuals_shows_and_redraws_only_on_a_change() -> None:
    steady, kept = await steps(SteadyFooter)
    plain, plain_kept = await steps(Footer)
    assert steady == plain  # the same keys, labels, dimmed state and compact style at each step
    alpha, quit_ = ("f2", "Alpha", False, True), ("ctrl+q", "Quit", False, True)
    assert sorted(steady[0]) == sorted(steady[1]) == sorted([alpha, quit_])
    assert ("x", "Extra", False, True) in steady[2]
    assert ("f2", "Alpha", True, True) in steady[3]
    # the point of it: Textual's footer rebuilt its keys on the focus moves, ours did not
    assert kept and not plain_kept
