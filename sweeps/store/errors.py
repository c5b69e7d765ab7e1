"""Why a results-database call failed, as types callers can tell apart (see ``result_store``)."""

from __future__ import annotations

from ngb.core.base.errors import NgbError

BUSY_MESSAGE = "results database is busy (another process has it open); try again"


class DatabaseBusy(NgbError):
    """Another process holds the results file; the message says to try again."""


class RowRejected(NgbError):
    """The data cannot be stored as it is (e.g. a value too large for its column); retrying
    the same data can never succeed."""


class StoreUnwritable(NgbError):
    """The results database cannot be written at all (read-only, a missing table, not ngb's)."""
