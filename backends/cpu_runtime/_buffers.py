"""``PJRT_Buffer`` in host memory: a numpy array with a device, a memory, a life cycle and holds.

A buffer is in one of three states: live, deleted, or donated (its storage moved to an
execution). A live buffer is *ready* (``_array`` is set), *pending* (an execution or a copy will
produce it: ``_source`` says where the array will appear) or *failed* (``_error``: the work that
should have produced it raised). Using a deleted or donated buffer raises FailedPrecondition
naming the buffer.

Three counters guard the storage, all under the client's lock:

* ``_uses``: executions and copies that have captured the array and have not finished. Donation
  reuses storage in place only when there are none; a zero-copy buffer tells its owner it is
  done with the host array only after the last one.
* ``_ext_refs``: external references (``PJRT_Buffer_IncreaseExternalReferenceCount`` and every
  live DLPack consumer). They block delete and donation, as in PJRT.
* ``_accounted``: the bytes this buffer counts in its memory's statistics (0 when it aliases
  memory it does not own).

``_release`` is called once when the storage is no longer used by the runtime: it fires the
``done_with_host_buffer`` event of a zero-copy transfer and the ``on_delete`` callback of a view.
When a donated buffer's storage is reused by an output, the hook moves with the storage.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from pjrt_hub.abi import (
    Buffer,
    BufferType,
    Device,
    Event,
    FailedPrecondition,
    InvalidArgument,
    Memory,
    PjrtError,
    ResourceExhausted,
    ToHost,
    from_numpy_dtype,
)

from ._events import READY, CpuEvent, as_pjrt_error, failed_event
from .helper_thread import split_copy

if TYPE_CHECKING:
    from ._client import CpuClient
    from ._devices import CpuDevice, CpuMemory

__all__ = ["CpuBuffer", "Layout", "layout_of"]

LIVE, DELETED, DONATED = 0, 1, 2

#: DLPack's device type for host memory (``kDLCPU``).
_DL_CPU = 1


@dataclass(frozen=True, slots=True)
class Layout:
    """Shape and element type of a buffer, with what messages and accounting need of them."""

    shape: tuple[int, ...]
    dtype: np.dtype
    element_type: BufferType
    nbytes: int
    #: XLA's spelling, ``f32[2,3]``, used in every message about a buffer.
    text: str


@lru_cache(maxsize=4096)
def layout_of(shape: tuple[int, ...], dtype: np.dtype) -> Layout:
    """The layout of arrays of this shape and dtype; InvalidArgument for a dtype PJRT lacks."""
    element_type = from_numpy_dtype(dtype)
    size = 1
    for dim in shape:
        size *= dim
    text = f"{element_type.name.lower()}[{','.join(map(str, shape))}]"
    return Layout(shape, dtype, element_type, size * dtype.itemsize, text)


def describe(array: np.ndarray) -> str:
    """``f32[2,3]`` for an array, or its numpy description when PJRT has no type for it."""
    try:
        return layout_of(array.shape, array.dtype).text
    except PjrtError:
        return f"{array.dtype}{list(array.shape)}"


class Pending:
    """Where a pending buffer's array appears: ``results[index]`` once ``event`` is set.

    ``reusable[index]`` says whether that array may be overwritten by a later donation (False for
    an array the program still references, such as a constant it returns every time).
    """

    __slots__ = ("event", "results", "reusable")

    def __init__(self, event: CpuEvent) -> None:
        self.event = event
        self.results: list[np.ndarray] | None = None
        self.reusable: Sequence[bool] | None = None

    def array(self, index: int) -> np.ndarray:
        """``results[index]``: there once ``event`` is set without an error, which callers await."""
        assert self.results is not None, "a pending array was read before its event was set"
        return self.results[index]


class CpuBuffer(Buffer):
    """``PJRT_Buffer``: an array in the host memory of a CPU device."""

    __slots__ = ("_client", "_device", "_memory", "_layout", "_array", "_event", "_state", "_error",
                 "_source", "_index", "_uses", "_ext_refs", "_accounted", "_release", "_mutable",
                 "_donated_to", "__weakref__")

    # The slots' types: a buffer is built by _make (the public constructor refuses), which sets
    # every one of them.
    _client: CpuClient
    _device: CpuDevice
    _memory: CpuMemory
    _layout: Layout
    _array: np.ndarray | None
    _event: CpuEvent
    _state: int
    _error: PjrtError | None
    _source: Pending | None
    _index: int
    _uses: int
    _ext_refs: int
    _accounted: int
    _release: Callable[[], None] | None
    _mutable: bool
    _donated_to: str | None

    # -- construction (runtime side) ----------------------------------------------------------

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("CpuBuffer objects are made by a client (buffer_from_host_buffer, execute, ...)")

    @classmethod
    def _make(cls, memory: "CpuMemory", layout: Layout, array: np.ndarray | None, event: CpuEvent,
              accounted: int, mutable: bool, release: Callable[[], None] | None = None) -> "CpuBuffer":
        """A live buffer. The caller has accounted ``accounted`` bytes to ``memory`` already."""
        buffer = object.__new__(cls)
        device = memory._device
        buffer._client = device._client
        buffer._device = device
        buffer._memory = memory
        buffer._layout = layout
        buffer._array = array
        buffer._event = event
        buffer._state = LIVE
        buffer._error = None
        buffer._source = None
        buffer._index = 0
        buffer._uses = 0
        buffer._ext_refs = 0
        buffer._accounted = accounted
        buffer._release = release
        buffer._mutable = mutable
        buffer._donated_to = None
        return buffer

    @classmethod
    def _fresh_outputs(cls, memory: "CpuMemory", layouts: Sequence[Layout], results: Sequence[np.ndarray],
                       figures: tuple[int, int, int]) -> list[Buffer]:
        """The ready, reusable buffers of one execution's fresh results (``fresh_results``: new
        arrays of the declared layouts), accounted to ``memory`` at once (``figures`` as in
        :meth:`CpuMemory._alloc_outputs`). Caller holds the client's lock.

        What :meth:`_make` does for each, written out: a tiny program's execute is mostly this
        bookkeeping, and a call per output is a tenth of it. The buffers must have the same
        slots and values as ``_make``'s (a test compares them)."""
        memory._alloc_outputs(figures)
        device = memory._device
        client = device._client
        new = object.__new__
        outputs: list[Buffer] = []
        index = 0
        for layout in layouts:  # a loop, not a comprehension: one frame fewer
            buffer = new(cls)
            buffer._client = client
            buffer._device = device
            buffer._memory = memory
            buffer._layout = layout
            buffer._array = results[index]
            buffer._event = READY
            buffer._state = LIVE
            buffer._error = None
            buffer._source = None
            buffer._index = 0
            buffer._uses = 0
            buffer._ext_refs = 0
            buffer._accounted = layout.nbytes
            buffer._release = None
            buffer._mutable = True
            buffer._donated_to = None
            outputs.append(buffer)
            index += 1
        return outputs

    def _settle(self, array: np.ndarray | None, error: PjrtError | None) -> Callable[[], None] | None:
        """The work producing this pending buffer finished, with ``array`` or ``error``.

        Caller holds the client's lock; returns the release hook if it is now due.
        """
        self._source = None
        if error is not None:
            # A failed buffer holds no storage: what it inherited by donation is released now.
            self._error = error
            if self._accounted:
                self._memory._free(self._accounted)
                self._accounted = 0
            if self._state == LIVE:
                hook, self._release = self._release, None
                return hook
        elif self._state == LIVE:
            self._array = array
        return self._take_release_hook()

    # -- state checks --------------------------------------------------------------------------

    def _describe(self) -> str:
        memory = "" if self._memory._kind_id == 0 else f" ({self._memory._kind})"
        return f"{self._layout.text} buffer on {self._device._label}{memory}"

    def _unusable(self, action: str) -> FailedPrecondition:
        if self._state == DONATED:
            why = f"was donated to an execution of {self._donated_to}"
        else:
            why = "was deleted"
        return FailedPrecondition(f"{action}: the {self._describe()} {why}; it can no longer be used")

    def _hold(self, action: str) -> tuple[np.ndarray | None, Pending | None, int]:
        """Take a use of the storage: (array, None, 0) if ready, (None, source, index) if pending.

        Raises for a deleted/donated buffer, and the execution error of a failed one. The caller
        must call :meth:`_unhold` once it is done with the array.
        """
        with self._client._lock:
            if self._state != LIVE:
                raise self._unusable(action)
            if self._error is not None:
                raise self._error.for_raise()
            self._uses += 1
            return self._array, self._source, self._index

    def _unhold(self) -> None:
        with self._client._lock:
            self._uses -= 1
            hook = self._take_release_hook()
        if hook is not None:
            hook()

    def _take_release_hook(self) -> Callable[[], None] | None:
        """The release hook, if the storage is now unused by anyone. Caller holds the lock."""
        if (self._release is None or self._state == LIVE or self._uses or self._ext_refs
                or self._source is not None):
            return None
        hook, self._release = self._release, None
        return hook

    def _drop_storage(self, state: int) -> Callable[[], None] | None:
        """Leave the live state; free the accounting. Caller holds the lock."""
        self._state = state
        self._array = None
        if self._accounted:
            self._memory._free(self._accounted)
            self._accounted = 0
        return self._take_release_hook()

    # -- metadata --------------------------------------------------------------------------------

    def element_type(self) -> BufferType:
        return self._layout.element_type

    def dimensions(self) -> tuple[int, ...]:
        return self._layout.shape

    def unpadded_dimensions(self) -> tuple[int, ...]:
        return self._layout.shape

    def dynamic_dimension_indices(self) -> tuple[int, ...]:
        return ()

    def on_device_size_in_bytes(self) -> int:
        return self._layout.nbytes

    def device(self) -> Device:
        return self._device

    def memory(self) -> Memory:
        return self._memory

    def is_on_cpu(self) -> bool:
        return True

    @property
    def dtype(self) -> np.dtype:
        return self._layout.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._layout.shape

    # -- life cycle ------------------------------------------------------------------------------

    def is_deleted(self) -> bool:
        return self._state != LIVE

    def delete(self) -> None:
        with self._client._lock:
            if self._state != LIVE:
                return
            if self._ext_refs:
                raise FailedPrecondition(
                    f"PJRT_Buffer_Delete: the {self._describe()} has {self._ext_refs} external "
                    "reference(s) (DLPack consumers or IncreaseExternalReferenceCount); "
                    "release them before deleting it"
                )
            hook = self._drop_storage(DELETED)
        if hook is not None:
            hook()

    def destroy(self) -> None:
        # Destroying the handle frees the storage even with external references left: a DLPack
        # consumer keeps its own reference to the numpy memory, so nothing dangles.
        lock = self._client._lock
        lock.acquire()  # not ``with``: half the cost on an RLock, and every output comes here
        try:
            if self._state != LIVE:
                return
            if self._release is None:
                # What _drop_storage does, inline for the common buffer (every execute's
                # outputs): it has no release hook to run.
                self._state = DELETED
                self._array = None
                if self._accounted:
                    self._memory._free(self._accounted)
                    self._accounted = 0
                return
            hook = self._drop_storage(DELETED)
        finally:
            lock.release()
        if hook is not None:
            hook()

    def __del__(self) -> None:
        try:
            if self._state == LIVE:
                self.destroy()
        except Exception:  # noqa: BLE001 - finalizers must not raise (interpreter shutdown)
            pass

    def ready_event(self) -> Event:
        if self._state != LIVE:
            return failed_event(self._unusable("PJRT_Buffer_ReadyEvent"))
        return self._event

    # -- transfers -------------------------------------------------------------------------------

    def to_host_buffer(self, dst: np.ndarray | None = None) -> ToHost:
        layout = self._layout
        if dst is not None:
            _check_destination(dst, layout, self._describe())
        # The copy holds the storage: an execution on another thread that donates this buffer
        # then cannot reuse the storage in place while it is being read (a copy half old, half
        # new); it either comes first (and this call fails with "donated") or copies it.
        array, source, index = self._hold("PJRT_Buffer_ToHostBuffer")
        if array is not None:
            try:
                if dst is None:
                    dst = _host_copy(array, self._describe())
                else:
                    split_copy(dst, array)
            finally:
                self._unhold()
            return ToHost(dst, READY)
        assert source is not None  # _hold gives a source whenever it gives no array
        if dst is None:
            try:
                dst = np.empty(layout.shape, layout.dtype)
            except MemoryError:
                self._unhold()
                raise _no_host_memory(layout.nbytes, self._describe()) from None
        event = CpuEvent(source.event._helper)  # a waiter may run the source's work
        target = dst

        def copy(error: PjrtError | None) -> None:
            try:
                if error is None:
                    split_copy(target, source.array(index))
            except Exception as exc:  # noqa: BLE001
                error = as_pjrt_error(exc, "PJRT_Buffer_ToHostBuffer")
            finally:
                self._unhold()
            event.set(error)

        source.event.on_ready(copy)
        return ToHost(dst, event)

    def copy_to_device(self, device: Device) -> Buffer:
        from ._devices import CpuDevice

        if not isinstance(device, CpuDevice):
            raise InvalidArgument(
                f"PJRT_Buffer_CopyToDevice: {device!r} is not a device of a pjrt-hub CPU client"
            )
        return self._copy_to(device._memories[0], "PJRT_Buffer_CopyToDevice")

    def copy_to_memory(self, memory: Memory) -> Buffer:
        from ._devices import CpuMemory

        if not isinstance(memory, CpuMemory):
            raise InvalidArgument(
                f"PJRT_Buffer_CopyToMemory: {memory!r} is not a memory of a pjrt-hub CPU client"
            )
        return self._copy_to(memory, "PJRT_Buffer_CopyToMemory")

    def _copy_to(self, memory: "CpuMemory", action: str) -> "CpuBuffer":
        layout = self._layout
        client = memory._device._client
        with self._client._lock:
            failed = self._error if self._state == LIVE else None
        if failed is not None:
            # The error travels with the data it stands for, as XLA propagates it.
            return CpuBuffer._make(memory, layout, None, failed_event(failed), 0, True)._failed_with(failed)
        array, source, index = self._hold(action)
        if array is not None:
            try:
                duplicate = array.copy()
            finally:
                self._unhold()
            with client._lock:
                memory._alloc(layout.nbytes)
            return CpuBuffer._make(memory, layout, duplicate, READY, layout.nbytes, True)
        assert source is not None  # _hold gives a source whenever it gives no array
        event = CpuEvent(source.event._helper)  # a waiter may run the source's work
        pending = Pending(event)
        with client._lock:
            memory._alloc(layout.nbytes)
        target = CpuBuffer._make(memory, layout, None, event, layout.nbytes, True)
        target._source = pending

        def copy(error: PjrtError | None) -> None:
            array = None
            try:
                if error is None:
                    array = source.array(index).copy()
                    pending.results = [array]
                    pending.reusable = [True]
            except Exception as exc:  # noqa: BLE001
                error = as_pjrt_error(exc, action)
            finally:
                self._unhold()
            with client._lock:
                hook = target._settle(array, error)
            if hook is not None:
                hook()
            event.set(error)

        source.event.on_ready(copy)
        return target

    def _failed_with(self, error: PjrtError) -> "CpuBuffer":
        self._error = error
        return self

    # -- raw access ------------------------------------------------------------------------------

    def _ready_array(self, action: str) -> np.ndarray:
        array = self._array
        if array is not None:
            return array
        array, source, index = self._hold(action)
        try:
            if array is None:
                assert source is not None  # _hold gives a source whenever it gives no array
                source.event.await_()
                array = source.array(index)
        finally:
            self._unhold()
        return array

    def unsafe_pointer(self) -> int:
        return self._ready_array("PJRT_Buffer_UnsafePointer").__array_interface__["data"][0]

    def opaque_device_memory_data_pointer(self) -> int:
        return self._ready_array("PJRT_Buffer_OpaqueDeviceMemoryDataPointer").__array_interface__["data"][0]

    def increase_external_reference_count(self) -> None:
        with self._client._lock:
            if self._state != LIVE:
                raise self._unusable("PJRT_Buffer_IncreaseExternalReferenceCount")
            self._ext_refs += 1

    def decrease_external_reference_count(self) -> None:
        with self._client._lock:
            if not self._ext_refs:
                raise InvalidArgument("Attempting to decrease reference on a buffer with zero reference count.")
            self._ext_refs -= 1
            hook = self._take_release_hook()
        if hook is not None:
            hook()

    # -- DLPack ----------------------------------------------------------------------------------

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CPU, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """Export without a copy (unless ``copy=True``), holding an external reference.

        The capsule is made by numpy from a fresh view of the storage; the view lives exactly as
        long as the consumer's array (numpy's DLPack deleter drops it), and a finalizer on the
        view gives the external reference back. While it is held, :meth:`delete` raises and the
        buffer cannot be donated, as PJRT requires while another framework shares the memory.
        """
        if stream is not None and stream != -1:
            raise BufferError(f"a CPU buffer has no streams; __dlpack__ got stream={stream!r}")
        if dl_device is not None and tuple(dl_device) != (_DL_CPU, 0):
            raise BufferError(f"the {self._describe()} lives on the CPU (kDLCPU, 0), not on {dl_device}")
        if self._layout.dtype.type.__module__.startswith("ml_dtypes"):
            # numpy makes the capsules, and its DLPack knows no bfloat16, 8-bit floats or int4.
            raise BufferError(f"the {self._describe()} cannot be exported through DLPack: numpy's DLPack "
                              f"has no {self._layout.dtype} type; copy it with to_host_buffer() instead")
        array = self._ready_array("__dlpack__")
        kwargs: dict[str, Any] = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        if copy:
            return array.copy().__dlpack__(**kwargs)
        if copy is not None:
            kwargs["copy"] = copy
        view = array.view()
        if max_version is not None and tuple(max_version) >= (1, 0):
            # Buffers are immutable: consumers that understand DLPack 1.0's read-only flag get
            # it. Older consumers cannot be told, and numpy refuses to export read-only arrays
            # to them, so they get a view they are trusted not to write.
            view.flags.writeable = False
        self.increase_external_reference_count()
        weakref.finalize(view, self.decrease_external_reference_count)
        try:
            return view.__dlpack__(**kwargs)
        except TypeError:
            if not kwargs:
                raise
            # numpy before 2.1 speaks only the legacy protocol (no keywords, no read-only flag);
            # the DLPack spec lets a producer answer a newer request with the older capsule.
            if array.flags.writeable:
                view.flags.writeable = True
            return view.__dlpack__()

    def __repr__(self) -> str:
        if self._state != LIVE:
            state = " (donated)" if self._state == DONATED else " (deleted)"
        elif self._error is not None:
            state = " (failed)"
        elif self._array is None:
            state = " (pending)"
        else:
            state = ""
        return f"<CpuBuffer {self._describe()}{state}>"


