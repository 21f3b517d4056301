"""Every public corpus program compiles from its pretty and its generic text and reproduces the
outputs XLA:CPU computed, within the manifest's tolerances (exact for integers and bools)."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from numba_helpers import assert_matches

CORPUS = resources.files("pjrt_hub") / "data" / "corpus" / "public"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
PROGRAMS = {p["name"]: p for p in MANIFEST["programs"]}


@pytest.mark.parametrize("form", ["file", "generic_file"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_program(compiler, name, form):
    entry = PROGRAMS[name]
    program = compiler.compile((CORPUS / entry[form]).read_text())
    with np.load(CORPUS / entry["data"]) as data:
        args = [data[f"in{i}"] for i in range(len(entry["inputs"]))]
        expected = [data[f"out{i}"] for i in range(len(entry["outputs"]))]
    assert [s.shape for s in program.inputs] == [tuple(a.shape) for a in args]
    outputs = program.run(args)
    assert len(outputs) == len(expected)
    for i, (got, want, spec) in enumerate(zip(outputs, expected, entry["outputs"])):
        assert_matches(got, want, rtol=spec["rtol"], atol=spec["atol"], what=f"{name} output {i}")


def test_pretty_and_generic_forms_share_one_compiled_module(compiler):
    entry = PROGRAMS["layernorm"]
    pretty = compiler.compile((CORPUS / entry["file"]).read_text())
    generic = compiler.compile((CORPUS / entry["generic_file"]).read_text())
    assert pretty.fingerprint == generic.fingerprint
