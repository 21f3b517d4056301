"""jax: what a JAX user relies on, with JAX driving the plugin (``--pjrt-via jax`` only).

The plugin is served to JAX as a ``PJRT_Api`` (:mod:`pjrt_hub.jax`) and these cases use plain JAX on
its devices: the devices JAX lists, transfers both ways over element types and edge shapes, jit
against numpy, donation, ``block_until_ready``, a program the plugin cannot compile, and programs
over several devices. They skip unless the run serves the plugin to JAX.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._case import case, check, skip
from .._context import PluginUnderTest


def _jax(ctx: PluginUnderTest) -> tuple[Any, str]:
    backend = ctx.probe.jax_backend if ctx.probe is not None else None
    if not backend:
        skip("a check of a plugin served to JAX (pjrt-hub conformance --via jax)")
    import jax

    return jax, backend


def _devices(ctx: PluginUnderTest) -> tuple[Any, list[Any]]:
    jax, backend = _jax(ctx)
    devices = ctx.call(jax.devices, backend, what="jax.devices", timeout=60.0)
    check(devices, f"jax.devices({backend!r}) is empty")
    return jax, devices


@case("jax")
def devices(ctx: PluginUnderTest) -> None:
    """jax.devices(NAME) lists the plugin's addressable devices, with the plugin's platform and ids,
    and the plugin does not become JAX's default backend."""
    jax, found = _devices(ctx)
    _jax_module, backend = _jax(ctx)
    ids = sorted(d.id for d in found)
    own = sorted(int(d.get_description().id()) for d in ctx.devices)
    check(ids == own, f"JAX lists devices {ids}; the plugin's addressable devices are {own}")
    check({d.platform for d in found} == {backend}, f"JAX's devices have platforms {sorted({d.platform for d in found})}")
    check(jax.default_backend() != backend, f"registering {backend} made it JAX's default backend")


@case("jax")
def transfers(ctx: PluginUnderTest) -> None:
    """jax.device_put and np.asarray round-trip f32, bf16, int8 and bool arrays, a 0-d and a
    zero-size one, unchanged."""
    jax, found = _devices(ctx)
    import ml_dtypes

    samples: list[np.ndarray | np.generic] = [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4).astype(ml_dtypes.bfloat16),
               np.array([-3, 0, 7], np.int8), np.array([True, False]), np.float32(1.5),
               np.zeros((0, 4), np.float32)]
    for host in samples:
        back = np.asarray(ctx.call(lambda h=host: np.asarray(jax.device_put(h, found[0])), what="device_put"))
        check(back.dtype == np.asarray(host).dtype and back.shape == np.shape(host)
              and np.array_equal(back, np.asarray(host)),
              f"{np.asarray(host).dtype}{list(np.shape(host))} came back as {back.dtype}{list(back.shape)}: {back!r}")


@case("jax", timeout=120.0)
def jit(ctx: PluginUnderTest) -> None:
    """jax.jit of an elementwise chain and a reduction runs on the plugin's device and matches numpy."""
    jax, found = _devices(ctx)
    import jax.numpy as jnp

    host = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    f = jax.jit(lambda a: (jnp.tanh(a) * 2 + a, jnp.sum(a * a, axis=1)))
    out = ctx.call(lambda: f(jax.device_put(host, found[0])), what="jit", timeout=110.0)
    check(all(o.devices() == {found[0]} for o in out), f"results on {[o.devices() for o in out]}")
    np.testing.assert_allclose(np.asarray(out[0]), np.tanh(host) * 2 + host, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out[1]), np.sum(host * host, axis=1), rtol=1e-5)


@case("jax", timeout=120.0)
def donation(ctx: PluginUnderTest) -> None:
    """An argument given in donate_argnums is consumed: JAX reports it deleted after the call."""
    jax, found = _devices(ctx)
    x = jax.device_put(np.arange(5, dtype=np.float32), found[0])
    y = ctx.call(lambda: jax.jit(lambda a: a + 1, donate_argnums=0)(x), what="jit with donation", timeout=110.0)
    check(x.is_deleted(), "the donated argument is not deleted")
    check(np.array_equal(np.asarray(y), np.arange(5, dtype=np.float32) + 1), f"wrong result {np.asarray(y)}")


@case("jax", timeout=120.0)
def block_until_ready(ctx: PluginUnderTest) -> None:
    """block_until_ready returns the array once the plugin's computation is done."""
    jax, found = _devices(ctx)
    host = np.eye(32, dtype=np.float32) * 0.5
    out = ctx.call(lambda: jax.jit(lambda m: m @ m + m)(jax.device_put(host, found[-1])).block_until_ready(),
                   what="block_until_ready", timeout=110.0)
    np.testing.assert_allclose(np.asarray(out), host @ host + host, rtol=1e-6)


@case("jax", timeout=120.0)
def compile_error(ctx: PluginUnderTest) -> None:
    """A program the plugin refuses is a jax.errors.JaxRuntimeError carrying the plugin's code and
    message, and JAX goes on working after it."""
    jax, found = _devices(ctx)

    def refused() -> str:
        try:
            # A custom call to a target nothing implements: every plugin must refuse it.
            call = jax.ffi.ffi_call("pjrt_hub_no_such_target", jax.ShapeDtypeStruct((2,), np.float32))
            jax.jit(lambda a: call(a))(jax.device_put(np.ones(2, np.float32), found[0]))
        except jax.errors.JaxRuntimeError as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - JAX refusing to lower it is a skip, not a failure
            skip(f"JAX does not lower the test program for this platform: {type(exc).__name__}: {exc}")
        return ""

    message = ctx.call(refused, what="compiling a refused program", timeout=110.0)
    check(message, "the plugin compiled a custom call to a target that does not exist")
    check(message.split(":")[0] in ("UNIMPLEMENTED", "INVALID_ARGUMENT", "NOT_FOUND"),
          f"the error does not start with a PJRT code JAX shows: {message[:200]}")
    again = ctx.call(lambda: np.asarray(jax.device_put(np.ones(2, np.float32), found[0])), what="device_put")
    check(np.array_equal(again, np.ones(2, np.float32)), "JAX no longer works with the plugin after the error")


@case("jax", timeout=180.0)
def several_devices(ctx: PluginUnderTest) -> None:
    """jit of an array sharded over two devices and pmap over two devices give numpy's results."""
    jax, found = _devices(ctx)
    if len(found) < 2:
        skip(f"needs 2 devices; JAX lists {len(found)}")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(found[:2]), ("x",))
    sharding = NamedSharding(mesh, PartitionSpec("x"))
    host = np.arange(8, dtype=np.float32)

    def run() -> tuple[np.ndarray, np.ndarray]:
        x = jax.device_put(host, sharding)
        sharded = jax.jit(lambda a: a * 3, out_shardings=sharding)(x)
        pmapped = jax.pmap(lambda a: a - 1, devices=found[:2])(host.reshape(2, 4))
        return np.asarray(sharded), np.asarray(pmapped)

    sharded, pmapped = ctx.call(run, what="jit and pmap over two devices", timeout=170.0)
    check(np.array_equal(sharded, host * 3), f"sharded jit gave {sharded}")
    check(np.array_equal(pmapped, host.reshape(2, 4) - 1), f"pmap gave {pmapped}")
