"""The plugin under test: what the registry knows of it, and bounded ways to call it.

One :class:`PluginUnderTest` serves every case of one plugin in a run. It reaches the plugin the
way a framework does, through a :class:`~pjrt_hub.PluginRegistry` and its version gate, so a case
sees exactly the calls the negotiated version allows. The shared objects (the Api, the client)
are made lazily, each in its own thread with a time bound: a plugin whose ``client_create`` hangs
fails the cases that need a client within seconds, instead of hanging the run. Blocking calls
(awaiting events, compiling, executing, copying to host) go through :meth:`PluginUnderTest.call`
for the same reason; a hung call leaves a daemon thread behind, never a hung process.
"""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from pjrt_hub.abi import (
    ApiVersion,
    CompileOptions,
    ExecuteOptions,
    HostBufferSemantics,
    Limitation,
    PjrtError,
    Program,
)

from ._case import Case, CaseFailure, CaseSkipped, matching
from ._limitations import known_limitations

if TYPE_CHECKING:
    from pjrt_hub import PluginRecord, PluginRegistry
    from pjrt_hub._reports import DeclarationModel
    from pjrt_hub.abi.probe import ProbeReport

__all__ = ["PluginUnderTest", "describe", "wait_compiled"]

#: Seconds one blocking plugin call may take (an event await, a copy to host), before scaling.
CALL_TIMEOUT = 5.0
#: Compiling may legitimately take longer (numba, XLA).
COMPILE_TIMEOUT = 60.0


def describe(exc: BaseException) -> str:
    """An exception in one line: ``INVALID_ARGUMENT: message`` for PJRT errors."""
    if isinstance(exc, PjrtError):
        return f"{exc.code.name}: {exc.message}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def wait_compiled(executable: Any) -> None:
    """Wait until the plugin runs ``executable`` at full speed: numba_cpu answers first from its
    eager tier and switches to code compiled in the background (its program's
    ``wait_compiled``); other plugins have nothing to wait for."""
    try:
        program = getattr(executable, "unwrapped", executable).get_executable().program
    except (AttributeError, PjrtError):
        return
    wait = getattr(program, "wait_compiled", None)
    if callable(wait):
        wait()


