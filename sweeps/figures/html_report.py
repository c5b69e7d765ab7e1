"""One self-contained HTML file for a run: testbed, figures, every report table, failures.

Made to be mailed or attached: no scripts, no external files or fonts, the styles inline, figures
as SVG data URIs (an ``<img>`` each, so the SVGs' internal ids cannot collide, and they stay sharp
when zoomed or printed). It opens offline in any browser.

Sections: the run (sweep, status, times, devices), the testbed (Tables I and II from the newest
probe of each device), the figures with their captions, every report of ``reports.REPORTS`` in
the paper's order, and what failed (failed trials with their one-line errors, and run-level
errors). Filters are those of ``ngb figures``: run, device, model family, precision.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
from collections.abc import Sequence

from ngb.sweeps.figures.data import FigureData, ngb_version
from ngb.sweeps.report.data import Cell, Report, Table
from ngb.sweeps.report.render import fmt_cell

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.6em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: 12.5px; }
caption { text-align: left; font-weight: 600; padding-bottom: .3em; }
th, td { padding: .25em .6em; text-align: left; }
thead th { border-top: 2px solid #333; border-bottom: 1px solid #333; }
tbody tr:last-child td { border-bottom: 2px solid #333; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #f6f6f6; }
p.note { color: #555; font-size: 12px; margin: .2em 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; }
figcaption { color: #333; font-size: 12.5px; max-width: 70em; }
.failed { color: #a00; } nav a { margin-right: 1em; }
dl { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }
dt { font-weight: 600; } dd { margin: 0; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def table_html(table: Table) -> str:
    """A report table as an HTML table (values formatted as in the terminal)."""
    numeric = [
        all(isinstance(r[i], Cell | int | float) and not isinstance(r[i], bool)
            for r in table.rows if r[i] is not None)
        for i in range(len(table.columns))
    ]  # fmt: skip
    out = [f"<table><caption>{_e(table.title)}</caption><thead><tr>"]
    out += [f"<th>{_e(c)}</th>" for c in table.columns]
    out.append("</tr></thead><tbody>")
    for row in table.rows:
        cells = (f'<td class="num">{_e(fmt_cell(v))}</td>' if numeric[i] and v is not None
                 else f"<td>{_e(fmt_cell(v))}</td>" for i, v in enumerate(row))  # fmt: skip
        out.append("<tr>" + "".join(cells) + "</tr>")
    if not table.rows:
        out.append(f'<tr><td colspan="{len(table.columns)}">(no matching results)</td></tr>')
    out.append("</tbody></table>")
    out += [f'<p class="note">{_e(note)}</p>' for note in table.notes]
    return "\n".join(out)


def report_html(report: Report) -> str:
    parts = [table_html(t) for t in report.tables]
    parts += [f'<p class="note">{_e(note)}</p>' for note in report.notes]
    return "\n".join(parts)


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{STYLE}</style></head>\n<body>\n{body}\n"
        "</body></html>\n"
    )


def single_report_page(report: Report) -> str:
    """One report as a standalone page (``ngb report NAME --format html``)."""
    return page(report.title, f"<h1>{_e(report.title)}</h1>\n{report_html(report)}")


# ---------------------------------------------------------------- the whole-run report


def _run_section(data: FigureData) -> str:
    store = data.store
    if data.run_id is None:
        runs = store.runs()
        rows = [[r.get("run_id"), r.get("sweep_name"), r.get("status"), r.get("created_at")]
                for r in runs]  # fmt: skip
        table = Table("Runs in this database", ["run", "sweep", "status", "created"], rows)
        intro = "<p>All runs, the newest result of each measured point.</p>"
        return intro + table_html(table)
    run = store.run(data.run_id)
    facts = {
        "run": run.get("run_id"),
        "sweep": f"{run.get('sweep_name')}",
        "status": run.get("status"),
        "created": run.get("created_at"),
        "finished": run.get("finished_at") or "-",
        "trials per device": run.get("n_trials"),
    }
    devices = store.run_devices(data.run_id)
    if devices:
        facts["devices"] = ", ".join(
            f"{d.get('device')}: {d.get('state') or '?'}, {d.get('n_done') or 0} done, "
            f"{d.get('n_failed') or 0} failed"
            for d in devices
        )
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts.items())
    return f"<dl>{items}</dl>"


def _failures_section(data: FigureData) -> str:
    store = data.store
    failed = store.trials(run_id=data.run_id, device=data.device, status="failed")
    rows = [
        [t.get("run_id"), t.get("device"), t.get("label") or t.get("model"), t.get("compiler"),
         t.get("batch"), t.get("error_kind"), t.get("error")]
        for t in failed
    ]  # fmt: skip
    if data.family is not None:
        rows = [r for r, t in zip(rows, failed, strict=True) if t.get("family") == data.family]
    parts = [
        table_html(Table(f"Failed trials ({len(rows)})",
                         ["run", "device", "model", "compiler", "batch", "kind", "error"], rows))
    ]  # fmt: skip
    errors = store.errors(run_id=data.run_id, device=data.device)
    if errors:
        columns = ["ts", "run_id", "device", "key", "kind", "message"]
        parts.append(
            table_html(Table(f"Run errors ({len(errors)})", columns,
                             [[e.get(c) for c in columns] for e in errors]))
        )  # fmt: skip
    return "\n".join(parts)


def _figures_section(data: FigureData, names: Sequence[str] | None) -> str:
    from ngb.sweeps.figures.catalog import FIGURES, build_figure, caption, resolve
    from ngb.sweeps.figures.plot import draw, svg_text

    parts = []
    for name in resolve(names):
        spec = build_figure(name, data)
        if not spec.panels:
            reason = "; ".join(spec.notes) or "no matching results"
            parts.append(f'<p class="note">{_e(FIGURES[name][1])}: not drawn ({_e(reason)})</p>')
            continue
        svg = svg_text(draw(spec)).encode("utf-8")
        uri = "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")
        parts.append(
            f'<figure id="{_e(name)}"><img alt="{_e(spec.title)}" src="{uri}">'
            f"<figcaption>{_e(caption(spec, data))}</figcaption></figure>"
        )
    return "\n".join(parts)


def run_report(
    data: FigureData, *, figures: bool = True, figure_names: Sequence[str] | None = None
) -> str:
    """The whole-run HTML document; see the module docstring."""
    from ngb.sweeps.report.catalog import REPORTS

    scope = f"run {data.run_id}" if data.run_id else "all runs"
    if data.device:
        scope += f", device {data.device}"
    if data.family:
        scope += f", family {data.family}"
    if data.precision:
        scope += f", precision {data.precision}"
    sections: list[tuple[str, str, str]] = [("run", "Run", _run_section(data))]
    built = {name: builder(data) for name, (builder, _) in REPORTS.items()}
    source = f"source: {scope}"
    for report in built.values():
        report.notes.append(source)
    if "testbed" in built:
        sections.append(("testbed", "Testbed (Tables I and II)", report_html(built["testbed"])))
    if figures:
        sections.append(("figures", "Figures", _figures_section(data, figure_names)))
    tables = "\n".join(
        f'<h3 id="report-{_e(name)}">{_e(report.title)}</h3>\n{report_html(report)}'
        for name, report in built.items()
        if name != "testbed"
    )
    sections.append(("tables", "Tables", tables))
    sections.append(("failures", "Failures", _failures_section(data)))
    nav = "".join(f'<a href="#{key}">{_e(title)}</a>' for key, title, _ in sections)
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"<h1>ngb report: {_e(scope)}</h1>", f"<nav>{nav}</nav>"]
    body += [f'<h2 id="{key}">{_e(title)}</h2>\n{content}' for key, title, content in sections]
    body.append(f'<p class="note">Made by ngb {_e(ngb_version())} on {now}.</p>')
    return page(f"ngb report: {scope}", "\n".join(body))
