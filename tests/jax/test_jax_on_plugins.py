"""JAX's own behaviours on numba_cpu, through JAX, compared with JAX on XLA's CPU backend.

Every program here is plain JAX: jitted on arrays committed to a numba_cpu device, and on arrays
committed to JAX's CPU device; the results must agree in dtype, shape and value. What JAX cannot
do on a served plugin is data (:data:`pjrt_hub.jax.JAX_LIMITATIONS`), each a strict xfail with its
reason. Programs are few and small: each is a numba compile (cold on CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jaxlib")

from .conftest import FAULTY, NUMBA, REFERENCE, WITH_LAYOUTS, register_all  # noqa: E402

SERVED = register_all()  # before anything makes JAX create its backends

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import pjrt_hub.jax as pj  # noqa: E402
from pjrt_hub.abi import FailedPrecondition  # noqa: E402
from pjrt_hub.jax import limitation  # noqa: E402

TOLERANCE = {np.dtype(np.float32): (2e-5, 1e-6), np.dtype(np.float64): (1e-12, 1e-14),
             np.dtype(jnp.bfloat16): (1e-2, 1e-2), np.dtype(np.float16): (2e-3, 1e-3),
             np.dtype(np.complex64): (2e-5, 1e-6), np.dtype(np.complex128): (1e-12, 1e-14)}


def _on(platform: str, f, *args, device: int = 0):
    target = jax.devices(platform)[device]
    placed = jax.tree.map(lambda a: jax.device_put(a, target), args)
    return jax.jit(f)(*placed)


def assert_like_xla(f, *args, platform: str = NUMBA):
    """``f`` jitted on the plugin gives what it gives on XLA's CPU backend."""
    want = jax.tree.leaves(_on("cpu", f, *args))
    got = jax.tree.leaves(_on(platform, f, *args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g.devices())[0].platform == platform
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        rtol, atol = TOLERANCE.get(np.dtype(w.dtype), (0, 0))
        wide = np.complex128 if np.issubdtype(w.dtype, np.complexfloating) else np.float64
        np.testing.assert_allclose(np.asarray(g, dtype=wide), np.asarray(w, dtype=wide), rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def served() -> dict:
    return SERVED


def xfail_limitation(key: str):
    entry = limitation(key)
    return pytest.mark.xfail(reason=f"{entry.feature}: {entry.reason}", strict=True)


RNG = np.random.default_rng(17)


def normal(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# -- the backend ---------------------------------------------------------------------------------


def test_the_plugin_is_a_jax_backend_that_is_not_the_default(served):
    devices = jax.devices(NUMBA)
    assert len(devices) == 4 and [d.id for d in devices] == [0, 1, 2, 3]
    assert {d.platform for d in devices} == {NUMBA}
    assert jax.default_backend() == "cpu"  # registering never moves a user's default device
    assert served[NUMBA].version == pj.registered()[NUMBA].version
    assert served[NUMBA].calls["PJRT_Client_Create"] == 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int8", "uint32", "bool"])
def test_device_put_and_back(dtype):
    host = (np.arange(12) - 5).astype(jnp.dtype(dtype)).reshape(3, 4)
    on_device = jax.device_put(host, jax.devices(NUMBA)[1])
    assert on_device.devices() == {jax.devices(NUMBA)[1]}
    back = np.asarray(on_device)
    assert back.dtype == host.dtype and (back == host).all()
    moved = jax.device_put(on_device, jax.devices(NUMBA)[2]).block_until_ready()
    assert moved.devices() == {jax.devices(NUMBA)[2]} and (np.asarray(moved) == host).all()


@pytest.mark.parametrize("host", [np.float32(2.5), np.zeros((0, 3), np.float32), np.zeros((2, 0, 1), np.int32)],
                         ids=["0-d", "zero-size", "zero-size-3d"])
def test_edge_shapes_round_trip_and_compute(host):
    back = np.asarray(jax.device_put(host, jax.devices(NUMBA)[0]))
    assert back.shape == np.shape(host) and back.dtype == np.asarray(host).dtype
    assert_like_xla(lambda a: (a + 1, a.sum()), host)


# -- numerics: jnp elementwise and reductions over dtypes ----------------------------------------


def _elementwise_and_reductions(a, b):
    mixed = a * b + a - b
    return mixed, jnp.sum(a, axis=0), jnp.max(mixed), jnp.min(b, axis=1), jnp.maximum(a, b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "uint8"])
def test_elementwise_and_reductions(dtype):
    dt = jnp.dtype(dtype)
    a = (normal(3, 4) * 3).astype(dt) if dt.kind == "f" or dtype == "bfloat16" else RNG.integers(0, 9, (3, 4)).astype(dt)
    b = (normal(3, 4) * 3).astype(dt) if dt.kind == "f" or dtype == "bfloat16" else RNG.integers(0, 9, (3, 4)).astype(dt)
    assert_like_xla(_elementwise_and_reductions, a, b)


def test_transcendentals_and_statistics_float32():
    a = normal(4, 5)
    assert_like_xla(lambda x: (jnp.exp(x), jnp.tanh(x), jnp.log1p(jnp.abs(x)), jnp.sqrt(jnp.abs(x)),
                               jax.nn.softmax(x), jnp.mean(x), jnp.var(x, axis=1), jnp.cumsum(x, axis=1)), a)


def test_float64_with_x64():
    with jax.enable_x64(True):
        a, b = normal(3, 4, dtype=np.float64), normal(3, 4, dtype=np.float64)
        assert_like_xla(lambda x, y: (jnp.sin(x) * y, jnp.sum(x * y), x @ y.T), a, b)


def test_bool_logic():
    a, b = normal(3, 4) > 0, normal(3, 4) > 0
    assert_like_xla(lambda x, y: ((x & y) | ~x, jnp.any(x, axis=1), jnp.all(y)), a, b)


# -- transformations -----------------------------------------------------------------------------


def test_lax_control_flow():
    def f(x):
        count, grown = lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))
        branch = lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, x)
        carry, ys = lax.scan(lambda c, row: (c + row, c * row), jnp.zeros(4, x.dtype), x)
        looped = lax.fori_loop(0, 3, lambda i, v: v + i, x)
        return count, grown, branch, carry, ys, looped

    assert_like_xla(f, normal(3, 4))


