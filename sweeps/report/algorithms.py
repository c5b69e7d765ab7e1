"""``ngb report algorithms``: DLAS's algorithm tables (issue 48) from the results database.

A trial's ``algorithm`` (``ngb.core.models.algorithms``: ``default`` = the compiler's own
convolution, ``direct``, ``gemm`` = im2col + matrix multiply, ``sparse-csr``, ``sparse-bsr-B``) is
the DLAS "algorithm layer". This report reads every algorithm's trials
(``ReportData.all_algorithms``; every other report reads the compiler's own choice only) and their
refusals:

- **Time per batch** (DLAS Tables 3/4/6/7): per device, model, optimisation (the technique) and
  batch, one row per compiler (``tvm`` = untuned, ``tvm-ms`` = tuned by MetaSchedule), one
  column per algorithm that appears. A cell is ``1000 * batch / T`` in ms with its 95 % interval
  (``derived.batch_time_ms``: the throughput's stored interval, bounds swapped); the fastest
  cell of a row is bold (Markdown, LaTeX) and named in the ``fastest`` column, with "n.s." where
  the runner-up's time is not significantly longer (``derived.speedup`` of the two includes 1);
  the fastest of the table carries the note ``fastest of all``. A pair the compiler refused (or
  a trial that failed) reads ``— [n]``, footnote n quoting the stored reason (``error``,
  ``error_kind``).
- **Speed-up and % of expected**, per device and model: each trial against the same compiler's
  unpruned (``optimisation = none``) ``default`` trial at the same batch (``derived.speedup``);
  expected = ``extra.optimisation.expected_speedup`` (the compression ratio: non-zeros for weight
  pruning; 1 for an unpruned model), and for the sparse algorithms also the one by the bytes the
  format really stores: the unpruned model's dense bytes (``extra.optimisation.bytes_before``,
  else ``extra.algorithm.dense_bytes``) over ``extra.algorithm.stored_bytes``. % of expected =
  ``100 * speed-up / expected`` with the speed-up's interval (``derived.of_expected``); n.s. =
  the printed interval includes 100 % (the expectation is reached).
- **Observations** DLAS draws from these tables, each judged on the data in scope with its
  intervals, or said why it cannot be: (a) the fastest algorithm differs per device, (b) tuning
  changes which algorithm is best, (c) weight pruning rarely reaches its expected speed-up,
  (d) tuned sparse models are faster than dense (and eager sparse against eager dense at the
  pruning elbow).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.records.trial_extra import from_json
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import (
    Cell,
    Report,
    ReportData,
    Table,
    group_by,
    positive,
    precision_of,
    series_names,
)
from ngb.sweeps.report.derived import Derived
from ngb.sweeps.report.paper import UNCERTAINTY_NOTE, cell, compiler_order
from ngb.sweeps.rows import StoreRow, TrialRow, mapping, number

#: PyTorch eager: the compiler whose sparse and dense trials observation (d) compares
EAGER = "identity"
UNTUNED, TUNED = "tvm", "tvm-ms"
#: how a compiler's row is named in the tables (the paper's "untuned"/"tuned" TVM)
ROW_NAMES = {UNTUNED: "tvm (untuned)", TUNED: "tvm-ms (tuned)"}
DEFAULT = "default"
SPARSE_KINDS = ("sparse-csr", "sparse-bsr")
REFUSED = "—"
FASTEST = "fastest"
TABLE_BEST = "fastest of all"

TIME_NOTE = (
    "time per batch = 1000 · batch / throughput (ms), its 95 % interval from the throughput's "
    "stored one; fastest = the row's fastest algorithm (bold in Markdown and LaTeX; n.s. = not "
    f"significantly faster than the runner-up); '{TABLE_BEST}' = the fastest cell of the table; "
    f"{REFUSED} [n] = refused or failed, the stored reason in note [n]; - = not measured"
)
SPEEDUP_NOTE = (
    "speed-up = T / T of the same compiler's unpruned default trial at the same batch; "
    "expected = the optimisation's compression ratio (extra.optimisation.expected_speedup: "
    "non-zeros for weight pruning; 1 unpruned); expected (bytes) = the unpruned model's dense "
    "bytes / the bytes the sparse format stores; % = 100 · speed-up / expected, n.s. = the "
    "printed interval includes 100 %"
)

Point = tuple[object, ...]


def algorithm_order(name: object) -> tuple[int, int, str]:
    """Sort key: the kinds in ``ngb.core.records.algorithm_names.KINDS`` order, blocks by side."""
    from ngb.core.records.algorithm_names import KINDS, parse

    try:
        parsed = parse(name)
    except ConfigError:
        return (len(KINDS), 0, str(name))
    return (KINDS.index(parsed.kind), parsed.block or 0, parsed.name)


def kind_of(name: object) -> str:
    """An algorithm's kind (``sparse-bsr`` for every block side); the name itself if unknown."""
    from ngb.core.records.algorithm_names import parse

    try:
        return parse(name).kind
    except ConfigError:
        return str(name)


