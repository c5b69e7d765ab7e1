"""Where ngb keeps its files (XDG base directories).

- config: the device inventory (``devices.toml``), user sweep files, trusted host keys
- data:   the DuckDB results file (``results.duckdb``) and run logs
- cache:  the built agent bundle, TVM tuning databases

``NGB_HOME`` puts all three under one folder (tests and throwaway setups); otherwise the usual
``XDG_CONFIG_HOME`` / ``XDG_DATA_HOME`` / ``XDG_CACHE_HOME`` rules apply. ``NGB_DB`` overrides the
results file alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

APP = "ngb"


@dataclass(frozen=True)
class Paths:
    config: Path
    data: Path
    cache: Path

    @property
    def inventory(self) -> Path:
        return self.config / "devices.toml"

    @property
    def known_hosts(self) -> Path:
        """Host keys the operator trusted through ngb (in addition to ~/.ssh/known_hosts)."""
        return self.config / "known_hosts"

    @property
    def database(self) -> Path:
        override = os.environ.get("NGB_DB")
        return Path(override).expanduser() if override else self.data / "results.duckdb"

    @property
    def runs(self) -> Path:
        return self.data / "runs"

    def own_files(self) -> dict[str, Path]:
        """ngb's own files, by label: no output may land on them unless writing them is the
        command's job (``ngb.core.base.safe_files.refuse_protected``)."""
        db = self.database
        return {
            "device inventory": self.inventory,
            "known hosts": self.known_hosts,
            "results database": db,
            "results database's WAL": Path(f"{db}.wal"),
        }

    def ensure(self) -> Paths:
        for p in (self.config, self.data, self.cache):
            p.mkdir(parents=True, exist_ok=True)
        return self


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    base = Path(value).expanduser() if value and os.path.isabs(value) else Path.home() / fallback
    return base / APP


def get_paths() -> Paths:
    home = os.environ.get("NGB_HOME")
    if home:
        root = Path(home).expanduser()
        return Paths(config=root / "config", data=root / "data", cache=root / "cache")
    return Paths(
        config=_xdg("XDG_CONFIG_HOME", ".config"),
        data=_xdg("XDG_DATA_HOME", ".local/share"),
        cache=_xdg("XDG_CACHE_HOME", ".cache"),
    )
