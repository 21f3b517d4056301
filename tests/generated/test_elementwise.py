"""Elementwise ops over every element type, on numba_cpu and reference, against the rules.

Each example draws an element type, a few of its ops (unary, binary, compare, select, clamp,
convert to another type), a shape (0-d, zero-size, size-1, odd), compiles that one program and
runs it on several drawn argument lists: values are cheap, numba compiles are not.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from .programs import EW_SHAPES, array_of, elementwise_program, ops_for
from .runner import Compiled, check, describe
from .spec import ELEMENTS

#: Argument lists run per compiled program.
VALUE_DRAWS = 12


@st.composite
def elementwise_case(draw):
    e = ELEMENTS[draw(st.sampled_from(sorted(ELEMENTS)))]
    candidates = ops_for(e)
    ops = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=6, unique=True))
    shape = draw(st.sampled_from(EW_SHAPES))
    return e, ops, shape


@given(case=elementwise_case(), data=st.data())
def test_elementwise_ops_follow_the_rules(clients, case, data):
    e, ops, shape = case
    text, expected = elementwise_program(e, ops, shape)
    compiled = Compiled(clients, text)
    try:
        for _ in range(VALUE_DRAWS):
            args = [data.draw(array_of(e, shape), label="x"), data.draw(array_of(e, shape), label="y"),
                    data.draw(array_of(e, shape), label="z"), data.draw(array_of(ELEMENTS["i1"], shape), label="p")]
            problems = check(compiled, args, expected)
            assert not problems, describe(text, args, problems)
    finally:
        compiled.close()


def test_every_element_type_has_ops_and_conversions():
    assert len(ELEMENTS) == 28
    for e in ELEMENTS.values():
        ops = ops_for(e)
        assert sum(o.kind == "convert" for o in ops) == len(ELEMENTS) - 1
        assert any(o.kind == "binary" for o in ops) and any(o.kind == "compare" for o in ops)
