"""Cases from reading pjrt_c_api.h's buffers functions sentence by sentence (pjrt_hub.testing.contract.buffers
lists each behaviour and the case that checks it).

They look where a buffer can be right in value and still wrong: in where it lives (the memory
asked for, even beside a device that does not address it, and then on a device that does; the
dense row-major layout a missing ``device_layout`` stands for), in what it is (the
element type the data is given as), in what it shares (a copy, a second transfer of the same
array, the array ``ToHostBuffer`` hands back, a zero-copy host array the plugin promised not to
write), in how long it lives (``Destroy`` of a buffer never deleted, a deleted buffer asked for
its data, a delete while queued work still reads the memory, memory pinned by an external
reference or held by a DLPack consumer), in how it is counted (``bytes_in_use`` while threads make
and delete buffers at once), and in where an error goes (a ready event taken before a delete, the
copies of a failed execution's output). Where XLA's clients answer otherwise than the header and
the header's own test is disabled upstream (a copy to the buffer's own device or memory), both
answers pass.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import sys
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np

from pjrt_hub.abi import BufferType, ErrorCode, ExecuteOptions, HostBufferSemantics, PjrtError, to_numpy_dtype

from .._case import case, check, expect_error, skip
from .._context import CALL_TIMEOUT, PluginUnderTest, describe
from .._programs import add_one, donating_add_one, failing_program
from .buffers import _aligned, sample
from .client import device_id
from .events import COMPILING, SLOW_ELEMENTS, slow_work
from .lifetime import REFUSALS


def _where(memory: Any) -> str:
    return f"memory {memory.kind()} {memory.id()}"


def _same_memory(a: Any, b: Any) -> bool:
    return (a.kind(), a.id()) == (b.kind(), b.id())


def _values(n: int = 4, start: float = 1.0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.float32) * 1.5


def _read(ctx: PluginUnderTest, buffer: Any, dst: np.ndarray | None = None) -> Callable[[], Any]:
    """PJRT_Buffer_ToHostBuffer and its event, as one call (an error may come from either)."""
    def read() -> Any:
        copy = buffer.to_host_buffer() if dst is None else buffer.to_host_buffer(dst)
        copy.event.await_(ctx.seconds(CALL_TIMEOUT))
        return copy.array
    return read


def _wait_for(predicate: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


def _addressing(memory: Any) -> set[int]:
    """The ids of the devices PJRT_Memory_AddressableByDevices names."""
    return {device_id(d) for d in memory.addressable_by_devices()}


def _foreign_pairs(ctx: PluginUnderTest) -> list[tuple[Any, Any]]:
    """(device, memory of the client) pairs where the device does not address the memory, for
    the first two devices; skips, saying why, where every device addresses every memory."""
    pairs = [(device, memory) for device in ctx.devices[:2] for memory in ctx.client.addressable_memories()
             if device_id(device) not in _addressing(memory)]
    if not pairs:
        skip(f"every device of plugin {ctx.name} addresses every memory of its client: no memory belongs to "
             "another device")
    return pairs


def _span(buffer: Any, nbytes: int) -> tuple[int, int]:
    """Where a buffer in host memory keeps its data: (address, bytes)."""
    return buffer.unsafe_pointer(), max(buffer.on_device_size_in_bytes(), nbytes)


# -- where a buffer lives ---------------------------------------------------------------------------


@case("transfers", min_api_minor=68)
def placed_in_the_memory_asked_for(ctx: PluginUnderTest) -> None:
    """PJRT_Client_BufferFromHostBuffer and PJRT_Client_CreateUninitializedBuffer given a memory
    put the buffer in that memory, not in the device's default one, on a device that addresses
    it; the transferred values are there. A memory the plugin cannot place buffers in may be
    refused with an error, except the default memory."""
    host = _values(6).reshape(2, 3)
    default = ctx.device.default_memory()
    placed_any = 0
    for memory in ctx.device.addressable_memories():
        try:
            buffer = ctx.put(host, memory=memory)
        except PjrtError as exc:
            if _same_memory(memory, default) or exc.code not in (ErrorCode.UNIMPLEMENTED, ErrorCode.INVALID_ARGUMENT):
                raise
            continue  # a memory the plugin does not place host data in (a refusal is no misplacement)
        got = buffer.memory()
        check(_same_memory(got, memory),
              f"PJRT_Client_BufferFromHostBuffer with memory = {_where(memory)} made a buffer in {_where(got)}: "
              "a transfer given a memory goes to that memory, not to the device's default one")
        addressing = {device_id(d) for d in memory.addressable_by_devices()}
        check(device_id(buffer.device()) in addressing,
              f"PJRT_Client_BufferFromHostBuffer into {_where(memory)} made a buffer on device "
              f"{device_id(buffer.device())}, which does not address that memory (devices {sorted(addressing)} do)")
        back = ctx.fetch(buffer)
        check(np.array_equal(back, host), f"PJRT_Client_BufferFromHostBuffer into {_where(memory)}: the buffer "
                                          f"holds {back.tolist()}, the host array {host.tolist()}")
        blank = ctx.call(ctx.client.create_uninitialized_buffer, (2, 3), BufferType.F32, memory=memory,
                         what=f"PJRT_Client_CreateUninitializedBuffer in {_where(memory)}")
        got = blank.memory()
        check(_same_memory(got, memory),
              f"PJRT_Client_CreateUninitializedBuffer with memory = {_where(memory)} made a buffer in {_where(got)}: "
              "a buffer created for a memory lives in that memory")
        placed_any += 1
    check(placed_any > 0, f"device {device_id(ctx.device)} addresses no memory a buffer could be put in")


@case("transfers", min_api_minor=32)
def put_with_another_devices_memory(ctx: PluginUnderTest) -> None:
    """PJRT_Client_BufferFromHostBuffer given a device and a memory that device does not address
    either fails, or lets the memory decide (the header: with a memory, the data goes to the
    memory): the buffer is in that memory, on a device that addresses it, holding the values."""
    host = _values(6).reshape(3, 2)
    for device, memory in _foreign_pairs(ctx):
        what = (f"PJRT_Client_BufferFromHostBuffer with device {device_id(device)} and {_where(memory)} (addressed "
                f"by devices {sorted(_addressing(memory))})")
        try:
            transfer = ctx.call(ctx.client.buffer_from_host_buffer, host, device=device, memory=memory, what=what)
        except PjrtError:
            continue  # refused: the caller learns that the two disagree
        ctx.await_event(transfer.done_with_host_buffer, f"{what}: done_with_host_buffer")
        _check_placed(what, transfer.buffer, memory)
        back = ctx.fetch(transfer.buffer)
        check(np.array_equal(back, host), f"{what}: the buffer holds {back.tolist()}, the host array {host.tolist()}")


@case("transfers", min_api_minor=68)
def create_uninitialized_with_another_devices_memory(ctx: PluginUnderTest) -> None:
    """PJRT_Client_CreateUninitializedBuffer given a device and a memory that device does not
    address either fails, or lets the memory decide, as the header says of its two fields: the
    buffer is in that memory, on a device that addresses it."""
    for device, memory in _foreign_pairs(ctx):
        what = (f"PJRT_Client_CreateUninitializedBuffer with device {device_id(device)} and {_where(memory)} "
                f"(addressed by devices {sorted(_addressing(memory))})")
        try:
            buffer = ctx.call(ctx.client.create_uninitialized_buffer, (3, 2), BufferType.F32, device=device,
                              memory=memory, what=what)
        except PjrtError:
            continue  # refused
        _check_placed(what, buffer, memory)


def _check_placed(what: str, buffer: Any, memory: Any) -> None:
    """``buffer``, made for ``memory``, is in it, on a device that addresses it."""
    got, owner = buffer.memory(), device_id(buffer.device())
    check(_same_memory(got, memory), f"{what} made a buffer in {_where(got)}: given a memory, the buffer goes to "
                                     "that memory, not to the device's")
    check(owner in _addressing(memory),
          f"{what} made a buffer in {_where(memory)} on device {owner}, which does not address that memory "
          f"(PJRT_Memory_AddressableByDevices names {sorted(_addressing(memory))}): PJRT_Buffer_Device is not a "
          "device of the buffer's memory")


@case("transfers", min_api_minor=32)
def copy_to_another_devices_memory(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_CopyToMemory into a memory of the client that the buffer's device does not
    address either fails, or makes the copy in that memory, on a device that addresses it, with
    the source's values; the source stays where it was."""
    host = _values(5, -2.0)
    for device, memory in _foreign_pairs(ctx):
        source = ctx.put(host, device=device)
        what = (f"PJRT_Buffer_CopyToMemory of a buffer on device {device_id(device)} into {_where(memory)} "
                f"(addressed by devices {sorted(_addressing(memory))})")
        try:
            copy = ctx.call(source.copy_to_memory, memory, what=what)
        except PjrtError:
            continue  # refused
        got, owner = copy.memory(), device_id(copy.device())
        check(_same_memory(got, memory), f"{what} made a copy in {_where(got)}, not in the memory asked for")
        check(owner in _addressing(memory),
              f"{what} made a copy on device {owner}, which does not address {_where(memory)}: a copy in a memory "
              f"lives on a device that addresses it (one of {sorted(_addressing(memory))})")
        back = ctx.fetch(copy)
        check(np.array_equal(back, host), f"{what}: the copy holds {back.tolist()}, the source {host.tolist()}")
        check(device_id(source.device()) == device_id(device) and not source.is_deleted(),
              f"{what} moved or deleted the source: it is on device {device_id(source.device())}, deleted "
              f"{source.is_deleted()}")


