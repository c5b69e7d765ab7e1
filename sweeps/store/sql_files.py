"""Which files an operator's SQL may reach: none, or exactly the ones its quoted names give.

DuckDB's ``enable_external_access = false`` is not enough on its own: DuckDB always lets a
connection reach its database file, the write-ahead log (``.wal``, ``.wal.checkpoint``,
``.wal.recovery``) and its spill folder, so a read-only ``COPY (SELECT 1) TO '<store>.wal'``
plants a file that the next open replays as the log, and with external access on any ``COPY``
may overwrite the store, the inventory or a FIFO (where ``open()`` blocks forever). So:

- Without ``allow_files`` the statements that name files (``COPY``, ``EXPORT``, ``ATTACH``,
  ``INSTALL``/``LOAD``) are refused before DuckDB sees them; the rest run with external access off.
- With ``allow_files`` the connection still runs with external access off, and DuckDB's own
  ``allowed_paths`` / ``allowed_directories`` grant exactly the files and folders the SQL names
  in string literals (``FileGrant``), each checked first: none of ngb's own files (inventory,
  known hosts, the store and its logs, the runs folder), nothing that is not a regular file or a
  folder (a FIFO, a device), no folder holding either. A path computed in SQL is not granted,
  and the target of a writing statement must be a plain literal (``TO '<db>' || '.wal'`` would
  reach the log DuckDB always allows). The configuration is then locked, so no ``SET`` undoes it
  (nor points ``profiling_output`` or a log file somewhere).

Extension autoloading and installing are off on every connection (``BASE_CONFIG``): a SQLite
file given as the store made DuckDB fetch its SQLite extension from the internet.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError
from ngb.core.base.safe_files import kind_name, same_file, shorten

if TYPE_CHECKING:
    import duckdb

#: what every DuckDB connection of ngb starts with (no network fetch of an extension, ever)
BASE_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
}

#: statement kinds that read or write files, or load code (INSTALL parses as LOAD)
FILE_STATEMENTS = {"COPY": "COPY", "EXPORT": "EXPORT DATABASE", "ATTACH": "ATTACH", "LOAD": "LOAD"}
#: ... and those of them that write, whose target must be a plain quoted name
WRITING = ("COPY", "EXPORT", "ATTACH")
#: at most this many files of a folder or glob are checked before it is granted
SCAN_LIMIT = 10_000


@dataclass(frozen=True)
class FileGrant:
    """Files (``paths``, glob patterns included) and ``folders`` one query may reach; locked."""

    paths: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()


def protected_paths(store: Path) -> dict[str, Path]:
    """ngb's own files and folders (label -> path), for the store in use and the default one."""
    from ngb.devices.paths import get_paths

    paths = get_paths()
    out = {label: Path(p) for label, p in paths.own_files().items()}
    if not same_file(store, paths.database):  # --db names another store: both are ngb's
        for label in ("results database", "results database's WAL"):
            out[f"default {label}"] = out.pop(label)
    out["runs folder"] = paths.runs
    out["results database"] = store
    for suffix, what in ((".wal", "WAL"), (".wal.checkpoint", "WAL checkpoint"),
                         (".wal.recovery", "WAL recovery")):  # fmt: skip
        out[f"results database's {what}"] = Path(f"{store}{suffix}")
    out["results database's spill folder"] = Path(f"{store}.tmp")
    # a live run's marker and readers lock (``wal_marker``)
    out["results database's WAL marker"] = Path(f"{store}.ngb-wal")
    out["results database's readers lock"] = Path(f"{store}.ngb-readers")
    return out


