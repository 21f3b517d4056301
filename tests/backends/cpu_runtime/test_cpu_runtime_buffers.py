"""Buffers of the host runtime: transfers, host-buffer semantics, copies, life cycle, accounting."""

from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.abi import BufferType, FailedPrecondition, HostBufferSemantics, InvalidArgument, to_numpy_dtype
from pjrt_hub.backends.cpu_runtime import READY

S = HostBufferSemantics

ELEMENT_TYPES = [
    BufferType.PRED, BufferType.S8, BufferType.S16, BufferType.S32, BufferType.S64,
    BufferType.U8, BufferType.U16, BufferType.U32, BufferType.U64, BufferType.F16,
    BufferType.BF16, BufferType.F32, BufferType.F64, BufferType.C64, BufferType.C128,
    BufferType.F8E5M2, BufferType.F8E4M3FN, BufferType.S4, BufferType.U4,
]


def _sample(kind: BufferType) -> np.ndarray:
    dtype = to_numpy_dtype(kind)
    if kind == BufferType.PRED:
        return np.array([[True, False, True], [False, False, True]])
    if kind in (BufferType.C64, BufferType.C128):
        return (np.arange(6).reshape(2, 3) + 1j * np.arange(6).reshape(2, 3)).astype(dtype)
    return np.arange(6).reshape(2, 3).astype(dtype)


@pytest.mark.parametrize("kind", ELEMENT_TYPES, ids=lambda k: k.name)
def test_round_trip_of_every_element_type(client, kind):
    host = _sample(kind)
    transfer = client.buffer_from_host_buffer(host, element_type=kind)
    buffer = transfer.buffer
    transfer.done_with_host_buffer.await_()
    assert buffer.element_type() == kind
    assert buffer.dimensions() == (2, 3)
    assert buffer.unpadded_dimensions() == (2, 3)
    assert buffer.dynamic_dimension_indices() == ()
    assert buffer.on_device_size_in_bytes() == host.nbytes
    back = buffer.to_host_buffer()
    back.event.await_()
    assert back.array.dtype == host.dtype
    np.testing.assert_array_equal(back.array.view(np.uint8), host.view(np.uint8))


def test_copy_semantics_copy_during_the_call(client):
    for semantics in (S.IMMUTABLE_ONLY_DURING_CALL, S.IMMUTABLE_UNTIL_TRANSFER_COMPLETES):
        host = np.arange(8, dtype=np.float32)
        transfer = client.buffer_from_host_buffer(host, semantics=semantics)
        # The transfer is complete when the call returns: the host array is free at once.
        assert transfer.done_with_host_buffer.is_ready()
        transfer.done_with_host_buffer.await_()
        host[:] = -1
        np.testing.assert_array_equal(transfer.buffer.to_host_buffer().array, np.arange(8, dtype=np.float32))
        assert not np.shares_memory(host, transfer.buffer.to_host_buffer().array)


@pytest.mark.parametrize("semantics", [S.IMMUTABLE_ZERO_COPY, S.MUTABLE_ZERO_COPY])
def test_zero_copy_aliases_a_contiguous_aligned_array(client, semantics):
    host = np.arange(16, dtype=np.float32)
    transfer = client.buffer_from_host_buffer(host, semantics=semantics)
    buffer = transfer.buffer
    pointer = host.__array_interface__["data"][0]
    assert buffer.unsafe_pointer() == pointer
    assert buffer.opaque_device_memory_data_pointer() == pointer
    assert np.shares_memory(np.from_dlpack(buffer), host)
    # The runtime reads the host array until the buffer goes away, and says so then.
    assert not transfer.done_with_host_buffer.is_ready()
    with pytest.raises(Exception, match="not ready"):
        transfer.done_with_host_buffer.await_(timeout=0.01)
    gc.collect()  # the DLPack consumer above is gone: its external reference with it
    buffer.delete()
    assert transfer.done_with_host_buffer.is_ready()
    transfer.done_with_host_buffer.await_()


