"""The matrix for people: ``matrix.md`` and a self-contained ``matrix.html``.

Plugins (in their environment) are rows and framework versions columns. A cell says whether the
version policy accepted the plugin, by which rule, and the conformance counts; its colour says
how it went (green passed, red failed or error, grey refused). The details of a cell (the policy's
reasons, every failure, the expected failures and the skips with their reasons) are one click away.
The HTML carries its CSS and script inline and loads nothing.
"""

from __future__ import annotations

import html
from typing import Iterable

from pjrt_hub.abi import ApiVersion

from ._models import CellResult, CellStatus, MatrixReport, PluginInfo

__all__ = ["render_html", "render_markdown"]

_MARK = {CellStatus.PASSED: "✅", CellStatus.FAILED: "❌", CellStatus.REFUSED: "⛔", CellStatus.ERROR: "💥"}


def _rows(report: MatrixReport) -> list[PluginInfo]:
    return sorted(report.plugins, key=lambda p: (p.environment, p.kind, _api_key(p.api_version), p.name))


def _api_key(version: str | None) -> tuple[int, int]:
    try:
        v = ApiVersion.parse(version or "")
    except ValueError:
        return (1 << 30, 0)
    return (v.major, v.minor)


def _cells(report: MatrixReport) -> dict[tuple[str, str, str], CellResult]:
    return {(c.plugin, c.environment, c.framework_version): c for c in report.cells}


def _counts(cell: CellResult) -> str:
    c = cell.counts
    return "" if c is None else f"{c.passed} passed, {c.failed} failed, {c.xfailed} xfailed, {c.skipped} skipped"


def _headline(cell: CellResult) -> str:
    if cell.status is CellStatus.ERROR:
        return "error"
    verdict = "accepted" if cell.accepted else "refused"
    return f"{verdict} ({cell.rule})" if cell.rule else verdict


def _one_line(text: str | None, limit: int = 300) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _environment_lines(report: MatrixReport) -> Iterable[str]:
    for e in report.environments:
        facts = ", ".join(x for x in (f"Python {e.python}" if e.python else "", f"numba {e.numba}" if e.numba else "") if x)
        yield f"{e.name}" + (f" ({facts})" if facts else "") + f": {e.status}" + (f" ({e.note})" if e.note else "")


# -- Markdown ----------------------------------------------------------------------------------