def plan_files(
    sql: str, *, allow_files: bool, store: Path, hint: str = "without --allow-files"
) -> bool | FileGrant:
    """What ``sql`` may reach: ``False`` (no file) or a checked ``FileGrant``; raises NgbError.

    ``hint`` ends "... cannot read or write files <hint>" (the console has no such flag).
    """
    import duckdb

    try:
        statements = list(duckdb.extract_statements(sql))
    except duckdb.Error:
        statements = []  # a syntax error: DuckDB reports it, with its position, when it runs
    if not allow_files:
        for statement in statements:
            verb = FILE_STATEMENTS.get(statement.type.name)
            if verb is not None:
                raise NgbError(f"{verb} statements cannot read or write files {hint}")
        return False
    grants = _Grants(protected_paths(store))
    try:
        for statement in statements:
            tokens = _tokens(statement.query)
            if statement.type.name in WRITING:
                _check_target(statement.type.name, tokens)
            # EXPORT DATABASE writes a folder of files (created when missing)
            as_folder = statement.type.name == "EXPORT"
            for kind, text in tokens:
                value = _literal(text) if kind == "string_const" else None
                if value is not None:
                    grants.grant(value, as_folder=as_folder)
    finally:
        grants.close()
    return FileGrant(tuple(grants.paths), tuple(grants.folders))


def apply_grant(conn: duckdb.DuckDBPyConnection, grant: bool | FileGrant) -> None:
    """Restrict a fresh connection: ``True`` leaves it as opened (ngb's own statements)."""
    if grant is True:
        return
    locked = conn.execute(
        "SELECT current_setting('lock_configuration'), current_setting('enable_external_access')"
    ).fetchone()
    if locked is not None and locked[0]:
        # another connection of this process to the same file locked it (two console queries
        # sharing one snapshot): it stays locked down, or this one may not go on
        if locked[1] or isinstance(grant, FileGrant):
            raise NgbError("the results database is open with other settings in this process")
        return
    if isinstance(grant, FileGrant):
        if grant.paths:
            conn.execute("SET allowed_paths = ?", [list(grant.paths)])
        if grant.folders:
            conn.execute("SET allowed_directories = ?", [list(grant.folders)])
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")


# -------------------------------------------------------------------------- reading the SQL


def _tokens(sql: str) -> list[tuple[str, str]]:
    """(kind, text) of each token, by DuckDB's own tokenizer; comments dropped."""
    import duckdb

    raw = duckdb.tokenize(sql)
    out = []
    for i, (start, kind) in enumerate(raw):
        end = raw[i + 1][0] if i + 1 < len(raw) else len(sql)
        name = str(getattr(kind, "name", kind))
        if name != "comment":
            out.append((name, sql[start:end].strip()))
    return out


def _literal(text: str) -> str | None:
    """The value of a plain '...' or $tag$...$tag$ literal; None for any other form (E'...')."""
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if text.startswith("$"):
        tag_end = text.find("$", 1)
        tag = text[: tag_end + 1]
        if tag_end > 0 and len(text) >= 2 * len(tag) and text.endswith(tag):
            return text[len(tag) : -len(tag)]
    return None


def _check_target(kind: str, tokens: list[tuple[str, str]]) -> None:
    """The file a writing statement names must be one plain literal, not an expression."""
    depth = 0
    anchor = None
    for i, (token_kind, text) in enumerate(tokens):
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
        elif depth == 0 and token_kind == "keyword" and text.upper() == "TO" and kind == "COPY":
            anchor = i
        elif depth == 0 and token_kind == "string_const" and kind != "COPY" and anchor is None:
            anchor = i - 1
    if anchor is None:
        if kind == "COPY":
            return  # COPY ... FROM: it reads, the literals are checked like any other
        raise NgbError(f"{FILE_STATEMENTS[kind]} needs a quoted file name with --allow-files")
    target = tokens[anchor + 1] if anchor + 1 < len(tokens) else ("", "")
    after = tokens[anchor + 2] if anchor + 2 < len(tokens) else ("", "")
    plain = target[0] == "string_const" and _literal(target[1]) is not None
    if not plain or not (after[1] in ("", ";", "(") or after[0] == "keyword"):
        raise NgbError(
            f"{FILE_STATEMENTS[kind]} needs one quoted file name (a plain '...', not an "
            "expression) with --allow-files"
        )


# -------------------------------------------------------------------------- checking a name


