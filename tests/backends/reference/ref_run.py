"""Run small hand-written StableHLO programs through parse -> verify -> interpret."""

import ml_dtypes
import numpy as np

from pjrt_hub.backends.reference import Interpreter
from pjrt_hub.backends.stablehlo import parse_module, verify

_ELEMENT = {
    np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
    np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.int8): "i8", np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint8): "ui8",
    np.dtype(np.uint16): "ui16", np.dtype(np.uint32): "ui32", np.dtype(np.uint64): "ui64",
    np.dtype(np.bool_): "i1", np.dtype(np.complex64): "complex<f32>",
}


def ttype(shape, dtype) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{_ELEMENT[np.dtype(dtype)]}>"


def type_of(array) -> str:
    array = np.asarray(array)
    return ttype(array.shape, array.dtype)


def run(text: str, *args):
    outputs = Interpreter(verify(parse_module(text))).run([np.asarray(a) for a in args])
    return outputs[0] if len(outputs) == 1 else outputs


def ev(op: str, *args, sig: str | None = None, out: str | None = None):
    """Evaluate one op on the arguments ``%x0, %x1...``. ``sig`` is the op's type after ':'
    (default: the first argument's type), ``out`` the result type (default: the same)."""
    args = [np.asarray(a) for a in args]
    params = ", ".join(f"%x{i}: {type_of(a)}" for i, a in enumerate(args))
    sig = sig or type_of(args[0])
    out = out or (sig if "->" not in sig else sig.rsplit("->", 1)[1].strip())
    text = f"func.func @main({params}) -> {out} {{\n  %r = {op} : {sig}\n  return %r : {out}\n}}\n"
    return run(text, *args)
