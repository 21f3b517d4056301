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
answers pass. Work still pending shows the rest: events awaited with and without the binding's
time limit, callbacks that raise or use their own event, copies of a buffer not computed yet,
memory borrowed from the caller (views, zero-copy arrays) and handed back no sooner than queued
work and donated outputs are done with it, and what a DLPack consumer may do with a buffer.
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

from pjrt_hub.abi import (BufferType, CompileOptions, ErrorCode, ExecuteOptions, HostBufferSemantics, PjrtError,
                          from_numpy_dtype, to_numpy_dtype)
from pjrt_hub.extensions import MemoryLayout

from .._case import case, check, expect_error, fail, skip
from .._context import CALL_TIMEOUT, PluginUnderTest, describe
from .._programs import add_one, donating_add_one, slow_program, slow_program_result
from .buffers import _aligned, _wait_for, sample
from .client import device_id
from .devices import settled_bytes_in_use
from .events import COMPILING, SLOW_ELEMENTS, failing_executable, slow_work
from .extensions import _check_layout_against_memory
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


def _copy_places(ctx: PluginUnderTest, source: Any, *, own_memory: bool = False) -> list[tuple[str, Callable[[], Any]]]:
    """Each copy of ``source`` the first device's memories and a second device allow, as (the
    call, a thunk making it): PJRT_Buffer_CopyToMemory into every memory of the first device
    (``source``'s own one only if ``own_memory``), PJRT_Buffer_CopyToDevice to the second device."""
    places: list[tuple[str, Callable[[], Any]]] = [
        (f"PJRT_Buffer_CopyToMemory({_where(m)})", functools.partial(source.copy_to_memory, m))
        for m in ctx.device.addressable_memories() if own_memory or not _same_memory(m, source.memory())]
    places += [(f"PJRT_Buffer_CopyToDevice(device {device_id(d)})", functools.partial(source.copy_to_device, d))
               for d in ctx.devices[1:2]]
    return places


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
    type and holds the array's bytes read as that type. Given the array's own type, the call
    succeeds."""
    for label, host, _ in _RETYPED:
        own = from_numpy_dtype(host.dtype)
        what = f"PJRT_Client_BufferFromHostBuffer of {label.split(' given ')[0]} given its own type {own.name}"
        transfer = ctx.call(ctx.client.buffer_from_host_buffer, host, device=ctx.device, element_type=own, what=what)
        ctx.await_event(transfer.done_with_host_buffer, f"{what}: done_with_host_buffer")
        got, back = transfer.buffer.element_type(), ctx.fetch(transfer.buffer)
        check(got == own and back.dtype == host.dtype and back.tobytes() == host.tobytes(),
              f"{what} made a {getattr(got, 'name', got)} buffer holding {back.dtype} {back.tolist()}, expected "
              f"{own.name} {host.tolist()}")
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
        places = _copy_places(ctx, source)
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
    before = settled_bytes_in_use(ctx, device)  # the collector's leftovers go now, not in the middle of a round
    host = np.ones(64, np.float32)
    limit = ctx.seconds(CALL_TIMEOUT)
    problems: list[str] = []
    stop = threading.Event()  # set when the case ends, so that no thread outlives a failed round

    def churn(start: threading.Barrier) -> None:
        try:
            start.wait(limit)
            for _ in range(CHURN_BUFFERS):
                if stop.is_set():
                    return
                transfer = client.buffer_from_host_buffer(host, device=device)
                transfer.done_with_host_buffer.await_(limit)
                transfer.buffer.delete()
        except Exception as exc:  # noqa: BLE001 - reported by the case, with the call that failed
            problems.append(f"PJRT_Client_BufferFromHostBuffer or PJRT_Buffer_Delete from one of {CHURN_THREADS} "
                            f"threads failed: {describe(exc)}")

    rounds = 0
    deadline = time.monotonic() + CHURN_SECONDS
    with _switching_often(), contextlib.ExitStack() as ending:
        ending.callback(stop.set)
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
    executable = failing_executable(ctx)
    args = [ctx.put(_values()), ctx.put(np.array(2.0, np.float32))]
    try:
        result = ctx.call(executable.execute, [args], what="PJRT_LoadedExecutable_Execute (a program that cannot "
                          "allocate its output)", timeout=60.0)
    except PjrtError as exc:
        skip(f"plugin {ctx.name} refused the execution at the call ({describe(exc)}): no output carries its error")
    failed = result.outputs[0][0]
    places = _copy_places(ctx, failed, own_memory=True)
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


# -- work still pending: events and what is made of pending buffers --------------------------------


def _pending_slow_work(ctx: PluginUnderTest) -> tuple[Any, Any]:
    """The slow program started on the first device, still running; skips, saying why, where the
    plugin had finished it when Execute returned."""
    work = slow_work(ctx)  # skips where the plugin cannot compile the slow program
    result = work.start(ctx)
    if result.device_complete_events[0].is_ready():
        skip(f"plugin {ctx.name} had finished the slow program ({work.trips} steps) when Execute returned: there "
             "was no pending work to observe")
    return work, result


def _settle(ctx: PluginUnderTest, result: Any, what: str) -> None:
    """Await every completion event of ``result`` (bounded), whatever it ends with."""
    for index, event in enumerate(result.device_complete_events):
        try:
            ctx.call(event.await_, ctx.seconds(60.0), what=f"{what}: device_complete_events[{index}]", timeout=61.0)
        except PjrtError:
            pass


def _awaited_ready_event(ctx: PluginUnderTest) -> Any:
    """The PJRT_Buffer_ReadyEvent of a buffer whose transfer is over: an event already ready."""
    event = ctx.call(ctx.put(_values()).ready_event, what="PJRT_Buffer_ReadyEvent")
    ctx.await_event(event, "PJRT_Buffer_ReadyEvent of a buffer just put")
    return event


@case("events", timeout=COMPILING)
def await_without_a_limit_waits_for_pending_work(ctx: PluginUnderTest) -> None:
    """PJRT_Event_Await in its plain blocking form (no time limit, the Python binding's default)
    returns once pending work is done, without an error: for the completion event of an execution
    still running, the ready event of its output, the event of a copy of that output to host (which
    then holds the final values), and the completion events of an execution over two devices queued
    behind that work."""
    work, result = _pending_slow_work(ctx)
    output = result.outputs[0][0]
    copy = ctx.call(output.to_host_buffer, what="PJRT_Buffer_ToHostBuffer of a pending output")
    events = (("the completion event of a running execution", result.device_complete_events[0]),
              ("the PJRT_Buffer_ReadyEvent of its pending output", output.ready_event()),
              ("the event of PJRT_Buffer_ToHostBuffer of that output", copy.event))
    for what, event in events:
        ctx.call(event.await_, what=f"PJRT_Event_Await without a time limit of {what}", timeout=60.0)
        check(event.is_ready() and event.error() is None,
              f"PJRT_Event_Await without a time limit of {what} returned, but the event is ready {event.is_ready()} "
              f"with error {event.error()}; expected ready without an error")
    check(np.array_equal(copy.array, work.expected),
          "the copy to host of a pending output, its event awaited without a time limit, does not hold the final "
          "values")
    # Awaited at once by the thread that started it, the work may not have begun: a plugin may run
    # it on the waiting thread, which must then return as well.
    host = np.linspace(-2.0, 2.0, SLOW_ELEMENTS, dtype=np.float32)
    plus = ctx.compile(add_one(SLOW_ELEMENTS))
    buffer = ctx.put(host)

    def start_and_await() -> Any:
        started = plus.execute([[buffer]], ExecuteOptions())
        started.device_complete_events[0].await_()
        return started

    for _ in range(3):
        started = ctx.call(start_and_await, what="PJRT_LoadedExecutable_Execute of x + 1 and, at once, "
                                                 "PJRT_Event_Await without a time limit of its completion event",
                           timeout=60.0)
        check(started.device_complete_events[0].error() is None,
              f"x + 1 awaited at once without a time limit ended with {started.device_complete_events[0].error()}")
        got = ctx.fetch(started.outputs[0][0])
        check(np.array_equal(got, host + np.float32(1)), "x + 1 awaited at once without a time limit is wrong")
    if len(ctx.devices) < 2:
        return
    executable = ctx.compile(add_one(SLOW_ELEMENTS, replicas=2), CompileOptions(num_replicas=2))
    args = [[ctx.put(host, device=device)] for device in executable.addressable_devices()]
    ahead = work.start(ctx)
    both = ctx.call(executable.execute, args, ExecuteOptions(),
                    what="PJRT_LoadedExecutable_Execute of x + 1 on two devices, queued behind the slow program",
                    timeout=60.0)
    for index, event in enumerate(both.device_complete_events):
        what = f"completion event {index} of an execution over two devices"
        ctx.call(event.await_, what=f"PJRT_Event_Await without a time limit of the {what}", timeout=60.0)
        check(event.is_ready() and event.error() is None,
              f"PJRT_Event_Await without a time limit of the {what} returned, but the event is ready "
              f"{event.is_ready()} with error {event.error()}; expected ready without an error")
    for index, outputs in enumerate(both.outputs):
        got = ctx.fetch(outputs[0])
        check(np.array_equal(got, host + np.float32(1)), f"x + 1 on device {index} of two is wrong after its event "
                                                         "was awaited without a time limit")
    _settle(ctx, ahead, "the slow program")


@case("events", timeout=COMPILING)
def await_with_a_time_limit_bounds_only_the_wait(ctx: PluginUnderTest) -> None:
    """The Python binding's time limit of PJRT_Event_Await ends only a wait on a pending event,
    with DEADLINE_EXCEEDED: awaiting an event that is already ready returns at once, even with a
    limit of 0 s; and a wait that ran out stops neither the work nor its event, which becomes ready
    later without an error."""
    transfer = ctx.call(ctx.client.buffer_from_host_buffer, _values(), device=ctx.device,
                        what="PJRT_Client_BufferFromHostBuffer")
    ctx.await_event(transfer.done_with_host_buffer, "done_with_host_buffer")
    executable = ctx.compile(add_one())
    outputs = ctx.execute(executable, [[transfer.buffer]])
    ctx.await_event(outputs[0][0].ready_event(), "the output's PJRT_Buffer_ReadyEvent")
    finished = ctx.call(executable.execute, [[transfer.buffer]], ExecuteOptions(),
                        what="PJRT_LoadedExecutable_Execute", timeout=60.0)
    ctx.await_event(finished.device_complete_events[0], "device_complete_events[0]")
    ready = (("done_with_host_buffer, awaited before", transfer.done_with_host_buffer),
             ("the PJRT_Buffer_ReadyEvent of an execution's output, awaited before", outputs[0][0].ready_event()),
             ("the completion event of an execution, awaited before", finished.device_complete_events[0]))
    for what, event in ready:
        for limit in (0.0, 1e-6):
            ctx.call(event.await_, limit, what=f"PJRT_Event_Await with a time limit of {limit:g} s of {what}")

    work, result = _pending_slow_work(ctx)
    event = result.device_complete_events[0]
    what = "PJRT_Event_Await with a time limit of 0 s of the completion event of a running execution"
    try:
        ctx.call(event.await_, 0.0, what=what)
    except PjrtError as exc:
        check(exc.code is ErrorCode.DEADLINE_EXCEEDED,
              f"{what} failed with {describe(exc)}; a wait that runs out is DEADLINE_EXCEEDED")
    else:
        check(event.is_ready(), f"{what} returned without an error while the event is still pending; a wait that runs "
                                "out raises DEADLINE_EXCEEDED")
    ctx.await_event(event, "the completion event of the execution whose wait ran out", timeout=60.0)
    check(event.error() is None, f"the execution ended with {event.error()} after a PJRT_Event_Await of it ran out of "
                                 "time: the limit ends the wait, not the work")
    got = ctx.fetch(result.outputs[0][0])
    check(np.array_equal(got, work.expected), "the slow program's output is wrong after a wait for it ran out of time")
    ctx.call(event.await_, 0.0, what="PJRT_Event_Await with a time limit of 0 s of an event that became ready")


@case("events", timeout=COMPILING)
def every_on_ready_callback_runs(ctx: PluginUnderTest) -> None:
    """Every callback PJRT_Event_OnReady registered runs, once, with the event's status, even when
    a callback registered before it raised (a Python callback can; nothing can catch it on the thread
    that completes the event, and the next callback is someone else's): for an event already ready
    and for one that becomes ready later."""

    def failing(error: Any) -> None:
        raise RuntimeError("a PJRT_Event_OnReady callback that fails (raised on purpose by the conformance suite)")

    event = _awaited_ready_event(ctx)
    try:
        ctx.call(event.on_ready, failing, what="PJRT_Event_OnReady of a ready event with a callback that raises")
    except RuntimeError:
        pass  # run on the caller's thread, its exception may reach the caller
    later: list[Any] = []
    ctx.call(event.on_ready, later.append, what="PJRT_Event_OnReady of a ready event")
    check(_wait_for(lambda: bool(later), ctx.seconds(CALL_TIMEOUT)),
          "a PJRT_Event_OnReady callback registered on a ready event after one that raised never ran")

    _, result = _pending_slow_work(ctx)
    event = result.device_complete_events[0]
    calls: dict[str, list[Any]] = {"first": [], "second": [], "third": []}
    ctx.call(event.on_ready, calls["first"].append, what="PJRT_Event_OnReady of a pending event")
    ctx.call(event.on_ready, failing, what="PJRT_Event_OnReady of a pending event (a callback that raises)")
    ctx.call(event.on_ready, calls["second"].append, what="PJRT_Event_OnReady of a pending event")
    ctx.call(event.on_ready, failing, what="PJRT_Event_OnReady of a pending event (a callback that raises)")
    ctx.call(event.on_ready, calls["third"].append, what="PJRT_Event_OnReady of a pending event")
    ctx.await_event(event, "the completion event of the slow program", timeout=60.0)
    everyone = _wait_for(lambda: all(calls.values()), ctx.seconds(CALL_TIMEOUT))
    time.sleep(0.05)  # a second, wrong call would come from the same completion
    check(everyone, lambda: "of three PJRT_Event_OnReady callbacks of a pending event, with one that raises after "
                            "the first and after the second, only "
                            f"{[name for name, got in calls.items() if got]} ran: a callback that raises stopped "
                            "the ones registered after it")
    check(all(got == [None] for got in calls.values()),
          f"PJRT_Event_OnReady callbacks of an event that completed without an error were called {calls}; expected "
          "each once, with no error")


@case("events", timeout=COMPILING)
def on_ready_callback_may_use_its_event(ctx: PluginUnderTest) -> None:
    """A PJRT_Event_OnReady callback may call the event it is registered on (PJRT_Event_IsReady,
    PJRT_Event_Error, and PJRT_Event_OnReady again, as chained continuations do): the plugin holds
    no lock of the event while it runs a callback, so nothing deadlocks, and the callback
    registered from inside runs too; for a ready event and for one that becomes ready later."""

    def chained(event: Any, seen: list[Any], done: threading.Event) -> Callable[[Any], None]:
        def first(error: Any) -> None:
            seen.append((event.is_ready(), event.error() is None))
            event.on_ready(lambda later: done.set())
        return first

    for when in ("ready", "pending"):
        if when == "ready":
            event = _awaited_ready_event(ctx)
        else:
            _, result = _pending_slow_work(ctx)
            event = result.device_complete_events[0]
        seen: list[Any] = []
        done = threading.Event()
        what = f"PJRT_Event_OnReady of a {when} event with a callback that registers another one on it"
        ctx.call(event.on_ready, chained(event, seen, done), what=what)
        if when == "pending":
            ctx.await_event(event, "the completion event of the slow program", timeout=60.0)
        check(done.wait(ctx.seconds(CALL_TIMEOUT)),
              f"{what}: the callback registered from inside the first one did not run within "
              f"{ctx.seconds(CALL_TIMEOUT):g} s (the first ran: {bool(seen)}); a callback runs with no lock of its "
              "event held, so it may use the event")
        check(seen == [(True, True)], f"{what}: inside the callback, PJRT_Event_IsReady and PJRT_Event_Error gave "
                                      f"(ready, no error) = {seen}; expected [(True, True)]")


@case("events")
def on_ready_refuses_what_it_cannot_call(ctx: PluginUnderTest) -> None:
    """PJRT_Event_OnReady given something that is not a callback (None, a number) refuses it at
    the call with INVALID_ARGUMENT, instead of failing later on the thread that completes the
    event, where no caller sees the error."""
    event = _awaited_ready_event(ctx)
    for label, bad in (("None", None), ("the number 3", 3)):
        what = f"PJRT_Event_OnReady with {label} for a callback"
        expect_error(functools.partial(ctx.call, event.on_ready, bad, what=what), code=ErrorCode.INVALID_ARGUMENT,
                     what=what)


@case("events", timeout=COMPILING)
def to_host_of_a_pending_buffer_that_fails(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_ToHostBuffer of an output whose execution is still queued, and then fails,
    reports that failure: the copy's event becomes ready with an error (or the call fails), never
    ready without one over a destination nothing was written to."""
    work = slow_work(ctx)
    failing = failing_executable(ctx)
    args = [ctx.put(_values()), ctx.put(np.array(2.0, np.float32))]
    ahead = work.start(ctx)
    try:
        result = ctx.call(failing.execute, [args], ExecuteOptions(), what="PJRT_LoadedExecutable_Execute (a program "
                          "that cannot allocate its output, queued behind the slow program)", timeout=60.0)
    except PjrtError as exc:
        _settle(ctx, ahead, "the slow program")
        skip(f"plugin {ctx.name} refused the failing execution at the call ({describe(exc)}): none of its outputs is "
             "pending")
    try:
        if result.device_complete_events[0].is_ready():
            skip(f"plugin {ctx.name} had ended the failing execution when Execute returned: its output was never "
                 "pending")
        what = "PJRT_Buffer_ToHostBuffer of the f32[4] output of an execution that is queued and then fails"
        dst = np.full(4, 123.0, np.float32)
        try:
            copy = ctx.call(result.outputs[0][0].to_host_buffer, dst, what=what)
        except PjrtError:
            return  # the failure reached the caller at the call
        try:
            ctx.call(copy.event.await_, ctx.seconds(60.0), what=f"{what}: PJRT_Event_Await", timeout=61.0)
        except PjrtError:
            pass
        check(copy.event.is_ready(), f"{what}: the copy's event never became ready")
        check(copy.event.error() is not None,
              f"{what}: the copy's event became ready without an error, the destination holding {dst.tolist()}; the "
              "copy of a buffer whose computation failed carries that failure")
    finally:
        _settle(ctx, ahead, "the slow program")
        _settle(ctx, result, "the failing execution")


@case("transfers", min_api_minor=32, timeout=COMPILING)
def copy_of_a_pending_buffer(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_CopyToDevice and PJRT_Buffer_CopyToMemory of a buffer an execution is still
    computing make copies that are ready no sooner than their source (a copy's
    PJRT_Buffer_ReadyEvent is not ready while the source's is not) and that hold the source's
    final values."""
    work, result = _pending_slow_work(ctx)
    source = result.outputs[0][0]
    places = _copy_places(ctx, source)
    if not places:
        skip(f"plugin {ctx.name} has one device with one memory: there is nowhere to copy to")
    copies = []
    for what, make in places:
        what = f"{what} of a buffer still being computed"
        copy = ctx.call(make, what=what)
        copy_ready = ctx.call(copy.ready_event, what=f"{what}: the copy's PJRT_Buffer_ReadyEvent").is_ready()
        source_pending = not source.ready_event().is_ready()
        check(not (copy_ready and source_pending),
              f"{what}: the copy's PJRT_Buffer_ReadyEvent is ready while its source's is not; a copy cannot be ready "
              "before the data it copies")
        copies.append((what, copy))
    for what, copy in copies:
        ctx.await_event(copy.ready_event(), f"{what}: the copy's PJRT_Buffer_ReadyEvent", timeout=60.0)
        got = ctx.fetch(copy)
        check(np.array_equal(got, work.expected),
              lambda: f"{what}: the copy holds {int(np.count_nonzero(got != work.expected))} of {got.size} elements "  # noqa: B023
                      "other than the source's final values")
    _settle(ctx, result, "the slow program")


# -- given a device and a memory, an element type, an unknown semantics -----------------------------


@case("transfers", min_api_minor=32)
def put_with_a_device_and_its_own_memory(ctx: PluginUnderTest) -> None:
    """PJRT_Client_BufferFromHostBuffer given a device and a memory that device addresses makes the
    buffer in that memory, on that device, holding the values; a memory the plugin does not put
    host data in may be refused, the device's default memory never."""
    host = _values(6).reshape(3, 2)
    default = ctx.device.default_memory()
    for memory in ctx.device.addressable_memories():
        what = f"PJRT_Client_BufferFromHostBuffer with device {device_id(ctx.device)} and its {_where(memory)}"
        try:
            transfer = ctx.call(ctx.client.buffer_from_host_buffer, host, device=ctx.device, memory=memory, what=what)
        except PjrtError as exc:
            check(not _same_memory(memory, default) and exc.code in (ErrorCode.UNIMPLEMENTED,
                                                                      ErrorCode.INVALID_ARGUMENT),
                  f"{what} failed with {describe(exc)}: a device and a memory it addresses agree, and its default "
                  "memory is one every device can put data in")
            continue
        ctx.await_event(transfer.done_with_host_buffer, f"{what}: done_with_host_buffer")
        buffer = transfer.buffer
        got, owner = buffer.memory(), device_id(buffer.device())
        check(_same_memory(got, memory), f"{what} made a buffer in {_where(got)}")
        check(owner == device_id(ctx.device), f"{what} made a buffer on device {owner}")
        back = ctx.fetch(buffer)
        check(np.array_equal(back, host), f"{what}: the buffer holds {back.tolist()}, the host array {host.tolist()}")


@case("transfers")
def unknown_host_buffer_semantics_refused(ctx: PluginUnderTest) -> None:
    """PJRT_Client_BufferFromHostBuffer given a host_buffer_semantics that is none of
    PJRT_HostBufferSemantics' values refuses it with INVALID_ARGUMENT: what the caller promises about
    its host array is then unknown, and no transfer may be made on a guess."""
    for value in (9, -1):
        what = f"PJRT_Client_BufferFromHostBuffer with host_buffer_semantics = {value}"
        expect_error(functools.partial(ctx.call, ctx.client.buffer_from_host_buffer, _values(), device=ctx.device,
                                       semantics=value, what=what), code=ErrorCode.INVALID_ARGUMENT, what=what)


# -- arrays too large for one piece -----------------------------------------------------------------

#: Elements of the large array (16 MiB of f32): past the sizes from which runtimes split a copy
#: into pieces (pjrt-hub's CPU runtime from 8 MiB, on two threads).
LARGE_ELEMENTS = 1 << 22


@case("transfers", min_api_minor=32, timeout=60.0)
def large_arrays_move_whole(ctx: PluginUnderTest) -> None:
    """A 16 MiB array comes back whole from PJRT_Client_BufferFromHostBuffer and
    PJRT_Buffer_ToHostBuffer (into a new array and into the caller's), and from a copy made by
    PJRT_Buffer_CopyToDevice or PJRT_Buffer_CopyToMemory: every element, the last ones included
    (large copies are where runtimes split the work into pieces)."""
    host = np.arange(LARGE_ELEMENTS, dtype=np.float32) * np.float32(0.5) - np.float32(7.0)
    buffer = ctx.put(host)

    def whole(what: str, got: np.ndarray) -> None:
        bad = np.flatnonzero(got.reshape(-1) != host) if got.shape == host.shape else None
        check(bad is not None and bad.size == 0,
              lambda: f"{what} of a 16 MiB f32[{LARGE_ELEMENTS}] array: " + (
                  f"shape {list(got.shape)}" if bad is None else
                  f"{bad.size} elements differ, from index {int(bad[0])} to {int(bad[-1])} (e.g. [{int(bad[-1])}] = "
                  f"{got.reshape(-1)[bad[-1]]!r}, expected {host[bad[-1]]!r})"))

    whole("PJRT_Buffer_ToHostBuffer into a new array", ctx.fetch(buffer))
    dst = np.full(LARGE_ELEMENTS, np.nan, np.float32)
    ctx.call(_read(ctx, buffer, dst), what="PJRT_Buffer_ToHostBuffer of a 16 MiB buffer into the caller's array")
    whole("PJRT_Buffer_ToHostBuffer into the caller's array", dst)
    places: list[tuple[str, Callable[[], Any]]] = [
        (f"PJRT_Buffer_CopyToDevice(device {device_id(d)})", functools.partial(buffer.copy_to_device, d))
        for d in ctx.devices[1:2]]
    if not places:
        places += [(f"PJRT_Buffer_CopyToMemory({_where(m)})", functools.partial(buffer.copy_to_memory, m))
                   for m in ctx.device.addressable_memories() if not _same_memory(m, buffer.memory())][:1]
    for what, make in places:
        copy = ctx.call(make, what=f"{what} of a 16 MiB buffer")
        whole(f"{what}, then PJRT_Buffer_ToHostBuffer", ctx.fetch(copy))
        copy.delete()


# -- what the caller gives: a destination, a DLPack request ----------------------------------------


@case("buffers")
def to_host_destination_must_fit(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_ToHostBuffer into a caller's array takes only an array of the buffer's shape and
    element type that it can write: one of another shape with as many elements (2x2 for a
    4-vector), of another type of the same width, or read-only, is refused with INVALID_ARGUMENT
    (not a bare Python error) and left as it was."""
    buffer = ctx.put(_values())
    read_only = np.full(4, 123.0, np.float32)
    read_only.flags.writeable = False
    for label, dst in (("an f32[2,2] array", np.full((2, 2), 123.0, np.float32)),
                       ("an s32[4] array", np.full(4, 123, np.int32)),
                       ("a read-only f32[4] array", read_only)):
        what = f"PJRT_Buffer_ToHostBuffer of an f32[4] buffer into {label}"
        expect_error(functools.partial(ctx.call, _read(ctx, buffer, dst), what=what), code=ErrorCode.INVALID_ARGUMENT,
                     what=what)
        check(np.all(dst == 123), f"{what} was refused but wrote {dst.tolist()} into the array (it held 123 "
                                  "everywhere)")


class _Capsule:
    """A DLPack producer that hands out one capsule already made: how a case reads what a
    buffer's ``__dlpack__`` returned for arguments of its choosing."""

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self._capsule, self._device = capsule, device

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


#: DLPack's device types: host memory, and a CUDA device (where no buffer of a host can go).
_DL_CPU, _DL_CUDA = 1, 2


def _dlpack_producer(ctx: PluginUnderTest, buffer: Any) -> Any:
    """The buffer as a DLPack producer in host memory; skips where it is not one."""
    producer = getattr(buffer, "unwrapped", buffer)
    if not hasattr(producer, "__dlpack__"):
        skip(f"buffers of plugin {ctx.name} are not DLPack producers (no __dlpack__)")
    try:
        device = tuple(producer.__dlpack_device__())
    except BufferError as exc:
        skip(f"plugin {ctx.name} does not export this buffer through DLPack: {exc}")
    if device != (_DL_CPU, 0):
        skip(f"the buffer is on DLPack device {device}, not in host memory")
    return producer


@case("transfers")
def dlpack_consumer_cannot_change_the_buffer(ctx: PluginUnderTest) -> None:
    """A DLPack consumer of a buffer cannot change it (a buffer's values never change): an export
    that shares the buffer's memory is read-only to a consumer that speaks DLPack 1.0
    (numpy.from_dlpack, __dlpack__(max_version=(1, 0))), and one it can write is a copy of its
    own; writing it leaves the buffer as it was."""
    host = _values(6)
    buffer = ctx.put(host)
    producer = _dlpack_producer(ctx, buffer)
    exports: tuple[tuple[str, Callable[[], np.ndarray]], ...] = (
        ("numpy.from_dlpack of the buffer", lambda: np.from_dlpack(buffer)),
        ("the capsule of __dlpack__(max_version=(1, 0))",
         lambda: np.from_dlpack(_Capsule(producer.__dlpack__(max_version=(1, 0)), (_DL_CPU, 0)))),
    )
    for what, export in exports:
        try:
            consumer = export()
        except BufferError as exc:
            skip(f"plugin {ctx.name} does not export the buffer through DLPack: {exc}")
        check(np.array_equal(consumer, host), f"{what} reads {consumer.tolist()}, the buffer holds {host.tolist()}")
        if consumer.flags.writeable:
            consumer[...] = -99.0
            got = ctx.fetch(buffer)
            check(np.array_equal(got, host),
                  f"{what} is writable, and writing it changed the buffer to {got.tolist()} (it held "
                  f"{host.tolist()}): an export that shares a buffer's memory is marked read-only (DLPack 1.0's "
                  "flag), since a buffer's values never change")
        del consumer
        gc.collect()


@case("transfers")
def dlpack_export_arguments(ctx: PluginUnderTest) -> None:
    """A buffer's __dlpack__ answers as the Python array API has a producer in host memory answer:
    with no arguments (a consumer older than DLPack 1.0) it exports the buffer; dl_device =
    (kDLCPU, 0), where the buffer is, is accepted and another device (kDLCUDA) refused with
    BufferError; and a stream, which host memory has none of, is refused with BufferError unless
    it is None (-1, "no synchronisation", may be accepted)."""
    host = _values(5, -1.0)
    buffer = ctx.put(host)
    producer = _dlpack_producer(ctx, buffer)

    def consume(what: str, capsule: Any) -> None:
        consumer = np.from_dlpack(_Capsule(capsule, (_DL_CPU, 0)))
        check(np.array_equal(consumer, host), f"{what} exported {consumer.tolist()}, the buffer holds {host.tolist()}")

    try:
        legacy = producer.__dlpack__()
    except Exception as exc:  # noqa: BLE001 - whatever it raises, a consumer older than DLPack 1.0 is refused
        fail(f"__dlpack__() with no arguments (a consumer older than DLPack 1.0) raised {type(exc).__name__}: {exc}; "
             "a producer answers it with a capsule it can read")
    consume("__dlpack__()", legacy)
    del legacy
    accepted: tuple[tuple[str, dict[str, Any]], ...] = (
        ("dl_device=(kDLCPU, 0)", {"dl_device": (_DL_CPU, 0)}), ("stream=None", {"stream": None}))
    for label, kwargs in accepted:
        consume(f"__dlpack__(max_version=(1, 0), {label})", producer.__dlpack__(max_version=(1, 0), **kwargs))
    refused: tuple[tuple[str, dict[str, Any]], ...] = (
        ("dl_device=(kDLCUDA, 0)", {"dl_device": (_DL_CUDA, 0)}), ("stream=1", {"stream": 1}),
        ("stream=3", {"stream": 3}))
    for label, kwargs in refused:
        what = f"__dlpack__(max_version=(1, 0), {label}) of a buffer in host memory"
        try:
            capsule = producer.__dlpack__(max_version=(1, 0), **kwargs)
        except BufferError:
            continue
        except Exception as exc:  # noqa: BLE001 - the type is what the case checks
            fail(f"{what} raised {type(exc).__name__}: {exc}; a producer refuses what it cannot do with BufferError")
        del capsule
        fail(f"{what} returned a capsule: host memory has no streams and is on no CUDA device; the request is "
             "refused with BufferError")
    try:
        consume("__dlpack__(max_version=(1, 0), stream=-1)", producer.__dlpack__(max_version=(1, 0), stream=-1))
    except BufferError:
        pass  # the array API accepts only None for host memory; -1 ("do not synchronise") may be refused too
    gc.collect()


# -- how long a buffer lives: delete twice, lent memory, donation ------------------------------------


@case("buffers", timeout=COMPILING)
def delete_after_donation_or_delete_does_nothing(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_Delete of a buffer already deleted, or donated to an execution, succeeds and
    changes nothing: the buffer stays deleted and PJRT_Buffer_Destroy after it works (a framework
    deletes every argument it is done with, donated or not)."""
    deleted = ctx.put(_values())
    ctx.call(deleted.delete, what="PJRT_Buffer_Delete")
    ctx.call(deleted.delete, what="PJRT_Buffer_Delete of a buffer already deleted")
    check(deleted.is_deleted(), "PJRT_Buffer_IsDeleted is false after PJRT_Buffer_Delete was called twice")
    ctx.call(deleted.destroy, what="PJRT_Buffer_Destroy of a buffer deleted twice")
    donated = ctx.put(_values())
    outputs = ctx.execute(ctx.compile(donating_add_one()), [[donated]])
    if not donated.is_deleted():
        skip(f"plugin {ctx.name} did not donate the input (see buffers/donation)")
    ctx.call(donated.delete, what="PJRT_Buffer_Delete of a buffer donated to an execution")
    check(donated.is_deleted(), "PJRT_Buffer_IsDeleted is false after PJRT_Buffer_Delete of a donated buffer")
    got = ctx.fetch(outputs[0][0])
    check(np.array_equal(got, _values() + 1), f"the output of the donating execution holds {got.tolist()} after "
                                               "PJRT_Buffer_Delete of its donated input")
    ctx.call(donated.destroy, what="PJRT_Buffer_Destroy of a donated buffer")


def _lent_buffers(ctx: PluginUnderTest, host: np.ndarray, semantics: HostBufferSemantics,
                  semantics_minor: int) -> list[tuple[str, Any, np.ndarray, list[int]]]:
    """Buffers over memory lent by the case, each with the memory and the calls of its release (the
    memory is overwritten with NaN at once, as an owner told it is free may do): a view made by
    PJRT_Client_CreateViewOfDeviceBuffer (its on_delete), and a host array put with ``semantics``
    (its done_with_host_buffer), each where the plugin offers it."""
    lent: list[tuple[str, Any, np.ndarray, list[int]]] = []

    def releaser(memory: np.ndarray, told: list[int]) -> Callable[..., None]:
        def release(*_: Any) -> None:
            told.append(1)
            memory[...] = np.nan
        return release

    declared = ctx.declared_version
    told: list[int]
    if declared is None or declared.minor >= 33:
        memory, told = _aligned(host), []
        try:
            view = ctx.call(ctx.client.create_view_of_device_buffer, memory, device=ctx.device,
                            on_delete=releaser(memory, told), what="PJRT_Client_CreateViewOfDeviceBuffer")
            lent.append(("a view (PJRT_Client_CreateViewOfDeviceBuffer, on_delete)", view, memory, told))
        except PjrtError as exc:
            if exc.code is not ErrorCode.UNIMPLEMENTED:
                raise
    if declared is None or declared.minor >= semantics_minor:
        memory, told = _aligned(host), []
        transfer = ctx.call(ctx.client.buffer_from_host_buffer, memory, device=ctx.device, semantics=semantics,
                            what=f"PJRT_Client_BufferFromHostBuffer ({semantics.name})")
        ctx.call(transfer.done_with_host_buffer.on_ready, releaser(memory, told),
                 what="PJRT_Event_OnReady of done_with_host_buffer")
        lent.append((f"a host array put with {semantics.name} (done_with_host_buffer)", transfer.buffer, memory, told))
    if not lent:
        skip(f"plugin {ctx.name} makes no buffer over memory it borrows")
    return lent


@case("lifetime", timeout=COMPILING)
def lent_memory_stays_lent_while_queued_work_reads_it(ctx: PluginUnderTest) -> None:
    """Memory a buffer borrows (a view's, a host array's put with kImmutableZeroCopy) goes back to
    its owner (on_delete, done_with_host_buffer) only once no work reads it: deleting the buffer
    while an execution that reads it is still queued does not hand the memory back before that
    execution ran. The owner, once told, overwrites the memory; the execution still computes
    from the values it held."""
    work = slow_work(ctx)  # skips, saying why, where the plugin cannot compile the slow program
    executable = ctx.compile(add_one(SLOW_ELEMENTS))
    host = np.linspace(-3.0, 3.0, SLOW_ELEMENTS, dtype=np.float32)
    lent = _lent_buffers(ctx, host, HostBufferSemantics.IMMUTABLE_ZERO_COPY, 47)
    ahead = work.start(ctx)
    runs = []
    for label, buffer, _, told in lent:
        result = ctx.call(executable.execute, [[buffer]], ExecuteOptions(),
                          what=f"PJRT_LoadedExecutable_Execute (x + 1 of {label}, queued behind the slow program)",
                          timeout=60.0)
        ctx.call(buffer.delete, what=f"PJRT_Buffer_Delete of {label} that a queued execution reads")
        runs.append((label, result, told))
    expected = host + np.float32(1)
    for label, result, told in runs:
        for event in result.device_complete_events:
            ctx.await_event(event, f"the completion event of x + 1 of {label}", timeout=60.0)
        got = ctx.fetch(result.outputs[0][0])
        check(np.array_equal(got, expected),
              lambda: f"x + 1 of {label}, deleted while the execution was queued, is wrong in "  # noqa: B023
                      f"{int(np.count_nonzero(got != expected))} of {got.size} elements (e.g. {got[:2].tolist()}): the "  # noqa: B023
                      "memory went back to its owner, who overwrote it, before the execution reading it ran")
        check(_wait_for(lambda: bool(told), ctx.seconds(CALL_TIMEOUT)),  # noqa: B023
              f"the memory of {label} never went back to its owner after the buffer was deleted and its reader ran")
    _settle(ctx, ahead, "the slow program")


@case("lifetime", timeout=COMPILING)
def donated_lent_memory_goes_back_with_its_output(ctx: PluginUnderTest) -> None:
    """A buffer over borrowed memory (a view, a host array put with kMutableZeroCopy) donated to an
    execution hands the memory back (on_delete, done_with_host_buffer) only once nothing uses it,
    the output that may have taken it over included, and then exactly once: the owner, once told,
    overwrites the memory, and the output still holds x + 1 until it is deleted. A plugin may refuse
    the donation."""
    executable = ctx.compile(donating_add_one())
    host = _values(4, -1.5)
    expected = host + np.float32(1)
    for label, buffer, _, told in _lent_buffers(ctx, host, HostBufferSemantics.MUTABLE_ZERO_COPY, 48):
        what = f"PJRT_LoadedExecutable_Execute donating {label}"
        try:
            outputs = ctx.execute(executable, [[buffer]])
        except PjrtError as exc:
            check(exc.code in REFUSALS, f"{what} failed with {describe(exc)}; a refusal is INVALID_ARGUMENT or "
                                        "FAILED_PRECONDITION")
            continue
        output = outputs[0][0]
        got = ctx.fetch(output)
        check(np.array_equal(got, expected),
              f"{what}: the output holds {got.tolist()}, expected {expected.tolist()}"
              + (" (the memory was handed back to its owner, who overwrote it, while the output used it)" if told
                 else ""))
        again = ctx.fetch(output)
        check(np.array_equal(again, expected), f"{what}: read again, the output holds {again.tolist()} (the memory "
                                               "was handed back while the output still used it)")
        ctx.call(output.delete, what=f"PJRT_Buffer_Delete of the output of {what}")
        ctx.call(buffer.delete, what=f"PJRT_Buffer_Delete of {label}, donated")
        check(_wait_for(lambda: bool(told), ctx.seconds(CALL_TIMEOUT)),  # noqa: B023
              f"{what}: the memory never went back to its owner once the input and the output were deleted")
        time.sleep(0.05)
        check(len(told) == 1, f"{what}: the memory was handed back {len(told)} times, expected once")


@case("lifetime", timeout=COMPILING)
def donation_waits_for_queued_readers(ctx: PluginUnderTest) -> None:
    """Donating a buffer that an execution still queued will read (PJRT_LoadedExecutable_Execute of
    a program that aliases it to its output) does not let the donating execution write over it
    first, even where it runs before the reader (a cheap program may run at once, on the caller's
    thread): the queued reader computes from the values the buffer held. A plugin may refuse the
    donation while the buffer is in use."""
    work = slow_work(ctx)  # skips, saying why, where the plugin cannot compile the slow program
    # A loop is never cheap enough to run at once: the reader waits in the device's queue.
    reader = ctx.compile(slow_program(4))
    donor = ctx.compile(donating_add_one())
    host = _values(4, -2.0)
    buffer = ctx.put(host)
    steps = ctx.put(np.array(1, np.int32))
    ahead = work.start(ctx)
    first = ctx.call(reader.execute, [[buffer, steps]], ExecuteOptions(),
                     what="PJRT_LoadedExecutable_Execute (one step of x * 0.5 + 1, queued behind the slow program)",
                     timeout=60.0)
    what = "PJRT_LoadedExecutable_Execute donating a buffer that a queued execution reads"
    try:
        second = ctx.call(donor.execute, [[buffer]], ExecuteOptions(), what=what, timeout=60.0)
    except PjrtError as exc:
        check(exc.code in REFUSALS, f"{what} failed with {describe(exc)}; a refusal is INVALID_ARGUMENT or "
                                    "FAILED_PRECONDITION")
        second = None
    for event in first.device_complete_events:
        ctx.await_event(event, "the completion event of the queued reader", timeout=60.0)
    got, expected = ctx.fetch(first.outputs[0][0]), slow_program_result(host, 1)
    check(np.array_equal(got, expected),
          f"the queued reader of a buffer that a later execution donated computed x * 0.5 + 1 = {got.tolist()}, "
          f"expected {expected.tolist()} (from {host.tolist()}): the donating execution wrote over the buffer "
          "before its reader ran")
    if second is not None:
        got = ctx.fetch(second.outputs[0][0])
        check(np.array_equal(got, host + 1), f"{what}: its output holds {got.tolist()}, expected "
                                             f"{(host + 1).tolist()}")
    _settle(ctx, ahead, "the slow program")


@case("transfers", min_api_minor=33)
def view_of_a_strided_producer(ctx: PluginUnderTest) -> None:
    """PJRT_Client_CreateViewOfDeviceBuffer of memory whose elements are not dense (every other
    element of an array) either refuses it, or makes a view that shows those elements and whose
    memory, where the buffer is in host memory, is laid out as the plugin says (the Layouts
    extension's buffer_memory_layout, else dense major-to-minor): no layout describes memory with
    gaps as dense."""
    base = _aligned(np.arange(16, dtype=np.float32) * 0.5 - 2.0)
    producer = base[::2]
    what = "PJRT_Client_CreateViewOfDeviceBuffer of every other element of an f32[16] array"
    try:
        view = ctx.call(ctx.client.create_view_of_device_buffer, producer, device=ctx.device, what=what)
    except PjrtError as exc:
        check(exc.code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.UNIMPLEMENTED),
              f"{what} failed with {describe(exc)}; a refusal is INVALID_ARGUMENT (or UNIMPLEMENTED)")
        return
    expected = np.ascontiguousarray(producer)
    got = ctx.fetch(view)
    check(np.array_equal(got, expected), f"{what}: the view holds {got.tolist()}, the elements {expected.tolist()}")
    if not view.is_on_cpu():
        return
    layout: Any = MemoryLayout(minor_to_major=(0,))
    if "Layouts" in ctx.offered_extensions:
        layout = ctx.call(ctx.api.extensions()["Layouts"].buffer_memory_layout, getattr(view, "unwrapped", view),
                          what=f"Layouts.buffer_memory_layout of the view ({what})")
    _check_layout_against_memory(ctx, view, layout, expected, f"{what}: the memory at PJRT_Buffer_UnsafePointer")


# -- the binding's time limit of an execution, the memory statistics of buffers -----------------------


@case("execute", timeout=COMPILING)
def negative_execute_timeout_is_no_missing_limit(ctx: PluginUnderTest) -> None:
    """The Python binding's ExecuteOptions.timeout of -1 s does not mean "no limit" (None does): a
    plugin that stops executions whose time is up either refuses a negative timeout with
    INVALID_ARGUMENT or takes its time as up at once (DEADLINE_EXCEEDED on the execution's events);
    it never runs the execution to its end as if unbounded."""
    work = slow_work(ctx)  # skips, saying why, where the plugin cannot compile the slow program

    def start(timeout: float) -> Any:
        args = [ctx.put(work.host), ctx.put(np.array(work.trips, np.int32))]
        return ctx.call(work.executable.execute, [args], ExecuteOptions(timeout=timeout),
                        what=f"PJRT_LoadedExecutable_Execute of the slow program with ExecuteOptions.timeout = "
                             f"{timeout:g} s", timeout=60.0)

    try:
        probe = start(0.001)
    except PjrtError as exc:
        skip(f"plugin {ctx.name} refuses ExecuteOptions.timeout ({describe(exc)})")
    _settle(ctx, probe, "the slow program with a time limit of 1 ms")
    if probe.device_complete_events[0].error() is None:
        skip(f"plugin {ctx.name} ran the slow program to its end despite a time limit of 1 ms: it does not stop "
             "executions (the binding lets such a plugin leave them running)")
    try:
        result = start(-1.0)
    except PjrtError as exc:
        check(exc.code is ErrorCode.INVALID_ARGUMENT,
              f"PJRT_LoadedExecutable_Execute with ExecuteOptions.timeout = -1 s failed with {describe(exc)}; a "
              "refusal of a negative time limit is INVALID_ARGUMENT")
        return
    _settle(ctx, result, "the slow program with a time limit of -1 s")
    error = result.device_complete_events[0].error()
    check(error is not None and error.code is ErrorCode.DEADLINE_EXCEEDED,
          f"the slow program with ExecuteOptions.timeout = -1 s ended with {describe(error) if error else 'no error'} "
          "(the plugin stopped it with a limit of 1 ms); a negative limit is refused (INVALID_ARGUMENT) or already "
          "past (DEADLINE_EXCEEDED), never no limit")


@case("devices")
def memory_stats_count_allocations(ctx: PluginUnderTest) -> None:
    """PJRT_Device_MemoryStats' optional num_allocs and largest_alloc_size, where reported, follow
    the buffers made on the device: num_allocs grows by at least one for each buffer made (and
    kept), and largest_alloc_size, the largest single allocation seen, is at least the size of the
    largest of them."""
    device = ctx.device
    gc.collect()
    try:
        before = ctx.call(device.memory_stats, what="PJRT_Device_MemoryStats")
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            skip(f"plugin {ctx.name} does not report memory statistics ({describe(exc)})")
        raise
    if before.num_allocs is None and before.largest_alloc_size is None:
        skip(f"plugin {ctx.name} reports neither num_allocs nor largest_alloc_size")
    sizes = (1 << 12, 1 << 20, 1 << 16)
    kept = [ctx.put(np.zeros(size // 4, np.float32), device=device) for size in sizes]
    after = ctx.call(device.memory_stats, what="PJRT_Device_MemoryStats")
    if before.num_allocs is not None:
        check(after.num_allocs is not None and after.num_allocs - before.num_allocs >= len(sizes),
              f"PJRT_Device_MemoryStats: num_allocs went from {before.num_allocs} to {after.num_allocs} while "
              f"{len(sizes)} buffers were made on device {device_id(device)} (and kept): each is an allocation")
    if before.largest_alloc_size is not None:
        check(after.largest_alloc_size is not None and after.largest_alloc_size >= max(sizes),
              f"PJRT_Device_MemoryStats: largest_alloc_size is {after.largest_alloc_size} after a buffer of "
              f"{max(sizes)} bytes was made on device {device_id(device)}; it is the largest single allocation seen")
    del kept
