"""The suite through a transport: a Python plugin served as a ``PJRT_Api`` and consumed back.

``--pjrt-via c_api`` serves each named Python plugin as a ``PJRT_Api`` struct
(:mod:`pjrt_hub.backends.c_api.server`) and runs the suite on that struct through the C bridge,
exactly as on a ``.so``: every case then crosses the C ABI twice, so a plugin vendor sees what a C
framework sees, and the served struct itself is checked (slot table, struct sizes, errors).

``--pjrt-via jax`` does the same with the struct registered with JAX first (the very struct
jaxlib holds), and adds the cases of the ``jax`` group, which drive the plugin through JAX itself
(devices, transfers, jit, donation, errors, several devices) and compare with numpy. Why both
layers: the bridge's cases reach every PJRT function with exact expectations, which JAX alone
never does (it calls some 70 of them); the JAX cases check what a JAX user relies on, which no
PJRT-level case states.

The served plugin is named ``NAME@VIA`` in the report; the original plugin's declared
limitations apply to it (they travel in its probe report). A case passes through either
transport as it passes on the plugin, with the same error codes; what the C ABI cannot carry is
a limitation of the served form only (:func:`_transport_limitations`, with its reason). Errors
cross as their code and message, so pjrt-hub's stage classes (ExecutionError, ...) arrive as the
class of their code.
"""

from __future__ import annotations

from typing import Any, Sequence

from pjrt_hub.abi import Limitation

__all__ = ["VIAS", "served_registry"]

#: The transports the suite can run through.
VIAS = ("c_api", "jax")


class ViaError(ValueError):
    """A plugin cannot be run through the transport asked for; the message says why."""


def served_registry(plugins: Sequence[str], *, via: str, framework: str | None = None,
                    strict: bool = False, window_weeks: int | None = None,
                    floor_minor: int | None = None) -> tuple[Any, list[str]]:
    """A registry holding each of ``plugins`` and its served form ``NAME@VIA``; returns the
    registry and the served names, in order."""
    from pjrt_hub import PluginRegistry
    from pjrt_hub._discovery import is_library_path
    from pjrt_hub.backends.c_api.served import LOADER, candidate, publish

    from ._session import suite_policy

    if via not in VIAS:
        raise ViaError(f"unknown transport {via!r}; choose one of {', '.join(VIAS)}")
    for name in plugins:
        if is_library_path(name):
            raise ViaError(f"{name} is a C plugin; --via serves pjrt-hub's Python plugins as a PJRT_Api (a C "
                           "plugin already is one: run the suite on it directly)")
    policy = suite_policy(framework, strict, window_weeks, floor_minor)
    served_names = [f"{name}@{via}" for name in plugins]
    requested = frozenset(n.lower() for n in [*plugins, *served_names])
    registry = PluginRegistry.from_environment(policy=policy, requested=requested)
    registry.add_loader(LOADER, "served")
    registry.load()
    for name, served_name in zip(plugins, served_names):
        record = registry.record(name)
        if record.kind != "python":
            raise ViaError(f"{name} is a C plugin; --via serves pjrt-hub's Python plugins as a PJRT_Api "
                           "(a C plugin already is one: run the suite on it directly)")
        registry.require([name])
        served = _serve(registry, record, via)
        declared = _declared_limitations(registry, record.name) + _transport_limitations(registry, record.name)
        publish(served_name, served, via=via, served_plugin=record.name, declared_limitations=declared,
                jax_backend=record.name if via == "jax" else None)
        registry.add_candidate(candidate(served_name, f"{record.name} served as a PJRT_Api ({via})"))
    return registry, served_names


def _serve(registry: Any, record: Any, via: str) -> Any:
    if via == "jax":
        import pjrt_hub.jax as pj

        return pj.register(record.name, registry=registry)
    from pjrt_hub.backends.c_api.server import serve

    def make_api() -> Any:
        api = registry.api(record.name)
        return getattr(api, "unwrapped", api)

    return serve(make_api, name=record.name, version=record.api_version, extensions=dict(record.extensions))


def _transport_limitations(registry: Any, name: str) -> list[Limitation]:
    """What a served Python plugin lacks only as a C plugin: upstream's test demands the
    ``xla_version`` attribute of C plugins, which only a plugin built from XLA can report."""
    api = registry.api(name)
    try:
        attributes = api.plugin_attributes()
    except Exception:  # noqa: BLE001 - plugin/attributes reports it
        return []
    if "xla_version" in attributes:
        return []
    return [Limitation(f"{name} is not built from XLA and reports no xla_version attribute, which upstream's "
                       "conformance test demands of C plugins", ("plugin/attributes",))]


def _declared_limitations(registry: Any, name: str) -> list[Limitation]:
    declaration = registry.declaration(name)
    if declaration is None:
        return []
    return [Limitation(x.description, tuple(x.cases)) for x in declaration.limitations]
