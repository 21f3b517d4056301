"""extensions: every extension a plugin offers is usable by its protocol.

The version a plugin offers decides which methods it must have (``@added(n)`` in
:mod:`pjrt_hub.extensions`); the smoke calls then use each method of that version on real objects
(a buffer, the client, compiled programs, a device) and check the answers are right in the
protocol's types: layouts are permutations of the right rank, one per output or parameter; memory
kinds cover the device's memories, the default one first; FFI type ids are new for new types.
"""

from __future__ import annotations

import ctypes
import uuid
from typing import Any

import numpy as np

from pjrt_hub.abi import BufferType
from pjrt_hub.extensions import KNOWN_EXTENSIONS, ExtensionSpec, MemoryLayout

from .._case import Case, add_case, case, check, fail, skip
from .._context import PluginUnderTest
from .._programs import add_one, two_outputs
from .client import device_id


def _unwrap(obj: Any) -> Any:
    return getattr(obj, "unwrapped", obj)


def _permutation(layout: Any, rank: int, what: str) -> None:
    check(isinstance(layout, MemoryLayout), f"{what} returned {layout!r}, not a pjrt_hub.extensions.MemoryLayout")
    order = tuple(layout.minor_to_major)
    check(sorted(order) == list(range(rank)), f"{what}: minor_to_major {order} is not a permutation of {rank} dimensions")


def _executable_layouts(ctx: PluginUnderTest, method: Any, name: str, ranks: Any) -> None:
    for program, what in ((add_one(), "add_one"), (two_outputs(), "two_outputs")):
        loaded = ctx.compile(program)
        expected = ranks(loaded, what)
        layouts = ctx.call(method, _unwrap(loaded), what=f"Layouts.{name}({what})")
        check(isinstance(layouts, list) and len(layouts) == len(expected),
              f"Layouts.{name}({what}) returned {layouts!r}, expected {len(expected)} layouts")
        for i, (layout, rank) in enumerate(zip(layouts, expected)):
            _permutation(layout, rank, f"Layouts.{name}({what})[{i}]")


def _output_ranks(loaded: Any, what: str) -> list[int]:
    return [len(dims) for dims in loaded.get_executable().output_dimensions()]


def _parameter_ranks(loaded: Any, what: str) -> list[int]:
    return {"add_one": [1], "two_outputs": [2, 2]}[what]


def _smoke_layouts(ctx: PluginUnderTest, impl: Any, version: int) -> None:
    _permutation(impl.client_default_layout(_unwrap(ctx.client), BufferType.F32, (2, 3)), 2,
                 "Layouts.client_default_layout(F32[2,3])")
    buffer = ctx.put(np.zeros((2, 3, 4), np.float32))
    _permutation(impl.buffer_memory_layout(_unwrap(buffer)), 3, "Layouts.buffer_memory_layout(F32[2,3,4])")
    if version >= 2:
        _executable_layouts(ctx, impl.executable_output_layouts, "executable_output_layouts", _output_ranks)
    if version >= 3:
        _executable_layouts(ctx, impl.executable_parameter_layouts, "executable_parameter_layouts", _parameter_ranks)


def _smoke_memory_descriptions(ctx: PluginUnderTest, impl: Any, version: int) -> None:
    device = ctx.device
    kinds = impl.memory_descriptions(_unwrap(device.get_description()))
    check(isinstance(kinds, list) and all(isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], str)
                                          and isinstance(k[1], int) for k in kinds),
          f"MemoryDescriptions.memory_descriptions returned {kinds!r}, expected a list of (kind, kind_id)")
    memories = sorted({m.kind() for m in device.addressable_memories()})
    check(kinds, f"MemoryDescriptions.memory_descriptions describes no memory of device {device_id(device)}, "
                 f"whose memories are {memories}")
    default = device.default_memory().kind()
    check(kinds[0][0] == default, f"MemoryDescriptions lists {kinds[0][0]!r} first, but the default memory is {default!r}")
    missing = [k for k in memories if k not in {kind for kind, _ in kinds}]
    check(not missing, f"MemoryDescriptions lists {[k for k, _ in kinds]}, without the device's memories {missing}")


