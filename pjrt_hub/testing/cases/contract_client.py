"""Cases from reading pjrt_c_api.h's client functions sentence by sentence (pjrt_hub.testing.contract.client
lists each behaviour and the case that checks it).

The header says who owns what these calls return and for how long: a platform name, a device
list, a memory's kind, a topology and its attributes belong to the client, the device, the
topology or the process and live as long as it does, so they answer the same on every call, and
what the caller got is the caller's (writing into the list or the attributes it got changes
nothing in the plugin). Lookups hand back the very handles the client lists, a new client is a
client of its own, a device's kind names its kind of device rather than the device, an event's
error is the same however often and however it is asked for, an OnReady callback finds its event
ready, an event the caller destroys is only the caller's handle, never the work it tracks, and
the bytes of a serialized topology give back that topology. Create options are the platform's,
so the cases that pass them (XLA's cpu_device_count; num_nodes and node_id with the key-value
callbacks, two processes of a job played in this process) skip a plugin that does not take them
and check that a plugin that does honours them. Each case builds what it mutates on a client or
topology of its own, so a defect it finds cannot spill into later cases.
"""

from __future__ import annotations

import copy
import sys
import threading
import time
from typing import Any

import numpy as np

from pjrt_hub.abi import DeadlineExceeded, ExecuteOptions, NotFound, PjrtError, Unimplemented

from .._case import CaseSkipped, case, check, fail, skip
from .._context import CALL_TIMEOUT, COMPILE_TIMEOUT, PluginUnderTest, describe
from .._programs import add_one, failing_program
from .client import device_id
from .events import COMPILING, SlowWork, slow_work
from .plugin import _is_named_value

#: A key no plugin reports: what a caller writes into the mappings it got.
PROBE_KEY = "pjrt_hub_conformance_probe"


def _new_client(ctx: PluginUnderTest) -> Any:
    """A client of the case's own (``PJRT_Client_Create`` the way the run's client was made)."""
    _ = ctx.client  # the plugin is initialized, and a failure to create clients is met there first
    return ctx.call(ctx.registry.create_client, ctx.name, what="PJRT_Client_Create", timeout=COMPILE_TIMEOUT)


def _destroy(ctx: PluginUnderTest, client: Any) -> None:
    ctx.call(client.destroy, what="PJRT_Client_Destroy", timeout=COMPILE_TIMEOUT)


def _round_trip(ctx: PluginUnderTest, client: Any, array: np.ndarray, what: str) -> np.ndarray:
    """Put ``array`` on the first addressable device of ``client`` and read it back."""
    device = client.addressable_devices()[0]
    transfer = ctx.call(client.buffer_from_host_buffer, array, device=device,
                        what=f"PJRT_Client_BufferFromHostBuffer on {what}")
    ctx.await_event(transfer.done_with_host_buffer, f"done_with_host_buffer on {what}")
    return ctx.fetch(transfer.buffer)


