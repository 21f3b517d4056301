"""Cases from reading pjrt_c_api.h's extensions functions sentence by sentence (pjrt_hub.testing.contract.extensions
lists each behaviour and the case that checks it).

They look where an extension's answer can be right in form and still wrong: a layout that is the
right permutation but not the one the buffer, the output or a new buffer of another shape really
gets; executable layouts that change when the same program is compiled again, loaded, or read back
from its serialized form, or that one program inherits from another of the same module name; a
layout that is a view of its buffer instead of a value the caller owns; a memory kind listed
twice, or with another id on another device or in an ahead-of-time description; and calls that
take, instead of refusing, an object that is not what they describe. The Layouts header also
promises frameworks that programs may carry ``mhlo.layout_mode`` attributes once the extension is
offered, which one case compiles.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import numpy as np

from pjrt_hub.abi import BufferType, ErrorCode, PjrtError, Unimplemented, from_numpy_dtype

from .._case import case, check, expect_error, fail, skip
from .._context import PluginUnderTest, describe
from .._programs import main_module, tensor
from .client import device_id
from .extensions import _unwrap


def _extension(ctx: PluginUnderTest, name: str) -> tuple[Any, int]:
    """The plugin's implementation of an extension and the version it offers."""
    impl = ctx.api.extensions().get(name)
    if impl is None:
        fail(f"plugin {ctx.name} declares the {name} extension, but Api.extensions() offers no implementation")
    return impl, ctx.offered_extensions[name]


def _key(layout: Any) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """A layout as a plain value: its dimension order and its tiles."""
    return (tuple(int(d) for d in layout.minor_to_major),
            tuple(tuple(int(d) for d in tile) for tile in (getattr(layout, "tiles", ()) or ())))


def _show(key: tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]) -> str:
    order, tiles = key
    return f"minor_to_major {order}" + (f" tiles {tiles}" if tiles else "")


def _program(name: str, params: list[str], results: list[str], body: list[str], *,
             attributes: str = "") -> str:
    """A module of one ``@main`` in JAX's printed form; ``attributes`` go on every argument and result."""
    extra = f", {attributes}" if attributes else ""
    args = ", ".join(f"%arg{i}: {t}" + (f" {{{attributes}}}" if attributes else "") for i, t in enumerate(params))
    outs = ", ".join(f"{t} {{jax.result_info = \"[{i}]\"{extra}}}" for i, t in enumerate(results))
    return main_module(name, args, outs, "".join(f"    {line}\n" for line in body))


# -- Layouts -------------------------------------------------------------------------------------

#: Element types and shapes a default layout is asked for: a scalar, an empty array, ranks 1 to 4.
_SHAPES: tuple[tuple[Any, tuple[int, ...]], ...] = (
    (np.float32, ()), (np.float32, (0, 3)), (np.int8, (5,)), (np.float64, (2, 3, 4)), (np.bool_, (2, 1, 3, 2)),
    (np.int32, (3, 4)),
)


@case("extensions", needs_extensions=("Layouts",))
def default_layout_is_every_new_buffers(ctx: PluginUnderTest) -> None:
    """Layouts.client_default_layout (PJRT_Layouts_PJRT_Client_GetDefaultLayout) gives, for scalars,
    empty arrays and ranks 1 to 4 of several element types, the layout a buffer of that type and
    shape gets when it is put on the device, and the same answer each time it is asked."""
    impl, _ = _extension(ctx, "Layouts")
    client = _unwrap(ctx.client)
    for dtype, dims in _SHAPES:
        kind = from_numpy_dtype(np.dtype(dtype))
        what = f"Layouts.client_default_layout({kind.name}{list(dims)})"
        default = ctx.call(impl.client_default_layout, client, kind, dims, what=what)
        again = ctx.call(impl.client_default_layout, client, kind, dims, what=what)
        check(_key(default) == _key(again),
              f"{what} answered {_show(_key(default))}, then {_show(_key(again))}: the default layout of one "
              "type and shape is one layout")
        order = _key(default)[0]
        check(sorted(order) == list(range(len(dims))),
              f"{what} gave {_show(_key(default))}, which is not a permutation of the {len(dims)} dimensions")
        buffer = ctx.put(np.zeros(dims, dtype))
        actual = ctx.call(impl.buffer_memory_layout, _unwrap(buffer),
                          what=f"Layouts.buffer_memory_layout({kind.name}{list(dims)})")
        check(_key(actual) == _key(default),
              f"{what} says {_show(_key(default))}, but a new {kind.name}{list(dims)} buffer has "
              f"{_show(_key(actual))} (Layouts.buffer_memory_layout): the default layout is the one new buffers get")


