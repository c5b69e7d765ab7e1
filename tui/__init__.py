"""ngb.tui — the Textual operator console (``ngb-tui``)."""
