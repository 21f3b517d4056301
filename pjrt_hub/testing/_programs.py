"""The programs the suite compiles: a few small ones of its own, and the public corpus.

The suite's own programs are StableHLO text in the form JAX prints (``jax.jit(f).lower(...)
.as_text()``), kept to ops every StableHLO consumer knows (add, multiply, constant), so that a
failure points at the runtime rather than at a compiler's op coverage. The corpus
(``pjrt_hub/data/corpus/public``) brings real JAX programs with inputs, expected outputs and
per-output tolerances (``manifest.json``); :class:`Tolerance` is the manifests' comparison rule,
the one every check against expected outputs uses (the suite's cases, ``bench``, pjrt-hub's tests).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

__all__ = [
    "CORPUS_PACKAGE",
    "CorpusProgram",
    "FRAMEWORK_OPTION_OVERRIDES",
    "INVALID_PROGRAM",
    "Tolerance",
    "add_one",
    "corpus_fingerprint",
    "donating_add_one",
    "elementwise",
    "failing_program",
    "framework_options",
    "large_arrays",
    "load_corpus",
    "perf_mismatch",
    "same_name_programs",
    "slow_program",
    "slow_program_result",
    "tensor",
    "two_outputs",
]

CORPUS_PACKAGE = "pjrt_hub.data.corpus.public"

#: Not StableHLO in any form: every plugin must refuse it with an error, not a crash.
INVALID_PROGRAM = "this is not a StableHLO module {"


#: Compile options as a framework sends them for programs whose numerics are checked. JAX sets
#: these two (``CompileOptions()`` in jaxlib: "fast-math-disabling default options expected by
#: JAX"); without them XLA's CPU compiler keeps TF's Eigen-style minimum/maximum, which drop a NaN
#: in the second operand. A plugin that does not know the names ignores them.
FRAMEWORK_OPTION_OVERRIDES = {"xla_cpu_enable_fast_min_max": False, "xla_gpu_enable_fast_min_max": False}


def framework_options() -> Any:
    from pjrt_hub.abi import CompileOptions

    return CompileOptions(env_option_overrides=dict(FRAMEWORK_OPTION_OVERRIDES))


def tensor(shape: tuple[int, ...], element: str) -> str:
    """``tensor<2x3xf32>``; ``tensor<f32>`` for a scalar."""
    return f"tensor<{''.join(f'{d}x' for d in shape)}{element}>"


def _module(name: str, body: str, replicas: int = 1) -> str:
    return (f"module @{name} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = {replicas} : i32}} {{\n"
            f"{body}}}\n")


def main_module(name: str, params: str, results: str, body: str, replicas: int = 1) -> str:
    """A module whose one function is ``@main(params) -> (results)``; ``body`` is its lines, each
    indented and ending in a newline."""
    return _module(name, f"  func.func public @main({params}) -> ({results}) {{\n{body}  }}\n", replicas)


def add_one(n: int = 4, *, replicas: int = 1) -> str:
    """``f(x) = x + 1`` on ``f32[n]``: upstream's ``CreateAddOneComputation``."""
    t = f"tensor<{n}xf32>"
    return _module("jit_add_one", (
        f"  func.func public @main(%arg0: {t}) -> ({t} {{jax.result_info = \"result\"}}) {{\n"
        f"    %cst = stablehlo.constant dense<1.000000e+00> : {t}\n"
        f"    %0 = stablehlo.add %arg0, %cst : {t}\n"
        f"    return %0 : {t}\n"
        f"  }}\n"), replicas)


def two_outputs() -> str:
    """``f(x, y) = (x + y, x * y)`` on ``f32[2,3]``: several outputs in order."""
    t = "tensor<2x3xf32>"
    return _module("jit_two_outputs", (
        f"  func.func public @main(%arg0: {t}, %arg1: {t}) -> ({t} {{jax.result_info = \"[0]\"}}, "
        f"{t} {{jax.result_info = \"[1]\"}}) {{\n"
        f"    %0 = stablehlo.add %arg0, %arg1 : {t}\n"
        f"    %1 = stablehlo.multiply %arg0, %arg1 : {t}\n"
        f"    return %0, %1 : {t}, {t}\n"
        f"  }}\n"))


