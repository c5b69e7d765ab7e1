"""A record of the DuckDB instances a test makes: each ``duckdb.connect`` call's database
argument (a file's path, or ``:memory:``), in order, while the test runs."""

from __future__ import annotations

import duckdb
import pytest


def record_connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real = duckdb.connect

    def connect(database: str = ":memory:", *args: object, **kwargs: object) -> object:
        opened.append(str(database))
        return real(database, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(duckdb, "connect", connect)
    return opened
