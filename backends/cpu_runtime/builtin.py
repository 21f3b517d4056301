"""What pjrt-hub's own host-memory plugins (numba_cpu, reference) declare and build alike.

Both are built with the framework, so they implement its newest minor; being Python plugins
behind the version gate, they serve any framework since the history's floor. Only the compiler
and the description differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pjrt_hub.abi import FRAMEWORK_VERSION, PluginDeclaration, history

if TYPE_CHECKING:
    from ._api import CpuApi
    from ._executables import InlinePolicy
    from .compiler import ProgramCompiler

__all__ = ["EXTENSION_VERSIONS", "STABLEHLO_ATTRIBUTES", "builtin_api", "builtin_declaration"]

#: The extensions the runtime offers and their versions (implemented in ``._extensions``, which
#: says why these two). Declared here, where reading it costs no import of the runtime.
EXTENSION_VERSIONS: dict[str, int] = {"Layouts": 3, "MemoryDescriptions": 1}

#: The StableHLO versions the shared parser reads (the text JAX 0.10 prints), as int64 lists,
#: the way XLA's plugins report them.
STABLEHLO_ATTRIBUTES = {"stablehlo_current_version": [1, 13, 0], "stablehlo_minimum_version": [0, 9, 0]}


def builtin_declaration(description: str) -> PluginDeclaration:
    return PluginDeclaration(
        api_version=str(FRAMEWORK_VERSION),
        platform_name="cpu",
        min_framework_version=f"0.{history.FLOOR_MINOR}",
        description=description,
        extensions=dict(EXTENSION_VERSIONS),
    )


def builtin_api(compiler: ProgramCompiler, backend: str, inline_policy: InlinePolicy | None = None) -> CpuApi:
    """The runtime for ``compiler``; ``inline_policy`` (default: the runtime's) says which
    programs run on the calling thread."""
    from ._api import CpuApi
    from ._extensions import builtin_extensions

    policy: dict[str, Any] = {} if inline_policy is None else {"inline_policy": inline_policy}
    return CpuApi(compiler, platform_name="cpu", api_version=FRAMEWORK_VERSION,
                  platform_version=f"pjrt-hub {backend}",
                  attributes={"pjrt_hub_backend": backend, **STABLEHLO_ATTRIBUTES},
                  extensions=builtin_extensions(), backend=backend, **policy)