def _smoke_ffi(ctx: PluginUnderTest, impl: Any, version: int) -> None:
    # XLA's type registry is per process and names are registered once: unique names per run.
    base = f"pjrt_hub.conformance.{ctx.name}.{uuid.uuid4().hex}"
    first, second = impl.type_id_register(base + ".a"), impl.type_id_register(base + ".b")
    check(isinstance(first, int) and isinstance(second, int) and first != second and 0 not in (first, second),
          f"FFI.type_id_register gave the ids {first!r} and {second!r} to two new types, expected two "
          "different non-zero ints")


SMOKE = {"Layouts": _smoke_layouts, "MemoryDescriptions": _smoke_memory_descriptions, "FFI": _smoke_ffi}


def _extension_case(spec: ExtensionSpec) -> Case:
    def run(ctx: PluginUnderTest) -> None:
        version = ctx.offered_extensions[spec.name]
        offered = ctx.api.extensions()
        impl = offered.get(spec.name)
        if impl is None:
            fail(f"plugin {ctx.name} declares {spec.name} {version}, but its Api offers no implementation "
                 f"(offers: {', '.join(sorted(offered)) or 'none'})")
        missing = spec.missing_methods(impl, version)
        check(not missing, f"{spec.name} {version} of plugin {ctx.name} lacks {', '.join(missing)} "
                           f"({type(impl).__name__})")
        smoke = SMOKE.get(spec.name)
        # Version 0: a node too small for version 1 (abi/extension_struct_sizes names it); no
        # method of the protocol is promised, so none is called.
        if smoke is not None and version >= 1:
            smoke(ctx, impl, version)

    return Case("extensions", spec.name,
                f"The {spec.name} extension ({spec.description}), where offered, has every method of the "
                "version offered, and answers in the protocol's types.",
                run, needs_extensions=(spec.name,))


for _spec in KNOWN_EXTENSIONS.values():
    if _spec.protocol is not None:
        add_case(_extension_case(_spec))


@case("extensions", kind="python")
def declared_are_offered(ctx: PluginUnderTest) -> None:
    """The Api offers (Api.extensions) exactly the extensions the plugin declares."""
    declared = set(ctx.offered_extensions)
    offered = set(ctx.api.extensions())
    check(declared == offered, f"plugin {ctx.name} declares extensions {sorted(declared)} but its Api offers "
                               f"{sorted(offered)}")


# -- what the extensions report against how the data really sits --------------------------------


def _as_laid_out(raw: bytes, dtype: np.dtype, dims: tuple[int, ...], minor_to_major: tuple[int, ...]) -> np.ndarray:
    """The logical array stored in ``raw`` with the given dimension order (no tiles)."""
    major_to_minor = list(reversed(minor_to_major))
    count = int(np.prod(dims, dtype=np.int64))
    stored = np.frombuffer(raw, dtype=dtype, count=count).reshape([dims[d] for d in major_to_minor])
    return stored.transpose(np.argsort(major_to_minor))


def _check_layout_against_memory(ctx: PluginUnderTest, buffer: Any, layout: Any, host: np.ndarray, what: str) -> None:
    _permutation(layout, host.ndim, what)
    if tuple(getattr(layout, "tiles", ()) or ()):
        skip(f"{what} is tiled ({layout.tiles}): the element order in memory is not read from here")
    raw = ctypes.string_at(buffer.unsafe_pointer(), host.nbytes)
    seen = _as_laid_out(raw, host.dtype, host.shape, tuple(layout.minor_to_major))
    check(np.array_equal(seen, host),
          f"{what} says minor_to_major {tuple(layout.minor_to_major)}, but read that way the buffer's memory holds "
          f"{seen.tolist()}, not {host.tolist()}: the layout does not describe how the data sits")