@case("transfers")
def default_device_layout_is_dense_row_major(ctx: PluginUnderTest) -> None:
    """Without a device_layout, PJRT_Client_BufferFromHostBuffer stores the array dense with its
    dimensions major-to-minor, whatever the host array's strides: for a buffer in host memory
    (PJRT_Buffer_IsOnCpu) the bytes at PJRT_Buffer_UnsafePointer are the array's in C order."""
    base = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.25 - 1.0
    for label, host in (("f32[3,4]", base), ("a transposed f32[4,3]", base.T),
                        ("s16[2,3,2]", np.arange(12, dtype=np.int16).reshape(2, 3, 2) - 5)):
        buffer = ctx.put(host)
        if not buffer.is_on_cpu():
            skip(f"the buffers of plugin {ctx.name} are not in host memory (PJRT_Buffer_IsOnCpu is false): their "
                 "layout cannot be read from here")
        expected = np.ascontiguousarray(host).tobytes()
        raw = ctypes.string_at(buffer.unsafe_pointer(), len(expected))
        got = np.frombuffer(raw, host.dtype)
        check(raw == expected,
              lambda: f"PJRT_Client_BufferFromHostBuffer of {label} with no device_layout stored the elements in "  # noqa: B023
                      f"the order {got.tolist()}; the default device layout is dense, dimensions "  # noqa: B023
                      f"major-to-minor: {np.frombuffer(expected, host.dtype).tolist()}")  # noqa: B023