def _algorithm(row: Mapping[str, object]) -> str:
    return str(row.get("algorithm") or DEFAULT)


def _optimisation(row: Mapping[str, object]) -> str:
    return str(row.get("optimisation") or "none")


def _where(row: Mapping[str, object]) -> Point:
    """The table a trial's time goes in: device, model label, optimisation, batch, target."""
    return (row["device"], row["label"], _optimisation(row), row["batch"], row.get("target"))


def _cell_point(row: Mapping[str, object]) -> Point:
    """One cell of the time table (a failed attempt of a point measured since is no cell)."""
    return (*_where(row), row["compiler"], _algorithm(row))


def row_name(name: str) -> str:
    """A table row's name: the compiler's, TVM's with untuned/tuned (the paper's)."""
    compiler, _, rest = name.partition(" ")
    shown = ROW_NAMES.get(compiler, compiler)
    return f"{shown} {rest}" if rest else shown


def algorithms(data: ReportData) -> Report:
    data = data.with_every_algorithm()
    rows = [r for r in data.trials() if positive(r.get("throughput_mean"))]
    measured = {_cell_point(r) for r in rows}
    failed = [f for f in data.failures() if _cell_point(f) not in measured]
    report = Report("algorithms", "DLAS algorithm layer: convolution primitives per compiler")
    if not any(_algorithm(r) != DEFAULT for r in [*rows, *failed]):
        report.notes.append(
            "no trial ran another algorithm than the compiler's own (`algorithms = [...]` in a "
            "sweep's [[matrix]], `ngb measure --algorithm`)"
        )
    report.tables += time_tables(rows, failed)
    report.tables += speedup_tables(rows)
    report.tables.append(observations(rows, failed))
    return report


# ---------------------------------------------------------------- time per batch


def time_tables(rows: Sequence[TrialRow], failed: Sequence[StoreRow]) -> list[Table]:
    """One table per device, model, optimisation and batch (see module)."""
    ok_by = group_by(rows, _where)
    failed_by = group_by(failed, _where)
    keys = sorted(set(ok_by) | set(failed_by), key=_table_order)
    return [_time_table(key, ok_by.get(key, []), failed_by.get(key, [])) for key in keys]


def _table_order(key: Point) -> tuple[str, str, bool, str, int, str]:
    """Devices, models, then the unpruned model before its optimisations, batches ascending."""
    device, label, optimisation, batch, target = key
    size = batch if isinstance(batch, int) else 0
    return (str(device), str(label), optimisation != "none", str(optimisation), size, str(target))


def _time_table(key: Point, rows: Sequence[TrialRow], failed: Sequence[StoreRow]) -> Table:
    device, label, optimisation, batch, target = key
    names = series_names(rows, EAGER, x=_algorithm)
    series: dict[str, dict[str, TrialRow | StoreRow]] = {}
    for r in rows:
        series.setdefault(names[id(r)], {})[_algorithm(r)] = r
    for f in failed:
        series.setdefault(str(f["compiler"]), {}).setdefault(_algorithm(f), f)
    columns = sorted({a for cells in series.values() for a in cells}, key=algorithm_order)
    on = f"{device}" + (f" ({target})" if target not in (None, "cpu") else "")
    table = Table(
        f"DLAS algorithms: {label} on {on}, {optimisation}, batch {batch}: time per batch (ms)",
        ["compiler", *columns, FASTEST],
    )
    table.notes.append(TIME_NOTE)
    footnotes: dict[str, int] = {}
    best_cell: tuple[float, int, int] | None = None  # (ms, row index, column index)
    for name in sorted(series, key=compiler_order):
        cells = series[name]
        times = {
            a: derived.batch_time_ms(r, int(batch) if isinstance(batch, int) else 0)
            for a, r in cells.items()
            if r.get("status", "ok") == "ok" and positive(r.get("throughput_mean"))
        }
        ranked = sorted((t.value, algorithm_order(a), a) for a, t in times.items())
        line: list[object] = [row_name(name)]
        for a in columns:
            held = cells.get(a)
            if held is None:
                line.append(None)
            elif a in times:
                shown = cell(times[a]) or Cell(None)
                fastest = len(ranked) > 1 and a == ranked[0][2]
                line.append(Cell(shown.value, None, shown.note, shown.low, shown.high, fastest))
            else:
                reason = _reason(held)
                number_ = footnotes.setdefault(reason, len(footnotes) + 1)
                line.append(f"{REFUSED} [{number_}]")
        line.append(_fastest_text([cells[a] for _, _, a in ranked]) if len(ranked) > 1 else None)
        if ranked and (best_cell is None or ranked[0][0] < best_cell[0]):
            best_cell = (ranked[0][0], len(table.rows), 1 + columns.index(ranked[0][2]))
        table.rows.append(line)
    measured = sum(isinstance(v, Cell) for line in table.rows for v in line)
    if best_cell is not None and measured > 1:
        _, i, j = best_cell
        found = table.rows[i][j]
        if isinstance(found, Cell):
            table.rows[i][j] = found.with_note(f"{found.note} {TABLE_BEST}".strip())
    table.notes += [f"[{n}] {reason}" for reason, n in footnotes.items()]
    table.notes.append(UNCERTAINTY_NOTE)
    return table


