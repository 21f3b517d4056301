"""Every public corpus program compiles from its pretty and its generic text and reproduces the
outputs XLA:CPU computed, within the manifest's tolerances (exact for integers and bools)."""

from __future__ import annotations

import pytest

from ...corpus import assert_output, program_text, public_arrays, public_programs

PROGRAMS = {p["name"]: p for p in public_programs()}


@pytest.mark.parametrize("form", ["file", "generic_file"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_program(compiler, name, form):
    entry = PROGRAMS[name]
    program = compiler.compile(program_text("public", entry, form))
    args, expected = public_arrays(entry)
    assert [s.shape for s in program.inputs] == [tuple(a.shape) for a in args]
    outputs = program.run(args)
    assert len(outputs) == len(expected)
    for i, (got, want, spec) in enumerate(zip(outputs, expected, entry["outputs"])):
        assert_output(got, want, spec, f"{name} output {i}")


def test_pretty_and_generic_forms_share_one_compiled_module(compiler):
    entry = PROGRAMS["layernorm"]
    pretty = compiler.compile(program_text("public", entry))
    generic = compiler.compile(program_text("public", entry, "generic_file"))
    assert pretty.fingerprint == generic.fingerprint
