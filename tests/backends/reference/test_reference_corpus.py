"""The reference interpreter reproduces every output of every public corpus program (XLA:CPU's
results) within the manifest's tolerances, from the pretty and from the generic text; the perf
programs compile and match their probe values."""

import importlib.util

import numpy as np
import pytest

from pjrt_hub.abi import CompileOptions
from pjrt_hub.backends.reference import ReferenceCompiler

from ref_corpus import CORPUS, assert_output_matches, perf_programs, public_programs

PUBLIC = public_programs()


@pytest.mark.parametrize("form", ["file", "generic_file"])
@pytest.mark.parametrize("program", PUBLIC, ids=[p["name"] for p in PUBLIC])
def test_reference_reproduces_xla_outputs(program, form):
    compiled = ReferenceCompiler().compile((CORPUS / "public" / program[form]).read_text(), CompileOptions())
    data = np.load(CORPUS / "public" / program["data"])
    args = [data[f"in{i}"] for i in range(len(program["inputs"]))]
    outputs = compiled.run(args)
    assert len(outputs) == len(program["outputs"])
    for i, (actual, spec) in enumerate(zip(outputs, program["outputs"])):
        assert_output_matches(actual, data[f"out{i}"], spec["rtol"], spec["atol"],
                              f"{program['name']} out{i} ({spec['pytree_path']})")


def _make_inputs():
    spec = importlib.util.spec_from_file_location("perf_make_inputs", CORPUS / "perf" / "make_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PERF = perf_programs()


@pytest.mark.parametrize("program", PERF, ids=[p["name"] for p in PERF])
def test_perf_programs_compile_and_match_their_probes(program):
    compiled = ReferenceCompiler().compile((CORPUS / "perf" / program["file"]).read_text(), CompileOptions())
    args = _make_inputs().regenerate(program)
    outputs = compiled.run(args)
    for i, (actual, spec) in enumerate(zip(outputs, program["outputs"])):
        flat = actual.reshape(-1)
        probes = np.asarray(spec["probe_flat_indices"])
        expected = np.asarray(spec["probe_values"], dtype=actual.dtype)
        assert_output_matches(flat[probes], expected, spec["rtol"], spec["atol"], f"{program['name']} out{i} probes")
        total = float(actual.astype(np.float64).sum())
        assert abs(total - spec["sum"]) <= 1e-4 * spec["abs_sum"]
