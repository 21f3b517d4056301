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

from ._models import RED, CaseBrief, CellResult, CellStatus, EnvironmentInfo, MatrixReport, PluginInfo

__all__ = ["render_html", "render_markdown"]

_MARK = {CellStatus.PASSED: "✅", CellStatus.FAILED: "❌", CellStatus.REFUSED: "⛔", CellStatus.ERROR: "💥",
         CellStatus.MISSING: "❔"}
#: What each status means, for the legends.
_MEANING = {
    CellStatus.PASSED: "accepted by the version policy, and no conformance case failed",
    CellStatus.FAILED: "accepted, but conformance cases failed",
    CellStatus.REFUSED: "refused by the version policy (as it should be, where the rule says so)",
    CellStatus.ERROR: "could not be judged: the plugin crashed, hung, failed to load, or its environment failed",
    CellStatus.MISSING: "no result: the job that covers it did not report",
}


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
    if cell.status is CellStatus.MISSING:
        return "no result"
    verdict = "accepted" if cell.accepted else "refused"
    return f"{verdict} ({cell.rule})" if cell.rule else verdict


def _one_line(text: str | None, limit: int = 300) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _versions(e: EnvironmentInfo) -> str:
    parts = [f"Python {e.python}" if e.python else "", f"numba {e.numba}" if e.numba else "",
             f"numpy {e.numpy}" if e.numpy else "", f"pjrt-hub {e.pjrt_hub}" if e.pjrt_hub else ""]
    return ", ".join(x for x in parts if x)


def _environment_lines(report: MatrixReport) -> Iterable[str]:
    for e in report.environments:
        facts = _versions(e)
        yield f"{e.name}" + (f" ({facts})" if facts else "") + f": {e.status}" + (f" ({e.note})" if e.note else "")


# -- Markdown ----------------------------------------------------------------------------------


def render_markdown(report: MatrixReport) -> str:
    cells = _cells(report)
    versions = report.framework_versions
    lines = ["# PJRT compatibility matrix", "",
             f"Conformance suite {report.suite_version}, pjrt-hub {report.pjrt_hub_version}, generated "
             f"{report.generated_at}. Rows: plugins (in their environment); columns: the framework's PJRT API "
             "version. " + ", ".join(f"{_MARK[s]} {_MEANING[s]}" for s in CellStatus) + ".", "", "Environments:", ""]
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
    lines += ["", "Counts are passed/failed/xfailed/skipped conformance cases.", ""]
    if report.jobs:
        lines += [f"## Jobs of plan {report.plan_id}", "", "| job | environment | status | time | ran on |",
                  "|---|---|---|---|---|"]
        for job in report.jobs:
            took = f"{job.duration_s:.1f} s" if job.duration_s is not None else ""
            where = (_versions(job.facts) + (f"; {job.facts.platform}" if job.facts.platform else "")) if job.facts \
                else _one_line(job.error)
            lines.append(f"| {job.id} | {job.environment} | {job.status} | {took} | {where} |")
        lines.append("")
    lines += ["## Details", ""]
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
            lines += [f"- xfailed {entry}" for entry in _grouped(cell.xfailed, by_limitation=True)]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# -- HTML --------------------------------------------------------------------------------------

