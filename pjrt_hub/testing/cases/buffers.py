"""buffers and transfers: ``PJRT_Buffer_*`` and ``PJRT_Client_BufferFromHostBuffer``
(upstream's PjrtCApiBufferTest: IsDeleted, GetOnDeviceSizeInBytes, ReadyEvent,
ToHostBufferNoHostLayout, IncreaseAndDecreaseReferenceCount, DecreaseReferenceCountReturnsError,
OpaqueDeviceMemoryDataPointer; BufferTransferImmutableUntilTransferCompletes)."""

from __future__ import annotations

import numpy as np

from pjrt_hub.abi import (BufferType, ErrorCode, ExecuteOptions, HostBufferSemantics, InvalidArgument, PjrtError,
                          to_numpy_dtype)

from .._case import Case, CaseSkipped, add_case, case, check, expect_error
from .._context import PluginUnderTest, describe
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


#: Host arrays of every shape and memory order a user hands over: (label, array).
def _host_arrays() -> list[tuple[str, np.ndarray]]:
    grid = np.arange(24, dtype=np.float32).reshape(4, 6)
    unaligned = np.frombuffer(b"\0" + np.arange(5, dtype=np.float32).tobytes(), np.float32, 5, offset=1)
    return [
        ("0-d", np.array(2.5, np.float32)),
        ("numpy scalar", np.float32(-1.5)),
        ("zero-size f32[0,3]", np.zeros((0, 3), np.float32)),
        ("zero-size s32[0]", np.zeros((0,), np.int32)),
        ("size-1 dims f32[1,3,1]", np.arange(3, dtype=np.float32).reshape(1, 3, 1)),
        ("strided view", grid[::2, 1::2]),
        ("negatively strided view", grid[::-1, ::-2]),
        ("transposed view", grid.T),
        ("big-endian", np.arange(6, dtype=">f4").reshape(2, 3)),
        ("big-endian s64", np.array([-(2 ** 40), 7], ">i8")),
        ("unaligned", unaligned),
    ]


@case("buffers")
def host_array_shapes(ctx: PluginUnderTest) -> None:
    """0-d, zero-size, size-1, strided, negatively strided, transposed, big-endian and unaligned host
    arrays become buffers of their own shape and come back with their values (in native order)."""
    for label, host in _host_arrays():
        buffer = ctx.put(host)
        dims = tuple(buffer.dimensions())
        check(dims == host.shape, f"a {label} array of shape {list(np.shape(host))} became a buffer of "
                                  f"dimensions {list(dims)}")
        back = ctx.fetch(buffer)
        check(back.shape == np.shape(host) and back.dtype == host.dtype.newbyteorder("="),
              f"a {label} array came back as {back.dtype}{list(back.shape)}")
        check(np.array_equal(back, host), lambda: f"a {label} array changed on the round trip: sent "
                                                  f"{np.asarray(host).tolist()}, got {back.tolist()}")
