"""CPU devices, their memories, the bytes accounted to each, and the worker that runs their work.

Each device has three memories, as XLA's CPU client does: ``device`` (the default), and the host
kinds ``pinned_host`` and ``unpinned_host``. On a CPU they are all the same RAM; they exist so
that programs and frameworks that place arrays by memory kind find the kinds they expect, and so
that copies between memories behave as on any other platform.

Accounting counts the bytes the runtime itself allocated (copies from host, execution outputs,
copies between devices). Buffers that alias memory they do not own (zero-copy host arrays, views
of DLPack producers) count nothing, because freeing them frees nothing.

Executions on one device run in submission order, one at a time, the way a stream orders work on
an accelerator: on that device's worker thread (started on first use), or on a thread waiting
for one of them, which runs the queued ones up to its own (:meth:`_Worker.help`). A task a
waiter runs sets its events, and so runs their ``on_ready`` callbacks, on the waiter's thread.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from pjrt_hub.abi import Device, DeviceDescription, InvalidArgument, Memory, MemoryStats

from ._topology import CpuDeviceDescription

if TYPE_CHECKING:
    from ._client import CpuClient
    from ._events import CpuEvent

__all__ = ["MEMORY_KINDS", "CpuDevice", "CpuMemory"]

_log = logging.getLogger(__name__)

#: Memory kinds of every device, the default first, with their kind ids.
MEMORY_KINDS: dict[str, int] = {"device": 0, "pinned_host": 1, "unpinned_host": 2}


class _Account:
    """Bytes in use and their high-water mark; :meth:`CpuMemory._alloc` updates them under the
    client's lock."""

    __slots__ = ("in_use", "peak", "num_allocs", "largest")

    def __init__(self) -> None:
        self.in_use = self.peak = self.num_allocs = self.largest = 0

    def stats(self) -> MemoryStats:
        return MemoryStats(bytes_in_use=self.in_use, peak_bytes_in_use=self.peak,
                           num_allocs=self.num_allocs, largest_alloc_size=self.largest)


class CpuMemory(Memory):
    """``PJRT_Memory``: one memory space of one CPU device."""

    __slots__ = ("_id", "_kind", "_kind_id", "_device", "_account", "__weakref__")

    def __init__(self, memory_id: int, kind: str, device: "CpuDevice") -> None:
        self._id = memory_id
        self._kind = kind
        self._kind_id = MEMORY_KINDS[kind]
        self._device = device
        self._account = _Account()

    @property
    def device(self) -> "CpuDevice":
        return self._device

    def id(self) -> int:
        return self._id

    def kind(self) -> str:
        return self._kind

    def kind_id(self) -> int:
        return self._kind_id

    def debug_string(self) -> str:
        return f"CpuMemory(id={self._id}, kind={self._kind}, device={self._device._label})"

    def to_string(self) -> str:
        return f"{self._kind.upper()}_{self._id}"

    def addressable_by_devices(self) -> list[Device]:
        return [self._device]

    def _alloc(self, nbytes: int) -> None:
        """Count an allocation here and on the device. Caller holds the client's lock."""
        self._alloc_outputs((1, nbytes, nbytes))

    def _alloc_outputs(self, figures: tuple[int, int, int]) -> None:
        """Count the outputs of one execution at once: ``(count, total bytes, largest)``, as
        ``count`` allocations of their sizes would. Caller holds the client's lock."""
        count, nbytes, largest = figures
        for account in (self._account, self._device._account):  # the memory's, the device's
            in_use = account.in_use = account.in_use + nbytes
            account.num_allocs += count
            if in_use > account.peak:
                account.peak = in_use
            if largest > account.largest:
                account.largest = largest

    def _free(self, nbytes: int) -> None:
        self._account.in_use -= nbytes
        self._device._account.in_use -= nbytes

    def stats(self) -> MemoryStats:
        """Bytes the runtime allocated in this memory (not a PJRT call: PJRT has device stats only)."""
        with self._device._client._lock:
            return self._account.stats()

    def __repr__(self) -> str:
        return f"<CpuMemory {self.to_string()} of {self._device._label}>"


class CpuDevice(Device):
    """``PJRT_Device``: one CPU device of a client."""

    __slots__ = ("_client", "_description", "_memories", "_account", "_worker", "_label",
                 "__weakref__")

    def __init__(self, client: "CpuClient", description: CpuDeviceDescription, num_devices: int) -> None:
        self._client = client
        self._description = description
        #: Precomputed: it goes into every error message about this device.
        self._label = description.debug_string()
        device_id = description.id()
        self._memories = tuple(
            CpuMemory(device_id + index * num_devices, kind, self) for index, kind in enumerate(MEMORY_KINDS)
        )
        self._account = _Account()
        self._worker = _Worker(self._label)

    @property
    def id(self) -> int:
        return self._description._id

    @property
    def client(self) -> "CpuClient":
        return self._client

    def memory(self, kind: str) -> CpuMemory:
        """The memory of this kind (a Python convenience; PJRT lists them)."""
        for memory in self._memories:
            if memory._kind == kind:
                return memory
        raise InvalidArgument(
            f"device {self._label} has no memory of kind {kind!r}; kinds: {', '.join(MEMORY_KINDS)}"
        )

    def get_description(self) -> DeviceDescription:
        return self._description

    def is_addressable(self) -> bool:
        return True

    def local_hardware_id(self) -> int:
        return self._description._id

    def addressable_memories(self) -> list[Memory]:
        return list(self._memories)

    def default_memory(self) -> Memory:
        return self._memories[0]

    def memory_stats(self) -> MemoryStats:
        with self._client._lock:
            return self._account.stats()

    def get_attributes(self) -> dict[str, Any]:
        return self._description.attributes()

    def __repr__(self) -> str:
        return f"<CpuDevice {self._label}>"


