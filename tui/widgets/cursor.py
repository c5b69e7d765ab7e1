"""Steady (non-blinking) text cursors, chosen once per app.

A blinking cursor is drawn or not depending on the phase of a 0.5 s timer, so any screen capture
(an SVG snapshot, ``tmux capture-pane``) taken while an editor has focus shows it or not by chance.
Switching blink off only after the first frame is not enough either: a line already cached with
the cursor drawn stays so until something repaints it. So screens call :func:`apply_cursor_blink`
from ``on_mount``, before their first frame, and every Input / TextArea starts in its final state.
Operators who dislike blinking get the same via ``ngb-tui --no-blink``.
"""

from __future__ import annotations

from textual.dom import DOMNode
from textual.widgets import Input, TextArea


def apply_cursor_blink(root: DOMNode) -> None:
    """Give each Input / TextArea under ``root`` the app's ``cursor_blink`` (default on)."""
    blink = bool(getattr(root.app, "cursor_blink", True))
    for widget in root.query("Input, TextArea"):
        if isinstance(widget, Input | TextArea):
            widget.cursor_blink = blink
