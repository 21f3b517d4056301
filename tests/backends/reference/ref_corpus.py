"""Corpus locations and the manifest's comparison rule, shared by the reference tests."""

import json
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().parents[3] / "pjrt_hub" / "data" / "corpus"


def manifest(kind: str) -> dict:
    return json.loads((CORPUS / kind / "manifest.json").read_text())


def public_programs() -> list[dict]:
    return [p for p in manifest("public")["programs"] if (CORPUS / "public" / p["file"]).exists()]


def perf_programs() -> list[dict]:
    return [p for p in manifest("perf")["programs"] if (CORPUS / "perf" / p["file"]).exists()]


def assert_output_matches(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str) -> None:
    """The manifest's rule: |actual - expected| <= atol + rtol * |expected|, NaN never equal,
    exact for rtol = atol = 0 (ints, bools, exact floats)."""
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    if rtol == 0 and atol == 0:
        mismatch = np.flatnonzero(actual.reshape(-1) != expected.reshape(-1))
        assert mismatch.size == 0, (f"{what}: {mismatch.size} elements differ, first at flat index "
                                    f"{mismatch[0]}: {actual.reshape(-1)[mismatch[0]]} != "
                                    f"{expected.reshape(-1)[mismatch[0]]}")
        return
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    ok = np.abs(a - e) <= atol + rtol * np.abs(e)
    bad = np.flatnonzero(~ok.reshape(-1))
    assert bad.size == 0, (f"{what}: {bad.size} elements outside rtol={rtol} atol={atol}, first at "
                           f"flat index {bad[0]}: {a.reshape(-1)[bad[0]]} vs {e.reshape(-1)[bad[0]]}")