def test_vmap():
    assert_like_xla(jax.vmap(lambda v, w: jnp.dot(v, w) + jnp.max(v)), normal(5, 4), normal(5, 4))


def _corpus_mlp_step():
    """The corpus MLP (3-layer ReLU, softmax cross-entropy) and its data, as JAX code."""
    data = np.load(resources.files("pjrt_hub") / "data" / "corpus" / "public" / "mlp_train_step.npz")
    arrays = [data[f"in{i}"] for i in range(8)]
    params = dict(zip(["b1", "b2", "b3", "w1", "w2", "w3"], arrays[:6]))

    def loss_fn(p, x, labels):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        logp = jax.nn.log_softmax(h @ p["w3"] + p["b3"])
        return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, 10) * logp, axis=-1))

    def step(p, x, labels):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, labels)
        return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads), loss

    return step, params, arrays[6], arrays[7]


def test_grad_of_the_corpus_mlp():
    step, params, x, labels = _corpus_mlp_step()
    assert_like_xla(step, params, x, labels)


def test_random():
    key = np.array([0, 42], np.uint32)
    assert_like_xla(lambda k: (jax.random.normal(jax.random.wrap_key_data(k), (6,)),
                               jax.random.uniform(jax.random.wrap_key_data(k), (2, 3))), key)


def test_sort_argsort_top_k():
    assert_like_xla(lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=0), lax.top_k(x, 2)), normal(4, 6))


def test_convolution():
    image, kernel = normal(2, 3, 9, 9), normal(4, 3, 3, 3)
    assert_like_xla(lambda x, k: (lax.conv_general_dilated(x, k, (1, 1), "SAME"),
                                  lax.conv_general_dilated(x, k, (2, 2), "VALID")), image, kernel)


def test_scatter_and_gather():
    table, index = normal(5, 3), np.array([4, 0, 4, 2], np.int32)
    assert_like_xla(lambda t, i: (t[i], t.at[i].add(1.0), t.at[i, 1].set(7.0), jnp.take(t, i, axis=0).sum()),
                    table, index)


# -- the runtime as JAX sees it --------------------------------------------------------------------


