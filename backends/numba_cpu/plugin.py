"""The numba_cpu plugin: StableHLO compiled with numba, on the host CPU runtime.

Registered through the ``pjrt_hub.plugins`` entry point exactly like a third-party plugin; the
host never imports it by name. Declaring is cheap; numba is imported when the API is asked for.
"""

from __future__ import annotations

from pjrt_hub.abi import Api, PluginDeclaration, hookimpl
from pjrt_hub.backends.cpu_runtime.builtin import builtin_api, builtin_declaration


@hookimpl
def pjrt_hub_declare() -> PluginDeclaration:
    return builtin_declaration("StableHLO compiled to fused numba loops (pjrt-hub's built-in CPU backend)")


@hookimpl
def pjrt_hub_get_api() -> Api:
    from pjrt_hub.backends.numba_cpu import NumbaCompiler

    # Tiered: first results from the eager numpy tier, numba compiling in the background.
    return builtin_api(NumbaCompiler(tiered=True), "numba_cpu")
