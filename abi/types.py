"""Enumerations of the C API and their numpy counterparts.

``BufferType`` is ``PJRT_Buffer_Type`` with its C values; :func:`to_numpy_dtype` and
:func:`from_numpy_dtype` map it to numpy, with ml_dtypes for the types numpy lacks (bfloat16 and
the 8-bit floats), so that a plugin never has to reinvent them.
"""

from __future__ import annotations

import enum
from functools import lru_cache
from typing import TYPE_CHECKING

from .errors import InvalidArgument

if TYPE_CHECKING:
    import numpy as np

# numpy is imported by the functions that need it, not here: every plugin imports this module to
# declare itself, and reading a declaration (``pjrt-hub list``) must not pay for numpy.

__all__ = [
    "BufferType",
    "ExtensionType",
    "HostBufferSemantics",
    "MemoryLayoutType",
    "from_numpy_dtype",
    "mlir_element_type",
    "to_numpy_dtype",
]


class BufferType(enum.IntEnum):
    """``PJRT_Buffer_Type``: element types, with their C enum values."""

    INVALID = 0
    PRED = 1
    S8 = 2
    S16 = 3
    S32 = 4
    S64 = 5
    U8 = 6
    U16 = 7
    U32 = 8
    U64 = 9
    F16 = 10
    F32 = 11
    F64 = 12
    BF16 = 13
    C64 = 14
    C128 = 15
    F8E5M2 = 16
    F8E4M3FN = 17
    F8E4M3B11FNUZ = 18
    F8E5M2FNUZ = 19
    F8E4M3FNUZ = 20
    S4 = 21
    U4 = 22
    TOKEN = 23
    S2 = 24
    U2 = 25
    F8E4M3 = 26  # 0.55
    F8E3M4 = 27  # 0.55
    F8E8M0FNU = 28  # 0.63
    F4E2M1FN = 29  # 0.63
    S1 = 30  # 0.94
    U1 = 31  # 0.94


class HostBufferSemantics(enum.IntEnum):
    """``PJRT_HostBufferSemantics``: how long the caller keeps a host array alive and unchanged."""

    #: The plugin copies during the call; the host array may change as soon as it returns.
    IMMUTABLE_ONLY_DURING_CALL = 0
    #: The plugin may read the host array until ``done_with_host_buffer`` fires.
    IMMUTABLE_UNTIL_TRANSFER_COMPLETES = 1
    #: The buffer may alias the host array for its whole life; the caller must not change it.
    IMMUTABLE_ZERO_COPY = 2
    #: The buffer may alias the host array, and writes to either are seen by both (0.48).
    MUTABLE_ZERO_COPY = 3


class MemoryLayoutType(enum.IntEnum):
    """``PJRT_Buffer_MemoryLayout_Type``."""

    TILED = 0
    STRIDES = 1


class ExtensionType(enum.IntEnum):
    """``PJRT_Extension_Type``: appended only, never renumbered so far."""

    Gpu_Custom_Call = 0
    Profiler = 1
    Custom_Partitioner = 2
    Stream = 3
    Layouts = 4
    FFI = 5
    MemoryDescriptions = 6
    Triton = 7
    RawBuffer = 8
    PhaseCompile = 9
    Example = 10
    Unknown = 11
    CrossHostTransfers = 12
    ExecutableMetadata = 13
    Callback = 14
    HostAllocator = 15
    TpuTopology = 16
    TpuExecutable = 17
    Megascale = 18
    Shardings = 19
    AbiVersion = 20
    Collectives = 21
    MultiSlice = 22
    HostMemoryAllocator = 23
    XlaTransform = 24
    ExecuteChain = 25


@lru_cache(maxsize=None)
def _numpy_table() -> dict[BufferType, np.dtype]:
    """The types numpy has itself: looking them up does not import ml_dtypes, which costs a
    process most of a second (its types register numpy loops one by one)."""
    import numpy as np

    return {
        BufferType.PRED: np.dtype(np.bool_),
        BufferType.S8: np.dtype(np.int8),
        BufferType.S16: np.dtype(np.int16),
        BufferType.S32: np.dtype(np.int32),
        BufferType.S64: np.dtype(np.int64),
        BufferType.U8: np.dtype(np.uint8),
        BufferType.U16: np.dtype(np.uint16),
        BufferType.U32: np.dtype(np.uint32),
        BufferType.U64: np.dtype(np.uint64),
        BufferType.F16: np.dtype(np.float16),
        BufferType.F32: np.dtype(np.float32),
        BufferType.F64: np.dtype(np.float64),
        BufferType.C64: np.dtype(np.complex64),
        BufferType.C128: np.dtype(np.complex128),
    }


