"""A new user's first JAX program on numba_cpu's compiled tier, through JAX, against XLA's CPU.

The training step (a ``lax.scan`` of ``jax.value_and_grad`` steps that draw ``jax.random.normal``
batches, take a ``lax.dynamic_slice`` of each, use ``jnp.where`` and round the weights through
bfloat16) is compiled with the eager tier off (the compile option ``numba_cpu_tiered``), so a
lowering error surfaces as the compile error it is, not as a program that quietly stays eager.
tests/backends/numba_cpu/test_loop_bodies.py keeps the StableHLO of it and its reductions.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jaxlib")

from .conftest import NUMBA, register_all  # noqa: E402

register_all()  # before anything makes JAX create its backends

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402


def _loss(w, x, y):
    pred = jnp.tanh(x @ w)
    return jnp.mean(jnp.where(pred > 0, (pred - y) ** 2, 0.5 * (pred - y) ** 2))


def _train(w, key):
    def step(carry, i):
        w, key = carry
        key, sub = jax.random.split(key)
        x = jax.random.normal(sub, (32, 16))
        xb = lax.dynamic_slice(x, (i % 4, 0), (16, 16))
        y = jnp.sin(xb.sum(axis=1, keepdims=True))
        loss, grad = jax.value_and_grad(_loss)(w, xb, y)
        w = (w - 0.1 * grad).astype(jnp.bfloat16).astype(jnp.float32)
        return (w, key), loss

    (w, key), losses = lax.scan(step, (w, key), jnp.arange(8))
    return w, losses


def _run(platform: str, **compiler_options):
    device = jax.devices(platform)[0]
    w = jax.device_put(jnp.zeros((16, 1), jnp.float32), device)
    key = jax.device_put(jax.random.PRNGKey(0), device)
    compiled = jax.jit(_train).lower(w, key).compile(compiler_options or None)
    return [np.asarray(a) for a in compiled(w, key)]


def test_first_training_step_on_the_compiled_tier_matches_xla():
    got = _run(NUMBA, numba_cpu_tiered=False)
    want = _run("cpu")
    (w_got, losses_got), (w_want, losses_want) = got, want
    for g, w in ((w_got, w_want), (losses_got, losses_want)):
        assert g.shape == w.shape and g.dtype == w.dtype
    np.testing.assert_allclose(losses_got, losses_want, rtol=2e-5, atol=1e-6)
    # numba_cpu's tanh is its own: an ulp of difference on the rounding edge of a bfloat16 would
    # move a weight by one bfloat16 step.
    np.testing.assert_allclose(w_got, w_want, rtol=2.0**-7, atol=1e-6)
    assert (losses_want > 0).all()
