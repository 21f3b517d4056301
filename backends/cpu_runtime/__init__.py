"""The PJRT runtime in host memory, shared by the backends that keep their arrays there.

Devices, memories, buffers, events, executables, donation and DLPack are the same whether a
program was compiled by numba or is interpreted by numpy; a plugin brings only its
:class:`ProgramCompiler` and its own API version and attributes::

    from pjrt_hub.backends.cpu_runtime import CpuApi

    api = CpuApi(MyCompiler(), api_version="0.105",
                 attributes={"xla_version": 2, "stablehlo_current_version": [1, 9, 0],
                             "stablehlo_minimum_version": [0, 9, 0]})
    client = api.client_create({"num_devices": 2})
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pjrt_hub._lazy import lazy_exports

if TYPE_CHECKING:
    from ._api import CLIENT_OPTIONS, DEFAULT_API_VERSION, CpuApi
    from ._buffers import CpuBuffer
    from ._client import CpuClient
    from ._devices import MEMORY_KINDS, CpuDevice, CpuMemory
    from ._events import READY, CpuEvent
    from ._executables import CpuExecutable, CpuLoadedExecutable, InlinePolicy
    from ._topology import DEFAULT_NUM_DEVICES, CpuDeviceDescription, CpuTopologyDescription
    from .compiler import CompiledProgram, ProgramCompiler, TensorSpec

# Imported on first use: the built-in plugins' declarations live in ``.builtin``, and reading them
# (``pjrt-hub list``) must not build the runtime.
_EXPORTS = {
    "CLIENT_OPTIONS": "._api", "DEFAULT_API_VERSION": "._api", "CpuApi": "._api",
    "CpuBuffer": "._buffers",
    "CpuClient": "._client",
    "MEMORY_KINDS": "._devices", "CpuDevice": "._devices", "CpuMemory": "._devices",
    "READY": "._events", "CpuEvent": "._events",
    "CpuExecutable": "._executables", "CpuLoadedExecutable": "._executables", "InlinePolicy": "._executables",
    "DEFAULT_NUM_DEVICES": "._topology", "CpuDeviceDescription": "._topology",
    "CpuTopologyDescription": "._topology",
    "CompiledProgram": ".compiler", "ProgramCompiler": ".compiler", "TensorSpec": ".compiler",
}

__all__ = [
    "CLIENT_OPTIONS",
    "CompiledProgram",
    "CpuApi",
    "CpuBuffer",
    "CpuClient",
    "CpuDevice",
    "CpuDeviceDescription",
    "CpuEvent",
    "CpuExecutable",
    "CpuLoadedExecutable",
    "CpuMemory",
    "CpuTopologyDescription",
    "DEFAULT_API_VERSION",
    "DEFAULT_NUM_DEVICES",
    "InlinePolicy",
    "MEMORY_KINDS",
    "ProgramCompiler",
    "READY",
    "TensorSpec",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
