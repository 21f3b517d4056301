"""The order in which numba_cpu sums and multiplies floats in a reduction: one definition, two
implementations (the compiled kernels and the eager numpy tier) that must agree bit for bit.

Floating-point addition is not associative, so a reduction's result depends on the order of its
steps. An order that LLVM chooses (a reduction step it may reassociate, split into as many
partial sums as its vector width and unroll factor suggest) is fast but unknowable from outside:
it changes with the loop body, the CPU and the LLVM version. numba_cpu runs a program first on
an eager numpy tier and then on compiled code (see :mod:`.tiers`), and both must give the same
bits, so the order is fixed here instead, in a form that still runs at vector speed:

* ``add`` and ``multiply`` reductions of ``f32`` and ``f64`` whose reduced dimensions are the
  last dimensions of the operand (a *suffix*: rows of softmax and layernorm, full reductions)
  accumulate in ``K`` *lanes*. ``W`` is the size of the innermost reduced dimension and
  ``K = lane_count(W, itemsize)``: the next power of two from ``W``, at most 256 bytes of lanes
  (64 for f32, 32 for f64). The element at innermost index ``w`` goes to lane ``w % K``; each
  lane starts at the identity (``-0.0`` for add, ``1.0`` for multiply, exact for every operand)
  and accumulates its elements in row-major order of the reduced index. Lanes are then folded
  in halves (lane ``j`` with lane ``j + K/2``, then ``j + K/4``... until one is left) and the
  result is ``init (op) folded``. In compiled code the lanes are one LLVM vector (a 64-float
  vector is four AVX-512 registers), so a lane step is one vector instruction.
* Every other float reduction (reduced dimensions interleaved with kept ones, ``reduce_window``,
  scatter combiners, variadic or region-defined reducers, 16-bit floats, which round after
  every step) is *sequential*: ``init``, then each element in row-major order of the reduced
  index, one step at a time.
* Integer reductions and float ``max``/``min`` are exact in any order. The compiled code runs
  float ``max``/``min`` suffix reductions by lanes too (identity ``-inf``/``+inf``), for speed
  only: LLVM does not vectorise an IEEE ``maximum`` chain by itself, and a scalar chain of them
  is several times slower than a vector of lanes. The eager tier reduces them in any order
  (:attr:`LanePlan.ordered` is False), with the same bits.

This module holds the definition and the numpy side; :mod:`.lane_intrinsics` holds the compiled
side. It imports no numba: the eager tier must start without it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import numpy.typing as npt

from pjrt_hub.backends.stablehlo import Op, TensorType

__all__ = ["IDENTITY", "LANE_BYTES", "BLOCK", "LanePlan", "float_extreme", "fold_lanes", "identity", "lane_count",
           "lane_reduction", "reduce_lanes", "row_twin"]

#: Bytes of lanes at most (64 float32 or 32 float64 lanes).
LANE_BYTES = 256
#: Fused reductions whose values are not in memory compute them into a scratch row first, in
#: blocks of at most this many elements (a multiple of every lane count).
BLOCK = 4096
#: The lane start value of each lane operation: ``x (op) identity == x`` bit for bit, signed
#: zeros and NaN included.
IDENTITY = {"add": -0.0, "mul": 1.0, "max": -np.inf, "min": np.inf}


def lane_count(width: int, itemsize: int) -> int:
    """Lanes of a suffix reduction whose innermost reduced dimension has ``width`` elements."""
    most = LANE_BYTES // itemsize
    k = 1
    while k < width and k < most:
        k *= 2
    return k


def identity(op: str, dtype: np.dtype) -> np.generic:
    """The lane start value: ``x (op) identity == x`` bit for bit, signed zeros and NaN included."""
    return dtype.type(IDENTITY[op])


def fold_lanes(lanes: np.ndarray, op: str) -> np.ndarray:
    """Fold the last axis (``K`` lanes) in halves, as the compiled code does."""
    fn = np.add if op == "add" else np.multiply
    k = lanes.shape[-1]
    while k > 1:
        k //= 2
        lanes = fn(lanes[..., :k], lanes[..., k:2 * k])
    return lanes[..., 0]


def reduce_lanes(x: np.ndarray, ndims: int, op: str, init: npt.ArrayLike) -> np.ndarray:
    """The lane reduction of the last ``ndims`` axes of ``x`` (f32 or f64), with ``init``
    (a scalar or an array of the kept shape) combined last. ``ndims`` must be at least 1."""
    fn = np.add if op == "add" else np.multiply
    dtype = x.dtype
    kept: tuple[int, ...] = x.shape[: x.ndim - ndims]
    width = x.shape[-1]
    k = lane_count(width, dtype.itemsize)
    pad = (-width) % k
    if pad:
        fill = np.full(x.shape[:-1] + (pad,), identity(op, dtype), dtype)
        x = np.concatenate([x, fill], axis=-1)
    steps = x.reshape(kept + (int(np.prod(x.shape[len(kept):])) // k, k))  # not -1: kept may be empty
    if steps.shape[-2] == 0:
        lanes = np.full(kept + (k,), identity(op, dtype), dtype)
    elif steps.shape[-2] == 1:
        lanes = steps[..., 0, :]
    else:
        lanes = _accumulate(fn, steps)
    return fn(np.asarray(init, dtype), fold_lanes(lanes, op))


#: Steps of a lane reduction taken one numpy call each; longer ones are accumulated in blocks.
_STEP_CALLS = 256
#: Elements of one block of :func:`_accumulate` (its partial results stay in the core's cache).
_ACCUMULATE_BLOCK = 1 << 16


def _accumulate(fn: np.ufunc, steps: np.ndarray) -> np.ndarray:
    """The lanes of ``steps`` (``kept + (n, k)``) folded over ``n`` in order: each lane adds its
    steps one after another, as the compiled loop does. ``ufunc.accumulate`` is sequential by
    definition (``ufunc.reduce`` sums contiguous runs pairwise), but it writes every partial
    result, a pass as large as the operand; a few steps are cheaper as one in-place call each,
    and many are accumulated in cache-sized blocks, each starting from the lanes so far."""
    n = steps.shape[-2]
    lanes = steps[..., 0, :].copy()
    if n <= _STEP_CALLS:
        for j in range(1, n):
            fn(lanes, steps[..., j, :], out=lanes)
        return lanes
    per_step = lanes.size
    block = max(8, _ACCUMULATE_BLOCK // max(per_step, 1))
    for start in range(1, n, block):
        chunk = np.concatenate([lanes[..., None, :], steps[..., start:start + block, :]], axis=-2)
        lanes = fn.accumulate(chunk, axis=-2)[..., -1, :]
    return lanes


def float_extreme(x: np.ndarray, which: str) -> np.ndarray:
    """IEEE max (``which == "max"``) or min of the last axis of float ``x``: numpy's reduction
    (NaN wins, in one pass), with the sign of a zero result put right: a max that is zero has
    only zeros and negatives to choose from, and is +0 if any of them is +0 (a min: -0 if any
    is -0), where numpy returns whichever zero it met first."""
    r = np.asarray(np.max(x, axis=-1) if which == "max" else np.min(x, axis=-1))
    zero = r == 0
    if zero.any():
        rows = x[zero]
        signed = np.signbit(rows) if which == "min" else ~np.signbit(rows)
        wanted = ((rows == 0) & signed).any(axis=-1)
        negative = ~wanted if which == "max" else wanted
        r = np.array(r, copy=True)
        r[zero] = np.where(negative, -0.0, 0.0).astype(r.dtype)
    return r


def row_twin(op: str) -> Callable[[np.ndarray, int], np.ndarray]:
    """``twin(x, width)``: the reduction of each row of the 2-D ``x`` (f32 or f64), whose rows are
    runs of ``width``-element innermost rows, by lanes (``add``, ``mul``) or in any order
    (``max``, ``min``: :func:`float_extreme`), without ``init``: what a row kernel of
    :mod:`.machine_kernels` must return, bit for bit."""

    def twin(x: np.ndarray, width: int) -> np.ndarray:
        if op in ("max", "min"):
            return float_extreme(x, op)
        rows, n = x.shape
        return reduce_lanes(x.reshape(rows, n // width, width), 2, op, identity(op, x.dtype))

    return twin


class LanePlan:
    """A reduce op that accumulates by lanes: which operation, how many lanes, over how many
    trailing dimensions, the innermost reduced size and the element type."""

    __slots__ = ("op", "k", "ndims", "width", "dtype")

    def __init__(self, op: str, k: int, ndims: int, width: int, dtype: np.dtype) -> None:
        self.op, self.k, self.ndims, self.width, self.dtype = op, k, ndims, width, dtype

    @property
    def ordered(self) -> bool:
        """Whether the lane order decides the bits (add and multiply), not only the speed."""
        return self.op in ("add", "mul")

    def __repr__(self) -> str:
        return f"LanePlan({self.op}, k={self.k}, ndims={self.ndims}, width={self.width}, {self.dtype})"


def lane_reduction(op: Op) -> LanePlan | None:
    """The lane plan of a ``stablehlo.reduce`` op, or None when it reduces sequentially (or in
    an order that does not matter). A property of the op alone, never of how it is fused."""
    from .rules import simple_reducer

    if op.name != "stablehlo.reduce" or len(op.results) != 1:
        return None
    simple = simple_reducer(op.regions[0], 1)
    if simple not in IDENTITY:
        return None
    ty = op.operands[0].type
    if not isinstance(ty, TensorType) or ty.element_type not in ("f32", "f64"):
        return None
    element = ty.element_type
    shape = tuple(ty.shape)
    dims = sorted(int(d) for d in op.attr("dimensions"))
    if not dims or dims != list(range(len(shape) - len(dims), len(shape))):
        return None
    dtype = np.dtype(np.float32 if element == "f32" else np.float64)
    width = shape[-1]
    return LanePlan(simple, lane_count(width, dtype.itemsize), len(dims), width, dtype)
