"""Probe a PJRT C plugin in a child process: does it load, what version and functions and extensions
does it offer, what attributes does it report, without risking the caller.

A ``.so`` can abort in a static initializer (jax-tt-plugin aborts on client creation), hang (libtpu
looks for a cloud metadata server), fail to load (a CUDA plugin without libcupti) or segfault when
read with the wrong layout (extension nodes before 0.45 have no ``struct_size``). So the parent
starts ``python -m pjrt_hub.backends.c_api.probe PATH --progress`` with a timeout; the child writes
one JSON snapshot per stage, and when it dies the parent still has everything up to the stage that
killed it. Nothing here creates a client: that is :func:`.safety.safe_client_check`'s job.

The result is a :class:`~pjrt_hub.abi.probe.ProbeReport`, the loader hook's answer and so part of
the contract; its fields are described there.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from typing import Any, Callable

from pjrt_hub.abi.probe import ExtensionReport, ProbeReport
from pjrt_hub.abi.probe import ProbeOutcome as Outcome

# ctypes and the child runner are imported where they are used: the host imports this module for
# ProbeReport alone when a probe comes from the cache (pjrt-hub list), and pays only for that.

__all__ = ["ExtensionReport", "Outcome", "ProbeReport", "probe", "resolve_library"]


# -- resolving what to probe -----------------------------------------------------------------


def _plugin_libraries(folder: str) -> list[str]:
    from ..elf import NotElfError, read_elf

    found = []
    for root, _dirs, files in os.walk(folder):
        for fname in sorted(files):
            if ".so" not in fname:
                continue
            full = os.path.join(root, fname)
            try:
                if read_elf(full).exports_pjrt():
                    found.append(full)
            except (NotElfError, OSError):
                continue
    return found


def resolve_library(path_or_name: str) -> str:
    """The ``.so`` to probe: a file as given; in a folder, the one library exporting
    ``GetPjrtApi``; for an importable package name (``xla_plugins.xla_cpu_pjrt``), the same inside
    its folder. FileNotFoundError says what was looked at."""
    if os.path.isfile(path_or_name):
        return os.path.abspath(path_or_name)
    folder = path_or_name if os.path.isdir(path_or_name) else None
    if folder is None and os.sep not in path_or_name:
        try:
            spec = importlib.util.find_spec(path_or_name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            folder = list(spec.submodule_search_locations)[0]
        elif spec is not None and spec.origin and os.path.isfile(spec.origin):
            folder = os.path.dirname(spec.origin)
    if folder is None:
        raise FileNotFoundError(f"{path_or_name!r} is neither a file, a folder nor an importable package")
    libraries = _plugin_libraries(folder)
    if len(libraries) != 1:
        what = "no shared library exporting GetPjrtApi" if not libraries else \
            "several libraries exporting GetPjrtApi: " + ", ".join(libraries)
        raise FileNotFoundError(f"{folder} holds {what}; pass the .so path")
    return libraries[0]


# -- the child -------------------------------------------------------------------------------


def _probe_here(path: str, *, initialize: bool, emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Run every stage in this process; ``emit`` gets a snapshot before each risky step."""
    import ctypes

    from pjrt_hub.abi import PluginValidationError, history

    from ..elf import NotElfError, read_elf
    from ..library import PluginLibrary, decode_named_values, default_plugin_name

    report: dict[str, Any] = {"path": path, "name": default_plugin_name(path), "outcome": "ok",
                              "warnings": [], "finished": False}
    warn = report["warnings"].append

    def stage(name: str) -> None:
        report["stage"] = name
        emit(report)

    stage("elf")
    try:
        info = read_elf(path)
        report["machine"] = info.machine_name
        report["exports"] = sorted(s for s in info.exports if "pjrt" in s.lower())
        report["needed"] = list(info.needed)
        elf_says_no_symbol = not info.exports_pjrt()
    except (NotElfError, OSError) as exc:
        warn(f"could not read the ELF symbols: {exc}")
        elf_says_no_symbol = False

    stage("dlopen")
    try:
        dll = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    except OSError as exc:
        report.update(outcome="load_failed", reason=str(exc))
        return report
    try:
        get_api = dll.GetPjrtApi
    except AttributeError:
        report.update(outcome="no_symbol", reason=f"{path} does not export GetPjrtApi")
        return report
    if elf_says_no_symbol:
        warn("GetPjrtApi resolves through dlsym but is not in the file's own dynamic symbols")

    stage("GetPjrtApi")
    get_api.restype = ctypes.c_void_p
    get_api.argtypes = []
    if not get_api():
        report.update(outcome="bad_layout", reason="GetPjrtApi() returned NULL")
        return report

    stage("header")
    try:
        lib = PluginLibrary(path)
    except PluginValidationError as exc:
        report.update(outcome="bad_layout", reason=exc.reason)
        return report
    minor = lib.minor
    report.update(api_version=str(lib.version), api_major=lib.version.major, api_minor=minor,
                  api_struct_size=lib.struct_size, version_struct_size=lib.version_struct_size,
                  num_slots=lib.num_slots, expected_slots=history.slot_count(minor))
    if lib.version_struct_size != 24:
        warn(f"PJRT_Api_Version.struct_size is {lib.version_struct_size}, not 24: the plugin does "
             "not fill it in (major and minor read as usual)")
    if lib.version.major != 0:
        warn(f"major version {lib.version.major}: pjrt-hub knows only major 0")
    expected = report["expected_slots"]
    first_stale, last_stale, _ = history.STALE_API_STRUCT_SIZE
    if first_stale <= minor <= last_stale:
        warn(f"PJRT C API 0.{minor} reports a stale PJRT_Api.struct_size (ends at "
             f"PJRT_Client_TopologyDescription); functions past slot {lib.num_slots - 1} are in the "
             "table but outside struct_size, and are not called")
    if expected is not None and expected != lib.num_slots:
        warn(f"the history says a 0.{minor} plugin reports {expected} slots; this one has {lib.num_slots}")

    stage("functions")
    report["slot_layout_verified"] = minor not in history.UNSTABLE_SLOT_LAYOUT_MINORS
    functions: list[str] = []
    nulls: list[str] = []
    for slot in range(lib.num_slots):
        name = lib.slot_names[slot] if slot < len(lib.slot_names) else None
        if name is None:
            report["unnamed_slots"] = report.get("unnamed_slots", 0) + 1
            continue
        (functions if lib.slot_pointer(slot) else nulls).append(name)
    report["functions"] = functions
    report["null_functions"] = nulls

    stage("extensions")
    if minor < 31:
        report["extension_layout"] = "none"
    else:
        report["extension_layout"] = "struct_size_type_next" if minor >= 45 else "type_next"
        nodes, stopped = lib.extensions()
        report["extensions"] = [node.as_dict() for node in nodes]
        report["extension_walk_stopped"] = stopped
        if stopped:
            warn(f"extension chain: {stopped}")

    if initialize:
        stage("initialize")
        try:
            lib.call("PJRT_Plugin_Initialize", lib.args("PJRT_Plugin_Initialize_Args"))
            report["initialized"] = True
        except Exception as exc:  # noqa: BLE001 - recorded, the probe goes on
            warn(f"PJRT_Plugin_Initialize failed: {exc}")

    stage("attributes")
    if lib.has("PJRT_Plugin_Attributes"):
        try:
            args = lib.args("PJRT_Plugin_Attributes_Args")
            lib.call("PJRT_Plugin_Attributes", args)
            report["attributes"] = decode_named_values(args.attributes, args.num_attributes,
                                                       what="PJRT_Plugin_Attributes", plugin=lib.name)
        except Exception as exc:  # noqa: BLE001
            report["attributes_error"] = str(exc)
    else:
        report["attributes_error"] = lib.unavailable_reason("PJRT_Plugin_Attributes")
    report["stage"] = "done"
    return report


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pjrt_hub.backends.c_api.probe",
        description="Probe a PJRT C plugin library in this process and print what it offers.")
    parser.add_argument("path", help="the plugin .so, its folder or its package name")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--progress", action="store_true",
                        help="print a JSON snapshot per stage (what the parent process reads)")
    parser.add_argument("--initialize", action="store_true",
                        help="call PJRT_Plugin_Initialize before reading the attributes")
    ns = parser.parse_args(argv)
    try:
        path = resolve_library(ns.path)
    except FileNotFoundError as exc:
        print(json.dumps({"error": str(exc)}) if ns.json or ns.progress else str(exc))
        return 2

    from .. import _child

    def emit(snapshot: dict[str, Any]) -> None:
        if ns.progress:
            _child.emit(snapshot)

    report = _probe_here(path, initialize=ns.initialize, emit=emit)
    report["finished"] = True
    if ns.progress or ns.json:
        _child.emit(report)
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    sys.stdout.flush()
    # Skip interpreter teardown: some plugins crash in their static destructors, and the answer
    # is already out.
    os._exit(0)


