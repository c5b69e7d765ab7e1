"""Shared pytest fixtures, kept minimal: other parts add theirs in their own helper modules."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.sshd"]  # the real-sshd fixtures (sshd_server, sshd_home)


@pytest.fixture(autouse=True)
def ngb_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point NGB_HOME at a fresh folder so no test reads or writes the real config/data/cache."""
    home = tmp_path_factory.mktemp("ngb-home")
    monkeypatch.setenv("NGB_HOME", str(home))
    monkeypatch.delenv("NGB_DB", raising=False)
    return home
