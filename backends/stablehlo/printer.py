"""IR -> MLIR generic-form text, with canonical value names.

Values are renamed in definition order (``%0``, ``%1``..., block arguments ``%argN``) and
attributes printed in sorted order, so two parses of the same program give the same text
whichever form it was written in. The output parses back to an equivalent module; tests use
that, and people use it to see what the parser understood (defaults filled in, locations
resolved).
"""

from __future__ import annotations

import enum
import math
import re
from typing import Any, Mapping

import numpy as np

from .ir import (
    Block,
    ConvDimensionNumbers,
    DotDimensionNumbers,
    Function,
    FunctionType,
    GatherDimensionNumbers,
    Module,
    Op,
    OpaqueAttr,
    ScatterDimensionNumbers,
    SymbolRef,
    TensorType,
    TokenType,
    TupleType,
    Value,
)

__all__ = ["format_attribute", "format_module"]

_ENUM_KIND = {
    "ComparisonDirection": "comparison_direction",
    "ComparisonType": "comparison_type",
    "Precision": "precision",
    "RngAlgorithm": "rng_algorithm",
    "RngDistribution": "rng_distribution",
    "FftType": "fft_type",
    "Transpose": "transpose",
}
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*$")


def _quote(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20:
            out.append(f"\\{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _symbol(name: str) -> str:
    return "@" + name if _BARE.match(name) else "@" + _quote(name)


def _float_text(value: float, ty: TensorType) -> str:
    if math.isfinite(value):
        return repr(float(value))
    bits = np.array(value, dtype=ty.dtype).view(f"<u{ty.dtype.itemsize}")
    return f"0x{int(bits):0{ty.dtype.itemsize * 2}X}"


def _dense(array: np.ndarray, ty: TensorType) -> str:
    flat = array.reshape(-1)
    if flat.size and (flat == flat[0]).all() and not (ty.is_float and np.isnan(flat.astype(np.float64)).any()):
        v = flat[0]
        if ty.is_bool:
            body = "true" if v else "false"
        elif ty.is_float:
            body = _float_text(float(v), ty)
        elif ty.is_complex:
            body = f"({float(v.real)!r}, {float(v.imag)!r})"
        else:
            body = str(int(v))
    elif ty.is_bool:
        body = _quote("0x" + flat.astype(np.uint8).tobytes().hex().upper())
    else:
        data = np.ascontiguousarray(flat)
        if data.dtype.itemsize > 1:
            data = data.astype(data.dtype.newbyteorder("<"))
        body = _quote("0x" + data.tobytes().hex().upper())
    return f"dense<{body}> : {ty}"


def format_attribute(value: Any) -> str:
    """One attribute value in MLIR syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return f"#stablehlo<{_ENUM_KIND[type(value).__name__]} {value.value}>"
    if isinstance(value, int):
        return f"{value} : i64"
    if isinstance(value, float):
        return f"{value!r} : f64" if math.isfinite(value) else \
            f"0x{int(np.array(value).view(np.uint64)):016X} : f64"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, np.ndarray):
        return _dense(value, _tensor_type_of(value))
    if isinstance(value, SymbolRef):
        return _symbol(value.name)
    if isinstance(value, OpaqueAttr):
        return value.text
    if isinstance(value, (TensorType, TupleType, TokenType, FunctionType)):
        return _type(value)
    if isinstance(value, DotDimensionNumbers):
        return "#stablehlo.dot<" + _fields(value) + ">"
    if isinstance(value, GatherDimensionNumbers):
        return "#stablehlo.gather<" + _fields(value) + ">"
    if isinstance(value, ScatterDimensionNumbers):
        return "#stablehlo.scatter<" + _fields(value) + ">"
    if isinstance(value, ConvDimensionNumbers):
        return "#stablehlo.conv<" + _conv(value) + ">"
    if isinstance(value, Mapping):
        return _dict(value)
    if isinstance(value, tuple):
        if value and all(isinstance(v, bool) for v in value):
            return "array<i1: " + ", ".join("true" if v else "false" for v in value) + ">"
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return "array<i64: " + ", ".join(str(v) for v in value) + ">"
        return "[" + ", ".join(format_attribute(v) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r}")


_MLIR_OF_DTYPE: dict[str, str] = {}


def _tensor_type_of(array: np.ndarray) -> TensorType:
    if not _MLIR_OF_DTYPE:
        from pjrt_hub.abi import InvalidArgument
        from pjrt_hub.abi.types import BufferType, mlir_element_type, to_numpy_dtype

        for kind in BufferType:
            try:
                _MLIR_OF_DTYPE.setdefault(str(to_numpy_dtype(kind)), mlir_element_type(kind))
            except InvalidArgument:
                continue
    return TensorType(array.shape, _MLIR_OF_DTYPE[str(array.dtype)])


def _fields(value: Any) -> str:
    parts = []
    for name in value.__dataclass_fields__:
        v = getattr(value, name)
        if isinstance(v, tuple):
            if v:
                parts.append(f"{name} = [{', '.join(str(x) for x in v)}]")
        elif v:
            parts.append(f"{name} = {v}")
    return ", ".join(parts)


def _conv(d: ConvDimensionNumbers) -> str:
    def roles(rank: int, a: int, a_name: str, b: int, b_name: str, spatial: tuple[int, ...]) -> str:
        items = [""] * rank
        items[a], items[b] = a_name, b_name
        for k, dim in enumerate(spatial):
            items[dim] = str(k)
        return "[" + ", ".join(items) + "]"

    n = len(d.input_spatial_dimensions) + 2
    return (roles(n, d.input_batch_dimension, "b", d.input_feature_dimension, "f", d.input_spatial_dimensions)
            + "x" + roles(n, d.kernel_input_feature_dimension, "i", d.kernel_output_feature_dimension, "o",
                          d.kernel_spatial_dimensions)
            + "->" + roles(n, d.output_batch_dimension, "b", d.output_feature_dimension, "f",
                           d.output_spatial_dimensions))


def _dict(attrs: Mapping[str, Any]) -> str:
    items = []
    for key in sorted(attrs):
        name = key if _BARE.match(key) else _quote(key)
        items.append(f"{name} = {format_attribute(attrs[key])}")
    return "{" + ", ".join(items) + "}"


def _type(ty: Any) -> str:
    if isinstance(ty, FunctionType):
        return "(" + ", ".join(_type(t) for t in ty.inputs) + ") -> (" + \
            ", ".join(_type(t) for t in ty.results) + ")"
    return str(ty)


class _Namer:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.next_result = 0
        self.next_arg = 0

    def arg(self, value: Value) -> str:
        name = f"%arg{self.next_arg}"
        self.next_arg += 1
        self.names[value.id] = name
        return name

    def results(self, values: tuple[Value, ...]) -> str:
        if not values:
            return ""
        base = f"%{self.next_result}"
        self.next_result += 1
        if len(values) == 1:
            self.names[values[0].id] = base
            return base + " = "
        for i, v in enumerate(values):
            self.names[v.id] = f"{base}#{i}"
        return f"{base}:{len(values)} = "

    def use(self, value: Value) -> str:
        return self.names.get(value.id, f"<undefined {value.name}>")


def _loc(location: str | None) -> str:
    return f" loc({_quote(location)})" if location else ""


def _block(block: Block, namer: _Namer, indent: str) -> list[str]:
    lines = []
    if block.args:
        args = ", ".join(f"{namer.arg(a)}: {_type(a.type)}" for a in block.args)
        lines.append(f"{indent[:-2]}^bb0({args}):")
    for op in block.ops:
        lines.extend(_op(op, namer, indent))
    return lines


def _op(op: Op, namer: _Namer, indent: str) -> list[str]:
    operands = ", ".join(namer.use(v) for v in op.operands)
    head = namer.results(op.results)
    props = f" <{_dict(op.attributes)}>" if op.attributes else ""
    fn_type = FunctionType(op.operand_types, op.result_types)
    if not op.regions:
        return [f"{indent}{head}{_quote(op.name)}({operands}){props} : {_type(fn_type)}{_loc(op.location)}"]
    lines = [f"{indent}{head}{_quote(op.name)}({operands}){props} ({{"]
    for i, region in enumerate(op.regions):
        if i:
            lines.append(f"{indent}}}, {{")
        lines.extend(_block(region, namer, indent + "  "))
    lines.append(f"{indent}}}) : {_type(fn_type)}{_loc(op.location)}")
    return lines


def _function(fn: Function, indent: str) -> list[str]:
    namer = _Namer()
    props: dict[str, Any] = dict(fn.attributes)
    props.update(sym_name=fn.name, sym_visibility=fn.visibility, function_type=fn.type)
    if any(fn.arg_attrs):
        props["arg_attrs"] = tuple(fn.arg_attrs)
    if any(fn.result_attrs):
        props["res_attrs"] = tuple(fn.result_attrs)
    lines = [f'{indent}"func.func"() <{_dict(props)}> ({{']
    if fn.args:
        args = []
        for i, a in enumerate(fn.args):
            loc = fn.arg_locations[i] if i < len(fn.arg_locations) else None
            args.append(f"{namer.arg(a)}: {_type(a.type)}{_loc(loc)}")
        lines.append(f"{indent}^bb0({', '.join(args)}):")
    for op in fn.body.ops:
        lines.extend(_op(op, namer, indent + "  "))
    lines.append(f"{indent}}}) : () -> (){_loc(fn.location)}")
    return lines


def format_module(module: Module) -> str:
    """The module in MLIR generic form with canonical names (see the module docstring)."""
    props = f" <{{sym_name = {_quote(module.name)}}}>" if module.name else ""
    lines = [f'"builtin.module"(){props} ({{']
    for fn in module.functions.values():
        lines.extend(_function(fn, "  "))
    attrs = f" {_dict(module.attributes)}" if module.attributes else ""
    lines.append(f"}}){attrs} : () -> (){_loc(module.location)}")
    return "\n".join(lines) + "\n"
