"""The JAX-suite runner's own logic: the sample, the comparison and its verdict on made-up
results, then the whole runner on a made-up JAX test file whose tests behave differently on the
two platforms (pass, fail, hang, die, are a listed limitation), and on a small sample of a real
JAX test file when JAX's tests can be had."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pjrt_hub.jax import JAX_LIMITATIONS

from .model import (
    GOAL,
    KnownFailure,
    Outcome,
    TestResult,
    build_file_report,
    build_report,
    draw_sample,
    group_key,
    load_known_failures,
    render_text,
)
from .run import JaxSuiteError, jax_test_files, jax_version, main


def _results(**outcomes: tuple[Outcome, str]) -> dict[str, TestResult]:
    return {f"f.py::T::{name}": TestResult(nodeid=f"f.py::T::{name}", outcome=o, message=m)
            for name, (o, m) in outcomes.items()}


# -- without running anything ------------------------------------------------------------------


def test_the_sample_is_reproducible_per_file_and_keeps_collection_order():
    ids = [f"a.py::T::test{i}" for i in range(100)]
    first = draw_sample(ids, 10, seed=3, stream="a.py")
    assert first == draw_sample(ids, 10, seed=3, stream="a.py")
    assert len(first) == 10 and first == [i for i in ids if i in first]
    assert first != draw_sample(ids, 10, seed=4, stream="a.py")
    assert first != draw_sample(ids, 10, seed=3, stream="b.py")
    assert draw_sample(ids, None, seed=3, stream="a.py") == ids
    assert draw_sample(ids, 1000, seed=3, stream="a.py") == ids


def test_only_tests_passing_on_cpu_count_and_failures_are_grouped_by_first_line():
    cpu = _results(ok=(Outcome.PASSED, ""), bad1=(Outcome.PASSED, ""), bad2=(Outcome.PASSED, ""),
                   listed=(Outcome.PASSED, ""), hang=(Outcome.PASSED, ""), skip=(Outcome.PASSED, ""),
                   late=(Outcome.PASSED, ""), cpufail=(Outcome.FAILED, "boom"), cpuskip=(Outcome.SKIPPED, "no"))
    numba = _results(ok=(Outcome.PASSED, ""), bad1=(Outcome.FAILED, "expected f32[], got f32[1]"),
                     bad2=(Outcome.FAILED, "expected f32[], got f32[7]"), listed=(Outcome.FAILED, "no eigh"),
                     hang=(Outcome.TIMEOUT, "did not finish within 5 s"), skip=(Outcome.SKIPPED, "why"),
                     cpufail=(Outcome.FAILED, "boom"))
    known = [KnownFailure("linalg_decompositions", ("f.py::T::list*",))]
    report = build_file_report("f.py", keywords=None, collected=20, sampled=list(cpu), cpu=cpu, numba=numba,
                               known=known)
    assert report.cpu == {"passed": 7, "failed": 1, "skipped": 1}
    assert report.cpu_passed == 7
    # late was left by the budget, skip was skipped on numba_cpu only: neither ran on both.
    assert report.not_run == 1 and len(report.numba_skipped) == 1
    assert (report.compared, report.numba_passed) == (5, 1)
    groups = {g.key: g.tests for g in report.failures}
    assert groups[group_key("expected f32[], got f32[1]")] == ["f.py::T::bad1", "f.py::T::bad2"]
    assert report.failures[0].tests == ["f.py::T::bad1", "f.py::T::bad2"]  # biggest group first
    assert "timeout: did not finish within # s" in groups
    assert report.covered_by == {"f.py::T::bad1": None, "f.py::T::bad2": None,
                                 "f.py::T::listed": "linalg_decompositions", "f.py::T::hang": None}
    suite = build_report([report], jax_version="0", source="here", seed=1, sample=None)
    assert suite.unlisted == ["f.py::T::bad1", "f.py::T::bad2", "f.py::T::hang"]
    assert not suite.ok and len(suite.problems) == 2
    text = render_text(suite)
    assert "[UNLISTED] expected f32[], got f32[1]" in text and "[linalg_decompositions] no eigh" in text


def test_the_verdict_needs_the_goal_and_every_failure_listed():
    n = 1000
    cpu = {f"f.py::T::t{i}": TestResult(nodeid=f"f.py::T::t{i}", outcome=Outcome.PASSED) for i in range(n)}
    numba = dict(cpu)
    numba["f.py::T::t0"] = TestResult(nodeid="f.py::T::t0", outcome=Outcome.FAILED, message="x")
    listed = [KnownFailure("host_callbacks", ("f.py::T::t0",))]
    good = build_report([build_file_report("f.py", keywords=None, collected=n, sampled=list(cpu), cpu=cpu,
                                           numba=numba, known=listed)], jax_version="0", source="", seed=0, sample=None)
    assert good.ratio == 0.999 and good.ok
    unlisted = build_report([build_file_report("f.py", keywords=None, collected=n, sampled=list(cpu), cpu=cpu,
                                               numba=numba, known=[])], jax_version="0", source="", seed=0, sample=None)
    assert not unlisted.ok
    for i in range(1, 1 + int(n * (1 - GOAL)) + 1):
        numba[f"f.py::T::t{i}"] = TestResult(nodeid=f"f.py::T::t{i}", outcome=Outcome.CRASHED)
    everything = [KnownFailure("host_callbacks", ("f.py::T::*",))]
    under = build_report([build_file_report("f.py", keywords=None, collected=n, sampled=list(cpu), cpu=cpu,
                                            numba=numba, known=everything)], jax_version="0", source="", seed=0,
                         sample=None)
    assert not under.unlisted and under.ratio is not None and under.ratio < GOAL and not under.ok


def test_known_failures_name_real_limitations(tmp_path):
    shipped = load_known_failures(Path(__file__).with_name("known_failures.toml"), JAX_LIMITATIONS, "numba_cpu")
    assert all(isinstance(k, KnownFailure) for k in shipped)
    bad = tmp_path / "k.toml"
    bad.write_text('[[failure]]\nlimitation = "no_such_thing"\ntests = ["a.py::*"]\n')
    with pytest.raises(ValueError, match="no_such_thing"):
        load_known_failures(bad, JAX_LIMITATIONS, "numba_cpu")
    bad.write_text('[[failure]]\nlimitation = "host_callbacks"\ntests = []\n')
    with pytest.raises(ValueError):
        load_known_failures(bad, JAX_LIMITATIONS, "numba_cpu")


# -- the runner, end to end --------------------------------------------------------------------

#: Behaves differently on numba_cpu: what the runner must tell apart. The dying and hanging tests
#: come before others, which must still run (the runner starts a new child after each).
FAKE_TESTS = '''
import os
import time

import jax
import pytest


def on_numba():
    return jax.default_backend() == "numba_cpu"


def test_a_passes_everywhere():
    assert jax.devices()[0].platform in ("cpu", "numba_cpu")


def test_b_device_under_test_is_a_cpu():
    from jax._src import test_util as jtu
    assert jtu.device_under_test() == "cpu" and jtu.test_device_matches(["cpu"])


def test_c_fails_on_numba():
    assert not on_numba(), "numba_cpu said 17 where JAX's CPU said 18"


def test_d_dies_on_numba():
    if on_numba():
        os._exit(7)


def test_e_hangs_on_numba():
    if on_numba():
        time.sleep(600)


def test_f_listed_limitation():
    assert not on_numba(), "a limitation"


def test_g_fails_on_cpu_too():
    assert False, "JAX's CPU fails this one"


def test_h_skipped_on_cpu():
    pytest.skip("not here")


def test_i_after_the_crashes():
    assert jax.numpy.zeros(2).shape == (2,)


@pytest.fixture
def gives_up_after():
    yield
    if on_numba():
        pytest.exit("pytest gives up, as on an INTERNALERROR", returncode=3)


def test_j_pytest_gives_up_after_it(gives_up_after):
    pass


def test_k_after_pytest_gave_up():
    assert jax.numpy.ones(2).sum() == 2
'''


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    pytest.importorskip("jax")
    pytest.importorskip("absl")  # JAX's test utilities need it
    root = tmp_path_factory.mktemp("jax_suite")
    tests = root / "tests"
    tests.mkdir()
    (tests / "fake_test.py").write_text(FAKE_TESTS)
    known = root / "known.toml"
    known.write_text('[[failure]]\nlimitation = "host_callbacks"\ntests = ["fake_test.py::test_f_*"]\n')
    out = root / "out"
    code = main(["fake_test", "--tests-dir", str(tests), "--known-failures", str(known), "--timeout", "4",
                 "--output", str(out)])
    return code, json.loads((out / "jax-suite.json").read_text()), (out / "jax-suite.txt").read_text(), out


def test_the_runner_compares_a_fake_file_test_by_test(fake_run):
    code, report, text, out = fake_run
    assert code == 1  # unlisted failures
    (f,) = report["files"]
    assert (f["file"], f["collected"], f["sampled"]) == ("fake_test.py", 11, 11)
    assert f["cpu"] == {"passed": 9, "failed": 1, "skipped": 1}
    assert (f["cpu_passed"], f["compared"], f["numba_passed"], f["not_run"]) == (9, 9, 5, 0)
    outcomes = {g["example"]: g["tests"] for g in f["failures"]}
    assert outcomes["AssertionError: numba_cpu said 17 where JAX's CPU said 18"] == ["fake_test.py::test_c_fails_on_numba"]
    assert outcomes["crashed: the process ended with exit status 7 inside the test"] == \
        ["fake_test.py::test_d_dies_on_numba"]
    assert outcomes["timeout: did not finish within 4 s"] == ["fake_test.py::test_e_hangs_on_numba"]
    assert f["covered_by"]["fake_test.py::test_f_listed_limitation"] == "host_callbacks"
    assert sorted(t for t, key in f["covered_by"].items() if key is None) == [
        "fake_test.py::test_c_fails_on_numba", "fake_test.py::test_d_dies_on_numba",
        "fake_test.py::test_e_hangs_on_numba"]
    assert report["errors"] == []
    assert "fake_test.py" in text and "NOT OK" in text
    # Where the hung test was: its stack, in a file beside the child's log.
    (hang,) = (out / "logs").glob("*.hang.txt")
    assert "in test_e_hangs_on_numba" in hang.read_text()


def test_usage_errors_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--sample", "0"])
    assert exc.value.code == 2
    pytest.importorskip("jax")
    assert main(["no_such_test", "--tests-dir", str(tmp_path), "--output", str(tmp_path / "out")]) == 2
    assert "no_such_test.py" in capsys.readouterr().err


@pytest.mark.slow
def test_a_small_sample_of_jax_s_own_lax_vmap_test(tmp_path):
    """The bounded sample of the real suite that the main CI runs (the rest: tox -e jax-suite)."""
    pytest.importorskip("jax")
    pytest.importorskip("absl")
    # Only from the cache (or a JAX git directory in PJRT_HUB_JAX_GIT_DIR): the test suite does
    # not download them (CI reaches PyPI only, and the sdist holds no tests).
    git_dir = os.environ.get("PJRT_HUB_JAX_GIT_DIR")
    try:
        tests_dir, _ = jax_test_files(jax_version(), git_dir=Path(git_dir) if git_dir else None, fetch=False)
    except JaxSuiteError as exc:
        pytest.skip(f"JAX's test files are not here (python -m tests.jax_suite fetches them): {exc}")
    assert (tests_dir / "lax_vmap_test.py").exists()
    code = main(["lax_vmap_test", "--sample", "3", "--seed", "1", "--output", str(tmp_path)])
    report = json.loads((tmp_path / "jax-suite.json").read_text())
    (f,) = report["files"]
    assert f["sampled"] == 3 and f["collected"] > 100 and report["errors"] == []
    assert f["cpu_passed"] == f["compared"] + f["not_run"] + len(f["numba_skipped"])
    assert code == (0 if f["numba_passed"] == f["compared"] else 1)


def test_tox_and_the_weekly_workflow_run_it():
    import configparser

    import yaml

    root = Path(__file__).resolve().parents[2]
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(root / "tox.ini")
    env = tox["testenv:jax-suite"]
    assert env["extras"].split() == ["test", "jax"]
    assert env["commands"].strip() == "python -m tests.jax_suite --output jax-suite-out {posargs}"
    workflow = yaml.safe_load((root / ".github" / "workflows" / "jax-suite.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key "on" as true
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    commands = [s.get("run", "") for s in workflow["jobs"]["jax-suite"]["steps"]]
    assert any(c.startswith("tox -e jax-suite --") for c in commands)
    assert any("jax-suite-out/jax-suite.txt" in c for c in commands)