def render_markdown(report: MatrixReport) -> str:
    cells = _cells(report)
    versions = report.framework_versions
    lines = ["# PJRT compatibility matrix", "",
             f"Conformance suite {report.suite_version}, pjrt-hub {report.pjrt_hub_version}, generated "
             f"{report.generated_at}. Rows: plugins (in their environment); columns: the framework's PJRT API "
             "version. ✅ accepted and conformant, ❌ accepted with failing cases, ⛔ refused by the version "
             "policy, 💥 error (crash, time-out, load failure).", "", "Environments:", ""]
    lines += [f"- {line}" for line in _environment_lines(report)]
    lines += ["", "| plugin | environment | plugin API | " + " | ".join(f"framework {v}" for v in versions) + " |",
              "|---|---|---|" + "---|" * len(versions)]
    for p in _rows(report):
        row = [p.name, p.environment, p.api_version or "?"]
        for v in versions:
            cell = cells.get((p.name, p.environment, v))
            if cell is None:
                row.append("")
                continue
            counts = cell.counts
            tally = f"<br>{counts.passed}/{counts.failed}/{counts.xfailed}/{counts.skipped}" if counts else ""
            row.append(f"{_MARK[cell.status]} {_headline(cell)}{tally}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Counts are passed/failed/xfailed/skipped conformance cases.", "", "## Details", ""]
    for p in _rows(report):
        for v in versions:
            cell = cells.get((p.name, p.environment, v))
            if cell is None:
                continue
            lines.append(f"### {p.name} at framework {v} ({p.environment}): {_MARK[cell.status]} {_headline(cell)}"
                         + (" [cached]" if cell.cached else ""))
            lines.append("")
            if cell.error:
                lines.append(f"- error: {_one_line(cell.error, 1000)}")
            lines += [f"- {_one_line(r, 1000)}" for r in cell.reasons]
            if cell.counts:
                lines.append(f"- conformance: {_counts(cell)}")
            lines += [f"- FAILED {f.id}: {_one_line(f.message)}" for f in cell.failures]
            lines += [f"- xfailed {x.id}: {_one_line(x.message)}" for x in cell.xfailed]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# -- HTML --------------------------------------------------------------------------------------

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1b1b; }
table { border-collapse: collapse; }
th, td { border: 1px solid #bbb; padding: 6px 8px; vertical-align: top; text-align: left; }
th { background: #f0f0f0; }
td.passed { background: #d9f2dc; } td.failed { background: #f8d0d0; }
td.error { background: #f3a6a6; } td.refused { background: #e4e4e4; color: #444; }
td .verdict { font-weight: 600; } td .counts { font-size: 12px; }
details summary { cursor: pointer; font-size: 12px; color: #333; }
details ul { margin: 4px 0 0 0; padding-left: 18px; font-size: 12px; max-width: 40em; }
.cached { font-size: 11px; color: #666; }
#only-red { margin: 0.5em 0 1em 0; }
body.red-only tr:not(.has-red) { display: none; }
body.red-only tr.head { display: table-row; }
"""

_JS = """
document.getElementById('only-red').addEventListener('change', function (e) {
  document.body.classList.toggle('red-only', e.target.checked);
});
"""


def _items(title: str, entries: list[str]) -> str:
    if not entries:
        return ""
    body = "".join(f"<li>{html.escape(e)}</li>" for e in entries)
    return f"<li><b>{html.escape(title)}</b><ul>{body}</ul></li>"


def _html_cell(cell: CellResult | None) -> str:
    if cell is None:
        return "<td></td>"
    e = html.escape
    parts = [f'<div class="verdict">{_MARK[cell.status]} {e(_headline(cell))}</div>']
    if cell.counts:
        parts.append(f'<div class="counts">{e(_counts(cell))}</div>')
    if cell.cached:
        parts.append('<div class="cached">cached</div>')
    details = [_items("error", [cell.error] if cell.error else []), _items("verdict", cell.reasons),
               _items("failed", [f"{f.id}: {f.message or ''}" for f in cell.failures]),
               _items("expected failures (declared limitations)", [f"{x.id}: {x.message or ''}" for x in cell.xfailed]),
               _items("skipped", [f"{s.id}: {s.message or ''}" for s in cell.skipped])]
    body = "".join(details)
    if body:
        parts.append(f"<details><summary>details</summary><ul>{body}</ul></details>")
    return f'<td class="{cell.status.value}" title="{e(cell.status.value)}">{"".join(parts)}</td>'


def render_html(report: MatrixReport) -> str:
    e = html.escape
    cells = _cells(report)
    versions = report.framework_versions
    head = "".join(f"<th>framework {e(v)}</th>" for v in versions)
    rows = []
    for p in _rows(report):
        row_cells = [cells.get((p.name, p.environment, v)) for v in versions]
        red = any(c is not None and c.status in (CellStatus.FAILED, CellStatus.ERROR) for c in row_cells)
        who = e(p.name) + (f"<br><small>{e(p.description)}</small>" if p.description else "")
        dist = f"{p.distribution} {p.distribution_version}" if p.distribution else (p.library_path or "")
        rows.append(f'<tr class="{"has-red" if red else ""}"><th>{who}</th><td>{e(p.environment)}</td>'
                    f"<td>{e(p.kind)}<br><small>{e(dist)}</small></td><td>{e(p.api_version or '?')}</td>"
                    + "".join(_html_cell(c) for c in row_cells) + "</tr>")
    environments = "".join(f"<li>{e(line)}</li>" for line in _environment_lines(report))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>PJRT compatibility matrix</title><style>{_CSS}</style></head><body>"
        "<h1>PJRT compatibility matrix</h1>"
        f"<p>Conformance suite {e(report.suite_version)}, pjrt-hub {e(report.pjrt_hub_version)}, generated "
        f"{e(report.generated_at)}. Rows: plugins in their environment; columns: the framework's PJRT API version. "
        "Green: accepted and conformant; red: failing cases or an error; grey: refused by the version policy.</p>"
        f"<ul>{environments}</ul>"
        '<label><input type="checkbox" id="only-red"> show only rows with red cells</label>'
        f'<table><tr class="head"><th>plugin</th><th>environment</th><th>kind</th><th>plugin API</th>{head}</tr>'
        + "".join(rows) + f"</table><script>{_JS}</script></body></html>\n")