def _reason(row: Mapping[str, object]) -> str:
    """A failed trial's stored reason, as a footnote says it."""
    error = str(row.get("error") or "no reason stored")
    kind = row.get("error_kind")
    return f"{row.get('compiler')} {_algorithm(row)}: {error}" + (f" ({kind})" if kind else "")


def _fastest_text(ranked: Sequence[Mapping[str, object]]) -> str:
    """The fastest algorithm of a row, "n.s." where the runner-up is not significantly slower."""
    best, second = ranked[0], ranked[1]
    margin = derived.speedup(best, second)  # T_best / T_second
    text = _algorithm(best)
    return f"{text} (n.s. vs {_algorithm(second)})" if margin.significant is False else text


# ---------------------------------------------------------------- speed-up and % of expected


def _same_compiler(row: Mapping[str, object]) -> Point:
    """What a trial's speed-up is against: the same compiler on the same device, model, batch
    and target, unpruned, with its own convolution."""
    return (row["device"], row["label"], row["compiler"], row["batch"], row.get("target"))


def _baseline_of(row: TrialRow, baselines: Mapping[Point, Sequence[TrialRow]]) -> TrialRow | None:
    """The unpruned default trial of ``row``'s compiler: at its precision where there is one."""
    found = baselines.get(_same_compiler(row), [])
    mine = [b for b in found if precision_of(b) == precision_of(row)]
    return next(iter((*mine, *found)), None)


def expected_nnz(row: Mapping[str, object]) -> float | None:
    """The optimisation's expected speed-up (1 for an unpruned model; None: not recorded)."""
    if _optimisation(row) == "none":
        return 1.0
    value = number(mapping(from_json(row.get("extra")).get("optimisation")).get("expected_speedup"))
    return value if value is not None and value > 0 else None


def expected_bytes(row: Mapping[str, object]) -> float | None:
    """For a sparse algorithm: the unpruned model's dense bytes over the bytes its format
    stores (what the format really costs); None for a dense one or where not recorded."""
    if kind_of(_algorithm(row)) not in SPARSE_KINDS:
        return None
    extra = from_json(row.get("extra"))
    facts = mapping(extra.get("algorithm"))
    dense = number(mapping(extra.get("optimisation")).get("bytes_before"))
    if dense is None:
        dense = number(facts.get("dense_bytes"))
    stored = number(facts.get("stored_bytes"))
    if dense is None or stored is None or dense <= 0 or stored <= 0:
        return None
    return dense / stored


