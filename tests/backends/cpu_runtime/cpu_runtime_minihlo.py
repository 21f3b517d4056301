"""A tiny StableHLO compiler for the runtime's tests: straight-line elementwise programs.

It reads the subset of StableHLO text the tests need (one ``@main`` of elementwise ops on
tensors, ``reshape``, ``constant``, ``return``, the module's ``mhlo.num_replicas`` /
``mhlo.num_partitions`` and the argument attributes ``tf.aliasing_output`` / ``jax.buffer_donor``)
and runs it with numpy, so the runtime is tested against a real ProgramCompiler without numba or
the full interpreter. Three custom calls exist for the runtime's own tests: ``@fail`` raises
inside ``run`` (an execution error), ``@sleep_<N>ms`` sleeps, and ``@gate_<name>`` waits until the
test opens :func:`gate` ``(name)`` and then returns its operand itself (not a copy), so a test
decides exactly when pending work completes.

The program text is the serialized form: ``deserialize`` compiles it again.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import ml_dtypes
import numpy as np

from pjrt_hub.abi import CompileOptions, ParseError, UnsupportedOpError
from pjrt_hub.backends.cpu_runtime import TensorSpec

_DTYPES = {
    "f16": np.float16, "f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16,
    "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
    "complex<f32>": np.complex64, "complex<f64>": np.complex128,
}
_BINARY = {"add": np.add, "multiply": np.multiply, "subtract": np.subtract, "divide": np.divide,
           "maximum": np.maximum, "minimum": np.minimum}
_UNARY = {"negate": np.negative, "exponential": np.exp, "abs": np.abs, "sqrt": np.sqrt}
_SERIAL_PREFIX = b"minihlo\n"

_GATES: dict[str, threading.Event] = {}


def gate(name: str) -> threading.Event:
    """The gate ``@gate_<name>`` waits on; ``set()`` it to let the work finish."""
    return _GATES.setdefault(name, threading.Event())

_TENSOR = re.compile(r"tensor<(?:((?:\d+x)*\d+)x)?(complex<f\d+>|\w+)>")
_TENSOR_TEXT = r"tensor<(?:[^<>]|<[^<>]*>)*>"
_ARG = re.compile(r"%(\w+)\s*:\s*(" + _TENSOR_TEXT + r")\s*(\{[^}]*\})?")
_OP = re.compile(r"%(\w+)\s*=\s*stablehlo\.(\w+)\s*(.*?)\s*:\s*(.*)$")


def parse_tensor(text: str, line: int) -> TensorSpec:
    match = _TENSOR.fullmatch(text.strip())
    if match is None or match.group(2) not in _DTYPES:
        raise ParseError(f"expected a tensor type, got {text.strip()!r}", line=line, column=1)
    dims = tuple(int(d) for d in match.group(1).split("x")) if match.group(1) else ()
    return TensorSpec(dims, np.dtype(_DTYPES[match.group(2)]))


@dataclass
class MiniProgram:
    """The CompiledProgram of a mini module."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    aliases: Mapping[int, int]
    fingerprint: str
    text: str
    steps: list[tuple[str, Callable[[dict[str, np.ndarray]], np.ndarray]]] = field(repr=False)
    arg_names: list[str] = field(repr=False)
    result_names: list[str] = field(repr=False)
    num_replicas: int = 1
    num_partitions: int = 1
    donated_inputs: frozenset[int] = frozenset()
    flops: float = 0.0
    runs: int = 0

    def run(self, args: Sequence[np.ndarray], out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        self.runs += 1
        env = dict(zip(self.arg_names, args))
        for name, step in self.steps:
            env[name] = step(env)
        results = [env[name] for name in self.result_names]
        if out is not None:
            for index, target in enumerate(out):
                if target is not None:
                    np.copyto(target, results[index])
                    results[index] = target
        return results

    def cost_analysis(self) -> Mapping[str, float]:
        accessed = sum(int(np.prod(s.shape)) * s.dtype.itemsize for s in self.inputs + self.outputs)
        return {"flops": self.flops, "bytes accessed": float(accessed)}

    def serialize(self) -> bytes:
        return _SERIAL_PREFIX + self.text.encode()


class MiniCompiler:
    """ProgramCompiler for the mini subset; counts its compilations."""

    name = "minihlo"

    def __init__(self) -> None:
        self.compilations = 0

    def compile(self, code: str | bytes, options: CompileOptions) -> MiniProgram:
        self.compilations += 1
        text = code.decode() if isinstance(code, bytes) else code
        return _compile(text, options)

    def deserialize(self, data: bytes) -> MiniProgram:
        if not data.startswith(_SERIAL_PREFIX):
            raise ParseError("not a serialized minihlo program")
        return _compile(data[len(_SERIAL_PREFIX):].decode(), CompileOptions())


def _compile(text: str, options: CompileOptions) -> MiniProgram:
    module = re.search(r"module\s+@([\w.]+)", text)
    name = module.group(1) if module else "main"
    replicas = re.search(r"mhlo\.num_replicas\s*=\s*(\d+)", text)
    partitions = re.search(r"mhlo\.num_partitions\s*=\s*(\d+)", text)
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if "@main(" in line), None)
    if header is None:
        raise ParseError("no func.func @main", line=1, column=1)
    signature = re.search(r"@main\((.*)\)\s*->\s*(.*?)\s*\{\s*$", lines[header])
    if signature is None:
        raise ParseError("cannot read the signature of @main", line=header + 1, column=1)
    arg_names, inputs, aliases, donors = [], [], {}, set()
    for index, arg in enumerate(_ARG.finditer(signature.group(1))):
        arg_names.append(arg.group(1))
        inputs.append(parse_tensor(arg.group(2), header + 1))
        attributes = arg.group(3) or ""
        alias = re.search(r"tf\.aliasing_output\s*=\s*(\d+)", attributes)
        if alias:
            aliases[int(alias.group(1))] = index
        if "jax.buffer_donor = true" in attributes:
            donors.add(index)
    result_text = signature.group(2).strip()
    if result_text.startswith("("):
        result_text = result_text[1:-1]
    outputs = [parse_tensor(t, header + 1) for t in re.findall(_TENSOR_TEXT, result_text)]
    env_specs = dict(zip(arg_names, inputs))
    steps, flops, result_names = [], 0.0, None
    for number, line in enumerate(lines[header + 1:], start=header + 2):
        line = line.strip()
        if not line or line == "}":
            continue
        if line.startswith(("return", "func.return", "stablehlo.return")):
            result_names = re.findall(r"%(\w+)", line.split(":")[0])
            break
        op = _OP.match(line)
        if op is None:
            raise ParseError(f"cannot read {line!r}", line=number, column=1)
        result, opname, operands_text, type_text = op.groups()
        operands = re.findall(r"%(\w+)", operands_text)
        for operand in operands:
            if operand not in env_specs:
                raise ParseError(f"use of undefined value %{operand}", line=number, column=1)
        spec = parse_tensor(type_text.split("->")[-1].strip().strip("()"), number)
        elements = float(np.prod(spec.shape)) if spec.shape else 1.0
        steps.append((result, _step(opname, operands, operands_text, spec, number)))
        flops += elements
        env_specs[result] = spec
    if result_names is None:
        raise ParseError("@main has no return", line=len(lines), column=1)
    text_hash = hashlib.sha256(text.encode()).hexdigest()
    return MiniProgram(
        name=name, inputs=tuple(inputs), outputs=tuple(outputs), aliases=aliases,
        fingerprint=text_hash[:32], text=text, steps=steps, arg_names=arg_names,
        result_names=result_names,
        num_replicas=int(replicas.group(1)) if replicas else 1,
        num_partitions=int(partitions.group(1)) if partitions else 1,
        donated_inputs=frozenset(donors), flops=flops,
    )