#: Host arrays handed over as another element type of the same width, whose bytes are valid
#: values of that type: (what, host array, the type given).
_RETYPED: tuple[tuple[str, np.ndarray, BufferType], ...] = (
    ("an s32[2,3] array given as F32",
     np.array([1.5, -2.25, 1e-3, 0.0, 3.0e8, -7.0], np.float32).view(np.int32).reshape(2, 3), BufferType.F32),
    ("an f32[4] array given as S32", np.array([1.0, -1.0, 0.5, 2.0e9], np.float32), BufferType.S32),
    ("a u16[4] array given as F16", np.array([1.0, -0.5, 65504.0, 2.0 ** -14], np.float16).view(np.uint16),
     BufferType.F16),
    ("an s8[5] array given as U8", np.array([-1, 0, 5, -128, 127], np.int8), BufferType.U8),
)


@case("transfers")
def put_keeps_the_element_type_given(ctx: PluginUnderTest) -> None:
    """PJRT_Client_BufferFromHostBuffer given an element type other than the host array's (of the
    same width) either refuses it with INVALID_ARGUMENT or makes a buffer of the type given: the
    header's ``type`` is the type of the data and of the buffer, so the buffer has that element
    type and holds the array's bytes read as that type."""
    for label, host, kind in _RETYPED:
        what = f"PJRT_Client_BufferFromHostBuffer of {label}"
        try:
            transfer = ctx.call(ctx.client.buffer_from_host_buffer, host, device=ctx.device, element_type=kind,
                                what=what)
        except PjrtError as exc:
            check(exc.code is ErrorCode.INVALID_ARGUMENT,
                  f"{what} failed with {describe(exc)}; a refusal of the type given is INVALID_ARGUMENT")
            continue
        ctx.await_event(transfer.done_with_host_buffer, f"{what}: done_with_host_buffer")
        buffer = transfer.buffer
        got, dims = buffer.element_type(), tuple(buffer.dimensions())
        check(got == kind, f"{what} made a {getattr(got, 'name', got)} buffer: the type given is the type of the data "
                           f"and of the resulting buffer, {kind.name}")
        check(dims == host.shape, f"{what} made a buffer of dimensions {list(dims)}, expected {list(host.shape)}")
        dtype = to_numpy_dtype(kind)
        back = ctx.fetch(buffer)
        check(back.dtype == dtype and back.tobytes() == host.tobytes(),
              f"{what}: the buffer holds {back.dtype} {back.tolist()}, expected the array's bytes read as {kind.name}: "
              f"{host.view(dtype).tolist()}")


# -- what a buffer shares ---------------------------------------------------------------------------


@case("transfers")
def each_transfer_makes_a_new_buffer(ctx: PluginUnderTest) -> None:
    """Two PJRT_Client_BufferFromHostBuffer calls of one host array make two buffers: deleting the
    first leaves the second alive with the values, and a transfer of the array after it changed
    holds the new values (no buffer is reused for the same host memory)."""
    host = _values(8)
    expected = host.copy()
    first = ctx.put(host)
    second = ctx.put(host)
    first.delete()
    check(not second.is_deleted(), "PJRT_Buffer_Delete of one buffer deleted another one made by a second "
                                   "PJRT_Client_BufferFromHostBuffer of the same host array: the two calls handed out "
                                   "one buffer; each call makes a new one")
    got = ctx.fetch(second)
    check(np.array_equal(got, expected), f"the second transfer of a host array holds {got.tolist()} after the first "
                                         f"one was deleted, expected {expected.tolist()}")
    host *= -2
    third = ctx.put(host)
    got = ctx.fetch(third)
    check(np.array_equal(got, host), f"PJRT_Client_BufferFromHostBuffer of a host array whose values changed since "
                                     f"an earlier transfer holds {got.tolist()}, expected the new {host.tolist()}: the "
                                     "call reused the buffer of the earlier transfer")
    got = ctx.fetch(second)
    check(np.array_equal(got, expected), f"an earlier transfer changed to {got.tolist()} when the host array and a "
                                         f"later transfer of it did, expected {expected.tolist()}")


