"""Rendering a lowered function as a self-contained Python module, plus its metadata.

The module holds everything a warm process needs without the IR: the entry function with an
explicit numba signature (so importing it compiles or loads from numba's cache), the constants
it reads, and ``META`` (input/output specs, aliases, cost analysis) from which a
:class:`~.compiler.NumbaProgram` is built.
"""

from __future__ import annotations

import math
import re

from pjrt_hub.backends.stablehlo import Function, Module, TensorType, element_dtype, output_aliases
from pjrt_hub.backends.stablehlo.ir import as_tensor
from pjrt_hub.backends.stablehlo.loops import unbounded_loops

from .codegen import GeneratedFunction
from .source import ElementKind

__all__ = ["program_meta", "render_module"]

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
    "stablehlo.optimization_barrier", "sdy.sharding_constraint",
}


def _nb_array(kind: ElementKind, ndim: int) -> str:
    if kind.narrow:
        scalar = f"types.{kind.storage.name}"
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
            lhs = op.operands[0].tensor_type
            if op.name == "stablehlo.dot":
                contract = lhs.shape[-1] if lhs.shape else 1
            else:
                dn = op.attr("dot_dimension_numbers")
                contract = math.prod(lhs.shape[d] for d in dn.lhs_contracting_dimensions)
            flops += 2.0 * out * contract
        elif op.name == "stablehlo.convolution":
            rhs = op.operands[1].tensor_type
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


def program_meta(module: Module, fn: Function) -> dict:
    """``META`` of a program: what the runtime needs to know of it besides how to run it. The
    eager tier builds its program from this too, before (or without) lowering."""
    from pjrt_hub.backends.stablehlo.collectives import uses_collectives

    return {
        "name": module.name or "main",
        "num_replicas": module.num_replicas,
        "num_partitions": module.num_partitions,
        "uses_collectives": uses_collectives(module),
        "inputs": [(tuple(a.tensor_type.shape), str(element_dtype(a.tensor_type.element_type))) for a in fn.args],
        "outputs": [(tuple(t.shape), str(element_dtype(t.element_type))) for t in map(as_tensor, fn.result_types)],
        "aliases": output_aliases(module, fn),
        "cost": cost_analysis(fn),
        # The lowering reads the runtime's cancel flag in every while loop (see .cancel).
        "cancellable": any(op.name == "stablehlo.while" for op in fn.walk()),
        "unbounded_loops": unbounded_loops(fn),
    }


def render_module(module: Module, fn: Function, gen: GeneratedFunction) -> str:
    meta = program_meta(module, fn)
    meta["cancellable"] = gen.cancellable
    meta["threaded"] = gen.threaded
    meta["threads"] = gen.threads
    collectives = meta["uses_collectives"]
    arg_types = [_nb_array(k, len(a.tensor_type.shape)) for k, a in zip(gen.input_kinds, fn.args)]
    if gen.cancellable:
        from .cancel import CANCEL_FLAG_TYPE

        arg_types.append(CANCEL_FLAG_TYPE)
    out_types = [_nb_array(k, len(t.shape)) for k, t in zip(gen.output_kinds, map(as_tensor, fn.result_types))]
    sig = f"types.Tuple(({', '.join(out_types)}{',' if len(out_types) == 1 else ''}))({', '.join(arg_types)})"
    from .compiler import backend_digest

    lines = [
        '"""Generated by pjrt_hub.backends.numba_cpu from a StableHLO program; do not edit."""',
        f"# backend {backend_digest()}",
        "from numba import njit, prange",
        "from pjrt_hub.backends.numba_cpu.support import *  # noqa: F401,F403",
        *([f"from pjrt_hub.backends.numba_cpu.support import {', '.join(tables)}  # noqa: F401"]
          if (tables := _small_float_tables_used(gen)) else []),
        *(["from pjrt_hub.backends.numba_cpu.cancel import Cancelled, cancel_requested  # noqa: F401"]
          if gen.cancellable else []),
        *(["from pjrt_hub.backends.numba_cpu.collective_support import *  # noqa: F401,F403"]
          if collectives else []),
        *(["import warnings as _warnings",
           "from numba.core.errors import NumbaWarning as _NumbaWarning",
           # objmode blocks (collectives, FFT) hold the GIL by nature; numba warns about it on
           # every compile.
           "_warnings.filterwarnings('ignore', message='.*object mode.*', category=_NumbaWarning)"]
          if collectives or any("objmode(" in text for text in (gen.source, *gen.helpers, *gen.blocks))
          else []),
        "",
        f"META = {meta!r}",
        "",
    ]
    for name, text in gen.globals.items():
        lines.append(f"{name} = {text}")
    for helper in gen.helpers:
        lines += ["", "", "@njit(cache=True, error_model='numpy', nogil=True)", _vectorised(helper)]
    for kernel in gen.kernels:
        lines += ["", "", "@njit(cache=True, error_model='numpy', nogil=True, parallel=True)", _vectorised(kernel)]
    for block in gen.blocks:
        lines += ["", "", "@njit(cache=True, error_model='numpy', nogil=True)", _vectorised(block)]
    lines += [
        "",
        "",
        f"@njit({sig}, cache=True, error_model='numpy', nogil=True)",
        _vectorised(gen.source),
        "",
    ]
    return "\n".join(lines)


def _vectorised(function: str) -> str:
    """``function`` with ``wide_vectors()`` first in its body and in each of its ``prange``
    bodies (numba compiles those as functions of their own), where the target vectorises wide
    (.target WIDE_VECTORS); elsewhere as it is."""
    from .target import WIDE_VECTORS

    if not WIDE_VECTORS:
        return function
    out: list[str] = []
    for line in function.split("\n"):
        out.append(line)
        stripped = line.lstrip()
        if line.endswith(":") and (stripped.startswith("def ") or (stripped.startswith("for ") and " in prange(" in line)):
            out.append(" " * (len(line) - len(stripped) + 4) + "wide_vectors()")
    return "\n".join(out)


def _small_float_tables_used(gen: GeneratedFunction) -> list[str]:
    """The small-float tables (``SF_*`` of :mod:`.support`, built on first import) the generated
    code names."""
    names: set[str] = set()
    for text in (gen.source, *gen.helpers, *gen.blocks):
        names.update(re.findall(r"\bSF_\w+", text))
    return sorted(names)
