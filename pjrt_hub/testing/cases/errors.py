"""errors: each misuse of the API gets the error code the contract names.

The misuses are data (:data:`MISUSES`): what is done wrong, the call that does it, and the codes
a plugin may answer with. The first code is the one :mod:`pjrt_hub.abi.errors` names for the
situation; a second one is listed where PJRT's reference implementation (XLA's clients, which
every C plugin here is built from) answers otherwise and the C API leaves the code open, with
XLA's message as the evidence. An error of another code, a bare Python exception, a crash or a
call that succeeds all fail the case, and the message says what the plugin did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pjrt_hub.abi import BufferType, CompileOptions, ErrorCode, ExecuteOptions, PjrtError

from .._case import Case, CaseSkipped, add_case, fail
from .._context import CALL_TIMEOUT, PluginUnderTest, describe
from .._programs import add_one, donating_add_one, elementwise, tensor
from .client import device_id

FP, IA = ErrorCode.FAILED_PRECONDITION, ErrorCode.INVALID_ARGUMENT

#: A deleted or donated buffer: abi/errors.py names FAILED_PRECONDITION ("the system is not in a
#: state where this works"); XLA answers INVALID_ARGUMENT "Buffer has been deleted or donated."
#: (and "... called on deleted or donated buffer") in every client.
GONE = (FP, IA)
GONE_SOURCE = ("abi/errors.py names FAILED_PRECONDITION for a deleted or donated buffer; XLA's clients answer "
               "INVALID_ARGUMENT \"Buffer has been deleted or donated.\"")


@dataclass(frozen=True)
class Misuse:
    """One wrong use of the API and the codes a plugin may refuse it with."""

    name: str
    description: str
    codes: tuple[ErrorCode, ...]
    source: str
    #: Sets the scene and returns the call that must fail.
    provoke: Callable[[PluginUnderTest], Callable[[], Any]]
    devices: int = 1
    min_api_minor: int = 0

    def run(self, ctx: PluginUnderTest) -> None:
        if self.devices > 1:
            ctx.need_devices(self.devices)
        call = self.provoke(ctx)
        try:
            result = ctx.call(call, what=self.description, timeout=60.0)
        except PjrtError as exc:
            if exc.code in self.codes:
                return
            fail(f"{self.description}: the plugin answered {describe(exc)}; the contract names "
                 f"{' or '.join(c.name for c in self.codes)} ({self.source})")
        except CaseSkipped:  # the shared client failed in an earlier case
            raise
        except Exception as exc:  # noqa: BLE001 - a bare Python error is the finding
            fail(f"{self.description}: the plugin raised {type(exc).__name__}: {exc} instead of a PJRT error; the "
                 f"contract names {' or '.join(c.name for c in self.codes)} ({self.source})")
        fail(f"{self.description}: the call succeeded (it returned {_short(result)}); the contract names "
             f"{' or '.join(c.name for c in self.codes)} ({self.source})")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _f32(ctx: PluginUnderTest, device: Any = None) -> Any:
    return ctx.put(np.array([1.0, 2.0, 3.0, 4.0], np.float32), device=device)


def _deleted(ctx: PluginUnderTest) -> Any:
    buffer = _f32(ctx)
    buffer.delete()
    return buffer


def _donated(ctx: PluginUnderTest) -> Any:
    buffer = _f32(ctx)
    ctx.execute(ctx.compile(donating_add_one()), [[buffer]])
    if not buffer.is_deleted():
        fail("a buffer given to a program that donates it is not deleted afterwards (see buffers/donation)")
    return buffer


def _to_host(ctx: PluginUnderTest, buffer: Any) -> Callable[[], Any]:
    def read() -> Any:
        copy = buffer.to_host_buffer()
        copy.event.await_(ctx.seconds(CALL_TIMEOUT))
        return copy.array
    return read


def _executed(ctx: PluginUnderTest, executable: Any, arguments: list[list[Any]]) -> Callable[[], Any]:
    """Execute and wait: an error may come from the call or from the completion event."""
    def run() -> Any:
        result = executable.execute(arguments, ExecuteOptions())
        for event in result.device_complete_events or ():
            event.await_(ctx.seconds(CALL_TIMEOUT))
        return result
    return run


def _ready_event(ctx: PluginUnderTest, buffer: Any) -> Callable[[], Any]:
    """PJRT_Buffer_ReadyEvent, awaited: the refusal may come from the call or on the event."""
    def wait() -> Any:
        event = buffer.ready_event()
        event.await_(ctx.seconds(CALL_TIMEOUT))
        return event
    return wait


def _donating_twice() -> str:
    """``a + b`` with both arguments donated (``f(donate(a), donate(b))``)."""
    t = tensor((4,), "f32")
    return elementwise("jit_donating_add", [t, t], [("add", (0, 1))]).replace(
        f"%arg0: {t}, %arg1: {t}",
        f"%arg0: {t} {{tf.aliasing_output = 0 : i32}}, %arg1: {t} {{tf.aliasing_output = 1 : i32}}").replace(
        f"-> ({t} {{jax.result_info = \"[0]\"}})",
        f"-> ({t} {{jax.result_info = \"[0]\"}}, {t} {{jax.result_info = \"[1]\"}})").replace(
        f"return %0 : {t}", f"return %0, %0 : {t}, {t}")


MISUSES: tuple[Misuse, ...] = (
    Misuse("read_deleted_buffer", "PJRT_Buffer_ToHostBuffer of a deleted buffer", GONE, GONE_SOURCE,
           lambda ctx: _to_host(ctx, _deleted(ctx))),
    Misuse("ready_event_of_deleted_buffer", "PJRT_Buffer_ReadyEvent of a deleted buffer (at the call or on the "
           "event)", GONE, GONE_SOURCE, lambda ctx: _ready_event(ctx, _deleted(ctx))),
    Misuse("copy_deleted_buffer", "PJRT_Buffer_CopyToDevice of a deleted buffer", GONE, GONE_SOURCE,
           lambda ctx: (lambda b: lambda: b.copy_to_device(ctx.devices[-1]))(_deleted(ctx))),
    Misuse("reference_deleted_buffer", "PJRT_Buffer_IncreaseExternalReferenceCount of a deleted buffer", GONE,
           GONE_SOURCE, lambda ctx: _deleted(ctx).increase_external_reference_count),
    Misuse("execute_with_deleted_argument", "PJRT_LoadedExecutable_Execute with a deleted argument", GONE,
           GONE_SOURCE, lambda ctx: _executed(ctx, ctx.compile(add_one()), [[_deleted(ctx)]])),
    Misuse("execute_with_donated_argument", "PJRT_LoadedExecutable_Execute with an argument already donated",
           GONE, GONE_SOURCE, lambda ctx: _executed(ctx, ctx.compile(add_one()), [[_donated(ctx)]])),
    Misuse("execute_on_wrong_device", "PJRT_LoadedExecutable_Execute with an argument on another device than "
           "the one the program runs on", (IA,), "XLA: INVALID_ARGUMENT \"Buffer passed to Execute() as argument 0 "
           "to replica 0 is on device ..., but replica is assigned to device ...\"",
           lambda ctx: _executed(ctx, ctx.compile(add_one()), [[_f32(ctx, ctx.devices[1])]]), devices=2),
    Misuse("execute_with_wrong_element_type", "PJRT_LoadedExecutable_Execute with an s32[4] argument for an f32[4] "
           "parameter (same size, other type)", (IA,), "abi/errors.py: InvalidArgument, the caller passed a bad "
           "argument; an argument of another element type is reinterpreted otherwise",
           lambda ctx: _executed(ctx, ctx.compile(add_one()), [[ctx.put(np.arange(4, dtype=np.int32))]])),
    Misuse("execute_with_extra_argument_list", "PJRT_LoadedExecutable_Execute of a one-device program with two "
           "argument lists", (IA,), "abi/errors.py: InvalidArgument, the caller passed a bad argument",
           lambda ctx: _executed(ctx, ctx.compile(add_one()), [[_f32(ctx)], [_f32(ctx)]])),
    Misuse("donate_same_buffer_twice", "PJRT_LoadedExecutable_Execute donating one buffer as two arguments",
           (IA,), "XLA: INVALID_ARGUMENT \"Attempt to donate the same buffer twice in Execute()\"",
           lambda ctx: (lambda b: _executed(ctx, ctx.compile(_donating_twice()), [[b, b]]))(_f32(ctx))),
    Misuse("compile_for_unknown_device", "PJRT_Client_Compile with a device assignment naming no device", (IA,),
           "XLA: INVALID_ARGUMENT \"No matching device found for device_id N\"",
           lambda ctx: lambda: ctx.client.compile(_program(add_one()), CompileOptions(
               device_assignment=((max(device_id(d) for d in ctx.client.devices()) + 1000,),)))),
    Misuse("compile_more_replicas_than_devices", "PJRT_Client_Compile of more replicas than the client has "
           "devices", (IA,), "XLA: INVALID_ARGUMENT \"No matching device found for device_id N\"",
           lambda ctx: (lambda n: lambda: ctx.client.compile(_program(add_one(replicas=n)),
                                                             CompileOptions(num_replicas=n)))(
               len(ctx.client.devices()) + 1)),
    Misuse("deserialize_garbage", "PJRT_Executable_DeserializeAndLoad of bytes that are no executable", (IA,),
           "abi/errors.py: InvalidArgument, the caller passed a bad argument (XLA 0.115 answers INVALID_ARGUMENT "
           "\"Failed to parse message of type xla.ExecutableAndOptionsProto\")",
           lambda ctx: lambda: ctx.client.deserialize_and_load(b"\x00not a serialized executable\xff" * 4)),
    Misuse("lookup_unknown_addressable_device", "PJRT_Client_LookupAddressableDevice of a local hardware id no "
           "device has", (IA,), "XLA: INVALID_ARGUMENT \"No matching device found for local_hardware_id N\"",
           lambda ctx: lambda: ctx.client.lookup_addressable_device(
               max(d.local_hardware_id() for d in ctx.devices) + 1000)),
    Misuse("uninitialized_negative_dimension", "PJRT_Client_CreateUninitializedBuffer of dimensions [-1, 3]",
           (IA,), "abi/errors.py: InvalidArgument, the caller passed a bad argument",
           lambda ctx: lambda: ctx.client.create_uninitialized_buffer((-1, 3), BufferType.F32, device=ctx.device),
           min_api_minor=68),
)


def _program(text: str) -> Any:
    from pjrt_hub.abi import Program

    return Program(text)


def _misuse_case(misuse: Misuse) -> Case:
    codes = " or ".join(c.name for c in misuse.codes)
    return Case("errors", misuse.name, f"{misuse.description} fails with {codes}.", misuse.run,
                min_api_minor=misuse.min_api_minor, timeout=120.0)


for _misuse in MISUSES:
    add_case(_misuse_case(_misuse))