def test_donation_consumes_the_argument():
    device = jax.devices(NUMBA)[0]
    x = jax.device_put(np.arange(8, dtype=np.float32), device)
    y = jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    assert x.is_deleted()
    assert (np.asarray(y) == np.arange(8, dtype=np.float32) * 2).all()
    with pytest.raises(RuntimeError, match="deleted"):
        np.asarray(x)


def test_block_until_ready_on_work_run_by_a_device_thread():
    a = jax.device_put(normal(96, 96), jax.devices(NUMBA)[3])
    result = jax.jit(lambda m: jnp.tanh(m @ m) @ m)(a)
    assert result.block_until_ready() is result
    np.testing.assert_allclose(np.asarray(result), np.asarray(_on("cpu", lambda m: jnp.tanh(m @ m) @ m, a)),
                               rtol=1e-4, atol=1e-4)


def test_an_error_raised_inside_a_program_reaches_python_as_xlas_do():
    device = jax.devices(FAULTY)[0]
    f = jax.jit(lambda a: a + 1)
    assert (np.asarray(f(jax.device_put(np.ones(3, np.float32), device))) == 2).all()
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL: .*faulty: argument 0 holds a negative"):
        np.asarray(f(jax.device_put(-np.ones(3, np.float32), device)))


def test_a_program_the_plugin_cannot_compile_is_a_jax_runtime_error():
    a = jax.device_put(normal(3, 3), jax.devices(NUMBA)[0])
    call = jax.ffi.ffi_call("pjrt_hub_no_such_target", jax.ShapeDtypeStruct((3, 3), jnp.float32))
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match="UNIMPLEMENTED: unsupported op 'stablehlo.custom_call @pjrt_hub_no_such_target'"):
        jax.jit(call)(a)


def test_the_reference_interpreter_serves_too():
    assert_like_xla(lambda a, b: (a @ b, jnp.exp(a).sum(axis=1)), normal(3, 4), normal(4, 2), platform=REFERENCE)


