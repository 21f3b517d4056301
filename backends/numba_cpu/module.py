"""Rendering a lowered function as a self-contained Python module, plus its metadata.

The module holds everything a warm process needs without the IR: the entry function with an
explicit numba signature (so importing it compiles or loads from numba's cache), the constants
it reads, and ``META`` (input/output specs, aliases, cost analysis) from which a
:class:`~.compiler.NumbaProgram` is built.
"""

from __future__ import annotations

import math

from pjrt_hub.backends.stablehlo import Function, Module, TensorType, element_dtype

from .codegen import GeneratedFunction
from .source import ElementKind

__all__ = ["render_module"]

_TRANSCENDENTAL = {
    "stablehlo.exponential", "stablehlo.exponential_minus_one", "stablehlo.log", "stablehlo.log_plus_one",
    "stablehlo.tanh", "stablehlo.logistic", "stablehlo.sine", "stablehlo.cosine", "stablehlo.tan",
    "stablehlo.power", "stablehlo.sqrt", "stablehlo.rsqrt", "stablehlo.cbrt", "stablehlo.atan2",
    "chlo.erf", "chlo.erfc", "chlo.erf_inv",
}
_NO_FLOPS = {
    "stablehlo.constant", "stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.transpose",
    "stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice", "stablehlo.concatenate",
    "stablehlo.pad", "stablehlo.reverse", "stablehlo.iota", "stablehlo.gather", "stablehlo.while",
    "stablehlo.case", "stablehlo.return", "func.return", "stablehlo.bitcast_convert", "stablehlo.convert",
    "stablehlo.optimization_barrier",
}


def _nb_array(kind: ElementKind, ndim: int) -> str:
    if kind.narrow:
        scalar = "types.uint16"
    else:
        scalar = kind.nb
    return f"types.Array({scalar}, {ndim}, 'C')"


def _size(t) -> int:
    return math.prod(t.shape) if isinstance(t, TensorType) else 0


def _nbytes(t) -> int:
    if not isinstance(t, TensorType):
        return 0
    try:
        return _size(t) * element_dtype(t.element_type).itemsize
    except KeyError:
        return 0


def cost_analysis(fn: Function) -> dict[str, float]:
    flops = 0.0
    transcendentals = 0.0
    accessed = 0.0
    for op in fn.walk():
        out = sum(_size(r.type) for r in op.results)
        accessed += sum(_nbytes(v.type) for v in op.operands) + sum(_nbytes(r.type) for r in op.results)
        if op.name in ("stablehlo.dot_general", "stablehlo.dot"):
            lhs = op.operands[0].type
            if op.name == "stablehlo.dot":
                contract = lhs.shape[-1] if lhs.shape else 1
            else:
                dn = op.attr("dot_dimension_numbers")
                contract = math.prod(lhs.shape[d] for d in dn.lhs_contracting_dimensions)
            flops += 2.0 * out * contract
        elif op.name == "stablehlo.convolution":
            rhs = op.operands[1].type
            dn = op.attr("dimension_numbers")
            window = math.prod(rhs.shape[d] for d in dn.kernel_spatial_dimensions)
            flops += 2.0 * out * window * rhs.shape[dn.kernel_input_feature_dimension]
        elif op.name in ("stablehlo.reduce", "stablehlo.reduce_window"):
            flops += sum(_size(v.type) for v in op.operands[: len(op.results)])
        elif op.name in _TRANSCENDENTAL:
            transcendentals += out
            flops += out
        elif op.name not in _NO_FLOPS and not op.regions:
            flops += out
    return {"flops": flops, "transcendentals": transcendentals, "bytes accessed": accessed}


def _aliases(fn: Function) -> dict[int, int]:
    """output -> input: ``tf.aliasing_output`` pins one; ``jax.buffer_donor`` inputs pair with
    the first output of the same type not yet taken."""
    aliases: dict[int, int] = {}
    donors = []
    for i, attrs in enumerate(fn.arg_attrs or ()):
        out = attrs.get("tf.aliasing_output") if attrs else None
        if out is not None:
            aliases[int(out)] = i
        elif attrs and attrs.get("jax.buffer_donor"):
            donors.append(i)
    for i in donors:
        for o, t in enumerate(fn.result_types):
            if o not in aliases and t == fn.args[i].type:
                aliases[o] = i
                break
    return aliases


def render_module(module: Module, fn: Function, gen: GeneratedFunction) -> str:
    from .codegen import Lowering  # noqa: F401  (documentation link only)

    inputs = [(tuple(a.type.shape), str(element_dtype(a.type.element_type))) for a in fn.args]
    outputs = [(tuple(t.shape), str(element_dtype(t.element_type))) for t in fn.result_types]
    meta = {
        "name": module.name or "main",
        "inputs": inputs,
        "outputs": outputs,
        "aliases": _aliases(fn),
        "cost": cost_analysis(fn),
    }
    arg_types = [_nb_array(k, len(a.type.shape)) for k, a in zip(gen.input_kinds, fn.args)]
    out_types = [_nb_array(k, len(t.shape)) for k, t in zip(gen.output_kinds, fn.result_types)]
    sig = f"types.Tuple(({', '.join(out_types)}{',' if len(out_types) == 1 else ''}))({', '.join(arg_types)})"
    from .compiler import backend_digest

    lines = [
        '"""Generated by pjrt_hub.backends.numba_cpu from a StableHLO program; do not edit."""',
        f"# backend {backend_digest()}",
        "from numba import njit, prange",
        "from pjrt_hub.backends.numba_cpu.support import *  # noqa: F401,F403",
        "",
        f"META = {meta!r}",
        "",
    ]
    for name, text in gen.globals.items():
        lines.append(f"{name} = {text}")
    lines += [
        "",
        f"@njit({sig}, cache=True, error_model='numpy', nogil=True, parallel={gen.parallel})",
        gen.source,
        "",
    ]
    return "\n".join(lines)