def speedup_tables(rows: Sequence[TrialRow]) -> list[Table]:
    """Per device and model: each trial's speed-up and its % of expected (see module)."""
    baselines = group_by(
        [r for r in rows if _optimisation(r) == "none" and _algorithm(r) == DEFAULT],
        _same_compiler,
    )
    tables = []
    for (device, label), group in group_by(rows, lambda r: (r["device"], r["label"])).items():
        table = Table(
            f"DLAS algorithms: {label} on {device}: speed-up and % of expected",
            ["optimisation", "batch", "compiler", "algorithm", "ms per batch", "speed-up",
             "expected", "% of expected", "expected (bytes)", "% of expected (bytes)"],
        )  # fmt: skip
        table.notes += [SPEEDUP_NOTE, UNCERTAINTY_NOTE]
        missing: set[str] = set()
        ordered = sorted(
            group,
            key=lambda r: (_optimisation(r) != "none", _optimisation(r), r["batch"],
                           compiler_order(r["compiler"]), algorithm_order(_algorithm(r))),
        )  # fmt: skip
        for r in ordered:
            base = _baseline_of(r, baselines)
            ratio = derived.speedup(r, base) if base is not None else None
            if base is None:
                missing.add(f"{row_name(r['compiler'])} b{r['batch']}")
            nnz, by_bytes = expected_nnz(r), expected_bytes(r)
            table.rows.append(
                [_optimisation(r), r["batch"], row_name(r["compiler"]), _algorithm(r),
                 cell(derived.batch_time_ms(r, r["batch"])), cell(ratio), nnz,
                 cell(_percent(ratio, nnz)), by_bytes, cell(_percent(ratio, by_bytes))]
            )  # fmt: skip
        if missing:
            table.notes.append(
                "no unpruned default trial to compare with: " + ", ".join(sorted(missing))
            )
        tables.append(table)
    return tables


def _percent(ratio: Derived | None, expected: float | None) -> Derived | None:
    if ratio is None or expected is None:
        return None
    return derived.of_expected(ratio, expected)


# ---------------------------------------------------------------- observations


def observations(rows: Sequence[TrialRow], failed: Sequence[StoreRow]) -> Table:
    """DLAS's observations on the algorithm layer, each judged here or said why it cannot be."""
    table = Table(
        "DLAS algorithms: observations", ["observation", "here", "evidence (95 % intervals)"]
    )
    checks: list[tuple[str, Callable[[], tuple[str, list[str]]]]] = [
        ("(a) the fastest algorithm differs per device", lambda: per_device(rows)),
        ("(b) tuning changes which algorithm is best", lambda: tuning(rows)),
        ("(c) weight pruning rarely reaches its expected speed-up", lambda: pruning(rows)),
        ("(d) tuned sparse models are faster than dense", lambda: sparse(rows, failed)),
    ]
    for claim, judge in checks:
        verdict, evidence = judge()
        table.rows.append([claim, verdict, evidence[0] if evidence else None])
        table.rows += [["", "", line] for line in evidence[1:]]
    table.notes.append(
        "each observation is judged on the trials in scope; 'cannot be judged here' says what "
        "it needs. Comparisons of two times use the interval of their ratio (n.s. = it includes 1)"
    )
    return table


def _best_two(cells: Mapping[str, TrialRow]) -> tuple[TrialRow, TrialRow, Derived] | None:
    """The fastest and the runner-up of one compiler's algorithms at one point, and the
    speed-up of the first over the second; None with fewer than two."""
    if len(cells) < 2:
        return None
    ranked = sorted(cells.values(), key=lambda r: (-float(r["throughput_mean"] or 0),
                                                  algorithm_order(_algorithm(r))))  # fmt: skip
    return ranked[0], ranked[1], derived.speedup(ranked[0], ranked[1])


def _per_algorithm(rows: Sequence[TrialRow]) -> dict[str, TrialRow]:
    """Algorithm -> its fastest trial (two precisions of one compiler: the faster one)."""
    out: dict[str, TrialRow] = {}
    for r in rows:
        held = out.get(_algorithm(r))
        if held is None or float(r["throughput_mean"] or 0) > float(held["throughput_mean"] or 0):
            out[_algorithm(r)] = r
    return out


def _best_text(best: TrialRow, second: TrialRow, margin: Derived) -> str:
    time = derived.batch_time_ms(best, best["batch"]).text()
    overlap = ", the best two overlap" if margin.significant is False else ""
    return (
        f"{_algorithm(best)} {time} ms, x{margin.text(with_flags=False)} over "
        f"{_algorithm(second)}{overlap}"
    )