def test_jax_reads_layouts_and_memory_kinds_from_the_plugin_extensions(served):
    device = jax.devices(WITH_LAYOUTS)[0]
    x = jax.device_put(np.arange(6, dtype=np.float32).reshape(2, 3), device)
    y = jax.jit(lambda a: a.T * 2)(x)
    assert x.format.layout.major_to_minor == (0, 1) and y.format.layout.major_to_minor == (0, 1)
    assert (np.asarray(y) == np.arange(6, dtype=np.float32).reshape(2, 3).T * 2).all()
    asked = served[WITH_LAYOUTS].calls
    assert asked["PJRT_Layouts_PJRT_Buffer_MemoryLayout"] and asked["PJRT_Layouts_PJRT_Executable_GetOutputLayouts"]
    pinned = jax.device_put(np.ones(3, np.float32), jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host"))
    assert pinned.sharding.memory_kind == "pinned_host" and (np.asarray(pinned) == 1).all()


def test_registering_after_jax_made_its_backends_is_refused_with_the_way_out():
    with pytest.raises(FailedPrecondition, match="before the first use of JAX.*PJRT_HUB_JAX_PLUGINS"):
        pj.register(NUMBA, name="late_numba")


# -- several devices -----------------------------------------------------------------------------


def test_jit_follows_the_device_its_arguments_are_committed_to():
    out = _on(NUMBA, lambda a: a * 3, np.arange(4, dtype=np.float32), device=2)
    assert out.devices() == {jax.devices(NUMBA)[2]}


def test_jit_of_sharded_arrays_over_four_devices():
    mesh = Mesh(np.array(jax.devices(NUMBA)), ("x",))
    sharded = NamedSharding(mesh, P("x"))
    x = jax.device_put(np.arange(16, dtype=np.float32).reshape(8, 2), sharded)
    y = jax.jit(lambda a: jnp.sin(a) * 2, out_shardings=sharded)(x)
    assert y.sharding == sharded and [s.data.shape for s in y.addressable_shards] == [(2, 2)] * 4
    np.testing.assert_allclose(np.asarray(y), np.sin(np.asarray(x)) * 2, rtol=2e-6, atol=1e-6)
    total = jax.jit(lambda a: a.sum(axis=0))(x)  # output sharding left to the plugin: replicated
    np.testing.assert_allclose(np.asarray(total), np.asarray(x).sum(axis=0), rtol=1e-6)


def test_a_chain_of_sharded_jits_hands_results_on_without_copying(monkeypatch):
    """A global-view result's parts are views of one array, side by side: the next program reads
    them in place as its global input (no gather copy), and a donated part does not disturb the
    other parts or the arrays they came from."""
    from pjrt_hub.jax import _spmd

    gathered = []
    adjacent = _spmd._adjacent
    monkeypatch.setattr(_spmd, "_adjacent", lambda *a: gathered.append(adjacent(*a)) or gathered[-1])
    mesh = Mesh(np.array(jax.devices(NUMBA)), ("x",))
    host = np.arange(64, dtype=np.float32).reshape(16, 4)
    x = jax.device_put(host, NamedSharding(mesh, P("x")))
    y = jax.jit(lambda a: a * 2 + 1)(x)
    pointers = [s.data.unsafe_buffer_pointer() for s in y.addressable_shards]
    assert [p - pointers[0] for p in pointers] == [i * 4 * 4 * 4 for i in range(4)]
    gathered.clear()
    z = jax.jit(lambda a: jnp.sqrt(a) - 1)(y)
    assert len(gathered) == 1 and gathered[0] is not None, "the parts of y were copied into a new global array"
    np.testing.assert_allclose(np.asarray(z), np.sqrt(host * 2 + 1) - 1, rtol=1e-6)
    w = jax.jit(lambda a: a * 0 - 5, donate_argnums=0)(y)  # may reuse y's storage only by copying
    np.testing.assert_array_equal(np.asarray(w), np.full((16, 4), -5, np.float32))
    np.testing.assert_allclose(np.asarray(z), np.sqrt(host * 2 + 1) - 1, rtol=1e-6)
    # Parts that are not side by side (device_put one by one) are gathered by copying, correctly.
    parts = [jax.device_put(np.array(host[4 * i:4 * i + 4]), d) for i, d in enumerate(jax.devices(NUMBA)[:4])]
    spread = jax.make_array_from_single_device_arrays((16, 4), NamedSharding(mesh, P("x")), parts)
    gathered.clear()
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: a + 1)(spread)), host + 1)
    assert len(gathered) == 1 and gathered[0] is None


def test_a_donated_sharded_array_is_donated_on_every_device():
    mesh = Mesh(np.array(jax.devices(NUMBA)), ("x",))
    x = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("x")))
    y = jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    np.testing.assert_array_equal(np.asarray(y), np.arange(8) * 2)
    assert x.is_deleted()
    with pytest.raises(RuntimeError, match="deleted or donated"):
        jax.device_put(x, NamedSharding(mesh, P("x"))).block_until_ready()


def _spec(sharding):
    """A PartitionSpec without its trailing Nones (JAX prints P('x', None) and P('x',) alike)."""
    parts = list(sharding.spec)
    while parts and parts[-1] is None:
        parts.pop()
    return P(*parts)


# What XLA's propagation gives on JAX's CPU with four devices (JAX 0.10.2), per input sharding:
# an elementwise chain, a product then a reduction, a sharding constraint, a transpose.
_PROPAGATED = {"x_rows": (P("x"), P("x"), P(None, "x"), P(None, "x")),
               "x_cols": (P(None, "x"), P(), P(None, "x"), P("x"))}


