"""lifetime: who may free a buffer's memory, and when, and what a destroyed client owes its work.

External references (``PJRT_Buffer_IncreaseExternalReferenceCount``: another framework reads the
memory, as DLPack consumers do) hold off donation and deletion until they are released: a plugin
may refuse the call (XLA refuses a must-donate input with INVALID_ARGUMENT "Donation requested
for buffer with external reference"; pjrt-hub's CPU runtime refuses to delete) or accept it and
keep the memory (XLA's clients mark the buffer deleted but keep its memory, and keep a may-alias
input instead of donating it); what it may not do is reuse or free the memory while it is shared.
Memory is read through ``PJRT_Buffer_UnsafePointer`` only for buffers in host memory
(``PJRT_Buffer_IsOnCpu``), and only while the reference is held.

A client destroyed with work still queued must finish that work or fail it: every event of it
fires, exactly once. The case destroys a client of its own, never the run's.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

import numpy as np

from pjrt_hub.abi import CompileOptions, ErrorCode, PjrtError, Program

from .._case import case, check, skip
from .._context import CALL_TIMEOUT, PluginUnderTest, describe
from .._programs import donating_add_one, slow_program
from .events import COMPILING, PENDING_SECONDS, SLOW_ELEMENTS, slow_work

#: The codes with which a plugin may refuse to donate or delete a buffer that is referenced.
REFUSALS = (ErrorCode.INVALID_ARGUMENT, ErrorCode.FAILED_PRECONDITION)


@case("lifetime", timeout=COMPILING)
def external_reference_holds_off_donation(ctx: PluginUnderTest) -> None:
    """While an external reference is held, executing a program that donates the buffer neither
    consumes nor overwrites it (the call is refused, or the input is kept); once released, the
    donation happens."""
    executable = ctx.compile(donating_add_one())
    host = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    buffer = ctx.put(host)
    buffer.increase_external_reference_count()
    try:
        try:
            outputs = ctx.execute(executable, [[buffer]])
        except PjrtError as exc:
            check(exc.code in REFUSALS, f"executing with a donated input that has an external reference failed with "
                                        f"{describe(exc)}; a refusal is INVALID_ARGUMENT or FAILED_PRECONDITION")
        else:
            got = ctx.fetch(outputs[0][0])
            check(np.array_equal(got, host + 1), f"x + 1 gave {got.tolist()}")
            check(not buffer.is_deleted(), "a buffer with an external reference was donated (it is deleted after "
                                           "the execution); PJRT holds off donation until the reference is released")
            kept = ctx.fetch(buffer)
            check(np.array_equal(kept, host), f"a buffer with an external reference changed to {kept.tolist()} when "
                                              "a program that donates it ran: its memory was reused while shared")
    finally:
        buffer.decrease_external_reference_count()
    outputs = ctx.execute(executable, [[buffer]])
    got = ctx.fetch(outputs[0][0])
    check(np.array_equal(got, host + 1), f"x + 1 after the reference was released gave {got.tolist()}")
    check(buffer.is_deleted(), "after its external reference was released, the buffer was still not donated")


@case("lifetime")
def external_reference_holds_off_deletion(ctx: PluginUnderTest) -> None:
    """Deleting a buffer that has an external reference either is refused or leaves its memory
    intact until the reference is released; after the release the buffer can be deleted."""
    host = np.array([2.5, -1.0, 7.0, 0.125], np.float32)
    buffer = ctx.put(host)
    buffer.increase_external_reference_count()
    released = False
    try:
        pointer = buffer.unsafe_pointer() if buffer.is_on_cpu() else 0
        try:
            buffer.delete()
        except PjrtError as exc:
            check(exc.code in REFUSALS, f"deleting a buffer with an external reference failed with {describe(exc)}; "
                                        "a refusal is INVALID_ARGUMENT or FAILED_PRECONDITION")
            check(not buffer.is_deleted(), "PJRT_Buffer_Delete was refused but the buffer reports deleted")
            got = ctx.fetch(buffer)
            check(np.array_equal(got, host), f"a buffer whose deletion was refused holds {got.tolist()}")
            buffer.decrease_external_reference_count()
            released = True
            buffer.delete()
            check(buffer.is_deleted(), "the buffer could not be deleted after its reference was released")
            return
        check(buffer.is_deleted(), "PJRT_Buffer_Delete returned but PJRT_Buffer_IsDeleted is false")
        if not pointer:
            skip(f"the buffers of plugin {ctx.name} are not in host memory: the memory a reference holds cannot "
                 "be read from here")
        shared = np.frombuffer(ctypes.string_at(pointer, host.nbytes), np.float32)
        check(np.array_equal(shared, host),
              f"the memory of a deleted buffer that still has an external reference holds {shared.tolist()}, not "
              f"{host.tolist()}: it was freed or reused while another framework shared it")
    finally:
        if not released:
            buffer.decrease_external_reference_count()


@case("lifetime", timeout=COMPILING + 60.0)
def client_destroyed_with_queued_work(ctx: PluginUnderTest) -> None:
    """PJRT_Client_Destroy with executions still queued finishes or fails them: the event of each,
    and of a copy to host of its output, fires exactly once; a copy that succeeds holds the result."""
    work = slow_work(ctx)
    client = ctx.call(ctx.registry.create_client, ctx.name, what="PJRT_Client_Create (a client to destroy)",
                      timeout=60.0)
    executable = ctx.call(client.compile, Program(slow_program(SLOW_ELEMENTS)), CompileOptions(),
                          what="PJRT_Client_Compile", timeout=60.0)
    fired: list[list[Any]] = []
    lock = threading.Lock()

    def recorder(slot: int):
        def record(error: Any) -> None:
            with lock:
                fired[slot].append(error)
        return record

    events, copies = [], []
    for _ in range(3):
        result = work.start(ctx, client=client, executable=executable)
        events.append(result.device_complete_events[0])
        copies.append(ctx.call(result.outputs[0][0].to_host_buffer, what="PJRT_Buffer_ToHostBuffer"))
    watched = events + [copy.event for copy in copies]
    for slot, event in enumerate(watched):
        fired.append([])
        event.on_ready(recorder(slot))
    queued = sum(not event.is_ready() for event in events)
    if not queued:
        skip(f"plugin {ctx.name} had finished every execution before PJRT_Client_Destroy: nothing was queued")
    ctx.call(client.destroy, what=f"PJRT_Client_Destroy with {queued} execution(s) queued", timeout=60.0)
    # Three runs of about PENDING_SECONDS each, with room for a loaded machine.
    deadline = time.monotonic() + ctx.seconds(CALL_TIMEOUT + 3 * 4 * PENDING_SECONDS)
    while time.monotonic() < deadline:
        with lock:
            if all(fired_slot for fired_slot in fired):
                break
        time.sleep(0.01)
    time.sleep(0.05)
    with lock:
        counts = [len(f) for f in fired]
        outcomes = [f[0] if f else None for f in fired]
    silent = [i for i, n in enumerate(counts) if n == 0]
    check(not silent, f"after PJRT_Client_Destroy, {len(silent)} of {len(watched)} events of the work queued on it "
                      "never fired: the work was dropped; PJRT finishes or fails queued work, it never leaves its "
                      "events pending")
    check(all(n == 1 for n in counts), f"events of the queued work fired {counts} times; each fires exactly once")
    for index, copy in enumerate(copies):
        if outcomes[len(events) + index] is None:
            check(np.array_equal(copy.array, work.expected),
                  f"the copy to host of execution {index} reported success after PJRT_Client_Destroy but does not "
                  "hold the result")

