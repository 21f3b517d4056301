"""Every corpus program parses from its pretty and its generic text into the same IR."""

import pytest

from pjrt_hub.backends.stablehlo import parse_module, verify
from pjrt_hub.backends.stablehlo.printer import format_module

from ...corpus import perf_programs, program_text, public_programs

PROGRAMS = [("public", p) for p in public_programs()] + [("perf", p) for p in perf_programs()]


@pytest.mark.parametrize("kind, program", PROGRAMS, ids=[p["name"] for _, p in PROGRAMS])
def test_pretty_and_generic_forms_give_the_same_ir(kind, program):
    pretty = parse_module(program_text(kind, program))
    generic = parse_module(program_text(kind, program, "generic_file"))
    verify(pretty)
    verify(generic)
    canonical = format_module(pretty)
    assert canonical == format_module(generic)
    # The canonical text is itself a program the parser reads back to the same IR.
    assert format_module(parse_module(canonical)) == canonical


@pytest.mark.parametrize("kind, program", PROGRAMS, ids=[p["name"] for _, p in PROGRAMS])
def test_main_signature_matches_the_manifest(kind, program):
    module = parse_module(program_text(kind, program))
    main = module.main
    assert [list(t.shape) for t in main.arg_types] == [i["shape"] for i in program["inputs"]]
    assert [str(t.dtype) for t in main.arg_types] == [i["dtype"] for i in program["inputs"]]
    if kind == "public":
        assert [list(t.shape) for t in main.result_types] == [o["shape"] for o in program["outputs"]]
        assert [str(t.dtype) for t in main.result_types] == [o["dtype"] for o in program["outputs"]]
        paths = [a.get("jax.result_info") for a in main.result_attrs]
        assert paths == ["result" + o["pytree_path"] for o in program["outputs"]]


@pytest.mark.parametrize("program", public_programs(), ids=lambda p: p["name"])
def test_op_census_matches_the_manifest(program):
    module = parse_module(program_text("public", program))
    counts: dict[str, int] = {}
    for op in module.walk():
        counts[op.name] = counts.get(op.name, 0) + 1
    counts["func.func"] = len(module.functions)
    expected = {k: v for k, v in program["op_counts"].items() if k != "builtin.module"}
    assert counts == expected