# -- the parent ------------------------------------------------------------------------------


def probe(path_or_name: str, *, timeout: float = 60.0, initialize: bool = False,
          env: dict[str, str] | None = None) -> ProbeReport:
    """Probe a plugin library in a child process that may crash, abort or hang without harm.

    ``initialize`` also calls ``PJRT_Plugin_Initialize`` (off by default: the attributes are
    static data, and libtpu's initializer takes a cross-process lock). Never raises for what the
    plugin does; FileNotFoundError if ``path_or_name`` names no plugin library.
    """
    from .._child import run_child
    from ..library import default_plugin_name

    path = resolve_library(path_or_name)
    args = [path, "--progress"] + (["--initialize"] if initialize else [])
    result = run_child("pjrt_hub.backends.c_api.probe", args, timeout=timeout, env=env)
    data: dict[str, Any] = {"path": path, "name": default_plugin_name(path)}
    data.update({k: v for k, v in result.snapshot.items() if k in ProbeReport.model_fields})
    data.update(elapsed_s=result.elapsed_s, exit_code=result.returncode, stderr_tail=result.stderr_tail,
                stderr_highlights=result.stderr_highlights, signal=result.signal)
    failure = result.failure(timeout)
    if failure is not None:
        data["outcome"], data["reason"] = failure
    return ProbeReport.model_validate(data)

