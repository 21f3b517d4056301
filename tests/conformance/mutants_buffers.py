"""Mutant plugins for the cases read from pjrt_c_api.h's buffers functions (cases/contract_buffers.py).

Each is the toy or the reference plugin with one defect a vendor could ship in buffers and
transfers: right values in the wrong memory or layout (or on a device that does not address the
memory), the element type asked for ignored, storage shared where the header promises a new
buffer or the caller's own array, a lifetime cut short or stretched (a DLPack export that holds
nothing), a memory count that loses updates, an error lost on the way to a copy. The regression
mutants at the end are the held-out plugins the suite once missed, rebuilt with these helpers. Built with the factories of tests/conformance/mutants.py, whose ``BASES`` they
share; ``tests/conformance/test_mutation_buffers.py`` runs them and the controls, and
``pjrt-hub conformance --mutation-report tests/conformance/mutants_buffers.py`` prints the score.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pjrt_hub.abi import (BufferType, FailedPrecondition, HostBufferSemantics, HostTransfer, PjrtError, ToHost,
                          to_numpy_dtype)
from pjrt_hub.testing._mutation import Mutant
from pjrt_hub.testing.toy import ToyBuffer, ToyClient, ToyEvent

if __package__:
    from .mutants import BASES, _runtime, reference, toy
else:  # loaded as a plain file by --mutation-report: its sibling catalogue the same way
    _spec = importlib.util.spec_from_file_location("pjrt_hub_mutants_catalogue", Path(__file__).with_name("mutants.py"))
    assert _spec is not None and _spec.loader is not None
    _catalogue = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _catalogue
    _spec.loader.exec_module(_catalogue)
    BASES, _runtime, reference, toy = _catalogue.BASES, _catalogue._runtime, _catalogue.reference, _catalogue.toy

__all__ = ["BASES", "MUTANTS"]


# -- where a buffer lives ----------------------------------------------------------------------------


def _place_ignoring_memory(self: ToyClient, device: Any, memory: Any) -> Any:
    """The memory argument is read only to find a device; the buffer goes to its default memory."""
    if memory is not None:
        target = device if device is not None else memory.devices[0]
        return target, target.memories[0]
    return ToyClient._place(self, device, None)


def _column_major(self: ToyClient, array: Any, **kwargs: Any) -> HostTransfer:
    """A device that prefers column-major storage, used without a device_layout being asked for."""
    transfer = ToyClient.buffer_from_host_buffer(self, array, **kwargs)
    buffer = transfer.buffer
    buffer.array = np.asfortranarray(buffer.array)
    return transfer


# -- what a buffer shares ----------------------------------------------------------------------------


def _cached_by_host_pointer(self: ToyClient, array: Any, **kwargs: Any) -> HostTransfer:
    """Transfers deduplicated by the host array's address: the same array gives the same buffer."""
    host = np.asarray(array)
    key = (host.__array_interface__["data"][0], host.shape, host.dtype.str)
    cache = self.__dict__.setdefault("_by_host_pointer", {})
    hit = cache.get(key)
    if hit is not None and not hit.is_deleted():
        return HostTransfer(hit, ToyEvent())
    transfer = ToyClient.buffer_from_host_buffer(self, array, **kwargs)
    cache[key] = transfer.buffer
    return transfer


def _immutable_zero_copy_is_mutable() -> Callable[..., Any]:
    """kImmutableZeroCopy handled as kMutableZeroCopy: the aliased host array may take a donated output."""
    original = _runtime().CpuClient.buffer_from_host_buffer

    def buffer_from_host_buffer(self: Any, array: Any, **kwargs: Any) -> Any:
        transfer = original(self, array, **kwargs)
        if kwargs.get("semantics") == HostBufferSemantics.IMMUTABLE_ZERO_COPY:
            transfer.buffer._mutable = True
        return transfer

    return buffer_from_host_buffer


def _to_host_returns_the_storage(self: ToyBuffer, dst: np.ndarray | None = None) -> ToHost:
    """A copy to host that hands out the buffer's own array when the caller gives no destination."""
    if dst is None:
        return ToHost(self._live("PJRT_Buffer_ToHostBuffer"), ToyEvent())
    return ToyBuffer.to_host_buffer(self, dst)


