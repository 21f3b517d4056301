"""matrix.md and matrix.html show every cell: verdict, rule, counts, colour, details."""

from __future__ import annotations

from pjrt_hub.compat_matrix import (CaseBrief, CellResult, CellStatus, EnvironmentInfo, MatrixReport, PluginInfo,
                                    merge, render_html, render_markdown, write_outputs)
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
    assert text.count('<td class="passed"') == 1 and text.count('<td class="refused"') == 1
    assert text.count('<td class="failed"') == 1 and text.count('<td class="error"') == 1
    assert "<details><summary>details</summary>" in text
    assert "buffers/is_deleted: false after delete &lt;script&gt;" in text  # escaped
    assert "bad&lt;b&gt;" in text and "bad<b>" not in text
    assert "100 passed, 0 failed, 2 xfailed, 3 skipped" in text
    assert "execute/corpus_x: unsupported op" in text
    assert 'class="has-red"' in text  # the failing plugin's row, for the red-only filter


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