def _no_host_memory(nbytes: int, what: str) -> ResourceExhausted:
    return ResourceExhausted(f"PJRT_Buffer_ToHostBuffer: cannot allocate {nbytes} bytes of host memory for a "
                             f"copy of the {what}")


def _host_copy(array: np.ndarray, what: str) -> np.ndarray:
    """``array.copy()`` (C order), with host memory exhaustion reported as PJRT's
    RESOURCE_EXHAUSTED."""
    try:
        copy = np.empty(array.shape, array.dtype)
    except MemoryError:
        raise _no_host_memory(array.nbytes, what) from None
    split_copy(copy, array)
    return copy


def _check_destination(dst: Any, layout: Layout, what: str) -> None:
    if not isinstance(dst, np.ndarray):
        raise InvalidArgument(
            f"PJRT_Buffer_ToHostBuffer: the destination must be a numpy array, got {type(dst).__name__}"
        )
    if dst.shape != layout.shape or dst.dtype != layout.dtype:
        raise InvalidArgument(
            f"PJRT_Buffer_ToHostBuffer: the destination is {describe(dst)} ({dst.dtype}) but the "
            f"{what} is {layout.text} ({layout.dtype})"
        )
    if not dst.flags.writeable:
        raise InvalidArgument("PJRT_Buffer_ToHostBuffer: the destination array is read-only")
