"""PJRT extensions: named, typed, versioned on their own, and negotiated.

A plugin offers a chain of extensions (C: the ``PJRT_Extension_Base`` list hanging off
``PJRT_Api``; Python: the ``extensions`` of its declaration, implemented by ``Api.extensions()``).
The framework asks for some of them, each required or optional, with a minimum version;
:func:`negotiate` says what was agreed. Both sides then speak the older of the two versions, the
way a C caller checks ``struct_size`` before it reads a field.
"""

from __future__ import annotations

from ._negotiate import (
    ExtensionRequest,
    ExtensionWarning,
    Negotiation,
    negotiate,
    parse_request,
)
from ._specs import (
    CrossHostTransfersExtension,
    ExtensionSpec,
    FfiExtension,
    KNOWN_EXTENSIONS,
    LayoutsExtension,
    MemoryDescriptionsExtension,
    MemoryLayout,
    ProfilerExtension,
    RawBufferExtension,
    StreamExtension,
    extension_spec,
    version_from_struct_size,
)

__all__ = [
    "CrossHostTransfersExtension",
    "ExtensionRequest",
    "ExtensionSpec",
    "ExtensionWarning",
    "FfiExtension",
    "KNOWN_EXTENSIONS",
    "LayoutsExtension",
    "MemoryDescriptionsExtension",
    "MemoryLayout",
    "Negotiation",
    "ProfilerExtension",
    "RawBufferExtension",
    "StreamExtension",
    "extension_spec",
    "negotiate",
    "parse_request",
    "version_from_struct_size",
]
