"""SQL over the results: the read-only console's errors and safe export to Parquet/CSV.

Export never destroys anything: the rows are read first, the file is written next to the
destination under a temporary name and renamed into place, the results database itself can
never be the destination, and an existing file is replaced only when the caller says so.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ngb.core.errors import NgbError, first_line
from ngb.sweeps.store_errors import BUSY_MESSAGE, DatabaseBusy

EXPORT_FORMATS = ("parquet", "csv")


def is_lock_error(exc: BaseException) -> bool:
    import duckdb

    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


def sql_error(exc: Exception, allow_write: bool) -> NgbError:
    """One line for a failed statement (busy file, read-only connection, bad SQL)."""
    if is_lock_error(exc):
        return DatabaseBusy(BUSY_MESSAGE)
    line = first_line(exc)
    if not allow_write and "read-only" in line:
        return NgbError(
            f"the results database is opened read-only; use --write to change it ({line})"
        )
    if "file system operations are disabled" in line:
        return NgbError(f"read-only SQL cannot read or write files ({line})")
    return NgbError(f"SQL error: {line}")


def check_export_destination(dest: Path, database: Path, *, overwrite: bool) -> None:
    """Refuse a destination that would destroy data (before any rows are read)."""
    if _same_file(dest, database) or _same_file(dest, Path(f"{database}.wal")):
        raise NgbError(f"refusing to export over the results database itself ({dest})")
    if dest.is_dir():
        raise NgbError(f"cannot export to {dest}: it is a directory")
    if dest.exists() and not overwrite:
        raise NgbError(f"{dest} exists already; give --force to replace it")


def write_export(table: Any, dest: Path, fmt: str, database: Path, *, overwrite: bool) -> None:
    """Write an Arrow table to ``dest`` atomically (temporary file, then rename)."""
    import pyarrow as pa

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    except OSError as exc:
        raise NgbError(f"cannot export to {dest}: {first_line(exc)}") from None
    os.close(fd)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        else:
            import pyarrow.csv as pcsv

            pcsv.write_csv(table, tmp)
        # Checked again right before the rename: the file may have appeared meanwhile.
        check_export_destination(dest, database, overwrite=overwrite)
        os.replace(tmp, dest)
    except (pa.ArrowException, OSError) as exc:
        raise NgbError(f"cannot export to {dest}: {first_line(exc)}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()