@lru_cache(maxsize=None)
def _table() -> dict[BufferType, np.dtype]:
    """Every PJRT type numpy can hold, with ml_dtypes's."""
    import ml_dtypes
    import numpy as np

    table = {**_numpy_table(), BufferType.BF16: np.dtype(ml_dtypes.bfloat16)}
    optional = {
        BufferType.F8E5M2: "float8_e5m2",
        BufferType.F8E4M3FN: "float8_e4m3fn",
        BufferType.F8E4M3B11FNUZ: "float8_e4m3b11fnuz",
        BufferType.F8E5M2FNUZ: "float8_e5m2fnuz",
        BufferType.F8E4M3FNUZ: "float8_e4m3fnuz",
        BufferType.F8E4M3: "float8_e4m3",
        BufferType.F8E3M4: "float8_e3m4",
        BufferType.F8E8M0FNU: "float8_e8m0fnu",
        BufferType.F4E2M1FN: "float4_e2m1fn",
        BufferType.S4: "int4",
        BufferType.U4: "uint4",
        BufferType.S2: "int2",
        BufferType.U2: "uint2",
    }
    for kind, name in optional.items():
        if hasattr(ml_dtypes, name):
            table[kind] = np.dtype(getattr(ml_dtypes, name))
    return table


@lru_cache(maxsize=None)
def _reverse() -> dict[np.dtype, BufferType]:
    return {dtype: kind for kind, dtype in _table().items()}


@lru_cache(maxsize=None)
def _numpy_reverse() -> dict[np.dtype, BufferType]:
    return {dtype: kind for kind, dtype in _numpy_table().items()}


def to_numpy_dtype(kind: BufferType | int) -> np.dtype:
    """The numpy dtype of a PJRT element type; InvalidArgument when numpy cannot hold it."""
    try:
        kind = BufferType(kind)
    except ValueError:
        raise InvalidArgument(f"unknown PJRT_Buffer_Type value {kind}") from None
    dtype = _numpy_table().get(kind)
    if dtype is not None:
        return dtype
    try:
        return _table()[kind]
    except KeyError:
        raise InvalidArgument(f"PJRT element type {kind.name} has no numpy dtype") from None


def from_numpy_dtype(dtype: np.dtype | type | str) -> BufferType:
    """The PJRT element type of a numpy dtype; InvalidArgument for one PJRT has no type for."""
    import numpy as np

    dt = np.dtype(dtype)
    kind = _numpy_reverse().get(dt)
    if kind is not None:
        return kind
    try:
        return _reverse()[dt]
    except KeyError:
        raise InvalidArgument(
            f"numpy dtype {dt} has no PJRT element type; supported: "
            + ", ".join(sorted(str(d) for d in _reverse()))
        ) from None


_MLIR_NAMES = {
    BufferType.PRED: "i1", BufferType.S8: "i8", BufferType.S16: "i16", BufferType.S32: "i32",
    BufferType.S64: "i64", BufferType.U8: "ui8", BufferType.U16: "ui16", BufferType.U32: "ui32",
    BufferType.U64: "ui64", BufferType.F16: "f16", BufferType.F32: "f32", BufferType.F64: "f64",
    BufferType.BF16: "bf16", BufferType.C64: "complex<f32>", BufferType.C128: "complex<f64>",
    BufferType.F8E5M2: "f8E5M2", BufferType.F8E4M3FN: "f8E4M3FN", BufferType.F8E4M3: "f8E4M3",
    BufferType.F8E3M4: "f8E3M4", BufferType.S4: "i4", BufferType.U4: "ui4",
    BufferType.F8E4M3FNUZ: "f8E4M3FNUZ", BufferType.F8E5M2FNUZ: "f8E5M2FNUZ",
    BufferType.F8E4M3B11FNUZ: "f8E4M3B11FNUZ", BufferType.F8E8M0FNU: "f8E8M0FNU",
    BufferType.F4E2M1FN: "f4E2M1FN", BufferType.S2: "i2", BufferType.U2: "ui2",
}


def mlir_element_type(kind: BufferType) -> str:
    """The MLIR spelling of an element type (``f32``, ``ui8``, ``i1``)."""
    try:
        return _MLIR_NAMES[BufferType(kind)]
    except KeyError:
        raise InvalidArgument(f"PJRT element type {BufferType(kind).name} has no MLIR spelling") from None
