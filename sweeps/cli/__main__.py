"""``python -m ngb.sweeps.cli`` = ``ngb`` (for environments without the console script on PATH)."""

import sys

from ngb.sweeps.cli import main

sys.exit(main())
