"""The ctypes bridge as a loader of PJRT C libraries (entry point group ``pjrt_hub.loaders``).

The registry asks every loader to probe a library, judges the answer with the version policy, and
only then asks for the API object. This loader probes in a child process
(:func:`.probe.probe`), adds :func:`.safety.client_creation_risk`, and loads accepted libraries
with :func:`.api.load_api`.
"""

from __future__ import annotations

from typing import Any

from pjrt_hub.abi import Api, hookimpl

__all__ = ["pjrt_hub_load_library", "pjrt_hub_probe_library"]


@hookimpl
def pjrt_hub_probe_library(path: str, timeout: float) -> dict[str, Any] | None:
    """The probe report as JSON data, with ``message``, ``client_creation_risk`` and
    ``probe_cache`` (``hit``, ``stored``, ``not stored`` or ``off``); None for a file that is not
    an ELF shared object (another loader may know it).

    A report cached for this very file (:mod:`.probe_cache`) is used without starting a child.
    """
    import os

    from .probe_cache import LibraryIdentity, ProbeCache
    from .safety import client_creation_risk

    cache = ProbeCache.default()
    identity = None
    report = None
    if cache is not None:
        try:
            identity = LibraryIdentity.of(path)
        except OSError:
            identity = None  # read_elf below says what is wrong with the file
        if identity is not None:
            report = cache.get(identity)
    if report is not None:
        where = os.path.abspath(path)
        if where != report.path:  # the same file, reached through another path (a symlink)
            from .library import default_plugin_name

            report = report.model_copy(update={"path": where, "name": default_plugin_name(path)})
        status = "hit"
    else:
        from .elf import NotElfError, read_elf
        from .probe import probe

        try:
            read_elf(path)
        except NotElfError:
            return None
        except OSError as exc:
            return {"outcome": "load_failed", "message": f"cannot read {path}: {exc}", "path": path}
        report = probe(path, timeout=timeout)
        status = "off"
        if cache is not None and identity is not None:
            # Kept only if the file did not change while it was probed.
            try:
                unchanged = LibraryIdentity.of(path) == identity
            except OSError:
                unchanged = False
            status = "stored" if unchanged and cache.put(identity, report) else "not stored"
    data = report.model_dump(mode="json")
    data["message"] = report.reason or ""
    data["client_creation_risk"] = client_creation_risk(report) if report.ok else None
    data["probe_cache"] = status
    return data


@hookimpl
def pjrt_hub_load_library(path: str, name: str) -> Api | None:
    from .api import load_api

    return load_api(path, name)
