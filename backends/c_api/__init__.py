"""The ctypes bridge to real PJRT C plugins (a ``.so`` exporting ``GetPjrtApi``).

:func:`probe` looks at a plugin from a child process (it may abort, hang or crash);
:func:`load_api` loads it here and returns a :class:`CApi`, which implements
:class:`pjrt_hub.abi.Api` and hands out clients, buffers and executables that implement the
rest of the binding; its extensions are served through the protocols of
:mod:`pjrt_hub.extensions` (:mod:`.extensions`). :func:`client_creation_risk` and
:func:`safe_client_check` say whether a client may be created on this machine. The version
history and the Args struct sizes of every minor live in :mod:`pjrt_hub.abi.history` and
:mod:`.structs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pjrt_hub._lazy import lazy_exports

if TYPE_CHECKING:
    from .api import CApi, load_api
    from .buffers import CBuffer
    from .client import CClient, CTopologyDescription
    from .devices import CDevice, CDeviceDescription, CMemory
    from .executables import CExecutable, CExecuteContext, CLoadedExecutable
    from .extensions import (
        CExtension,
        CFfiExtension,
        CLayoutsExtension,
        CMemoryDescriptionsExtension,
        parse_xla_layout,
    )
    from .handles import CEvent
    from .library import ExtensionInfo, PluginLibrary, open_library
    from .safety import ClientCheck, client_creation_risk, safe_client_check

# ``probe`` is both a subpackage and its main function; importing it here keeps the name bound
# to the function, as it always was.
from .probe import ExtensionReport, ProbeReport, probe, resolve_library

# The other names are imported on first use: the registry imports ``.loader`` (and the probe child
# ``.probe``) on every ``pjrt-hub list``, and neither needs the rest of the bridge.
_EXPORTS = {
    "CApi": ".api", "load_api": ".api",
    "CBuffer": ".buffers",
    "CClient": ".client", "CTopologyDescription": ".client",
    "CDevice": ".devices", "CDeviceDescription": ".devices", "CMemory": ".devices",
    "CExecutable": ".executables", "CExecuteContext": ".executables", "CLoadedExecutable": ".executables",
    "CExtension": ".extensions", "CFfiExtension": ".extensions", "CLayoutsExtension": ".extensions",
    "CMemoryDescriptionsExtension": ".extensions", "parse_xla_layout": ".extensions",
    "CEvent": ".handles",
    "ExtensionInfo": ".library", "PluginLibrary": ".library", "open_library": ".library",
    "ClientCheck": ".safety", "client_creation_risk": ".safety", "safe_client_check": ".safety",
}

__all__ = [
    "CApi",
    "CBuffer",
    "CClient",
    "CDevice",
    "CDeviceDescription",
    "CEvent",
    "CExecutable",
    "CExecuteContext",
    "CExtension",
    "CFfiExtension",
    "CLayoutsExtension",
    "CLoadedExecutable",
    "CMemoryDescriptionsExtension",
    "CMemory",
    "CTopologyDescription",
    "ClientCheck",
    "ExtensionInfo",
    "ExtensionReport",
    "PluginLibrary",
    "ProbeReport",
    "client_creation_risk",
    "load_api",
    "open_library",
    "parse_xla_layout",
    "probe",
    "resolve_library",
    "safe_client_check",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
