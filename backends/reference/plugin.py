"""The reference plugin: the numpy interpreter on the host CPU runtime, registered like any plugin.

It runs every program op by op, eagerly, in numpy: the oracle the other backends are compared
with, the baseline of ``pjrt-hub bench``, and a light plugin for testing harnesses without numba.
"""

from __future__ import annotations

from pjrt_hub.abi import FRAMEWORK_VERSION, Api, PluginDeclaration, hookimpl

#: The StableHLO versions the parser reads (the text JAX 0.10 prints); as int64 lists, the way
#: XLA's plugins report them.
STABLEHLO_ATTRIBUTES = {"stablehlo_current_version": [1, 13, 0], "stablehlo_minimum_version": [0, 9, 0]}


@hookimpl
def pjrt_hub_declare() -> PluginDeclaration:
    return PluginDeclaration(
        api_version=str(FRAMEWORK_VERSION),
        platform_name="cpu",
        # A Python plugin keeps every call to the framework's minor, so any framework since the
        # floor of the history can use it.
        min_framework_version="0.29",
        description="numpy reference interpreter of StableHLO (op by op, eager)",
    )


@hookimpl
def pjrt_hub_get_api() -> Api:
    from pjrt_hub.backends.cpu_runtime import CpuApi
    from pjrt_hub.backends.reference import ReferenceCompiler

    return CpuApi(ReferenceCompiler(), platform_name="cpu", api_version=FRAMEWORK_VERSION,
                  platform_version="pjrt-hub reference interpreter",
                  attributes={"pjrt_hub_backend": "reference", **STABLEHLO_ATTRIBUTES})