# -- copies ------------------------------------------------------------------------------------------


def _copy_to_own_device_is_itself(self: ToyBuffer, device: Any) -> Any:
    """A copy to the buffer's own device short-cut to the buffer itself."""
    if device is self._device:
        return self
    return ToyBuffer.copy_to_device(self, device)


def _copy_stores_pred_as_u8(self: ToyBuffer, memory: Any) -> Any:
    """Copies into another memory keep booleans as bytes (a memory without a PRED type)."""
    copy = ToyBuffer.copy_to_memory(self, memory)
    if copy._type is BufferType.PRED:
        copy.array = copy.array.astype(np.uint8)
        copy._type = BufferType.U8
    return copy


# -- how long a buffer lives -------------------------------------------------------------------------


def _destroy_frees_only_the_handle(self: ToyBuffer) -> None:
    """PJRT_Buffer_Destroy drops the handle and leaves the memory to a delete that never comes."""


def _copy_of_deleted_is_zeros(self: ToyBuffer, memory: Any) -> Any:
    """CopyToMemory checks nothing: a buffer without data is copied as zeros."""
    if self.array is None:
        return type(self)(np.zeros(self._shape, _dtype(self)), self._type, self._device, memory)
    return ToyBuffer.copy_to_memory(self, memory)


def _dtype(buffer: ToyBuffer) -> np.dtype:
    return to_numpy_dtype(buffer._type)


class _LiveReadyEvent(ToyEvent):
    """A ready event that reads its buffer's state when asked, instead of keeping what it knew."""

    def __init__(self, buffer: ToyBuffer) -> None:
        super().__init__()
        self._buffer = buffer

    def error(self) -> PjrtError | None:
        return FailedPrecondition("the buffer was deleted") if self._buffer.is_deleted() else None

    def await_(self, timeout: float | None = None) -> None:
        error = self.error()
        if error is not None:
            raise error


def _live_ready_event(self: ToyBuffer) -> Any:
    if self.is_deleted():
        return ToyBuffer.ready_event(self)
    return _LiveReadyEvent(self)


def _moves_storage_when_read(self: ToyBuffer, dst: np.ndarray | None = None) -> ToHost:
    """A compacting allocator that moves a buffer whenever it is read, external references or not
    (the old storage is kept, so an address is never handed out twice)."""
    if self.array is not None:
        self.__dict__.setdefault("_moved_from", []).append(self.array)
        self.array = self.array.copy()
    return ToyBuffer.to_host_buffer(self, dst)


# -- where an error goes -----------------------------------------------------------------------------


def _failed_copies_hold_zeros(self: ToyBuffer, memory: Any) -> Any:
    """A copy of a buffer that holds an execution's error is made as a buffer of zeros."""
    if self.array is None and self.error is not None and not self._deleted:
        return type(self)(np.zeros(self._shape, _dtype(self)), self._type, self._device, memory)
    return ToyBuffer.copy_to_memory(self, memory)


def _runtime_failed_copies_hold_zeros() -> Callable[..., Any]:
    """The runtime's copy of a buffer whose execution already failed comes out ready, as zeros."""
    runtime = _runtime()
    buffers = importlib.import_module("pjrt_hub.backends.cpu_runtime._buffers")
    original = runtime.CpuBuffer._copy_to

    def _copy_to(self: Any, memory: Any, action: str) -> Any:
        if self._error is not None and not self.is_deleted():
            layout = self._layout
            with memory._device._client._lock:
                memory._alloc(layout.nbytes)
            return runtime.CpuBuffer._make(memory, layout, np.zeros(layout.shape, layout.dtype), buffers.READY,
                                           layout.nbytes, True)
        return original(self, memory, action)

    return _copy_to


