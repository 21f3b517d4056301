"""The error tree, rooted at :class:`PjrtHubError`.

Two axes meet here. :class:`PjrtError` and its subclasses mirror ``PJRT_Error_Code`` (the absl status
codes), so an error from any plugin, Python or C, carries the code the C API would give. The stage
errors (load, version, extension, compile, execution) say where in pjrt-hub something failed; each
of them is also a :class:`PjrtError` with the code PJRT would use, so ``except InvalidArgument``
catches a malformed program as well as a bad argument struct.

Messages say what was wrong, with which plugin or op, and what to do.
"""

from __future__ import annotations

import enum
from typing import Iterable

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Cancelled",
    "CompileError",
    "DataLoss",
    "DeadlineExceeded",
    "ErrorCode",
    "ExecutionError",
    "ExtensionUnavailableError",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "OutOfRange",
    "ParseError",
    "PermissionDenied",
    "PjrtError",
    "PjrtHubError",
    "PluginLoadError",
    "PluginValidationError",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "UnsupportedOpError",
    "VersionError",
    "error_for_code",
]


class ErrorCode(enum.IntEnum):
    """``PJRT_Error_Code``: the absl status codes, as the C API numbers them."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class PjrtHubError(Exception):
    """Root of every error pjrt-hub raises on purpose."""

    __module__ = "pjrt_hub"


class PjrtError(PjrtHubError):
    """An error with a ``PJRT_Error_Code``; what a ``PJRT_Error*`` becomes in Python."""

    code: ErrorCode = ErrorCode.UNKNOWN
    #: The C API function that returned this error, when it came from a C plugin (the C bridge).
    c_function: str | None = None
    #: The code the plugin gave, when pjrt-hub reports the error under another class (the C
    #: bridge's compile errors: XLA's UNKNOWN for a program it cannot parse is a CompileError).
    plugin_code: ErrorCode | None = None

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        super().__init__(message)
        #: The message as the plugin (or pjrt-hub) wrote it, without decoration.
        self.message = message
        #: The plugin the error came from, when known.
        self.plugin = plugin

    def for_raise(self) -> "PjrtError":
        """A twin of this stored error, to raise once.

        An error kept on an event or a buffer is raised to every caller that asks; raising the
        stored object itself would hang each caller's frames on its traceback, and with them
        whatever those frames hold (argument buffers, outputs) for as long as the error is
        kept. The twin has the same class, message, attributes and cause.
        """
        twin = type(self).__new__(type(self))
        twin.args = self.args
        twin.__dict__.update(self.__dict__)
        twin.__cause__ = self.__cause__
        twin.__suppress_context__ = self.__suppress_context__
        return twin

    def __str__(self) -> str:
        name = self.code.name
        return f"{name}: {self.message}" if self.plugin is None else f"{name}: {self.message} [plugin {self.plugin}]"


def _code_class(name: str, code: ErrorCode, doc: str) -> type[PjrtError]:
    cls = type(name, (PjrtError,), {"code": code, "__doc__": doc, "__module__": "pjrt_hub"})
    return cls


Cancelled = _code_class("Cancelled", ErrorCode.CANCELLED, "The operation was cancelled.")
Unknown = _code_class("Unknown", ErrorCode.UNKNOWN, "An error the plugin gave no code for.")
InvalidArgument = _code_class("InvalidArgument", ErrorCode.INVALID_ARGUMENT, "The caller passed a bad argument.")
DeadlineExceeded = _code_class("DeadlineExceeded", ErrorCode.DEADLINE_EXCEEDED, "A deadline passed.")
NotFound = _code_class("NotFound", ErrorCode.NOT_FOUND, "Something looked up does not exist.")
AlreadyExists = _code_class("AlreadyExists", ErrorCode.ALREADY_EXISTS, "Something created already exists.")
PermissionDenied = _code_class("PermissionDenied", ErrorCode.PERMISSION_DENIED, "The caller may not do this.")
ResourceExhausted = _code_class("ResourceExhausted", ErrorCode.RESOURCE_EXHAUSTED, "Out of memory or another resource.")
FailedPrecondition = _code_class(
    "FailedPrecondition", ErrorCode.FAILED_PRECONDITION,
    "The system is not in a state where this works (e.g. a deleted or donated buffer).",
)
Aborted = _code_class("Aborted", ErrorCode.ABORTED, "The operation was aborted.")
OutOfRange = _code_class("OutOfRange", ErrorCode.OUT_OF_RANGE, "An index or offset is out of range.")
Unimplemented = _code_class(
    "Unimplemented", ErrorCode.UNIMPLEMENTED,
    "The plugin does not implement this call, or its API version predates it.",
)
Internal = _code_class("Internal", ErrorCode.INTERNAL, "A bug or broken invariant inside a plugin.")
Unavailable = _code_class("Unavailable", ErrorCode.UNAVAILABLE, "A device or service is not reachable.")
DataLoss = _code_class("DataLoss", ErrorCode.DATA_LOSS, "Data was lost or corrupted.")
Unauthenticated = _code_class("Unauthenticated", ErrorCode.UNAUTHENTICATED, "Credentials are missing.")

_BY_CODE: dict[ErrorCode, type[PjrtError]] = {
    cls.code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
                Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}


def error_for_code(code: int, message: str, *, plugin: str | None = None) -> PjrtError:
    """Build the error class of a ``PJRT_Error_Code``; an unknown code gives :class:`Unknown`."""
    try:
        cls = _BY_CODE[ErrorCode(code)]
    except (ValueError, KeyError):
        return Unknown(f"(code {code}) {message}", plugin=plugin)
    return cls(message, plugin=plugin)


# -- stage errors ----------------------------------------------------------------------------


class PluginLoadError(PjrtHubError):
    """Load stage: a plugin could not be imported, probed or registered."""

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(f"plugin {plugin!r}: {message}")
        self.plugin = plugin
        self.reason = message


class PluginValidationError(PluginLoadError):
    """Load stage: a plugin declared something malformed (version, extensions, types)."""


class VersionError(PluginLoadError, FailedPrecondition):
    """Version stage: the version policy refused the plugin; the message names both versions."""

    def __init__(self, plugin: str, message: str) -> None:
        PluginLoadError.__init__(self, plugin, message)
        self.message = message


class ExtensionUnavailableError(PluginLoadError, Unimplemented):
    """Extension stage: a required extension is absent or older than needed."""

    def __init__(self, plugin: str, message: str) -> None:
        PluginLoadError.__init__(self, plugin, message)
        self.message = message


class CompileError(InvalidArgument):
    """Compile stage: the program could not be compiled."""


class ParseError(CompileError):
    """Compile stage: the program text is malformed; the message gives line and column."""

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None,
                 plugin: str | None = None) -> None:
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + message, plugin=plugin)
        self.line = line
        self.column = column


class UnsupportedOpError(CompileError):
    """Compile stage: the program uses an op this backend does not implement."""

    code = ErrorCode.UNIMPLEMENTED

    def __init__(self, op: str, *, location: str | None = None, supported: Iterable[str] = (),
                 backend: str | None = None) -> None:
        supported = sorted(supported)
        where = f" at {location}" if location else ""
        who = f" by {backend}" if backend else ""
        listing = ", ".join(supported) if supported else "(none)"
        super().__init__(f"unsupported op {op!r}{where}{who}; supported ops: {listing}", plugin=backend)
        self.op = op
        self.location = location
        self.supported = tuple(supported)


class ExecutionError(PjrtError):
    """Execute stage: running a compiled program failed."""

    code = ErrorCode.INTERNAL
