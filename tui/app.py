"""Entry point for ``ngb-tui`` (the console itself is built in the TUI issue)."""

from __future__ import annotations

import sys


def main() -> int:
    print("ngb-tui: the terminal console is not built yet; use the `ngb` CLI meanwhile.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
