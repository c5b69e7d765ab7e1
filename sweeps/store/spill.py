"""A query's rows set aside in a private temporary DuckDB file and read back sorted, in batches.

Why: a report that lists every point (``ngb report energy`` on a store of 480,000 distinct
points) can neither hold its rows in Python (the decoded trials peaked at 1.5 GiB) nor keep the
results file open while it computes and prints them: DuckDB lets a file be held read-only or
read-write, not both, so a live run's writer would wait for the whole report. So the rows are
copied once, in Arrow batches, into a DuckDB file of the spill's own (the store is held for that
copy only, as long as any read of the same rows), and read back in the caller's order
``fetchmany`` at a time. The spill runs with a small memory limit, so its sort goes to disk
rather than to memory; the file and its folder go when the block ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError, first_line
from ngb.core.base.scratch import scratch_dir

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    from ngb.sweeps.store.database import Store

#: DuckDB's memory for the spill (its sort and inserts go to its temporary folder beyond it)
SPILL_MEMORY = "48MB"
#: DuckDB's memory for the query on the store (beyond it, its own temporary folder)
STORE_MEMORY = "64MB"
#: rows per Arrow batch copied out of the store
COPY_ROWS = 4096
#: the spill's table, its rows' numbers (in the order copied), and their sorted positions
TABLE = "spilled"
SEQ = "_spill_seq"
ORDERED = "spill_order"
#: rows read back a scan at a time (``Spill.batches``)
CHUNK = 32768


class Spill:
    """The rows of one query, held in a temporary DuckDB file (see module)."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, columns: list[str]) -> None:
        self._conn = conn
        self.columns = columns

    def count(self) -> int:
        found = self._conn.execute(f"SELECT count(*) FROM {TABLE}").fetchall()  # noqa: S608
        return int(found[0][0]) if found else 0

    def batches(self, order: Sequence[str], rows: int = 2048) -> Iterator[list[dict[str, object]]]:
        """The rows ``ORDER BY order`` (column names of the spill; NULLs last), ``rows`` a batch,
        each row a dict by column name.

        Why in two steps: DuckDB sorting the wide rows themselves ran out of the spill's memory
        (a sort's payload stays in memory here). So only the sort columns and each row's
        number are sorted, into positions; then the rows are read ``CHUNK`` positions at a
        time -- a scan that keeps those rows, sorted among themselves."""
        for name in order:
            if name not in self.columns:
                raise ValueError(f"no column {name!r} in the spill")
        by = ", ".join(f'"{name}"' for name in order) or SEQ
        self._conn.execute(
            f"CREATE OR REPLACE TABLE {ORDERED} AS SELECT {SEQ}, "  # noqa: S608 - checked names
            f"row_number() OVER (ORDER BY {by}, {SEQ}) AS pos FROM {TABLE}"
        )
        total = self.count()
        for low in range(0, total, CHUNK):
            query = (
                f"SELECT s.* EXCLUDE ({SEQ}) FROM {TABLE} s JOIN {ORDERED} o "  # noqa: S608
                f"ON s.{SEQ} = o.{SEQ} WHERE o.pos > {low} AND o.pos <= {low + CHUNK} "
                "ORDER BY o.pos"
            )
            for batch in self._conn.sql(query).to_arrow_reader(rows) or ():
                if batch.num_rows:
                    yield batch.to_pylist()


@contextmanager
def spill(
    store: Store,
    sql: str,
    params: Sequence[object] = (),
    extend: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None,
) -> Iterator[Spill]:
    """``sql``'s rows from ``store`` in a ``Spill`` for the block; ``extend`` may add columns to
    each batch on the way (a label that Python computes, say), so the spill can sort on them.

    In two steps: the store's rows go to an Arrow file first and the store is let go, then the
    spill's DuckDB loads them. The two DuckDBs never hold memory at once: together they took a
    report of 480,000 points to 332 MiB, over its 300 MiB goal."""
    import duckdb

    with scratch_dir("spill") as name:
        folder = Path(name)
        staged = folder / "rows.arrows"
        try:
            _stage(store, sql, params, extend, staged, bounded=True)
        except _OverBound:  # a query the bound cannot hold (it does not spill all it holds)
            _stage(store, sql, params, extend, staged, bounded=False)
        conn = duckdb.connect(
            str(folder / "rows.duckdb"),
            config={
                "memory_limit": SPILL_MEMORY,
                "threads": 1,
                "preserve_insertion_order": False,  # the rows are read back sorted
                "temp_directory": str(folder / "tmp"),
            },
        )
        try:
            _load(conn, staged)
            staged.unlink()
            described = conn.execute(f"DESCRIBE {TABLE}").fetchall()
            yield Spill(conn, [str(d[0]) for d in described if d[0] != SEQ])
        finally:
            conn.close()