@pytest.mark.parametrize("spec, case", [(P("x", None), "x_rows"), (P(None, "x"), "x_cols")], ids=str)
def test_a_jit_that_leaves_output_shardings_to_the_compiler_gets_the_ones_xla_propagates(spec, case):
    mesh = Mesh(np.array(jax.devices(NUMBA)), ("x",))
    host = np.arange(64, dtype=np.float32).reshape(8, 8) - 20
    x = jax.device_put(host, NamedSharding(mesh, spec))
    replicated = jax.device_put(np.full((8, 8), 0.5, np.float32), NamedSharding(mesh, P()))
    y = jax.jit(lambda a, r: jnp.maximum(a * 2 + 1, r) - jnp.tanh(a))(x, replicated)
    z = jax.jit(lambda a: (a @ a.T).sum(axis=1) + 1)(x)
    c = jax.jit(lambda a: jax.lax.with_sharding_constraint(jnp.exp(a / 8), NamedSharding(mesh, P(None, "x"))) * 2)(x)
    t = jax.jit(lambda a: a.T * 3)(x)
    assert [_spec(v.sharding) for v in (y, z, c, t)] == list(_PROPAGATED[case])
    for value in (y, z, c, t):  # each device holds its part
        assert [s.data.shape for s in value.addressable_shards] == [value.sharding.shard_shape(value.shape)] * 4
    np.testing.assert_allclose(np.asarray(y), np.maximum(host * 2 + 1, 0.5) - np.tanh(host), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(z), (host @ host.T).sum(axis=1) + 1, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(c), np.exp(host / 8) * 2, rtol=2e-6)
    np.testing.assert_array_equal(np.asarray(t), host.T * 3)


def test_scalars_and_random_draws_on_an_explicit_mesh():
    """Under jax.set_mesh a scalar goes through a 4-partition program, replicated: it stays a
    scalar (np.ascontiguousarray made it 1-d); a draw with out_sharding gives JAX's CPU's values."""
    from jax import random

    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,), devices=jax.devices(NUMBA)[:4])
    with jax.set_mesh(mesh):
        assert jnp.asarray(np.int32(3)).shape == ()
        u = random.uniform(random.key(0), (4,), out_sharding=NamedSharding(mesh, P("x")))
        assert _spec(u.sharding) == P("x")
        # JAX 0.10.2's CPU with four devices gives these (threefry, the default PRNG).
        np.testing.assert_allclose(np.asarray(u), [0.9476670026779175, 0.9785798788070679, 0.33229148387908936,
                                                   0.46866846084594727], rtol=1e-7)


def test_pmap_and_shard_map_run_per_device():
    devices = jax.devices(NUMBA)
    out = jax.pmap(lambda a: a * a + 1, devices=devices)(np.arange(4, dtype=np.float32))
    assert (np.asarray(out) == np.arange(4, dtype=np.float32) ** 2 + 1).all()
    mesh = Mesh(np.array(devices), ("x",))
    f = jax.jit(jax.shard_map(lambda a: a - a.mean(), mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    x = np.arange(8, dtype=np.float32)
    assert (np.asarray(f(x)) == x - np.repeat(x.reshape(4, 2).mean(axis=1), 2)).all()


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_numbers(dtype):
    with jax.enable_x64(dtype == np.complex128):
        z = (normal(3, 4) + 1j * normal(3, 4)).astype(dtype)
        w = (normal(4) + 1j * normal(4)).astype(dtype)
        assert_like_xla(lambda a, b: (a * a + 1, jnp.sum(a, axis=0), a @ b, jnp.abs(a), a.real, jnp.exp(a)), z, w)


# -- limitations (strict xfails: a gap that closes fails here until its entry goes) -------------


@pytest.mark.parametrize("platform", [NUMBA, REFERENCE])
def test_linalg_inv_solve_cholesky_and_a_multivariate_normal(platform):
    m = normal(4, 4) + 4 * np.eye(4, dtype=np.float32)
    assert_like_xla(lambda m: (jnp.linalg.inv(m), jnp.linalg.solve(m, m[:, :2]), jnp.linalg.cholesky(m @ m.T),
                               jnp.linalg.slogdet(m)[1]), m, platform=platform)
    assert_like_xla(lambda m: jax.scipy.stats.multivariate_normal.logpdf(m[0], m[1], m @ m.T), m, platform=platform)


@pytest.mark.parametrize("platform", [NUMBA, REFERENCE])
def test_fft_special_functions_top_k_and_views(platform):
    """Ops JAX emits that a first fuzz run against XLA found missing: FFT, digamma and friends,
    nextafter (truncated_normal), approx_max_k, bitcasts to another width, sharding constraints."""
    x = normal(4, 8)
    assert_like_xla(lambda x: (jnp.fft.rfft(x), jnp.fft.irfft(jnp.fft.rfft(x), n=8), jnp.fft.fft2(x.astype(jnp.complex64))),
                    x, platform=platform)
    assert_like_xla(lambda x: (jax.scipy.special.digamma(jnp.abs(x) + 0.5), jax.scipy.special.i1e(x),
                               jax.scipy.special.polygamma(1, jnp.abs(x) + 0.5), jnp.nextafter(x, 0.0)),
                    x, platform=platform)
    assert_like_xla(lambda x: jax.lax.approx_max_k(x, 3), x, platform=platform)
    assert_like_xla(lambda x: (x.view(jnp.uint8), x.view(jnp.uint8).view(jnp.float32) + 1), x, platform=platform)
    assert_like_xla(lambda k: jax.random.truncated_normal(k, -1.0, 1.0, (5,)), jax.random.key_data(jax.random.key(0)),
                    platform=platform)


@pytest.mark.parametrize("platform", [NUMBA, REFERENCE])
def test_linalg_qr_eigh_svd_and_what_is_built_on_them(platform):
    """QR's custom calls and eigh (lowered as JAX lowers it for TPUs, to @Eigh) run on the host's
    LAPACK: values as XLA gives them; singular values and pseudo-inverses from the polar SVD.
    (A full-rank Gram matrix: the zero eigenvalue of a rank-deficient one is rounding noise.)"""
    m = normal(4, 3)
    assert_like_xla(lambda m: (jnp.linalg.qr(m)[1], jnp.linalg.eigh(m.T @ m)[0], jnp.linalg.svd(m)[1],
                               jnp.linalg.pinv(m), jnp.linalg.eigvalsh(m[:3] + 1j * m[:3].T)),
                    m, platform=platform)
    q, r = jax.jit(jnp.linalg.qr)(jax.device_put(m, jax.devices(platform)[0]))
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), m, atol=1e-5)


