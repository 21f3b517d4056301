"""Literal values -> Python and numpy: the numbers of attributes and the elements of ``dense``.

Scalar attributes (``2 : i64``, ``0x7F800000 : f32``, ``1.5``) become ``int``/``float``/``bool``
checked against their type; ``dense<...>`` literals (nested lists, splats, hex strings) and
``dense_resource`` blobs become read-only numpy arrays of the tensor's dtype, refusing a constant
larger than this machine's memory before numpy tries to allocate it. Malformed values raise
``ValueError``/``OverflowError`` (or a ParseError, for scalars) that the attribute reader turns
into a ParseError at the literal.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from ..ir import TensorType, element_dtype
from ..lexer import Cursor

__all__ = ["dense_from_bytes", "dense_from_hex", "dense_from_literal", "readonly", "scalar_value"]


def readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _uint_for(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"<u{dtype.itemsize}")


def scalar_value(text: str, ty: Any, cur: Cursor, pos: int) -> Any:
    """A number attribute with an optional type: int, float or bool."""
    is_hex = "x" in text
    if isinstance(ty, str) and ty not in ("index", "none") and not ty.startswith(("i", "si", "ui")):
        dtype = element_dtype(ty)
        if is_hex:
            bits = int(text, 16)
            if not 0 <= bits < 1 << (8 * dtype.itemsize):
                raise cur.error(f"{text} is not a bit pattern of {ty} ({dtype.itemsize * 8} bits)", pos)
            return float(np.array(bits, dtype=_uint_for(dtype)).view(dtype))
        return float(text)
    if ty == "i1":
        return bool(int(text, 0) if is_hex else int(float(text)))
    if not is_hex and any(c in text for c in ".eE"):
        if ty is not None and ty != "none":
            raise cur.error(f"expected an integer for type {ty}, got {text}", pos)
        return float(text)
    value = int(text, 16) if is_hex else int(text)
    width = _integer_bits(ty)
    # Signless integers hold either reading of their bits, as in MLIR.
    if width is not None and not -(1 << (width - 1)) * (ty[0] != "u") <= value < 1 << (width - (ty[0] == "s")):
        raise cur.error(f"{text} does not fit in {ty}", pos)
    return value


def _integer_bits(ty: Any) -> int | None:
    """The width of an integer type spelled ``i32``, ``si8``, ``ui64`` or ``index``; else None."""
    if ty == "index":
        return 64
    if isinstance(ty, str):
        m = re.fullmatch(r"[su]?i([0-9]{1,4})", ty)
        if m and int(m.group(1)) > 0:
            return int(m.group(1))
    return None


def _element_from_token(token: Any, dtype: np.dtype, is_bool: bool) -> Any:
    if isinstance(token, tuple) and dtype.kind != "c":
        raise ValueError(f"a complex element ({token[0]}, {token[1]}) in a tensor of {dtype}")
    if is_bool:
        if token in ("true", "false"):
            return token == "true"
        return bool(int(token, 0))
    if isinstance(token, tuple):
        part = np.dtype(f"f{dtype.itemsize // 2}")
        return complex(_float_part(token[0], part), _float_part(token[1], part))
    if dtype.kind in "iu":
        if token in ("true", "false"):
            return int(token == "true")
        return int(token, 16) if "x" in token else int(token)
    if token in ("true", "false"):
        return float(token == "true")
    return float(token)


def _float_part(token: str, dtype: np.dtype) -> float:
    """A part of a complex element: decimal text, or a hex bit pattern of the part's float type
    (MLIR prints infinities and NaNs so: ``(0xFF800000,0.000000e+00)``)."""
    if "x" in token:
        return float(np.array([int(token.lstrip("+"), 16)], f"u{dtype.itemsize}").view(dtype)[0])
    return float(token)


def _flatten(literal: Any, shape: list[int], depth: int, out: list[Any]) -> None:
    if isinstance(literal, list):
        if len(shape) <= depth:
            shape.append(len(literal))
        elif shape[depth] != len(literal):
            raise ValueError("ragged nested list")
        for item in literal:
            _flatten(item, shape, depth + 1, out)
    else:
        if len(shape) != depth:
            raise ValueError("ragged nested list")
        out.append(literal)


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _check_constant_size(ty: TensorType) -> None:
    """A splat can claim any shape in a few bytes of text: refuse one this machine cannot hold
    before numpy tries (a failed allocation of terabytes is an error, one of gigabytes too many
    is the OOM killer)."""
    nbytes = ty.size * ty.dtype.itemsize
    memory = _physical_memory()
    if memory is not None and nbytes > memory:
        raise ValueError(f"the constant would take {nbytes} bytes, more than this machine's "
                         f"memory ({memory} bytes)")


def dense_from_literal(literal: Any, ty: TensorType, *, splat: bool) -> np.ndarray:
    _check_constant_size(ty)
    dtype = ty.dtype
    if splat:
        tokens = [literal]
        shape: list[int] = []
    else:
        tokens = []
        shape = []
        _flatten(literal, shape, 0, tokens)
        if not literal:
            shape = [0]
    array = np.empty(len(tokens), dtype=dtype)
    hexes = [i for i, t in enumerate(tokens) if isinstance(t, str) and "x" in t]
    if dtype.kind == "f" or dtype.kind == "V" or (dtype.kind not in "iubc"):
        # Floats (numpy's and ml_dtypes'): decimal text via float64, hex text as bit patterns.
        hex_set = set(hexes)
        decimal = [i for i in range(len(tokens)) if i not in hex_set]
        if decimal:
            values = np.array([_element_from_token(tokens[i], dtype, False) for i in decimal],
                              dtype=np.float64)
            array[decimal] = values.astype(dtype)
        if hexes:
            bits = array.view(_uint_for(dtype))
            for i in hexes:
                bits[i] = int(tokens[i].lstrip("+"), 16)
    elif dtype.kind == "c":
        array[:] = [_element_from_token(t, dtype, False) for t in tokens]
    else:
        integers = [_element_from_token(t, dtype, ty.is_bool) for t in tokens]
        info = None if ty.is_bool else np.iinfo(dtype)
        for v in integers:
            if info is not None and not (info.min <= v <= info.max):
                raise OverflowError(f"{v} does not fit in {ty.element_type}")
        array[:] = integers
    if splat:
        return np.full(ty.shape, array[0], dtype=dtype)
    if tuple(shape) != ty.shape:
        if not tokens and 0 in ty.shape:
            # MLIR prints every tensor with no elements as dense<>, whatever its rank.
            return np.empty(ty.shape, dtype=dtype)
        if len(tokens) == 1:
            return np.full(ty.shape, array[0], dtype=dtype)
        raise ValueError(f"literal has shape {tuple(shape)}")
    return array.reshape(ty.shape)


def dense_from_hex(literal: str, ty: TensorType) -> np.ndarray:
    if not literal.startswith("0x"):
        raise ValueError("a string dense literal must be hex ('0x...')")
    return dense_from_bytes(bytes.fromhex(literal[2:]), ty)


def dense_from_bytes(data: bytes, ty: TensorType) -> np.ndarray:
    _check_constant_size(ty)
    dtype = ty.dtype.newbyteorder("<") if ty.dtype.itemsize > 1 else ty.dtype
    n = ty.size
    if ty.is_bool:
        raw = np.frombuffer(data, dtype=np.uint8)
        if raw.size == n:
            return (raw != 0).reshape(ty.shape)
        if raw.size == 1:
            return np.full(ty.shape, raw[0] != 0)
        if raw.size == (n + 7) // 8:
            return np.unpackbits(raw, bitorder="little")[:n].astype(bool).reshape(ty.shape)
        raise ValueError(f"{raw.size} bytes for {n} booleans")
    item = dtype.itemsize
    if len(data) == item and n != 1:
        return np.full(ty.shape, np.frombuffer(data, dtype=dtype)[0], dtype=ty.dtype)
    if len(data) != n * item:
        raise ValueError(f"{len(data)} bytes of data, expected {n * item}")
    return np.frombuffer(data, dtype=dtype).astype(ty.dtype).reshape(ty.shape)
