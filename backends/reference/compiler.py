"""The reference interpreter behind the ProgramCompiler seam of the host CPU runtime.

``ReferenceCompiler.compile`` parses, verifies and checks that every op is supported, so a bad
program fails at compile time as it would with XLA; the :class:`ReferenceProgram` it returns
interprets the module on each ``run``. Serialization is the program text plus the compile
options, which is all an interpreter needs to come back.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from pjrt_hub.abi import CompileError, CompileOptions, InvalidArgument
from pjrt_hub.abi.compile_options import decode_compile_options, encode_compile_options
from pjrt_hub.backends.cpu_runtime.compiler import TensorSpec
from pjrt_hub.backends.stablehlo import Function, Module, Op, TensorType, output_aliases, parse_module, verify
from pjrt_hub.backends.stablehlo.custom_calls import lower_custom_calls
from pjrt_hub.backends.stablehlo.tokens import legalize_tokens
from pjrt_hub.backends.stablehlo.collectives import uses_collectives
from pjrt_hub.backends.stablehlo.loops import unbounded_loops
from pjrt_hub.backends.stablehlo.nesting import call_depth, run_deep
from pjrt_hub.backends.stablehlo.sharding import check_partitionable

from .interpreter import Interpreter

__all__ = ["ReferenceCompiler", "ReferenceProgram", "cost_analysis", "output_aliases"]

_MAGIC = b"pjrt-hub/reference/1\n"


def _text(code: str | bytes) -> str:
    if isinstance(code, str):
        return code
    try:
        return bytes(code).decode("utf-8")
    except UnicodeDecodeError:
        from pjrt_hub.abi import ParseError

        raise ParseError("program is not UTF-8 text; the reference backend reads StableHLO text "
                         "(pretty or generic MLIR), not bytecode") from None


def _front_end(text: str) -> Module:
    module = legalize_tokens(lower_custom_calls(verify(parse_module(text))))
    call_depth(module)  # refuses recursion before the interpreter would loop on it
    return module


def _compile(text: str, opts: CompileOptions) -> "ReferenceProgram":
    module = _front_end(text)
    # Replicas and partitions run the same program on their own arguments (the runtime
    # gives each device its list), meeting at collectives: a program already partitioned
    # by hand. One whose arrays carry shardings to propagate is another matter.
    check_partitionable(module, max(opts.num_partitions, module.num_partitions), "reference")
    return ReferenceProgram(text, opts, module)


class ReferenceCompiler:
    """Turns StableHLO text into a :class:`ReferenceProgram`."""

    name = "reference"

    def compile(self, code: str | bytes, options: CompileOptions | bytes | None = None) -> "ReferenceProgram":
        text = _text(code)
        opts = decode_compile_options(options)
        # Not only the front end walks nested regions recursively: so do the partition check and
        # the program's own analyses (collectives, loops), which must run on the deep stack too.
        return run_deep(_compile, text, opts)

    def deserialize(self, data: bytes) -> "ReferenceProgram":
        data = bytes(data)
        if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4:
            raise InvalidArgument("not a serialized reference-backend executable")
        (n,) = struct.unpack_from("<I", data, len(_MAGIC))
        start = len(_MAGIC) + 4
        options = decode_compile_options(data[start:start + n])
        return self.compile(data[start + n:].decode("utf-8"), options)


@dataclass(eq=False)
class ReferenceProgram:
    """A verified module the reference interpreter runs (implements ``CompiledProgram``)."""

    text: str
    options: CompileOptions
    module: Module
    name: str = field(init=False)
    inputs: tuple[TensorSpec, ...] = field(init=False)
    outputs: tuple[TensorSpec, ...] = field(init=False)
    aliases: Mapping[int, int] = field(init=False)
    fingerprint: str = field(init=False)
    #: The module has a ``while`` loop, which may never end: ``run`` then takes a cancel flag.
    cancellable: bool = field(init=False)
    #: One of its loops is not a short counted loop: the runtime never runs it inline.
    unbounded_loops: bool = field(init=False)
    num_replicas: int = field(init=False)
    num_partitions: int = field(init=False)
    uses_collectives: bool = field(init=False)

    def __post_init__(self) -> None:
        main = self.module.main
        self.name = self.module.name or main.name
        self.inputs = tuple(_spec(t, f"argument {i} of @{main.name}") for i, t in enumerate(main.arg_types))
        self.outputs = tuple(_spec(t, f"result {i} of @{main.name}") for i, t in enumerate(main.result_types))
        self.aliases = output_aliases(self.module)
        self.num_replicas = self.module.num_replicas
        self.num_partitions = self.module.num_partitions
        self.uses_collectives = uses_collectives(self.module)
        digest = hashlib.sha256()
        digest.update(encode_compile_options(self.options))
        digest.update(b"\0")
        digest.update(self.text.encode("utf-8"))
        self.fingerprint = digest.hexdigest()
        self._interpreter = Interpreter(self.module)
        self.cancellable = any(op.name == "stablehlo.while" for op in self.module.walk())
        self.unbounded_loops = self.cancellable and unbounded_loops(self.module)

    def run(self, args: Sequence[np.ndarray], out: Sequence[np.ndarray | None] | None = None, *,
            cancel: np.ndarray | None = None) -> list[np.ndarray]:
        results = run_deep(self._interpreter.run, args, cancel=cancel)
        if out is None:
            return results
        if len(out) != len(results):
            raise InvalidArgument(f"{len(out)} output buffers for {len(results)} outputs")
        final = []
        for i, (buffer, value) in enumerate(zip(out, results)):
            if buffer is None:
                final.append(value)
                continue
            if not self.outputs[i].matches(buffer):
                raise InvalidArgument(
                    f"output buffer {i} is {buffer.dtype}{list(buffer.shape)}, expected "
                    f"{self.outputs[i].dtype}{list(self.outputs[i].shape)}")
            np.copyto(buffer, value)
            final.append(buffer)
        return final

    def cost_analysis(self) -> Mapping[str, float]:
        return cost_analysis(self.module)

    def serialize(self) -> bytes:
        options = encode_compile_options(self.options)
        return _MAGIC + struct.pack("<I", len(options)) + options + self.text.encode("utf-8")


def _spec(ty: Any, what: str) -> TensorSpec:
    if not isinstance(ty, TensorType):
        raise CompileError(f"{what} has type {ty}; @main may only take and return tensors")
    return TensorSpec(ty.shape, ty.dtype)


# -- cost model -------------------------------------------------------------------------------

_TRANSCENDENTAL = frozenset({
    "stablehlo.exponential", "stablehlo.exponential_minus_one", "stablehlo.log",
    "stablehlo.log_plus_one", "stablehlo.logistic", "stablehlo.rsqrt", "stablehlo.sqrt",
    "stablehlo.cbrt", "stablehlo.tanh", "stablehlo.tan", "stablehlo.sine", "stablehlo.cosine",
    "stablehlo.power", "stablehlo.atan2", "chlo.erf", "chlo.erfc", "chlo.erf_inv",
})
_NO_FLOPS = frozenset({
    "stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
    "stablehlo.transpose", "stablehlo.reverse", "stablehlo.slice", "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice", "stablehlo.concatenate", "stablehlo.pad", "stablehlo.gather",
    "stablehlo.convert", "stablehlo.bitcast_convert", "stablehlo.tuple",
    "stablehlo.get_tuple_element", "stablehlo.optimization_barrier", "sdy.sharding_constraint", "func.return",
    "stablehlo.return", "func.call", "stablehlo.while", "stablehlo.case", "stablehlo.if",
})


def _elements(ty: Any) -> int:
    return ty.size if isinstance(ty, TensorType) else 0


def _bytes(ty: Any) -> int:
    return ty.size * ty.dtype.itemsize if isinstance(ty, TensorType) else 0


def _op_flops(op: Op) -> float:
    if op.name in _NO_FLOPS:
        return 0.0
    if op.name == "stablehlo.dot_general":
        a = op.operands[0].tensor_type
        dn = op.attributes["dot_dimension_numbers"]
        k = 1
        for d in dn.lhs_contracting_dimensions:
            k *= a.shape[d]
        return 2.0 * _elements(op.result_types[0]) * k
    if op.name == "stablehlo.dot":
        return 2.0 * _elements(op.result_types[0]) * op.operands[0].tensor_type.shape[-1]
    if op.name == "stablehlo.convolution":
        kernel = op.operands[1].tensor_type
        dn = op.attributes["dimension_numbers"]
        taps = 1
        for d in dn.kernel_spatial_dimensions:
            taps *= kernel.shape[d]
        return 2.0 * _elements(op.result_types[0]) * taps * kernel.shape[dn.kernel_input_feature_dimension]
    if op.name in ("stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter", "stablehlo.sort"):
        body = max(1, len(op.regions[0].ops) - 1) if op.regions else 1
        return float(sum(_elements(t) for t in op.operand_types[: max(1, len(op.operands) // 2)])) * body
    return float(sum(_elements(t) for t in op.result_types))


def cost_analysis(module: Module) -> dict[str, float]:
    """XLA-style estimates: ``flops``, ``transcendentals`` and ``bytes accessed`` of one run of
    @main, following calls once per call site and loop bodies once (trip counts are unknown)."""
    totals = {"flops": 0.0, "transcendentals": 0.0, "bytes accessed": 0.0}

    def visit(fn: Function, depth: int) -> None:
        for op in fn.walk():
            if op.name == "func.call" and depth < 32:
                callee = module.functions.get(op.attributes["callee"].name)
                if callee is not None:
                    visit(callee, depth + 1)
                continue
            totals["flops"] += _op_flops(op)
            if op.name in _TRANSCENDENTAL:
                totals["transcendentals"] += float(sum(_elements(t) for t in op.result_types))
            if op.name not in ("func.return", "stablehlo.return") and not op.regions:
                totals["bytes accessed"] += float(sum(_bytes(t) for t in op.operand_types)
                                                  + sum(_bytes(t) for t in op.result_types))

    visit(module.main, 0)
    return totals
