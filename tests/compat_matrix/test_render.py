"""matrix.md and matrix.html show every cell: verdict, rule, counts, colour, details."""

from __future__ import annotations

from pjrt_hub.compat_matrix import (CaseBrief, CellResult, CellStatus, EnvironmentInfo, JobInfo, MatrixReport,
                                    PluginInfo, merge, render_html, render_markdown, write_outputs)
from pjrt_hub.testing import Counts


def report(environment: str = "local") -> MatrixReport:
    def cell(plugin, fw, status, **kw):
        return CellResult(plugin=plugin, environment=environment, framework_version=fw, status=status, **kw)

    return MatrixReport(
        generated_at="2026-11-22T00:00:00+00:00", suite_version="abc123", pjrt_hub_version="0.1.0",
        framework_versions=["0.81", "0.106"],
        environments=[EnvironmentInfo(name=environment, python="3.11.7", numba="0.68.1", status="ran")],
        plugins=[PluginInfo(name="good", kind="python", environment=environment, api_version="0.81", identity="g 1"),
                 PluginInfo(name="bad<b>", kind="c", environment=environment, api_version="0.106", identity="b",
                            library_path="/x/libbad.so")],
        cells=[
            cell("good", "0.81", CellStatus.PASSED, accepted=True, rule="exact", reasons=["both at 0.81"],
                 counts=Counts(passed=100, xfailed=2, skipped=3),
                 xfailed=[CaseBrief(id="execute/corpus_x", message="unsupported op")]),
            cell("good", "0.106", CellStatus.REFUSED, accepted=False, rule="window", reasons=["outside the window"]),
            cell("bad<b>", "0.81", CellStatus.FAILED, accepted=True, rule="c-newer", counts=Counts(passed=90, failed=1),
                 failures=[CaseBrief(id="buffers/is_deleted", message="false after delete <script>")]),
            cell("bad<b>", "0.106", CellStatus.ERROR, error="the cell's process crashed (SIGSEGV) before it reported"),
        ])


def test_markdown_has_a_row_per_plugin_and_a_column_per_framework():
    text = render_markdown(report())
    assert "| plugin | environment | plugin API | framework 0.81 | framework 0.106 |" in text
    assert "| good | local | 0.81 | ✅ accepted (exact)<br>100/0/2/3 | ⛔ refused (window) |" in text
    assert "| bad<b> | local | 0.106 | ❌ accepted (c-newer)<br>90/1/0/0 | 💥 error |" in text
    assert "- FAILED buffers/is_deleted: false after delete <script>" in text
    assert "- error: the cell's process crashed (SIGSEGV) before it reported" in text
    assert "- local (Python 3.11.7, numba 0.68.1): ran" in text


def test_html_is_self_contained_colour_coded_with_details():
    text = render_html(report())
    assert text.startswith("<!DOCTYPE html>") and "<style>" in text and "<script>" in text
    assert "http://" not in text and "https://" not in text and "<link" not in text and "src=" not in text
    assert "@import" not in text and "url(" not in text
    assert text.count('<td class="cell passed"') == 1 and text.count('<td class="cell refused"') == 1
    assert text.count('<td class="cell failed"') == 1 and text.count('<td class="cell error"') == 1
    # Each colour is defined in the page; the legend names every status with its meaning.
    for status in CellStatus:
        assert f"td.{status.value}, span.{status.value} {{ background: #" in text
        assert f'<span class="swatch {status.value}">' in text
    # A red cell opens to its failed cases and their messages (escaped).
    assert "<details><summary>1 failed case</summary><ul><li><b>failed</b>" in text
    assert "buffers/is_deleted: false after delete &lt;script&gt;" in text
    assert "<details><summary>why: error</summary>" in text
    assert "bad&lt;b&gt;" in text and "bad<b>" not in text
    assert "100 passed, 0 failed, 2 xfailed, 3 skipped" in text
    assert "execute/corpus_x: unsupported op" in text
    assert 'class="row has-red"' in text  # the failing plugin's row, for the red-only filter
    assert "local (Python 3.11.7, numba 0.68.1): ran" in text


def test_html_shows_the_jobs_with_the_versions_they_ran_on():
    job_facts = EnvironmentInfo(name="local", python="3.12.1", numba="0.61.0", numpy="2.1.0", pjrt_hub="0.1.0",
                                platform="Linux 6.1 x86_64, CPython", packages={"scipy": "1.14.0"}, status="ran")
    with_jobs = report().model_copy(update={"plan_id": "feedbeef", "jobs": [
        JobInfo(id="local.fixtures", environment="local", status="ran", duration_s=12.25, facts=job_facts),
        JobInfo(id="local.numba_cpu", environment="local", status="missing", error="no result: it did not report")]})
    text = render_html(with_jobs)
    assert "Jobs of plan feedbeef" in text
    assert "<td>12.2 s</td><td>3.12.1</td><td>0.61.0</td><td>2.1.0</td><td>0.1.0</td>" in text
    assert "Linux 6.1 x86_64, CPython" in text and "scipy 1.14.0" in text
    assert '<td class="missing">missing<br><small>no result: it did not report</small>' in text
    md = render_markdown(with_jobs)
    assert "| local.fixtures | local | ran | 12.2 s | Python 3.12.1, numba 0.61.0, numpy 2.1.0, pjrt-hub 0.1.0" in md


def test_merge_joins_environments_and_notes_the_missing_ones(tmp_path):
    merged = merge([report("py311"), report("py312")],
                   [EnvironmentInfo(name="py313", status="missing", note="no interpreter")])
    assert [e.name for e in merged.environments] == ["py311", "py312", "py313"]
    assert len(merged.cells) == 8 and merged.framework_versions == ["0.81", "0.106"]
    paths = write_outputs(merged, tmp_path)
    md = (tmp_path / "matrix.md").read_text()
    assert "| good | py312 | 0.81 |" in md and "- py313: missing (no interpreter)" in md
    assert MatrixReport.model_validate_json((tmp_path / "matrix.json").read_text()) == merged
    assert set(paths) == {"json", "md", "html"}


def test_html_lists_a_shared_limitation_or_skip_reason_once():
    shared = [CaseBrief(id=f"execute/corpus_{n}", message=f"limitation: toy ops only (op {n})",
                        limitation="toy ops only") for n in ("a", "b", "c")]
    skips = [CaseBrief(id=f"abi/{n}", message="a check for c plugins") for n in ("x", "y")]
    base = report()
    cell = base.cells[0].model_copy(update={"xfailed": shared, "skipped": skips})
    text = render_html(base.model_copy(update={"cells": [cell, *base.cells[1:]]}))
    assert "<li>toy ops only: execute/corpus_a, execute/corpus_b, execute/corpus_c</li>" in text
    assert "<li>a check for c plugins: abi/x, abi/y</li>" in text
    assert "(op a)" not in text  # each case's own message stays in matrix.json
