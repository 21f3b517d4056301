"""Generated JAX programs on numba_cpu's compiled tier, through JAX, against XLA's CPU backend.

Hypothesis draws small programs as a list of steps applied to a float32 state array (and a PRNG key
argument): jax.numpy elementwise ops, reductions broadcast back, reshapes, transposes,
concatenations, ``where``, ``cumsum``, sorting, ``dot_general``, casts through int32, bool and
bfloat16, ``jax.random`` draws, and ``dynamic_slice``/``dynamic_update_slice`` at traced (and
sometimes out-of-range, so clamped) indices; some steps wrap an inner list of steps in ``lax.scan``,
``fori_loop``, ``while_loop``, ``cond``, ``vmap``, ``grad`` or ``value_and_grad``, and the whole
program may be ``vmap``-ed over a leading batch axis. Each program is compiled with the eager tier
off (the compile option ``numba_cpu_tiered``), so a lowering error is the compile error it is, and
its outputs must match XLA's CPU in dtype, shape and value. The eager tier's answer to the program
the bridge hands the compiler must match too. Every example is a numba compile: ``PJRT_HUB_JAX_EXAMPLES``
sets how many (a few in CI). A failing example is shrunk by Hypothesis, which prints the minimal
program's steps and its StableHLO.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jaxlib")
hypothesis = pytest.importorskip("hypothesis")

from .conftest import NUMBA, register_all  # noqa: E402

register_all()  # before anything makes JAX create its backends

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_hub.backends.numba_cpu.compiler import _front_end  # noqa: E402
from pjrt_hub.backends.numba_cpu.eager import EagerProgram, EagerUnsupported, NeedsCompiled  # noqa: E402
from pjrt_hub.jax._programs import read_program  # noqa: E402
from pjrt_hub.testing._programs import Tolerance  # noqa: E402

st = hypothesis.strategies

EXAMPLES = int(os.environ.get("PJRT_HUB_JAX_EXAMPLES", "4"))
SHAPES = [(6,), (3, 4), (4, 4), (2, 3, 4), (8, 5)]


@dataclass(frozen=True)
class Step:
    """One step of a generated program: ``apply(x, key) -> x`` keeps ``x``'s shape and float32
    dtype; ``text`` is what a reader of a failing example sees."""

    text: str
    apply: Callable[[Any, Any], Any] = field(repr=False, compare=False)
    #: Whether the result goes through a rounding (bfloat16) whose one-ulp flips the comparison
    #: must allow for.
    rounds: bool = False
    inner: tuple["Step", ...] = ()

    def __repr__(self) -> str:
        return self.text


def _chain(steps: tuple[Step, ...]) -> Callable[[Any, Any], Any]:
    def run(x, key):
        for i, s in enumerate(steps):
            x = s.apply(x, jax.random.fold_in(key, i))
        return x

    return run


def _chain_text(steps: tuple[Step, ...]) -> str:
    return "[" + ", ".join(s.text for s in steps) + "]"


def _rounds(steps: tuple[Step, ...]) -> bool:
    return any(s.rounds for s in steps)


# -- leaf steps ----------------------------------------------------------------------------------

_UNARY = {
    "sin": jnp.sin, "cos": jnp.cos, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
    "exp(-|x|)": lambda x: jnp.exp(-jnp.abs(x)), "log1p(x*x)": lambda x: jnp.log1p(x * x),
    "sqrt(|x|+1)": lambda x: jnp.sqrt(jnp.abs(x) + 1.0), "abs": jnp.abs, "negative": jnp.negative,
    "x*x-1": lambda x: x * x - 1.0, "rsqrt(x*x+1)": lambda x: lax.rsqrt(x * x + 1.0),
}


@st.composite
def _leaf(draw, shape: tuple[int, ...]) -> Step:
    rank = len(shape)
    axis = draw(st.integers(0, rank - 1))
    kind = draw(st.sampled_from(["unary", "unary", "affine", "center", "softmax", "cumsum", "reshape", "rotate",
                                 "concat", "where", "sort", "argmax", "dot", "int32", "bool", "bf16",
                                 "dynamic_slice", "dynamic_update_slice", "gather", "scatter", "cummax", "clip",
                                 "random"]))
    if kind == "unary":
        name = draw(st.sampled_from(sorted(_UNARY)))
        return Step(name, lambda x, k, f=_UNARY[name]: f(x))
    if kind == "affine":
        a, b = draw(st.sampled_from([0.5, -1.5, 2.0])), draw(st.sampled_from([0.0, 0.25, -1.0]))
        return Step(f"x*{a}+{b}", lambda x, k: x * a + b)
    if kind == "center":
        op = draw(st.sampled_from(["mean", "max", "min", "sum", "var"]))
        return Step(f"x - {op}(x, axis={axis}, keepdims)",
                    lambda x, k: x - getattr(jnp, op)(x, axis=axis, keepdims=True))
    if kind == "softmax":
        return Step(f"softmax(x, axis={axis})", lambda x, k: jax.nn.softmax(x, axis=axis))
    if kind == "cumsum":
        reverse = draw(st.booleans())
        return Step(f"cumsum(x, axis={axis}, reverse={reverse}) / {shape[axis]}",
                    lambda x, k: lax.cumsum(x, axis=axis, reverse=reverse) / shape[axis])
    if kind == "reshape":
        # Through a flat view, reversed, and a transpose of another factorisation of the size.
        size = int(np.prod(shape))
        other = next(((a, size // a) for a in (2, 3, 4) if size % a == 0), (size, 1))
        return Step(f"x.reshape(-1)[::-1].reshape{other}.T.reshape{shape}",
                    lambda x, k: x.reshape(-1)[::-1].reshape(other).T.reshape(shape))
    if kind == "rotate":
        n = draw(st.integers(1, max(1, shape[axis] - 1)))
        return Step(f"roll(x, {n}, axis={axis})", lambda x, k: jnp.roll(x, n, axis=axis))
    if kind == "concat":
        half = draw(st.integers(1, max(1, shape[axis] - 1)))
        return Step(f"concat halves of [x, sin(x)] on axis {axis} at {half}",
                    lambda x, k: lax.slice_in_dim(jnp.concatenate([x, jnp.sin(x)], axis=axis), half,
                                                  half + shape[axis], axis=axis))
    if kind == "where":
        t = draw(st.sampled_from([0.0, 0.5, -0.25]))
        return Step(f"where(x > {t}, x, x*0.5 - 1)", lambda x, k: jnp.where(x > t, x, x * 0.5 - 1.0))
    if kind == "sort":
        return Step(f"sort(x, axis={axis})", lambda x, k: jnp.sort(x, axis=axis))
    if kind == "argmax":
        return Step(f"x + argmax(x, axis={axis}, keepdims)",
                    lambda x, k: x + jnp.argmax(x, axis=axis, keepdims=True).astype(jnp.float32))
    if kind == "dot":
        if rank == 1:
            return Step("x * dot(x, x) / n", lambda x, k: x * jnp.dot(x, x) / shape[0])
        if rank == 2:
            return Step("(x @ x.T @ x) / size", lambda x, k: (x @ x.T @ x) / x.size)
        # Batched over the leading axis.
        return Step("dot_general(x, x, batch 0, contract 2) @ x / size",
                    lambda x, k: lax.dot_general(lax.dot_general(x, x, (((2,), (2,)), ((0,), (0,)))), x,
                                                 (((2,), (1,)), ((0,), (0,)))) / x.size)
    if kind == "int32":
        m = draw(st.sampled_from([3, 7]))
        # Clipped first: a float out of int32's range converts as each backend pleases.
        return Step(f"(((clip(x*4, ±1e6).astype(i32) * 3 + 1) % {m} ^ 1) >> 1).astype(f32) / 4 + x",
                    lambda x, k: ((((jnp.clip(x * 4, -1e6, 1e6)).astype(jnp.int32) * 3 + 1) % m ^ 1) >> 1)
                    .astype(jnp.float32) / 4 + x)
    if kind == "bool":
        return Step("where((x > 0) ^ (x < 0.5), x, 1 - x) + (x > 1).astype(f32)",
                    lambda x, k: jnp.where((x > 0) ^ (x < 0.5), x, 1.0 - x) + (x > 1).astype(jnp.float32))
    if kind == "bf16":
        arith = draw(st.booleans())
        if arith:
            return Step("(x.astype(bf16) * 1.5).astype(f32)",
                        lambda x, k: (x.astype(jnp.bfloat16) * jnp.bfloat16(1.5)).astype(jnp.float32), rounds=True)
        return Step("x.astype(bf16).astype(f32)", lambda x, k: x.astype(jnp.bfloat16).astype(jnp.float32), rounds=True)
    if kind == "dynamic_slice":
        # The start comes from the data, and may run past the end (XLA clamps it).
        extra = draw(st.integers(0, 2))
        size = draw(st.integers(1, shape[axis]))
        return Step(f"x + mean(dynamic_slice_in_dim(x, argmax(x)%{shape[axis]}+{extra}, {size}, axis={axis}))",
                    lambda x, k: x + jnp.mean(lax.dynamic_slice_in_dim(
                        x, jnp.argmax(x.reshape(-1)) % shape[axis] + extra, size, axis=axis)))
    if kind == "dynamic_update_slice":
        extra = draw(st.integers(-1, 2))
        size = draw(st.integers(1, shape[axis]))
        return Step(f"dynamic_update_slice_in_dim(x, tanh(slice of {size}), argmin(x)%{shape[axis]}+{extra}, axis={axis})",
                    lambda x, k: lax.dynamic_update_slice_in_dim(
                        x, jnp.tanh(lax.slice_in_dim(x, 0, size, axis=axis)),
                        jnp.argmin(x.reshape(-1)) % shape[axis] + extra, axis=axis))
    if kind == "gather":
        # Rows (or elements) picked by traced indices, one of them out of range (JAX clamps it).
        return Step(f"x + mean(take(x, [0, {shape[axis]}] + argmax(x) % 2, axis={axis}, mode=clip), axis, keepdims)",
                    lambda x, k: x + jnp.mean(jnp.take(x, jnp.array([0, shape[axis]]) + jnp.argmax(x.reshape(-1)) % 2,
                                                       axis=axis, mode="clip"), axis=axis, keepdims=True))
    if kind == "scatter":
        return Step(f"x.at[argmax(x) % {shape[0]}].add(sin(x[0])).at[argmin(x) % {shape[0]}].set(-1)",
                    lambda x, k: x.at[jnp.argmax(x.reshape(-1)) % shape[0]].add(jnp.sin(x[0]))
                    .at[jnp.argmin(x.reshape(-1)) % shape[0]].set(-1.0))
    if kind == "cummax":
        return Step(f"cummax(x, axis={axis}) - x", lambda x, k: lax.cummax(x, axis=axis) - x)
    if kind == "clip":
        return Step("clip(x, -0.5, 1) ** 2", lambda x, k: jnp.clip(x, -0.5, 1.0) ** 2)
    # random
    how = draw(st.sampled_from(["normal", "uniform", "bits"]))
    if how == "normal":
        return Step("x + 0.1 * normal(split(key)[1])",
                    lambda x, k: x + 0.1 * jax.random.normal(jax.random.split(k)[1], shape))
    if how == "uniform":
        return Step("x * uniform(key, 0.5, 1.5)", lambda x, k: x * jax.random.uniform(k, shape, minval=0.5, maxval=1.5))
    return Step("x + (bits(key) % 8).astype(f32) / 8",
                lambda x, k: x + (jax.random.bits(k, shape) % 8).astype(jnp.float32) / 8)


# -- wrapped steps -------------------------------------------------------------------------------


def _steps(shape: tuple[int, ...], depth: int, differentiable: bool, most: int = 2):
    step = _step(shape, depth, differentiable)
    return st.lists(step, min_size=1, max_size=most).map(tuple)


@st.composite
def _step(draw, shape: tuple[int, ...], depth: int, differentiable: bool) -> Step:
    kinds = ["leaf", "leaf", "leaf"]
    if depth > 0:
        kinds += ["scan", "fori", "cond", "grad", "value_and_grad"]
        kinds += [] if differentiable else ["while"]  # reverse mode needs a known trip count
        kinds += ["vmap"] if len(shape) > 1 else []
    kind = draw(st.sampled_from(kinds))
    if kind == "leaf":
        return draw(_leaf(shape))
    if kind == "vmap":
        inner = draw(_steps(shape[1:], depth - 1, differentiable))
        f = _chain(inner)
        return Step(f"vmap({_chain_text(inner)})",
                    lambda x, k: jax.vmap(f)(x, jax.random.split(k, shape[0])), _rounds(inner), inner)
    inner = draw(_steps(shape, depth - 1, differentiable or kind in ("grad", "value_and_grad")))
    f = _chain(inner)
    text = _chain_text(inner)
    n = draw(st.integers(1, 4))
    if kind == "scan":
        reverse = draw(st.booleans())

        def scanned(x, k):
            def body(c, i):
                c = f(c, jax.random.fold_in(k, i))
                # A row of the carry at the step's (traced) index, folded back in.
                row = lax.dynamic_slice_in_dim(c, i % shape[0], 1, axis=0)
                return jnp.tanh(c + 0.5 * row), jnp.sum(row)

            c, ys = lax.scan(body, x, jnp.arange(n), reverse=reverse)
            return c + 0.1 * jnp.mean(ys)

        return Step(f"scan({n}, reverse={reverse}, {text})", scanned, _rounds(inner), inner)
    if kind == "fori":
        def looped(x, k):
            def body(i, c):
                c = f(c, jax.random.fold_in(k, i))
                return lax.dynamic_update_slice_in_dim(c, jnp.sin(lax.dynamic_slice_in_dim(c, 0, 1, axis=0)),
                                                       (i + 1) % shape[0], axis=0)

            return lax.fori_loop(0, n, body, x)

        return Step(f"fori_loop(0, {n}, {text})", looped, _rounds(inner), inner)
    if kind == "while":
        def whiled(x, k):
            def cond(carry):
                i, c = carry
                return (i < n) & (jnp.max(jnp.abs(c)) < 1e3)

            def body(carry):
                i, c = carry
                return i + 1, f(c, jax.random.fold_in(k, i))

            return lax.while_loop(cond, body, (jnp.int32(0), x))[1]

        return Step(f"while_loop(i < {n} and max|x| < 1e3, {text})", whiled, _rounds(inner), inner)
    if kind == "cond":
        other = draw(_steps(shape, depth - 1, differentiable))
        g = _chain(other)
        return Step(f"cond(sum(x) > 0, {text}, {_chain_text(other)})",
                    lambda x, k: lax.cond(jnp.sum(x) > 0, f, g, x, k), _rounds(inner + other), inner + other)

    def loss(x, k):
        return jnp.mean(jnp.tanh(f(x, k)) ** 2)

    if kind == "grad":
        return Step(f"grad(mean(tanh({text})**2))", lambda x, k: x + jax.grad(loss)(x, k), _rounds(inner), inner)
    return Step(f"value_and_grad(mean(tanh({text})**2))",
                lambda x, k: (lambda vg: x + vg[1] + vg[0])(jax.value_and_grad(loss)(x, k)), _rounds(inner), inner)


@dataclass(frozen=True)
class Program:
    shape: tuple[int, ...]
    steps: tuple[Step, ...]
    batched: bool
    seed: int

    def function(self) -> Callable[[Any, Any], Any]:
        chain = _chain(self.steps)

        def program(x, key):
            if self.batched:
                y = jax.vmap(chain)(x, jax.random.split(key, x.shape[0]))
            else:
                y = chain(x, key)
            # An integer and a bool output too: their comparison is exact.
            return y, jnp.sum(y), jnp.clip(jnp.nan_to_num(y * 4), -1e6, 1e6).astype(jnp.int32), y > 0

        return program

    def arguments(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        shape = ((2,) if self.batched else ()) + self.shape
        return rng.standard_normal(shape).astype(np.float32), np.asarray(jax.random.key_data(
            jax.random.PRNGKey(self.seed)))

    def __repr__(self) -> str:
        return (f"Program(shape={self.shape}, batched={self.batched}, seed={self.seed},\n  steps="
                + _chain_text(self.steps) + ")")


@st.composite
def programs(draw) -> Program:
    shape = draw(st.sampled_from(SHAPES))
    steps = draw(_steps(shape, depth=2, differentiable=False, most=3))
    return Program(shape, steps, draw(st.booleans()), draw(st.integers(0, 2**16)))


# -- the comparison ------------------------------------------------------------------------------


def _tolerance(program: Program, expected: np.ndarray) -> Tolerance:
    """float32 chains of a dozen ops, each within a few ulps of XLA's (its transcendentals are its
    own), and cancellations in the centring steps: relative 1e-4, absolute 1e-5 of the output's
    scale. A bfloat16 rounding can land one bfloat16 ulp apart (2**-8) when its input does."""
    scale = float(np.max(np.abs(expected), initial=1.0)) if np.all(np.isfinite(expected)) else 1.0
    if _rounds(program.steps):
        return Tolerance(2.0**-6, 2.0**-6 * scale)
    return Tolerance(1e-4, 1e-5 * scale)


def _run(program: Program, platform: str, **compiler_options):
    device = jax.devices(platform)[0]
    args = [jax.device_put(a, device) for a in program.arguments()]
    lowered = jax.jit(program.function()).lower(*args)
    compiled = lowered.compile(compiler_options or None)
    outputs = compiled(*args)
    assert all(list(o.devices())[0].platform == platform for o in outputs)
    return [np.asarray(o) for o in outputs]


def _eager(program: Program) -> list[np.ndarray] | None:
    """The eager tier's answer to the StableHLO JAX hands the plugin (read back from JAX's artifact
    as the bridge reads it), or None where the eager tier leaves the program to the compiled one.
    Not through a tiered compile: numba_cpu would start a background compile of it, a second numba
    compile of every example."""
    args = program.arguments()
    info = read_program(jax.jit(program.function()).lower(*args).as_text())
    try:
        text = info.text
    finally:
        info.release()
    try:
        _, fn = _front_end(text)
        return [np.asarray(o) for o in EagerProgram(fn, 1).run(list(args))]
    except (EagerUnsupported, NeedsCompiled):
        return None


def _compare(program: Program, got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if w.dtype.kind == "f" and g.shape == w.shape and np.isnan(w).any():
            # A NaN where XLA has one is right (Tolerance counts every NaN as wrong, since the
            # corpora expect none); the other elements are compared as usual.
            assert (np.isnan(g) == np.isnan(w)).all(), f"{what}: output {i} has NaNs elsewhere than XLA's"
            g, w = np.where(np.isnan(w), 0, g).astype(w.dtype), np.where(np.isnan(w), 0, w).astype(w.dtype)
        problem = _tolerance(program, w).mismatch(g, w) if w.dtype.kind == "f" else Tolerance().mismatch(g, w)
        assert problem is None, f"{what}: output {i} {problem}"


@hypothesis.settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(programs())
def test_generated_program_on_the_compiled_tier_matches_xla(program):
    want = _run(program, "cpu")
    try:
        got = _run(program, NUMBA, numba_cpu_tiered=False)
        _compare(program, got, want, "compiled tier")
        eager = _eager(program)
        if eager is not None:
            _compare(program, eager, want, "eager tier")
    except BaseException:
        hypothesis.note(jax.jit(program.function()).lower(*program.arguments()).as_text())
        raise
