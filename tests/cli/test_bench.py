"""``pjrt-hub bench``: one run, several plugins, the JSON shape the issue fixes."""

import json

from pjrt_hub._bench import _add_ratios, format_report
from pjrt_hub.cli import ExitCode, main


def test_bench_json_on_the_reference_plugin(capsys):
    code = main(["bench", "--plugin", "reference", "--program", "perf_softmax", "--runs", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK
    (row,) = report["programs"]
    assert row["name"] == "perf_softmax" and row["plugin"] == "reference"
    assert row["outputs_match"] is True
    assert row["execute_ms_median"] > 0 and row["compile_ms_cold"] > 0 and row["compile_ms_warm"] > 0
    assert abs(row["xla_cpu_baseline_ms"] - 2.03) < 0.01  # the manifest records 2027.6 us
    assert report["tiny_execute_us"] > 0 and set(report["tiny_execute_us_by_plugin"]) == {"reference"}


def test_unknown_program_is_a_usage_error(capsys):
    try:
        main(["bench", "--program", "nope"])
    except SystemExit as exc:
        assert exc.code == ExitCode.USAGE
    assert "known: perf_ew_chain" in capsys.readouterr().err


def test_ratios_and_table():
    rows = [{"name": "p", "plugin": "a", "execute_ms_median": 2.0, "compile_ms_cold": 10.0, "compile_ms_warm": 1.0,
             "runs": 3, "outputs_match": True, "xla_cpu_baseline_ms": 1.5},
            {"name": "p", "plugin": "b", "execute_ms_median": 8.0, "runs": 3, "outputs_match": True}]
    _add_ratios(rows)
    assert rows[0]["speedup_vs_b"] == 4.0 and rows[1]["speedup_vs_a"] == 0.25
    text = format_report({"programs": rows, "plugins": ["a", "b"], "tiny_execute_us_by_plugin": {"a": 3.0}})
    assert "4.00x" in text and "10 / 1.0" in text and "tiny add execute: a 3.00 us" in text


def test_bench_loads_scalar_and_strided_arguments_as_they_are():
    """A 0-d argument stays 0-d (np.ascontiguousarray made it f32[1]); strided views are copied."""
    import numpy as np

    from pjrt_hub import PluginRegistry
    from pjrt_hub._bench import _Loaded

    text = """func.func @main(%x: tensor<f32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.broadcast_in_dim %x, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.multiply %0, %y : tensor<3xf32>
  return %1 : tensor<3xf32>
}"""
    loaded = _Loaded(PluginRegistry().create_client("reference"), text,
                     [np.float32(2.0), np.arange(6, dtype=">f4")[::-2]])
    try:
        (out,) = loaded.outputs()
        np.testing.assert_array_equal(out, [10, 6, 2])
    finally:
        loaded.close()
