"""``pjrt_hub.jax``: any pjrt-hub plugin as a JAX backend.

``register("numba_cpu")`` builds the plugin's ``PJRT_Api`` in process memory
(:class:`pjrt_hub.backends.c_api.server.ServedApi`) and hands it to JAX as a PyCapsule, the way JAX
loads a PJRT C plugin; ``jax.devices("numba_cpu")`` then lists the plugin's devices, and
``jax.jit`` on them compiles through the plugin. Nothing JAX-specific is in the struct: JAX is a
C caller like any other. What is JAX's is here: reading the StableHLO portable artifacts JAX sends
(:mod:`._programs`), running the SPMD programs JAX sends for several devices (:mod:`._spmd`), a
neutral platform name (JAX emits CPU-only custom calls for a platform called ``"cpu"``), and a
priority below JAX's own CPU backend, so registering never moves a user's default device.

With the ``jax_plugins`` entry point (installed with pjrt-hub), plain ``import jax`` registers the
plugins named in ``PJRT_HUB_JAX_PLUGINS`` (``numba_cpu,reference``), and nothing when it is unset.

Install with ``pip install 'pjrt-hub[jax]'``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from pjrt_hub.abi import FailedPrecondition, InvalidArgument, PjrtHubError

from ._limitations import JAX_LIMITATIONS, JaxLimitation, limitation

if TYPE_CHECKING:
    from pjrt_hub import PluginRegistry
    from pjrt_hub.backends.c_api.server import ServedApi

__all__ = ["DEFAULT_PRIORITY", "ENV_PLUGINS", "JAX_LIMITATIONS", "JaxLimitation", "JaxUnavailableError",
           "device_attributes_for_jax", "initialize", "limitation", "register", "registered"]

log = logging.getLogger("pjrt_hub.jax")

#: The environment variable that names the plugins plain ``import jax`` registers.
ENV_PLUGINS = "PJRT_HUB_JAX_PLUGINS"
#: Below JAX's CPU backend (0): a registered plugin is there when asked for, never the default.
DEFAULT_PRIORITY = -100

_LOCK = threading.Lock()
_REGISTERED: dict[str, "ServedApi"] = {}
#: JAX backend name -> the pjrt-hub plugin served under it.
_PLUGIN_OF: dict[str, str] = {}


class JaxUnavailableError(PjrtHubError, ImportError):
    """JAX (or jaxlib) is not installed, or too old to take a plugin as a PyCapsule."""


def _xla_bridge() -> Any:
    try:
        from jax._src import xla_bridge
    except ImportError as exc:
        raise JaxUnavailableError(f"pjrt_hub.jax needs JAX: pip install 'pjrt-hub[jax]' ({exc})") from None
    if "c_api" not in xla_bridge.register_plugin.__code__.co_varnames:
        raise JaxUnavailableError("this JAX cannot load a plugin from a PJRT_Api capsule "
                                  "(xla_bridge.register_plugin has no c_api argument); upgrade jax and jaxlib")
    return xla_bridge


def register(plugin: str = "numba_cpu", *, name: str | None = None, platform_name: str | None = None,
             priority: int = DEFAULT_PRIORITY, options: Mapping[str, Any] | None = None,
             donation: bool = True, registry: "PluginRegistry | None" = None) -> "ServedApi":
    """Make pjrt-hub plugin ``plugin`` a JAX backend called ``name`` (default: the plugin's name).

    :param platform_name: the platform JAX lowers for (default: ``name``). ``"cpu"`` makes JAX emit
        LAPACK custom calls that only XLA's CPU backend implements.
    :param priority: JAX's backend priority; the default keeps JAX's own CPU backend the default.
        A priority above 0 makes this plugin JAX's default backend.
    :param options: ``PJRT_Client_Create`` options (numba_cpu and reference take ``num_devices``).
    :param donation: let ``donate_argnums`` reach the plugin. JAX keeps a list of the platforms it
        lowers donation for (XLA's); the platform is added to it, since every pjrt-hub CPU runtime
        implements donation.
    :param registry: where to find the plugin (default: one built from the environment).
    :return: the served ``PJRT_Api`` (its ``calls`` count what JAX called).

    Call it before JAX creates its backends (before the first ``jax.devices()``, ``jax.jit`` call
    or array): JAX reads its plugins once. Registering the same plugin under the same name again
    returns the first registration.
    """
    xla_bridge = _xla_bridge()
    name = name or plugin
    with _LOCK:
        existing = _REGISTERED.get(name)
        if existing is not None:
            if _PLUGIN_OF[name] != plugin:
                raise InvalidArgument(f"the JAX backend {name!r} is already plugin {_PLUGIN_OF[name]!r}; "
                                      "choose another name")
            return existing
        if xla_bridge.backends_are_initialized():
            raise FailedPrecondition(
                f"cannot register plugin {plugin!r} with JAX: JAX has created its backends already. Call "
                f"pjrt_hub.jax.register({plugin!r}) before the first use of JAX (jax.devices(), jit, arrays), "
                f"or set {ENV_PLUGINS}={plugin} so that `import jax` registers it")
        served = _serve(plugin, name, platform_name or name, registry)
        if donation:
            _allow_donation(platform_name or name)
        xla_bridge.register_plugin(name, priority=priority, c_api=served.capsule(),
                                   options=dict(options) if options else None)
        _lower_eigh_without_lapack(platform_name or name)
        _REGISTERED[name] = served
        _PLUGIN_OF[name] = plugin
    return served


def _serve(plugin: str, name: str, platform_name: str, registry: "PluginRegistry | None") -> "ServedApi":
    from pjrt_hub import PluginRegistry
    from pjrt_hub.backends.c_api.server import serve

    from ._programs import read_program
    from ._spmd import compile_for_jax

    registry = registry or PluginRegistry.from_environment()
    registry.require([plugin])
    record = registry.record(plugin)

    def make_api() -> Any:
        api = registry.api(record.name)
        return getattr(api, "unwrapped", api)

    served = serve(make_api, name=record.name, version=record.api_version, platform_name=platform_name,
                   program_reader=lambda code: read_program(code).text,
                   extensions={**record.extensions, "Shardings": 1}, compile_hook=compile_for_jax,
                   device_attribute_hook=device_attributes_for_jax)
    return served


def device_attributes_for_jax(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """A device's attributes as jaxlib can take them.

    jaxlib reads a device's ``PJRT_NamedValue``s of string, integer and integer-list type and
    aborts the whole process on the others ("Attribute ... has unsupported type", jaxlib 0.10):
    a plugin whose device says ``{"fast": True}`` would kill the user's program. A boolean is
    handed over as 0 or 1 (what a C caller reads it as), a float as its decimal text."""
    out: dict[str, Any] = {}
    for name, value in attributes.items():
        if isinstance(value, (bool, np.bool_)):
            value = int(value)
        elif isinstance(value, (float, np.floating)):
            value = repr(float(value))
        out[name] = value
    return out


def _allow_donation(platform: str) -> None:
    """Add ``platform`` to JAX's list of platforms whose programs carry donation
    (``jax._src.interpreters.mlir._platforms_with_donation``, private: without it JAX drops
    ``donate_argnums`` with "Donation is not implemented for ('numba_cpu',)")."""
    try:
        from jax._src.interpreters import mlir
    except ImportError:
        return
    platforms = getattr(mlir, "_platforms_with_donation", None)
    if isinstance(platforms, list) and platform not in platforms:
        platforms.append(platform)
    elif platforms is None:
        log.warning("this JAX has no list of platforms with donation; donate_argnums will be ignored on %s",
                    platform)


def _lower_eigh_without_lapack(platform: str) -> None:
    """Give ``platform`` JAX's lowering of ``eigh`` that needs no LAPACK.

    JAX lowers ``eigh`` (and so ``jnp.linalg.eigh``, ``svd``, ``pinv``...) only for its own
    platforms: LAPACK custom calls on ``cpu``, its TPU rule on ``tpu``, nothing elsewhere. The
    TPU rule emits custom calls pjrt-hub's backends run on the host with LAPACK
    (backends/stablehlo/linalg_calls.py): ``@Eigh`` for a whole spectrum, QDWH's StableHLO and
    ``@Qr`` for a subset. It is registered for ``platform``, asking for the former. It is JAX's
    private code (``jax._src.tpu.linalg``): a JAX without it leaves ``eigh`` unlowered, as before
    (the ``linalg_decompositions`` limitation)."""
    if platform in ("cpu", "cuda", "rocm", "tpu"):
        return
    try:
        from jax._src.interpreters import mlir
        from jax._src.lax import linalg as lax_linalg
        from jax._src.tpu.linalg import eigh as tpu_eigh
        from jax._src.tpu.linalg import svd as _svd  # noqa: F401 - registers svd's platform-free rule

        tpu_rule = tpu_eigh._eigh_tpu_lowering
        jacobi = lax_linalg.EighImplementation.JACOBI

        def rule(ctx: Any, operand: Any, *, lower: bool, sort_eigenvalues: bool, subset_by_index: Any,
                 algorithm: Any) -> Any:
            n = ctx.avals_in[0].shape[-1]
            if subset_by_index is None or tuple(subset_by_index) == (0, n):
                # One custom call @Eigh, which pjrt-hub's backends give LAPACK's answer for.
                algorithm = jacobi
            return tpu_rule(ctx, operand, lower=lower, sort_eigenvalues=sort_eigenvalues,
                            subset_by_index=subset_by_index, algorithm=algorithm)

        mlir.register_lowering(lax_linalg.eigh_p, rule, platform=platform)
    except (ImportError, AttributeError, NotImplementedError) as exc:
        log.debug("no eigh lowering for %s: %s", platform, exc)


def registered() -> dict[str, "ServedApi"]:
    """The plugins registered with JAX in this process, by JAX backend name."""
    with _LOCK:
        return dict(_REGISTERED)


def initialize() -> None:
    """The ``jax_plugins`` entry point: register the plugins of ``PJRT_HUB_JAX_PLUGINS``.

    JAX calls this while it discovers plugins; a plugin that cannot be registered is logged (JAX
    logs what its plugins raise, too) and the others still are.
    """
    names = [n.strip() for n in os.environ.get(ENV_PLUGINS, "").split(",") if n.strip()]
    for plugin in names:
        try:
            register(plugin)
        except Exception as exc:  # noqa: BLE001 - JAX must start whatever one plugin does
            log.warning("pjrt-hub could not register plugin %r with JAX (%s=%s): %s", plugin, ENV_PLUGINS,
                        os.environ.get(ENV_PLUGINS), exc)