def _same_status(a: PjrtError | None, b: PjrtError | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return (a.code, a.message) == (b.code, b.message)


def _status(error: PjrtError | None) -> str:
    return "no error" if error is None else describe(error)


def _first_change(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """The first call whose answer differs between two snapshots, said as ``call: a then b``."""
    for call, value in before.items():
        if after[call] != value:
            return f"{call} answered {value!r}, then {after[call]!r}"
    return None


# -- plugin ------------------------------------------------------------------------------------------


@case("plugin")
def attributes_stay_the_same(ctx: PluginUnderTest) -> None:
    """PJRT_Plugin_Attributes answers the same on every call (the attributes live as long as the
    process), and what a caller does to the mapping it got, and to the lists in it, changes
    nothing the plugin reports later."""
    first = ctx.api.plugin_attributes()
    expected = copy.deepcopy(first)
    second = ctx.api.plugin_attributes()
    check(second == expected, f"PJRT_Plugin_Attributes answered {expected!r}, then {second!r}: the attributes live "
                              "as long as the process and do not change")
    for value in first.values():
        if isinstance(value, list):
            value.append(-1)
    first[PROBE_KEY] = "written by the caller"
    third = ctx.api.plugin_attributes()
    check(third == expected, f"after the caller changed the mapping PJRT_Plugin_Attributes gave it, the plugin "
                             f"reports {third!r} (it reported {expected!r}): it handed out its own attributes, "
                             "not the caller's copy")


# -- client ------------------------------------------------------------------------------------------


@case("client")
def create_makes_a_new_client(ctx: PluginUnderTest) -> None:
    """PJRT_Client_Create makes a new client each time: two clients made one after the other are
    distinct, each has the platform's devices and holds data, and PJRT_Client_Destroy of one
    leaves the other, and the run's own client, working."""
    shared = ctx.client
    first = _new_client(ctx)
    second = None
    try:
        second = _new_client(ctx)
        for made in (first, second):
            check(made.unwrapped is not shared.unwrapped,
                  "PJRT_Client_Create returned the client an earlier PJRT_Client_Create made: it creates a new client")
        check(first.unwrapped is not second.unwrapped,
              "two PJRT_Client_Create calls returned one client: each call creates a new client")
        expected = (shared.platform_name(), len(shared.devices()))
        for made in (first, second):
            got = (made.platform_name(), len(made.devices()))
            check(got == expected, f"a new client is of platform {got[0]!r} with {got[1]} devices; the run's client "
                                   f"of {expected[0]!r} with {expected[1]}")
        host = np.arange(4, dtype=np.float32) * 3 - 1
        back = _round_trip(ctx, second, host, "the second new client")
        check(np.array_equal(back, host), f"a new client read back {back.tolist()}, expected {host.tolist()}")
        _destroy(ctx, second)
        second = None
        for client, what in ((first, "the other new client"), (shared, "the run's client")):
            back = _round_trip(ctx, client, host, f"{what}, after PJRT_Client_Destroy of another client")
            check(np.array_equal(back, host), f"after PJRT_Client_Destroy of one client, {what} read back "
                                              f"{back.tolist()}, expected {host.tolist()}")
    finally:
        for client in (second, first):
            if client is not None:
                _destroy(ctx, client)


class _Store:
    """The three key-value callbacks over a dict, thread-safe as the header asks of the caller.
    A get waits at most :data:`_GET_LIMIT` s, so a plugin that waits for a key nobody puts fails
    the case instead of hanging it."""

    _GET_LIMIT = 2.0

    def __init__(self, limit: float = _GET_LIMIT) -> None:
        self._values: dict[str, bytes] = {}
        self._changed = threading.Condition()
        self._limit = limit
        #: Whether the plugin called any of the callbacks: a plugin that never does takes no
        #: part in a job, whatever options it was given.
        self.used = False

    def get(self, key: str, timeout: float) -> bytes:
        limit = min(timeout, self._limit)
        deadline = time.monotonic() + limit
        with self._changed:
            self.used = True
            while key not in self._values:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeadlineExceeded(f"key {key!r} was not put within {limit:g} s")
                self._changed.wait(left)
            return self._values[key]

    def try_get(self, key: str) -> bytes | None:
        with self._changed:
            self.used = True
            return self._values.get(key)

    def put(self, key: str, value: bytes) -> None:
        with self._changed:
            self.used = True
            self._values[key] = bytes(value)
            self._changed.notify_all()


class _GarbledStore(_Store):
    """A store whose every get answers bytes no plugin wrote (a framework's store gone bad)."""

    GARBLE = b"\xff\x00 not what any process put \x00\xff"

    def get(self, key: str, timeout: float) -> bytes:
        super().put(key, self.GARBLE)
        return super().get(key, timeout)

    def try_get(self, key: str) -> bytes | None:
        super().try_get(key)
        return self.GARBLE


@case("client")
def create_takes_key_value_callbacks(ctx: PluginUnderTest) -> None:
    """The key-value callbacks of PJRT_Client_Create are optional help for clients of several
    processes: a single-process client created with them (as JAX does once jax.distributed is
    initialized) is made and works, as without them."""
    _ = ctx.client  # initialized, as PJRT_Plugin_Initialize must come first
    what = "PJRT_Client_Create with key-value callbacks (one process)"
    try:
        client = ctx.call(ctx.api.client_create, None, kv_store=_Store(), what=what, timeout=COMPILE_TIMEOUT)
    except Unimplemented as exc:
        skip(f"plugin {ctx.name} (or the transport to it) does not take key-value callbacks: {describe(exc)}")
    except PjrtError as exc:
        fail(f"{what} failed with {describe(exc)}: the callbacks are optional, offered for the plugin to use "
             "where it needs them; a single-process client does not need them and is made all the same")
    try:
        host = np.array([2.5, -1.0, 0.0, 7.0], np.float32)
        got = _round_trip(ctx, client, host, "a client given key-value callbacks")
        check(np.array_equal(got, host), f"a client created with key-value callbacks read back {got.tolist()}, "
                                         f"expected {host.tolist()}")
    finally:
        _destroy(ctx, client)


#: XLA's name for the device count of a CPU client (the create option JAX's CPU backends take).
_CPU_DEVICE_COUNT = "cpu_device_count"


def _create_or_refusal(ctx: PluginUnderTest, options: dict[str, Any], what: str, **kwargs: Any) -> Any:
    """The client ``PJRT_Client_Create`` makes with ``options``, or the PjrtError it answered."""
    try:
        return ctx.call(ctx.api.client_create, options, what=what, timeout=COMPILE_TIMEOUT, **kwargs)
    except PjrtError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - a plugin's bare exception is a finding of its own
        fail(f"{what} raised {describe(exc)}: a plugin reports a failure as a PJRT error")


@case("client")
def device_count_option(ctx: PluginUnderTest) -> None:
    """A CPU plugin that takes XLA's cpu_device_count create option honours it: a client created
    with cpu_device_count=1, 2 or 6 has that many devices, all addressable (and so has a topology
    PJRT_TopologyDescription_Create makes with it, where the plugin makes topologies); it does not
    take the option for some counts and refuse it for others."""
    if ctx.client.platform_name() != "cpu":
        skip(f"plugin {ctx.name} is of platform {ctx.client.platform_name()!r}: cpu_device_count is the cpu "
             "platform's option (create options are platform-specific)")
    refused: dict[int, PjrtError] = {}
    honoured: list[int] = []
    for count in (1, 2, 6):
        what = f"PJRT_Client_Create with {_CPU_DEVICE_COUNT}={count}"
        made = _create_or_refusal(ctx, {_CPU_DEVICE_COUNT: count}, what)
        if isinstance(made, PjrtError):
            refused[count] = made
            continue
        try:
            got = (len(made.devices()), len(made.addressable_devices()))
            check(got == (count, count), f"{what} made a client of {got[0]} devices, {got[1]} of them addressable: "
                                         f"the option asks for {count} devices of this process")
        finally:
            _destroy(ctx, made)
        honoured.append(count)
        try:
            topology = ctx.call(ctx.api.topology_create, {_CPU_DEVICE_COUNT: count},
                                what=f"PJRT_TopologyDescription_Create with {_CPU_DEVICE_COUNT}={count}")
        except PjrtError:
            continue  # no topologies without a client here, or not with this option
        try:
            described = len(topology.get_device_descriptions())
            check(described == count, f"PJRT_TopologyDescription_Create with {_CPU_DEVICE_COUNT}={count} describes "
                                      f"{described} devices; the plugin's clients take the option as {count} devices")
        finally:
            ctx.call(topology.destroy, what="PJRT_TopologyDescription_Destroy")
    if honoured and refused:
        count, exc = next(iter(refused.items()))
        fail(f"PJRT_Client_Create takes {_CPU_DEVICE_COUNT}={honoured[0]} but refuses {_CPU_DEVICE_COUNT}={count} "
             f"({describe(exc)}): a plugin that takes the option makes a client of any such count")
    if not honoured:
        # Every count refused: the option may be unknown here, or the plugin refuses every count
        # it knows; a count it takes where it refused real ones tells the second apart.
        made = _create_or_refusal(ctx, {_CPU_DEVICE_COUNT: 0}, f"PJRT_Client_Create with {_CPU_DEVICE_COUNT}=0")
        if isinstance(made, PjrtError):
            skip(f"plugin {ctx.name} does not take the {_CPU_DEVICE_COUNT} option: "
                 f"{describe(next(iter(refused.values())))}")
        _destroy(ctx, made)
        fail(f"PJRT_Client_Create takes {_CPU_DEVICE_COUNT}=0 but refuses 1, 2 and 6 "
             f"({describe(refused[2])}): the plugin knows the option and refuses every count of devices it could make")


def _job_clients(ctx: PluginUnderTest, store: _Store, nodes: int) -> list[Any]:
    """Clients of every process of a job of ``nodes`` processes, made at once in this process
    and meeting through one store: each its client, or the PjrtError it answered."""
    made: list[Any] = [None] * nodes

    def create(node: int) -> None:
        made[node] = _create_or_refusal(ctx, {"num_nodes": nodes, "node_id": node},
                                        f"PJRT_Client_Create as process {node} of {nodes}", kv_store=store)

    threads = [threading.Thread(target=create, args=(node,), daemon=True) for node in range(nodes)]
    for thread in threads:
        thread.start()
    wait = ctx.seconds(COMPILE_TIMEOUT) + 5.0
    for thread in threads:
        thread.join(wait)
    missing = [node for node, m in enumerate(made) if m is None]
    check(not missing, f"PJRT_Client_Create as process {missing} of a job of {nodes} processes had not returned "
                       f"after {wait:g} s; expected every process's call to return, with a client or an error")
    return made


def _job_view(client: Any) -> dict[int, tuple[int, bool]]:
    """Device id -> (PJRT_DeviceDescription_ProcessIndex, PJRT_Device_IsAddressable), as a client sees them."""
    view: dict[int, tuple[int, bool]] = {}
    for device in client.devices():
        wanted = device_id(device)
        check(wanted not in view, f"process {client.process_index()}'s PJRT_Client_Devices lists device {wanted} twice")
        view[wanted] = (device.get_description().process_index(), device.is_addressable())
    return view


@case("client")
def joins_a_job_through_the_store(ctx: PluginUnderTest) -> None:
    """Where a plugin makes clients for the processes of a job (XLA's num_nodes and node_id
    create options, with the key-value callbacks), two clients made as processes 0 and 1 of one
    job, meeting through one store, see one job: each has its own process index, both list every
    device of the job once with the same ids, and each addresses exactly the devices of its own
    process. Process 2 of a job of 1 is refused; a peer that never joins, or a store that answers
    bytes no process wrote, make PJRT_Client_Create fail with a PJRT error, not hang or crash."""
    _ = ctx.client  # initialized, as PJRT_Plugin_Initialize must come first
    alone = _create_or_refusal(ctx, {"num_nodes": 1, "node_id": 0}, "PJRT_Client_Create as process 0 of 1",
                               kv_store=_Store())
    if isinstance(alone, Unimplemented):
        skip(f"plugin {ctx.name} (or the transport to it) does not take key-value callbacks: {describe(alone)}")
    if isinstance(alone, PjrtError):
        skip(f"plugin {ctx.name} does not take the num_nodes and node_id create options: {describe(alone)}")
    _destroy(ctx, alone)
    store = _Store(limit=ctx.seconds(CALL_TIMEOUT))
    clients = _job_clients(ctx, store, 2)
    try:
        refusals = [(node, m) for node, m in enumerate(clients) if isinstance(m, PjrtError)]
        if not store.used and all(not isinstance(m, PjrtError) and m.process_index() == 0
                                  and len(m.addressable_devices()) == len(m.devices()) for m in clients):
            skip(f"plugin {ctx.name} takes num_nodes and node_id but makes single-process clients of them (it "
                 "never called the key-value callbacks): it does not make clients of multi-process jobs")
        if refusals and all(isinstance(m, Unimplemented) for _, m in refusals) and not store.used:
            skip(f"plugin {ctx.name} makes no clients of multi-process jobs: {describe(refusals[0][1])}")
        for node, exc in refusals:
            fail(f"PJRT_Client_Create as process {node} of a job of 2 (with process {1 - node} created at the same "
                 f"time through the same key-value store) failed with {describe(exc)}, though the plugin makes "
                 "process 0 of a job of 1: 0 <= node_id < num_nodes is a place in the job")
        views = [_job_view(c) for c in clients]
        indices = [c.process_index() for c in clients]
        check(indices[0] != indices[1], f"both processes of the job report PJRT_Client_ProcessIndex {indices[0]}: "
                                        "each process of a job has its own index")
        check(sorted(views[0]) == sorted(views[1]),
              f"process 0 lists devices {sorted(views[0])}, process 1 devices {sorted(views[1])}: "
              "PJRT_Client_Devices lists every device of the job, with the ids every process uses")
        for client, view, index in zip(clients, views, indices):
            mine = sorted(i for i, (_, addressable) in view.items() if addressable)
            check(mine == sorted(device_id(d) for d in client.addressable_devices()) and mine,
                  f"process {index}: PJRT_Device_IsAddressable holds for devices {mine}, PJRT_Client_AddressableDevices "
                  f"lists {sorted(device_id(d) for d in client.addressable_devices())}")
            for wanted, (process, addressable) in view.items():
                check(addressable == (process == index),
                      f"process {index} sees device {wanted} of process {process} as "
                      f"{'' if addressable else 'not '}addressable: a client addresses the devices of its own "
                      "process, and only those")
        for wanted in views[0]:
            check(views[0][wanted][0] == views[1][wanted][0],
                  f"device {wanted} belongs to process {views[0][wanted][0]} for process {indices[0]} and to process "
                  f"{views[1][wanted][0]} for process {indices[1]}: the processes see one job")
    finally:
        for client in clients:
            if not isinstance(client, PjrtError):
                _destroy(ctx, client)
    for options, what, given in (
            ({"num_nodes": 1, "node_id": 2}, "as process 2 of a job of 1", _Store()),
            ({"num_nodes": 2, "node_id": 1}, "as process 1 of 2 whose process 0 never joins",
             _Store(limit=min(0.5, ctx.seconds(CALL_TIMEOUT)))),
            ({"num_nodes": 2, "node_id": 1}, "as process 1 of 2 through a store that answers bytes no process put",
             _GarbledStore(limit=ctx.seconds(CALL_TIMEOUT)))):
        made = _create_or_refusal(ctx, options, f"PJRT_Client_Create {what}", kv_store=given)
        if not isinstance(made, PjrtError):
            _destroy(ctx, made)
            fail(f"PJRT_Client_Create {what} made a client of process {made.process_index()}: it fails with an "
                 "error, as there is no such job to take part in")


def _client_answers(client: Any) -> dict[str, Any]:
    return {
        "PJRT_Client_PlatformName": client.platform_name(),
        "PJRT_Client_PlatformVersion": client.platform_version(),
        "PJRT_Client_ProcessIndex": client.process_index(),
        "PJRT_Client_Devices": [device_id(d) for d in client.devices()],
        "PJRT_Client_AddressableDevices": [device_id(d) for d in client.addressable_devices()],
        "PJRT_Client_AddressableMemories": [(m.kind(), m.id()) for m in client.addressable_memories()],
    }


@case("client", "answers_stay_the_same")
def client_answers_stay_the_same(ctx: PluginUnderTest) -> None:
    """What the client owns answers the same for as long as it lives: platform name and version,
    process index, the devices, the addressable devices and memories, in the same order on every
    call; and emptying a list a call returned (it is the caller's) changes none of them."""
    client = _new_client(ctx)
    try:
        first = _client_answers(client)
        changed = _first_change(first, _client_answers(client))
        check(changed is None, f"{changed} on a second call: what the client owns stays the same while it lives")
        # On the plugin's own client: the version gate hands out lists of its own, which would
        # hide a plugin's list from this caller but not from a host that reaches it ungated.
        own = client.unwrapped
        for listed in (own.devices(), own.addressable_devices(), own.addressable_memories()):
            listed.clear()
        changed = _first_change(first, _client_answers(client))
        check(changed is None, f"{changed} after the caller emptied the lists these calls had returned: the client "
                               "handed out its own list, not one of the caller's")
    finally:
        _destroy(ctx, client)


@case("client")
def single_process_addresses_everything(ctx: PluginUnderTest) -> None:
    """In a single-process client every device is addressable (PJRT_Client_AddressableDevices lists
    all of PJRT_Client_Devices, and PJRT_Device_IsAddressable holds for each) and every memory of
    every device is among PJRT_Client_AddressableMemories."""
    client = ctx.client
    devices = client.devices()
    mine = client.process_index()
    elsewhere = [device_id(d) for d in devices if d.get_description().process_index() != mine]
    if elsewhere:
        skip(f"devices {elsewhere} belong to other processes: the client is one of a multi-process job")
    every = sorted(device_id(d) for d in devices)
    addressable = sorted(device_id(d) for d in client.addressable_devices())
    check(addressable == every, f"PJRT_Client_AddressableDevices lists devices {addressable} of {every}, all in this "
                                "process: in a single process every device is addressable")
    for device in devices:
        check(device.is_addressable(), f"PJRT_Device_IsAddressable of device {device_id(device)} is false in a "
                                       "single-process client")
    held = {(m.kind(), m.id()) for m in client.addressable_memories()}
    for device in devices:
        for memory in device.addressable_memories():
            check((memory.kind(), memory.id()) in held,
                  f"memory {memory.kind()} {memory.id()} of device {device_id(device)} is not among "
                  f"PJRT_Client_AddressableMemories {sorted(held)}: in a single process every memory is addressable")


@case("client")
def lookups_give_the_listed_handles(ctx: PluginUnderTest) -> None:
    """PJRT_Client_LookupDevice and PJRT_Client_LookupAddressableDevice hand back the very device
    PJRT_Client_Devices lists (the client owns one handle per device), the addressable devices
    are those handles too, and a buffer put on a looked-up device is on the listed one."""
    client = ctx.client
    listed = client.devices()
    for device in listed:
        wanted = device_id(device)
        for attempt in ("", ", asked again"):
            found = client.lookup_device(wanted)
            check(found == device, f"PJRT_Client_LookupDevice({wanted}){attempt} returned {found!r}, not the handle "
                                   f"PJRT_Client_Devices lists ({device!r}): the client owns one device handle")
    for device in client.addressable_devices():
        check(any(device == d for d in listed), f"PJRT_Client_AddressableDevices gave {device!r}, which is not one of "
                                                "the handles PJRT_Client_Devices lists")
        local = device.local_hardware_id()
        found = client.lookup_addressable_device(local)
        check(found == device, f"PJRT_Client_LookupAddressableDevice({local}) returned {found!r}, not the listed "
                               f"device {device!r}")
    target = ctx.device
    found = client.lookup_device(device_id(target))
    buffer = ctx.put(np.ones(4, np.float32), device=found)
    check(buffer.device() == target, f"a buffer put on the device PJRT_Client_LookupDevice({device_id(target)}) "
                                     f"returned is on {buffer.device()!r}, not on the listed device {target!r}")


# -- devices and memories -------------------------------------------------------------------------------


@case("devices")
def descriptions_and_memories_stay_the_same(ctx: PluginUnderTest) -> None:
    """A device's description (id, process index, kind), its addressable memories (the same
    handles, in the same order) and its default memory (one of them) are the device's for as long
    as it lives: every call gives the same."""
    for device in ctx.devices:
        label = f"device {device_id(device)}"
        answers: list[dict[str, Any]] = []
        for _ in range(2):
            description = device.get_description()
            answers.append({"PJRT_DeviceDescription_Id": description.id(),
                            "PJRT_DeviceDescription_ProcessIndex": description.process_index(),
                            "PJRT_DeviceDescription_Kind": description.kind(),
                            "PJRT_Device_LocalHardwareId": device.local_hardware_id()})
        changed = _first_change(answers[0], answers[1])
        check(changed is None, f"{label}: {changed} on a second call; they belong to the device and do not change")
        memories = device.addressable_memories()
        again = device.addressable_memories()
        check(len(again) == len(memories) and all(a == b for a, b in zip(memories, again)),
              f"{label}: PJRT_Device_AddressableMemories gave {memories!r}, then {again!r}: the same memories, "
              "in the same order, for as long as the device lives")
        default = device.default_memory()
        check(device.default_memory() == default, f"{label}: PJRT_Device_DefaultMemory gave two different handles")
        check(any(default == m for m in memories), f"{label}: PJRT_Device_DefaultMemory gave {default!r}, which is "
                                                   "not one of the handles PJRT_Device_AddressableMemories lists")
        for memory in memories:
            kinds = (memory.kind(), memory.kind())
            check(kinds[0] == kinds[1], f"{label}: PJRT_Memory_Kind answered {kinds[0]!r}, then {kinds[1]!r}")


@case("devices")
def debug_strings_tell_them_apart(ctx: PluginUnderTest) -> None:
    """PJRT_DeviceDescription_DebugString and PJRT_Memory_DebugString describe their device or
    memory unambiguously: no two devices of the client, and no two of its memories, share one."""
    strings: dict[str, int] = {}
    for device in ctx.client.devices():
        text = device.get_description().debug_string()
        check(isinstance(text, str) and text, f"device {device_id(device)}: PJRT_DeviceDescription_DebugString "
                                              f"returned {text!r}")
        check(text not in strings, f"devices {strings.get(text)} and {device_id(device)} both have the "
                                   f"PJRT_DeviceDescription_DebugString {text!r}: it must tell the device apart")
        strings[text] = device_id(device)
    memories: dict[str, tuple[str, int]] = {}
    for memory in ctx.client.addressable_memories():
        text, which = memory.debug_string(), (memory.kind(), memory.id())
        check(isinstance(text, str) and text, f"memory {which}: PJRT_Memory_DebugString returned {text!r}")
        check(text not in memories, f"memories {memories.get(text)} and {which} both have the PJRT_Memory_DebugString "
                                    f"{text!r}: it must tell the memory apart")
        memories[text] = which


def _likeness(device: Any) -> str:
    """What ``device`` reports beyond its identity (id, process, hardware id, strings naming it):
    its description's and its own attributes, its memories' kinds and its default memory's."""
    try:
        own: dict[str, Any] | None = device.get_attributes()
    except Unimplemented:  # before 0.92, or refused by the version gate: the description's only
        own = None
    return repr((sorted(device.get_description().attributes().items()),
                 None if own is None else sorted(own.items()),
                 sorted(m.kind() for m in device.addressable_memories()), device.default_memory().kind()))


@case("devices")
def kind_names_the_kind_not_the_device(ctx: PluginUnderTest) -> None:
    """PJRT_DeviceDescription_Kind identifies the kind of device, not the device: devices that
    report the same in everything but their identity (attributes, the kinds of their memories)
    do not each have a kind of their own (checked among the addressable devices)."""
    alike: dict[str, list[Any]] = {}
    for device in ctx.client.addressable_devices():  # another process's devices list no memories here
        alike.setdefault(_likeness(device), []).append(device)
    for devices in alike.values():
        if len(devices) < 2:
            continue
        # Only a kind per device is a finding: a plugin whose attributes do not tell its kinds of
        # device apart (two A100s and two V100s, no attributes) reports two kinds among four
        # devices, and that is right. One device of each of two such kinds would read as the
        # defect; a plugin that has them and reports nothing that differs is not one we know of.
        kinds = {device_id(d): d.get_description().kind() for d in devices}
        check(len(set(kinds.values())) < len(kinds),
              f"PJRT_DeviceDescription_Kind gives each of the devices {sorted(kinds)} a kind of its own "
              f"({', '.join(f'{i}: {k!r}' for i, k in kinds.items())}), though they report the same attributes and "
              "memories: the kind identifies the kind of device (as 'Tesla V100-SXM2-16GB' does), the same string "
              "for devices of one kind; telling devices apart is what ids and debug strings are for")


#: What a caller writes into the attributes it got: a name no plugin uses, and an int appended to
#: every list value (attribute lists are int64 lists).
_WRITTEN = -424242


def _write_into(attributes: dict[str, Any]) -> None:
    for value in attributes.values():
        if isinstance(value, list):
            value.append(_WRITTEN)
    attributes[PROBE_KEY] = "written by the caller"


def _shows_writes(attributes: dict[str, Any]) -> bool:
    return PROBE_KEY in attributes or any(isinstance(v, list) and _WRITTEN in v for v in attributes.values())


@case("devices")
def attributes_are_the_callers(ctx: PluginUnderTest) -> None:
    """PJRT_DeviceDescription_Attributes answers the same on every call (the attributes belong to
    the description), and PJRT_Device_GetAttributes hands each call attributes of its own (the
    caller frees them with the deleter it gets): what a caller writes into the mapping either gave
    it, or into the lists in it, shows in no later answer of either."""
    client = _new_client(ctx)
    try:
        for device in client.devices():
            label = f"device {device_id(device)}"
            description = device.get_description()
            got = description.attributes()
            expected = copy.deepcopy(got)
            _write_into(got)
            again = description.attributes()
            check(again == expected, f"{label}: after the caller changed the attributes it got, "
                                     f"PJRT_DeviceDescription_Attributes answers {again!r} (it answered {expected!r}): "
                                     "the description handed out its own attributes, not the caller's copy")
            try:
                own = device.get_attributes()
            except Unimplemented:
                continue  # before 0.92, or refused by the version gate
            check(not _shows_writes(own), f"{label}: PJRT_Device_GetAttributes answers {own!r}, with what the caller "
                                          "wrote into the description's attributes it had got")
            # Not compared with an earlier answer: a device's attributes may be live values.
            _write_into(own)
            later = device.get_attributes()
            check(not _shows_writes(later),
                  f"{label}: after the caller changed the attributes PJRT_Device_GetAttributes gave it, the next call "
                  f"answers {later!r}, with those writes: each call gives the caller attributes of its own (it frees "
                  "them with the deleter the call returns), not the device's")
            described = description.attributes()
            check(described == expected, f"{label}: after the caller changed what PJRT_Device_GetAttributes gave it, "
                                         f"PJRT_DeviceDescription_Attributes answers {described!r}, not {expected!r}")
    finally:
        _destroy(ctx, client)


@case("memories")
def ids_unique_within_a_kind(ctx: PluginUnderTest) -> None:
    """PJRT_Memory_Id tells memories of a kind apart: no two memories of the same kind, among all
    those the client and its devices list, share an id."""
    seen: list[Any] = []
    for memory in [*ctx.client.addressable_memories(), *(m for d in ctx.devices for m in d.addressable_memories())]:
        if not any(memory == other for other in seen):
            seen.append(memory)
    owner: dict[tuple[str, int], list[int]] = {}
    for memory in seen:
        key = (memory.kind(), memory.id())
        users = sorted(device_id(d) for d in memory.addressable_by_devices())
        check(key not in owner, f"two memories of kind {key[0]!r} have the id {key[1]} (one addressed by devices "
                                f"{owner.get(key)}, one by devices {users}): PJRT_Memory_Id is unique among memories "
                                "of a kind")
        owner[key] = users


# -- events ------------------------------------------------------------------------------------------


def _failed_events(ctx: PluginUnderTest) -> list[tuple[str, Any]]:
    """Events that end with an error: the ready event of a deleted buffer (the header has it
    indicate an error at once) and the completion event of an execution that fails while it
    runs; a plugin may refuse either at the call instead, which leaves that one out."""
    events: list[tuple[str, Any]] = []
    buffer = ctx.put(np.zeros(4, np.float32))
    buffer.delete()
    try:
        events.append(("PJRT_Buffer_ReadyEvent of a deleted buffer",
                       ctx.call(buffer.ready_event, what="PJRT_Buffer_ReadyEvent of a deleted buffer")))
    except PjrtError:
        pass
    try:
        executable = ctx.compile(failing_program())
        args = [ctx.put(np.ones(4, np.float32)), ctx.put(np.array(2.0, np.float32))]
        result = ctx.call(executable.execute, [args], ExecuteOptions(), what="PJRT_LoadedExecutable_Execute "
                          "(a program that cannot allocate its output)", timeout=60.0)
        events.append(("the completion event of a failed execution", result.device_complete_events[0]))
    except PjrtError:
        pass
    return events


def _await_status(ctx: PluginUnderTest, event: Any, what: str) -> PjrtError | None:
    try:
        ctx.call(event.await_, ctx.seconds(CALL_TIMEOUT), what=f"{what}: PJRT_Event_Await", timeout=CALL_TIMEOUT + 1)
    except PjrtError as exc:
        check(event.is_ready(), f"{what} was not ready after PJRT_Event_Await ({describe(exc)})")
        return exc
    return None


@case("events", timeout=COMPILING)
def error_is_the_same_on_every_call(ctx: PluginUnderTest) -> None:
    """An event that ended with an error gives that same error (code and message) to
    PJRT_Event_Await, to every later PJRT_Event_Error and PJRT_Event_Await, and to a
    PJRT_Event_OnReady callback: reporting the error once does not use it up."""
    events = _failed_events(ctx)
    if not events:
        skip(f"plugin {ctx.name} refused both a deleted buffer's ready event and the failing execution at the call: "
             "no event here ends with an error")
    for what, event in events:
        first = _await_status(ctx, event, what)
        answers: list[tuple[str, PjrtError | None]] = [
            ("PJRT_Event_Error", event.error()), ("PJRT_Event_Error, asked again", event.error()),
            ("PJRT_Event_Await, a second time", _await_status(ctx, event, what))]
        got: list[PjrtError | None] = []
        fired = threading.Event()

        def callback(error: PjrtError | None, got: list[PjrtError | None] = got, fired: threading.Event = fired) -> None:
            got.append(error)
            fired.set()

        event.on_ready(callback)
        check(fired.wait(ctx.seconds(CALL_TIMEOUT)), f"{what}: the PJRT_Event_OnReady callback of a ready event did "
                                                     f"not run within {ctx.seconds(CALL_TIMEOUT):g} s")
        answers.append(("the PJRT_Event_OnReady callback", got[0]))
        for call, status in answers:
            check(_same_status(status, first),
                  f"{what}: PJRT_Event_Await reported {_status(first)}, then {call} {_status(status)}; an event "
                  "reports the same status to every call")


#: Callbacks registered on each event, and rounds of a short execution whose events get them: a
#: plugin that runs callbacks on other threads while it marks the event ready races with them,
#: and many callbacks over many events (with threads switching often) give the race many chances.
_CALLBACKS_PER_EVENT = 4
_QUICK_ROUNDS = 25
#: A short round runs the slow program for this fraction of its usual time.
_SHORT_FRACTION = 30
#: The thread switch interval while the rounds run (Python's default is 5 ms).
_SWITCH_INTERVAL = 1e-5


class _InsideViews:
    """What OnReady callbacks saw of their event from inside the callback: the first thing wrong,
    and how many callbacks have run."""

    def __init__(self) -> None:
        self.wrong: list[str] = []
        self.expected = 0
        self._ran = 0
        self._changed = threading.Condition()

    def watch(self, event: Any, what: str) -> None:
        def callback(error: PjrtError | None) -> None:
            problem = self._look(event, error)
            with self._changed:
                if problem is not None:
                    self.wrong.append(f"{what}: {problem}")
                self._ran += 1
                self._changed.notify_all()

        for _ in range(_CALLBACKS_PER_EVENT):
            self.expected += 1
            event.on_ready(callback)

    @staticmethod
    def _look(event: Any, error: PjrtError | None) -> str | None:
        try:
            if not event.is_ready():
                # PJRT_Event_Error may be asked only of a ready event (a C plugin may abort).
                return "PJRT_Event_IsReady answered false"
            status = event.error()
        except Exception as exc:  # noqa: BLE001 - from a plugin's thread: recorded, the case reports it
            return f"PJRT_Event_IsReady or PJRT_Event_Error raised {describe(exc)}"
        if not _same_status(status, error):
            return f"PJRT_Event_Error answered {_status(status)}, while the callback was given {_status(error)}"
        return None

    @property
    def missing(self) -> int:
        with self._changed:
            return self.expected - self._ran

    def wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        with self._changed:
            while self._ran < self.expected:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True


@case("events", timeout=COMPILING)
def ready_when_on_ready_runs(ctx: PluginUnderTest) -> None:
    """PJRT_Event_OnReady runs its callback once the event is ready: from inside the callback,
    PJRT_Event_IsReady is true and PJRT_Event_Error gives the status the callback got, for events
    of work that was pending, finished, or failed."""
    views = _InsideViews()
    try:
        work: SlowWork | None = slow_work(ctx)
    except CaseSkipped:
        work = None  # no pending work to watch on this plugin; the other events still are
    if work is not None:
        result = work.start(ctx)
        output = result.outputs[0][0]
        copy_event = ctx.call(output.to_host_buffer, what="PJRT_Buffer_ToHostBuffer of a pending output").event
        for what, event in (("the completion event of a running execution", result.device_complete_events[0]),
                            ("the PJRT_Buffer_ReadyEvent of its output", output.ready_event()),
                            ("the event of a copy of that output to host", copy_event)):
            views.watch(event, what)
        ctx.await_event(copy_event, "the copy to host of a pending output", timeout=60.0)
    for what, event in _failed_events(ctx):
        views.watch(event, what)
    # Short runs of the slow program (a few ms each) are still running when their callbacks are
    # registered, so that every round is a race between the plugin marking the event ready and
    # running its callbacks; without that program, x + 1, which is often done by then.
    short = None if work is None else SlowWork(work.executable, max(16, work.trips // _SHORT_FRACTION))
    if short is None:
        executable, buffer = ctx.compile(add_one()), ctx.put(np.arange(4, dtype=np.float32))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(_SWITCH_INTERVAL)
    try:
        for _ in range(_QUICK_ROUNDS):
            if short is not None:
                result = short.start(ctx)
            else:
                result = ctx.call(executable.execute, [[buffer]], ExecuteOptions(),
                                  what="PJRT_LoadedExecutable_Execute", timeout=60.0)
            views.watch(result.device_complete_events[0], "the completion event of a short execution")
            views.watch(result.outputs[0][0].ready_event(), "the PJRT_Buffer_ReadyEvent of a short execution's output")
        done = views.wait(ctx.seconds(CALL_TIMEOUT))
    finally:
        sys.setswitchinterval(interval)
    check(done, f"PJRT_Event_OnReady: {views.missing} of {views.expected} callbacks had not run within "
                f"{ctx.seconds(CALL_TIMEOUT):g} s of the short executions' start; a callback runs once its event is ready")
    check(not views.wrong, lambda: f"PJRT_Event_OnReady: inside {len(views.wrong)} of {views.expected} callbacks the "
                                   f"event was not ready as it must be; first, in the callback of {views.wrong[0]}. A "
                                   "callback runs once its event is ready: by then PJRT_Event_IsReady is true and "
                                   "PJRT_Event_Error reports the status the callback gets")


def _fires_cleanly(ctx: PluginUnderTest, event: Any, what: str) -> None:
    try:
        ctx.await_event(event, what)
    except PjrtError as exc:
        fail(f"{what} reports {describe(exc)}: PJRT_Event_Destroy frees the caller's handle only, never the work "
             "or the events others hold")
    error = event.error()
    check(error is None, f"{what} is ready with {_status(error)}: PJRT_Event_Destroy frees the caller's handle only")


@case("events", timeout=COMPILING)
def destroying_an_event_leaves_the_work_alone(ctx: PluginUnderTest) -> None:
    """An event a call returns is the caller's: PJRT_Event_Destroy of a buffer's ready event, or of
    an execution's completion event, frees only that handle: a later ready event of the buffer
    fires without an error, and the execution's output is ready and holds the right values."""
    executable = ctx.compile(add_one())
    host = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    buffer = ctx.put(host)
    ctx.call(buffer.ready_event().destroy, what="PJRT_Event_Destroy of a buffer's ready event")
    later = ctx.call(buffer.ready_event, what="PJRT_Buffer_ReadyEvent after an earlier one was destroyed")
    _fires_cleanly(ctx, later, "PJRT_Buffer_ReadyEvent of a good buffer, after an earlier ready event of it was "
                               "destroyed,")
    result = ctx.call(executable.execute, [[buffer]], ExecuteOptions(), what="PJRT_LoadedExecutable_Execute",
                      timeout=60.0)
    for event in result.device_complete_events:
        ctx.call(event.destroy, what="PJRT_Event_Destroy of an execution's completion event")
    output = result.outputs[0][0]
    ctx.call(output.ready_event().destroy, what="PJRT_Event_Destroy of an output's ready event")
    ready = ctx.call(output.ready_event, what="PJRT_Buffer_ReadyEvent of the output")
    _fires_cleanly(ctx, ready, "the PJRT_Buffer_ReadyEvent of an output, after the execution's completion event and "
                               "an earlier ready event of the output were destroyed,")
    got = ctx.fetch(output)
    check(np.array_equal(got, host + 1), f"x + 1 gave {got.tolist()} once the execution's completion event had been "
                                         f"destroyed, expected {(host + 1).tolist()}")


# -- topology ------------------------------------------------------------------------------------------


def _topology_answers(topology: Any) -> dict[str, Any]:
    return {
        "PJRT_TopologyDescription_PlatformName": topology.platform_name(),
        "PJRT_TopologyDescription_PlatformVersion": topology.platform_version(),
        "PJRT_TopologyDescription_GetDeviceDescriptions": [d.id() for d in topology.get_device_descriptions()],
        "PJRT_TopologyDescription_Attributes": topology.attributes(),
    }


@case("topology", "answers_stay_the_same", min_api_minor=36)
def topology_answers_stay_the_same(ctx: PluginUnderTest) -> None:
    """The client's topology answers the same on every call and through every handle of it:
    platform name and version, the device descriptions in one order (any order, but the same on
    every call), with distinct ids, and attributes of PJRT's value types; a caller's writes into
    the attributes it got change nothing."""
    client = _new_client(ctx)
    try:
        topology = client.topology_description()
        first = _topology_answers(topology)
        ids = first["PJRT_TopologyDescription_GetDeviceDescriptions"]
        check(len(set(ids)) == len(ids), f"PJRT_TopologyDescription_GetDeviceDescriptions has duplicate ids: {ids}")
        for key, value in first["PJRT_TopologyDescription_Attributes"].items():
            check(isinstance(key, str) and _is_named_value(value),
                  f"topology attribute {key!r} = {value!r} is not a named value (str, int, float, bool, list of int)")
        for attempt, answers in (("a second call", _topology_answers(topology)),
                                 ("a third call", _topology_answers(topology)),
                                 ("a second PJRT_Client_TopologyDescription", _topology_answers(
                                     client.topology_description()))):
            changed = _first_change(first, answers)
            check(changed is None, f"{changed} on {attempt}: the topology's answers stay the same while it lives")
        attributes = topology.attributes()
        for value in attributes.values():
            if isinstance(value, list):
                value.append(-1)
        attributes[PROBE_KEY] = 1
        again = topology.attributes()
        check(again == first["PJRT_TopologyDescription_Attributes"],
              f"after the caller changed the attributes it got, PJRT_TopologyDescription_Attributes answers {again!r} "
              f"(it answered {first['PJRT_TopologyDescription_Attributes']!r}): the topology handed out its own mapping")
    finally:
        _destroy(ctx, client)


@case("topology", min_api_minor=36)
def serialized_form_is_a_stable_cache_key(ctx: PluginUnderTest) -> None:
    """PJRT_TopologyDescription_Serialize is for cache keys: the same topology serializes to the
    same bytes on every call, through a second PJRT_Client_TopologyDescription handle, from a
    second client made the same way (the same devices), and from the topology
    PJRT_TopologyDescription_Deserialize gives back (where the plugin deserializes topologies):
    bytes that name the object serialized (its address, a counter) are no key."""
    topology = ctx.client.topology_description()
    first = topology.serialize()
    check(isinstance(first, (bytes, bytearray)) and first,
          f"PJRT_TopologyDescription_Serialize returned {first!r}, expected non-empty bytes")
    answers = [("a second call", topology.serialize()),
               ("a second PJRT_Client_TopologyDescription", ctx.client.topology_description().serialize())]
    other = _new_client(ctx)
    try:
        answers.append(("the topology of a second client made the same way", other.topology_description().serialize()))
    finally:
        _destroy(ctx, other)
    try:
        again = ctx.call(ctx.api.topology_deserialize, bytes(first), what="PJRT_TopologyDescription_Deserialize")
    except (NotFound, Unimplemented):
        pass  # no deserializing here (before 0.75, or without a topology compiler): the rest holds
    else:
        try:
            answers.append(("the topology PJRT_TopologyDescription_Deserialize gave back from these bytes",
                            again.serialize()))
        finally:
            ctx.call(again.destroy, what="PJRT_TopologyDescription_Destroy of a deserialized topology")
    for attempt, later in answers:
        check(bytes(later) == bytes(first),
              f"PJRT_TopologyDescription_Serialize gave {len(first)} bytes, then, on {attempt}, {len(later)} bytes that "
              f"differ from them (first at byte {_first_difference(bytes(first), bytes(later))}): a cache key must be "
              "the same for the same topology")


def _description_answers(description: Any) -> dict[str, Any]:
    return {
        "PJRT_DeviceDescription_ProcessIndex": description.process_index(),
        "PJRT_DeviceDescription_Kind": description.kind(),
        "PJRT_DeviceDescription_Attributes": description.attributes(),
    }


@case("topology", min_api_minor=75)
def deserialize_gives_back_the_topology(ctx: PluginUnderTest) -> None:
    """PJRT_TopologyDescription_Deserialize of what PJRT_TopologyDescription_Serialize wrote gives
    back that topology: the same platform name and version, the same attributes, and the same
    devices, each described as before (process index, kind, attributes), where the plugin
    deserializes topologies at all."""
    topology = ctx.client.topology_description()
    data = bytes(ctx.call(topology.serialize, what="PJRT_TopologyDescription_Serialize"))
    try:
        again = ctx.call(ctx.api.topology_deserialize, data, what="PJRT_TopologyDescription_Deserialize")
    except (NotFound, Unimplemented) as exc:
        # XLA's CPU plugins built without a topology compiler answer NOT_FOUND: a feature they lack.
        skip(f"plugin {ctx.name} does not deserialize topologies: {describe(exc)}")
    try:
        before, after = _topology_answers(topology), _topology_answers(again)
        for call in ("PJRT_TopologyDescription_PlatformName", "PJRT_TopologyDescription_PlatformVersion",
                     "PJRT_TopologyDescription_Attributes"):
            check(after[call] == before[call],
                  f"PJRT_TopologyDescription_Deserialize gave back a topology whose {call} answers {after[call]!r}; "
                  f"the topology serialized answered {before[call]!r}: the bytes of Serialize give back that topology")
        described = {d.id(): _description_answers(d) for d in topology.get_device_descriptions()}
        found = {d.id(): _description_answers(d) for d in again.get_device_descriptions()}
        check(sorted(found) == sorted(described),
              f"PJRT_TopologyDescription_Deserialize gave back a topology of devices {sorted(found)}; the topology "
              f"serialized had devices {sorted(described)}")
        for device, answers in described.items():
            changed = _first_change(answers, found[device])
            check(changed is None, f"device {device} of the topology PJRT_TopologyDescription_Deserialize gave back: "
                                   f"{changed} (before Serialize, then after Deserialize); the bytes of Serialize "
                                   "give back that topology, its devices described as they were")
    finally:
        ctx.call(again.destroy, what="PJRT_TopologyDescription_Destroy of a deserialized topology")


def _first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@case("topology")
def create_makes_a_new_topology(ctx: PluginUnderTest) -> None:
    """PJRT_TopologyDescription_Create (where a plugin describes devices without a client) makes a
    new topology of the plugin's platform whose device descriptions have distinct ids; two are
    distinct, and PJRT_TopologyDescription_Destroy of one leaves the other answering."""
    made: list[Any] = []

    def create() -> Any:
        try:
            topology = ctx.call(ctx.api.topology_create, what="PJRT_TopologyDescription_Create")
        except (Unimplemented, NotFound) as exc:
            skip(f"plugin {ctx.name} does not create topologies without a client: {describe(exc)}")
        made.append(topology)
        return topology

    try:
        first, second = create(), create()
        check(first.unwrapped is not second.unwrapped,
              "two PJRT_TopologyDescription_Create calls returned one topology: each call creates a new one")
        platform = ctx.client.platform_name()
        for topology in (first, second):
            name = topology.platform_name()
            check(name == platform, f"PJRT_TopologyDescription_Create made a topology of platform {name!r}; the "
                                    f"plugin's clients are {platform!r}")
            ids = [d.id() for d in topology.get_device_descriptions()]
            check(ids and len(set(ids)) == len(ids), f"PJRT_TopologyDescription_Create made a topology with device "
                                                     f"ids {ids}: it describes devices, each with its own id")
        expected = _topology_answers(second)
        ctx.call(first.destroy, what="PJRT_TopologyDescription_Destroy")
        made.remove(first)
        changed = _first_change(expected, _topology_answers(second))
        check(changed is None, f"{changed} after PJRT_TopologyDescription_Destroy of another topology: destroying "
                               "one frees that one only")
    finally:
        for topology in made:
            ctx.call(topology.destroy, what="PJRT_TopologyDescription_Destroy")

