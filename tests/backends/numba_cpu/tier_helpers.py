"""Running a program on both tiers of numba_cpu and comparing the bits (a module of its own:
conftest is not importable)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pjrt_hub.backends.numba_cpu.compiler import _front_end
from pjrt_hub.backends.numba_cpu.eager import EagerProgram

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

#: Kernels of the tests' machine kernel file (the ``kernel_file`` fixture): one of each arity, a
#: polynomial one, a float64 one, an exact one, row reductions (an ordered one of each type, an
#: IEEE maximum) and the row machine.
MACHINE_NAMES = ("exp_f32", "tanh_f32", "pow_f32", "fmod_f32", "sin_f32", "lanes_add_f32", "lanes_mul_f64",
                 "lanes_max_f32", "row_machine")


def eager_program(text: str, threads: int = 1) -> EagerProgram:
    """The eager tier of ``text``, its products cut for ``threads`` as the compiled tier's are."""
    _, fn = _front_end(text)
    return EagerProgram(fn, threads)


def as_bits(a: np.ndarray) -> np.ndarray:
    """Integers as they are; floats (and 16-bit floats as stored) as their bit patterns, every
    NaN made the same (NaN payloads are not part of the contract, see .eager_math)."""
    a = np.asarray(a)
    if a.dtype.kind in "fV" or a.dtype.name in ("bfloat16", "float16"):
        bits = a.view(_UINT[a.dtype.itemsize]).copy()
        if a.dtype.itemsize == 2:
            nan = ((bits & 0x7FFF) > 0x7C00) if a.dtype.name == "float16" else ((bits & 0x7FFF) > 0x7F80)
        else:
            nan = np.isnan(a)
        bits[nan] = 0
        return np.stack([bits, nan.astype(bits.dtype)])
    return a


def assert_same_bits(eager: Sequence[np.ndarray], compiled: Sequence[np.ndarray], what: str = "") -> None:
    assert len(eager) == len(compiled), f"{what}: {len(eager)} outputs vs {len(compiled)}"
    for i, (e, c) in enumerate(zip(eager, compiled)):
        e, c = np.asarray(e), np.asarray(c)
        if c.dtype.itemsize == 2 and c.dtype.kind in "fV":
            e = e.view(c.dtype) if e.dtype == np.uint16 else e
        assert e.shape == c.shape, f"{what} output {i}: shape {e.shape} vs {c.shape}"
        assert e.dtype == c.dtype, f"{what} output {i}: dtype {e.dtype} vs {c.dtype}"
        eb, cb = as_bits(e), as_bits(c)
        if not np.array_equal(eb, cb):
            bad = np.argwhere(eb != cb)[0]
            where = tuple(bad[1:]) if eb.ndim > e.ndim else tuple(bad)
            raise AssertionError(
                f"{what} output {i}: the tiers differ at {where}: eager {e[where]!r}, compiled {c[where]!r} "
                f"({int((eb != cb).sum())} elements)")
