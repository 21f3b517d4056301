"""buffers and transfers: ``PJRT_Buffer_*`` and ``PJRT_Client_BufferFromHostBuffer``
(upstream's PjrtCApiBufferTest: IsDeleted, GetOnDeviceSizeInBytes, ReadyEvent,
ToHostBufferNoHostLayout, IncreaseAndDecreaseReferenceCount, DecreaseReferenceCountReturnsError,
OpaqueDeviceMemoryDataPointer; BufferTransferImmutableUntilTransferCompletes)."""

from __future__ import annotations

import gc
import time
from typing import Callable

import numpy as np

from pjrt_hub.abi import (BufferType, ErrorCode, ExecuteOptions, HostBufferSemantics, InvalidArgument, PjrtError,
                          to_numpy_dtype)

from .._case import Case, CaseSkipped, add_case, case, check, expect_error
from .._context import CALL_TIMEOUT, PluginUnderTest, describe
from .._programs import donating_add_one
from .client import device_id

#: Element types every plugin must carry; the others are checked where the plugin accepts them.
REQUIRED_TYPES = (BufferType.F32, BufferType.S32)
#: Element types newer than the history's start, and the minor that added them.
TYPE_MINORS = {BufferType.F8E4M3: 55, BufferType.F8E3M4: 55, BufferType.F8E8M0FNU: 63,
               BufferType.F4E2M1FN: 63, BufferType.S1: 94, BufferType.U1: 94, BufferType.TOKEN: 50}