MUTANTS: list[Mutant] = [
    Mutant("memory_argument_ignored", "transfers", "BufferFromHostBuffer and CreateUninitializedBuffer put every "
           "buffer in the device's default memory, whatever memory was asked for",
           ("transfers/placed_in_the_memory_asked_for",), toy(client={"_place": _place_ignoring_memory})),
    Mutant("column_major_by_default", "transfers", "with no device_layout, buffers are stored column-major",
           ("transfers/default_device_layout_is_dense_row_major",),
           toy(client={"buffer_from_host_buffer": _column_major})),
    Mutant("transfers_cached_by_host_pointer", "transfers", "BufferFromHostBuffer of an array it has seen returns "
           "the buffer it made then", ("transfers/each_transfer_makes_a_new_buffer",),
           toy(client={"buffer_from_host_buffer": _cached_by_host_pointer})),
    Mutant("immutable_zero_copy_written", "transfers", "a kImmutableZeroCopy buffer is donated in place, writing "
           "the output into the caller's host array", ("transfers/immutable_zero_copy_is_never_written",),
           reference((_runtime().CpuClient, "buffer_from_host_buffer", _immutable_zero_copy_is_mutable())),
           base="reference"),
    Mutant("to_host_returns_the_storage", "buffers", "ToHostBuffer without a destination returns the buffer's own "
           "array", ("buffers/to_host_array_is_the_callers",),
           toy(buffer={"to_host_buffer": _to_host_returns_the_storage})),
    Mutant("copy_to_own_device_is_itself", "transfers", "CopyToDevice to the buffer's own device returns the buffer "
           "itself", ("transfers/copy_to_its_own_place_fails_or_is_a_new_buffer",),
           toy(buffer={"copy_to_device": _copy_to_own_device_is_itself})),
    Mutant("copies_store_pred_as_u8", "transfers", "CopyToMemory turns PRED buffers into U8 ones",
           ("transfers/copies_keep_type_and_dimensions",), toy(buffer={"copy_to_memory": _copy_stores_pred_as_u8})),
    Mutant("destroy_frees_only_the_handle", "buffers", "Buffer_Destroy of a buffer never deleted keeps its memory",
           ("buffers/destroy_releases_like_delete",), toy(buffer={"destroy": _destroy_frees_only_the_handle}),
           timeout_scale=0.2),
    Mutant("deleted_buffer_copied_as_zeros", "buffers", "CopyToMemory of a deleted buffer makes a buffer of zeros",
           ("buffers/deleted_buffer_gives_no_data",), toy(buffer={"copy_to_memory": _copy_of_deleted_is_zeros})),
    Mutant("ready_event_follows_a_later_delete", "buffers", "a ReadyEvent reports an error once its buffer is "
           "deleted, though it was taken before", ("buffers/ready_event_across_delete_and_donation",),
           toy(buffer={"ready_event": _live_ready_event})),
    Mutant("storage_moves_while_referenced", "lifetime", "reading a buffer moves its storage, external references "
           "or not", ("lifetime/external_reference_pins_the_memory",),
           toy(buffer={"to_host_buffer": _moves_storage_when_read})),
    Mutant("failed_buffer_copied_as_zeros", "events", "CopyToMemory of a failed execution's output makes a buffer "
           "of zeros", ("events/failed_buffer_error_reaches_its_copies",),
           toy(buffer={"copy_to_memory": _failed_copies_hold_zeros})),
    Mutant("runtime_failed_buffer_copied_as_zeros", "events", "the runtime's copy of a buffer whose execution "
           "failed is a ready buffer of zeros", ("events/failed_buffer_error_reaches_its_copies",),
           reference((_runtime().CpuBuffer, "_copy_to", _runtime_failed_copies_hold_zeros())), base="reference"),
]


def _delete_scrubs_at_once() -> Callable[..., Any]:
    """The runtime's Delete hands the memory back at once, to be overwritten, even while queued
    work still reads it."""
    original = _runtime().CpuBuffer.delete

    def delete(self: Any) -> None:
        array = self._array
        original(self)
        if array is not None and self.is_deleted() and array.flags.writeable:
            array[...] = 0

    return delete


MUTANTS.append(
    Mutant("delete_frees_under_work_in_flight", "lifetime", "Buffer_Delete reuses the memory at once, while a queued "
           "execution still reads it", ("lifetime/delete_waits_for_work_in_flight",),
           reference((_runtime().CpuBuffer, "delete", _delete_scrubs_at_once())), base="reference"))


