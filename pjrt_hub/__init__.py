"""pjrt-hub: load, check and test PJRT device plugins.

The public API lives here; the modules behind it are private. Names are imported lazily, so that
``import pjrt_hub.abi`` (what every plugin does) stays cheap and pulls in none of the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._lazy import lazy_exports

if TYPE_CHECKING:
    # Written `X as X`: the explicit re-export form, for type checkers and linters.
    from ._discovery import Candidate as Candidate, discover as discover
    from ._facade import Gated as Gated, gate as gate
    from ._policy import (
        Policy as Policy, Verdict as Verdict, judge as judge,
        strict_from_environment as strict_from_environment,
    )
    from ._registry import (
        PluginRegistry as PluginRegistry, RegistrySettings as RegistrySettings,
        default_plugin_name as default_plugin_name,
    )
    from ._reports import (
        CheckReport as CheckReport, ListReport as ListReport, Outcome as Outcome,
        PluginRecord as PluginRecord,
    )
    from .abi.errors import (
        Aborted as Aborted, AlreadyExists as AlreadyExists, Cancelled as Cancelled, DataLoss as DataLoss,
        DeadlineExceeded as DeadlineExceeded, FailedPrecondition as FailedPrecondition, Internal as Internal,
        InvalidArgument as InvalidArgument, NotFound as NotFound, OutOfRange as OutOfRange,
        PermissionDenied as PermissionDenied, PjrtHubError as PjrtHubError, ResourceExhausted as ResourceExhausted,
        Unauthenticated as Unauthenticated, Unavailable as Unavailable, Unimplemented as Unimplemented,
        Unknown as Unknown,
    )

_EXPORTS = {
    "Candidate": "._discovery",
    "discover": "._discovery",
    "Gated": "._facade",
    "gate": "._facade",
    "Policy": "._policy",
    "Verdict": "._policy",
    "judge": "._policy",
    "strict_from_environment": "._policy",
    "PluginRegistry": "._registry",
    "RegistrySettings": "._registry",
    "default_plugin_name": "._registry",
    "CheckReport": "._reports",
    "ListReport": "._reports",
    "Outcome": "._reports",
    "PluginRecord": "._reports",
    # The error classes that say they live here (``__module__ = "pjrt_hub"``), so that a pickled
    # error finds its class again.
    "Aborted": ".abi.errors",
    "AlreadyExists": ".abi.errors",
    "Cancelled": ".abi.errors",
    "DataLoss": ".abi.errors",
    "DeadlineExceeded": ".abi.errors",
    "FailedPrecondition": ".abi.errors",
    "Internal": ".abi.errors",
    "InvalidArgument": ".abi.errors",
    "NotFound": ".abi.errors",
    "OutOfRange": ".abi.errors",
    "PermissionDenied": ".abi.errors",
    "PjrtHubError": ".abi.errors",
    "ResourceExhausted": ".abi.errors",
    "Unauthenticated": ".abi.errors",
    "Unavailable": ".abi.errors",
    "Unimplemented": ".abi.errors",
    "Unknown": ".abi.errors",
}

__all__ = sorted([*_EXPORTS, "__version__"])

_export, __dir__ = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # Read from the installed distribution, and only when asked: importlib.metadata is not
        # something every plugin's import of pjrt_hub.abi should pay for.
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("pjrt-hub")
        except PackageNotFoundError:
            return "0+unknown"
    return _export(name)