@case("transfers", min_api_minor=48, timeout=COMPILING)
def immutable_zero_copy_is_never_written(ctx: PluginUnderTest) -> None:
    """A buffer made with kImmutableZeroCopy may alias the host array, but the plugin promises not
    to write it (it is never the storage of an aliased output): donating the buffer to x + 1 gives
    the right result and leaves the host array as it was."""
    executable = ctx.compile(donating_add_one())
    host = _aligned(_values())
    expected = host.copy()
    transfer = ctx.call(ctx.client.buffer_from_host_buffer, host, device=ctx.device,
                        semantics=HostBufferSemantics.IMMUTABLE_ZERO_COPY,
                        what="PJRT_Client_BufferFromHostBuffer (kImmutableZeroCopy)")
    outputs = ctx.execute(executable, [[transfer.buffer]])
    got = ctx.fetch(outputs[0][0])
    check(np.array_equal(got, expected + 1), f"x + 1 of a kImmutableZeroCopy buffer gave {got.tolist()}, expected "
                                             f"{(expected + 1).tolist()}")
    check(np.array_equal(host, expected),
          f"the host array of a kImmutableZeroCopy buffer changed to {host.tolist()} when the buffer was donated to "
          f"x + 1 (it was {expected.tolist()}): PJRT_LoadedExecutable_Execute wrote the output into memory the "
          "plugin promised not to mutate")


@case("buffers")
def to_host_array_is_the_callers(ctx: PluginUnderTest) -> None:
    """What PJRT_Buffer_ToHostBuffer writes to is the caller's own memory, not the buffer's:
    changing the array it returned, or the array it filled, changes neither the buffer nor a later
    copy of it."""
    host = _values(6)
    buffer = ctx.put(host)
    first = ctx.fetch(buffer)
    if buffer.is_on_cpu():
        start, size = buffer.unsafe_pointer(), buffer.on_device_size_in_bytes()
        at = first.__array_interface__["data"][0]
        check(at + first.nbytes <= start or at >= start + size,
              f"PJRT_Buffer_ToHostBuffer returned an array at {at:#x}, inside the buffer's own memory "
              f"[{start:#x}, {start + size:#x}): the copy to host is the buffer itself")
    if first.flags.writeable:
        first[...] = -7.0
    dst = np.zeros_like(host)
    result = ctx.call(buffer.to_host_buffer, dst, what="PJRT_Buffer_ToHostBuffer (into the caller's array)")
    ctx.await_event(result.event, "PJRT_Buffer_ToHostBuffer (into the caller's array)")
    check(np.array_equal(dst, host), f"PJRT_Buffer_ToHostBuffer into an array, after the caller wrote into an array an "
                                     f"earlier PJRT_Buffer_ToHostBuffer returned, gave {dst.tolist()}, expected "
                                     f"{host.tolist()}: that array was the buffer's storage")
    dst[...] = -9.0
    got = ctx.fetch(buffer)
    check(np.array_equal(got, host), f"after the caller wrote into the array PJRT_Buffer_ToHostBuffer had filled, the "
                                     f"buffer holds {got.tolist()}, expected {host.tolist()}")


# -- copies ------------------------------------------------------------------------------------------


