"""The numba_cpu plugin: StableHLO compiled with numba, on the host CPU runtime.

Registered through the ``pjrt_hub.plugins`` entry point exactly like a third-party plugin; the
host never imports it by name. Declaring is cheap; numba is imported when the API is asked for.
"""

from __future__ import annotations

from pjrt_hub.abi import Api, PluginDeclaration, hookimpl
from pjrt_hub.backends.cpu_runtime.builtin import builtin_api, builtin_declaration

#: Compiled code runs programs of 10^7 flops in about a millisecond: below that, handing the
#: run to the device's worker thread and waking the caller again (tens of microseconds, far more
#: on a busy machine) costs more than the caller gains by not waiting. Larger programs still run
#: asynchronously. (The byte figure counts every op's operands and results, fused or not.)
#: Keyword arguments of ``InlinePolicy``, built when the API is asked for: declaring the plugin
#: imports nothing heavy (the runtime imports numpy).
INLINE_LIMITS = {"max_flops": 1e7, "max_bytes_accessed": 32 << 20}


@hookimpl
def pjrt_hub_declare() -> PluginDeclaration:
    return builtin_declaration("StableHLO compiled to fused numba loops (pjrt-hub's built-in CPU backend)")


@hookimpl
def pjrt_hub_get_api() -> Api:
    from pjrt_hub.backends.cpu_runtime import InlinePolicy
    from pjrt_hub.backends.numba_cpu import NumbaCompiler

    return builtin_api(NumbaCompiler(), "numba_cpu", InlinePolicy(**INLINE_LIMITS))
