"""Static size limits: a program none of whose tensors could exist is refused before it runs.

Every value of a StableHLO module has a static type, so the size of each tensor a program would
make is known from its text alone, before a backend plans, folds or runs anything. Left to the
backends, a program that claims tens of gigabytes fails late and badly: numba_cpu's eager tier
materialises an ``iota`` while compiling, numpy raises MemoryError for a broadcast (or, for a
shape whose element count overflows, ValueError) in the middle of a run, and a size just under
what the machine can give brings the OOM killer rather than an error. :func:`check_sizes` walks
every function argument, op result and region argument of the module once: a shape whose element
count or byte size does not fit in a signed 64-bit integer is malformed (CompileError, an
InvalidArgument), and a single tensor larger than this machine's physical memory is
ResourceExhausted; both name the op, where it is, the type and the size. Only one tensor is
measured at a time: what is live together depends on how a backend schedules and frees, and a
program of several large tensors that fits when run is not refused on a guess. There is no
override: swap is not counted, and a tensor larger than physical memory is not worth paging.
"""

from __future__ import annotations

import os

from pjrt_hub.abi import CompileError, ResourceExhausted

from .ir import Block, Module, TensorType, TupleType, Type

__all__ = ["check_sizes", "physical_memory"]

_INT64_MAX = 2**63 - 1


def physical_memory() -> int | None:
    """This machine's physical memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _tensors(ty: Type) -> list[TensorType]:
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType):
        return [t for member in ty.types for t in _tensors(member)]
    return []  # a token holds no data


def _check_type(ty: Type, what: str, memory: int | None) -> None:
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
        if memory is not None and nbytes > memory:
            raise ResourceExhausted(
                f"{what} {tensor} needs {_gib(nbytes)} ({nbytes} bytes), more than this machine's "
                f"{_gib(memory)} of memory")


def check_sizes(module: Module, memory: int | None = None) -> None:
    """Refuse a module with a tensor that cannot be counted (CompileError) or that is larger than
    ``memory`` bytes (ResourceExhausted); ``memory`` defaults to :func:`physical_memory`.
    Iterative, so that regions nested thousands deep cost no stack."""
    if memory is None:
        memory = physical_memory()
    for fn in module.functions.values():
        for i, arg in enumerate(fn.args):
            _check_type(arg.type, f"argument {i} ({arg.name}) of @{fn.name}: its type", memory)
        blocks: list[Block] = [fn.body]
        while blocks:
            for op in blocks.pop().ops:
                where = f"{op.describe()} in @{fn.name}"
                for value in op.results:
                    _check_type(value.type, f"{where}: its result", memory)
                for region in op.regions:
                    for value in region.args:
                        _check_type(value.type, f"{where}: its region argument {value.name}", memory)
                    blocks.append(region)
