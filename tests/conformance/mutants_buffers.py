"""Mutant plugins for the cases read from pjrt_c_api.h's buffers functions (cases/contract_buffers.py).

Each is the toy or the reference plugin with one defect a vendor could ship in buffers and
transfers: right values in the wrong memory or layout (or on a device that does not address the
memory), the element type asked for ignored, storage shared where the header promises a new
buffer or the caller's own array, a lifetime cut short or stretched (a DLPack export that holds
nothing), a memory count that loses updates, an error lost on the way to a copy. The regression
mutants at the end are the held-out plugins the suite once missed, and the runtime mutants that
survived it, rebuilt with these helpers. Built with the factories of tests/conformance/mutants.py, whose ``BASES`` they
share; ``tests/conformance/test_mutation_buffers.py`` runs them and the controls, and
``pjrt-hub conformance --mutation-report tests/conformance/mutants_buffers.py`` prints the score.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import weakref
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pjrt_hub.abi import (BufferType, DeadlineExceeded, FailedPrecondition, HostBufferSemantics, HostTransfer,
                          InvalidArgument, PjrtError, ToHost, from_numpy_dtype, to_numpy_dtype)
from pjrt_hub.testing import toy as toy_module
from pjrt_hub.testing._mutation import Mutant, patched
from pjrt_hub.testing.toy import ToyBuffer, ToyClient, ToyEvent

if __package__:
    from .mutants import BASES, _runtime, _runtime_module, reference, toy
else:  # loaded as a plain file by --mutation-report: its sibling catalogue the same way
    _spec = importlib.util.spec_from_file_location("pjrt_hub_mutants_catalogue", Path(__file__).with_name("mutants.py"))
    assert _spec is not None and _spec.loader is not None
    _catalogue = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _catalogue
    _spec.loader.exec_module(_catalogue)
    BASES, _runtime, reference, toy = _catalogue.BASES, _catalogue._runtime, _catalogue.reference, _catalogue.toy
    _runtime_module = _catalogue._runtime_module

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


# -- gaps found by mutating the runtime and by the second held-out set --------------------------------
# Each is the defect of a survivor of tests/mutation/survivors.toml or of a held-out plugin
# (/work/heldout2), rebuilt here.


def _events() -> Any:
    return _runtime_module("_events")


def _unbounded_await_polls() -> Callable[..., Any]:
    """Event.Await without a time limit taken as a limit of 0 s: a pending event raises."""
    original = _events().CpuEvent.await_

    def await_(self: Any, timeout: float | None = None) -> None:
        original(self, 0.0 if timeout is None else timeout)

    return await_


def _zero_limit_raises() -> Callable[..., Any]:
    """A time limit of 0 s raises DEADLINE_EXCEEDED without looking whether the event is ready."""
    original = _events().CpuEvent.await_

    def await_(self: Any, timeout: float | None = None) -> None:
        if timeout is not None and timeout <= 0:
            raise DeadlineExceeded("PJRT_Event_Await: a limit of 0 s only polls, and this poll found nothing")
        original(self, timeout)

    return await_


def _set_stops_at_a_raising_callback(self: Any, error: PjrtError | None = None) -> None:
    """The event's callbacks run in a plain loop: one that raises ends it."""
    events = _events()
    with events._CALLBACKS:
        self._error, self._done = error, True
        callbacks, self._callbacks = self._callbacks, None
        latch = self._latch
    if latch is not None:
        latch.release()
    for callback in callbacks or ():
        callback(error)


