"""The reference plugin: the numpy interpreter on the host CPU runtime, registered like any plugin.

It runs every program op by op, eagerly, in numpy: the oracle the other backends are compared
with, the baseline of ``pjrt-hub bench``, and a light plugin for testing harnesses without numba.
"""

from __future__ import annotations

from pjrt_hub.abi import Api, PluginDeclaration, hookimpl
from pjrt_hub.backends.cpu_runtime.builtin import builtin_api, builtin_declaration


@hookimpl
def pjrt_hub_declare() -> PluginDeclaration:
    return builtin_declaration("numpy reference interpreter of StableHLO (op by op, eager)")


@hookimpl
def pjrt_hub_get_api() -> Api:
    from pjrt_hub.backends.reference import ReferenceCompiler

    return builtin_api(ReferenceCompiler(), "reference")
