"""extensions: every extension a plugin offers is usable by its protocol.

The version a plugin offers decides which methods it must have (``@added(n)`` in
:mod:`pjrt_hub.extensions`); the smoke calls then check the results speak the protocol's types.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pjrt_hub.abi import BufferType
from pjrt_hub.extensions import KNOWN_EXTENSIONS, ExtensionSpec

from .._case import Case, add_case, case, check, fail
from .._context import PluginUnderTest


def _unwrap(obj: Any) -> Any:
    return getattr(obj, "unwrapped", obj)


def _permutation(layout: Any, rank: int, what: str) -> None:
    order = tuple(getattr(layout, "minor_to_major", ()))
    check(sorted(order) == list(range(rank)), f"{what}: minor_to_major {order} is not a permutation of {rank} dimensions")


def _smoke_layouts(ctx: PluginUnderTest, impl: Any) -> None:
    _permutation(impl.client_default_layout(_unwrap(ctx.client), BufferType.F32, (2, 3)), 2,
                 "Layouts.client_default_layout(F32[2,3])")
    buffer = ctx.put(np.zeros((2, 3), np.float32))
    _permutation(impl.buffer_memory_layout(_unwrap(buffer)), 2, "Layouts.buffer_memory_layout(F32[2,3])")


def _smoke_memory_descriptions(ctx: PluginUnderTest, impl: Any) -> None:
    description = ctx.device.get_description()
    kinds = impl.memory_descriptions(_unwrap(description))
    check(kinds and all(isinstance(k, str) and isinstance(i, int) for k, i in kinds),
          f"MemoryDescriptions.memory_descriptions returned {kinds!r}, expected (kind, kind_id) pairs")
    default = ctx.device.default_memory().kind()
    check(kinds[0][0] == default, f"MemoryDescriptions lists {kinds[0][0]!r} first, but the default memory is {default!r}")


SMOKE = {"Layouts": _smoke_layouts, "MemoryDescriptions": _smoke_memory_descriptions}


def _extension_case(spec: ExtensionSpec) -> Case:
    def run(ctx: PluginUnderTest) -> None:
        version = ctx.offered_extensions[spec.name]
        offered = ctx.api.extensions()
        impl = offered.get(spec.name)
        if impl is None:
            fail(f"plugin {ctx.name} declares {spec.name} {version}, but its Api offers no implementation "
                 f"(offers: {', '.join(sorted(offered)) or 'none'})")
        missing = spec.missing_methods(impl, version)
        check(not missing, f"{spec.name} {version} of plugin {ctx.name} lacks {', '.join(missing)} "
                           f"({type(impl).__name__})")
        smoke = SMOKE.get(spec.name)
        if smoke is not None:
            smoke(ctx, impl)

    return Case("extensions", spec.name,
                f"The {spec.name} extension ({spec.description}), where offered, has every method of the "
                "version offered, and answers in the protocol's types.",
                run, needs_extensions=(spec.name,))


for _spec in KNOWN_EXTENSIONS.values():
    if _spec.protocol is not None:
        add_case(_extension_case(_spec))


@case("extensions", kind="python")
def declared_are_offered(ctx: PluginUnderTest) -> None:
    """The Api offers (Api.extensions) exactly the extensions the plugin declares."""
    declared = set(ctx.offered_extensions)
    offered = set(ctx.api.extensions())
    check(declared == offered, f"plugin {ctx.name} declares extensions {sorted(declared)} but its Api offers "
                               f"{sorted(offered)}")
