"""Ask a plugin which ``struct_size`` it expects for each Args struct, and compare with ours.

The functions of ``PJRT_Api`` are asked, and those of the extensions the bridge wraps (Layouts,
MemoryDescriptions, FFI) where their node covers them.

A plugin checks ``args->struct_size`` first thing and answers a too-small one with
"Unexpected PJRT_X_Args size: expected N, got 1". Calling each function with ``struct_size`` 1
therefore reveals N without doing anything else, which makes the plugin an oracle for the struct
table in :mod:`.structs`: ours must never be smaller (the plugin would refuse it), and usually
equals N. A function that does something before the check may crash, so this runs in a child
process; functions known to do that, and those returning ``void``, are not called.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import sys
from typing import Any, Callable

from pydantic import BaseModel, Field

from . import _child

__all__ = ["SizeCheck", "StructSizeReport", "check_struct_sizes"]

#: Not called: they return void, or (CreateViewOfDeviceBuffer) read their arguments before the
#: size check and abort on zeros.
_SKIP = {"PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode",
         "PJRT_Client_CreateViewOfDeviceBuffer"}
_EXPECTED = re.compile(r"Unexpected (\w+) size: expected (\d+), got 1\b")


class SizeCheck(BaseModel):
    function: str
    ours: int
    #: What the plugin said it expects; None when its answer named no size.
    plugin_expects: int | None = None
    message: str | None = None

    @property
    def too_small(self) -> bool:
        return self.plugin_expects is not None and self.ours < self.plugin_expects


class StructSizeReport(BaseModel):
    path: str
    api_version: str | None = None
    outcome: str = "ok"
    reason: str | None = None
    checks: list[SizeCheck] = Field(default_factory=list)

    def too_small(self) -> list[SizeCheck]:
        return [c for c in self.checks if c.too_small]


def _check_here(path: str, lib: Any = None, emit: Callable[[dict[str, Any]], None] = _child.emit) -> dict[str, Any]:
    """The check on ``lib`` (default: the library at ``path``), reporting each stage to ``emit``
    before the call that might crash (the child's snapshots; nothing in process)."""
    from .library import PluginLibrary
    from .structs import STRUCTS, struct_size

    from .extensions import wrap_extension

    lib = lib or PluginLibrary(path)
    report: dict[str, Any] = {"path": path, "api_version": str(lib.version), "checks": [], "finished": False}
    functions: list[tuple[str, Any]] = [(name, lib.function) for name in lib.slot_names[:lib.num_slots]
                                        if name not in _SKIP and lib.has(name)]
    # The functions of the extensions pjrt-hub wraps, where their node covers them.
    nodes, _ = lib.extensions()
    for node in nodes:
        wrapper = wrap_extension(lib, node)
        functions += [(name, wrapper.function) for name in wrapper.FUNCTIONS if wrapper.has(name)]
    for name, function in functions:
        args_name = name + "_Args"
        if args_name not in STRUCTS:
            continue
        report["stage"] = name
        emit(report)
        probe_args = (ctypes.c_char * 1024)()
        ctypes.c_size_t.from_buffer(probe_args).value = 1
        err = function(name)(ctypes.addressof(probe_args))
        entry: dict[str, Any] = {"function": name, "ours": struct_size(args_name, lib.minor)}
        if err:
            message = lib.error(err, name).message
            match = _EXPECTED.search(message)
            entry["plugin_expects"] = int(match.group(2)) if match else None
            entry["message"] = None if match else message[:200]
        report["checks"].append(entry)
    report["finished"] = True
    return report


def check_struct_sizes(path: str, *, timeout: float = 120.0) -> StructSizeReport:
    """Run the check in a child process; a crash is reported with the function that caused it.

    A struct pjrt-hub serves in this process (a ``pjrt-hub-served:`` path) is checked here: a
    child process has no such struct, and pjrt-hub's own struct answers every call with an error
    rather than crash."""
    served = _served_library(path)
    if served is not None:
        checked = _check_here(path, served, emit=lambda _snapshot: None)
        data = {k: v for k, v in checked.items() if k in StructSizeReport.model_fields}
        return StructSizeReport.model_validate(data)
    result = _child.run_child("pjrt_hub.backends.c_api.abi_check", [path], timeout=timeout)
    data = {k: v for k, v in result.snapshot.items() if k in StructSizeReport.model_fields}
    data.setdefault("path", path)
    failure = result.failure(timeout)
    if failure is not None:
        data["outcome"], data["reason"] = failure
    return StructSizeReport.model_validate(data)


def _served_library(path: str) -> Any:
    """The C bridge's view of the struct served under ``path``, or None for a library path."""
    from .served import SCHEME, _lookup

    if not path.startswith(SCHEME):
        return None
    found = _lookup(path)
    if found is None:
        return None
    from .library import PluginLibrary

    return PluginLibrary.from_address(found.served.address, found.served.name, path)


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrt_hub.backends.c_api.abi_check",
                                     description="Compare a plugin's expected Args struct sizes with pjrt-hub's.")
    parser.add_argument("path")
    ns = parser.parse_args(argv)
    _child.emit(_check_here(ns.path))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_main())
