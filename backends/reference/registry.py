"""The op table of the reference interpreter: one entry per op.

An implementation is a function ``impl(ctx, op, *operands)`` returning the op's result (an
array) or its results (a sequence), registered with :func:`register`. ``ctx`` is the running
:class:`~.interpreter.Execution`, through which an op evaluates its regions or calls functions.
Implementations marked ``elementwise`` work on arrays of any shape without looking at the op's
static types, which lets the interpreter evaluate a reduction body or a sort comparator on whole
arrays of element pairs at once instead of element by element.

Adding an op means writing one function here (or in a sibling module) and one test; the op must
be defined in :mod:`pjrt_hub.backends.stablehlo.ops` (a test checks this table against it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pjrt_hub.backends.stablehlo.ops import add_rule

__all__ = ["OPS", "OpImpl", "register", "supported_ops"]


@dataclass(frozen=True, slots=True)
class OpImpl:
    name: str
    fn: Callable[..., Any]
    #: Works on operands with extra leading (batch) dimensions, ignoring the op's static types.
    elementwise: bool


OPS: dict[str, OpImpl] = {}


def register(*names: str, elementwise: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the implementation of ``names``. An op registered
    twice raises :class:`~pjrt_hub.backends.stablehlo.ops.DuplicateOpError` (a ValueError):
    one op has one implementation (see :mod:`pjrt_hub.backends.stablehlo.ops`)."""
    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            add_rule(OPS, name, OpImpl(name, fn, elementwise), table="the reference interpreter")
        return fn
    return add


def supported_ops() -> tuple[str, ...]:
    """Every op name the reference interpreter runs, sorted (terminators included)."""
    from . import interpreter  # noqa: F401 - importing fills the table

    return tuple(sorted(set(OPS) | {"func.return", "stablehlo.return"}))