# -- regressions: held-out plugins the suite missed ---------------------------------------------------


def _place_memory_with_any_device(self: ToyClient, device: Any, memory: Any) -> Any:
    """Given a memory, the buffer goes there, on the device given, whether or not it addresses it."""
    if memory is not None:
        return (device if device is not None else memory.devices[0]), memory
    return ToyClient._place(self, device, None)


def _copy_to_any_memory(self: ToyBuffer, memory: Any) -> Any:
    """CopyToMemory into any memory, another device's included: the copy stays on the source's device."""
    return type(self)(self._live("PJRT_Buffer_CopyToMemory").copy(), self._type, self._device, memory)


def _copy_to_device_shares_storage(self: ToyBuffer, device: Any) -> Any:
    """A copy to another device hands it the source's array (every toy device is host memory)."""
    copy = ToyBuffer.copy_to_device(self, device)
    copy.array = self._live("PJRT_Buffer_CopyToDevice")
    return copy


def _dlpack_without_reference(self: ToyBuffer, *, stream: Any = None, max_version: Any = None,
                              dl_device: Any = None, copy: Any = None) -> Any:
    """A DLPack export of the storage that takes no external reference for the consumer."""
    view = self._live("__dlpack__").view()
    try:
        return view.__dlpack__(max_version=max_version) if max_version is not None else view.__dlpack__()
    except TypeError:
        return view.__dlpack__()


def _element_type_ignored() -> Callable[..., Any]:
    """BufferFromHostBuffer that takes the element type from the host array, whatever was asked for."""
    original = _runtime().CpuClient.buffer_from_host_buffer

    def buffer_from_host_buffer(self: Any, array: Any, *, element_type: Any = None, **kwargs: Any) -> Any:
        return original(self, array, **kwargs)

    return buffer_from_host_buffer


def _account_without_lock(self: Any, nbytes: int) -> None:
    """Bytes counted as a read, a call and a write, without the device's lock."""
    total = self.bytes_in_use + nbytes
    self._note_peak(total)
    self.bytes_in_use = total


def _note_peak(self: Any, total: int) -> None:
    self.peak_bytes_in_use = max(getattr(self, "peak_bytes_in_use", 0), total)


MUTANTS += [
    Mutant("put_memory_with_a_device_that_does_not_address_it", "transfers", "BufferFromHostBuffer and "
           "CreateUninitializedBuffer given a device and another device's memory put the buffer in that memory, on "
           "the device given", ("transfers/put_with_another_devices_memory",
                                "transfers/create_uninitialized_with_another_devices_memory"),
           toy(client={"_place": _place_memory_with_any_device})),
    Mutant("copy_to_unaddressable_memory", "transfers", "CopyToMemory into another device's memory makes a copy on "
           "the source's device, which does not address that memory", ("transfers/copy_to_another_devices_memory",),
           toy(buffer={"copy_to_memory": _copy_to_any_memory})),
    Mutant("copy_to_device_shares_storage", "transfers", "CopyToDevice makes a buffer on the other device over the "
           "source's storage", ("transfers/copies_have_storage_of_their_own",),
           toy(buffer={"copy_to_device": _copy_to_device_shares_storage})),
    Mutant("put_element_type_ignored", "transfers", "BufferFromHostBuffer ignores an element_type other than the "
           "host array's and makes a buffer of the array's type", ("transfers/put_keeps_the_element_type_given",),
           reference((_runtime().CpuClient, "buffer_from_host_buffer", _element_type_ignored())), base="reference"),
    Mutant("dlpack_export_not_referenced", "lifetime", "a DLPack export takes no external reference, so the buffer "
           "is donated while the consumer reads it", ("lifetime/dlpack_consumer_holds_off_donation",),
           toy(buffer={"__dlpack__": _dlpack_without_reference})),
    Mutant("memory_stats_race", "concurrency", "the device's bytes_in_use is updated without a lock: puts and deletes "
           "from several threads lose updates", ("concurrency/bytes_in_use_after_concurrent_puts_and_deletes",),
           toy(device={"account": _account_without_lock, "_note_peak": _note_peak})),
]