@case("extensions", needs_extensions=("Layouts",))
def buffer_layout_outlives_its_buffer(ctx: PluginUnderTest) -> None:
    """A layout from Layouts.buffer_memory_layout (PJRT_Layouts_PJRT_Buffer_MemoryLayout) is the
    caller's (in C it is freed with PJRT_Layouts_MemoryLayout_Destroy, not with the buffer): read
    after the buffer is deleted, it says what it said before."""
    impl, _ = _extension(ctx, "Layouts")
    buffer = ctx.put(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    layout = ctx.call(impl.buffer_memory_layout, _unwrap(buffer), what="Layouts.buffer_memory_layout(F32[2,3,4])")
    before = _key(layout)
    ctx.call(buffer.delete, what="PJRT_Buffer_Delete")
    try:
        after = _key(layout)
    except Exception as exc:  # noqa: BLE001 - whatever a view of the freed buffer raises is the finding
        fail(f"the layout Layouts.buffer_memory_layout returned ({_show(before)}) cannot be read once the buffer is "
             f"deleted ({describe(exc)}): it is a view of the buffer, not a layout the caller owns")
    check(after == before, f"the layout Layouts.buffer_memory_layout returned said {_show(before)}; after the buffer "
                           f"was deleted it says {_show(after)}: a returned layout is the caller's and does not change")


def _refused(ctx: PluginUnderTest, call: Callable[..., Any], *args: Any, what: str) -> None:
    expect_error(lambda: ctx.call(call, *args, what=what), code=ErrorCode.INVALID_ARGUMENT,
                 what=f"{what}: the call must refuse it")


@case("extensions", needs_extensions=("Layouts",))
def layouts_refuse_what_they_cannot_describe(ctx: PluginUnderTest) -> None:
    """The Layouts calls refuse with INVALID_ARGUMENT what they cannot describe: a device given as
    the buffer of buffer_memory_layout, or as the client of client_default_layout; an element type
    that is no PJRT_Buffer_Type and negative dimensions for client_default_layout; a buffer given
    as the executable of executable_output_layouts (version 2) and executable_parameter_layouts
    (version 3)."""
    impl, version = _extension(ctx, "Layouts")
    client, device = _unwrap(ctx.client), _unwrap(ctx.device)
    _refused(ctx, impl.buffer_memory_layout, device, what="Layouts.buffer_memory_layout of a device, not a buffer")
    _refused(ctx, impl.client_default_layout, device, BufferType.F32, (2, 3),
             what="Layouts.client_default_layout of a device, not a client")
    _refused(ctx, impl.client_default_layout, client, "f32", (2, 3),
             what="Layouts.client_default_layout of the element type 'f32' (a string, no PJRT_Buffer_Type)")
    _refused(ctx, impl.client_default_layout, client, BufferType.F32, (2, -3),
             what="Layouts.client_default_layout of the dimensions [2, -3]")
    buffer = _unwrap(ctx.put(np.zeros(4, np.float32)))
    if version >= 2:
        _refused(ctx, impl.executable_output_layouts, buffer,
                 what="Layouts.executable_output_layouts of a buffer, not an executable")
    if version >= 3:
        _refused(ctx, impl.executable_parameter_layouts, buffer,
                 what="Layouts.executable_parameter_layouts of a buffer, not an executable")


#: Two outputs of different ranks, in the other order than the parameters, so that a list given
#: in the wrong order, or the parameters' for the outputs', shows.
_MIXED = _program("jit_layouts", [tensor((2, 3), "f32"), tensor((4,), "f32")],
                  [tensor((4,), "f32"), tensor((2, 3), "f32")],
                  ["%0 = stablehlo.add %arg1, %arg1 : tensor<4xf32>",
                   "%1 = stablehlo.multiply %arg0, %arg0 : tensor<2x3xf32>",
                   "return %0, %1 : tensor<4xf32>, tensor<2x3xf32>"])
#: Another program of the same module name (JAX names every ``jax.jit(f)`` after ``f``), of rank 3.
_SAME_NAME = _program("jit_layouts", [tensor((2, 2, 2), "f32")], [tensor((2, 2, 2), "f32")],
                      ["%0 = stablehlo.add %arg0, %arg0 : tensor<2x2x2xf32>", "return %0 : tensor<2x2x2xf32>"])


def _layouts_of(ctx: PluginUnderTest, method: Any, executable: Any, what: str) -> list[Any]:
    layouts = ctx.call(method, _unwrap(executable), what=what)
    check(isinstance(layouts, list), f"{what} returned {layouts!r}, not a list of layouts")
    return [_key(layout) for layout in layouts]


def _check_output_layouts(ctx: PluginUnderTest, impl: Any, loaded: Any, inputs: list[np.ndarray],
                          program: str) -> list[Any]:
    """The output layouts of ``loaded``, checked against the buffers an execution returns."""
    what = f"Layouts.executable_output_layouts({program})"
    layouts = _layouts_of(ctx, impl.executable_output_layouts, loaded, what)
    outputs = ctx.execute(loaded, [[ctx.put(x) for x in inputs]])[0]
    check(len(layouts) == len(outputs),
          f"{what} gave {len(layouts)} layouts; an execution returns {len(outputs)} outputs")
    for index, (layout, output) in enumerate(zip(layouts, outputs)):
        actual = _key(ctx.call(impl.buffer_memory_layout, _unwrap(output),
                               what=f"Layouts.buffer_memory_layout(output {index})"))
        check(layout == actual, f"{what}[{index}] says {_show(layout)}, but output {index} of an execution "
                                f"(dimensions {list(output.dimensions())}) has {_show(actual)}")
    return layouts


@case("extensions", needs_extensions=("Layouts",))
def executable_layouts_are_their_own_and_stay(ctx: PluginUnderTest) -> None:
    """From Layouts version 2, executable_output_layouts (PJRT_Layouts_PJRT_Executable_GetOutputLayouts)
    gives, output by output, the layout of the buffer an execution returns there; the same for the
    loaded executable and its PJRT_Executable, for the program compiled again and for the executable
    read back by PJRT_Executable_DeserializeAndLoad; a program of the same module name gets its own.
    From version 3, executable_parameter_layouts gives each parameter the client's default layout
    for its type and shape (no layout_mode asks for another), through the same round trips."""
    impl, version = _extension(ctx, "Layouts")
    if version < 2:
        skip(f"plugin {ctx.name} offers Layouts {version}; executable layouts came with version 2")
    client = _unwrap(ctx.client)
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.float32)
    loaded = ctx.compile(_MIXED)
    layouts = _check_output_layouts(ctx, impl, loaded, [x, y], "two outputs of ranks 1 and 2")
    defaults = [_key(ctx.call(impl.client_default_layout, client, BufferType.F32, dims,
                              what=f"Layouts.client_default_layout(F32{list(dims)})")) for dims in ((2, 3), (4,))]
    parameters = None
    if version >= 3:
        parameters = _layouts_of(ctx, impl.executable_parameter_layouts, loaded,
                                 "Layouts.executable_parameter_layouts(parameters F32[2,3], F32[4])")
        check(parameters == defaults,
              f"Layouts.executable_parameter_layouts gives {[_show(p) for p in parameters]} for parameters F32[2,3] "
              f"and F32[4], compiled without a layout_mode; the client's default layouts are "
              f"{[_show(d) for d in defaults]}")
    others: list[tuple[str, Any]] = [("its PJRT_Executable (PJRT_LoadedExecutable_GetExecutable)",
                                      ctx.call(loaded.get_executable, what="PJRT_LoadedExecutable_GetExecutable")),
                                     ("the same program compiled again", ctx.compile(_MIXED))]
    try:
        serialized = ctx.call(loaded.get_executable().serialize, what="PJRT_Executable_Serialize")
    except Unimplemented:
        serialized = None
    if serialized is not None:
        others.append(("the executable read back by PJRT_Executable_DeserializeAndLoad",
                       ctx.call(ctx.client.deserialize_and_load, serialized, what="PJRT_Executable_DeserializeAndLoad")))
    for where, executable in others:
        seen = _layouts_of(ctx, impl.executable_output_layouts, executable, f"Layouts.executable_output_layouts of {where}")
        check(seen == layouts, f"Layouts.executable_output_layouts of {where} gives {[_show(s) for s in seen]}; the "
                               f"loaded executable's are {[_show(s) for s in layouts]}")
        if parameters is not None:
            seen = _layouts_of(ctx, impl.executable_parameter_layouts, executable,
                               f"Layouts.executable_parameter_layouts of {where}")
            check(seen == parameters, f"Layouts.executable_parameter_layouts of {where} gives "
                                      f"{[_show(s) for s in seen]}; the loaded executable's are "
                                      f"{[_show(s) for s in parameters]}")
    same_name = ctx.compile(_SAME_NAME)
    _check_output_layouts(ctx, impl, same_name, [np.ones((2, 2, 2), np.float32)],
                          "a second program of module @jit_layouts, one F32[2,2,2] output")