class _Grants:
    """The grant being built: each literal is checked in the form DuckDB will compare, which
    DuckDB itself gives (``file:/x``, ``~/x``, ``a/../x`` and relative names all become another
    absolute path when set as an allowed path, so checking the literal as written would miss
    ``'file:<the store>'``)."""

    def __init__(self, protected: Mapping[str, Path]) -> None:
        import duckdb

        self.protected = protected
        self.paths: list[str] = []
        self.folders: list[str] = []
        self._scratch = duckdb.connect(":memory:", config=BASE_CONFIG)

    def close(self) -> None:
        self._scratch.close()

    def normalised(self, value: str, setting: str = "allowed_paths") -> str | None:
        """``value`` as DuckDB stores it in ``setting``; None if it is not a local path."""
        import duckdb

        try:
            self._scratch.execute(f"SET {setting} = ?", [[value]])  # one of two fixed names
            row = self._scratch.execute(f"SELECT current_setting('{setting}')").fetchone()
        except duckdb.Error:
            return None
        stored = row[0] if row else None
        if not isinstance(stored, list) or len(stored) != 1 or not str(stored[0]).startswith("/"):
            return None  # a URL (https://, s3://) or nothing: not granted, DuckDB refuses it
        return str(stored[0])

    def grant(self, value: str, *, as_folder: bool) -> None:
        """Check one literal and grant it; one that is not a local path is not granted."""
        if not value.strip() or len(value) > 4096 or "\0" in value:
            return
        norm = self.normalised(value)
        if norm is None:
            return
        path = Path(norm)
        if glob.has_magic(norm):
            for match in _limited(glob.iglob(norm, recursive=True)):
                _check_file(match, value, self.protected)
                self.paths.append(str(match))
            self.paths.append(norm)
            return
        _check_file(path, value, self.protected)
        try:
            mode: int | None = path.stat().st_mode
        except OSError:  # missing, or a dangling link (checked above by where it leads)
            mode = None
        if (mode is None and as_folder) or (mode is not None and stat.S_ISDIR(mode)):
            _check_folder(path, value, self.protected)
            folder = self.normalised(norm, "allowed_directories")
            if folder is not None:
                self.folders.append(folder)
            return
        self.paths.append(norm)
        # COPY writes over an existing file through a temporary sibling it then renames
        temp = path.with_name(f"tmp_{path.name}")
        try:
            _check_file(temp, value, self.protected)
        except NgbError:
            return  # not granted: DuckDB then refuses that COPY in one line
        self.paths.append(str(temp))


def _check_file(path: Path, shown: str, protected: Mapping[str, Path]) -> None:
    for label, own in protected.items():
        if same_file(path, own) or inside(path, own):
            raise NgbError(f"SQL may not reach ngb's {label} ({shorten(shown)})")
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # missing (a new file) or unreadable: DuckDB says which when it opens it
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise NgbError(f"SQL may not open {shorten(shown)}: it is a {kind_name(mode)}")
    if stat.S_ISDIR(mode):  # a folder reached through a link: what it holds counts too
        for label, own in protected.items():
            if inside(own, path):
                raise NgbError(f"SQL may not reach {shorten(shown)}: it holds ngb's {label}")


def _check_folder(folder: Path, shown: str, protected: Mapping[str, Path]) -> None:
    """A granted folder reaches all it holds, links followed: no own file, no FIFO or device."""
    _check_file(folder, shown, protected)
    for entry in _limited(_walk(folder)):
        _check_file(entry, f"{shown} ({entry.name})", protected)


def _walk(folder: Path) -> Iterator[Path]:
    """Everything below ``folder``, through links to folders, each real folder once."""
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        for name in (*dirnames, *filenames):
            yield Path(dirpath) / name


def _limited(items: Iterable[str | Path]) -> Iterator[Path]:
    for n, item in enumerate(items):
        if n >= SCAN_LIMIT:
            raise NgbError(f"SQL names more than {SCAN_LIMIT} files; name fewer")
        yield Path(item)


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies strictly inside ``folder`` (both resolved)."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real.startswith(top.rstrip("/") + "/")
