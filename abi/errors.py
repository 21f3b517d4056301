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
import re
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
    "VersionGateRefusal",
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


#: ECMA-48 escape sequences: OSC strings, CSI sequences (colours, cursor moves) and the other
#: escapes (character set choices, the two-byte ones). Libraries colour their messages for a
#: terminal (numba's TypingError does); in a PJRT error they are noise in logs, JSON reports and a
#: C caller's status text.
_TERMINAL_CODES = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b[ -/]*[0-~]")


def without_terminal_codes(text: str) -> str:
    """``text`` without terminal escape sequences; every error message of a plugin goes through it
    where the error is made, so no caller has to."""
    if "\x1b" not in text and "\x9b" not in text:
        return text
    return _TERMINAL_CODES.sub("", text)


class PjrtError(PjrtHubError):
    """An error with a ``PJRT_Error_Code``; what a ``PJRT_Error*`` becomes in Python."""

    code: ErrorCode = ErrorCode.UNKNOWN
    #: The C API function that returned this error, when it came from a C plugin (the C bridge).
    c_function: str | None = None
    #: The code the plugin gave, when pjrt-hub reports the error under another class (the C
    #: bridge's compile errors: XLA's UNKNOWN for a program it cannot parse is a CompileError).
    plugin_code: ErrorCode | None = None

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        message = without_terminal_codes(message)
        super().__init__(message)
        #: The message as the plugin (or pjrt-hub) wrote it, without decoration (and without
        #: terminal escape sequences).
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


# One class per PJRT_Error_Code, declared for type checkers and readers; each says it lives in
# ``pjrt_hub`` (the public namespace re-exports it), as PjrtHubError does.
class Cancelled(PjrtError):
    """The operation was cancelled."""

    __module__ = "pjrt_hub"
    code = ErrorCode.CANCELLED


class Unknown(PjrtError):
    """An error the plugin gave no code for."""

    __module__ = "pjrt_hub"
    code = ErrorCode.UNKNOWN


class InvalidArgument(PjrtError):
    """The caller passed a bad argument."""

    __module__ = "pjrt_hub"
    code = ErrorCode.INVALID_ARGUMENT


class DeadlineExceeded(PjrtError):
    """A deadline passed."""

    __module__ = "pjrt_hub"
    code = ErrorCode.DEADLINE_EXCEEDED


class NotFound(PjrtError):
    """Something looked up does not exist."""

    __module__ = "pjrt_hub"
    code = ErrorCode.NOT_FOUND


class AlreadyExists(PjrtError):
    """Something created already exists."""

    __module__ = "pjrt_hub"
    code = ErrorCode.ALREADY_EXISTS


class PermissionDenied(PjrtError):
    """The caller may not do this."""

    __module__ = "pjrt_hub"
    code = ErrorCode.PERMISSION_DENIED


class ResourceExhausted(PjrtError):
    """Out of memory or another resource."""

    __module__ = "pjrt_hub"
    code = ErrorCode.RESOURCE_EXHAUSTED


class FailedPrecondition(PjrtError):
    """The system is not in a state where this works (e.g. a deleted or donated buffer)."""

    __module__ = "pjrt_hub"
    code = ErrorCode.FAILED_PRECONDITION


class Aborted(PjrtError):
    """The operation was aborted."""

    __module__ = "pjrt_hub"
    code = ErrorCode.ABORTED


class OutOfRange(PjrtError):
    """An index or offset is out of range."""

    __module__ = "pjrt_hub"
    code = ErrorCode.OUT_OF_RANGE


class Unimplemented(PjrtError):
    """The plugin does not implement this call, or its API version predates it."""

    __module__ = "pjrt_hub"
    code = ErrorCode.UNIMPLEMENTED


class Internal(PjrtError):
    """A bug or broken invariant inside a plugin."""

    __module__ = "pjrt_hub"
    code = ErrorCode.INTERNAL


class Unavailable(PjrtError):
    """A device or service is not reachable."""

    __module__ = "pjrt_hub"
    code = ErrorCode.UNAVAILABLE


class DataLoss(PjrtError):
    """Data was lost or corrupted."""

    __module__ = "pjrt_hub"
    code = ErrorCode.DATA_LOSS


class Unauthenticated(PjrtError):
    """Credentials are missing."""

    __module__ = "pjrt_hub"
    code = ErrorCode.UNAUTHENTICATED


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
        message = without_terminal_codes(message)
        super().__init__(f"plugin {plugin!r}: {message}")
        # Always a name here; typed as PjrtError's (str | None), which the version and
        # extension errors also are.
        self.plugin: str | None = plugin
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


class VersionGateRefusal(Unimplemented):
    """Version stage: the version gate kept a call from the plugin, because the PJRT API minor that
    added it is newer than the minor the plugin's calls are limited to (the plugin's, or the
    framework's when the plugin is newer). The call never reached the plugin: the framework ruled
    it out, so a caller can tell this apart from a plugin that answers Unimplemented itself."""

    def __init__(self, message: str, *, plugin: str | None = None, method: str | None = None,
                 since: int | None = None, call_limit: int | None = None) -> None:
        super().__init__(message, plugin=plugin)
        #: ``Class.method`` of the binding that was called.
        self.method = method
        #: The minor that added it, and the minor calls are limited to.
        self.since = since
        self.call_limit = call_limit


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
                 backend: str | None = None, target: str | None = None) -> None:
        supported = sorted(supported)
        where = f" at {location}" if location else ""
        who = f" by {backend}" if backend else ""
        listing = ", ".join(supported) if supported else "(none)"
        # A custom call is named with its target: 'stablehlo.custom_call @ApproxTopK'.
        named = f"{op} @{target}" if target else op
        super().__init__(f"unsupported op {named!r}{where}{who}; supported ops: {listing}", plugin=backend)
        self.op = op
        self.target = target
        self.location = location
        self.supported = tuple(supported)


class ExecutionError(PjrtError):
    """Execute stage: running a compiled program failed."""

    code = ErrorCode.INTERNAL
