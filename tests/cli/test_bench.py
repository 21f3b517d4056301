"""``pjrt-hub bench``: one run, several plugins, the JSON shape the issue fixes."""

import json

import pytest

from pjrt_hub._bench import _add_ratios, _Child, format_report
from pjrt_hub.cli import ExitCode, main


def test_bench_json_on_the_reference_plugin(capsys):
    code = main(["bench", "--plugin", "reference", "--program", "perf_softmax", "--runs", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK
    assert report["schema_version"] == 1  # as every other command's report
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


def test_bench_corpus_json_on_the_reference_plugin(capsys):
    # broadcast_ops takes a 0-d argument, which must reach the plugin as one (not as shape (1,)).
    code = main(["bench", "--corpus", "--plugin", "reference", "--program", "broadcast_ops", "--program", "cond",
                 "--runs", "2", "--no-warm", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK
    assert report["suite"] == "corpus"
    assert [r["name"] for r in report["programs"]] == ["broadcast_ops", "cond"]
    assert all(r["outputs_match"] is True and r["runs"] == 2 for r in report["programs"])
    assert report["summary"] == {"subject": "reference", "vs": {}, "vs_fastest": None, "first_result_vs_fastest": None,
                                 "first_calls_vs_fastest": None}
    assert all(r["first_calls_ms_mean"] > 0 for r in report["programs"])


def test_unknown_corpus_program_is_a_usage_error(capsys):
    try:
        main(["bench", "--corpus", "--program", "perf_softmax"])
    except SystemExit as exc:
        assert exc.code == ExitCode.USAGE
    assert "unknown corpus program(s) perf_softmax; known: ew_chain" in capsys.readouterr().err


def test_summary_geometric_means_and_the_fastest_real_plugin():
    from pjrt_hub._bench import format_summary, summarise

    def row(name, plugin, ms, match=True, first=None):
        return {"name": name, "plugin": plugin, "execute_ms_median": ms, "outputs_match": match,
                "first_result_ms_cold": first}

    rows = [row("p", "mine", 1.0, first=20.0), row("p", "x1", 4.0, first=50.0), row("p", "x2", 2.0, first=40.0),
            row("p", "ref", 10.0),
            row("q", "mine", 3.0, first=30.0), row("q", "x1", 1.0, first=10.0), row("q", "x2", 6.0),
            row("q", "ref", 30.0),
            row("r", "mine", 1.0), row("r", "x1", 1.0, match=False)]  # a wrong answer is not compared
    summary = summarise(rows, ["mine", "x1", "x2", "ref"], fastest_of=["x1", "x2"])
    assert summary["vs"]["x1"]["programs"] == 2
    assert abs(summary["vs"]["x1"]["geomean"] - (0.25 * 3.0) ** 0.5) < 1e-12
    assert summary["vs"]["x1"]["worst"] == {"name": "q", "ratio": 3.0}
    assert abs(summary["vs"]["ref"]["geomean"] - 0.1) < 1e-12
    # Per program the faster one: x2 on p (2 ms), x1 on q (1 ms).
    fastest = summary["vs_fastest"]
    assert fastest["of"] == ["x1", "x2"] and abs(fastest["geomean"] - (0.5 * 3.0) ** 0.5) < 1e-12
    text = "\n".join(format_summary(summary))
    assert "mine / ref: geometric mean 0.100x (so ref / mine 10.00x) over 2 programs" in text
    assert "mine / fastest of x1, x2: geometric mean 1.225x over 2 programs; worst q 3.00x" in text
    # First results: p against x2's 40 ms (the faster one's), q against x1's 10 ms (x2 has none).
    first = summary["first_result_vs_fastest"]
    assert first["of"] == ["x1", "x2"] and first["programs"] == 2 and first["worst"] == {"name": "q", "ratio": 3.0}
    assert abs(first["geomean"] - (0.5 * 3.0) ** 0.5) < 1e-12
    assert "mine first result (cold) / the faster of x1, x2's own: geometric mean 1.225x over 2 programs; worst q 3.00x" in text


def test_the_first_calls_are_timed_before_waiting_for_a_faster_tier_and_compared(monkeypatch):
    from pjrt_hub._bench import FIRST_CALLS, _Loaded, format_summary, summarise

    order = []

    class Loaded(_Loaded):
        def __init__(self):
            pass

        def _run_timed(self):
            order.append("run")
            return 0.002 if len(order) <= 3 else 0.001  # the untimed ones are slower

        def settle(self):
            order.append("settle")

    loaded = Loaded()
    assert loaded.first_calls() == pytest.approx(1.0) and order == ["run"] * (3 + FIRST_CALLS)
    # Past the budget (a call that waits for a compile, say), the loop ends once one call is timed.
    from pjrt_hub import _bench

    monkeypatch.setattr(_bench, "FIRST_CALLS_BUDGET_S", 0.0)
    calls = []
    assert _bench.time_first_calls(lambda: calls.append(1) or 0.5) == 500.0 and len(calls) == 3 + 1
    rows = [{"name": "p", "plugin": "mine", "execute_ms_median": 1.0, "outputs_match": True,
             "first_calls_ms_mean": 8.0},
            {"name": "p", "plugin": "x1", "execute_ms_median": 1.0, "outputs_match": True,
             "first_calls_ms_mean": 2.0}]
    early = summarise(rows, ["mine", "x1"], fastest_of=["x1"])["first_calls_vs_fastest"]
    assert early["geomean"] == 4.0 and early["worst"] == {"name": "p", "ratio": 4.0}
    assert f"mine first {FIRST_CALLS} executes (no waiting for a faster tier) / the faster of x1's: geometric mean " \
           "4.000x" in "\n".join(format_summary(summarise(rows, ["mine", "x1"], fastest_of=["x1"])))


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


def test_a_first_result_is_timed_after_a_garbage_collection(monkeypatch):
    """The cyclic collector's debt from earlier programs in the process is paid before the
    clock starts, not inside the next program's compile."""
    import gc

    import numpy as np

    from pjrt_hub import PluginRegistry, _bench

    events = []
    real_collect, real_clock = gc.collect, _bench.time.perf_counter
    monkeypatch.setattr(_bench.gc, "collect", lambda *a: events.append("collect") or real_collect(*a))
    monkeypatch.setattr(_bench.time, "perf_counter", lambda: events.append("clock") or real_clock())
    text = "func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {\n  return %x : tensor<3xf32>\n}"
    loaded = _bench._Loaded(PluginRegistry().create_client("reference"), text, [np.arange(3, dtype=np.float32)])
    loaded.close()
    assert events[:2] == ["collect", "clock"]


def test_timed_runs_go_in_rounds_over_the_programs(monkeypatch):
    # A burst of the host's load should fall on part of several programs' runs, not on all of
    # one program's: each program's timed runs are split over ROUNDS rounds.
    from pjrt_hub import _bench

    programs = [p for p in _bench.bench_programs("corpus") if p.name in ("pytree_io", "cond")]
    client = _bench._child_registry([]).create_client("reference")
    order = []
    real = _bench._Loaded.execute_once

    def execute_once(self):
        order.append(self)
        return real(self)

    monkeypatch.setattr(_bench._Loaded, "execute_once", execute_once)
    monkeypatch.setattr(_bench, "ROUNDS", 3)
    measured = _bench._measure(client, "reference", programs, 6, lambda line: None)
    rows = {r["name"]: r for r in measured["rows"]}
    assert all(r["runs"] == 6 and r["outputs_match"] and r["execute_ms_median"] > 0 for r in rows.values())
    assert all(r["cores_used"] > 0 and r["minor_faults_per_run"] >= 0 for r in rows.values())
    tiny = order[0]  # the tiny add goes first in every round
    assert order[:102] == [tiny] * 102 and measured["tiny_us"] > 0
    timed = [o for o in order if o is not tiny]  # each round: one untimed run, then the round's share
    first, second = timed[0], timed[3]
    assert first is not second
    blocks = [timed[i:i + 3] for i in range(0, len(timed), 3)]
    assert [b[0] for b in blocks] == [first, second] * 3
    assert all(len(set(map(id, b))) == 1 for b in blocks)


def test_plugins_take_turns_program_by_program_in_alternating_order(monkeypatch):
    # The host's speed drifts within seconds: one program's blocks on each plugin follow one
    # another, every other round in the opposite order, so that they share the same moments.
    from pjrt_hub import _bench

    asked = []

    class FakeChild:
        def __init__(self, mode, name, programs, runs, library, cache, starting):
            assert mode == "--measure-rounds"
            self.name = name

        def ask(self, command):
            asked.append((self.name, command))
            if self.name == "b" and command == "block 1 1":
                return None  # b crashed in the first program's block of the second round
            return "ready" if command == "ready" else "done " + command.split(maxsplit=1)[1]

        def result(self):
            return {"rows": [], "tiny_us": 1.0, "who": self.name}

    monkeypatch.setattr(_bench, "_Child", FakeChild)
    monkeypatch.setattr(_bench, "ROUNDS", 3)
    results = _bench._measure_interleaved(["a", "b", "c"], ["p", "q"], 3, (), "")
    assert {n: r["who"] for n, r in results.items()} == {"a": "a", "b": "b", "c": "c"}
    expected = [(n, "ready") for n in "abc"]
    expected += [(n, f"block 0 {b}") for b in range(3) for n in "abc"]  # tiny add, p, q
    expected += [(n, "block 1 0") for n in "cba"] + [(n, "block 1 1") for n in "cba"]  # b is gone
    expected += [(n, "block 1 2") for n in "ca"] + [(n, f"block 2 {b}") for b in range(3) for n in "ac"]
    assert asked == expected


def test_a_measuring_process_runs_the_blocks_it_is_asked_for(tmp_path):
    from pjrt_hub import _bench

    child = _bench._Child("--measure-rounds", "reference", ["pytree_io", "cond"], 4, (), str(tmp_path), None)
    assert child.ask("ready") == "ready"
    for round_ in range(_bench.ROUNDS):
        for block in (2, 0, 1):  # any order
            assert child.ask(f"block {round_} {block}") == f"done {round_} {block}"
    rows = {r["name"]: r for r in child.result()["rows"]}
    assert rows["pytree_io"]["runs"] == rows["cond"]["runs"] == 4
    bad = _bench._Child("--measure-rounds", "reference", ["pytree_io"], 4, (), str(tmp_path), None)
    assert bad.ask("ready") == "ready"
    assert bad.ask("block 0 2") is None  # no such block: the process says so and ends
    assert "unknown command 'block 0 2'" in bad.result()["rows"][0]["error"]


def test_bench_of_two_plugins_through_the_driven_children(capsys):
    code = main(["bench", "--corpus", "--plugin", "reference", "--plugin", "numba_cpu", "--program", "pytree_io",
                 "--runs", "4", "--no-warm", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK
    rows = {r["plugin"]: r for r in report["programs"]}
    assert set(rows) == {"reference", "numba_cpu"}
    assert all(r["outputs_match"] and r["runs"] == 4 and r["execute_ms_median"] > 0 for r in rows.values())
    assert set(report["tiny_execute_us_by_plugin"]) == {"reference", "numba_cpu"}


def test_a_measuring_process_that_dies_leaves_rows_saying_why(tmp_path):
    from pjrt_hub import _bench

    child = _bench._Child("--measure-rounds", "reference", ["no_such_program"], 2, (), str(tmp_path), None)
    assert child.ask("ready") is None  # it ended before it was ready
    result = child.result()
    (row,) = result["rows"]
    assert result["tiny_us"] is None and row["name"] == "no_such_program" and row["plugin"] == "reference"
    assert row["error"].startswith("the benchmark process exited with status 1: ")
    assert "no_such_program" in row["error"]


def test_a_plugins_own_output_on_stdout_is_not_taken_for_an_answer(tmp_path, monkeypatch):
    from pjrt_hub import _bench

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("print('a plugin says hello on stdout')\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    results = _bench._measure_interleaved(["reference"], ["pytree_io"], 2, (), str(tmp_path / "cache"))
    (row,) = results["reference"]["rows"]
    assert "error" not in row and row["runs"] == 2 and row["outputs_match"]
    assert results["reference"]["tiny_us"] > 0


#: _Child itself, before a test puts _ScriptedChild in its place.
_REAL_CHILD = _Child


class _ScriptedChild:
    """Stands in for _Child: answers from a script, records what it was told and whether it was killed."""

    log: list = []
    script: dict = {}

    def __init__(self, mode, name, programs, runs, library, cache, starting):
        self.name, self.programs = name, list(programs)

    def ask(self, command):
        self.log.append((self.name, command))
        answer = self.script.get((self.name, command))
        if answer is not None:
            return answer
        return "ready" if command == "ready" else "done " + command.split(maxsplit=1)[1]

    def kill(self):
        self.log.append((self.name, "killed"))

    def failed(self, reason):  # the real rows of a failed measurement
        return _REAL_CHILD.failed(self, reason)

    def result(self):
        self.log.append((self.name, "result"))
        return {"rows": [{"name": "p", "plugin": self.name, "execute_ms_median": 1.0}], "tiny_us": 1.0}


def test_a_child_that_leaves_the_protocol_gives_error_rows_not_a_partial_measurement(monkeypatch):
    from pjrt_hub import _bench

    monkeypatch.setattr(_bench, "_Child", _ScriptedChild)
    monkeypatch.setattr(_ScriptedChild, "log", [])
    monkeypatch.setattr(_ScriptedChild, "script", {("a", "block 0 1"): "banner from the plugin"})
    results = _bench._measure_interleaved(["a", "b"], ["p"], 3, (), "")
    assert results["a"] == {"tiny_us": None, "rows": [{"name": "p", "plugin": "a", "error":
                            "the benchmark process answered 'banner from the plugin' to 'block 0 1'"}]}
    assert results["b"]["rows"][0]["execute_ms_median"] == 1.0
    assert ("a", "killed") in _ScriptedChild.log and ("a", "block 1 0") not in _ScriptedChild.log
    assert ("a", "result") not in _ScriptedChild.log  # its rows are the failure's, not a partial result


def test_no_child_outlives_an_error_in_the_parent(monkeypatch):
    from pjrt_hub import _bench

    monkeypatch.setattr(_bench, "_Child", _ScriptedChild)
    monkeypatch.setattr(_ScriptedChild, "log", [])
    monkeypatch.setattr(_ScriptedChild, "script", {})

    def starting(what, plugin):
        if what.startswith("timed round 2"):
            raise KeyboardInterrupt

    try:
        _bench._measure_interleaved(["a", "b"], ["p"], 3, (), "", starting)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt was swallowed")
    assert ("a", "killed") in _ScriptedChild.log and ("b", "killed") in _ScriptedChild.log


def test_progress_counts_the_timed_rounds_as_steps():
    from pjrt_hub import PluginRegistry
    from pjrt_hub._bench import ROUNDS, bench

    heard = []
    registry = PluginRegistry.from_environment()
    bench(registry, ["reference"], ["pytree_io", "cond"], warm=False, runs=2, suite="corpus",
          progress=lambda done, total, what: heard.append((done, total, what)))
    total = heard[0][1]
    assert total == 2 + ROUNDS and all(t == total for _, t, _ in heard)
    rounds = [(done, what) for done, _, what in heard if what.startswith("timed round")]
    assert [what for _, what in rounds] == [f"timed round {r + 1} of {ROUNDS} on reference" for r in range(ROUNDS)]
    assert [done for done, _ in rounds] == [2 + r for r in range(ROUNDS)]  # not already at the end
