"""What a report is made of (``Report`` -> ``Table`` -> cells) and where its numbers come from.

``ReportData`` reads the results database through ``Store.query`` (read-only connections only).
Which trials count: successful ones, filtered by ``--run`` / ``--device``, and -- because the same
trial point may have been measured in several runs -- only the newest measurement of each point
(device, model, width, depth, optimisation, algorithm, compiler, batch, target, input size,
precision), so a report never averages an old run into a new one. Only trials of the compiler's
own convolution (algorithm ``default``, and every row stored before the axis) count, unless a
report asks for every algorithm (``all_algorithms``: ``ngb report algorithms``, issue 48): a
gemm or sparse trial is another point, and no report of before reads it as the compiler's own.
Per-repetition throughputs (``measurements``) come with each trial for the significance tests.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, TypeGuard, TypeVar, cast

from ngb.core.base.errors import NgbError, UnknownNameError
from ngb.core.compilers import DEFAULT_BASELINE
from ngb.core.records.trial_extra import from_json
from ngb.sweeps.report.spool import RowSpool
from ngb.sweeps.rows import StoreRow, TrialRow

if TYPE_CHECKING:
    from ngb.devices.pricing import Price
    from ngb.sweeps.store.database import Store

R = TypeVar("R", bound=Mapping[str, object])
K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

# What identifies one measured point across runs (the "newest wins" partition). The precision
# that ran is part of it: an openvino b1 bf16 result and an fp32 one are two points, and neither
# hides the other in a report or ``ngb advise``.
POINT_COLUMNS = (
    "device",
    "model",
    "width",
    "depth",
    "optimisation",
    "algorithm",  # ngb.core.models.algorithms; NULL (stored before the axis) reads as 'default'
    "compiler",
    "batch",
    "target",
    "input_size",
    "precision",
)
#: the SQL a point column is read with, where it is not the column itself
_POINT_SQL = {"algorithm": "coalesce({prefix}algorithm, 'default')"}
#: the compiler's own convolution (``TrialSpec.algorithm``'s default)
DEFAULT_ALGORITHM = "default"


def point_sql(column: str, prefix: str = "") -> str:
    """A point column as SQL over the trial (``prefix``: its alias and a dot)."""
    return _POINT_SQL.get(column, "{prefix}" + column).format(prefix=prefix)


_TRIAL_COLUMNS = (
    "run_id",
    "key",
    "family",
    "export_s",
    "compile_s",
    "tune_s",
    "first_call_s",
    "throughput_mean",
    "throughput_std",
    "repetitions",
    "cpu_percent_mean",
    "extra",
    "throughput_ci_half",
    "verdict",
    "verdict_reason",
    "disturbed",
    # what deciding a deployment needs (sweeps/report/deploy.py, sweeps/report/advise.py)
    "latency_p99_ms",
    "latency_p99_hi_ms",  # its upper 95 % bound; NULL: too few calls to claim it
    "latency_calls",
    "max_abs_err",
    "peak_rss_mb",
    "gpu_mem_mb",
    "energy_j_per_sample",
    "energy_j_per_sample_ci_half",
    "energy_above_idle_j_per_sample",
    "samples_per_j",
    "power_w_mean",
    "idle_power_w",
    "energy_source",
    "energy_note",
)


@dataclass(frozen=True)
class Cell:
    """A value with its 95 % interval or a spread, and a note such as "n.s." (not significant).

    ``low``/``high``: the bounds of the value's 95 % confidence interval, printed as they are
    (``6.3 [4.1, 9.6]``, ``ngb.sweeps.report.numbers.format_interval``). ``std``: a standard
    deviation printed after ``±`` (Table VI's spread over a family: a dispersion, not an
    interval). ``bold``: set in bold where the format has it (Markdown, LaTeX): the fastest
    cell of a row in DLAS's tables."""

    value: float | None
    std: float | None = None
    note: str = ""
    low: float | None = None
    high: float | None = None
    bold: bool = False

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.low is None or self.high is None:
            return None
        return (self.low, self.high)

    def with_note(self, note: str) -> Cell:
        return Cell(self.value, self.std, note, self.low, self.high, self.bold)