@xfail_limitation("linalg_decompositions")
def test_linalg_eig_of_a_general_matrix():
    assert_like_xla(lambda m: jnp.abs(jnp.linalg.eig(m)[0]), normal(3, 3))


def test_collectives_in_pmap():
    """psum, all_gather, ppermute and axis_index inside pmap meet in numba_cpu's CPU runtime."""
    ring = [(k, (k + 1) % 4) for k in range(4)]

    def step(a):
        return lax.psum(a, "i"), lax.all_gather(a, "i"), lax.ppermute(a, "i", ring), lax.axis_index("i")

    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    total, gathered, permuted, index = jax.pmap(step, axis_name="i", devices=jax.devices(NUMBA))(x)
    np.testing.assert_array_equal(np.asarray(total), np.broadcast_to(x.sum(0), (4, 2)))
    np.testing.assert_array_equal(np.asarray(gathered), np.broadcast_to(x, (4, 4, 2)))
    np.testing.assert_array_equal(np.asarray(permuted), np.roll(x, 1, axis=0))
    np.testing.assert_array_equal(np.asarray(index), np.arange(4))


def test_psum_in_shard_map():
    mesh = Mesh(np.array(jax.devices(NUMBA)), ("i",))
    f = jax.jit(jax.shard_map(lambda v: lax.psum(v, "i"), mesh=mesh, in_specs=P("i"), out_specs=P()))
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), x.reshape(4, 2).sum(0))


@xfail_limitation("host_callbacks")
def test_debug_print():
    jax.jit(lambda a: jax.debug.print("{a}", a=a) or a)(jax.device_put(np.ones(2, np.float32), jax.devices(NUMBA)[0]))


@xfail_limitation("partial_manual")
def test_shard_map_over_some_axes_of_a_mesh():
    mesh = Mesh(np.array(jax.devices(NUMBA)).reshape(2, 2), ("a", "b"))
    f = jax.jit(jax.shard_map(lambda v: v * 2, mesh=mesh, in_specs=P("a"), out_specs=P("a"), axis_names={"a"}))
    assert (np.asarray(f(np.arange(4, dtype=np.float32))) == np.arange(4) * 2).all()


def test_tokens_pass_through_jitted_functions():
    from jax._src import core

    with jax.default_device(jax.devices(NUMBA)[0]):
        token = jax.lax.create_token()
        _, same = jax.jit(lambda a, t: (a, t))(jnp.ones(3), token)
        value, joined = jax.jit(lambda a, t: (a + 1, lax.after_all(t, t)))(jnp.ones(3), same)
    assert isinstance(same, core.Token) and isinstance(joined, core.Token) and same is not token
    np.testing.assert_array_equal(np.asarray(value), [2, 2, 2])


