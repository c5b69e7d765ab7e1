"""A table's rows kept on disk as they are made, read back as often as a renderer needs.

Why: a report that lists every point of a store of 480,000 distinct points makes 480,000 rows
of cells. Held in a list they (and a rich Table of them) took the report far over its memory
goal; written here a batch at a time, only one batch is in memory. A renderer may read them more
than once -- CSV learns which interval and note columns it needs before it writes, a long plain
table its column widths -- and a title or note that depends on every row is known before any is
printed, which is why rows are not printed as they come.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import IO

#: rows a pickled batch holds (one batch is what is in memory at once)
BATCH = 1024


class RowSpool:
    """Rows appended in order and read back in that order (see module); close() frees the file."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self._pending: list[list[object]] = []
        self._count = 0

    def append(self, row: list[object]) -> None:
        self._pending.append(row)
        self._count += 1
        if len(self._pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="ngb-rows-")  # noqa: SIM115 - closed in close()
        self._file.seek(0, 2)
        pickle.dump(self._pending, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._pending = []

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[list[object]]:
        self._flush()
        if self._file is None:
            return
        end = self._file.seek(0, 2)
        offset = 0
        while offset < end:
            self._file.seek(offset)
            batch: list[list[object]] = pickle.load(self._file)  # our own file, written above
            offset = self._file.tell()
            yield from batch

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._pending = []