def test_zero_copy_done_event_fires_when_the_buffer_is_collected(client):
    host = np.ones(4, dtype=np.float64)
    transfer = client.buffer_from_host_buffer(host, semantics=S.IMMUTABLE_ZERO_COPY)
    done = transfer.done_with_host_buffer
    del transfer
    assert done.is_ready()  # the HostTransfer held the only reference to the buffer


def test_zero_copy_falls_back_to_a_copy_for_strided_or_misaligned_arrays(client):
    strided = np.arange(16, dtype=np.float32)[::2]
    transfer = client.buffer_from_host_buffer(strided, semantics=S.IMMUTABLE_ZERO_COPY)
    assert transfer.done_with_host_buffer.is_ready()
    assert not np.shares_memory(np.from_dlpack(transfer.buffer), strided)
    np.testing.assert_array_equal(transfer.buffer.to_host_buffer().array, strided)

    raw = np.zeros(4 * 8 + 1, dtype=np.uint8)
    misaligned = raw[1:].view(np.float64)  # address 1 mod 8: not naturally aligned
    assert not misaligned.flags.aligned
    transfer = client.buffer_from_host_buffer(misaligned, semantics=S.MUTABLE_ZERO_COPY)
    assert transfer.done_with_host_buffer.is_ready()
    assert transfer.buffer.unsafe_pointer() != misaligned.__array_interface__["data"][0]


def test_non_native_byte_order_is_converted(client):
    big = np.arange(3, dtype=">i4")
    buffer = client.buffer_from_host_buffer(big).buffer
    assert buffer.element_type() == BufferType.S32
    np.testing.assert_array_equal(buffer.to_host_buffer().array, [0, 1, 2])


def test_element_type_must_match_the_dtype(client):
    with pytest.raises(InvalidArgument, match=r"element_type F32 does not match the host array's dtype int32 \(S32\)"):
        client.buffer_from_host_buffer(np.arange(3, dtype=np.int32), element_type=BufferType.F32)
    with pytest.raises(InvalidArgument, match="unknown element_type 999"):
        client.buffer_from_host_buffer(np.arange(3, dtype=np.int32), element_type=999)


def test_unsupported_dtypes_and_semantics_are_refused(client):
    with pytest.raises(InvalidArgument, match="numpy dtype <U1 has no PJRT element type"):
        client.buffer_from_host_buffer(np.array(["a"]))
    with pytest.raises(InvalidArgument, match="unknown host buffer semantics 7"):
        client.buffer_from_host_buffer(np.zeros(2), semantics=7)


def test_placement_on_devices_and_memories(client):
    device = client.devices()[2]
    pinned = device.addressable_memories()[1]
    on_device = client.buffer_from_host_buffer(np.zeros(2), device=device).buffer
    assert on_device.device() is device and on_device.memory() is device.default_memory()
    in_pinned = client.buffer_from_host_buffer(np.zeros(2), memory=pinned).buffer
    assert in_pinned.device() is device and in_pinned.memory() is pinned
    with pytest.raises(InvalidArgument, match="belongs to cpu:2, not to the requested device"):
        client.buffer_from_host_buffer(np.zeros(2), device=client.devices()[0], memory=pinned)


def test_buffers_of_another_client_are_refused(api, client):
    other = api.client_create({"num_devices": 1})
    with pytest.raises(InvalidArgument, match="is not a device of this client"):
        client.buffer_from_host_buffer(np.zeros(2), device=other.devices()[0])
    with pytest.raises(InvalidArgument, match="is not a memory of this client"):
        client.buffer_from_host_buffer(np.zeros(2), memory=other.devices()[0].default_memory())


def test_to_host_into_the_callers_array(client, put):
    buffer = put(np.arange(6, dtype=np.int16).reshape(2, 3))
    dst = np.zeros((2, 3), np.int16)
    result = buffer.to_host_buffer(dst)
    assert result.array is dst
    result.event.await_()
    np.testing.assert_array_equal(dst, [[0, 1, 2], [3, 4, 5]])
    # Non-contiguous destinations work too.
    wide = np.zeros((2, 6), np.int16)
    buffer.to_host_buffer(wide[:, ::2])
    np.testing.assert_array_equal(wide[:, ::2], dst)


