"""The numba_cpu plugin: StableHLO compiled with numba, on the host CPU runtime.

Registered through the ``pjrt_hub.plugins`` entry point exactly like a third-party plugin; the
host never imports it by name. Declaring is cheap; numba is imported when the API is asked for.
"""

from __future__ import annotations

from pjrt_hub.abi import FRAMEWORK_VERSION, Api, PluginDeclaration, hookimpl

#: The StableHLO versions the parser reads (the text JAX 0.10 prints), as int64 lists like XLA's.
STABLEHLO_ATTRIBUTES = {"stablehlo_current_version": [1, 13, 0], "stablehlo_minimum_version": [0, 9, 0]}


@hookimpl
def pjrt_hub_declare() -> PluginDeclaration:
    return PluginDeclaration(
        api_version=str(FRAMEWORK_VERSION),
        platform_name="cpu",
        # Python plugins keep every call to the framework's minor, so any framework since the
        # history's floor can use it.
        min_framework_version="0.29",
        description="StableHLO compiled to fused numba loops (pjrt-hub's built-in CPU backend)",
    )


@hookimpl
def pjrt_hub_get_api() -> Api:
    from pjrt_hub.backends.cpu_runtime import CpuApi
    from pjrt_hub.backends.numba_cpu import NumbaCompiler

    return CpuApi(NumbaCompiler(), platform_name="cpu", api_version=FRAMEWORK_VERSION,
                  platform_version="pjrt-hub numba_cpu",
                  attributes={"pjrt_hub_backend": "numba_cpu", **STABLEHLO_ATTRIBUTES})
