"""A SelectionList whose ticks differ by shape, not only by colour: ``▐✔▌`` ticked, ``▐ ▌`` not.

Textual draws the same ``X`` in both states and tells them apart by colour alone, which a
colour-blind operator, a monochrome terminal or a ``tmux capture-pane`` cannot see; choosing the
devices a run starts on must not depend on that.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import SelectionList
from textual.widgets.option_list import OptionDoesNotExist

TICK = "✔"


class Checklist(SelectionList[str]):
    DEFAULT_CSS = """
    Checklist > .selection-list--button-selected,
    Checklist > .selection-list--button-selected-highlighted { text-style: bold; }
    """

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        try:
            option = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return strip
        segments = list(strip)
        if len(segments) < 3:
            return strip
        ticked = option.value in self.selected
        button = segments[1]
        segments[1] = Segment(TICK if ticked else " ", button.style, button.control)
        return Strip(segments, strip.cell_length)
