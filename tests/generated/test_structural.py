"""Shape ops over every element type and edge shapes, on numba_cpu and reference, against the rules.

Each example is one generated program (a chain of broadcast_in_dim, reshape, transpose, slice,
dynamic_slice, pad, concatenate, reduce, dot_general, iota, convert and elementwise ops over a
0-d, zero-size, size-1 or odd-sized argument); every intermediate value is a result.
"""

from __future__ import annotations

from hypothesis import given

from .programs import structural_programs
from .runner import Compiled, check, describe


@given(program=structural_programs())
def test_shape_ops_follow_the_rules(clients, program):
    compiled = Compiled(clients, program.text)
    try:
        problems = check(compiled, program.args, lambda args: program.outputs)
        assert not problems, describe(program.text, program.args, problems)
    finally:
        compiled.close()
