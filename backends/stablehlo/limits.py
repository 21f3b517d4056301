"""Static size limits: a program whose tensors cannot be counted is refused before it runs.

Every value of a StableHLO module has a static type, so the size of each tensor a program would
make is known from its text alone. A shape whose element count or byte size does not fit in a
signed 64-bit integer is malformed, as XLA also finds at compile time; left to the backends, numpy
raised ValueError in the middle of a run. :func:`check_sizes` walks every function argument, op
result and region argument of the module once and raises CompileError (an InvalidArgument)
naming the op, where it is, the type and the size. A tensor that can be counted but is larger
than the machine's memory is not refused here: a plugin compiles such a program and fails when
it runs (the conformance suite's ``failing_program`` is one), so that check belongs at execution.
"""

from __future__ import annotations

from pjrt_hub.abi import CompileError

from .ir import Block, Module, TensorType, TupleType, Type

__all__ = ["check_sizes"]

_INT64_MAX = 2**63 - 1


def _tensors(ty: Type) -> list[TensorType]:
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType):
        return [t for member in ty.types for t in _tensors(member)]
    return []  # a token holds no data


def _check_type(ty: Type, what: str) -> None:
    for tensor in _tensors(ty):
        count = 1
        for d in tensor.shape:
            count *= d
        if count > _INT64_MAX:
            raise CompileError(f"{what} {tensor} has {count} elements, more than a 64-bit size can count")
        try:
            itemsize = tensor.dtype.itemsize
        except KeyError:  # an element type without a numpy dtype: the parser names it
            continue
        nbytes = count * itemsize
        if nbytes > _INT64_MAX:
            raise CompileError(f"{what} {tensor} takes {nbytes} bytes, more than a 64-bit size can count")


def check_sizes(module: Module) -> None:
    """Refuse a module with a tensor that cannot be counted (CompileError). Iterative, so that
    regions nested thousands deep cost no stack."""
    for fn in module.functions.values():
        for i, arg in enumerate(fn.args):
            _check_type(arg.type, f"argument {i} ({arg.name}) of @{fn.name}: its type")
        blocks: list[Block] = [fn.body]
        while blocks:
            for op in blocks.pop().ops:
                where = f"{op.describe()} in @{fn.name}"
                for value in op.results:
                    _check_type(value.type, f"{where}: its result")
                for region in op.regions:
                    for value in region.args:
                        _check_type(value.type, f"{where}: its region argument {value.name}")
                    blocks.append(region)