def per_device(rows: Sequence[TrialRow]) -> tuple[str, list[str]]:
    """(a): the same compiler, model, optimisation and batch on two or more devices, each with
    two or more algorithms: does the fastest differ?"""
    devices = sorted({str(r["device"]) for r in rows})
    if len(devices) < 2:
        return (
            "cannot be judged here",
            [f"needs two or more devices; the trials in scope ran on {', '.join(devices) or '-'}"],
        )
    groups = group_by(rows, lambda r: (r["label"], _optimisation(r), r["batch"], r["compiler"]))
    evidence, differs, clear, compared = [], 0, 0, 0
    for (label, optimisation, batch, compiler), group in groups.items():
        best = {}
        for device, on in group_by(group, lambda r: r["device"]).items():
            found = _best_two(_per_algorithm(on))
            if found is not None:
                best[str(device)] = found
        if len(best) < 2:
            continue
        compared += 1
        chosen = {_algorithm(b) for b, _, _ in best.values()}
        sure = all(m.significant for _, _, m in best.values())
        differs += len(chosen) > 1
        clear += len(chosen) > 1 and sure
        said = "; ".join(f"{d}: {_best_text(*found)}" for d, found in sorted(best.items()))
        what = "differs" if len(chosen) > 1 else "the same"
        evidence.append(f"{label} {optimisation} b{batch} {row_name(compiler)}: {what}: {said}")
    if not compared:
        return (
            "cannot be judged here",
            [f"no compiler ran two or more algorithms of one point on two devices "
             f"({', '.join(devices)})"],
        )  # fmt: skip
    verdict = (
        f"holds in {differs} of {compared} ({clear} with every device's choice significant)"
        if differs
        else f"does not hold: the same fastest algorithm on every device ({compared} compared)"
    )
    return verdict, evidence


def tuning(rows: Sequence[TrialRow]) -> tuple[str, list[str]]:
    """(b): tvm (untuned) and tvm-ms (tuned) at one point with two or more algorithms each."""
    groups = group_by(rows, lambda r: (r["device"], r["label"], _optimisation(r), r["batch"]))
    evidence, changed, clear, compared = [], 0, 0, 0
    for (device, label, optimisation, batch), group in groups.items():
        mine = {
            c: _per_algorithm([r for r in group if r["compiler"] == c]) for c in (UNTUNED, TUNED)
        }
        shared = set(mine[UNTUNED]) & set(mine[TUNED])
        untuned = _best_two({a: mine[UNTUNED][a] for a in shared})
        tuned = _best_two({a: mine[TUNED][a] for a in shared})
        if untuned is None or tuned is None:
            continue
        compared += 1
        moved = _algorithm(untuned[0]) != _algorithm(tuned[0])
        sure = bool(untuned[2].significant and tuned[2].significant)
        changed += moved
        clear += moved and sure
        what = "changes" if moved else "the same"
        evidence.append(
            f"{device} {label} {optimisation} b{batch}: {what}: untuned {_best_text(*untuned)}; "
            f"tuned {_best_text(*tuned)}"
        )
    if not compared:
        have = sorted({str(r["compiler"]) for r in rows} & {UNTUNED, TUNED})
        return (
            "cannot be judged here",
            [f"needs {UNTUNED} and {TUNED} trials of two or more algorithms at one point (in "
             f"scope: {', '.join(have) or 'neither'})"],
        )  # fmt: skip
    verdict = (
        f"holds in {changed} of {compared} ({clear} with both choices significant)"
        if changed
        else f"does not hold: tuning keeps the fastest algorithm ({compared} compared)"
    )
    return verdict, evidence


def pruning(rows: Sequence[TrialRow]) -> tuple[str, list[str]]:
    """(c): every weight-pruned trial's % of expected (by non-zeros; by bytes for sparse)."""
    baselines = group_by(
        [r for r in rows if _optimisation(r) == "none" and _algorithm(r) == DEFAULT],
        _same_compiler,
    )
    evidence: list[str] = []
    short = reached = 0
    short_bytes = judged_bytes = 0
    pruned = [r for r in rows if "prune" in _optimisation(r)]
    for r in sorted(pruned, key=lambda r: (r["device"], r["label"], _optimisation(r), r["batch"],
                                           compiler_order(r["compiler"]),
                                           algorithm_order(_algorithm(r)))):  # fmt: skip
        base = _baseline_of(r, baselines)
        nnz = expected_nnz(r)
        if base is None or nnz is None:
            continue
        ratio = derived.speedup(r, base)
        percent = derived.of_expected(ratio, nnz)
        if percent is None or percent.interval is None:
            continue
        below = percent.significant and percent.value < 100
        short += bool(below)
        reached += not below
        line = (
            f"{r['device']} {r['label']} {_optimisation(r)} b{r['batch']} "
            f"{row_name(r['compiler'])} {_algorithm(r)}: speed-up {ratio.text()}, "
            f"{percent.text()} % of x{nnz:.3g} by non-zeros"
        )
        by_bytes = expected_bytes(r)
        of_bytes = derived.of_expected(ratio, by_bytes) if by_bytes is not None else None
        if of_bytes is not None and of_bytes.interval is not None:
            judged_bytes += 1
            short_bytes += bool(of_bytes.significant and of_bytes.value < 100)
            line += f", {of_bytes.text()} % of x{by_bytes:.3g} by bytes stored"
        evidence.append(line)
    judged = short + reached
    if not judged:
        return (
            "cannot be judged here",
            ["needs weight-pruned trials (optimisations prune-l1-R, elbow-prune-l1) with "
             "intervals and the same compiler's unpruned default trial"],
        )  # fmt: skip
    verdict = (
        f"{'holds' if short > reached else 'does not hold'}: {short} of {judged} pruned trials "
        "fall short of the speed-up expected by non-zeros (interval below 100 %)"
    )
    if judged_bytes:
        verdict += f"; by bytes stored, {short_bytes} of {judged_bytes} sparse trials"
    return verdict, evidence