@pytest.mark.parametrize(("dst", "message"), [
    (np.zeros((3, 2), np.int16), r"destination is s16\[3,2\] \(int16\) but the s16\[2,3\] buffer on cpu:0 is s16\[2,3\]"),
    (np.zeros((2, 3), np.int32), r"destination is s32\[2,3\] \(int32\) but the .* is s16\[2,3\] \(int16\)"),
    ([0, 0], "must be a numpy array, got list"),
])
def test_to_host_destination_mismatch_names_both(put, dst, message):
    buffer = put(np.arange(6, dtype=np.int16).reshape(2, 3))
    with pytest.raises(InvalidArgument, match=message):
        buffer.to_host_buffer(dst)


def test_to_host_into_a_read_only_array_is_refused(put):
    dst = np.zeros(3)
    dst.flags.writeable = False
    with pytest.raises(InvalidArgument, match="read-only"):
        put(np.ones(3)).to_host_buffer(dst)


def test_copy_to_device_and_memory(client, put):
    source = put(np.arange(4, dtype=np.float32))
    target = client.devices()[3]
    copy = source.copy_to_device(target)
    assert copy.device() is target and copy.memory() is target.default_memory()
    np.testing.assert_array_equal(copy.to_host_buffer().array, np.arange(4))
    assert copy.unsafe_pointer() != source.unsafe_pointer()
    host_memory = target.addressable_memories()[2]
    moved = copy.copy_to_memory(host_memory)
    assert moved.memory() is host_memory and moved.memory().kind() == "unpinned_host"
    np.testing.assert_array_equal(moved.to_host_buffer().array, np.arange(4))
    with pytest.raises(InvalidArgument, match="is not a device of a pjrt-hub CPU client"):
        source.copy_to_device("cpu:1")
    with pytest.raises(InvalidArgument, match="is not a memory of a pjrt-hub CPU client"):
        source.copy_to_memory(target)


def test_copy_to_a_device_of_another_client(api, put):
    other = api.client_create({"num_devices": 2})
    copy = put(np.arange(3.0)).copy_to_device(other.devices()[1])
    assert copy.device() is other.devices()[1]
    assert other.devices()[1].memory_stats().bytes_in_use == 24
    np.testing.assert_array_equal(copy.to_host_buffer().array, np.arange(3.0))


def test_delete_and_use_after_delete(put):
    buffer = put(np.ones((2, 2), np.float32))
    assert not buffer.is_deleted()
    buffer.delete()
    assert buffer.is_deleted()
    buffer.delete()  # deleting twice is harmless, as in PJRT
    calls = {
        "PJRT_Buffer_ToHostBuffer": buffer.to_host_buffer,
        "PJRT_Buffer_CopyToDevice": lambda: buffer.copy_to_device(buffer.device()),
        "PJRT_Buffer_UnsafePointer": buffer.unsafe_pointer,
        "PJRT_Buffer_IncreaseExternalReferenceCount": buffer.increase_external_reference_count,
        "__dlpack__": lambda: np.from_dlpack(buffer),
    }
    for action, call in calls.items():
        with pytest.raises(FailedPrecondition, match=rf"{action}: the f32\[2,2\] buffer on cpu:0 was deleted"):
            call()
    event = buffer.ready_event()
    assert event.is_ready()
    with pytest.raises(FailedPrecondition, match="was deleted"):
        event.await_()
    # Metadata stays readable, as in PJRT.
    assert buffer.dimensions() == (2, 2) and buffer.on_device_size_in_bytes() == 16


def test_ready_event_of_a_host_transfer(put):
    event = put(np.ones(3)).ready_event()
    assert event is READY and event.is_ready() and event.error() is None


