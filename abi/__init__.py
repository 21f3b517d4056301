"""The contract between pjrt-hub and its plugins: ``pjrt_hub.abi``.

Everything a plugin needs and nothing of the host, the way a C plugin needs only
``pjrt_c_api.h``: the version number and its history, the binding classes, the element types,
the error tree, the declaration a plugin makes, and the pluggy markers.
"""

from __future__ import annotations

from . import history
from .binding import (
    Api,
    ApiMethod,
    Buffer,
    Client,
    CompiledMemoryStats,
    CompileOptions,
    Device,
    DeviceDescription,
    Event,
    Executable,
    ExecuteOptions,
    ExecuteResult,
    HostTransfer,
    KeyValueStore,
    LoadedExecutable,
    Memory,
    MemoryStats,
    NamedValues,
    PjrtObject,
    Program,
    ToHost,
    TopologyDescription,
    api,
    api_methods,
)
from .compile_options import decode_compile_options, encode_compile_options
from .declaration import Limitation, PluginDeclaration
from .errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    CompileError,
    DataLoss,
    DeadlineExceeded,
    ErrorCode,
    ExecutionError,
    ExtensionUnavailableError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    ParseError,
    PermissionDenied,
    PjrtError,
    PjrtHubError,
    PluginLoadError,
    PluginValidationError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
    UnsupportedOpError,
    VersionError,
    VersionGateRefusal,
    error_for_code,
)
from .hookspecs import PROJECT, hookimpl
from .types import (
    BufferType,
    ExtensionType,
    HostBufferSemantics,
    MemoryLayoutType,
    from_numpy_dtype,
    mlir_element_type,
    to_numpy_dtype,
)
from .version import ApiVersion

#: The PJRT C API version pjrt-hub speaks by default: the newest minor of the history.
FRAMEWORK_VERSION: ApiVersion = history.NEWEST_KNOWN

__all__ = [
    "Aborted", "AlreadyExists", "Api", "ApiMethod", "ApiVersion", "Buffer", "BufferType",
    "Cancelled", "Client", "CompileError", "CompileOptions", "CompiledMemoryStats", "DataLoss",
    "DeadlineExceeded", "Device", "DeviceDescription", "ErrorCode", "Event", "Executable",
    "ExecuteOptions", "ExecuteResult", "ExecutionError", "ExtensionType",
    "ExtensionUnavailableError", "FRAMEWORK_VERSION", "FailedPrecondition", "HostBufferSemantics",
    "HostTransfer", "Internal", "KeyValueStore", "InvalidArgument", "Limitation", "LoadedExecutable", "Memory",
    "MemoryLayoutType", "MemoryStats", "NamedValues", "NotFound", "OutOfRange", "PROJECT",
    "ParseError", "PermissionDenied", "PjrtError", "PjrtHubError", "PjrtObject",
    "PluginDeclaration", "PluginLoadError", "PluginValidationError", "Program",
    "ResourceExhausted", "ToHost", "TopologyDescription", "Unauthenticated", "Unavailable",
    "Unimplemented", "Unknown", "UnsupportedOpError", "VersionError", "VersionGateRefusal", "api", "api_methods",
    "decode_compile_options", "encode_compile_options", "error_for_code", "from_numpy_dtype",
    "history", "hookimpl", "mlir_element_type", "to_numpy_dtype",
]