class _CallbackUnderLockEvent(ToyEvent):
    """On a ready event, OnReady runs the callback holding the event's lock."""

    def on_ready(self, callback: Callable[[PjrtError | None], None]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
            callback(self._error)


def _toy_with_event(event_class: type) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """The toy, with every event it makes of ``event_class``."""

    @contextlib.contextmanager
    def build() -> Any:
        with patched((toy_module, "ToyEvent", event_class)), toy()() as plugin:
            yield plugin

    return build


def _on_ready_takes_anything(self: Any, callback: Any) -> None:
    """OnReady stores whatever it is given; a non-callable fails later, where nobody sees it."""
    events = _events()
    if not self._done:
        with events._CALLBACKS:
            if not self._done:
                self._callbacks = [*(self._callbacks or ()), callback]
                return
    events._call(callback, self._error)


def _to_host_event_forgets_the_error() -> Callable[..., Any]:
    """A copy to host of a pending buffer whose event says "the copy callback ran", with no status."""
    original = _runtime().CpuBuffer.to_host_buffer

    def to_host_buffer(self: Any, dst: np.ndarray | None = None) -> ToHost:
        result = original(self, dst)
        if result.event.is_ready():
            return result
        finished = _events().CpuEvent()
        result.event.on_ready(lambda error: finished.set(None))
        return ToHost(result.array, finished)

    return to_host_buffer


def _copy_of_pending_ready_at_once() -> Callable[..., Any]:
    """A copy of a buffer still being computed is ready as soon as it is enqueued."""
    original = _runtime().CpuBuffer._copy_to

    def _copy_to(self: Any, memory: Any, action: str) -> Any:
        target = original(self, memory, action)
        if target._source is not None and target._error is None:
            target._event = _events().READY
        return target

    return _copy_to


def _memory_must_be_anothers() -> Callable[..., Any]:
    """Given a device and a memory, the client insists the memory be another device's."""
    original = _runtime().CpuClient._memory_for

    def _memory_for(self: Any, device: Any, memory: Any, action: str) -> Any:
        if memory is not None and device is not None and memory._device is device:
            raise InvalidArgument(f"{action}: memory {memory.to_string()} does not belong to another device")
        return original(self, None if memory is not None else device, memory, action)

    return _memory_for


def _own_element_type_refused() -> Callable[..., Any]:
    """An explicit element type is refused when it is the host array's own."""
    original = _runtime().CpuClient.buffer_from_host_buffer

    def buffer_from_host_buffer(self: Any, array: Any, *, element_type: Any = None, **kwargs: Any) -> Any:
        if element_type is not None and BufferType(element_type) == from_numpy_dtype(np.asarray(array).dtype):
            raise InvalidArgument(f"element_type {BufferType(element_type).name} matches the array: leave it out")
        return original(self, array, **kwargs)

    return buffer_from_host_buffer


def _unknown_semantics_copied() -> Callable[..., Any]:
    """A host_buffer_semantics the client does not know is taken as the safest one, a copy."""
    original = _runtime().CpuClient.buffer_from_host_buffer

    def buffer_from_host_buffer(self: Any, array: Any, **kwargs: Any) -> Any:
        try:
            HostBufferSemantics(kwargs.get("semantics", HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL))
        except ValueError:
            kwargs["semantics"] = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL
        return original(self, array, **kwargs)

    return buffer_from_host_buffer


def _split_copy_drops_the_tail(dst: Any, src: Any) -> None:
    """Large copies made in 4 MiB pieces, the last piece forgotten."""
    piece = 1 << 20
    if dst.size <= piece or dst.shape != src.shape or not (dst.flags.c_contiguous and src.flags.c_contiguous):
        np.copyto(dst, src, casting="no")
        return
    d, s = dst.reshape(-1), src.reshape(-1)
    for start in range(0, d.size - piece, piece):
        np.copyto(d[start:start + piece], s[start:start + piece])


def _destination_by_element_count() -> Callable[..., Any]:
    """A destination is checked by its element count and dtype, not its shape."""
    original = _runtime().CpuBuffer.to_host_buffer

    def to_host_buffer(self: Any, dst: np.ndarray | None = None) -> ToHost:
        shape = self._layout.shape
        if (isinstance(dst, np.ndarray) and dst.shape != shape and dst.dtype == self._layout.dtype
                and dst.size == math.prod(shape) and dst.flags.c_contiguous):
            return ToHost(dst, original(self, dst.reshape(shape)).event)
        return original(self, dst)

    return to_host_buffer


def _dlpack_always_writable() -> Callable[..., Any]:
    """A DLPack export shares the storage writable, whatever the consumer's DLPack version."""

    def __dlpack__(self: Any, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        view = self._ready_array("__dlpack__").view()
        self.increase_external_reference_count()
        weakref.finalize(view, self.decrease_external_reference_count)
        return view.__dlpack__(max_version=max_version) if max_version is not None else view.__dlpack__()

    return __dlpack__


def _dlpack_ignores_stream_and_device() -> Callable[..., Any]:
    """__dlpack__ exports whatever stream and device the consumer names."""
    original = _runtime().CpuBuffer.__dlpack__

    def __dlpack__(self: Any, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        return original(self, max_version=max_version, copy=copy)

    return __dlpack__


def _delete_refuses_donated() -> Callable[..., Any]:
    """Delete of a donated buffer fails with FAILED_PRECONDITION."""
    buffers = _runtime_module("_buffers")
    original = buffers.CpuBuffer.delete

    def delete(self: Any) -> None:
        if self._state == buffers.DONATED:
            raise self._unusable("PJRT_Buffer_Delete")
        original(self)

    return delete


def _release_ignoring_readers(self: Any) -> Callable[[], None] | None:
    """Borrowed memory goes back at the delete, whatever queued work still reads it."""
    if self._release is None or self._state == _runtime_module("_buffers").LIVE or self._ext_refs \
            or self._source is not None:
        return None
    hook, self._release = self._release, None
    return hook


def _executables() -> Any:
    return _runtime_module("_executables")


def _take_releasing_donors() -> Callable[..., Any]:
    """Donated borrowed memory goes back at the donation, while the output that took it over uses it."""
    original = _executables().CpuLoadedExecutable._take

    def _take(self: Any, launch: Any, non_donatable: Any) -> None:
        original(self, launch, non_donatable)
        hooks = [hook for hook in launch.out_release.values() if hook is not None]
        launch.out_release.clear()
        for hook in hooks:
            hook()

    return _take


def _take_ignoring_readers() -> Callable[..., Any]:
    """Donation looks at the buffer's own state only: the holds of queued readers are not counted,
    so the storage is reused in place under them."""
    original = _executables().CpuLoadedExecutable._take

    def _take(self: Any, launch: Any, non_donatable: Any) -> None:
        readers = {}
        for index in self._donated:
            if index < len(launch.buffers):
                buffer = launch.buffers[index]
                readers[buffer] = buffer._uses
                buffer._uses = 0
        try:
            original(self, launch, non_donatable)
        finally:
            for buffer, uses in readers.items():
                buffer._uses += uses

    return _take


def _view_of_any_strides() -> Callable[..., Any]:
    """CreateViewOfDeviceBuffer takes a strided producer and records it as dense row-major."""
    runtime, buffers = _runtime(), _runtime_module("_buffers")

    def create_view_of_device_buffer(self: Any, producer: Any, *, device: Any = None,
                                     on_delete: Callable[[], None] | None = None) -> Any:
        target = self._memory_for(device, None, "PJRT_Client_CreateViewOfDeviceBuffer")
        array = np.from_dlpack(producer)
        layout = buffers.layout_of(array.shape, array.dtype)
        return runtime.CpuBuffer._make(target, layout, array, _events().READY, 0, bool(array.flags.writeable),
                                       on_delete)

    return create_view_of_device_buffer


def _negative_timeout_unbounded() -> Callable[..., Any]:
    """ExecuteOptions.timeout = -1 taken as "no limit"."""
    original = _executables()._seconds

    def _seconds(timeout: Any) -> float:
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout < 0:
            return math.inf
        return original(timeout)

    return _seconds


def _allocations_not_counted() -> Callable[..., Any]:
    """A buffer's allocation adds its bytes to the statistics but not to num_allocs nor to
    largest_alloc_size."""

    def _alloc(self: Any, nbytes: int) -> None:
        self._alloc_outputs((0, nbytes, 0))

    return _alloc


MUTANTS += [
    Mutant("unbounded_await_polls", "events", "Event.Await without a time limit is taken as a limit of 0 s: a "
           "pending event raises DEADLINE_EXCEEDED", ("events/await_without_a_limit_waits_for_pending_work",),
           reference((_events().CpuEvent, "await_", _unbounded_await_polls())), base="reference"),
    Mutant("await_zero_limit_raises_when_ready", "events", "Event.Await with a time limit of 0 s raises "
           "DEADLINE_EXCEEDED without looking whether the event is ready",
           ("events/await_with_a_time_limit_bounds_only_the_wait",),
           reference((_events().CpuEvent, "await_", _zero_limit_raises())), base="reference"),
    Mutant("raising_callback_stops_the_others", "events", "when an on_ready callback of a pending event raises, the "
           "callbacks registered after it never run", ("events/every_on_ready_callback_runs",),
           reference((_events().CpuEvent, "set", _set_stops_at_a_raising_callback)), base="reference"),
    Mutant("ready_callback_under_event_lock", "events", "OnReady of a ready event runs the callback under the "
           "event's lock: a callback that registers another on the same event deadlocks",
           ("events/on_ready_callback_may_use_its_event",), _toy_with_event(_CallbackUnderLockEvent),
           timeout_scale=0.2),
    Mutant("on_ready_takes_anything", "events", "OnReady accepts a callback that is not callable; it fails later, "
           "unseen", ("events/on_ready_refuses_what_it_cannot_call",),
           reference((_events().CpuEvent, "on_ready", _on_ready_takes_anything)), base="reference"),
    Mutant("to_host_of_failing_pending_buffer_no_error", "events", "ToHostBuffer of a buffer still being computed "
           "returns an event that becomes ready without an error when that computation fails",
           ("events/to_host_of_a_pending_buffer_that_fails",),
           reference((_runtime().CpuBuffer, "to_host_buffer", _to_host_event_forgets_the_error())), base="reference"),
    Mutant("copy_of_pending_buffer_ready_at_once", "transfers", "CopyToDevice/CopyToMemory of a buffer still being "
           "computed makes a copy whose ReadyEvent is ready at once", ("transfers/copy_of_a_pending_buffer",),
           reference((_runtime().CpuBuffer, "_copy_to", _copy_of_pending_ready_at_once())), base="reference"),
    Mutant("device_and_its_own_memory_refused", "transfers", "BufferFromHostBuffer given a device and one of its "
           "own memories refuses them", ("transfers/put_with_a_device_and_its_own_memory",),
           reference((_runtime().CpuClient, "_memory_for", _memory_must_be_anothers())), base="reference"),
    Mutant("own_element_type_refused", "transfers", "BufferFromHostBuffer refuses an element_type that is the host "
           "array's own", ("transfers/put_keeps_the_element_type_given",),
           reference((_runtime().CpuClient, "buffer_from_host_buffer", _own_element_type_refused())),
           base="reference"),
    Mutant("unknown_host_semantics_copied", "transfers", "BufferFromHostBuffer with an unknown host_buffer_semantics "
           "copies the array instead of refusing", ("transfers/unknown_host_buffer_semantics_refused",),
           reference((_runtime().CpuClient, "buffer_from_host_buffer", _unknown_semantics_copied())),
           base="reference"),
    Mutant("large_copy_drops_its_tail", "transfers", "copies of more than 4 MiB are made in pieces and the last "
           "piece is forgotten", ("transfers/large_arrays_move_whole",),
           reference((_runtime_module("_buffers"), "split_copy", _split_copy_drops_the_tail)), base="reference"),
    Mutant("to_host_destination_by_element_count", "buffers", "ToHostBuffer fills a destination of another shape "
           "with as many elements", ("buffers/to_host_destination_must_fit",),
           reference((_runtime().CpuBuffer, "to_host_buffer", _destination_by_element_count())), base="reference"),
    Mutant("dlpack_export_writable", "transfers", "a DLPack export shares the buffer's storage writable: the "
           "consumer can change the buffer", ("transfers/dlpack_consumer_cannot_change_the_buffer",),
           reference((_runtime().CpuBuffer, "__dlpack__", _dlpack_always_writable())), base="reference"),
    Mutant("dlpack_ignores_stream_and_device", "transfers", "__dlpack__ exports a host buffer for any stream and "
           "any device asked for", ("transfers/dlpack_export_arguments",),
           reference((_runtime().CpuBuffer, "__dlpack__", _dlpack_ignores_stream_and_device())), base="reference"),
    Mutant("delete_of_donated_buffer_fails", "buffers", "Buffer.Delete of a donated buffer fails with "
           "FAILED_PRECONDITION instead of doing nothing", ("buffers/delete_after_donation_or_delete_does_nothing",),
           reference((_runtime().CpuBuffer, "delete", _delete_refuses_donated())), base="reference"),
    Mutant("borrowed_memory_released_under_readers", "lifetime", "deleting a view or a zero-copy buffer that a "
           "queued execution reads hands the memory back at once",
           ("lifetime/lent_memory_stays_lent_while_queued_work_reads_it",),
           reference((_runtime().CpuBuffer, "_take_release_hook", _release_ignoring_readers)), base="reference"),
    Mutant("donated_borrowed_memory_released_at_donation", "lifetime", "donating a view or a mutable zero-copy "
           "buffer hands the memory back at the donation, while the output uses it",
           ("lifetime/donated_lent_memory_goes_back_with_its_output",),
           reference((_executables().CpuLoadedExecutable, "_take", _take_releasing_donors())), base="reference"),
    Mutant("donation_overwrites_queued_reader", "lifetime", "donating a buffer that a queued execution reads "
           "reuses its storage at once", ("lifetime/donation_waits_for_queued_readers",),
           reference((_executables().CpuLoadedExecutable, "_take", _take_ignoring_readers())), base="reference"),
    Mutant("view_of_strided_producer_as_dense", "transfers", "CreateViewOfDeviceBuffer takes every other element "
           "of an array as a dense view", ("transfers/view_of_a_strided_producer",),
           reference((_runtime().CpuClient, "create_view_of_device_buffer", _view_of_any_strides())),
           base="reference"),
    Mutant("negative_execute_timeout_unbounded", "execute", "ExecuteOptions.timeout = -1 is taken as no limit",
           ("execute/negative_execute_timeout_is_no_missing_limit",),
           reference((_executables(), "_seconds", _negative_timeout_unbounded())), base="reference"),
    Mutant("allocations_not_counted", "devices", "a buffer's allocation counts in bytes_in_use but not in "
           "num_allocs nor largest_alloc_size", ("devices/memory_stats_count_allocations",),
           reference((_runtime_module("_devices").CpuMemory, "_alloc", _allocations_not_counted())),
           base="reference"),
]