def donating_add_one(n: int = 4) -> str:
    """``x + 1`` with ``x`` donated to the result, as ``jax.jit(f, donate_argnums=0)`` lowers it."""
    t = f"tensor<{n}xf32>"
    return _module("jit_donating_add_one", (
        f"  func.func public @main(%arg0: {t} {{tf.aliasing_output = 0 : i32}}) -> "
        f"({t} {{jax.result_info = \"result\"}}) {{\n"
        f"    %cst = stablehlo.constant dense<1.000000e+00> : {t}\n"
        f"    %0 = stablehlo.add %arg0, %cst : {t}\n"
        f"    return %0 : {t}\n"
        f"  }}\n"))


class Tolerance(NamedTuple):
    """How close an output must come to its expected value: the rule the corpus manifests state.

    An element passes when ``|actual - expected| <= atol + rtol * |expected|`` (``numpy.isclose``,
    ``equal_nan=False``; equal infinities pass). A NaN never passes: the expected outputs (XLA:CPU's)
    hold none, so a NaN is a wrong answer, not a match. Integer and bool outputs, and any output
    with ``rtol = atol = 0``, must be equal. Dtype and shape must be the expected ones.
    """

    rtol: float = 0.0
    atol: float = 0.0

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> "Tolerance":
        """The tolerance of a manifest's output entry: its ``rtol`` and ``atol`` (public and perf
        corpora), or none at all (the collectives corpus's ``{"kind": "exact"}``)."""
        return cls(float(spec.get("rtol", 0.0)), float(spec.get("atol", 0.0)))

    @property
    def exact(self) -> bool:
        return self.rtol == 0 and self.atol == 0

    def mismatch(self, actual: Any, expected: Any) -> str | None:
        """Why ``actual`` is not ``expected`` under this tolerance, in words, or None if it is."""
        actual, expected = np.asarray(actual), np.asarray(expected)
        if actual.dtype != expected.dtype:
            return f"is {actual.dtype}, expected {expected.dtype}"
        if actual.shape != expected.shape:
            return f"has shape {list(actual.shape)}, expected {list(expected.shape)}"
        exact = self.exact or expected.dtype.kind in "biu"
        if exact:
            bad = np.asarray(actual != expected)
        else:
            wide = np.complex128 if expected.dtype.kind == "c" else np.float64
            a, e = actual.astype(wide), expected.astype(wide)
            bad = ~np.isclose(a, e, rtol=self.rtol, atol=self.atol, equal_nan=False)
        if not bad.any():
            return None
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        text = (f"{int(bad.sum())} of {bad.size} elements differ "
                + ("(an exact match is required)" if exact else f"beyond rtol={self.rtol:g} atol={self.atol:g}")
                + f"; first at {list(where)}: got {actual[where]!r}, expected {expected[where]!r}")
        if not exact:
            error = np.abs(a - e)
            finite = error[np.isfinite(error)]
            if finite.size:
                text += f"; max abs error {finite.max():.3g}"
        return text


def perf_mismatch(output: Any, spec: Mapping[str, Any]) -> str | None:
    """The perf corpus's check of one output, which it keeps no full copy of: the probe values at
    ``probe_flat_indices`` under the output's :class:`Tolerance`, and the sum within
    ``1e-4 * abs_sum`` (both in float64). Why it fails, or None."""
    flat = np.asarray(output).astype(np.float64).reshape(-1)
    probes = flat[np.asarray(spec["probe_flat_indices"], dtype=np.intp)]
    problem = Tolerance.of(spec).mismatch(probes, np.asarray(spec["probe_values"], dtype=np.float64))
    if problem is not None:
        return f"probe values: {problem}"
    total = float(flat.sum())
    if not abs(total - spec["sum"]) <= 1e-4 * spec["abs_sum"]:
        return f"sum {total!r}, expected {spec['sum']!r} within {1e-4 * spec['abs_sum']:.3g}"
    return None