@xfail_limitation("noncanonical_bools")
def test_a_boolean_holding_another_byte_views_as_that_byte():
    stored = np.array([96], np.uint8).view(np.bool_)
    x = jax.device_put(stored, jax.devices(NUMBA)[0])
    assert int(np.asarray(jax.jit(lambda b: b.view(jnp.int8))(x))[0]) == 96


@xfail_limitation("token_buffers")
def test_a_token_buffer_is_not_an_array():
    with jax.default_device(jax.devices(NUMBA)[0]):
        token = jax.lax.create_token()
    with pytest.raises(RuntimeError, match="token"):
        token._buf._value  # noqa: B018


def test_a_compile_option_nobody_takes_is_refused_by_name():
    lowered = jax.jit(lambda x: x + 1.0).lower(jax.device_put(np.float32(1), jax.devices(NUMBA)[0]))
    with pytest.raises(jax.errors.JaxRuntimeError, match="No such compile option: 'invalid_key'"):
        lowered.compile(compiler_options={"invalid_key": "invalid_value"})
    assert float(lowered.compile(compiler_options={"xla_embed_ir_in_executable": True})(np.float32(2))) == 3.0


@xfail_limitation("xla_option_values")
def test_an_xla_option_value_xla_would_refuse():
    lowered = jax.jit(lambda x: x + 1.0).lower(jax.device_put(np.float32(1), jax.devices(NUMBA)[0]))
    with pytest.raises(jax.errors.JaxRuntimeError, match="is not a valid bool value"):
        lowered.compile(compiler_options={"xla_embed_ir_in_executable": "invalid_value"})


@xfail_limitation("manual_inside_a_loop")
def test_pmap_inside_a_traced_loop():
    devices = jax.devices(NUMBA)[:4]

    def body(i, x):
        return jax.pmap(lambda z: lax.psum(jnp.sin(z), "i"), devices=devices, axis_name="i")(x) + x

    out = jax.jit(lambda x: lax.fori_loop(0, 3, body, x), device=devices[0])(jnp.ones(4))
    assert np.isfinite(np.asarray(out)).all()


@xfail_limitation("platform_identity")
def test_platform_dependent_takes_the_cpu_branch():
    x = jax.device_put(np.arange(3, dtype=np.float32), jax.devices(NUMBA)[0])
    out = jax.jit(lambda a: lax.platform_dependent(a, cpu=jnp.sin, default=jnp.cos))(x)
    np.testing.assert_allclose(np.asarray(out), np.sin(np.arange(3, dtype=np.float32)), rtol=1e-6)


def test_platform_dependent_takes_the_branch_named_for_the_plugin():
    x = jax.device_put(np.arange(3, dtype=np.float32), jax.devices(NUMBA)[0])
    out = jax.jit(lambda a: lax.platform_dependent(a, numba_cpu=jnp.sin, default=jnp.cos))(x)
    np.testing.assert_allclose(np.asarray(out), np.sin(np.arange(3, dtype=np.float32)), rtol=1e-6)


# -- opt-in registration through the jax_plugins entry point -------------------------------------


