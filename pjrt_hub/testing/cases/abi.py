"""abi: the C plugin's ``PJRT_Api`` table is the one its version promises (upstream's
``PjrtCAbiTestBase.FieldOffsetsAndSizes``, seen from outside the library).

The facts come from the probe (the registry record's details) or from the bridge's loaded library;
the expectations from :mod:`pjrt_hub.abi.history` and :mod:`pjrt_hub.extensions`.
"""

from __future__ import annotations

from typing import Any

from pjrt_hub.abi import history
from pjrt_hub.extensions import extension_spec

from .._case import CaseFailure, case, check, skip
from .._context import PluginUnderTest

#: ``PJRT_Api`` before its first function pointer: struct_size, extension_start, PJRT_Api_Version.
API_HEADER_SIZE = 40
#: ``PJRT_Api_Version``: struct_size, extension_start, major_version, minor_version.
API_VERSION_STRUCT_SIZE = 24


def facts(ctx: PluginUnderTest) -> dict[str, Any]:
    """What is known of the plugin's table: probe details first, else the bridge's library."""
    details = dict(ctx.record.details or {})
    found: dict[str, Any] = {}
    for key, names in (("struct_size", ("api_struct_size", "struct_size")),
                       ("version_struct_size", ("api_version_struct_size", "version_struct_size")),
                       ("extensions", ("extensions",)), ("null_functions", ("null_functions",))):
        for name in names:
            if details.get(name) is not None:
                found[key] = details[name]
                break
    if "struct_size" not in found and ctx.loaded:
        try:
            api = ctx.api
        except CaseFailure:  # no bridge to load it: the probe data is all there is
            api = None
        library = getattr(getattr(api, "unwrapped", None), "library", None)
        for key in ("struct_size", "version_struct_size"):
            if getattr(library, key, None) is not None:
                found[key] = getattr(library, key)
        if library is not None and hasattr(library, "extensions"):
            nodes, _ = library.extensions()
            found["extensions"] = [n.as_dict() for n in nodes]
    return found


@case("abi", kind="c")
def api_struct_size(ctx: PluginUnderTest) -> None:
    """PJRT_Api.struct_size holds the header and exactly the function slots the history gives the minor."""
    known = facts(ctx)
    if "struct_size" not in known:
        skip(f"no probe data for {ctx.name}: the PJRT_Api table was not read")
    size = int(known["struct_size"])
    slots, rest = divmod(size - API_HEADER_SIZE, 8)
    check(size >= API_HEADER_SIZE and rest == 0,
          f"PJRT_Api.struct_size {size} is not {API_HEADER_SIZE} header bytes plus 8-byte function pointers")
    minor = ctx.declared_version.minor if ctx.declared_version else None
    expected = None if minor is None else history.slot_count(minor)
    if expected is None:
        skip(f"the history does not know the slot count of PJRT API {ctx.declared_version} "
             f"({slots} slots read)")
    check(slots == expected, f"plugin {ctx.name} at PJRT API {ctx.declared_version} has {slots} function slots "
                             f"(struct_size {size}); the history gives {expected} for that minor")


@case("abi", kind="c")
def api_version_struct_size(ctx: PluginUnderTest) -> None:
    """PJRT_Api_Version.struct_size is PJRT_Api_Version_STRUCT_SIZE (24)."""
    known = facts(ctx)
    if "version_struct_size" not in known:
        skip(f"no probe data for {ctx.name}: PJRT_Api_Version was not read")
    size = int(known["version_struct_size"])
    check(size == API_VERSION_STRUCT_SIZE,
          f"PJRT_Api_Version.struct_size is {size}, expected {API_VERSION_STRUCT_SIZE}")


@case("abi", kind="c", min_api_minor=45)
def extension_struct_sizes(ctx: PluginUnderTest) -> None:
    """Every extension node is at least as large as version 1 of its extension (since 0.45 nodes carry struct_size)."""
    known = facts(ctx)
    if "extensions" not in known:
        skip(f"no probe data for {ctx.name}: the extension chain was not read")
    for node in known["extensions"]:
        name, size = node.get("name"), node.get("struct_size")
        spec = extension_spec(name) if isinstance(name, str) else None
        if spec is None or not spec.struct_sizes:
            continue
        smallest = min(spec.struct_sizes.values())
        check(size is not None and size >= smallest,
              f"extension {name} has struct_size {size}, smaller than version 1 of it ({smallest} bytes)")


@case("abi", kind="c")
def no_null_functions(ctx: PluginUnderTest) -> None:
    """Every slot of the table the plugin's minor promises holds a function (a NULL one crashes the caller)."""
    known = facts(ctx)
    if "null_functions" not in known:
        skip(f"no probe data for {ctx.name}: the function table was not read")
    null = list(known["null_functions"])
    check(not null, f"plugin {ctx.name} leaves {len(null)} slots of its PJRT_Api NULL: {', '.join(null)}")


@case("abi", kind="c", timeout=120.0)
def args_struct_sizes(ctx: PluginUnderTest) -> None:
    """The Args structs the bridge passes are at least the size the plugin expects for each function
    (asked of the plugin itself: it names its expected struct_size when given a too small one)."""
    try:
        from pjrt_hub.backends.c_api.abi_check import check_struct_sizes
    except ImportError:
        skip("the C bridge (pjrt_hub.backends.c_api) has no struct-size check installed")
    path = ctx.record.library_path
    if not path:
        skip(f"plugin {ctx.name} has no library path")
    report = ctx.call(check_struct_sizes, path, what="asking the plugin for its Args struct sizes", timeout=110.0)
    if getattr(report, "outcome", "ok") != "ok":
        skip(f"the struct-size check could not run: {getattr(report, 'reason', None)}")
    small = report.too_small()
    check(not small, "Args structs smaller than the plugin expects: " + ", ".join(
        f"{c.function} ({c.ours} < {c.plugin_expects})" for c in small))
