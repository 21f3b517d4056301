"""The one comparison with expected outputs: the corpus manifests' rule, as every check applies it."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from pjrt_hub.testing._programs import Tolerance, load_corpus, perf_mismatch

from ..corpus import manifest

TESTS = Path(__file__).resolve().parents[1]


def test_a_nan_never_matches_and_equal_infinities_do():
    rule = Tolerance(1e-5, 1e-6)
    nan, inf = np.float32("nan"), np.float32("inf")
    assert rule.mismatch(np.array([1.0, nan], np.float32), np.array([1.0, 2.0], np.float32)) is not None
    # Not even where a NaN was expected: the manifests say numpy.isclose with equal_nan=False.
    assert rule.mismatch(np.array([nan], np.float32), np.array([nan], np.float32)) is not None
    assert Tolerance().mismatch(np.array([nan], np.float32), np.array([nan], np.float32)) is not None
    assert rule.mismatch(np.array([inf, -inf], np.float32), np.array([inf, -inf], np.float32)) is None
    assert rule.mismatch(np.array([inf], np.float32), np.array([-inf], np.float32)) is not None


def test_within_the_tolerance_passes_and_beyond_says_where():
    rule = Tolerance(rtol=1e-3, atol=0.0)
    expected = np.array([[1.0, 100.0], [3.0, 4.0]], np.float32)
    assert rule.mismatch(expected * np.float32(1.0009), expected) is None
    got = expected.copy()
    got[1, 0] = 3.01
    problem = rule.mismatch(got, expected)
    assert problem.startswith("1 of 4 elements differ beyond rtol=0.001 atol=0; first at [1, 0]: got ")
    assert "max abs error 0.01" in problem


def test_integers_bools_and_zero_tolerances_are_exact():
    assert Tolerance(0.5, 0.5).mismatch(np.array([1, 2], np.int32), np.array([1, 3], np.int32)) is not None
    assert Tolerance().mismatch(np.array([True]), np.array([False])) is not None
    assert Tolerance().mismatch(np.array([0.1], np.float32), np.array([np.nextafter(np.float32(0.1), 1)])) \
        is not None
    assert Tolerance().mismatch(np.array([-0.0], np.float32), np.array([0.0], np.float32)) is None


def test_dtype_shape_and_edge_shapes():
    rule = Tolerance(1e-5, 1e-6)
    assert rule.mismatch(np.zeros(3, np.float64), np.zeros(3, np.float32)) == "is float64, expected float32"
    assert rule.mismatch(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32)) == \
        "has shape [2, 3], expected [3, 2]"
    assert rule.mismatch(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32)) is None
    assert rule.mismatch(np.float32(1.0), np.float32(1.0)) is None
    assert "first at []" in rule.mismatch(np.float32(1.0), np.float32(2.0))
    bf16 = ml_dtypes.bfloat16
    assert Tolerance(1e-2).mismatch(np.array([1.0, 2.0], bf16), np.array([1.0, 2.015625], bf16)) is None
    assert Tolerance(1e-3).mismatch(np.array([1.0, 2.0], bf16), np.array([1.0, 2.015625], bf16)) is not None


def test_each_manifest_states_its_tolerances_so():
    # The public and perf corpora give rtol/atol per output; the collectives corpus gives a kind,
    # with rtol/atol except where it is exact.
    assert "equal_nan=False" in manifest("public")["comparison"]
    public = {(o["rtol"], o["atol"]) for p in manifest("public")["programs"] for o in p["outputs"]}
    assert all(Tolerance(*pair) == Tolerance.of({"rtol": pair[0], "atol": pair[1]}) for pair in public)
    collectives = [t for p in manifest("collectives")["programs"].values() for t in p["tolerance"]]
    assert all(Tolerance.of(t).exact == (t["kind"] == "exact") for t in collectives)
    # The conformance suite's programs carry the same tolerances.
    programs = {p.name: p for p in load_corpus()}
    for entry in manifest("public")["programs"]:
        assert programs[entry["name"]].tolerances == tuple(Tolerance.of(o) for o in entry["outputs"])


def test_a_perf_output_is_checked_by_its_probes_and_its_sum():
    output = np.arange(10, dtype=np.float32)
    spec = {"rtol": 1e-5, "atol": 1e-6, "probe_flat_indices": [0, 9], "probe_values": [0.0, 9.0],
            "sum": 45.0, "abs_sum": 45.0}
    assert perf_mismatch(output, spec) is None
    assert perf_mismatch(output.reshape(2, 5), spec) is None
    assert perf_mismatch(output + np.float32(1e-3), spec).startswith("probe values: ")
    moved = output.copy()
    moved[4] += 1
    assert perf_mismatch(moved, spec).startswith("sum 46.0, expected 45.0")


def test_the_tests_read_the_corpora_only_through_the_shared_helper():
    # One place reads manifests and compares with expected outputs (tests/corpus.py): a test that
    # reads a manifest itself would bring its own comparison, and with it another NaN rule.
    readers = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py")
                     if "manifest.json" in p.read_text() and p.name != "corpus.py" and p != Path(__file__).resolve())
    assert readers == [], readers
