"""A served ``PJRT_Api`` as a C plugin of the registry: the C bridge pointed at the struct.

:mod:`.server` lays out a Python plugin's ``PJRT_Api`` for C callers; this module lets pjrt-hub's
own C bridge be that caller, so that everything above the bridge (the conformance suite, ``run``,
``bench``) drives a served plugin exactly as it drives a ``.so``. A served struct has an address,
not a file, so it is named by a pseudo library path ``pjrt-hub-served:NAME``, and a loader
(:data:`LOADER`, added to a registry with ``add_loader``) answers the registry's probe and load
for such paths: the probe reads the struct in this process (it is pjrt-hub's own memory, not a
library that could crash), the load wraps it in a :class:`~.api.CApi`.
"""

from __future__ import annotations

from typing import Any

from pjrt_hub.abi import Api, hookimpl, history

from .server import ServedApi

__all__ = ["LOADER", "SCHEME", "ServedLoader", "candidate", "publish", "served_path"]

#: The prefix of the pseudo library path of a served struct.
SCHEME = "pjrt-hub-served:"

_PUBLISHED: dict[str, tuple[ServedApi, dict[str, Any]]] = {}


def served_path(name: str) -> str:
    return SCHEME + name


def publish(name: str, served: ServedApi, **details: Any) -> str:
    """Make ``served`` loadable by the registry as the C plugin ``name``; returns its path.
    ``details`` join the probe report (``declared_limitations``: the limitations the served
    Python plugin declares, which the conformance suite then applies to it)."""
    _PUBLISHED[name] = (served, dict(details))
    return served_path(name)


def candidate(name: str, source: str) -> Any:
    """A registry candidate for the published struct ``name``."""
    from pjrt_hub._discovery import Candidate

    return Candidate(name, "c", source, library_path=served_path(name))


def _lookup(path: str) -> tuple[ServedApi, dict[str, Any]] | None:
    if not path.startswith(SCHEME):
        return None
    return _PUBLISHED.get(path[len(SCHEME):])


class ServedLoader:
    """The registry's loader for ``pjrt-hub-served:`` paths (runs before the ELF loader)."""

    @hookimpl(tryfirst=True)
    def pjrt_hub_probe_library(self, path: str, timeout: float) -> dict[str, Any] | None:
        found = _lookup(path)
        if found is None:
            if path.startswith(SCHEME):
                return {"outcome": "load_failed", "path": path,
                        "message": f"no PJRT_Api is served under {path[len(SCHEME):]!r} in this process"}
            return None
        served, details = found
        from .library import PluginLibrary

        lib = PluginLibrary.from_address(served.address, served.name, path)
        functions = [n for i, n in enumerate(lib.slot_names[:lib.num_slots]) if lib.slot_pointer(i)]
        nulls = [n for i, n in enumerate(lib.slot_names[:lib.num_slots]) if not lib.slot_pointer(i)]
        nodes, stopped = lib.extensions()
        return {
            "outcome": "ok", "path": path, "name": served.name, "message": "",
            "stage": "done", "api_version": str(lib.version), "api_major": lib.version.major,
            "api_minor": lib.version.minor, "api_struct_size": lib.struct_size,
            "version_struct_size": lib.version_struct_size, "num_slots": lib.num_slots,
            "expected_slots": history.slot_count(lib.version.minor), "functions": functions,
            "null_functions": nulls, "extension_layout": "struct_size_type_next",
            "extensions": [n.as_dict() for n in nodes], "extension_walk_stopped": stopped,
            "platform_name": served.platform_name, "client_creation_risk": None, **details,
        }

    @hookimpl(tryfirst=True)
    def pjrt_hub_load_library(self, path: str, name: str) -> Api | None:
        found = _lookup(path)
        if found is None:
            return None
        from .api import CApi
        from .library import PluginLibrary

        return CApi(PluginLibrary.from_address(found[0].address, name, path))


#: The loader instance to add to a registry (``registry.add_loader(LOADER, "served")``).
LOADER = ServedLoader()