@case("extensions", needs_extensions=("Layouts",))
def layouts_describe_memory(ctx: PluginUnderTest) -> None:
    """Layouts.buffer_memory_layout (and, from version 2, executable_output_layouts) describe the
    order in which the elements really sit in the buffer's memory (read where the buffer is in
    host memory), and client_default_layout is the layout new buffers get."""
    impl = ctx.api.extensions()["Layouts"]
    version = ctx.offered_extensions["Layouts"]
    hosts = [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5,
             (np.arange(15, dtype=np.uint8) * 3).reshape(3, 5).T]
    fresh = ctx.put(np.zeros((2, 3), np.float32))
    default = ctx.call(impl.client_default_layout, _unwrap(ctx.client), BufferType.F32, (2, 3),
                       what="Layouts.client_default_layout(F32[2,3])")
    actual = ctx.call(impl.buffer_memory_layout, _unwrap(fresh), what="Layouts.buffer_memory_layout(F32[2,3])")
    check(tuple(default.minor_to_major) == tuple(actual.minor_to_major),
          f"Layouts.client_default_layout(F32[2,3]) says minor_to_major {tuple(default.minor_to_major)}, but a new "
          f"F32[2,3] buffer has {tuple(actual.minor_to_major)}: the default layout is the one new buffers get")
    for host in hosts:
        buffer = ctx.put(host)
        if not buffer.is_on_cpu():
            skip(f"the buffers of plugin {ctx.name} are not in host memory: their layout cannot be checked from here")
        host = np.array(host, order="C")
        what = f"Layouts.buffer_memory_layout({host.dtype}{list(host.shape)})"
        layout = ctx.call(impl.buffer_memory_layout, _unwrap(buffer), what=what)
        _check_layout_against_memory(ctx, buffer, layout, host, what)
    if version >= 2:
        loaded = ctx.compile(two_outputs())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        y = np.full((2, 3), 2.0, np.float32)
        outputs = ctx.execute(loaded, [[ctx.put(x), ctx.put(y)]])[0]
        layouts = ctx.call(impl.executable_output_layouts, _unwrap(loaded), what="Layouts.executable_output_layouts")
        check(isinstance(layouts, list) and len(layouts) == 2,
              f"Layouts.executable_output_layouts(two_outputs) returned {layouts!r}, expected 2 layouts")
        for index, (output, layout, expected) in enumerate(zip(outputs, layouts, (x + y, x * y))):
            ctx.fetch(output)  # ready before its memory is read
            _check_layout_against_memory(ctx, output, layout, expected,
                                         f"Layouts.executable_output_layouts(two_outputs)[{index}]")


@case("extensions", needs_extensions=("MemoryDescriptions",), min_api_minor=48)
def memory_descriptions_match_memories(ctx: PluginUnderTest) -> None:
    """MemoryDescriptions lists, for each device, exactly the (kind, kind id) of the memories the
    device really has, and a buffer copied into each described kind sits in a memory of that kind."""
    impl = ctx.api.extensions()["MemoryDescriptions"]
    for device in ctx.devices:
        described = ctx.call(impl.memory_descriptions, _unwrap(device.get_description()),
                             what="MemoryDescriptions.memory_descriptions")
        described = [tuple(d) for d in described]
        actual = sorted({(m.kind(), m.kind_id()) for m in device.addressable_memories()})
        check(sorted(set(described)) == actual,
              f"MemoryDescriptions describes device {device_id(device)}'s memories as {sorted(set(described))} "
              f"(kind, kind id), but its memories are {actual}")
    source = ctx.put(np.array([1.0, 2.0], np.float32))
    by_kind = {m.kind(): m for m in ctx.device.addressable_memories()}
    for kind, kind_id in ctx.call(impl.memory_descriptions, _unwrap(ctx.device.get_description()),
                                  what="MemoryDescriptions.memory_descriptions"):
        copy = ctx.call(source.copy_to_memory, by_kind[kind], what=f"PJRT_Buffer_CopyToMemory({kind})")
        placed = copy.memory()
        check((placed.kind(), placed.kind_id()) == (kind, kind_id),
              f"a buffer copied into the described memory {kind} (kind id {kind_id}) sits in {placed.kind()} "
              f"(kind id {placed.kind_id()})")