def sparse(rows: Sequence[TrialRow], failed: Sequence[StoreRow]) -> tuple[str, list[str]]:
    """(d): tvm-ms sparse against tvm-ms dense; where TVM refuses sparse weights, its stored
    reason, and eager sparse against eager dense at the pruning elbow instead."""
    evidence: list[str] = []
    parts: list[str] = []
    tuned = _sparse_against_dense([r for r in rows if r["compiler"] == TUNED])
    refusals = sorted(
        {str(f.get("error")) for f in failed
         if f["compiler"] == TUNED and kind_of(_algorithm(f)) in SPARSE_KINDS}
    )  # fmt: skip
    if tuned[1]:
        parts.append(f"tuned: {tuned[0]}")
        evidence += [f"{row_name(TUNED)} {line}" for line in tuned[1]]
    elif refusals:
        parts.append(f"tuned: cannot be judged here, {TUNED} refused every sparse trial")
        evidence += [f"{TUNED} refused: {reason}" for reason in refusals]
    else:
        parts.append(f"tuned: cannot be judged here, no {TUNED} sparse trial beside a dense one")
        declared = _declared_refusal(TUNED, "sparse-csr")
        if declared:
            evidence.append(f"{TUNED} declares sparse unsupported: {declared}")
    at_elbow = [r for r in rows if r["compiler"] == EAGER and _optimisation(r).startswith("elbow")]
    where = "at the elbow"
    if not any(kind_of(_algorithm(r)) in SPARSE_KINDS for r in at_elbow):
        at_elbow = [r for r in rows if r["compiler"] == EAGER and "prune" in _optimisation(r)]
        where = "pruned (no elbow trial in scope)"
    eager = _sparse_against_dense(at_elbow)
    if eager[1]:
        parts.append(f"eager {where}: {eager[0]}")
        evidence += [f"{row_name(EAGER)} {line}" for line in eager[1]]
    else:
        parts.append("eager: cannot be judged here, no pruned sparse trial beside a dense one")
    return "; ".join(parts), evidence


def _sparse_against_dense(rows: Sequence[TrialRow]) -> tuple[str, list[str]]:
    """Each sparse trial against the dense default trial of the same point: T_sparse / T_dense
    (a verdict summing them, and one line each)."""
    dense = {
        (r["device"], r["label"], _optimisation(r), r["batch"], r.get("target")): r
        for r in rows
        if _algorithm(r) == DEFAULT
    }
    lines: list[str] = []
    faster = slower = unclear = 0
    for r in rows:
        if kind_of(_algorithm(r)) not in SPARSE_KINDS:
            continue
        base = dense.get((r["device"], r["label"], _optimisation(r), r["batch"], r.get("target")))
        if base is None:
            continue
        ratio = derived.speedup(r, base)
        if ratio.significant:
            faster += ratio.value > 1
            slower += ratio.value < 1
        else:
            unclear += 1
        lines.append(
            f"{r['device']} {r['label']} {_optimisation(r)} b{r['batch']}: {_algorithm(r)} "
            f"x{ratio.text()} against dense default"
        )
    if not lines:
        return "", []
    return f"sparse faster in {faster}, slower in {slower}, n.s. in {unclear}", lines


def _declared_refusal(compiler: str, kind: str) -> str | None:
    """Why ``compiler`` says it cannot run ``kind`` (``Compiler.algorithm_refusals``)."""
    try:
        from ngb.core.compilers import compiler_class

        return compiler_class(compiler).algorithm_refusals.get(kind)
    except (ImportError, AttributeError, NgbError):
        return None
