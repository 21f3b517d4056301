"""The generated programs on the real XLA CPU plugin too: where XLA and the rules agree, ours must.

XLA:CPU (xla-cpu-pjrt 0.0.1) departs from the rules in places, found by these programs and left
to it: it flushes subnormal f32/f64/bf16 inputs and results to zero (IEEE-754 keeps them);
``maximum``/``minimum`` return the lhs when only the rhs is NaN (the spec's IEEE-754 maximum
propagates NaN) and the lhs of ``max(-0, +0)``; integer ``power`` with large exponents differs
from exponentiation modulo 2^N, and treats unsigned exponents of 128 and more as negative. Those
elements are not held against our plugins; every other element is.

The C bridge does not pack the sub-byte types (i4, ui4, i2, ui2, f4E2M1FN), so they stay out.
"""

from __future__ import annotations

import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from pjrt_hub.abi import PjrtError

from .programs import EW_SHAPES, array_of, elementwise_program, ops_for, structural_programs
from .runner import Compiled, check_where_xla_agrees, describe
from .spec import ELEMENTS

pytestmark = pytest.mark.real_plugin

PACKED = {"i4", "ui4", "i2", "ui2", "f4E2M1FN"}
#: What XLA refused to compile (for debugging the generator).
SKIPPED: list[str] = []
CARRIED = sorted(set(ELEMENTS) - PACKED)


def _compile(clients, xla_client, text):
    try:
        return Compiled({**clients, "xla": xla_client}, text)
    except PjrtError as exc:
        if "numba_cpu" in str(exc) or "reference" in str(exc):
            raise
        SKIPPED.append(str(exc).splitlines()[0][:200])
        reject()  # a program this XLA does not take (an element type it lacks): draw another


@st.composite
def carried_elementwise_case(draw):
    e = ELEMENTS[draw(st.sampled_from(CARRIED))]
    ops = [o for o in ops_for(e) if not (o.kind == "convert" and o.arg in PACKED)]
    chosen = draw(st.lists(st.sampled_from(ops), min_size=1, max_size=6, unique=True))
    return e, chosen, draw(st.sampled_from(EW_SHAPES))


@given(case=carried_elementwise_case(), data=st.data())
def test_elementwise_where_xla_agrees_with_the_rules(clients, xla_client, case, data):
    e, ops, shape = case
    text, expected = elementwise_program(e, ops, shape)
    compiled = _compile(clients, xla_client, text)
    try:
        for _ in range(6):
            args = [data.draw(array_of(e, shape)), data.draw(array_of(e, shape)), data.draw(array_of(e, shape)),
                    data.draw(array_of(ELEMENTS["i1"], shape))]
            problems = check_where_xla_agrees(compiled, args, expected)
            assert not problems, describe(text, args, problems)
    finally:
        compiled.close()


@given(program=structural_programs(elements=CARRIED))
def test_shape_ops_where_xla_agrees_with_the_rules(clients, xla_client, program):
    compiled = _compile(clients, xla_client, program.text)
    try:
        problems = check_where_xla_agrees(compiled, program.args, lambda args: program.outputs)
        assert not problems, describe(program.text, program.args, problems)
    finally:
        compiled.close()