@case("extensions", needs_extensions=("Layouts",))
def layout_mode_default_programs_run(ctx: PluginUnderTest) -> None:
    """A plugin that offers Layouts takes programs whose arguments and results carry
    ``mhlo.layout_mode = "default"`` (the Layouts header tells frameworks they may send them): the
    program compiles and computes, its output has the client's default layout, and from versions 2
    and 3 so do its executable's output and parameter layouts."""
    impl, version = _extension(ctx, "Layouts")
    t = tensor((2, 3), "f32")
    text = _program("jit_layout_mode", [t], [t], [f"%0 = stablehlo.add %arg0, %arg0 : {t}", f"return %0 : {t}"],
                    attributes='mhlo.layout_mode = "default"')
    try:
        loaded = ctx.compile(text)
    except PjrtError as exc:
        fail(f"PJRT_Client_Compile refused a program whose arguments and results carry mhlo.layout_mode = "
             f"\"default\", though the plugin offers Layouts: {describe(exc)}")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    output = ctx.execute(loaded, [[ctx.put(x)]])[0][0]
    got = ctx.fetch(output)
    check(np.array_equal(got, x + x), f"x + x with mhlo.layout_mode = \"default\" gave {got.tolist()}, "
                                      f"expected {(x + x).tolist()}")
    default = _key(ctx.call(impl.client_default_layout, _unwrap(ctx.client), BufferType.F32, (2, 3),
                            what="Layouts.client_default_layout(F32[2,3])"))
    actual = _key(ctx.call(impl.buffer_memory_layout, _unwrap(output), what="Layouts.buffer_memory_layout(output)"))
    check(actual == default, f"the output of a program with mhlo.layout_mode = \"default\" has {_show(actual)}; "
                             f"the client's default layout for F32[2,3] is {_show(default)}")
    calls = [("executable_output_layouts", 2), ("executable_parameter_layouts", 3)]
    for method, since in calls:
        if version >= since:
            what = f"Layouts.{method} of a program with mhlo.layout_mode = \"default\""
            seen = _layouts_of(ctx, getattr(impl, method), loaded, what)
            check(seen == [default], f"{what} gives {[_show(s) for s in seen]}, expected the default {_show(default)}")