def test_uninitialized_buffer(client):
    buffer = client.create_uninitialized_buffer((3, 5), BufferType.BF16, device=client.devices()[1])
    assert buffer.dimensions() == (3, 5)
    assert buffer.element_type() == BufferType.BF16
    assert buffer.to_host_buffer().array.dtype == np.dtype(ml_dtypes.bfloat16)
    assert client.devices()[1].memory_stats().bytes_in_use == 30
    with pytest.raises(InvalidArgument, match="dimensions must be non-negative ints"):
        client.create_uninitialized_buffer((3, -1), BufferType.F32)
    with pytest.raises(InvalidArgument, match="PJRT element type TOKEN has no numpy dtype"):
        client.create_uninitialized_buffer((1,), BufferType.TOKEN)


def test_memory_stats_follow_allocations_and_frees(client):
    device = client.devices()[1]
    pinned = device.addressable_memories()[1]
    assert device.memory_stats().bytes_in_use == 0
    a = client.buffer_from_host_buffer(np.zeros(100, np.float32), device=device).buffer
    b = client.buffer_from_host_buffer(np.zeros(50, np.float64), memory=pinned).buffer
    stats = device.memory_stats()
    assert (stats.bytes_in_use, stats.peak_bytes_in_use, stats.num_allocs, stats.largest_alloc_size) == (800, 800, 2, 400)
    assert device.default_memory().stats().bytes_in_use == 400
    assert pinned.stats().bytes_in_use == 400
    a.delete()
    assert device.memory_stats().bytes_in_use == 400
    assert device.default_memory().stats().bytes_in_use == 0
    del b  # collected: freed
    stats = device.memory_stats()
    assert (stats.bytes_in_use, stats.peak_bytes_in_use) == (0, 800)
    # Zero-copy buffers alias memory the runtime did not allocate: nothing is counted.
    host = np.zeros(1000, np.float32)
    c = client.buffer_from_host_buffer(host, device=device, semantics=S.IMMUTABLE_ZERO_COPY).buffer
    assert device.memory_stats().bytes_in_use == 0
    c.delete()
    # Another device is untouched.
    assert client.devices()[0].memory_stats().num_allocs == 0


def test_repr_says_the_state(put):
    buffer = put(np.zeros(2, np.float32))
    assert repr(buffer) == "<CpuBuffer f32[2] buffer on cpu:0>"
    buffer.delete()
    assert repr(buffer) == "<CpuBuffer f32[2] buffer on cpu:0 (deleted)>"


def test_a_host_copy_that_does_not_fit_in_memory_is_resource_exhausted(tmp_path):
    """Not numpy's MemoryError: PJRT's RESOURCE_EXHAUSTED, naming the buffer. The process's
    address space is capped so that the buffer fits once but not twice."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import resource
        import numpy as np
        from pjrt_hub.abi import ResourceExhausted
        from pjrt_hub.backends.cpu_runtime import CpuApi
        from pjrt_hub.backends.reference.compiler import ReferenceCompiler

        client = CpuApi(ReferenceCompiler()).client_create({"num_devices": 1})
        n = 64 << 20  # 256 MB of float32
        buffer = client.buffer_from_host_buffer(np.ones(n, np.float32)).buffer
        with open("/proc/self/status") as fh:
            vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20), vm + (64 << 20)))
        for action in ("to_host", "from_host"):
            try:
                if action == "to_host":
                    buffer.to_host_buffer()
                else:
                    client.buffer_from_host_buffer(np.broadcast_to(np.float32(1), (n,)))
            except ResourceExhausted as exc:
                print(action, "ResourceExhausted:", exc)
            except MemoryError:
                print(action, "MemoryError")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("to_host ResourceExhausted: RESOURCE_EXHAUSTED: PJRT_Buffer_ToHostBuffer: "
                               "cannot allocate 268435456 bytes of host memory for a copy of the f32[67108864] buffer"), lines
    assert lines[1].startswith("from_host ResourceExhausted: RESOURCE_EXHAUSTED: PJRT_Client_BufferFromHostBuffer: "
                               "cannot allocate"), lines