@dataclass(frozen=True)
class CorpusProgram:
    """One program of the public corpus, with what the manifest says about it."""

    name: str
    description: str
    file: str
    data: str
    #: The tolerance of each output, in order.
    tolerances: tuple[Tolerance, ...]
    output_names: tuple[str, ...]
    input_names: tuple[str, ...]

    def text(self) -> str:
        return resources.files(CORPUS_PACKAGE).joinpath(self.file).read_text(encoding="utf-8")

    def arrays(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        with resources.files(CORPUS_PACKAGE).joinpath(self.data).open("rb") as handle:
            with np.load(handle) as npz:
                return [npz[n] for n in self.input_names], [npz[n] for n in self.output_names]

    def output_mismatch(self, index: int, got: np.ndarray, expected: np.ndarray) -> str | None:
        """Why output ``index`` is not the expected one under its :class:`Tolerance` (None when
        it is), naming the program and the output: what the suite and ``bench`` report."""
        problem = self.tolerances[index].mismatch(got, expected)
        if problem is None:
            return None
        return f"{self.name} output {index} ({self.output_names[index]}): {problem}"


def _manifest_text() -> str:
    try:
        return resources.files(CORPUS_PACKAGE).joinpath("manifest.json").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        return ""


@lru_cache(maxsize=1)
def load_corpus() -> tuple[CorpusProgram, ...]:
    """Every program of the public corpus (empty if the corpus is not installed)."""
    text = _manifest_text()
    if not text:
        return ()
    manifest: dict[str, Any] = json.loads(text)
    programs = []
    for entry in manifest["programs"]:
        outputs = entry["outputs"]
        programs.append(CorpusProgram(
            name=entry["name"], description=entry.get("description", ""), file=entry["file"],
            data=entry["data"],
            tolerances=tuple(Tolerance.of({**{k: entry[k] for k in ("rtol", "atol") if k in entry}, **o})
                             for o in outputs),
            output_names=tuple(o["name"] for o in outputs),
            input_names=tuple(i["name"] for i in entry["inputs"]),
        ))
    return tuple(programs)


def corpus_fingerprint() -> str:
    return hashlib.sha256(_manifest_text().encode()).hexdigest()[:16]


def large_arrays(n: int = 2048) -> str:
    """``x * y + x`` on two ``f32[n, n]`` (16 MiB each at the default): large enough that a
    plugin spreads it over threads (numba_cpu compiles it as a parallel program)."""
    m = tensor((n, n), "f32")
    return _module("jit_large_arrays", (
        f"  func.func public @main(%x: {m}, %y: {m}) -> ({m} {{jax.result_info = \"result\"}}) {{\n"
        f"    %0 = stablehlo.multiply %x, %y : {m}\n"
        f"    %1 = stablehlo.add %0, %x : {m}\n"
        f"    return %1 : {m}\n"
        "  }\n"))


def elementwise(name: str, params: Sequence[str], steps: Sequence[tuple[str, tuple[int, ...]]],
                results: Sequence[int] | None = None) -> str:
    """A straight line of elementwise ops: ``params`` are the argument types (``tensor<4xi8>``),
    value ``i`` is argument ``i`` for ``i < len(params)`` and step ``i - len(params)`` after, and
    each step ``(op, operands)`` is one StableHLO op on earlier values, of its first operand's
    type. ``results`` picks the values returned (default: every step). With one op per result,
    what comes back is that op's result, rounded once to its type."""
    types = list(params)
    names = [f"%arg{i}" for i in range(len(params))]
    lines = []
    for index, (op, operands) in enumerate(steps):
        t = types[operands[0]]
        lines.append(f"    %{index} = stablehlo.{op} {', '.join(names[i] for i in operands)} : {t}\n")
        types.append(t)
        names.append(f"%{index}")
    chosen = list(range(len(params), len(types))) if results is None else list(results)
    outs = ", ".join(f"{types[i]} {{jax.result_info = \"[{n}]\"}}" for n, i in enumerate(chosen))
    args = ", ".join(f"{names[i]}: {types[i]}" for i in range(len(params)))
    return _module(name, (f"  func.func public @main({args}) -> ({outs}) {{\n" + "".join(lines)
                          + f"    return {', '.join(names[i] for i in chosen)} : {', '.join(types[i] for i in chosen)}\n"
                          + "  }\n"))


def slow_program(n: int = 1 << 18) -> str:
    """``x`` updated ``k`` times in a loop (``x = x * 0.5 + 1``), ``k`` an argument: a program
    whose run time the caller chooses, to observe work that is still pending. The data (1 MiB in,
    1 MiB out at the default size) is large enough that no runtime counts it as cheap and runs
    it on the caller's thread for that reason alone."""
    t, i32 = tensor((n,), "f32"), "tensor<i32>"
    return _module("jit_slow_loop", (
        f"  func.func public @main(%arg0: {t}, %arg1: {i32}) -> ({t} {{jax.result_info = \"result\"}}) {{\n"
        f"    %c = stablehlo.constant dense<0> : {i32}\n"
        f"    %0:2 = stablehlo.while(%iterArg = %arg0, %iterArg_0 = %c) : {t}, {i32}\n"
        f"    cond {{\n"
        f"      %1 = stablehlo.compare  LT, %iterArg_0, %arg1,  SIGNED : ({i32}, {i32}) -> tensor<i1>\n"
        f"      stablehlo.return %1 : tensor<i1>\n"
        f"    }} do {{\n"
        f"      %cst = stablehlo.constant dense<5.000000e-01> : {t}\n"
        f"      %cst_1 = stablehlo.constant dense<1.000000e+00> : {t}\n"
        f"      %1 = stablehlo.multiply %iterArg, %cst : {t}\n"
        f"      %2 = stablehlo.add %1, %cst_1 : {t}\n"
        f"      %c_2 = stablehlo.constant dense<1> : {i32}\n"
        f"      %3 = stablehlo.add %iterArg_0, %c_2 : {i32}\n"
        f"      stablehlo.return %2, %3 : {t}, {i32}\n"
        f"    }}\n"
        f"    return %0#0 : {t}\n"
        f"  }}\n"))


def slow_program_result(x: np.ndarray, k: int) -> np.ndarray:
    """What :func:`slow_program` computes, in float32 step by step."""
    x = np.asarray(x, np.float32)
    half, one = np.float32(0.5), np.float32(1.0)
    for _ in range(int(k)):
        x = x * half + one
    return x


#: Elements of :func:`failing_program`'s second result: 2**62 bytes, four times what a 64-bit
#: process can address, so allocating it fails at once, whatever the system's overcommit policy.
UNALLOCATABLE_ELEMENTS = 1 << 60


def failing_program() -> str:
    """``(x + 1, broadcast(s))`` where the broadcast result cannot be allocated: a program that
    compiles (its shapes are static and valid) and fails when it runs."""
    small, big, scalar = tensor((4,), "f32"), tensor((UNALLOCATABLE_ELEMENTS,), "f32"), "tensor<f32>"
    return _module("jit_unallocatable", (
        f"  func.func public @main(%arg0: {small}, %arg1: {scalar}) -> ({small} {{jax.result_info = \"[0]\"}}, "
        f"{big} {{jax.result_info = \"[1]\"}}) {{\n"
        f"    %cst = stablehlo.constant dense<1.000000e+00> : {small}\n"
        f"    %0 = stablehlo.add %arg0, %cst : {small}\n"
        f"    %1 = stablehlo.broadcast_in_dim %arg1, dims = [] : ({scalar}) -> {big}\n"
        f"    return %0, %1 : {small}, {big}\n"
        f"  }}\n"))


def same_name_programs(n: int = 4) -> tuple[str, str]:
    """Two programs of one module name, ``@jit_f``, as JAX names every ``jax.jit(f)`` of a
    function called ``f``: ``x + 1`` and ``x * 2`` on ``f32[n]``."""
    t = tensor((n,), "f32")
    head = f"  func.func public @main(%arg0: {t}) -> ({t} {{jax.result_info = \"result\"}}) {{\n"
    plus = _module("jit_f", head + (f"    %cst = stablehlo.constant dense<1.000000e+00> : {t}\n"
                                    f"    %0 = stablehlo.add %arg0, %cst : {t}\n"
                                    f"    return %0 : {t}\n  }}\n"))
    times = _module("jit_f", head + (f"    %cst = stablehlo.constant dense<2.000000e+00> : {t}\n"
                                     f"    %0 = stablehlo.multiply %arg0, %cst : {t}\n"
                                     f"    return %0 : {t}\n  }}\n"))
    return plus, times
