"""The op definitions (``backends/stablehlo/ops.py``) against every table that names ops.

The parser's and the verifier's per-op tables are derived from the definitions; the backends'
rule tables are written by hand, so they are checked here: every op a backend names must be
defined, and no rule table may bind an op twice (registration raises).
"""

from __future__ import annotations

import importlib

import pytest

from pjrt_hub.abi import CompileError, ParseError
from pjrt_hub.backends.stablehlo import parse_module, verify
from pjrt_hub.backends.stablehlo.ops import (
    OP_ATTRIBUTES,
    OPS,
    Attribute,
    DuplicateOpError,
    Form,
    OpDef,
    define,
    undefined_ops,
)

verifier = importlib.import_module("pjrt_hub.backends.stablehlo.verify")
forms = importlib.import_module("pjrt_hub.backends.stablehlo.parser.forms")


def _reference_names() -> set[str]:
    from pjrt_hub.backends.reference import OPS as REFERENCE_OPS, supported_ops

    return set(REFERENCE_OPS) | set(supported_ops())


def _numba_names() -> set[str]:
    from pjrt_hub.backends.numba_cpu import collective_rules, kernels, rules  # noqa: F401 - fill RULES
    from pjrt_hub.backends.numba_cpu.codegen import RULES, STRUCTURAL_OPS, supported_ops

    return set(RULES) | set(STRUCTURAL_OPS) | set(supported_ops())


def _toy_names() -> set[str]:
    from pjrt_hub.testing.toy import TOY_OPS

    return set(TOY_OPS)


@pytest.mark.parametrize("backend, names", [("reference", _reference_names), ("numba_cpu", _numba_names),
                                            ("toy", _toy_names)])
def test_every_op_a_backend_names_is_defined(backend, names):
    assert undefined_ops(names()) == [], f"{backend} has rules for ops that backends/stablehlo/ops.py does not define"


def test_an_op_missing_from_the_definitions_is_reported():
    assert undefined_ops(["stablehlo.add", "stablehlo.ad", "chlo.erf", "mhlo.erf"]) == ["mhlo.erf", "stablehlo.ad"]


def test_no_numba_rule_for_an_op_the_lowering_handles_itself():
    from pjrt_hub.backends.numba_cpu import collective_rules, kernels, rules  # noqa: F401
    from pjrt_hub.backends.numba_cpu.codegen import RULES, STRUCTURAL_OPS

    assert not set(RULES) & set(STRUCTURAL_OPS), "a rule for a structural op would never run"


def _register_reference(name: str) -> None:
    from pjrt_hub.backends.reference import register

    register(name)(lambda ctx, op, *args: None)


def _register_numba(kind: str):
    def register(name: str) -> None:
        from pjrt_hub.backends.numba_cpu import rules

        getattr(rules, kind)(name)(lambda ctx, op, *args: None)
    return register


@pytest.mark.parametrize("table, register", [
    ("reference", _register_reference),
    ("numba_cpu", _register_numba("elementwise")),
    ("numba_cpu", _register_numba("index_map")),
    ("numba_cpu", _register_numba("kernel")),
])
def test_registering_an_op_a_second_time_raises_and_keeps_the_first(table, register):
    if table == "reference":
        from pjrt_hub.backends.reference import OPS as rules
    else:
        from pjrt_hub.backends.numba_cpu import kernels  # noqa: F401 - fill RULES
        from pjrt_hub.backends.numba_cpu.codegen import RULES as rules
    before = dict(rules)
    with pytest.raises(DuplicateOpError, match=r"op stablehlo\.add is registered twice"):
        register("stablehlo.add")
    assert rules == before
    assert isinstance(DuplicateOpError("x"), ValueError)  # what the reference table raised before


def test_a_definition_table_refuses_an_op_defined_twice():
    with pytest.raises(DuplicateOpError, match=r"the op definitions: op test\.twice is registered twice"):
        define([OpDef("test.once"), OpDef("test.twice"), OpDef("test.twice", verifier="unary")])


