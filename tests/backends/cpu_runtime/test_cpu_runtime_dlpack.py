"""DLPack export and import, views of foreign memory, and external references."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_runtime_minihlo import add_module

from pjrt_hub.abi import FailedPrecondition, InvalidArgument


def test_from_dlpack_takes_the_buffer_without_a_copy(put):
    buffer = put(np.arange(6, dtype=np.float32).reshape(2, 3))
    view = np.from_dlpack(buffer)
    assert view.__array_interface__["data"][0] == buffer.unsafe_pointer()
    np.testing.assert_array_equal(view, [[0, 1, 2], [3, 4, 5]])
    # Buffers are immutable; DLPack 1.0 consumers are told so.
    assert not view.flags.writeable
    assert buffer.__dlpack_device__() == (1, 0)


def test_a_live_consumer_blocks_delete_and_releases_when_gone(put):
    buffer = put(np.arange(4, dtype=np.int32))
    view = np.from_dlpack(buffer)
    with pytest.raises(FailedPrecondition, match=r"s32\[4\] buffer on cpu:0 has 1 external reference"):
        buffer.delete()
    assert not buffer.is_deleted()
    second = np.from_dlpack(buffer)
    with pytest.raises(FailedPrecondition, match="has 2 external reference"):
        buffer.delete()
    del view, second
    buffer.delete()
    assert buffer.is_deleted()


def test_copy_true_exports_a_copy_and_holds_nothing(put):
    buffer = put(np.arange(4, dtype=np.int32))
    copied = np.from_dlpack(buffer, copy=True)
    assert not np.shares_memory(copied, np.from_dlpack(buffer))
    buffer.delete()  # no external reference is held for a copy
    np.testing.assert_array_equal(copied, [0, 1, 2, 3])


def test_legacy_consumers_get_a_capsule(put):
    buffer = put(np.arange(3, dtype=np.float64))
    capsule = buffer.__dlpack__()
    assert type(capsule).__name__ == "PyCapsule"
    with pytest.raises(FailedPrecondition, match="external reference"):
        buffer.delete()
    del capsule  # an unconsumed capsule gives its reference back too
    buffer.delete()


def test_dlpack_arguments_are_checked(put):
    buffer = put(np.zeros(2))
    with pytest.raises(BufferError, match="no streams"):
        buffer.__dlpack__(stream=5)
    with pytest.raises(BufferError, match=r"lives on the CPU \(kDLCPU, 0\), not on \(2, 0\)"):
        buffer.__dlpack__(dl_device=(2, 0))


def test_external_reference_count(put):
    buffer = put(np.zeros(2))
    buffer.increase_external_reference_count()
    buffer.increase_external_reference_count()
    buffer.decrease_external_reference_count()
    with pytest.raises(FailedPrecondition, match="external reference"):
        buffer.delete()
    buffer.decrease_external_reference_count()
    with pytest.raises(InvalidArgument) as info:
        buffer.decrease_external_reference_count()
    assert info.value.message == "Attempting to decrease reference on a buffer with zero reference count."
    buffer.delete()


def test_external_reference_blocks_donation(client, put, compile_text):
    executable = compile_text(add_module(alias=True))
    a, b = put(np.ones(4, np.float32)), put(np.ones(4, np.float32))
    a.increase_external_reference_count()
    with pytest.raises(FailedPrecondition, match="Donation requested for buffer with external reference: argument 0"):
        executable.execute([[a, b]])
    assert not a.is_deleted() and not b.is_deleted()
    a.decrease_external_reference_count()
    executable.execute([[a, b]])
    assert a.is_deleted()


def test_view_of_a_dlpack_producer_without_a_copy(client):
    producer = np.arange(12, dtype=np.float32).reshape(3, 4)
    deleted = []
    view = client.create_view_of_device_buffer(producer, device=client.devices()[1],
                                               on_delete=lambda: deleted.append(True))
    assert view.device() is client.devices()[1]
    assert view.dimensions() == (3, 4)
    assert view.unsafe_pointer() == producer.__array_interface__["data"][0]
    producer[0, 0] = 42  # a view sees the producer's memory
    assert view.to_host_buffer().array[0, 0] == 42
    # The runtime allocated nothing.
    assert client.devices()[1].memory_stats().bytes_in_use == 0
    assert deleted == []
    view.delete()
    assert deleted == [True]
    view.destroy()
    assert deleted == [True]  # exactly once


def test_view_on_delete_runs_when_the_view_is_collected(client):
    deleted = []
    view = client.create_view_of_device_buffer(np.zeros(3), on_delete=lambda: deleted.append(1))
    del view
    assert deleted == [1]


def test_view_of_a_buffer_of_another_client(api, put):
    other = api.client_create({"num_devices": 1})
    source = put(np.arange(5, dtype=np.int64))
    view = other.create_view_of_device_buffer(source)
    assert view.unsafe_pointer() == source.unsafe_pointer()
    with pytest.raises(FailedPrecondition, match="external reference"):
        source.delete()  # the view is a live DLPack consumer of the source
    del view
    source.delete()


def test_view_rejects_what_it_cannot_wrap(client):
    with pytest.raises(InvalidArgument, match="list is not a DLPack producer"):
        client.create_view_of_device_buffer([1, 2])
    with pytest.raises(InvalidArgument, match="needs dense row-major storage"):
        client.create_view_of_device_buffer(np.arange(8.0)[::2])
    with pytest.raises(InvalidArgument, match="on_delete must be callable"):
        client.create_view_of_device_buffer(np.zeros(2), on_delete="no")

    class NotOnCpu:
        def __dlpack__(self, **kwargs):
            raise BufferError("device memory is not accessible")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(InvalidArgument, match="cannot view the NotOnCpu"):
        client.create_view_of_device_buffer(NotOnCpu())


@pytest.mark.parametrize("host", [
    np.array(2.5, np.float32), np.zeros((0, 3), np.float32), np.zeros((0,), np.int32),
    np.arange(3, dtype=np.int64).reshape(1, 3, 1), np.arange(12, dtype=np.float64).reshape(3, 4)[::-1, ::2],
    np.arange(4, dtype=">i4"), np.array([1 + 2j], np.complex64), np.array([True, False]),
], ids=["0-d", "zero-size", "zero-size-1d", "size-1-dims", "strided", "big-endian", "complex", "bool"])
def test_every_shape_goes_out_through_dlpack(put, host):
    buffer = put(host)
    view = np.from_dlpack(buffer)
    assert view.shape == host.shape and view.dtype == host.dtype.newbyteorder("=")
    np.testing.assert_array_equal(view, host)
    del view
    buffer.delete()


def test_a_type_numpys_dlpack_lacks_is_refused_with_a_clear_error(put):
    import ml_dtypes

    buffer = put(np.array([1.5, 2], ml_dtypes.bfloat16))
    with pytest.raises(BufferError, match=r"bf16\[2\] buffer .* cannot be exported through DLPack: numpy's "
                                          r"DLPack has no bfloat16 type; copy it with to_host_buffer\(\)"):
        np.from_dlpack(buffer)
    assert not buffer.is_deleted()
    buffer.delete()  # no external reference was left behind
