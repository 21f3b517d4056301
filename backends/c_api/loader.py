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
    """The probe report as JSON data, with ``message`` and ``client_creation_risk``; None for a
    file that is not an ELF shared object (another loader may know it)."""
    from .elf import NotElfError, read_elf
    from .probe import probe
    from .safety import client_creation_risk

    try:
        read_elf(path)
    except NotElfError:
        return None
    except OSError as exc:
        return {"outcome": "load_failed", "message": f"cannot read {path}: {exc}", "path": path}
    report = probe(path, timeout=timeout)
    data = report.model_dump(mode="json")
    data["message"] = report.reason or ""
    data["client_creation_risk"] = client_creation_risk(report) if report.ok else None
    return data


@hookimpl
def pjrt_hub_load_library(path: str, name: str) -> Api | None:
    from .api import load_api

    return load_api(path, name)