def test_a_definition_whose_form_fills_an_attribute_it_lacks_is_refused():
    with pytest.raises(ValueError, match="its form fills 'sizes'"):
        define([OpDef("test.op", attributes=(Attribute("dims", "tuple[int]"),),
                      form=Form("dims", keyword="dims", attribute="sizes"))])
    with pytest.raises(ValueError, match="listed twice"):
        define([OpDef("test.op", attributes=(Attribute("k", "int"), Attribute("k", "int")))])


def test_every_rule_and_reader_a_definition_names_exists_and_each_is_used():
    verifiers = {d.verifier for d in OPS.values() if d.verifier is not None}
    readers = {d.form.reader for d in OPS.values() if d.form is not None}
    assert verifiers == set(verifier.VERIFIERS)
    assert readers == set(forms.READERS)


def test_op_attributes_describe_the_definitions():
    assert OP_ATTRIBUTES["stablehlo.slice"] == {
        "start_indices": "tuple[int]", "limit_indices": "tuple[int]", "strides": "tuple[int] (default all 1)"}
    assert OP_ATTRIBUTES["stablehlo.sort"]["dimension"] == "int (default -1, normalised to rank-1)"
    assert "stablehlo.add" not in OP_ATTRIBUTES
    from pjrt_hub.backends.stablehlo import OP_ATTRIBUTES as exported
    from pjrt_hub.backends.stablehlo.ir import OP_ATTRIBUTES as from_ir

    assert exported is OP_ATTRIBUTES and from_ir is OP_ATTRIBUTES


def _program(op: str, operand_types: list[str], result_types: list[str], attrs: str = "") -> str:
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(operand_types))
    uses = ", ".join(f"%a{i}" for i in range(len(operand_types)))
    results = ", ".join(result_types)
    return (f"func.func @main({args}) -> ({results}) {{\n"
            f"  %0 = \"{op}\"({uses}) {attrs} : ({', '.join(operand_types)}) -> ({results})\n"
            f"  return %0 : {results}\n}}\n")


_REQUIRED = sorted((d.name, next(a.name for a in d.attributes if a.required))
                   for d in OPS.values() if any(a.required for a in d.attributes))


@pytest.mark.parametrize("op, first_required", _REQUIRED)
def test_the_parser_refuses_an_op_without_the_attributes_its_definition_requires(op, first_required):
    with pytest.raises(ParseError, match=f"{op}: missing attribute '{first_required}'"):
        parse_module(_program(op, [], ["tensor<f32>"]))


def test_the_parser_fills_in_the_defaults_of_the_definitions():
    module = parse_module(_program("stablehlo.sort", ["tensor<2x3xf32>"], ["tensor<2x3xf32>"]))
    op = module.main.body.ops[0]
    assert dict(op.attributes) == {"dimension": 1, "is_stable": False}


_TYPE_OF_CLASS = {"b": "i1", "s": "i32", "u": "ui32", "f": "f32", "c": "complex<f32>"}
_CLASSED = sorted((d.name, d.verifier, next(c for c in "bsufc" if c not in d.element_classes))
                  for d in OPS.values() if d.element_classes is not None)


@pytest.mark.parametrize("op, rule, refused", _CLASSED)
def test_the_verifier_refuses_element_types_the_definition_does_not_allow(op, rule, refused):
    ty = f"tensor<4x{_TYPE_OF_CLASS[refused]}>"
    result = "tensor<4xi1>" if rule == "to_bool" else ty
    operands = [ty, ty] if rule == "binary" else [ty]
    module = parse_module(_program(op, operands, [result]))
    with pytest.raises(CompileError, match=f"{op}.*operands, not {_TYPE_OF_CLASS[refused]}"):
        verify(module)


@pytest.mark.parametrize("op, regions", sorted((d.name, d.regions) for d in OPS.values() if d.regions))
def test_the_verifier_counts_the_regions_the_definition_gives(op, regions):
    required = ", ".join(f"{a.name} = 0" for a in OPS[op].attributes if a.required)
    module = parse_module(_program(op, ["tensor<f32>", "tensor<f32>"], ["tensor<f32>"], attrs=f"{{{required}}}"))
    with pytest.raises(CompileError, match=f"expects {regions} regions?, got 0"):
        verify(module)
