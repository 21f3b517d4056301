"""abi: the C plugin's ``PJRT_Api`` table is the one its version promises (upstream's
``PjrtCAbiTestBase.FieldOffsetsAndSizes``, seen from outside the library).

The facts come from the probe (the loader's ProbeReport) or from the bridge's loaded library;
the expectations from :mod:`pjrt_hub.abi.history` and :mod:`pjrt_hub.extensions`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pjrt_hub.abi import history
from pjrt_hub.extensions import extension_spec

from .._case import CaseFailure, case, check, skip
from .._context import PluginUnderTest

#: ``PJRT_Api`` before its first function pointer: struct_size, extension_start, PJRT_Api_Version.
API_HEADER_SIZE = 40
#: ``PJRT_Api_Version``: struct_size, extension_start, major_version, minor_version.
API_VERSION_STRUCT_SIZE = 24


@dataclass
class TableFacts:
    """What is known of a plugin's ``PJRT_Api`` table; None where it was not read."""

    struct_size: int | None = None
    version_struct_size: int | None = None
    #: ``(name, struct_size)`` of each extension node, in chain order.
    extensions: list[tuple[str, int | None]] | None = None
    null_functions: list[str] | None = None


def facts(ctx: PluginUnderTest) -> TableFacts:
    """What is known of the plugin's table: the probe report first, else the bridge's library."""
    found = TableFacts()
    probe = ctx.probe
    if probe is not None:
        found.struct_size = probe.api_struct_size
        found.version_struct_size = probe.version_struct_size
        if probe.extensions or probe.extension_layout is not None:
            found.extensions = [(node.name, node.struct_size) for node in probe.extensions]
        if probe.api_struct_size is not None:  # the slots were read with the header that sizes them
            found.null_functions = list(probe.null_functions)
    if found.struct_size is None and ctx.loaded:
        try:
            api = ctx.api
        except CaseFailure:  # no bridge to load it: the probe data is all there is
            api = None
        library = getattr(getattr(api, "unwrapped", None), "library", None)
        if library is not None:
            found.struct_size = library.struct_size
            found.version_struct_size = library.version_struct_size
            nodes, _ = library.extensions()
            found.extensions = [(node.name, node.struct_size) for node in nodes]
    return found


@case("abi", kind="c")
def api_struct_size(ctx: PluginUnderTest) -> None:
    """PJRT_Api.struct_size holds the header and exactly the function slots the history gives the minor."""
    size = facts(ctx).struct_size
    if size is None:
        skip(f"no probe data for {ctx.name}: the PJRT_Api table was not read")
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
    size = facts(ctx).version_struct_size
    if size is None:
        skip(f"no probe data for {ctx.name}: PJRT_Api_Version was not read")
    check(size == API_VERSION_STRUCT_SIZE,
          f"PJRT_Api_Version.struct_size is {size}, expected {API_VERSION_STRUCT_SIZE}")


@case("abi", kind="c", min_api_minor=45)
def extension_struct_sizes(ctx: PluginUnderTest) -> None:
    """Every extension node is at least as large as version 1 of its extension (since 0.45 nodes carry struct_size)."""
    nodes = facts(ctx).extensions
    if nodes is None:
        skip(f"no probe data for {ctx.name}: the extension chain was not read")
    for name, size in nodes:
        spec = extension_spec(name)
        if spec is None or not spec.struct_sizes:
            continue
        smallest = min(spec.struct_sizes.values())
        check(size is not None and size >= smallest,
              f"extension {name} has struct_size {size}, smaller than version 1 of it ({smallest} bytes)")


@case("abi", kind="c")
def no_null_functions(ctx: PluginUnderTest) -> None:
    """Every slot of the table the plugin's minor promises holds a function (a NULL one crashes the caller)."""
    null = facts(ctx).null_functions
    if null is None:
        skip(f"no probe data for {ctx.name}: the function table was not read")
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