class RemoteCpuDevice(Device):
    """A device of another process of the job: known by its description, not addressable here."""

    __slots__ = ("_description", "__weakref__")

    def __init__(self, description: CpuDeviceDescription) -> None:
        self._description = description

    @property
    def id(self) -> int:
        return self._description._id

    def get_description(self) -> DeviceDescription:
        return self._description

    def is_addressable(self) -> bool:
        return False

    def local_hardware_id(self) -> int:
        return -1

    def addressable_memories(self) -> list[Memory]:
        return []

    def get_attributes(self) -> dict[str, Any]:
        return self._description.attributes()

    def __repr__(self) -> str:
        return f"<RemoteCpuDevice {self._description.debug_string()} of process {self._description.process_index()}>"


class _Worker:
    """One thread running a device's work in submission order. Tasks never raise into it.

    A thread that waits for a task's event may run the queued tasks itself, in order, up to its
    own (:meth:`help`): the hand-off to the device's thread then costs nothing. On a machine
    other processes keep busy, each hand-off waits for the scheduler to run the woken thread
    (figures: docs/measurements.md, "Under load"). One task runs at a time, whichever thread
    runs it."""

    __slots__ = ("_name", "_tasks", "_cond", "_runner", "_thread", "_lock")

    def __init__(self, name: str) -> None:
        self._name = name
        #: (task, whether a waiting thread may run it); a None task stops the thread.
        self._tasks: collections.deque[tuple[Callable[[], None] | None, bool]] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        #: threading.get_ident() of the thread running a task (the device's or a waiter); 0: none.
        self._runner = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, task: Callable[[], None], helpable: bool = False) -> None:
        if self._thread is None:
            self._start()
        with self._cond:
            self._tasks.append((task, helpable))
            self._cond.notify()

    def help(self, event: "CpuEvent") -> None:
        """Run queued tasks on the calling thread, in order, while ``event`` is pending and the
        next task is one a waiter may run (not one that may loop for ever) and none runs.

        A task's own errors are its events'; an interrupt (``KeyboardInterrupt`` in the main
        thread) is raised to the waiter once the task has set its events."""
        while not event._done:
            with self._cond:
                if self._runner or not self._tasks or not self._tasks[0][1]:
                    return
                task = self._tasks.popleft()[0]
                assert task is not None  # the stop mark is never helpable
                self._runner = threading.get_ident()
            try:
                _run_task(task, Exception)
            finally:
                del task
                self._finished()

    def _finished(self) -> None:
        with self._cond:
            self._runner = 0
            if self._tasks:
                self._cond.notify()

    def _next(self) -> Callable[[], None] | None:
        with self._cond:
            while self._runner or not self._tasks:
                self._cond.wait()
            task = self._tasks.popleft()[0]
            if task is None:  # this thread stops; a thread started after it takes the rest
                if self._tasks:
                    self._cond.notify()
                return None
            self._runner = threading.get_ident()
            return task

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                # Daemon: a program that never destroys its client must still be able to exit.
                # The thread holds the worker, never the client or the device, so a forgotten
                # client can be collected.
                thread = threading.Thread(target=_run_worker, args=(self._next, self._finished),
                                          name=f"pjrt-hub {self._name}", daemon=True)
                thread.start()
                self._thread = thread

    def stop(self, wait: bool = True) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            with self._cond:
                self._tasks.append((None, False))
                self._cond.notify()
            # Not from a task of this worker (a callback that destroys the client): the thread
            # would wait for that very task.
            if wait and thread is not threading.current_thread() and self._runner != threading.get_ident():
                thread.join()


def _run_task(task: Callable[[], None], caught: type[BaseException] = BaseException) -> None:
    """Run ``task``, logging what it raises of ``caught``: everything on the device's thread (a
    task bug must not take the device down with it), ``Exception`` on a waiter, to which an
    interrupt goes on."""
    try:
        task()
    except caught:  # noqa: BLE001
        _log.exception("pjrt-hub cpu_runtime: a device task raised; the worker continues")


def _run_worker(next_task: Callable[[], Callable[[], None] | None], finished: Callable[[], None]) -> None:
    while True:
        task = next_task()
        if task is None:
            return
        try:
            _run_task(task)
        finally:
            del task
            finished()
