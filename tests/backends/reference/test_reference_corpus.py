"""The reference interpreter reproduces every output of every public corpus program (XLA:CPU's
results) within the manifest's tolerances, from the pretty and from the generic text; the perf
programs compile and match their probe values."""

import importlib.util

import pytest

from pjrt_hub.abi import CompileOptions
from pjrt_hub.backends.reference import ReferenceCompiler

from ...corpus import CORPUS, assert_output, assert_perf_output, perf_programs, program_text, public_arrays, \
    public_programs

PUBLIC = public_programs()


@pytest.mark.parametrize("form", ["file", "generic_file"])
@pytest.mark.parametrize("program", PUBLIC, ids=[p["name"] for p in PUBLIC])
def test_reference_reproduces_xla_outputs(program, form):
    compiled = ReferenceCompiler().compile(program_text("public", program, form), CompileOptions())
    args, expected = public_arrays(program)
    outputs = compiled.run(args)
    assert len(outputs) == len(program["outputs"])
    for i, (actual, spec) in enumerate(zip(outputs, program["outputs"])):
        assert_output(actual, expected[i], spec, f"{program['name']} out{i} ({spec['pytree_path']})")


def _make_inputs():
    spec = importlib.util.spec_from_file_location("perf_make_inputs", CORPUS / "perf" / "make_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PERF = perf_programs()


@pytest.mark.parametrize("program", PERF, ids=[p["name"] for p in PERF])
def test_perf_programs_compile_and_match_their_probes(program):
    compiled = ReferenceCompiler().compile(program_text("perf", program), CompileOptions())
    args = _make_inputs().regenerate(program)
    outputs = compiled.run(args)
    for i, (actual, spec) in enumerate(zip(outputs, program["outputs"])):
        assert_perf_output(actual, spec, f"{program['name']} out{i}")