_COLOURS = {CellStatus.PASSED: ("#d4f1d9", "#1e7b34"), CellStatus.FAILED: ("#f9d3d0", "#b3261e"),
            CellStatus.REFUSED: ("#e6e6e6", "#555555"), CellStatus.ERROR: ("#f2a7a0", "#8c1d18"),
            CellStatus.MISSING: ("#fbe3c4", "#9a4d00")}

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em 2em; color: #1b1b1b; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.6em; font-size: 1.15em; }
.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #c8c8c8; padding: 6px 8px; vertical-align: top; text-align: left; }
th { background: #f3f3f3; font-weight: 600; }
table.matrix td.cell { min-width: 11em; }
.tally span, .legend span.swatch { display: inline-block; padding: 2px 8px; border-radius: 10px; margin-right: 6px;
  font-size: 13px; }
.legend { list-style: none; padding: 0; } .legend li { margin: 3px 0; }
td .verdict { font-weight: 600; } td .counts { font-size: 12px; }
details summary { cursor: pointer; font-size: 12px; }
details ul { margin: 4px 0 0 0; padding-left: 18px; font-size: 12px; max-width: 46em; }
details li { overflow-wrap: anywhere; }
.cached { font-size: 11px; color: #666; }
small { color: #555; }
#only-red { margin: 0.5em 0 1em 0; }
body.red-only tr.row:not(.has-red) { display: none; }
"""
_CSS += "".join(f"td.{s.value}, span.{s.value} {{ background: {bg}; }} td.{s.value} .verdict, span.{s.value} "
                f"{{ color: {fg}; }}\n" for s, (bg, fg) in _COLOURS.items())

_JS = """
document.getElementById('only-red').addEventListener('change', function (e) {
  document.body.classList.toggle('red-only', e.target.checked);
});
document.getElementById('open-red').addEventListener('click', function () {
  document.querySelectorAll('td.failed details, td.error details, td.missing details').forEach(function (d) {
    d.open = !d.open;
  });
});
"""


def _items(title: str, entries: list[str]) -> str:
    if not entries:
        return ""
    body = "".join(f"<li>{html.escape(e)}</li>" for e in entries)
    return f"<li><b>{html.escape(title)}</b><ul>{body}</ul></li>"


def _grouped(briefs: list[CaseBrief], *, by_limitation: bool) -> list[str]:
    """Cases that share a reason (a declared limitation, a skip's message) as one entry: the reason
    once, then the case ids. Green cells repeat the same dozens of reasons; matrix.json keeps every
    case's own message."""
    groups: dict[str, list[CaseBrief]] = {}
    for b in briefs:
        reason = b.limitation if by_limitation and b.limitation else (b.message or "")
        groups.setdefault(reason, []).append(b)
    return [f"{group[0].id}: {_one_line(group[0].message)}" if len(group) == 1
            else f"{_one_line(reason)}: {', '.join(b.id for b in group)}" for reason, group in groups.items()]


def _summary(cell: CellResult) -> str:
    if cell.status is CellStatus.FAILED:
        n = len(cell.failures)
        return f"{n} failed case" + ("s" if n != 1 else "")
    if cell.status is CellStatus.ERROR:
        return "why: error"
    if cell.status is CellStatus.MISSING:
        return "why: no result"
    return "details"


def _html_cell(cell: CellResult | None) -> str:
    if cell is None:
        return "<td></td>"
    e = html.escape
    parts = [f'<div class="verdict">{_MARK[cell.status]} {e(_headline(cell))}</div>']
    if cell.counts:
        parts.append(f'<div class="counts">{e(_counts(cell))}</div>')
    if cell.cached:
        parts.append('<div class="cached">cached</div>')
    details = [_items("failed", [f"{f.id}: {f.message or ''}" for f in cell.failures]),
               _items("error", [cell.error] if cell.error else []), _items("verdict", cell.reasons),
               _items("expected failures (declared limitations)", _grouped(cell.xfailed, by_limitation=True)),
               _items("skipped", _grouped(cell.skipped, by_limitation=False))]
    body = "".join(details)
    if body:
        parts.append(f"<details><summary>{e(_summary(cell))}</summary><ul>{body}</ul></details>")
    took = f", {cell.duration_s:.1f} s" if cell.duration_s else ""
    return (f'<td class="cell {cell.status.value}" title="{e(cell.status.value + took)}">'
            f'{"".join(parts)}</td>')


def _tally(report: MatrixReport) -> str:
    counts = {s: 0 for s in CellStatus}
    for c in report.cells:
        counts[c.status] += 1
    return "".join(f'<span class="{s.value}">{_MARK[s]} {n} {s.value}</span>' for s, n in counts.items()
                   if n or s is not CellStatus.MISSING)


def _legend() -> str:
    return "<ul class=\"legend\">" + "".join(
        f'<li><span class="swatch {s.value}">{_MARK[s]} {s.value}</span>{html.escape(_MEANING[s])}</li>'
        for s in CellStatus) + "</ul>"


def _jobs_table(report: MatrixReport) -> str:
    if not report.jobs:
        return ""
    e = html.escape
    rows = []
    for job in report.jobs:
        f = job.facts
        took = f"{job.duration_s:.1f} s" if job.duration_s is not None else ""
        packages = ", ".join(f"{k} {v}" for k, v in sorted(f.packages.items())) if f else ""
        status = CellStatus.PASSED.value if job.status == "ran" else (
            CellStatus.MISSING.value if job.status == "missing" else CellStatus.ERROR.value)
        versions = "".join(f"<td>{e(v or '')}</td>" for v in ((f.python, f.numba, f.numpy, f.pjrt_hub, f.platform)
                                                             if f else ("",) * 5))
        rows.append(f'<tr><td>{e(job.id)}</td><td>{e(job.environment)}</td><td class="{status}">{e(job.status)}'
                    + (f"<br><small>{e(_one_line(job.error))}</small>" if job.error else "") + "</td>"
                    f"<td>{e(took)}</td>{versions}<td><small>{e(packages)}</small></td></tr>")
    return (f"<h2>Jobs of plan {e(report.plan_id or '')}: where each ran, on what, how long</h2>"
            "<table><tr><th>job</th><th>environment</th><th>status</th><th>time</th><th>Python</th><th>numba</th>"
            "<th>numpy</th><th>pjrt-hub</th><th>host</th><th>other packages</th></tr>" + "".join(rows) + "</table>")


def _plugins_table(report: MatrixReport) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(p.name)}</td><td>{e(p.environment)}</td><td>{e(p.kind)}</td>"
        f"<td>{e(' '.join(x for x in (p.distribution, p.distribution_version) if x) or (p.library_path or ''))}</td>"
        f"<td>{e(p.api_version or '?')}</td><td><small>{e(p.identity)}</small></td></tr>" for p in _rows(report))
    return ("<h2>Plugins</h2><table><tr><th>plugin</th><th>environment</th><th>kind</th><th>distribution or "
            "library</th><th>PJRT API</th><th>identity (cache key)</th></tr>" + rows + "</table>")


def render_html(report: MatrixReport) -> str:
    """One self-contained page: inline CSS and script, no external asset, opens offline."""
    e = html.escape
    cells = _cells(report)
    versions = report.framework_versions
    head = "".join(f"<th>framework {e(v)}</th>" for v in versions)
    rows = []
    for p in _rows(report):
        row_cells = [cells.get((p.name, p.environment, v)) for v in versions]
        red = any(c is not None and c.status in RED for c in row_cells)
        who = e(p.name) + (f"<br><small>{e(p.description)}</small>" if p.description else "")
        dist = f"{p.distribution} {p.distribution_version}" if p.distribution else (p.library_path or "")
        rows.append(f'<tr class="row{" has-red" if red else ""}"><th>{who}</th><td>{e(p.environment)}</td>'
                    f"<td>{e(p.kind)}<br><small>{e(dist)}</small></td><td>{e(p.api_version or '?')}</td>"
                    + "".join(_html_cell(c) for c in row_cells) + "</tr>")
    environments = "".join(f"<li>{e(line)}</li>" for line in _environment_lines(report))
    verdict = "red: some cells failed or have no result" if report.red else "green: no red cell"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>PJRT compatibility matrix</title><style>{_CSS}</style></head><body>"
        "<h1>PJRT compatibility matrix</h1>"
        f"<p class=\"meta\">Conformance suite {e(report.suite_version)}, pjrt-hub {e(report.pjrt_hub_version)}, "
        f"generated {e(report.generated_at)}" + (f", plan {e(report.plan_id)}" if report.plan_id else "")
        + f". Rows: plugins in their environment; columns: the framework's PJRT API version. "
        f"<b>{e(verdict)}</b>.</p>"
        f'<p class="tally">{_tally(report)}</p>' + _legend()
        + '<label><input type="checkbox" id="only-red"> show only rows with red cells</label> '
        '<button type="button" id="open-red">open / close every red cell</button>'
        f'<table class="matrix"><tr><th>plugin</th><th>environment</th><th>kind</th><th>plugin API</th>{head}</tr>'
        + "".join(rows) + "</table>"
        + f"<h2>Environments</h2><ul>{environments}</ul>" + _jobs_table(report) + _plugins_table(report)
        + f"<script>{_JS}</script></body></html>\n")
