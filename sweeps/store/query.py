"""SQL over the results: the read-only console's errors and safe export to Parquet/CSV.

Export never destroys anything: the rows are read first, the file is written next to the
destination under a temporary name and renamed into place, the results database itself can
never be the destination, and an existing file is replaced only when the caller says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError, first_line
from ngb.core.base.safe_files import (
    check_writable,
    refuse_protected,
    same_file,
    shorten,
    write_atomic,
)

if TYPE_CHECKING:
    import pyarrow as pa
from ngb.sweeps.store.errors import BUSY_MESSAGE, DatabaseBusy

EXPORT_FORMATS = ("parquet", "csv")


def is_lock_error(exc: BaseException) -> bool:
    import duckdb

    message = str(exc).lower()
    # a commit refused for the log's lock is a TransactionException, not an IOException
    return isinstance(exc, duckdb.Error) and (
        "could not set lock" in message
        or (isinstance(exc, duckdb.IOException) and "lock" in message)
    )


def sql_error(exc: Exception, allow_write: bool, allow_files: bool = False) -> NgbError:
    """One line for a failed statement (busy file, read-only connection, bad SQL)."""
    if is_lock_error(exc):
        return DatabaseBusy(BUSY_MESSAGE)
    line = first_line(exc)
    if not allow_write and "read-only" in line:
        return NgbError(
            f"the results database is opened read-only; use --write to change it ({line})"
        )
    if allow_files and ("disabled by configuration" in line or "disabled through conf" in line):
        return NgbError(
            f"SQL reaches only the files it names in plain quotes, checked first ({line})"
        )
    if "disabled by configuration" in line or "disabled through configuration" in line:
        which = "SQL" if allow_write else "read-only SQL"
        return NgbError(f"{which} cannot read or write files without --allow-files ({line})")
    if "configuration has been locked" in line:
        return NgbError(f"SQL cannot change DuckDB's settings here ({line})")
    return NgbError(f"SQL error: {line}")


def check_export_destination(dest: Path, database: Path, *, overwrite: bool) -> None:
    """Refuse a destination that would destroy data (before any rows are read): the results
    database, ngb's own files, anything that is not a regular file (device, FIFO, socket,
    directory: whatever ``--force`` says), or an existing file without ``overwrite``."""
    if same_file(dest, database) or same_file(dest, Path(f"{database}.wal")):
        raise NgbError(f"refusing to export over the results database itself ({shorten(dest)})")
    refuse_protected(dest, _own_files())
    from ngb.sweeps.store.sql_files import inside, protected_paths

    for label, own in protected_paths(database).items():  # its logs, the runs folder
        if same_file(dest, own) or inside(dest, own):
            raise NgbError(f"refusing to write over ngb's {label} ({shorten(dest)})")
    if dest.is_dir():
        raise NgbError(f"cannot export to {shorten(dest)}: it is a directory")
    check_writable(dest, "export")
    if dest.exists() and not overwrite:
        raise NgbError(f"{shorten(dest)} exists already; give --force to replace it")


def _own_files() -> dict[str, Path]:
    from ngb.devices.paths import get_paths

    return get_paths().own_files()


def write_export(
    rows: pa.Table | pa.RecordBatchReader, dest: Path, fmt: str, database: Path, *, overwrite: bool
) -> int:
    """Write an Arrow table or a stream of record batches to ``dest`` atomically (beside it,
    fsync, rename; a full disk is an error), checking the destination again right before the
    rename; returns the rows written. A stream is written batch by batch, never held whole."""
    import pyarrow as pa

    written = [0]

    def batches() -> Iterator[pa.RecordBatch]:
        if isinstance(rows, pa.Table):
            yield from rows.to_batches()
        else:
            yield from rows

    def writer(tmp: Path) -> None:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetWriter(str(tmp), rows.schema) as out:
                for batch in batches():
                    out.write_batch(batch)
                    written[0] += batch.num_rows
        else:
            import pyarrow.csv as pcsv

            with pcsv.CSVWriter(str(tmp), rows.schema) as out:
                for batch in batches():
                    out.write_batch(batch)
                    written[0] += batch.num_rows
        # Checked again right before the rename: the file may have appeared meanwhile.
        check_export_destination(dest, database, overwrite=overwrite)

    try:
        write_atomic(dest, writer, what="export", overwrite=overwrite, make_parent=True)
    except NgbError as exc:
        raise NgbError(str(exc).replace("cannot write", "cannot export to", 1)) from None
    return written[0]