def _stage(
    store: Store,
    sql: str,
    params: Sequence[object],
    extend: Callable[[pa.RecordBatch], pa.RecordBatch] | None,
    staged: Path,
    *,
    bounded: bool,
) -> None:
    """The query's rows (extended, numbered in ``SEQ``) into the Arrow stream file ``staged``;
    ``bounded``: within ``_bounded``'s settings (``_OverBound`` where DuckDB ran out there)."""
    import duckdb
    import pyarrow as pa

    with store.reading() as held, closing(held.cursor()) as source:
        # a cursor: a connection of its own on the same open file, which the store's checks on
        # opening may have left with a result (a stream needs a clear one)
        try:
            for setting in _bounded(staged.parent / "store-tmp", memory=bounded):
                source.execute(setting)
            reader = source.sql(sql, params=list(params)).to_arrow_reader(COPY_ROWS)
            if reader is None:  # not a query that returns rows
                raise NgbError("a spill needs a query that returns rows")
            seq = 0
            with pa.OSFile(str(staged), "wb") as sink:
                writer = None
                for found in _batches(reader, extend):
                    numbers = pa.array(range(seq, seq + found.num_rows), type=pa.int64())
                    batch = found.append_column(SEQ, numbers)
                    writer = writer or pa.ipc.new_stream(sink, batch.schema)
                    writer.write_batch(batch)
                    seq += found.num_rows
                if writer is not None:
                    writer.close()
        except (duckdb.Error, OSError) as exc:  # pyarrow's reader raises DuckDB's as OSError
            if bounded and "Out of Memory" in str(exc):
                raise _OverBound from None
            if isinstance(exc, duckdb.Error):
                raise NgbError(f"cannot read {store.path}: {first_line(exc)}") from None
            raise


def _load(conn: duckdb.DuckDBPyConnection, staged: Path) -> None:
    """The staged rows into the spill's table, a batch at a time."""
    import pyarrow as pa

    with pa.OSFile(str(staged), "rb") as source:
        created = False
        for batch in pa.ipc.open_stream(source):
            conn.register("batch", pa.Table.from_batches([batch]))
            verb = f"INSERT INTO {TABLE}" if created else f"CREATE TABLE {TABLE} AS"
            conn.execute(f"{verb} SELECT * FROM batch")  # noqa: S608 - fixed names
            conn.unregister("batch")
            created = True
    conn.execute("CHECKPOINT")  # the rows to the file: the buffers may leave memory


def _batches(
    reader: pa.RecordBatchReader, extend: Callable[[pa.RecordBatch], pa.RecordBatch] | None
) -> Iterator[pa.RecordBatch]:
    """The reader's batches, extended; one empty batch of its schema when it has none (so the
    spill's table exists, with every column, for an empty answer)."""
    import pyarrow as pa

    seen = False
    for batch in reader:
        seen = True
        yield extend(batch) if extend else batch
    if not seen:
        empty = pa.RecordBatch.from_pylist([], schema=reader.schema)
        yield extend(empty) if extend else empty


def _bounded(folder: Path, memory: bool) -> list[str]:
    """Settings that bound the store's query: one thread and (``memory``) ``STORE_MEMORY``, the
    rest to a temporary folder of the spill's (not beside the store). On 480,000 distinct
    points the newest-per-point query peaked at 268 MiB with DuckDB's defaults, 217 on one
    thread and 161 within 64 MB."""
    where = str(folder).replace("'", "''")
    bound = [f"SET memory_limit = '{STORE_MEMORY}'", f"SET temp_directory = '{where}'"]
    return ["SET threads = 1", *(bound if memory else [])]


class _OverBound(Exception):
    """The store's query ran out of ``STORE_MEMORY``: it runs again without the bound."""