def _step(opname: str, operands: list[str], operands_text: str, spec: TensorSpec,
          line: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    dtype = spec.dtype
    if opname in _BINARY:
        fn = _BINARY[opname]
        a, b = operands
        return lambda env: np.asarray(fn(env[a], env[b]), dtype=dtype)
    if opname in _UNARY:
        fn = _UNARY[opname]
        (a,) = operands
        return lambda env: np.asarray(fn(env[a]), dtype=dtype)
    if opname == "reshape":
        (a,) = operands
        return lambda env: env[a].reshape(spec.shape)  # a view: the runtime must not let it alias
    if opname == "constant":
        value = re.search(r"dense<([^>]*)>", operands_text)
        constant = np.full(spec.shape, float(value.group(1)) if value else 0.0, dtype=dtype)
        return lambda env: constant  # the same array every run, as an interpreter may return
    if opname == "custom_call":
        target = re.search(r"@(\w+)", operands_text)
        if target and target.group(1) == "fail":
            def fail(env: dict[str, np.ndarray]) -> np.ndarray:
                raise RuntimeError("custom call @fail was asked to fail")
            return fail
        gated = re.fullmatch(r"gate_(\w+)", target.group(1)) if target else None
        if gated:
            event = gate(gated.group(1))
            (a,) = operands

            def wait(env: dict[str, np.ndarray]) -> np.ndarray:
                if not event.wait(timeout=30):
                    raise RuntimeError(f"gate {gated.group(1)} was never opened")
                return env[a]
            return wait
        sleep = re.fullmatch(r"sleep_(\d+)ms", target.group(1)) if target else None
        if sleep:
            seconds = int(sleep.group(1)) / 1000
            (a,) = operands

            def snooze(env: dict[str, np.ndarray]) -> np.ndarray:
                time.sleep(seconds)
                return env[a].copy()
            return snooze
    raise UnsupportedOpError(f"stablehlo.{opname}", location=f"line {line}",
                             supported=[*_BINARY, *_UNARY, "reshape", "constant", "custom_call"],
                             backend="minihlo")


def module(body: str, *, args: str, results: str, name: str = "jit_f", attributes: str = "") -> str:
    """A module around ``body`` (the ops and the return of @main)."""
    attrs = f" attributes {{{attributes}}}" if attributes else ""
    return (f"module @{name}{attrs} {{\n"
            f"  func.func public @main({args}) -> ({results}) {{\n"
            + "\n".join(f"    {line.strip()}" for line in body.strip().splitlines())
            + "\n  }\n}\n")


def add_module(shape: str = "4", dtype: str = "f32", *, alias: bool = False, name: str = "jit_add",
               attributes: str = "") -> str:
    """``a + b`` on two ``tensor<shape x dtype>``; ``alias`` lets the result reuse ``a``."""
    t = f"tensor<{shape}x{dtype}>" if shape else f"tensor<{dtype}>"
    a_attr = " {tf.aliasing_output = 0 : i32}" if alias else ""
    return module(f"%0 = stablehlo.add %arg0, %arg1 : {t}\nreturn %0 : {t}",
                  args=f"%arg0: {t}{a_attr}, %arg1: {t}", results=t, name=name, attributes=attributes)