@dataclass
class Table:
    """One table of a report. StoreRow values are str/int/float/None or ``Cell``."""

    title: str
    columns: list[str]
    rows: list[list[object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # rows kept on disk (a report of every point, streamed: ``ngb.sweeps.report.spool``); they
    # come after ``rows``. Read them through ``each_row`` and ``row_count``.
    spool: RowSpool | None = None
    # what CSV writes instead, where a human cell holds two numbers ("56.9 (98 %)": the ops
    # report's ms and share): one number a cell, so a spreadsheet reads each as it is
    machine: Table | None = None

    def add(self, row: list[object]) -> None:
        """One more row, to the spool where the table has one."""
        if self.spool is not None:
            self.spool.append(row)
        else:
            self.rows.append(row)

    def each_row(self) -> Iterator[list[object]]:
        yield from self.rows
        if self.spool is not None:
            yield from self.spool

    def row_count(self) -> int:
        return len(self.rows) + (len(self.spool) if self.spool is not None else 0)


@dataclass
class Report:
    name: str
    title: str
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


#: marks a comparison between results that ran at different precisions (see ``PrecisionMarks``)
PRECISION_MARK = "≠prec"


def precision_of(row: Mapping[str, object]) -> str:
    """The precision a trial ran at, as recorded ("?" for results stored before it was)."""
    return str(row.get("precision") or "?")


def series_names(
    rows: Sequence[R], baseline: str, x: Callable[[R], object] = lambda r: r.get("batch")
) -> dict[int, str]:
    """``{id(row): name}`` for rows of one group (one model on one device): the compiler's name,
    or ``"compiler precision"`` where that compiler has results at several precisions for the
    same batch (or other ``x``), so tables keyed by compiler and batch keep every precision
    instead of one overwriting the other. The baseline keeps its plain name for its most common
    precision (fp32 first), so speed-ups still find it."""
    at_batch: dict[tuple[str, object], set[str]] = {}
    for r in rows:
        at_batch.setdefault((str(r["compiler"]), x(r)), set()).add(precision_of(r))
    split = {c for (c, _), ran in at_batch.items() if len(ran) > 1}
    names = {}
    for r in rows:
        compiler, ran = str(r["compiler"]), precision_of(r)
        if compiler not in split:
            names[id(r)] = compiler
            continue
        mine = sorted({precision_of(x) for x in rows if x["compiler"] == compiler})
        plain_one = compiler == baseline and ran == min(mine, key=lambda p: (p != "fp32", p))
        names[id(r)] = compiler if plain_one else f"{compiler} {ran}"
    return names


class PrecisionMarks:
    """The ratios of one table that compare two precisions: marked where they stand, named once
    in the table's notes. Such a ratio measures the number format too (bf16 against fp32, say),
    not only the compiler. ``baseline`` is what the table compares against (a compiler, or the
    un-optimised trial)."""

    def __init__(self, baseline: str) -> None:
        self.baseline = baseline
        self.pairs: set[tuple[str, str, str, str]] = set()  # (compiler, its precision, base, its)

    def mark(
        self, cell: Cell | None, row: Mapping[str, object], base: Mapping[str, object]
    ) -> Cell | None:
        """``cell`` (a ratio of ``row`` over ``base``), with ``PRECISION_MARK`` in its note when
        the two ran at different precisions. An unrecorded precision (results stored before it
        was) differs from nothing, as in the console: a mark must stand for a known difference."""
        ran, base_ran = precision_of(row), precision_of(base)
        if cell is None or ran == base_ran or "?" in (ran, base_ran):
            return cell
        self.pairs.add((str(row["compiler"]), ran, self.baseline, base_ran))
        if PRECISION_MARK in cell.note:  # ngb.sweeps.report.derived marked it already
            return cell
        return cell.with_note(f"{cell.note} {PRECISION_MARK}".strip())

    def add_note(self, table: Table) -> None:
        """Name the pairs marked in ``table`` (nothing when there are none)."""
        if not self.pairs:
            return
        listed = "; ".join(f"{c} ran {pc}, {b} {pb}" for c, pc, b, pb in sorted(self.pairs))
        table.notes.append(
            f"{PRECISION_MARK} = the two results compared ran at different precisions ({listed}): "
            "the ratio includes the number format, not only the compiler; compare like with like "
            "with `--precision fp32` (or the sweep's precision setting)"
        )


def model_label(row: Mapping[str, object]) -> str:
    """``resnet18`` or, for blocks, ``conv64x3`` (kind, width, depth) as in ``TrialSpec.label``;
    an input-size override is appended (``resnet18@160``) so differently sized runs stay apart."""
    if row.get("width") is not None and row.get("model") in ("conv", "mha"):
        label = f"{row['model']}{row['width']}x{row.get('depth') or 1}"
    else:
        label = str(row["model"])
    return label + (f"@{row['input_size']}" if row.get("input_size") else "")


def finite(value: object) -> TypeGuard[float]:
    """A real number (not None, NaN or inf); narrows ``value`` to float for the type checker."""
    return isinstance(value, int | float) and math.isfinite(value)


def known(value: object) -> float:
    """A finite number as float, anything else NaN (for rows already filtered by ``finite``)."""
    return float(value) if finite(value) else math.nan


def mean_throughput(row: Mapping[str, object]) -> float:
    """The row's mean throughput (NaN where it has none)."""
    return known(row.get("throughput_mean"))


def positive(value: object) -> TypeGuard[float]:
    """A real number above 0 (a throughput a ratio can divide by)."""
    return finite(value) and value > 0


class ReportData:
    """Trials (newest per point) and their repetition samples for one report request."""

    #: what the reads keep (cleared in a copy that reads other trials: ``with_every_algorithm``)
    _CACHES: ClassVar[tuple[str, ...]] = ("_trials", "_samples")

    def __init__(
        self,
        store: Store,
        run_id: str | None = None,
        device: str | None = None,
        prices: dict[str, Price] | None = None,  # device -> Price; None: from the inventory
    ):
        self.store = store
        self.run_id = run_id
        self.device = device
        if not store.path.exists():
            raise NgbError(f"no results database at {store.path}; run a sweep first")
        if run_id is not None:
            store.run(run_id)  # UnknownNameError listing the runs
        if device is not None:
            # a store of ``ngb serve --db`` runs only has its devices in the serving tables
            _, rows = store.select(
                "SELECT device FROM trials UNION SELECT device FROM serving "
                "UNION SELECT device FROM serving_peaks ORDER BY device"
            )
            known = [r[0] for r in rows]
            if device not in known:
                raise UnknownNameError("device", device, known)
        self._trials: list[TrialRow] | None = None
        self._samples: dict[tuple[str, str, str], list[float]] | None = None
        self._baseline: str | None = None
        self._prices: dict[str, Price] | None = prices
        # set by a caller that renders rows as they come (``ngb report`` as a table, Markdown or
        # CSV): reports of every point then read and keep them a batch at a time (``streamed``)
        self.streaming = False
        self.baseline_note = ""  # set when the runs in scope name different baselines
        # one model only (``ngb report ops --model M``); the reports that honour it say so
        self.model: str | None = None
        # ``ngb report ops -c a,b``: those compilers' columns only, in that order
        self.compilers: list[str] | None = None
        # every algorithm's trials (``ngb report algorithms``); set before the first read.
        # False: the compiler's own convolution only, as every report read before the axis
        self.all_algorithms = False
        self._serving: dict[str, tuple[list[StoreRow], list[StoreRow]]] = {}

    def with_every_algorithm(self) -> ReportData:
        """A copy that reads the trials of every algorithm (``all_algorithms``), its own reads
        apart: the reports built on this one after it (``ngb report all``, the HTML report)
        still read the compiler's own convolution only."""
        import copy

        other = copy.copy(self)
        other.all_algorithms = True
        for name in self._CACHES:
            setattr(other, name, None)
        return other

    @property
    def baseline(self) -> str:
        """The compiler speed-up, BSR and depth figures are relative to: the ``baseline`` of the
        sweeps of the runs in scope (``identity`` by default, and when the runs disagree)."""
        if self._baseline is None:
            self._baseline = self._find_baseline()
        return self._baseline

    @property
    def baseline_label(self) -> str:
        """The baseline as a reader must know it: with the allocator its trials ran under.

        Why: under glibc's defaults (``system``, what a plain deployment runs) eager PyTorch pays
        page faults that ``retain`` avoids (~20 % on resnet18 b8 on the 2-core VM), so the same
        speed-up means something else against each (issue 19); ``ngb.core.trial.allocator``."""
        found = sorted(
            {
                _allocator_name(from_json(t.get("extra")))
                for t in self.trials()
                if t.get("compiler") == self.baseline
            }
        )
        if not found:
            return self.baseline
        return f"{self.baseline} (allocator: {' / '.join(found)})"

    @property
    def prices(self) -> dict[str, Price]:
        """Device -> ``ngb.devices.pricing.Price`` from the inventory (priced devices only)."""
        if self._prices is None:
            from ngb.devices.inventory import load_inventory
            from ngb.devices.pricing import load_prices

            self._prices = load_prices(load_inventory())
        return self._prices

    def price_for(self, row: Mapping[str, object]) -> Price | None:
        """The price of the device ``row`` ran on: its stored name's, else -- a result stored
        under the Slurm node that ran it (``gpu07@a100``) -- the inventory entry it ran under
        (``ngb.devices.slurm_nodes.inventory_names``)."""
        from ngb.devices.slurm_nodes import inventory_names

        prices = self.prices
        for name in inventory_names(str(row.get("device")), from_json(row.get("extra"))):
            if name in prices:
                return prices[name]
        return None

    def devices_under(self, entries: Sequence[str]) -> list[str]:
        """The stored devices in scope that ran under the inventory ``entries`` (a Slurm entry's
        results are stored under their nodes), each entry itself where none did: the devices
        ``ngb advise --group`` answers for."""
        from ngb.devices.slurm_nodes import inventory_names

        where, params = self._where()
        slot_of = "json_extract_string(extra, '$.run_device')"
        stamped_only = "json_valid(extra) AND json_extract(extra, '$.slurm') IS NOT NULL"
        sql = f"SELECT DISTINCT device, {slot_of} FROM trials WHERE {where} AND {stamped_only}"  # noqa: S608
        stamped = sorted(self.store.select(sql, params)[1], key=lambda r: (str(r[0]), str(r[1])))
        out: list[str] = []
        for entry in entries:
            ran = [
                str(device)
                for device, slot in stamped
                if entry in inventory_names(str(device), {"slurm": {}, "run_device": slot})
            ]
            out.extend(d for d in ran or [entry] if d not in out)
        return out

    def _find_baseline(self) -> str:
        import tomllib

        where, params = self._where()
        inner = f"SELECT DISTINCT run_id FROM trials WHERE {where}"  # noqa: S608 - params
        sql = f"SELECT DISTINCT sweep_toml FROM runs WHERE run_id IN ({inner})"  # noqa: S608
        _, rows = self.store.select(sql, params)
        found = set()
        for (text,) in rows:
            try:
                value = tomllib.loads(text or "").get("baseline", DEFAULT_BASELINE)
            except tomllib.TOMLDecodeError:
                value = DEFAULT_BASELINE
            found.add(value if isinstance(value, str) else DEFAULT_BASELINE)
        if len(found) == 1:
            return found.pop()
        if found:
            self.baseline_note = (
                f"the runs in scope name different baselines ({', '.join(sorted(found))}); "
                f"{DEFAULT_BASELINE} is used (pick one with --run)"
            )
        return DEFAULT_BASELINE

    def _where(self, alias: str = "", status: str = "= 'ok'") -> tuple[str, list[str]]:
        prefix = f"{alias}." if alias else ""
        clauses, params = [f"{prefix}status {status}"], []
        if not self.all_algorithms:
            clauses.append(f"{point_sql('algorithm', prefix)} = '{DEFAULT_ALGORITHM}'")
        if self.run_id is not None:
            clauses.append(f"{prefix}run_id = ?")
            params.append(self.run_id)
        if self.device is not None:
            clauses.append(f"{prefix}device = ?")
            params.append(self.device)
        return " AND ".join(clauses), params

    def _latest_sql(self, select: str = "") -> tuple[str, list[str]]:
        """The newest successful trial of each point (newest ``finished_at``, an unrecorded one
        last, then the greater run id), with the columns reports read (and ``select``: more
        SQL columns over the trial ``t``).

        Why two steps: the newest trial's row id comes from an aggregate over the narrow point
        columns, and only those trials' wide columns are read afterwards. A window over the
        wide rows (``QUALIFY row_number() ...``) made DuckDB hold every stored trial's row: 374
        MiB peak for 4,000 points on a 0.9 GiB store of 480,000 trials, against 93 MiB here.
        The row id (one number per point) rather than [run, device, key] (a list of three
        strings): on 480,000 distinct points the query peaked at 268 MiB against 302, in half
        the time -- a row id holds within the one query it is taken in."""
        return self._newest_sql(_TRIAL_COLUMNS, select)

    def _newest_sql(
        self, trial_columns: Sequence[str], select: str = "", status: str = "= 'ok'"
    ) -> tuple[str, list[str]]:
        """``_latest_sql`` over the trials of ``status`` (a SQL condition on the column)."""
        where, params = self._where(status=status)
        partition = ", ".join(map(point_sql, POINT_COLUMNS))
        columns = ", ".join(
            [f"{point_sql(c, 't.')} AS {c}" for c in POINT_COLUMNS]
            + [f"t.{c}" for c in trial_columns]
        )
        columns += f", {select}" if select else ""
        newest = (  # fixed column names; the filters are parameters
            "SELECT arg_max(rowid, (finished_at IS NOT NULL, "  # noqa: S608
            "coalesce(finished_at, TIMESTAMP '1970-01-01'), run_id)) "
            f"FROM trials WHERE {where} GROUP BY {partition}"
        )
        sql = f"SELECT {columns} FROM trials t WHERE t.rowid IN ({newest})"  # noqa: S608
        return sql, params

    def point_count(self) -> int:
        """How many points ``trials()`` would give, counted in SQL over the narrow point columns
        (a report decides from it whether to stream)."""
        where, params = self._where()
        sql = (
            "SELECT count(*) FROM (SELECT 1 FROM trials "  # noqa: S608
            f"WHERE {where} GROUP BY {', '.join(map(point_sql, POINT_COLUMNS))})"
        )
        _, rows = self.store.select(sql, params)
        return int(rows[0][0]) if rows else 0

    def trials(self) -> Sequence[TrialRow]:
        """Successful trials, newest per point, as dicts (``extra`` decoded)."""
        if self._trials is None:
            self._trials = self._read_trials("", [])
        return self._trials

    def serving(self, device: str) -> tuple[list[StoreRow], list[StoreRow]]:
        """The device's VALID server-scenario runs and its peak searches (``ngb serve --db``,
        any run: they are runs of their own), newest first, read once per device."""
        if device not in self._serving:
            from ngb.sweeps.store.serving import peak_rows, server_rows

            self._serving[device] = (server_rows(self.store, device), peak_rows(self.store, device))
        return self._serving[device]

    def trials_of(self, device: str, label: str) -> list[TrialRow]:
        """``trials()`` of one model label on one device, filtered in SQL first: ``advise``
        reads one group, not the store (on 480,000 points, all newest, ``trials()`` peaked at
        1.5 GiB). The SQL keeps every trial that may carry ``label`` (its model, or the block
        kind and width a ``conv8x1`` names); ``model_label`` then decides, as everywhere."""
        if self._trials is not None:
            return [t for t in self._trials if t["device"] == device and t["label"] == label]
        base = label.split("@", 1)[0]
        block = re.fullmatch(r"(conv|mha)(\d+)x\d+", base)
        clause, params = " AND l.device = ? AND (l.model = ?", [device, base]
        if block:
            clause += " OR (l.model = ? AND l.width = ?)"
            params += [block.group(1), block.group(2)]
        rows = self._read_trials(clause + ")", params)
        return [t for t in rows if t["label"] == label]

    def _read_trials(self, extra: str, extra_params: list[str]) -> list[TrialRow]:
        sql, params = self._latest_sql()
        if extra:
            sql = f"SELECT * FROM ({sql}) l WHERE true{extra}"  # noqa: S608 - fixed clauses
        columns, rows = self.store.select(
            sql + " ORDER BY device, model, width, depth", [*params, *extra_params]
        )
        return [_decoded(dict(zip(columns, row, strict=True))) for row in rows]

    @contextlib.contextmanager
    def streamed(
        self,
        order: Sequence[str],
        keys: Mapping[str, Callable[[Mapping[str, object]], object]] | None = None,
        select: str = "",
        rows: int = 2048,
    ) -> Iterator[Iterator[list[TrialRow]]]:
        """``trials()`` ``rows`` at a time, sorted by ``order``, never all in memory: for the
        reports that list every point. ``order`` names columns: the selected ones, ``label``,
        or one of ``keys`` (computed on the way from each row's point columns: ``POINT_COLUMNS``;
        ``compiler_order``'s rank, say).
        ``select``: more SQL columns over the trial ``t``. The rows are set aside in a spill
        (``ngb.sweeps.store.spill``), so the store is held only while they are copied out.

        Reads the store even where ``trials()`` has been read: a subclass narrowing
        ``trials()`` (``FigureData``) must not use this."""
        import pyarrow as pa
        from ngb.sweeps.store.spill import spill

        computed = {"label": model_label, **(keys or {})}

        def extend(batch: pa.RecordBatch) -> pa.RecordBatch:
            listed = batch.select(list(POINT_COLUMNS)).to_pylist()  # what a label is made of
            for name, key in computed.items():
                batch = batch.append_column(name, pa.array([key(r) for r in listed]))
            return batch

        sql, params = self._latest_sql(select)
        with spill(self.store, sql, params, extend) as spilled:
            yield ([_decoded(row) for row in batch] for batch in spilled.batches(order, rows))

    def verdict_counts(self) -> list[tuple[str, str, int]]:
        """(verdict, its reason, how many) over ``trials()`` with a verdict, counted in SQL
        where the trials have not been read: a note on every trial need not read them."""
        if self._trials is not None:
            counted: dict[tuple[str, str], int] = {}
            for t in self._trials:
                if t.get("verdict"):
                    key = (str(t.get("verdict")), str(t.get("verdict_reason") or ""))
                    counted[key] = counted.get(key, 0) + 1
            return [(v, r, n) for (v, r), n in counted.items()]
        sql, params = self._latest_sql()
        query = (
            "SELECT verdict, coalesce(verdict_reason, ''), count(*) "  # noqa: S608 - fixed
            f"FROM ({sql}) l WHERE coalesce(verdict, '') <> '' GROUP BY ALL ORDER BY ALL"
        )
        return [(str(v), str(r), int(n)) for v, r, n in self.store.select(query, params)[1]]

    def width_rows(self) -> list[StoreRow]:
        """The judged trials' verdicts with their stated interval and mean (and settings): what
        ``verdicts.reached_target`` offers a wider target from; narrow columns, read in SQL."""
        sql, params = self._latest_sql("t.measure")
        query = (  # fixed column names; the filters are parameters
            "SELECT 'ok' AS status, verdict, verdict_reason, throughput_ci_half, "  # noqa: S608
            f"throughput_mean, measure FROM ({sql}) l WHERE coalesce(verdict, '') <> ''"
        )
        names, rows = self.store.select(query, params)
        return [dict(zip(names, r, strict=True)) for r in rows]

    def labels(self) -> list[str]:
        """The model labels (``model_label``) with a successful trial in scope, sorted: the
        points' label columns only, no trial read."""
        where, params = self._where()
        columns = "model, width, depth, input_size"
        sql = f"SELECT DISTINCT {columns} FROM trials WHERE {where}"  # noqa: S608 - fixed
        names, rows = self.store.select(sql, params)
        return sorted({model_label(dict(zip(names, r, strict=True))) for r in rows})

    def devices(self) -> list[str]:
        """Devices with a successful trial in scope (no trial read)."""
        where, params = self._where()
        sql = f"SELECT DISTINCT device FROM trials WHERE {where} ORDER BY device"  # noqa: S608
        return [str(r[0]) for r in self.store.select(sql, params)[1]]

    def failures(self) -> list[StoreRow]:
        """The newest failed trial of each point in scope, with its stored ``error`` and
        ``error_kind`` (an ``unsupported`` pair says why the compiler refused it): the empty
        cells a report explains. Newest as ``trials()`` takes them; narrow columns only."""
        sql, params = self._newest_sql(
            ("run_id", "key", "status", "error", "error_kind", "finished_at"), status="<> 'ok'"
        )
        names, rows = self.store.select(sql + " ORDER BY device, model, width, depth", params)
        out: list[StoreRow] = []
        for row in rows:
            item = dict(zip(names, row, strict=True))
            item["label"] = model_label(item)
            out.append(item)
        return out

    def samples(self, trial: TrialRow) -> list[float]:
        """Per-repetition throughputs of one trial (empty when none were stored)."""
        if self._samples is None:
            sql, params = self._latest_sql()
            query = (
                f"WITH latest AS ({sql}) "  # noqa: S608 - built from fixed names above
                "SELECT m.run_id, m.device, m.key, list(m.throughput ORDER BY m.rep) "
                "FROM measurements m JOIN latest l "
                "ON m.run_id = l.run_id AND m.device = l.device AND m.key = l.key "
                "GROUP BY ALL"
            )
            _, rows = self.store.select(query, params)
            self._samples = {
                (r[0], r[1], r[2]): [float(v) for v in r[3] if v is not None] for r in rows
            }
        return self._samples.get((trial["run_id"], trial["device"], trial["key"]), [])

    def probes(self) -> list[StoreRow]:
        """The newest probe of each device (honours ``--device``)."""
        where, params = ("WHERE device = ?", [self.device]) if self.device else ("", [])
        columns, rows = self.store.select(
            f"SELECT * FROM probes {where} "  # noqa: S608 - fixed text
            "QUALIFY row_number() OVER (PARTITION BY device ORDER BY probed_at DESC) = 1 "
            "ORDER BY device",
            params,
        )
        out = []
        for row in rows:
            item = dict(zip(columns, row, strict=True))
            for name in ("compilers", "versions", "probe", "gpu"):
                if isinstance(item.get(name), str):
                    with contextlib.suppress(ValueError):
                        item[name] = json.loads(item[name])
            out.append(item)
        return out


def group(rows: Iterable[R], *keys: str) -> dict[tuple[object, ...], list[R]]:
    """Rows grouped by the given columns, groups in first-seen order (``group_by`` keeps the
    key's types where a caller reads them back)."""
    return group_by(rows, lambda row: tuple(row[k] for k in keys))


def group_by(rows: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """Rows grouped by ``key(row)`` (a tuple of columns, typically), groups in first-seen order."""
    out: dict[K, list[T]] = {}
    for row in rows:
        out.setdefault(key(row), []).append(row)
    return out


def _allocator_name(extra: Mapping[str, object]) -> str:
    """``system`` / ``retain`` / ``unrecorded`` from what a trial recorded (``extra["allocator"]``:
    "system", "glibc retain (M_MMAP_MAX=0, ...)", "system (mallopt unavailable)")."""
    text = str(extra.get("allocator") or "")
    if not text:
        return "unrecorded"
    return "retain" if text.startswith("glibc retain") else text.split(" (")[0]


def _decoded(item: dict[str, object]) -> TrialRow:
    """One selected trial (a dict by column): ``extra`` decoded, its ``label`` (``model_label``)."""
    extra_json = item.get("extra")
    item["extra"] = json.loads(extra_json) if isinstance(extra_json, str) and extra_json else {}
    item["label"] = model_label(item)
    return cast(TrialRow, item)  # the columns selected, typed as the schema declares them