def sample(kind: BufferType, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Distinct, exactly representable values of ``kind``, in a non-square shape (a transpose shows)."""
    dtype = to_numpy_dtype(kind)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        values = np.array([True, False, True, True, False, False][:n])
    elif dtype.kind in "iu" or kind in (BufferType.S4, BufferType.U4, BufferType.S2, BufferType.U2):
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype) if dtype.kind not in "iu" else np.iinfo(dtype)
        span = [int(info.min), int(info.max), 0, 1, int(info.max) - 1, int(info.min) + 1]
        values = np.array(span[:n], dtype=dtype if dtype.kind in "iu" else np.int64)
    elif dtype.kind == "c":
        values = np.array([1 + 2j, -3.5 + 0.25j, 0j, 1e30 - 1e-30j, -1j, 7.0][:n])
    elif kind is BufferType.F8E8M0FNU:  # powers of two only, no sign, no zero
        values = np.array([1.0, 2.0, 0.5, 4.0, 0.25, 8.0][:n])
    else:
        values = np.array([1.0, -2.0, 0.5, 4.0, -0.25, 1.5][:n])
    return np.resize(values, n).astype(dtype).reshape(shape)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _round_trip_case(kind: BufferType) -> Case:
    label = kind.name.lower()

    def run(ctx: PluginUnderTest) -> None:
        host = sample(kind)
        try:
            buffer = ctx.put(host)
        except PjrtError as exc:
            if kind in REQUIRED_TYPES:
                raise
            raise CaseSkipped(f"plugin {ctx.name} does not take {kind.name} buffers ({describe(exc)})") from None
        got_type = buffer.element_type()
        check(got_type == kind, f"a {kind.name} array became a buffer of element type "
                                f"{getattr(got_type, 'name', got_type)}")
        dims = tuple(buffer.dimensions())
        check(dims == host.shape, f"a {kind.name}{list(host.shape)} array became a buffer of dimensions {list(dims)}")
        back = ctx.fetch(buffer)
        check(back.dtype == host.dtype, f"a {kind.name} buffer came back to host as {back.dtype}, expected {host.dtype}")
        check(_same_bytes(back, host), lambda: f"{kind.name} values changed on the round trip: sent "
                                               f"{host.tolist()}, got {back.tolist()}")

    return Case("buffers", f"round_trip_{label}",
                f"A {kind.name} array goes host -> device -> host unchanged, bit for bit"
                + (" (required)." if kind in REQUIRED_TYPES else " (where the plugin takes the type)."),
                run, min_api_minor=TYPE_MINORS.get(kind, 0))


def _types_with_numpy() -> list[BufferType]:
    kinds = []
    for kind in BufferType:
        try:
            to_numpy_dtype(kind)
        except InvalidArgument:
            continue
        kinds.append(kind)
    return kinds


for _kind in _types_with_numpy():
    add_case(_round_trip_case(_kind))


def _f32(ctx: PluginUnderTest, values=(41.0, 42.0, 43.0, 44.0)):
    host = np.array(values, np.float32)
    return host, ctx.put(host)


@case("buffers")
def dimensions(ctx: PluginUnderTest) -> None:
    """Dimensions, unpadded dimensions and dynamic dimension indices of a static f32[2,3] buffer."""
    buffer = ctx.put(sample(BufferType.F32))
    check(tuple(buffer.dimensions()) == (2, 3), f"PJRT_Buffer_Dimensions: {buffer.dimensions()}, expected (2, 3)")
    try:
        unpadded = tuple(buffer.unpadded_dimensions())
        dynamic = tuple(buffer.dynamic_dimension_indices())
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            return  # optional calls
        raise
    check(unpadded == (2, 3), f"PJRT_Buffer_UnpaddedDimensions: {unpadded}, expected (2, 3)")
    check(dynamic == (), f"PJRT_Buffer_DynamicDimensionIndices of a static buffer: {dynamic}, expected none")


@case("buffers")
def on_device_size(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_OnDeviceSizeInBytes of f32[2,3] holds at least its 24 bytes."""
    buffer = ctx.put(sample(BufferType.F32))
    size = buffer.on_device_size_in_bytes()
    check(isinstance(size, int) and size >= 24, f"PJRT_Buffer_OnDeviceSizeInBytes of f32[2,3] is {size!r}, expected >= 24")


@case("buffers")
def device_and_memory(ctx: PluginUnderTest) -> None:
    """A buffer lives on the device it was put on, in that device's default memory."""
    for device in ctx.devices[:2]:
        buffer = ctx.put(np.ones(4, np.float32), device=device)
        check(device_id(buffer.device()) == device_id(device),
              f"a buffer put on device {device_id(device)} reports device {device_id(buffer.device())}")
        memory, default = buffer.memory(), device.default_memory()
        check((memory.kind(), memory.id()) == (default.kind(), default.id()),
              f"a buffer put on device {device_id(device)} is in memory {memory.kind()} {memory.id()}, "
              f"not the default memory {default.kind()} {default.id()}")


@case("buffers")
def to_host_into_array(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_ToHostBuffer into a caller's array fills that array."""
    host, buffer = _f32(ctx)
    dst = np.zeros_like(host)
    result = ctx.call(buffer.to_host_buffer, dst, what="PJRT_Buffer_ToHostBuffer")
    ctx.await_event(result.event, "PJRT_Buffer_ToHostBuffer")
    check(np.array_equal(dst, host), f"the destination array holds {dst.tolist()}, expected {host.tolist()}")


@case("buffers")
def is_deleted(ctx: PluginUnderTest) -> None:
    """A new buffer is not deleted; after PJRT_Buffer_Delete it is, and deleting again is harmless."""
    _, buffer = _f32(ctx)
    check(buffer.is_deleted() is False, "PJRT_Buffer_IsDeleted is true for a buffer just created")
    buffer.delete()
    check(buffer.is_deleted() is True, "PJRT_Buffer_IsDeleted is false after PJRT_Buffer_Delete")
    buffer.delete()
    check(buffer.is_deleted() is True, "PJRT_Buffer_IsDeleted is false after a second PJRT_Buffer_Delete")


@case("buffers")
def use_after_delete(ctx: PluginUnderTest) -> None:
    """Reading a deleted buffer fails with a PJRT error; it never returns the old data."""
    _, buffer = _f32(ctx)
    buffer.delete()

    def read():
        result = buffer.to_host_buffer()
        result.event.await_(ctx.seconds(5.0))
        return result.array

    error = expect_error(lambda: ctx.call(read, what="PJRT_Buffer_ToHostBuffer of a deleted buffer"),
                         what="PJRT_Buffer_ToHostBuffer of a deleted buffer")
    check(error.code is not ErrorCode.OK, "the error of a deleted buffer has code OK")


@case("buffers")
def ready_event(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_ReadyEvent becomes ready, without an error."""
    _, buffer = _f32(ctx)
    event = buffer.ready_event()
    ctx.await_event(event, "PJRT_Buffer_ReadyEvent")
    error = event.error()
    check(error is None, f"the ready event of a good buffer carries an error: {error}")


@case("buffers")
def external_reference_count(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_IncreaseExternalReferenceCount then DecreaseExternalReferenceCount succeed."""
    _, buffer = _f32(ctx)
    buffer.increase_external_reference_count()
    buffer.increase_external_reference_count()
    buffer.decrease_external_reference_count()
    buffer.decrease_external_reference_count()


@case("buffers")
def decrease_reference_count_returns_error(ctx: PluginUnderTest) -> None:
    """Decreasing a zero external reference count fails: InvalidArgument "Attempting to decrease
    reference on a buffer with zero reference count."."""
    _, buffer = _f32(ctx)
    expect_error(buffer.decrease_external_reference_count, code=ErrorCode.INVALID_ARGUMENT,
                 message="Attempting to decrease reference on a buffer with zero reference count.",
                 what="PJRT_Buffer_DecreaseExternalReferenceCount at zero")


@case("buffers")
def opaque_device_memory_data_pointer(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_OpaqueDeviceMemoryDataPointer of a live buffer is a non-null address."""
    _, buffer = _f32(ctx)
    pointer = buffer.opaque_device_memory_data_pointer()
    check(isinstance(pointer, int) and pointer != 0, f"PJRT_Buffer_OpaqueDeviceMemoryDataPointer returned {pointer!r}")


@case("buffers", min_api_minor=68)
def create_uninitialized(ctx: PluginUnderTest) -> None:
    """PJRT_Client_CreateUninitializedBuffer makes a buffer of the asked type and dimensions."""
    buffer = ctx.call(ctx.client.create_uninitialized_buffer, (3, 5), BufferType.F32, device=ctx.device,
                      what="PJRT_Client_CreateUninitializedBuffer")
    check(buffer.element_type() == BufferType.F32 and tuple(buffer.dimensions()) == (3, 5),
          f"asked for F32[3,5], got {getattr(buffer.element_type(), 'name', '?')}{list(buffer.dimensions())}")


@case("buffers")
def donation(ctx: PluginUnderTest) -> None:
    """An input the program donates (tf.aliasing_output) is consumed by PJRT_LoadedExecutable_Execute:
    deleted afterwards, and the result is right."""
    executable = ctx.compile(donating_add_one())
    host, buffer = _f32(ctx, (1.0, 2.0, 3.0, 4.0))
    outputs = ctx.execute(executable, [[buffer]])
    result = ctx.fetch(outputs[0][0])
    check(np.array_equal(result, host + 1), f"x + 1 with x donated gave {result.tolist()}, expected {(host + 1).tolist()}")
    check(buffer.is_deleted(), "the donated input is not deleted after execution (PJRT_Buffer_IsDeleted is false)")


@case("buffers", min_api_minor=39)
def non_donatable_input(ctx: PluginUnderTest) -> None:
    """ExecuteOptions.non_donatable_input_indices keeps an input the program would donate."""
    executable = ctx.compile(donating_add_one())
    host, buffer = _f32(ctx, (1.0, 2.0, 3.0, 4.0))
    outputs = ctx.execute(executable, [[buffer]], ExecuteOptions(non_donatable_input_indices=(0,)))
    result = ctx.fetch(outputs[0][0])
    check(np.array_equal(result, host + 1), f"x + 1 gave {result.tolist()}, expected {(host + 1).tolist()}")
    check(not buffer.is_deleted(), "an input listed in non_donatable_input_indices was donated anyway")
    kept = ctx.fetch(buffer)
    check(np.array_equal(kept, host), f"the kept input changed to {kept.tolist()}, expected {host.tolist()}")


# -- transfers ---------------------------------------------------------------------------------


@case("transfers")
def copy_to_device(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_CopyToDevice puts an equal buffer on the other device and leaves the source alone."""
    first, second = ctx.need_devices(2)
    host = sample(BufferType.F32)
    source = ctx.put(host, device=first)
    copy = ctx.call(source.copy_to_device, second, what="PJRT_Buffer_CopyToDevice")
    check(device_id(copy.device()) == device_id(second),
          f"the copy is on device {device_id(copy.device())}, expected {device_id(second)}")
    check(np.array_equal(ctx.fetch(copy), host), "the copy holds other values than the source")
    check(np.array_equal(ctx.fetch(source), host), "the source changed when it was copied")


@case("transfers", min_api_minor=32)
def copy_to_memory(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_CopyToMemory into each memory of the device gives an equal buffer in that memory."""
    host = sample(BufferType.F32)
    source = ctx.put(host)
    for memory in ctx.device.addressable_memories():
        copy = ctx.call(source.copy_to_memory, memory, what=f"PJRT_Buffer_CopyToMemory({memory.kind()})")
        placed = copy.memory()
        check((placed.kind(), placed.id()) == (memory.kind(), memory.id()),
              f"a copy to memory {memory.kind()} {memory.id()} is in {placed.kind()} {placed.id()}")
        got = ctx.fetch(copy)
        check(np.array_equal(got, host), f"the copy in {memory.kind()} holds {got.tolist()}, expected {host.tolist()}")


@case("transfers")
def immutable_only_during_call(ctx: PluginUnderTest) -> None:
    """With kImmutableOnlyDuringCall the host array may change as soon as the call returns."""
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = host.copy()
    buffer = ctx.put(host, semantics=HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL, wait=False)
    host[...] = -1
    got = ctx.fetch(buffer)
    check(np.array_equal(got, expected), f"the buffer saw the host array change after the call: {got.tolist()}")


@case("transfers")
def immutable_until_transfer_completes(ctx: PluginUnderTest) -> None:
    """With kImmutableUntilTransferCompletes, done_with_host_buffer fires, after which the host
    array may change without changing the buffer."""
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = host.copy()
    buffer = ctx.put(host, semantics=HostBufferSemantics.IMMUTABLE_UNTIL_TRANSFER_COMPLETES)
    host[...] = -1
    got = ctx.fetch(buffer)
    check(np.array_equal(got, expected), f"the buffer changed with the host array after done_with_host_buffer: "
                                         f"{got.tolist()}")


# -- uninitialized buffers of every element type ------------------------------------------------

#: Bits per element of the types narrower than a byte (their on-device size may be packed).
_SUB_BYTE_BITS = {BufferType.S4: 4, BufferType.U4: 4, BufferType.S2: 2, BufferType.U2: 2,
                  BufferType.F4E2M1FN: 4, BufferType.S1: 1, BufferType.U1: 1}
#: Shapes an uninitialized buffer is asked for: a matrix, a scalar, and an empty array.
UNINITIALIZED_SHAPES: tuple[tuple[int, ...], ...] = ((2, 3), (), (0, 4))


def _uninitialized_case(kind: BufferType) -> Case:
    label = kind.name.lower()
    dtype = to_numpy_dtype(kind)

    def run(ctx: PluginUnderTest) -> None:
        for dims in UNINITIALIZED_SHAPES:
            what = f"PJRT_Client_CreateUninitializedBuffer({kind.name}{list(dims)})"
            try:
                buffer = ctx.call(ctx.client.create_uninitialized_buffer, dims, kind, device=ctx.device, what=what)
            except PjrtError as exc:
                if kind in REQUIRED_TYPES:
                    raise
                raise CaseSkipped(f"plugin {ctx.name} does not make {kind.name} buffers ({describe(exc)})") from None
            got_type = buffer.element_type()
            check(got_type == kind, f"{what} made a buffer of element type {getattr(got_type, 'name', got_type)}; "
                                    "PJRT promises the element type asked for")
            got_dims = tuple(buffer.dimensions())
            check(got_dims == dims, f"{what} made a buffer of dimensions {list(got_dims)}; PJRT promises the "
                                    "dimensions asked for (a scalar has none, an empty array keeps its zero)")
            count = int(np.prod(dims, dtype=np.int64))
            least = (count * _SUB_BYTE_BITS.get(kind, dtype.itemsize * 8) + 7) // 8
            size = buffer.on_device_size_in_bytes()
            check(isinstance(size, int) and size >= least,
                  f"{what}: PJRT_Buffer_OnDeviceSizeInBytes is {size!r}, less than the {least} bytes "
                  f"{count} {kind.name} elements take")
            try:
                back = ctx.fetch(buffer)
            except PjrtError as exc:
                if kind in REQUIRED_TYPES or exc.code is not ErrorCode.UNIMPLEMENTED:
                    raise
                raise CaseSkipped(f"{kind.name} buffers cannot be copied to host here ({describe(exc)})") from None
            check(back.dtype == dtype and back.shape == dims,
                  f"{what} came back to host as {back.dtype}{list(back.shape)}, expected {dtype}{list(dims)}: "
                  f"the buffer does not hold {kind.name} elements")

    return Case("buffers", f"uninitialized_{label}",
                f"PJRT_Client_CreateUninitializedBuffer of {kind.name}, as a matrix, a scalar and an empty array, "
                f"makes a buffer of that type and those dimensions that comes back to host as {kind.name}"
                + (" (required)." if kind in REQUIRED_TYPES else " (where the plugin makes the type)."),
                run, min_api_minor=max(68, TYPE_MINORS.get(kind, 0)))


for _kind in _types_with_numpy():
    add_case(_uninitialized_case(_kind))


# -- transfers: strides, independent copies, views, DLPack ---------------------------------------


def _strided_variants() -> list[tuple[str, np.ndarray | np.generic]]:
    base = np.arange(24, dtype=np.float32).reshape(4, 6) - 7.5
    wide = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    small = (np.arange(30) * 7 % 251).astype(np.uint8).reshape(5, 6)
    return [
        ("transposed f32[6,4]", base.T),
        ("Fortran-ordered f32[4,6]", np.asfortranarray(base)),
        ("every other column f32[4,3]", base[:, ::2]),
        ("rows reversed f32[4,6]", base[::-1]),
        ("both axes reversed, step -2 f32[4,3]", base[::-1, ::-2]),
        ("a broadcast row (stride 0) f32[3,6]", np.broadcast_to(base[1], (3, 6))),
        ("axes permuted f64[5,3,4]", wide.transpose(2, 0, 1)),
        ("a reversed, strided slice f64[3,2,5]", wide[:, ::-2, :]),
        ("transposed u8[6,5]", small.T),
        ("columns reversed u8[5,6]", small[:, ::-1]),
        ("a 0-d f32", np.array(3.25, np.float32)),
        ("a numpy scalar f32", np.float32(-1.5)),
        ("an empty f32[0,3]", np.zeros((6, 3), np.float32)[6:]),
        ("an empty s32[0]", np.zeros((0,), np.int32)),
        ("size-1 dims f32[1,3,1]", np.arange(3, dtype=np.float32).reshape(1, 3, 1)),
        ("big-endian f32[2,3]", np.arange(6, dtype=">f4").reshape(2, 3)),
        ("big-endian s64[2]", np.array([-(2 ** 40), 7], ">i8")),
        ("unaligned f32[5]", np.frombuffer(b"\0" + np.arange(5, dtype=np.float32).tobytes(), np.float32, 5, offset=1)),
    ]


@case("transfers")
def strided_host_arrays(ctx: PluginUnderTest) -> None:
    """Host arrays with any strides (transposed, sliced with steps, negative steps, broadcast,
    permuted), of any shape (0-d, a numpy scalar, empty, size-1 dims), big-endian or unaligned,
    arrive in logical order: the buffer holds what the array shows, in native byte order."""
    for label, host in _strided_variants():
        buffer = ctx.put(host)
        dims = tuple(buffer.dimensions())
        check(dims == host.shape, f"{label}: the buffer has dimensions {list(dims)}, the array {list(host.shape)}")
        back = ctx.fetch(buffer)
        expected = np.array(host, order="C", copy=True)  # np.ascontiguousarray makes a 0-d array 1-d
        check(back.shape == expected.shape and back.dtype == expected.dtype.newbyteorder("=")
              and np.array_equal(back, expected),
              # check() calls the message lambda at once, inside this iteration.
              lambda: f"{label} (strides {host.strides}) arrived as {back.tolist()}, expected {expected.tolist()}: "  # noqa: B023
                      "PJRT_Client_BufferFromHostBuffer reads the host array in its logical order, whatever its "
                      "strides (byte_strides), not in the order of its memory")


def _overwrite_by_donation(ctx: PluginUnderTest, buffer, executable) -> None:
    """Donate ``buffer`` to ``x + 1``: a plugin that reuses donated storage writes it in place."""
    outputs = ctx.execute(executable, [[buffer]])
    ctx.fetch(outputs[0][0])


@case("transfers", timeout=120.0)
def copy_to_device_is_independent(ctx: PluginUnderTest) -> None:
    """A copy made by PJRT_Buffer_CopyToDevice is a buffer of its own: it keeps its values when
    its source is donated (and its storage reused) or deleted, and the source when the copy is."""
    first, second = ctx.need_devices(2)
    host = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    donating = ctx.compile(donating_add_one())
    source = ctx.put(host, device=first)
    copy = ctx.call(source.copy_to_device, second, what="PJRT_Buffer_CopyToDevice")
    _overwrite_by_donation(ctx, source, donating)
    got = ctx.fetch(copy)
    check(np.array_equal(got, host), f"the copy on device {device_id(second)} changed to {got.tolist()} when its "
                                     f"source was donated to x + 1; PJRT promises a copy independent of its source")
    back = ctx.call(copy.copy_to_device, first, what="PJRT_Buffer_CopyToDevice (back)")
    copy.delete()
    check(not back.is_deleted(), "deleting a copy deleted the buffer it had been copied to")
    got = ctx.fetch(back)
    check(np.array_equal(got, host), f"a copy holds {got.tolist()} after the buffer it was copied from was deleted, "
                                     f"expected {host.tolist()}")


@case("transfers", min_api_minor=32, timeout=120.0)
def copy_to_memory_is_independent(ctx: PluginUnderTest) -> None:
    """A copy made by PJRT_Buffer_CopyToMemory, into any memory of the device (its own included),
    keeps its values when its source is donated (and its storage reused) or deleted."""
    host = np.array([5.0, 6.0, 7.0, 8.0], np.float32)
    donating = ctx.compile(donating_add_one())
    for memory in ctx.device.addressable_memories():
        source = ctx.put(host)
        copy = ctx.call(source.copy_to_memory, memory, what=f"PJRT_Buffer_CopyToMemory({memory.kind()})")
        _overwrite_by_donation(ctx, source, donating)
        got = ctx.fetch(copy)
        check(np.array_equal(got, host), f"the copy in memory {memory.kind()} changed to {got.tolist()} when its "
                                         "source was donated to x + 1; PJRT promises a copy independent of its source")
        again = ctx.put(host)
        copy = ctx.call(again.copy_to_memory, memory, what=f"PJRT_Buffer_CopyToMemory({memory.kind()})")
        again.delete()
        check(not copy.is_deleted(), f"deleting a buffer deleted its copy in memory {memory.kind()}")
        got = ctx.fetch(copy)
        check(np.array_equal(got, host), f"the copy in memory {memory.kind()} holds {got.tolist()} after its source "
                                         f"was deleted, expected {host.tolist()}")


def _wait_for(predicate: Callable[[], bool], seconds: float) -> bool:
    """Poll ``predicate`` until it holds (True) or ``seconds`` have passed (False)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


@case("transfers", min_api_minor=33)
def view_aliases_and_calls_its_deleter_once(ctx: PluginUnderTest) -> None:
    """PJRT_Client_CreateViewOfDeviceBuffer wraps memory without copying it: the view shows what
    the memory holds, later changes included, and its on_delete callback runs exactly once, after
    the view is deleted, never while it is alive."""
    # Aligned as XLA wants memory it views (it refuses an unaligned host array with INVALID_ARGUMENT).
    host = _aligned(np.arange(8, dtype=np.float32) * 2.5)
    calls: list[int] = []
    try:
        view = ctx.call(ctx.client.create_view_of_device_buffer, host, device=ctx.device,
                        on_delete=lambda: calls.append(1), what="PJRT_Client_CreateViewOfDeviceBuffer")
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            raise CaseSkipped(f"plugin {ctx.name} does not make views of external memory ({describe(exc)})") from None
        raise
    got = ctx.fetch(view)
    check(np.array_equal(got, host), f"the view holds {got.tolist()}, its memory {host.tolist()}")
    host[0] = -1.0
    got = ctx.fetch(view)
    check(got[0] == -1.0, f"after the viewed memory changed to {host.tolist()}, the view still shows {got.tolist()}: "
                          "PJRT_Client_CreateViewOfDeviceBuffer makes a view of the memory, not a copy")
    check(not calls, f"on_delete ran {len(calls)} time(s) while the view was alive")
    view.delete()
    check(view.is_deleted(), "PJRT_Buffer_IsDeleted is false for a deleted view")
    ran = _wait_for(lambda: bool(calls), ctx.seconds(CALL_TIMEOUT))
    check(ran, f"on_delete did not run within {ctx.seconds(CALL_TIMEOUT):g} s of deleting the view")
    view.destroy()
    del view
    gc.collect()
    time.sleep(0.05)
    check(len(calls) == 1, f"on_delete ran {len(calls)} times; PJRT calls it exactly once, when the view no "
                           "longer uses the memory")


@case("transfers", timeout=120.0)
def dlpack_export_aliases(ctx: PluginUnderTest) -> None:
    """A buffer exported through DLPack shares its memory with the consumer (no copy, for a buffer
    in host memory), and the consumer's hold ends when the consumer is gone."""
    host = np.array([3.0, 1.0, 4.0, 1.5], np.float32)
    buffer = ctx.put(host)
    target = getattr(buffer, "unwrapped", buffer)
    if not hasattr(target, "__dlpack__"):
        raise CaseSkipped(f"buffers of plugin {ctx.name} are not DLPack producers (no __dlpack__)")
    consumer = np.from_dlpack(buffer)
    check(np.array_equal(consumer, host), f"the DLPack consumer sees {consumer.tolist()}, the buffer holds "
                                          f"{host.tolist()}")
    if buffer.is_on_cpu():
        pointer = buffer.unsafe_pointer()
        check(consumer.ctypes.data == pointer,
              f"the DLPack consumer's data is at {consumer.ctypes.data:#x}, the buffer's at {pointer:#x}: the "
              "export copied a buffer that lives in host memory; DLPack shares it")
    executable = ctx.compile(donating_add_one())
    del consumer
    gc.collect()
    outputs = ctx.execute(executable, [[buffer]])
    got = ctx.fetch(outputs[0][0])
    check(np.array_equal(got, host + 1), f"x + 1 after the DLPack consumer was gone gave {got.tolist()}")
    check(buffer.is_deleted(), "a buffer whose DLPack consumer is gone was not donated: the consumer's external "
                               "reference was not released")


def _aligned(values: np.ndarray, alignment: int = 64) -> np.ndarray:
    """A copy of ``values`` whose data starts at a multiple of ``alignment`` bytes (what XLA needs
    to alias a host array rather than copy it)."""
    raw = np.zeros(values.nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    out = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


@case("transfers", min_api_minor=48)
def zero_copy_holds_the_host_array(ctx: PluginUnderTest) -> None:
    """With kImmutableZeroCopy and kMutableZeroCopy the plugin may alias the host array: once
    done_with_host_buffer fires the array is the caller's again (changing it leaves the buffer
    as it was); if it has not fired, it fires when the buffer is deleted."""
    for semantics in (HostBufferSemantics.IMMUTABLE_ZERO_COPY, HostBufferSemantics.MUTABLE_ZERO_COPY):
        host = _aligned(np.arange(64, dtype=np.float32) * 0.5)
        expected = host.copy()
        transfer = ctx.call(ctx.client.buffer_from_host_buffer, host, device=ctx.device, semantics=semantics,
                            what=f"PJRT_Client_BufferFromHostBuffer ({semantics.name})")
        buffer, transfer_done = transfer.buffer, transfer.done_with_host_buffer
        if _wait_for(transfer_done.is_ready, 0.05):
            host[...] = -1.0
            got = ctx.fetch(buffer)
            check(np.array_equal(got, expected),
                  f"{semantics.name}: done_with_host_buffer had fired, yet the buffer changed to {got[:4].tolist()}... "
                  "when the host array did: the plugin still used the array it said it was done with")
            continue
        got = ctx.fetch(buffer)
        check(np.array_equal(got, expected), f"{semantics.name}: the buffer holds {got[:4].tolist()}..., the host "
                                             f"array {expected[:4].tolist()}...")
        buffer.delete()
        check(_wait_for(transfer_done.is_ready, ctx.seconds(CALL_TIMEOUT)),
              f"{semantics.name}: the buffer that aliases the host array was deleted, but done_with_host_buffer did "
              f"not fire within {ctx.seconds(CALL_TIMEOUT):g} s: the host array is never given back")