def _plugin_frame(exc: BaseException) -> str:
    """Where a bare Python exception came from, for failure messages (the innermost frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {last.filename}:{last.lineno} in {last.name})"


@dataclass
class _Slot:
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None
    #: For an object the cases share: the cases waiting for it now, and the first case that
    #: failed on it (its error, or a wait that ran out), which later cases name when they are
    #: skipped (see ``PluginUnderTest._lazy``).
    waiting: set[str] = field(default_factory=set)
    failed_in: str | None = None

    def fill(self, factory: Callable[[], Any]) -> None:
        try:
            self.value = factory()
        except BaseException as exc:  # noqa: BLE001 - handed to every waiter
            self.error = exc
        finally:
            self.done.set()


class PluginUnderTest:
    """One plugin, as the cases see it."""

    def __init__(self, registry: "PluginRegistry", name: str, *, timeout_scale: float = 1.0) -> None:
        self.registry = registry
        record = registry.record(name)
        self.name = record.name
        self.kind = record.kind
        #: The record as the registry loaded it, before any case ran (version/loaded judges it).
        self.load_record: "PluginRecord" = record
        self.framework: ApiVersion = registry.policy.framework
        self.timeout_scale = timeout_scale
        #: What the plugin declared, as the registry read it (None for a C plugin).
        self.declaration: "DeclarationModel | None" = registry.declaration(name)
        #: What the loader read of a C plugin's library (None for a Python plugin).
        self.probe: "ProbeReport | None" = registry.probe_report(name)
        self._lock = threading.Lock()
        self._slots: dict[str, _Slot] = {}
        self._memo: dict[str, Any] = {}
        #: The plugin call in progress, for the message of a case that runs out of time.
        self.step = ""
        #: The case running now (set by ``run_case``), for the messages of later cases.
        self.case_id: str | None = None

    # -- what the registry knows ---------------------------------------------------------------

    @property
    def record(self) -> "PluginRecord":
        """The registry's record of the plugin, as it is now: a Python plugin whose
        ``pjrt_hub_get_api`` fails, or whose Api reports another version than it declared, is
        recorded as failed when a case first asks for its Api."""
        return self.registry.current_record(self.name)

    @property
    def loaded(self) -> bool:
        return self.record.outcome.value == "loaded"

    @property
    def declared_version(self) -> ApiVersion | None:
        return None if self.record.api_version is None else ApiVersion.parse(self.record.api_version)

    @property
    def call_limit(self) -> int | None:
        verdict = self.record.verdict
        if verdict is None or verdict.call_limit is None:
            return None
        return ApiVersion.parse(verdict.call_limit).minor

    @property
    def offered_extensions(self) -> dict[str, int]:
        return dict(self.record.extensions)

    @property
    def limitations(self) -> tuple[Limitation, ...]:
        declared: tuple[Limitation, ...] = ()
        if self.declaration is not None:
            declared = tuple(Limitation(x.description, tuple(x.cases)) for x in self.declaration.limitations)
        return declared + known_limitations(self.record, self.probe)

    def limitation_for(self, item: Case) -> Limitation | None:
        for limitation in self.limitations:
            if matching(item.id, limitation.cases):
                return limitation
        return None

    def not_applicable(self, item: Case) -> str | None:
        """Why ``item`` cannot run on this plugin, or None if it can."""
        if not item.applies_to_kind(self.kind):
            return f"a check for {item.kind} plugins; {self.name} is a {self.kind} plugin"
        if item.id == "version/loaded":
            return None
        if not self.loaded:
            # Loaded before any case ran: the failure came later, from its Api.
            where = ("the first case that asked for its Api failed with the details"
                     if self.load_record.outcome.value == "loaded" else "see version/loaded")
            return f"plugin {self.name} cannot be used ({self.record.outcome.value}: {self.record.reason}); {where}"
        declared = self.declared_version
        if item.min_api_minor and declared is not None and declared.minor < item.min_api_minor:
            return (f"needs PJRT API 0.{item.min_api_minor}; plugin {self.name} implements {declared}")
        if item.min_api_minor and self.framework.minor < item.min_api_minor:
            return (f"needs PJRT API 0.{item.min_api_minor}; the framework acts as {self.framework} "
                    "(--framework-version)")
        missing = [x for x in item.needs_extensions if x not in self.offered_extensions]
        if missing:
            offered = ", ".join(sorted(self.offered_extensions)) or "none"
            return f"needs the {', '.join(missing)} extension; plugin {self.name} offers {offered}"
        return None

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()`` once per run (for facts several cases need); not cached if it raises."""
        with self._lock:
            if key in self._memo:
                return self._memo[key]
        value = make()
        with self._lock:
            return self._memo.setdefault(key, value)

    # -- bounded calls -------------------------------------------------------------------------

    def seconds(self, base: float) -> float:
        return base * self.timeout_scale

    def call(self, fn: Callable[..., Any], *args: Any, what: str, timeout: float = CALL_TIMEOUT,
             **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in a thread; fail if it does not return within ``timeout`` s."""
        limit = self.seconds(timeout)
        slot = _Slot()
        self.step = what
        worker = threading.Thread(target=slot.fill, args=(lambda: fn(*args, **kwargs),),
                                  name=f"pjrt-conformance {what}", daemon=True)
        worker.start()
        if not slot.done.wait(limit):
            raise CaseFailure(f"{what} did not return within {limit:g} s")
        if slot.error is not None:
            raise slot.error
        return slot.value

    def _lazy(self, key: str, factory: Callable[[], Any], what: str, timeout: float) -> Any:
        with self._lock:
            slot = self._slots.get(key)
            start = slot is None
            if slot is None:
                slot = self._slots[key] = _Slot()
        if start:
            threading.Thread(target=slot.fill, args=(factory,), name=f"pjrt-conformance {what}",
                             daemon=True).start()
        limit = self.seconds(timeout)
        self.step = what
        # One defect, one failure: the first case that meets it fails; every later case that
        # needs the same object is skipped with the cause (and not made to wait again for a
        # call that hangs: if it returns after all, later cases use what it returned).
        case_id = self.case_id
        earlier = slot.failed_in if case_id is not None and slot.failed_in not in (None, case_id) else None
        if earlier is not None and not slot.done.is_set():
            raise CaseSkipped(f"{what} has not returned: {earlier} waited for it and failed; not waited for again")
        if case_id is not None:
            slot.waiting.add(case_id)
        try:
            finished = slot.done.wait(limit)
        finally:
            slot.waiting.discard(case_id or "")
        if not finished:
            slot.failed_in = slot.failed_in or case_id
            raise CaseFailure(f"{what} did not finish within {limit:g} s")
        if slot.error is not None:
            exc = slot.error
            if isinstance(exc, (CaseFailure, CaseSkipped)):
                raise exc
            cause = f"{describe(exc)}{_plugin_frame(exc) if not isinstance(exc, PjrtError) else ''}"
            if earlier is not None:
                raise CaseSkipped(f"{what} failed (first met in {earlier}): {cause}")
            slot.failed_in = slot.failed_in or case_id
            raise CaseFailure(f"{what} failed: {cause}")
        return slot.value

    def case_timed_out(self, case_id: str) -> None:
        """``case_id`` ran out of time: if it was waiting for a shared object, that object is
        one it failed on (later cases are skipped rather than made to wait again)."""
        with self._lock:
            slots = list(self._slots.values())
        for slot in slots:
            if case_id in slot.waiting and not slot.done.is_set():
                slot.failed_in = slot.failed_in or case_id

    # -- the shared objects --------------------------------------------------------------------

    @property
    def api(self) -> Any:
        """The plugin's Api through the version gate."""
        return self._lazy("api", lambda: self.registry.api(self.name), "getting the plugin's Api",
                          COMPILE_TIMEOUT)

    @property
    def client(self) -> Any:
        """One client for the whole run, created once (``PJRT_Client_Create``)."""
        _ = self.api  # the client comes from the Api: a case meets (or is skipped for) its failure first
        return self._lazy("client", lambda: self.registry.create_client(self.name), "creating a client",
                          COMPILE_TIMEOUT)

    @property
    def devices(self) -> list[Any]:
        devices = self.client.addressable_devices()
        if not devices:
            raise CaseFailure("PJRT_Client_AddressableDevices returned no device")
        return devices

    @property
    def device(self) -> Any:
        return self.devices[0]

    def need_devices(self, count: int) -> list[Any]:
        devices = self.devices
        if len(devices) < count:
            raise CaseSkipped(f"needs {count} addressable devices; plugin {self.name} has {len(devices)}")
        return devices[:count]

    # -- the usual sequences, each step bounded ------------------------------------------------

    def await_event(self, event: Any, what: str, timeout: float = CALL_TIMEOUT) -> None:
        """Await a plugin event; fail if it does not become ready within ``timeout`` s."""
        limit = self.seconds(timeout)
        # The timeout goes to the plugin too, so a well-behaved plugin leaves no thread behind;
        # the thread's own bound catches one that ignores it.
        self.call(event.await_, limit, what=f"{what}: PJRT_Event_Await", timeout=timeout + 1.0)
        if not event.is_ready():
            raise CaseFailure(f"{what}: PJRT_Event_Await returned, but PJRT_Event_IsReady is false")

    def put(self, array: np.ndarray | np.generic, *, device: Any = None, memory: Any = None,
            semantics: HostBufferSemantics = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
            wait: bool = True) -> Any:
        """``PJRT_Client_BufferFromHostBuffer`` and wait until the host array is free again."""
        kwargs: dict[str, Any] = {"semantics": semantics}
        if memory is not None:
            kwargs["memory"] = memory
        else:
            kwargs["device"] = device if device is not None else self.device
        transfer = self.call(self.client.buffer_from_host_buffer, array, what="PJRT_Client_BufferFromHostBuffer",
                             **kwargs)
        if wait:
            self.await_event(transfer.done_with_host_buffer, "done_with_host_buffer")
        return transfer.buffer

    def fetch(self, buffer: Any) -> np.ndarray:
        """``PJRT_Buffer_ToHostBuffer`` into a new array, awaited."""
        result = self.call(buffer.to_host_buffer, what="PJRT_Buffer_ToHostBuffer")
        self.await_event(result.event, "PJRT_Buffer_ToHostBuffer")
        return np.asarray(result.array)

    def compile(self, text: str, options: CompileOptions | bytes | None = None, *, fmt: str = "mlir",
                timeout: float = COMPILE_TIMEOUT) -> Any:
        return self.call(self.client.compile, Program(text, fmt), options if options is not None else CompileOptions(),
                         what="PJRT_Client_Compile", timeout=timeout)

    def execute(self, executable: Any, argument_lists: Sequence[Sequence[Any]],
                options: ExecuteOptions | None = None, timeout: float = COMPILE_TIMEOUT) -> list[list[Any]]:
        """``PJRT_LoadedExecutable_Execute``; waits for every device's completion event."""
        result = self.call(executable.execute, [list(a) for a in argument_lists], options or ExecuteOptions(),
                           what="PJRT_LoadedExecutable_Execute", timeout=timeout)
        outputs, events = result.outputs, result.device_complete_events
        if len(outputs) != len(argument_lists):
            raise CaseFailure(f"PJRT_LoadedExecutable_Execute returned outputs for {len(outputs)} devices, "
                              f"expected {len(argument_lists)}")
        for i, event in enumerate(events or ()):
            if event is not None:
                self.await_event(event, f"device_complete_events[{i}]", timeout=timeout)
        return outputs

    def run(self, executable: Any, *arrays: np.ndarray, device: Any = None) -> list[np.ndarray]:
        """Put ``arrays`` on one device, execute, and fetch every output."""
        buffers = [self.put(a, device=device) for a in arrays]
        outputs = self.execute(executable, [buffers])
        return [self.fetch(b) for b in outputs[0]]
