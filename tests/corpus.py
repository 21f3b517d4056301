"""The corpora the tests run, and the one comparison with their expected outputs.

Every test that reads a corpus manifest (``pjrt_hub/data/corpus/{public,perf,collectives}``) or
checks an output against the expected one goes through here: where the programs are, what the
manifests say of them, their arrays, and :func:`assert_output`, which applies the manifests' own
rule (:class:`pjrt_hub.testing._programs.Tolerance`: ``numpy.isclose`` with ``equal_nan=False``,
so a NaN never matches; exact for integers, bools and zero tolerances), the rule the conformance
suite and ``bench`` use too.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pjrt_hub.testing._programs import Tolerance, perf_mismatch

__all__ = ["CORPUS", "Tolerance", "assert_output", "assert_perf_output", "collective_arrays", "collective_programs",
           "manifest", "perf_programs", "program_text", "public_arrays", "public_programs"]

#: The corpora, as the installed package holds them (``public``, ``perf``, ``collectives``).
CORPUS = Path(str(resources.files("pjrt_hub") / "data" / "corpus"))


@lru_cache(maxsize=None)
def _manifest_text(kind: str) -> str:
    return (CORPUS / kind / "manifest.json").read_text()


def manifest(kind: str) -> dict[str, Any]:
    """A corpus's manifest (a fresh copy: a test may not change another's)."""
    return json.loads(_manifest_text(kind))


def public_programs() -> list[dict[str, Any]]:
    """The public corpus's programs whose text is present, in manifest order."""
    return [p for p in manifest("public")["programs"] if (CORPUS / "public" / p["file"]).exists()]


def perf_programs() -> list[dict[str, Any]]:
    """The perf corpus's programs (no arrays: inputs are regenerated, outputs probed)."""
    return [p for p in manifest("perf")["programs"] if (CORPUS / "perf" / p["file"]).exists()]


def collective_programs() -> dict[str, dict[str, Any]]:
    """The collectives corpus's programs by name."""
    return dict(manifest("collectives")["programs"])


def program_text(kind: str, entry: Mapping[str, Any], form: str = "file") -> str:
    """A program's StableHLO text: ``form`` is ``file`` (pretty) or ``generic_file``."""
    return (CORPUS / kind / entry[form]).read_text()


def public_arrays(entry: Mapping[str, Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A public program's inputs (in ``@main`` order) and XLA:CPU's outputs."""
    with np.load(CORPUS / "public" / entry["data"]) as data:
        return [data[i["name"]] for i in entry["inputs"]], [data[o["name"]] for o in entry["outputs"]]


def collective_arrays(name: str) -> dict[str, np.ndarray]:
    """A collectives program's arrays by their npz names (``r{R}_in{I}``, ``out{J}``, ...)."""
    with np.load(CORPUS / "collectives" / f"{name}.npz") as data:
        return {k: data[k] for k in data.files}


def assert_output(actual: Any, expected: Any, tolerance: Tolerance | Mapping[str, Any], what: str) -> None:
    """``actual`` is ``expected`` under ``tolerance`` (a :class:`Tolerance`, or the manifest's
    output entry that states it)."""
    rule = tolerance if isinstance(tolerance, Tolerance) else Tolerance.of(tolerance)
    problem = rule.mismatch(actual, expected)
    assert problem is None, f"{what}: {problem}"


def assert_perf_output(actual: Any, spec: Mapping[str, Any], what: str) -> None:
    """A perf output against its manifest entry's probe values and sum."""
    problem = perf_mismatch(actual, spec)
    assert problem is None, f"{what}: {problem}"