def _devices_in_fresh_python(env_value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != pj.ENV_PLUGINS}
    if env_value is not None:
        env[pj.ENV_PLUGINS] = env_value
    code = ("import json, jax\n"
            "try:\n    found = [d.platform for d in jax.devices('reference')]\n"
            "except RuntimeError as e:\n    found = str(e)\n"
            "print(json.dumps({'reference': found, 'default': jax.default_backend()}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_jax_registers_the_plugins_named_in_the_environment_and_no_others():
    assert _devices_in_fresh_python("reference") == {"reference": ["reference"] * 4, "default": "cpu"}
    silent = _devices_in_fresh_python(None)
    assert silent["default"] == "cpu" and "Unknown backend" in silent["reference"]


# -- bench --via jax (its pieces; the timings themselves are not tested) --------------------------


def test_bench_rebuilds_the_perf_programs_as_jax_functions_of_their_pytrees():
    from pjrt_hub._bench import perf_programs
    from pjrt_hub.jax._bench import _perf_function

    entry = next(e for e in perf_programs() if e["name"] == "perf_mlp_forward")
    fn, args = _perf_function(entry)
    params, x = args
    assert sorted(params) == ["b1", "b2", "b3", "w1", "w2", "w3"] and x.shape == (1024, 1024)
    assert jax.eval_shape(fn, params, x).shape == (1024, 128)


def test_bench_report_names_what_failed():
    from pjrt_hub.jax._bench import failures, format_jax_report

    report = {"plugins": [NUMBA], "programs": ["perf_softmax"], "note": "noisy",
              "through_jax": [{"platform": "cpu", "dispatch_us": 9.0, "round_trip_us": 20.0, "tiny_first_call_ms": 30.0,
                               "programs": [{"name": "perf_softmax", "execute_ms_median": 2.0, "first_call_ms": 40.0,
                                             "outputs_match": True}]},
                              {"platform": NUMBA, "dispatch_us": 40.0, "round_trip_us": 60.0, "tiny_first_call_ms": 900.0,
                               "programs": [{"name": "perf_softmax", "execute_ms_median": 3.0, "first_call_ms": 4000.0,
                                             "first_calls_ms_mean": 123.25, "outputs_match": False}]}],
              "direct": {NUMBA: {"tiny_execute_us": 11.0, "programs": {"perf_softmax": {"execute_ms_median": 2.5}}}}}
    text = format_jax_report(report)
    assert "XLA:CPU" in text and "3.00 (DIFFER)" in text and "2.50" in text
    assert "numba_cpu first calls" in text and "123.25" in text
    assert failures(report) == ["perf_softmax on numba_cpu through JAX: outputs differ from the manifest"]


def test_bench_times_the_first_calls_then_waits_for_the_compiled_tier_before_steady_state(monkeypatch):
    from pjrt_hub._bench import FIRST_CALLS, FIRST_WARM, time_first_calls
    from pjrt_hub.backends.numba_cpu import tiers
    from pjrt_hub.jax import _bench

    order = []
    monkeypatch.setattr(tiers, "settle", lambda timeout=None: order.append("settle") or True)
    assert time_first_calls(lambda: order.append("call")) is not None
    _bench._settle()
    assert order == ["call"] * (FIRST_WARM + FIRST_CALLS) + ["settle"]


@pytest.mark.parametrize("spec", [P("x"), P(None, "x"), P(("a", "b")), P("b"), P("b", "a"), P()],
                         ids=str)
def test_the_shardings_reported_to_jax_are_the_ones_jax_means(spec):
    from jax._src import op_shardings
    from jax._src.lib import xla_client

    from pjrt_hub.jax._programs import Mesh as ShardyMesh, Sharding

    names = {n for part in spec if part for n in ((part,) if isinstance(part, str) else part)}
    shape = (4, 4)
    if "x" in names:
        mesh, shardy = Mesh(np.array(jax.devices(NUMBA)), ("x",)), ShardyMesh((("x", 4),))
    else:
        mesh, shardy = Mesh(np.array(jax.devices(NUMBA)).reshape(2, 2), ("a", "b")), ShardyMesh((("a", 2), ("b", 2)))
    theirs = NamedSharding(mesh, spec)._to_xla_hlo_sharding(len(shape))
    dims = [() if part is None else ((part,) if isinstance(part, str) else tuple(part)) for part in spec]
    ours = Sharding(shardy, tuple(dims + [()] * (len(shape) - len(dims)))).op_sharding(len(shape))
    proto = xla_client.OpSharding()
    proto.ParseFromString(ours)
    assert op_shardings.are_hlo_shardings_equal(xla_client.HloSharding.from_proto(proto), theirs)
    # and each device (partition p is the p-th device of the mesh) holds the part JAX puts there
    ours_sharding = Sharding(shardy, tuple(dims + [()] * (len(shape) - len(dims))))
    index_map = NamedSharding(mesh, spec).addressable_devices_indices_map(shape)
    for p, device in enumerate(mesh.devices.flat):
        expected = tuple(slice(*s.indices(n)[:2]) for s, n in zip(index_map[device], shape))
        assert ours_sharding.slices(shape, p) == expected
