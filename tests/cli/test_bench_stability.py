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
    code = main(["bench", "--corpus", "--plugin", "reference", "--program", "broadcast_ops", "--runs", "2",
                 "--spread", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK
    assert [r["name"] for r in report["programs"]] == ["broadcast_ops"]  # the first process's rows
    (row,) = report["spread"]
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
    text = format_spread(spread)
    assert "1.86x" in text and "22.00 - 41.00     1.9 - 1.0" in text and "p on a: process 2: it crashed" in text


def test_spread_takes_the_plugins_in_turns_so_drift_hits_them_alike(monkeypatch):
    from pjrt_hub import _bench_stability as stability

    calls = []

    def measure(plugin, names, runs, library, cache):
        calls.append(plugin)
        ms = 10.0 + len(calls)  # the host slows down as time goes on
        return {"rows": [{"name": n, "plugin": plugin, "execute_ms_median": ms, "outputs_match": True,
                          "cores_used": 1.0, "minor_faults_per_run": 0.0} for n in names], "tiny_us": 1.0}

    monkeypatch.setattr(stability, "_measure_in_child", measure)
    first, table = stability.spread(["a", "b"], ["p"], 3, runs=1, library=(), cache="")
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert [r["plugin"] for r in first] == ["a", "b"]
    rows = {r["plugin"]: r for r in table}
    assert rows["a"]["per_process_ms"] == [11.0, 13.0, 15.0] and rows["b"]["per_process_ms"] == [12.0, 14.0, 16.0]


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


def test_under_load_starts_the_neighbours_where_it_was_asked(monkeypatch):
    from pjrt_hub import _bench_stability as stability

    started = []

    class Recording:
        def __init__(self, count, *, own_sessions=False):
            started.append((count, own_sessions))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    def measure(plugin, names, runs, library, cache):
        return {"rows": [{"name": n, "plugin": plugin, "execute_ms_median": 1.0, "outputs_match": True,
                          "cores_used": 1.0, "cpu_ms_per_run": 1.0} for n in names], "tiny_us": 1.0}

    monkeypatch.setattr(stability, "Neighbours", Recording)
    monkeypatch.setattr(stability, "_measure_in_child", measure)
    stability.under_load(["a"], ["p"], 2, runs=1, library=(), cache="", own_sessions=True)
    stability.under_load(["a"], ["p"], 3, runs=1, library=(), cache="")
    assert started == [(2, True), (3, False)]