# -- MemoryDescriptions --------------------------------------------------------------------------


def _described(ctx: PluginUnderTest, impl: Any, description: Any, where: str) -> list[tuple[str, int]]:
    what = f"MemoryDescriptions.memory_descriptions({where})"
    found = ctx.call(impl.memory_descriptions, _unwrap(description), what=what)
    check(isinstance(found, list) and all(isinstance(d, tuple) and len(d) == 2 for d in found),
          f"{what} returned {found!r}, expected a list of (kind, kind id)")
    kinds = Counter(kind for kind, _ in found)
    twice = sorted(kind for kind, count in kinds.items() if count > 1)
    check(not twice, f"{what} lists the memory kind(s) {twice} more than once ({found}): each memory the device "
                     "has is described once")
    return [(str(kind), int(kind_id)) for kind, kind_id in found]


@case("extensions", needs_extensions=("MemoryDescriptions",))
def memory_descriptions_name_each_kind_once(ctx: PluginUnderTest) -> None:
    """MemoryDescriptions.memory_descriptions (PJRT_DeviceDescription_MemoryDescriptions with
    PJRT_MemoryDescription_Kind) lists each memory kind of a device once, the same list each time;
    a kind's id identifies the kind across the platform (one id per kind, one kind per id, on every
    device), in the descriptions of the client's topology (made for ahead-of-time compilation) too."""
    impl, _ = _extension(ctx, "MemoryDescriptions")
    ids: dict[str, tuple[int, str]] = {}
    kinds_of: dict[int, tuple[str, str]] = {}

    def record(found: list[tuple[str, int]], where: str) -> None:
        for kind, kind_id in found:
            seen_id = ids.setdefault(kind, (kind_id, where))
            check(seen_id[0] == kind_id, f"MemoryDescriptions gives the kind {kind!r} the id {kind_id} for {where} "
                                         f"and {seen_id[0]} for {seen_id[1]}: a kind id identifies a kind on the platform")
            seen_kind = kinds_of.setdefault(kind_id, (kind, where))
            check(seen_kind[0] == kind, f"MemoryDescriptions gives the id {kind_id} to the kind {kind!r} for {where} "
                                        f"and to {seen_kind[0]!r} for {seen_kind[1]}: different kinds need different ids")

    for device in ctx.devices:
        where = f"device {device_id(device)}"
        first = _described(ctx, impl, device.get_description(), where)
        again = _described(ctx, impl, device.get_description(), where)
        check(sorted(first) == sorted(again), f"MemoryDescriptions describes {where} as {first}, then as {again}")
        record(first, where)
    try:
        topology = ctx.call(ctx.client.topology_description, what="PJRT_Client_TopologyDescription")
    except Unimplemented:
        return
    for description in ctx.call(topology.get_device_descriptions, what="PJRT_TopologyDescription_GetDeviceDescriptions"):
        record(_described(ctx, impl, description, f"the topology's device {description.id()}"),
               f"the topology's device {description.id()}")


@case("extensions", needs_extensions=("MemoryDescriptions",))
def memory_descriptions_refuse_other_objects(ctx: PluginUnderTest) -> None:
    """MemoryDescriptions.memory_descriptions refuses with INVALID_ARGUMENT an object that is no
    device description (a device, the client) rather than describe it."""
    impl, _ = _extension(ctx, "MemoryDescriptions")
    _refused(ctx, impl.memory_descriptions, _unwrap(ctx.device),
             what="MemoryDescriptions.memory_descriptions of a device, not its description")
    _refused(ctx, impl.memory_descriptions, _unwrap(ctx.client),
             what="MemoryDescriptions.memory_descriptions of the client")
