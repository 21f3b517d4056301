"""The ctypes bridge as a loader of PJRT C libraries (entry point group ``pjrt_hub.loaders``).

The registry asks every loader to probe a library, judges the answer with the version policy, and
only then asks for the API object. This loader probes in a child process
(:func:`.probe.probe`), adds :func:`.safety.client_creation_risk`, and loads accepted libraries
with :func:`.api.load_api`.
"""

from __future__ import annotations

from pjrt_hub.abi import Api, hookimpl
from pjrt_hub.abi.probe import ProbeReport

__all__ = ["pjrt_hub_load_library", "pjrt_hub_probe_library"]


@hookimpl
def pjrt_hub_probe_library(path: str, timeout: float) -> ProbeReport | None:
    """The probe report, with ``client_creation_risk`` and ``probe_cache`` (``hit``, ``stored``,
    ``not stored`` or ``off``); None for a file that is not an ELF shared object (another loader
    may know it).

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
            from .library import default_plugin_name

            return ProbeReport(path=path, name=default_plugin_name(path), outcome="load_failed",
                               reason=f"cannot read {path}: {exc}")
        report = probe(path, timeout=timeout)
        status = "off"
        if cache is not None and identity is not None:
            # Kept only if the file did not change while it was probed.
            try:
                unchanged = LibraryIdentity.of(path) == identity
            except OSError:
                unchanged = False
            status = "stored" if unchanged and cache.put(identity, report) else "not stored"
    return report.model_copy(update={"client_creation_risk": client_creation_risk(report) if report.ok else None,
                                     "probe_cache": status})


@hookimpl
def pjrt_hub_load_library(path: str, name: str) -> Api | None:
    from .api import load_api

    return load_api(path, name)