@case("transfers", min_api_minor=32)
def copy_to_its_own_place_fails_or_is_a_new_buffer(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_CopyToDevice to the buffer's own device and PJRT_Buffer_CopyToMemory to its own
    memory either fail with a PJRT error (the header's answer) or, as XLA's newer clients do,
    return a new buffer: deleting the source leaves the copy alive with the values, and deleting
    the copy leaves the source."""
    host = _values(4, 3.0)
    copies: tuple[tuple[str, Callable[[Any], Any]], ...] = (
        ("PJRT_Buffer_CopyToDevice to the buffer's own device", lambda b: b.copy_to_device(ctx.device)),
        ("PJRT_Buffer_CopyToMemory to the buffer's own memory", lambda b: b.copy_to_memory(b.memory())),
    )
    for what, make in copies:
        source = ctx.put(host)
        try:
            copy = ctx.call(make, source, what=what)
        except PjrtError:
            continue  # the header: a buffer already on the destination is an error
        source.delete()
        check(not copy.is_deleted(), f"{what} returned the source itself (or a buffer sharing its life): deleting "
                                     "the source deleted the copy; a copy that succeeds is a new buffer")
        got = ctx.fetch(copy)
        check(np.array_equal(got, host), f"{what}: the copy holds {got.tolist()} after its source was deleted, "
                                         f"expected {host.tolist()}")
        source = ctx.put(host)
        copy = ctx.call(make, source, what=what)
        copy.delete()
        check(not source.is_deleted(), f"{what}: deleting the copy deleted its source")
        got = ctx.fetch(source)
        check(np.array_equal(got, host), f"{what}: the source holds {got.tolist()} after its copy was deleted")


@case("transfers", min_api_minor=32)
def copies_keep_type_and_dimensions(ctx: PluginUnderTest) -> None:
    """A copy made by PJRT_Buffer_CopyToDevice or PJRT_Buffer_CopyToMemory, into any memory or
    device, has the source's element type and dimensions (a PRED stays PRED, a scalar stays a
    scalar) and comes back to host bit for bit."""
    sources = (("pred[2,3]", sample(BufferType.PRED)), ("f32[]", np.array(-2.5, np.float32)),
               ("s8[2,3]", sample(BufferType.S8)))
    for label, host in sources:
        source = ctx.put(host)
        kind, dims = source.element_type(), tuple(source.dimensions())
        places: list[tuple[str, Callable[[], Any]]] = [
            (f"PJRT_Buffer_CopyToMemory({_where(m)})", functools.partial(source.copy_to_memory, m))
            for m in ctx.device.addressable_memories() if not _same_memory(m, source.memory())]
        places += [(f"PJRT_Buffer_CopyToDevice(device {device_id(d)})", functools.partial(source.copy_to_device, d))
                   for d in ctx.devices[1:2]]
        if not places:
            skip(f"plugin {ctx.name} has one device with one memory: there is nowhere to copy to")
        for what, make in places:
            copy = ctx.call(make, what=what)
            got_kind, got_dims = copy.element_type(), tuple(copy.dimensions())
            check((got_kind, got_dims) == (kind, dims),
                  f"{what} of a {label} buffer made a {getattr(got_kind, 'name', got_kind)}{list(got_dims)} buffer: a "
                  f"copy keeps its source's element type and dimensions ({kind.name}{list(dims)})")
            back = ctx.fetch(copy)
            check(back.dtype == host.dtype and back.shape == host.shape and back.tobytes() == host.tobytes(),
                  f"{what} of a {label} buffer came back as {back.dtype}{list(back.shape)} {back.tolist()}, "
                  f"expected {host.dtype}{list(host.shape)} {host.tolist()}")


@case("transfers", min_api_minor=32)
def copies_have_storage_of_their_own(ctx: PluginUnderTest) -> None:
    """Every copy made by PJRT_Buffer_CopyToDevice (to another device) or PJRT_Buffer_CopyToMemory
    (to another memory) is a new buffer with storage of its own: for buffers in host memory
    (PJRT_Buffer_IsOnCpu), the bytes at PJRT_Buffer_UnsafePointer of the source and of each copy,
    all alive at once, do not overlap."""
    host = _values(8, -3.0)
    source = ctx.put(host)
    ctx.await_event(source.ready_event(), "the source's PJRT_Buffer_ReadyEvent")
    if not source.is_on_cpu():
        skip(f"the buffers of plugin {ctx.name} are not in host memory (PJRT_Buffer_IsOnCpu is false): where their "
             "storage is cannot be compared from here")
    places: list[tuple[str, Callable[[], Any]]] = [
        (f"PJRT_Buffer_CopyToDevice(device {device_id(d)})", functools.partial(source.copy_to_device, d))
        for d in ctx.devices[1:3]]
    places += [(f"PJRT_Buffer_CopyToMemory({_where(m)})", functools.partial(source.copy_to_memory, m))
               for m in ctx.device.addressable_memories() if not _same_memory(m, source.memory())]
    if not places:
        skip(f"plugin {ctx.name} has one device with one memory: there is nowhere to copy to")
    try:
        spans = [("the source", _span(source, host.nbytes))]
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            skip(f"plugin {ctx.name} does not give buffer addresses ({describe(exc)})")
        raise
    alive = [source]  # every buffer stays alive to the end, so no storage is freed and handed out again
    for what, make in places:
        copy = ctx.call(make, what=what)
        alive.append(copy)
        ctx.await_event(copy.ready_event(), f"{what}: the copy's PJRT_Buffer_ReadyEvent")
        got = ctx.fetch(copy)
        check(np.array_equal(got, host), f"{what}: the copy holds {got.tolist()}, the source {host.tolist()}")
        if not copy.is_on_cpu():
            continue
        start, size = _span(copy, host.nbytes)
        for other, (at, length) in spans:
            check(start + size <= at or start >= at + length,
                  f"{what} made a copy whose data [{start:#x}, {start + size:#x}) overlaps that of {other} "
                  f"[{at:#x}, {at + length:#x}), both alive: the copy shares storage; a copy is a new buffer")
        spans.append((f"the copy made by {what}", (start, size)))


# -- how long a buffer lives ------------------------------------------------------------------------


@case("buffers", min_api_minor=33)
def destroy_releases_like_delete(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_Destroy of a buffer that was never deleted does what PJRT_Buffer_Delete would:
    the memory is let go, so a view's on_delete callback runs (once) without a delete ever being
    called. A view made without a callback (it is optional) is destroyed as well."""
    # Aligned as XLA wants memory it views (it refuses an unaligned host array with INVALID_ARGUMENT).
    host = _aligned(np.arange(8, dtype=np.float32) - 3.0)
    try:
        plain = ctx.call(ctx.client.create_view_of_device_buffer, host, device=ctx.device,
                         what="PJRT_Client_CreateViewOfDeviceBuffer without on_delete")
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            skip(f"plugin {ctx.name} does not make views of external memory ({describe(exc)}): there is no "
                 "callback to see the memory let go")
        raise
    got = ctx.fetch(plain)
    check(np.array_equal(got, host), f"a view made without on_delete holds {got.tolist()}, its memory {host.tolist()}")
    ctx.call(plain.destroy, what="PJRT_Buffer_Destroy of a view without on_delete")
    calls: list[int] = []
    view = ctx.call(ctx.client.create_view_of_device_buffer, host, device=ctx.device,
                    on_delete=lambda: calls.append(1), what="PJRT_Client_CreateViewOfDeviceBuffer")
    ctx.fetch(view)
    ctx.call(view.destroy, what="PJRT_Buffer_Destroy")
    ran = _wait_for(lambda: bool(calls), ctx.seconds(CALL_TIMEOUT))
    check(ran, f"PJRT_Buffer_Destroy of a view never deleted: its on_delete callback did not run within "
               f"{ctx.seconds(CALL_TIMEOUT):g} s; Destroy deletes the buffer as PJRT_Buffer_Delete would and lets "
               "the memory go")
    time.sleep(0.05)
    check(len(calls) == 1, f"PJRT_Buffer_Destroy ran a view's on_delete callback {len(calls)} times, expected once")


@case("buffers", min_api_minor=32)
def deleted_buffer_gives_no_data(ctx: PluginUnderTest) -> None:
    """After PJRT_Buffer_Delete the buffer is good only for IsDeleted and Destroy: CopyToMemory,
    UnsafePointer, OpaqueDeviceMemoryDataPointer and ToHostBuffer into a caller's array each fail
    with a PJRT error, and the caller's array is left as it was."""
    buffer = ctx.put(_values())
    buffer.delete()
    memory = ctx.device.addressable_memories()[-1]
    calls: tuple[tuple[str, Callable[[], Any]], ...] = (
        (f"PJRT_Buffer_CopyToMemory({_where(memory)}) of a deleted buffer", lambda: buffer.copy_to_memory(memory)),
        ("PJRT_Buffer_UnsafePointer of a deleted buffer", buffer.unsafe_pointer),
        ("PJRT_Buffer_OpaqueDeviceMemoryDataPointer of a deleted buffer", buffer.opaque_device_memory_data_pointer),
    )
    for what, call in calls:
        expect_error(functools.partial(ctx.call, call, what=what), what=what)
    dst = np.full(4, 123.0, np.float32)
    what = "PJRT_Buffer_ToHostBuffer of a deleted buffer into the caller's array"
    expect_error(functools.partial(ctx.call, _read(ctx, buffer, dst), what=what), what=what)
    check(np.all(dst == 123.0), f"{what} failed but wrote {dst.tolist()} into the array (it held 123.0 everywhere): a "
                                "deleted buffer has no data to give")


@case("buffers", timeout=COMPILING)
def ready_event_across_delete_and_donation(ctx: PluginUnderTest) -> None:
    """A PJRT_Buffer_ReadyEvent taken before PJRT_Buffer_Delete stays as it was, ready without an
    error, after the delete; one asked of a buffer already donated to an execution reports an
    error (from the call, or on the event at once)."""
    buffer = ctx.put(_values())
    early = ctx.call(buffer.ready_event, what="PJRT_Buffer_ReadyEvent")
    ctx.await_event(early, "PJRT_Buffer_ReadyEvent")
    buffer.delete()
    check(early.is_ready() and early.error() is None,
          f"a PJRT_Buffer_ReadyEvent taken before PJRT_Buffer_Delete changed after the delete: ready "
          f"{early.is_ready()}, error {early.error()}; the header keeps it out of an error state")
    ctx.call(early.await_, ctx.seconds(CALL_TIMEOUT), what="PJRT_Event_Await of a ready event taken before the delete")

    donated = ctx.put(_values())
    ctx.execute(ctx.compile(donating_add_one()), [[donated]])
    if not donated.is_deleted():
        skip(f"plugin {ctx.name} did not donate the input (see buffers/donation)")
    try:
        late = ctx.call(donated.ready_event, what="PJRT_Buffer_ReadyEvent of a donated buffer")
    except PjrtError:
        return
    check(_wait_for(late.is_ready, ctx.seconds(1.0)),
          "PJRT_Buffer_ReadyEvent of a donated buffer is not ready: the header has it indicate an error at once")
    check(late.error() is not None, "PJRT_Buffer_ReadyEvent of a buffer donated to an execution is ready without an "
                                    "error; the header has it indicate an error")


@case("lifetime", timeout=COMPILING)
def external_reference_pins_the_memory(ctx: PluginUnderTest) -> None:
    """While an external reference is held (PJRT_Buffer_IncreaseExternalReferenceCount), the
    buffer's data stays where PJRT_Buffer_OpaqueDeviceMemoryDataPointer said: reading, copying
    and executing with the buffer neither move it nor change it."""
    executable = ctx.compile(add_one())
    host = _values(4, -1.0)
    buffer = ctx.put(host)
    buffer.increase_external_reference_count()
    try:
        before = buffer.opaque_device_memory_data_pointer()
        ctx.fetch(buffer)
        for memory in ctx.device.addressable_memories():
            ctx.fetch(ctx.call(buffer.copy_to_memory, memory, what=f"PJRT_Buffer_CopyToMemory({_where(memory)})"))
        outputs = ctx.execute(executable, [[buffer]])
        ctx.fetch(outputs[0][0])
        after = buffer.opaque_device_memory_data_pointer()
        check(after == before, f"the data of a buffer with an external reference moved from {before:#x} to {after:#x} "
                               "while it was read, copied and executed with: PJRT keeps referenced memory in place "
                               "(PJRT_Buffer_IncreaseExternalReferenceCount)")
        if buffer.is_on_cpu():
            shared = np.frombuffer(ctypes.string_at(before, host.nbytes), np.float32)
            check(np.array_equal(shared, host), f"the memory an external reference holds at {before:#x} reads "
                                                f"{shared.tolist()}, expected {host.tolist()}")
    finally:
        buffer.decrease_external_reference_count()


@case("lifetime", timeout=COMPILING)
def delete_waits_for_work_in_flight(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_Delete of an input whose execution is still queued (behind slow work on the
    same device) lets the memory go only when that execution is done with it: the execution
    computes from the values the buffer held, and the buffer reports deleted at once."""
    work = slow_work(ctx)  # skips, saying why, where the plugin cannot compile the slow program
    # Large enough that no plugin counts x + 1 as cheap and runs it on the caller's thread at once.
    executable = ctx.compile(add_one(SLOW_ELEMENTS))
    host = np.linspace(-3.0, 3.0, SLOW_ELEMENTS, dtype=np.float32)
    buffer = ctx.put(host)
    ahead = work.start(ctx)
    result = ctx.call(executable.execute, [[buffer]], ExecuteOptions(),
                      what="PJRT_LoadedExecutable_Execute (x + 1, queued behind the slow program)", timeout=60.0)
    ctx.call(buffer.delete, what="PJRT_Buffer_Delete of the input of a queued execution")
    check(buffer.is_deleted(), "PJRT_Buffer_IsDeleted is false right after PJRT_Buffer_Delete of a buffer a queued "
                               "execution reads; the handle reports deleted at once, the memory goes later")
    for index, event in enumerate(result.device_complete_events):
        ctx.await_event(event, f"device_complete_events[{index}] of the execution whose input was deleted",
                        timeout=60.0)
    got = ctx.fetch(result.outputs[0][0])
    expected = host + np.float32(1)
    check(np.array_equal(got, expected),
          lambda: f"x + 1, whose input was deleted while the execution was queued, is wrong in "
                  f"{int(np.count_nonzero(got != expected))} of {got.size} elements (e.g. {got[:3].tolist()}, expected "
                  f"{expected[:3].tolist()}): PJRT_Buffer_Delete let the memory go while work using it was in flight")
    for index, event in enumerate(ahead.device_complete_events):
        ctx.await_event(event, f"device_complete_events[{index}] of the slow program", timeout=60.0)


@case("lifetime", timeout=COMPILING)
def dlpack_consumer_holds_off_donation(ctx: PluginUnderTest) -> None:
    """A buffer exported through DLPack shares its data with another framework (the header's
    example of an external reference): while the consumer holds it, an execution that donates the
    buffer is refused or keeps the input, and a delete is refused or leaves the data in place;
    the consumer keeps reading the buffer's values throughout."""
    executable = ctx.compile(donating_add_one())
    host = _values(4, 2.0)
    buffer = ctx.put(host)
    if not hasattr(getattr(buffer, "unwrapped", buffer), "__dlpack__"):
        skip(f"buffers of plugin {ctx.name} are not DLPack producers (no __dlpack__)")
    try:
        consumer = np.from_dlpack(buffer)
    except BufferError as exc:  # DLPack's own refusal, e.g. of a buffer outside host memory
        skip(f"plugin {ctx.name} does not export this buffer through DLPack: {exc}")
    check(np.array_equal(consumer, host), f"the DLPack consumer sees {consumer.tolist()}, the buffer holds "
                                          f"{host.tolist()}")
    what = "PJRT_LoadedExecutable_Execute donating a buffer a DLPack consumer holds"
    try:
        outputs = ctx.execute(executable, [[buffer]])
    except PjrtError as exc:
        check(exc.code in REFUSALS, f"{what} failed with {describe(exc)}; a refusal is INVALID_ARGUMENT or "
                                    "FAILED_PRECONDITION")
    else:
        got = ctx.fetch(outputs[0][0])
        check(np.array_equal(got, host + 1), f"{what}: x + 1 gave {got.tolist()}, expected {(host + 1).tolist()}")
        check(not buffer.is_deleted(), f"{what}: the buffer was donated (it reports deleted) while the consumer still "
                                       "reads it; a DLPack export holds the buffer as an external reference does")
    check(np.array_equal(consumer, host), f"the DLPack consumer's array changed to {consumer.tolist()} when a program "
                                          f"donating the buffer ran (it was {host.tolist()}): the memory was reused "
                                          "while shared")
    what = "PJRT_Buffer_Delete of a buffer a DLPack consumer holds"
    try:
        buffer.delete()
    except PjrtError as exc:
        check(exc.code in REFUSALS, f"{what} failed with {describe(exc)}; a refusal is INVALID_ARGUMENT or "
                                    "FAILED_PRECONDITION")
    # Buffers made now would take the memory, were it handed back while the consumer reads it.
    reuse = [ctx.put(-host - 100) for _ in range(3)]
    check(np.array_equal(consumer, host), f"after {what}, the consumer's array reads {consumer.tolist()}, not "
                                          f"{host.tolist()}: the memory was freed or reused while shared")
    del consumer, reuse
    gc.collect()
    buffer.delete()
    check(buffer.is_deleted(), "PJRT_Buffer_Delete of a buffer whose DLPack consumer is gone left it alive")


# -- how buffers are counted ------------------------------------------------------------------------

#: Threads that make and delete buffers at once, and buffers each makes in one round.
CHURN_THREADS = 4
CHURN_BUFFERS = 100
#: Seconds of rounds: lost updates show within a few rounds, the budget keeps the case short.
CHURN_SECONDS = 0.5


@contextlib.contextmanager
def _switching_often() -> Iterator[None]:
    """Let the interpreter switch threads far more often than its default, so that an update
    made of a read and a write without a lock is interleaved with another thread's in a few
    rounds instead of a few thousand."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@case("concurrency", timeout=60.0)
def bytes_in_use_after_concurrent_puts_and_deletes(ctx: PluginUnderTest) -> None:
    """PJRT_Device_MemoryStats' bytes_in_use counts every allocation and free, those made from
    several threads at once included: after rounds in which threads each put and delete buffers
    on one device, it comes back to what it was (once the plugin has let the memory go)."""
    device, client = ctx.device, ctx.client
    gc.collect()  # buffers of earlier cases left to the collector go now, not in the middle of a round
    try:
        before = device.memory_stats().bytes_in_use
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            skip(f"plugin {ctx.name} does not report memory statistics ({describe(exc)})")
        raise
    host = np.ones(64, np.float32)
    limit = ctx.seconds(CALL_TIMEOUT)
    problems: list[str] = []

    def churn(start: threading.Barrier) -> None:
        try:
            start.wait(limit)
            for _ in range(CHURN_BUFFERS):
                transfer = client.buffer_from_host_buffer(host, device=device)
                transfer.done_with_host_buffer.await_(limit)
                transfer.buffer.delete()
        except Exception as exc:  # noqa: BLE001 - reported by the case, with the call that failed
            problems.append(f"PJRT_Client_BufferFromHostBuffer or PJRT_Buffer_Delete from one of {CHURN_THREADS} "
                            f"threads failed: {describe(exc)}")

    rounds = 0
    deadline = time.monotonic() + CHURN_SECONDS
    with _switching_often():
        while rounds < 3 or time.monotonic() < deadline:
            start = threading.Barrier(CHURN_THREADS)
            threads = [threading.Thread(target=churn, args=(start,), name=f"pjrt-conformance churn {i}", daemon=True)
                       for i in range(CHURN_THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(ctx.seconds(30.0))
            check(not any(t.is_alive() for t in threads),
                  f"{CHURN_THREADS} threads putting and deleting {CHURN_BUFFERS} buffers each did not finish within "
                  f"{ctx.seconds(30.0):g} s")
            check(not problems, lambda: problems[0])
            rounds += 1
            settled = _wait_for(lambda: device.memory_stats().bytes_in_use == before, ctx.seconds(1.0))
            after = device.memory_stats().bytes_in_use
            check(settled, f"PJRT_Device_MemoryStats: bytes_in_use was {before} before round {rounds}, in which "
                           f"{CHURN_THREADS} threads each put and deleted {CHURN_BUFFERS} buffers of {host.nbytes} bytes "
                           f"on device {device_id(device)} at once, and is {after} after it (waited "
                           f"{ctx.seconds(1.0):g} s): the count lost updates made at the same time; it is the number "
                           "of bytes in use")


# -- where an error goes ----------------------------------------------------------------------------


@case("events", timeout=COMPILING)
def failed_buffer_error_reaches_its_copies(ctx: PluginUnderTest) -> None:
    """The output of a failed execution carries the error into what is made of it: a
    PJRT_Buffer_CopyToMemory or PJRT_Buffer_CopyToDevice of it fails, at the call or on the copy's
    ready event and every read of the copy, both while the execution may still run and after it
    ended; no copy comes out holding values."""
    try:
        executable = ctx.compile(failing_program())
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            skip(f"plugin {ctx.name} does not compile the failing program: {describe(exc)}")
        raise
    args = [ctx.put(_values()), ctx.put(np.array(2.0, np.float32))]
    try:
        result = ctx.call(executable.execute, [args], what="PJRT_LoadedExecutable_Execute (a program that cannot "
                          "allocate its output)", timeout=60.0)
    except PjrtError as exc:
        skip(f"plugin {ctx.name} refused the execution at the call ({describe(exc)}): no output carries its error")
    failed = result.outputs[0][0]
    places: list[tuple[str, Callable[[], Any]]] = [
        (f"PJRT_Buffer_CopyToMemory({_where(m)})", functools.partial(failed.copy_to_memory, m))
        for m in ctx.device.addressable_memories()]
    places += [(f"PJRT_Buffer_CopyToDevice(device {device_id(d)})", functools.partial(failed.copy_to_device, d))
               for d in ctx.devices[1:2]]
    for when in ("right after the execute call", "after the execution's completion event"):
        if when.startswith("after"):
            for event in result.device_complete_events:
                try:
                    ctx.call(event.await_, ctx.seconds(CALL_TIMEOUT), what="the failed execution's completion event",
                             timeout=CALL_TIMEOUT + 1)
                except PjrtError:
                    pass
        for what, make in places:
            what = f"{what} of the output of a failed execution, {when}"
            try:
                copy = ctx.call(make, what=what)
            except PjrtError:
                continue  # refused at the call: the error reached the caller
            event = copy.ready_event()
            try:
                ctx.call(event.await_, ctx.seconds(CALL_TIMEOUT), what=f"{what}: PJRT_Event_Await of its ready event",
                         timeout=CALL_TIMEOUT + 1)
            except PjrtError:
                pass
            check(event.is_ready() and event.error() is not None,
                  f"{what}: the copy's PJRT_Buffer_ReadyEvent fired without an error, so the execution's error was "
                  "lost on the way; a copy of a buffer that holds an error holds that error")
            read = f"PJRT_Buffer_ToHostBuffer of that copy ({what})"
            expect_error(functools.partial(ctx.call, _read(ctx, copy), what=read), what=read)
