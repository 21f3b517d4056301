"""``pjrt-hub bench --spread`` / ``--under-load``: the report's shape, and no neighbour process
left behind. Never timing assertions: the figures are a benchmark."""

import json
import os
from pathlib import Path

import pytest

from pjrt_hub._bench_stability import LOAD_CEILING, Neighbours, format_spread, format_under_load
from pjrt_hub.cli import ExitCode, main


def _spinning_children() -> list[int]:
    """Processes whose parent is this one and that run the neighbour loop."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"getppid" in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_neighbours_spin_while_inside_and_are_reaped_on_error():
    with pytest.raises(RuntimeError):
        with Neighbours(2) as neighbours:
            pids = neighbours.pids
            assert len(pids) == 2 and all(_alive(p) for p in pids)
            assert sorted(_spinning_children()) == sorted(pids)
            raise RuntimeError("the benchmark failed")
    assert not any(_alive(p) for p in pids) and _spinning_children() == []


def test_neighbours_share_the_benchs_session_unless_asked_for_their_own():
    # The kernel's autogroup shares the cores among sessions first: where a neighbour runs
    # decides what share of the machine a loaded program can get.
    with Neighbours(1) as shared:
        assert [os.getsid(p) for p in shared.pids] == [os.getsid(0)]
    with Neighbours(2, own_sessions=True) as own:
        assert [os.getsid(p) for p in own.pids] == own.pids
    assert _spinning_children() == []


def test_neighbours_are_reaped_on_ctrl_c():
    with pytest.raises(KeyboardInterrupt):
        with Neighbours(1) as neighbours:
            pids = neighbours.pids
            raise KeyboardInterrupt
    assert not any(_alive(p) for p in pids)


def test_spread_json_over_two_processes(capsys):
    # A plugin named twice is timed once.
    code = main(["bench", "--corpus", "--plugin", "reference", "--plugin", "numba_cpu", "--plugin", "reference",
                 "--program", "broadcast_ops", "--runs", "2", "--spread", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK and report["plugins"] == ["reference", "numba_cpu"]
    # The first round's rows.
    assert [(r["name"], r["plugin"]) for r in report["programs"]] == [("broadcast_ops", "reference"),
                                                                     ("broadcast_ops", "numba_cpu")]
    row, theirs = report["spread"]
    (ratio,) = report["spread_ratios"]
    assert ratio["plugin"] == "reference" and ratio["against"] == "numba_cpu"
    assert ratio["per_process"] == [pytest.approx(a / b) for a, b in zip(row["per_process_ms"], theirs["per_process_ms"])]
    assert row["name"] == "broadcast_ops" and row["plugin"] == "reference" and row["processes"] == 2
    assert len(row["per_process_ms"]) == 2 and all(v > 0 for v in row["per_process_ms"])
    assert row["min_ms"] == min(row["per_process_ms"]) and row["max_ms"] == max(row["per_process_ms"])
    assert row["min_ms"] <= row["median_ms"] <= row["max_ms"]
    assert row["max_over_min"] == pytest.approx(row["max_ms"] / row["min_ms"]) and row["errors"] == []
    assert len(row["cores_used_per_process"]) == 2 and all(c > 0 for c in row["cores_used_per_process"])
    assert all(f >= 0 for f in row["minor_faults_per_run_per_process"])
    assert report["under_load"] is None


def test_under_load_json_with_one_neighbour_leaves_none_behind(capsys):
    code = main(["bench", "--corpus", "--plugin", "reference", "--program", "broadcast_ops", "--runs", "2",
                 "--under-load", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK
    load = report["under_load"]
    assert load["neighbours"] == 1 and load["ceiling"] == LOAD_CEILING
    (row,) = load["rows"]
    assert row["name"] == "broadcast_ops" and row["plugin"] == "reference"
    assert row["ratio"] == pytest.approx(row["loaded_ms"] / row["quiet_ms"])
    assert row["over_ceiling"] is (row["ratio"] > LOAD_CEILING)
    assert row["quiet_cores_used"] > 0 and row["loaded_cores_used"] > 0
    assert row["quiet_cpu_ms_per_run"] > 0 and row["loaded_cpu_ms_per_run"] > 0
    assert row["cpu_per_run_ratio"] == pytest.approx(row["loaded_cpu_ms_per_run"] / row["quiet_cpu_ms_per_run"])
    assert load["own_sessions"] is False and load["cores"] >= 1
    assert report["spread"] is None
    assert _spinning_children() == []


def test_under_load_in_sessions_of_their_own_says_so_and_what_the_kernel_does(capsys):
    from pjrt_hub._bench_stability import autogroup_enabled

    code = main(["bench", "--corpus", "--plugin", "reference", "--program", "pytree_io", "--runs", "2",
                 "--under-load", "1", "--neighbour-sessions", "own"])
    text = capsys.readouterr().out
    assert code == ExitCode.OK
    from pjrt_hub._bench_stability import fair_share, usable_cores

    cores = usable_cores()
    if autogroup_enabled():
        assert "1 neighbour(s) in sessions of their own, kernel autogroup on" in text
        share = fair_share(cores, 1, by_session=True)
    else:
        assert "1 neighbour(s) in sessions of their own, kernel autogroup off or not applied" in text
        share = fair_share(cores, 1, by_session=False)
    assert f"gets {share:.2f} of {cores} cores" in text
    assert _spinning_children() == []


def test_neighbour_sessions_without_under_load_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "--plugin", "reference", "--neighbour-sessions", "own"])
    assert info.value.code == ExitCode.USAGE
    assert "--neighbour-sessions only applies to --under-load" in capsys.readouterr().err


def test_tables_flag_a_collapse_and_show_failed_processes():
    load = {"neighbours": 2, "ceiling": 3.0, "rows": [
        {"name": "p", "plugin": "a", "quiet_ms": 2.0, "loaded_ms": 9.0, "ratio": 4.5, "over_ceiling": True,
         "quiet_cores_used": 1.9, "loaded_cores_used": 0.4, "cpu_per_run_ratio": 4.5 * 0.4 / 1.9},
        {"name": "p", "plugin": "b", "quiet_ms": 2.0, "loaded_ms": 3.0, "ratio": 1.5, "over_ceiling": False,
         "error": None},  # as the JSON report has it
        {"name": "q", "plugin": "a", "quiet_ms": None, "loaded_ms": None, "error": "quiet: it crashed"}]}
    text = format_under_load(load)
    assert "4.50x         1.9/0.4                  0.95x                     OVER 3x" in text and "slower than 3x quiet under load: p on a" in text
    assert "q on a: error: quiet: it crashed" in text and "p on b: error" not in text
    assert text.startswith("2 neighbour(s) in the bench's session: the cores are shared among threads")
    spread = [{"name": "p", "plugin": "a", "processes": 3, "per_process_ms": [22.0, None, 41.0],
               "errors": ["process 2: it crashed"], "cores_used_per_process": [1.9, None, 1.0], "min_ms": 22.0, "median_ms": 31.5, "max_ms": 41.0,
               "max_over_min": 41.0 / 22.0}]
    ratios = [{"name": "p", "plugin": "a", "against": "fastest", "per_process": [1.1, None, 0.9], "min_ratio": 0.9,
               "median_ratio": 1.0, "max_ratio": 1.1, "max_over_min": 1.1 / 0.9}]
    text = format_spread(spread, ratios)
    assert "1.86x" in text and "22.00 - 41.00     1.9 - 1.0" in text and "p on a: process 2: it crashed" in text
    assert "time over the other plugins' in the same round" in text
    assert "p        a       the fastest other  0.90x  1.00x   1.10x  1.10 - 0.90" in text
    assert "same round" not in format_spread(spread)


def test_spread_times_each_round_in_turns_and_divides_within_the_round(monkeypatch):
    from pjrt_hub import _bench_stability as stability

    rounds = []

    def measure(plugins, names, runs, library, cache, starting):
        rounds.append(list(plugins))
        host = 1.0 + len(rounds)  # the host slows down as time goes on, for every plugin alike
        own = {"a": 10.0, "b": 20.0, "c": 8.0}
        out = {}
        for plugin in plugins:
            starting("round 1 of 3", plugin)
            ms = None if plugin == "c" and len(rounds) == 2 else own[plugin] * host
            out[plugin] = {"rows": [{"name": n, "plugin": plugin, "execute_ms_median": ms, "outputs_match": ms is not None,
                                     "cores_used": 1.0, "minor_faults_per_run": 0.0} for n in names], "tiny_us": 1.0}
        return out

    said = []
    monkeypatch.setattr(stability, "_measure_interleaved", measure)
    first, table, ratios = stability.spread(["a", "b", "c"], ["p"], 3, runs=1, library=(), cache="",
                                            say=lambda done, total, what: said.append((done, total, what)),
                                            fastest_of=["b", "c"])
    assert rounds == [["a", "b", "c"]] * 3
    assert said[0] == (0, 3, "round 1 of 3: round 1 of 3 on a") and said[-1][:2] == (2, 3)
    assert [r["plugin"] for r in first] == ["a", "b", "c"]
    rows = {r["plugin"]: r for r in table}
    assert rows["a"]["per_process_ms"] == [20.0, 30.0, 40.0] and rows["a"]["max_over_min"] == 2.0
    assert rows["c"]["per_process_ms"] == [16.0, None, 32.0] and rows["c"]["errors"] == [
        "process 2: outputs differ from the expected ones"]
    by = {r["against"]: r for r in ratios}
    assert set(by) == {"b", "c", "fastest"} and all(r["plugin"] == "a" for r in ratios)
    assert by["b"]["per_process"] == [0.5, 0.5, 0.5] and by["b"]["max_over_min"] == 1.0  # the drift cancels
    assert by["c"]["per_process"] == [1.25, None, 1.25] and by["c"]["median_ratio"] == 1.25
    # The fastest of b and c in each round: c, except where c failed.
    assert by["fastest"]["per_process"] == [1.25, 0.5, 1.25]


def test_spread_ratios_without_a_second_real_plugin_have_no_fastest_column(monkeypatch):
    from pjrt_hub import _bench_stability as stability

    def measure(plugins, names, runs, library, cache, starting):
        return {p: {"rows": [{"name": n, "plugin": p, "execute_ms_median": 2.0, "outputs_match": True} for n in names],
                    "tiny_us": None} for p in plugins}

    monkeypatch.setattr(stability, "_measure_interleaved", measure)
    _, _, ratios = stability.spread(["a", "b", "ref"], ["p", "q"], 2, runs=1, library=(), cache="", fastest_of=["b"])
    assert [(r["name"], r["against"]) for r in ratios] == [("p", "b"), ("p", "ref"), ("q", "b"), ("q", "ref")]
    _, _, alone = stability.spread(["a"], ["p"], 2, runs=1, library=(), cache="")
    assert alone == []


def test_fair_shares_next_to_spinners():
    from pjrt_hub._bench_stability import fair_share

    assert fair_share(2, 2, by_session=False) == pytest.approx(1.0)  # 2 of 4 threads on 2 cores
    assert fair_share(2, 2, by_session=True) == pytest.approx(2 / 3)  # 1 of 3 sessions
    assert fair_share(4, 1, by_session=True) == pytest.approx(3.0)  # a spinner takes one core at most
    assert fair_share(4, 1, by_session=False) == pytest.approx(3.2)


@pytest.mark.parametrize("sysctl, cgroup, controllers, expected", [
    ("1", "0::/\n", None, True),
    ("0", "0::/\n", None, False),
    ("1", "4:memory:/x\n1:cpu,cpuacct:/\n0::/\n", None, True),  # v1: the cpu hierarchy's root
    ("1", "1:cpu,cpuacct:/user.slice\n", None, False),  # v1: a cpu group of its own
    ("1", "0::/user.slice/app\n", "memory pids\n", True),  # v2 without the cpu controller there
    ("1", "0::/user.slice/app\n", "cpu memory pids\n", False),  # v2 with it: a task group of its own
    ("1", "0::/user.slice/app\n", False, None),  # cannot tell
])
def test_autogroup_applies_only_in_the_root_cpu_cgroup(tmp_path, sysctl, cgroup, controllers, expected):
    from pjrt_hub._bench_stability import autogroup_enabled

    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/sched_autogroup_enabled").write_text(sysctl + "\n")
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    if controllers:
        (tmp_path / "sys/fs/cgroup/user.slice/app").mkdir(parents=True)
        (tmp_path / "sys/fs/cgroup/user.slice/app/cgroup.controllers").write_text(controllers)
    assert autogroup_enabled(str(tmp_path)) is expected


def test_under_load_starts_the_neighbours_where_it_was_asked_and_runs_them_for_the_loaded_rounds(monkeypatch):
    from pjrt_hub import _bench_stability as stability

    started, events = [], []

    class Recording:
        def __init__(self, count, *, own_sessions=False, paused=False):
            started.append((count, own_sessions, paused))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            events.append("stopped")

        def pause(self):
            events.append("pause")

        def resume(self):
            events.append("resume")

    def interleaved(plugins, names, runs, library, cache, starting=None, *, labels, before_turn):
        assert plugins == ["a", "a"] and labels == ["a (quiet)", f"a (with {started[-1][0]} busy)"]
        for _ in range(3):
            for label in labels:
                before_turn(label)
                events.append(label)
        return {label: {"rows": [{"name": n, "plugin": "a", "execute_ms_median": 1.0 + ("busy" in label),
                                  "outputs_match": True, "cores_used": 1.0, "cpu_ms_per_run": 1.0} for n in names],
                        "tiny_us": 1.0} for label in labels}

    monkeypatch.setattr(stability, "Neighbours", Recording)
    monkeypatch.setattr(stability, "_measure_interleaved", interleaved)
    _, rows = stability.under_load(["a"], ["p"], 2, runs=1, library=(), cache="", own_sessions=True)
    assert rows[0]["quiet_ms"] == 1.0 and rows[0]["loaded_ms"] == 2.0 and rows[0]["ratio"] == 2.0
    stability.under_load(["a"], ["p"], 3, runs=1, library=(), cache="")
    # Started stopped; running only for the loaded process's rounds, stopped for the quiet one's.
    assert started == [(2, True, True), (3, False, True)]
    one = ["pause", "a (quiet)", "resume", "a (with 2 busy)"] * 3 + ["stopped"]
    assert events[: len(one)] == one


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_neighbours_start_stopped_when_asked_and_spin_only_between_resume_and_pause():
    with Neighbours(2, paused=True) as neighbours:
        pids = neighbours.pids
        assert [_state(p) for p in pids] == ["T", "T"]
        neighbours.resume()
        assert all(_state(p) in "RS" for p in pids)
        neighbours.pause()
        assert [_state(p) for p in pids] == ["T", "T"]
    # Stopped neighbours are killed and reaped as well.
    assert not any(_alive(p) for p in pids) and _spinning_children() == []


def test_under_load_gives_the_quiet_processes_their_turns_together_then_the_loaded_ones(monkeypatch):
    # The neighbours are resumed (and given time to get going) once per program, not once per plugin.
    from pjrt_hub import _bench_stability as stability

    class Quiet:
        def __init__(self, count, *, own_sessions=False, paused=False):
            self.resumed = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def pause(self):
            pass

        def resume(self):
            self.resumed += 1

    seen = {}

    def interleaved(plugins, names, runs, library, cache, starting=None, *, labels, before_turn):
        seen["plugins"], seen["labels"] = list(plugins), list(labels)
        return {label: {"rows": [{"name": n, "plugin": p, "execute_ms_median": 1.0, "outputs_match": True}
                                 for n in names], "tiny_us": 1.0} for p, label in zip(plugins, labels)}

    monkeypatch.setattr(stability, "Neighbours", Quiet)
    monkeypatch.setattr(stability, "_measure_interleaved", interleaved)
    stability.under_load(["a", "b"], ["p"], 2, runs=1, library=(), cache="")
    assert seen["plugins"] == ["a", "b", "a", "b"]
    assert seen["labels"] == ["a (quiet)", "b (quiet)", "a (with 2 busy)", "b (with 2 busy)"]
