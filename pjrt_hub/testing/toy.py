"""A tiny but complete Python plugin, the conformance suite's own subject.

Every call of the binding up to 0.105 is here, over numpy arrays in host memory, with a compiler
that knows a handful of elementwise StableHLO ops (with the numerics StableHLO gives them: integer
wraparound, truncating division, IEEE-754 maximum and minimum) and nothing else. It runs every
program before ``Execute`` returns, so the cases that observe pending work skip on it. It is small enough to read in
one sitting, so a plugin author can see what the suite expects, and light enough (numpy only) that
the suite, the compatibility matrix and their tests can run without numba or a C plugin.

It imports only the contract, like any plugin. :class:`ToyPlugin` is a pluggy plugin object with
knobs for what the matrix and the tests need (the declared version, a backward policy, the
limitations it declares); subclasses of its classes make the deliberately broken plugins of the
tests. Nothing here is used by pjrt-hub itself.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import weakref
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pjrt_hub.abi import (
    Api,
    ApiVersion,
    Buffer,
    BufferType,
    Client,
    CompiledMemoryStats,
    CompileOptions,
    DeadlineExceeded,
    Device,
    DeviceDescription,
    Event,
    Executable,
    ExecuteOptions,
    ExecuteResult,
    ExecutionError,
    FailedPrecondition,
    HostBufferSemantics,
    HostTransfer,
    InvalidArgument,
    KeyValueStore,
    Limitation,
    LoadedExecutable,
    Memory,
    MemoryStats,
    ParseError,
    PjrtError,
    PluginDeclaration,
    Program,
    ToHost,
    TopologyDescription,
    UnsupportedOpError,
    decode_compile_options,
    from_numpy_dtype,
    hookimpl,
    to_numpy_dtype,
)
from pjrt_hub.abi.types import mlir_element_type
from pjrt_hub.extensions import MemoryLayout

__all__ = ["ToyApi", "ToyBuffer", "ToyClient", "ToyEvent", "ToyPlugin", "TOY_OPS"]

PLATFORM = "toy"
DELETED = "Buffer has been deleted or donated."


# -- events ------------------------------------------------------------------------------------


class ToyEvent(Event):
    """An event set once, from any thread; callbacks run exactly once, outside the lock."""

    def __init__(self, *, ready: bool = True, error: PjrtError | None = None) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._error: PjrtError | None = None
        self._callbacks: list[Callable[[PjrtError | None], None]] = []
        if ready:
            self.set(error)

    def set(self, error: PjrtError | None = None) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._error = error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(error)

    def is_ready(self) -> bool:
        return self._done.is_set()

    def error(self) -> PjrtError | None:
        return self._error

    def await_(self, timeout: float | None = None) -> None:
        if not self._done.wait(timeout):
            raise DeadlineExceeded(f"event not ready after {timeout} s")
        if self._error is not None:
            raise self._error

    def on_ready(self, callback: Callable[[PjrtError | None], None]) -> None:
        if not callable(callback):
            raise InvalidArgument(f"PJRT_Event_OnReady: callback must be callable, got {callback!r}")
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self._error)


# -- devices and memories ----------------------------------------------------------------------


class ToyMemory(Memory):
    def __init__(self, memory_id: int, kind: str, kind_id: int) -> None:
        self._id, self._kind, self._kind_id = memory_id, kind, kind_id
        self.devices: list[ToyDevice] = []

    def id(self) -> int:
        return self._id

    def kind(self) -> str:
        return self._kind

    def kind_id(self) -> int:
        return self._kind_id

    def debug_string(self) -> str:
        return f"ToyMemory(id={self._id}, kind={self._kind})"

    def to_string(self) -> str:
        return f"{self._kind}:{self._id}"

    def addressable_by_devices(self) -> list[Device]:
        return list(self.devices)


class ToyDeviceDescription(DeviceDescription):
    def __init__(self, device_id: int) -> None:
        self._id = device_id

    def id(self) -> int:
        return self._id

    def process_index(self) -> int:
        return 0

    def attributes(self) -> dict[str, Any]:
        return {"core_count": 1}

    def kind(self) -> str:
        return "toy cpu"

    def debug_string(self) -> str:
        return f"TOY_{self._id}"

    def to_string(self) -> str:
        return f"ToyDevice(id={self._id})"


class ToyDevice(Device):
    def __init__(self, device_id: int, own: ToyMemory, shared: ToyMemory) -> None:
        self.description = ToyDeviceDescription(device_id)
        self.memories = [own, shared]
        for memory in self.memories:
            memory.devices.append(self)
        self.bytes_in_use = 0
        self._accounting = threading.Lock()

    def account(self, nbytes: int) -> None:
        """Count (or, negative, give back) bytes of buffers the toy allocated on this device."""
        with self._accounting:
            self.bytes_in_use += nbytes

    def get_description(self) -> DeviceDescription:
        return self.description

    def is_addressable(self) -> bool:
        return True

    def local_hardware_id(self) -> int:
        return self.description.id()

    def addressable_memories(self) -> list[Memory]:
        return list(self.memories)

    def default_memory(self) -> Memory:
        return self.memories[0]

    def memory_stats(self) -> MemoryStats:
        return MemoryStats(bytes_in_use=self.bytes_in_use)

    def get_attributes(self) -> dict[str, Any]:
        return {"toy_device": True}


# -- buffers -----------------------------------------------------------------------------------


class ToyBuffer(Buffer):
    """A numpy array on a toy device; ``array`` is None once deleted or donated, or when the
    execution that should have made it failed (``error``).

    External references (``IncreaseExternalReferenceCount``, DLPack consumers) hold the storage:
    a buffer deleted while referenced reports deleted at once but keeps its array in ``_held``
    until the last reference goes, as XLA's clients do; donating it is refused. The storage of a
    view (``CreateViewOfDeviceBuffer``) belongs to someone else, who is told once, through
    ``on_delete``, when the toy no longer uses it.
    """

    def __init__(self, array: np.ndarray, element_type: BufferType, device: ToyDevice,
                 memory: ToyMemory, *, on_delete: Callable[[], None] | None = None, owned: bool = True) -> None:
        self.array: np.ndarray | None = array
        self.error: PjrtError | None = None
        #: Bytes counted in the device's memory stats (none for a view: the memory is not the toy's).
        self._accounted = int(array.nbytes) if owned else 0
        device.account(self._accounted)
        self._type = element_type
        self._shape = tuple(array.shape)
        self._device, self._memory = device, memory
        self._external_references = 0
        self._deleted = False
        self._held: np.ndarray | None = None
        self._on_delete = on_delete
        self._lock = threading.Lock()

    @classmethod
    def failed(cls, shape: tuple[int, ...], element_type: BufferType, device: ToyDevice, memory: ToyMemory,
               error: PjrtError) -> "ToyBuffer":
        """An output of an execution that failed: every use raises ``error``."""
        buffer = cls(np.empty((0,) * len(shape), to_numpy_dtype(element_type)), element_type, device, memory)
        buffer._shape = tuple(shape)
        buffer.array = None
        buffer.error = error
        return buffer

    def _live(self, action: str) -> np.ndarray:
        array = self.array
        if array is None:
            if self.error is not None and not self._deleted:
                raise self.error
            raise FailedPrecondition(f"{action}: {DELETED}")
        return array

    def element_type(self) -> BufferType:
        return self._type

    def dimensions(self) -> tuple[int, ...]:
        return self._shape

    def unpadded_dimensions(self) -> tuple[int, ...]:
        return self._shape

    def dynamic_dimension_indices(self) -> tuple[int, ...]:
        return ()

    def on_device_size_in_bytes(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64)) * to_numpy_dtype(self._type).itemsize

    def device(self) -> Device:
        return self._device

    def memory(self) -> Memory:
        return self._memory

    def delete(self) -> None:
        with self._lock:
            if self._deleted:
                return
            self._deleted = True
            array, self.array = self.array, None
            if self._external_references:
                self._held = array  # still shared with another framework: freed on the last release
                return
        self._release()

    def destroy(self) -> None:
        self.delete()

    def __del__(self) -> None:
        try:
            if not self._deleted and self._accounted:
                self._device.account(-self._accounted)
        except Exception:  # noqa: BLE001 - finalizers must not raise (interpreter shutdown)
            pass

    def _release(self) -> None:
        """The toy no longer uses the storage: drop it, and tell a view's owner (once)."""
        callback, self._on_delete = self._on_delete, None
        self._held = None
        accounted, self._accounted = self._accounted, 0
        self._device.account(-accounted)
        if callback is not None:
            callback()

    def is_deleted(self) -> bool:
        return self._deleted

    def copy_to_device(self, device: Device) -> Buffer:
        if not isinstance(device, ToyDevice):
            raise InvalidArgument(f"PJRT_Buffer_CopyToDevice: {device!r} is not a device of this client")
        array = self._live("PJRT_Buffer_CopyToDevice")
        return type(self)(array.copy(), self._type, device, device.memories[0])

    def copy_to_memory(self, memory: Memory) -> Buffer:
        if not isinstance(memory, ToyMemory) or self._device not in memory.devices:
            raise InvalidArgument(f"PJRT_Buffer_CopyToMemory: {memory!r} is not addressable by "
                                  f"device {self._device.description.id()}")
        array = self._live("PJRT_Buffer_CopyToMemory")
        return type(self)(array.copy(), self._type, self._device, memory)

    def to_host_buffer(self, dst: np.ndarray | None = None) -> ToHost:
        array = self._live("PJRT_Buffer_ToHostBuffer")
        if dst is None:
            return ToHost(array.copy(), ToyEvent())
        if dst.shape != array.shape or dst.dtype != array.dtype:
            raise InvalidArgument(f"PJRT_Buffer_ToHostBuffer: destination is {dst.dtype}{list(dst.shape)}, "
                                  f"the buffer is {array.dtype}{list(array.shape)}")
        if not dst.flags.writeable:
            raise InvalidArgument("PJRT_Buffer_ToHostBuffer: the destination array is read-only")
        np.copyto(dst, array)
        return ToHost(dst, ToyEvent())

    def is_on_cpu(self) -> bool:
        return True

    def ready_event(self) -> Event:
        if self._deleted:
            return ToyEvent(error=FailedPrecondition(f"PJRT_Buffer_ReadyEvent: {DELETED}"))
        return ToyEvent(error=self.error)

    def unsafe_pointer(self) -> int:
        return int(self._live("PJRT_Buffer_UnsafePointer").ctypes.data)

    def opaque_device_memory_data_pointer(self) -> int:
        return self.unsafe_pointer()

    def increase_external_reference_count(self) -> None:
        with self._lock:
            self._live("PJRT_Buffer_IncreaseExternalReferenceCount")
            self._external_references += 1

    def decrease_external_reference_count(self) -> None:
        with self._lock:
            if self._external_references == 0:
                raise InvalidArgument("Attempting to decrease reference on a buffer with zero reference count.")
            self._external_references -= 1
            released = self._external_references == 0 and self._deleted and self._held is not None
        if released:
            self._release()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """Export the storage without a copy, holding an external reference for as long as the
        consumer's array lives (numpy's DLPack deleter drops the view it was made from); read-only
        to a DLPack 1.0 consumer, since a buffer's values never change."""
        if stream is not None and stream != -1:
            raise BufferError(f"a toy buffer is in host memory, which has no streams; __dlpack__ got stream={stream!r}")
        if dl_device is not None and tuple(dl_device) != (1, 0):
            raise BufferError(f"a toy buffer is in host memory (kDLCPU, 0), not on {dl_device}")
        view = self._live("__dlpack__").view()
        if max_version is not None and tuple(max_version) >= (1, 0):
            view.flags.writeable = False
        self.increase_external_reference_count()
        weakref.finalize(view, self.decrease_external_reference_count)
        try:
            return view.__dlpack__(max_version=max_version) if max_version is not None else view.__dlpack__()
        except TypeError:  # numpy before 2.1 speaks only the legacy protocol (no read-only flag)
            view.flags.writeable = bool(view.base is not None and view.base.flags.writeable)
            return view.__dlpack__()

    def __repr__(self) -> str:
        return f"<ToyBuffer {self._type.name}{list(self._shape)} on TOY_{self._device.description.id()}>"


# -- the compiler ------------------------------------------------------------------------------

def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or (dtype.kind == "V" and dtype.name.startswith(("bfloat", "float")))


def _extreme(a: np.ndarray, b: np.ndarray, *, largest: bool) -> np.ndarray:
    """IEEE-754 maximum/minimum: NaN propagates, and +0 is larger than -0 (numpy's
    ``maximum`` propagates NaN but returns either zero)."""
    pick = np.maximum(a, b) if largest else np.minimum(a, b)
    if not _is_float(a.dtype) or a.dtype.kind == "c":
        return pick
    zeros = (a == 0) & (b == 0)
    if not zeros.any():
        return pick
    a_negative = np.signbit(a.astype(np.float32))
    keep_a = ~a_negative if largest else a_negative
    return np.where(zeros, np.where(keep_a, a, b), pick)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float division as IEEE-754; integer division truncates toward zero, with XLA's answers
    where the spec leaves it open: ``x / 0 = -1`` (all bits set) and ``MIN / -1 = MIN``."""
    if _is_float(a.dtype):
        return np.divide(a, b)
    zero = b == 0
    overflow = (b == -1) & (a == np.iinfo(a.dtype).min) if a.dtype.kind == "i" else np.zeros_like(zero)
    safe = np.where(zero | overflow, np.ones_like(b), b)
    quotient = np.floor_divide(a, safe)
    # floor -> truncation: one up where the exact quotient is negative and not whole.
    quotient = quotient + ((np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0))).astype(a.dtype)
    quotient = np.where(overflow, a, quotient)
    return np.where(zero, np.array(-1).astype(a.dtype), quotient)


def _remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The remainder of truncating division, with the sign of the dividend (C's ``fmod``);
    ``x % 0 = x`` and ``MIN % -1 = 0`` for integers, as XLA answers."""
    if _is_float(a.dtype):
        return np.fmod(a, b)
    zero = b == 0
    safe = np.where(zero | (b == -1), np.ones_like(b), b)
    return np.where(zero, a, np.fmod(a, safe))


#: The elementwise ops the toy compiler knows, by StableHLO name (without ``stablehlo.``). Numpy
#: computes f16 and bf16 in float32 and rounds once to the type, integers wrap around.
_ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply,
    "maximum": lambda a, b: _extreme(a, b, largest=True), "minimum": lambda a, b: _extreme(a, b, largest=False),
    "divide": _divide, "remainder": _remainder, "negate": np.negative, "abs": np.abs,
}
#: The ops the toy compiler knows (besides ``constant``, ``convert`` and ``return``).
TOY_OPS = tuple(sorted([*(f"stablehlo.{op}" for op in _ELEMENTWISE), "stablehlo.constant",
                        "stablehlo.convert", "stablehlo.broadcast_in_dim", "func.return"]))

_MLIR_TO_TYPE = {}
for _kind in BufferType:
    try:
        _MLIR_TO_TYPE[mlir_element_type(_kind)] = _kind
    except (KeyError, InvalidArgument):
        pass

_TENSOR = re.compile(r"tensor<((?:\d+x)*)([a-z0-9]+)>")
_MAIN = re.compile(r"func\.func\s+(?:public\s+)?@main\((?P<args>.*?)\)\s*(?:->\s*(?P<results>.*?))?\s*\{\s*$",
                   re.M)
_ASSIGN = re.compile(r"^\s*(?P<out>%[\w#:]+)\s*=\s*(?P<op>\"?[\w.]+\"?)(?P<rest>.*)$")
_MODULE = re.compile(r"module\s+@([\w.$-]+)")


def _tensor(text: str, where: str) -> tuple[tuple[int, ...], np.dtype]:
    match = _TENSOR.search(text)
    if match is None:
        raise ParseError(f"expected a tensor type at {where}, got {text.strip()!r}")
    dims = tuple(int(d) for d in match.group(1).split("x") if d)
    name = match.group(2)
    if name not in _MLIR_TO_TYPE:
        raise ParseError(f"unknown element type {name!r} at {where}")
    return dims, to_numpy_dtype(_MLIR_TO_TYPE[name])


def _scalar(literal: str, dtype: np.dtype, where: str) -> np.ndarray:
    """One splat value: ``1.5``, ``true``, ``-3`` or a hex bit pattern (``0xFF800000`` is -inf)."""
    try:
        if literal.startswith("0x"):
            bits = np.array(int(literal, 16), dtype=f"u{dtype.itemsize}")
            return bits.view(dtype)
        if literal in ("true", "false"):
            return np.asarray(literal == "true").astype(dtype)
        return np.asarray(float(literal)).astype(dtype)
    except (ValueError, TypeError, OverflowError):
        raise ParseError(f"the toy compiler reads splat constants only; cannot read dense<{literal}> at {where}") from None


class ToyProgram:
    """A parsed ``@main``: a straight line of elementwise ops over named values."""

    #: The op table; a subclass with another table is a compiler with other numerics.
    ops: Mapping[str, Callable[..., np.ndarray]] = _ELEMENTWISE

    def __init__(self, text: str) -> None:
        self.text = text
        module = _MODULE.search(text)
        self.name = module.group(1) if module else "main"
        match = _MAIN.search(text)
        if match is None:
            raise ParseError("no 'func.func @main(...)' found: the toy compiler reads StableHLO "
                             "text in MLIR's pretty form with a @main function")
        self.params: list[str] = []
        self.inputs: list[tuple[tuple[int, ...], np.dtype]] = []
        #: output index -> input index, from ``tf.aliasing_output`` (JAX's donation marker)
        self.aliases: dict[int, int] = {}
        for i, arg in enumerate(a for a in re.split(r",\s*(?=%)", match.group("args")) if a.strip()):
            name, _, rest = arg.partition(":")
            self.params.append(name.strip())
            self.inputs.append(_tensor(rest, f"argument {i} of @main"))
            alias = re.search(r"tf\.aliasing_output\s*=\s*(\d+)", rest)
            if alias:
                self.aliases[int(alias.group(1))] = i
        self.outputs = [_tensor(m.group(0), "the results of @main")
                        for m in _TENSOR.finditer(match.group("results") or "")]
        self.steps: list[tuple[str, str, list[str], Any]] = []
        self.returns: list[str] = []
        body = text[match.end():]
        line_no = text[:match.end()].count("\n")
        for offset, line in enumerate(body.splitlines()):
            where = f"line {line_no + offset + 1}"
            stripped = line.strip()
            if not stripped or stripped.startswith("//"):
                continue
            if stripped.startswith(("return", "func.return", "stablehlo.return")):
                values = stripped.split(":")[0].split(None, 1)
                self.returns = [v.strip() for v in values[1].split(",")] if len(values) > 1 else []
                break
            self.steps.append(self._step(stripped, where))
        if len(self.returns) != len(self.outputs):
            raise ParseError(f"@main returns {len(self.returns)} values but declares {len(self.outputs)} results")

    def _step(self, line: str, where: str) -> tuple[str, str, list[str], Any]:
        match = _ASSIGN.match(line)
        if match is None:
            raise ParseError(f"cannot read {line!r} at {where}")
        out, op, rest = match.group("out"), match.group("op").strip('"'), match.group("rest")
        short = op.removeprefix("stablehlo.")
        if op == "stablehlo.constant":
            value = re.search(r"dense<([^>]*)>", rest)
            if value is None:
                raise ParseError(f"stablehlo.constant without a dense<...> value at {where}")
            shape, dtype = _tensor(rest.split(":")[-1], where)
            return out, "constant", [], np.full(shape, _scalar(value.group(1).strip(), dtype, where), dtype=dtype)
        if op == "stablehlo.convert":
            operand = rest.split(":")[0].strip()
            _, dtype = _tensor(rest.split("->")[-1], where)
            return out, "convert", [operand], dtype
        if op == "stablehlo.broadcast_in_dim" and re.search(r"dims\s*=\s*\[\s*\]", rest):
            # Only a scalar broadcast to a shape; the array is made when the program runs.
            operand = rest.split(",")[0].strip()
            return out, "broadcast", [operand], _tensor(rest.split("->")[-1], where)
        if not op.startswith("stablehlo.") or short not in self.ops:
            raise UnsupportedOpError(op, location=where, supported=TOY_OPS, backend=PLATFORM)
        operands = [o.strip() for o in rest.split(":")[0].split(",")]
        return out, short, operands, None

    def run(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        values: dict[str, np.ndarray] = dict(zip(self.params, args))
        for out, op, operands, extra in self.steps:
            try:
                inputs = [values[o] for o in operands]
            except KeyError as exc:
                raise InvalidArgument(f"value {exc.args[0]} used before it is defined") from None
            if op == "constant":
                values[out] = extra
            elif op == "convert":
                values[out] = inputs[0].astype(extra)
            elif op == "broadcast":
                shape, dtype = extra
                values[out] = np.full(shape, inputs[0], dtype=dtype)
            else:
                with np.errstate(all="ignore"):  # overflow, 0/0: the values are the point, not warnings
                    values[out] = np.asarray(self.ops[op](*inputs), dtype=inputs[0].dtype)
        return [np.array(values[name], copy=True) for name in self.returns]


# -- executables -------------------------------------------------------------------------------


class ToyExecutable(Executable):
    def __init__(self, program: ToyProgram, options: CompileOptions) -> None:
        self.program, self.options = program, options

    def name(self) -> str:
        return self.program.name

    def num_replicas(self) -> int:
        return self.options.num_replicas

    def num_partitions(self) -> int:
        return self.options.num_partitions

    def num_outputs(self) -> int:
        return len(self.program.outputs)

    def size_of_generated_code_in_bytes(self) -> int:
        return len(self.program.text)

    def get_cost_analysis(self) -> dict[str, Any]:
        return {"flops": float(len(self.program.steps))}

    def output_memory_kinds(self) -> list[str]:
        return ["device"] * self.num_outputs()

    def optimized_program(self) -> Program:
        return Program(self.program.text)

    def serialize(self) -> bytes:
        return json.dumps({"text": self.program.text, "replicas": self.options.num_replicas,
                           "partitions": self.options.num_partitions,
                           "assignment": self.options.device_assignment}).encode()

    def output_element_types(self) -> list[BufferType]:
        return [from_numpy_dtype(dtype) for _, dtype in self.program.outputs]

    def output_dimensions(self) -> list[tuple[int, ...]]:
        return [shape for shape, _ in self.program.outputs]

    def fingerprint(self) -> str:
        return hashlib.sha256(self.serialize()).hexdigest()

    def get_compiled_memory_stats(self) -> CompiledMemoryStats:
        arguments = sum(int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in self.program.inputs)
        outputs = sum(int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in self.program.outputs)
        return CompiledMemoryStats(argument_size_in_bytes=arguments, output_size_in_bytes=outputs,
                                   total_size_in_bytes=arguments + outputs)


class ToyLoadedExecutable(LoadedExecutable):
    def __init__(self, client: "ToyClient", executable: ToyExecutable,
                 assignment: tuple[tuple[int, ...], ...]) -> None:
        self.client, self.executable, self.assignment = client, executable, assignment
        self.devices = [client.devices_by_id[row[0]] for row in assignment]
        self.deleted = False

    def get_executable(self) -> Executable:
        return self.executable

    def addressable_devices(self) -> list[Device]:
        return list(self.devices)

    def delete(self) -> None:
        self.deleted = True

    def is_deleted(self) -> bool:
        return self.deleted

    def fingerprint(self) -> str:
        return self.executable.fingerprint()

    def get_device_assignment(self) -> tuple[tuple[int, ...], ...]:
        return self.assignment

    def execute(self, argument_lists: Sequence[Sequence[Buffer]], options: ExecuteOptions | None = None,
                execute_device: Device | None = None) -> ExecuteResult:
        if self.deleted:
            raise FailedPrecondition("PJRT_LoadedExecutable_Execute: the executable was deleted")
        options = options or ExecuteOptions()
        devices = self.devices
        if execute_device is not None:
            # A device of another toy client is a ToyDevice too, but not one this client can address.
            if not isinstance(execute_device, ToyDevice) or execute_device not in self.client.devices_list:
                raise InvalidArgument(f"PJRT_LoadedExecutable_Execute: {execute_device!r} is not a device of this client")
            devices = [execute_device]
        if len(argument_lists) != len(devices):
            raise InvalidArgument(f"PJRT_LoadedExecutable_Execute: {len(argument_lists)} argument lists "
                                  f"for {len(devices)} devices")
        program = self.executable.program
        donated = [i for i in program.aliases.values() if i not in options.non_donatable_input_indices]
        checked = [self._arguments(program, args, device) for args, device in zip(argument_lists, devices)]
        for args in argument_lists:
            self._check_donation(args, donated)
        outputs: list[list[Buffer]] = []
        events: list[Event] = []
        for device, args, arrays in zip(devices, argument_lists, checked):
            error: PjrtError | None = None
            try:
                results = program.run(arrays)
            except PjrtError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 - an error inside an execution goes on its event
                error = ExecutionError(f"{program.name} on TOY_{device.description.id()}: "
                                       f"{type(exc).__name__}: {exc}")
            for in_index in donated:
                args[in_index].delete()  # donated: the output took its storage
            memory = device.memories[0]
            if error is None:
                outputs.append([self.client.buffer_class(r, from_numpy_dtype(r.dtype), device, memory)
                                for r in results])
            else:
                outputs.append([self.client.buffer_class.failed(shape, from_numpy_dtype(dtype), device, memory, error)
                                for shape, dtype in program.outputs])
            events.append(ToyEvent(error=error))
        return ExecuteResult(outputs, events)

    @staticmethod
    def _check_donation(args: Sequence[Buffer], donated: Sequence[int]) -> None:
        for index in donated:
            buffer = args[index]
            if isinstance(buffer, ToyBuffer) and buffer._external_references:  # _arguments took no other
                raise InvalidArgument("Donation requested for buffer with external reference")
            if any(other is buffer for i, other in enumerate(args) if i != index):
                raise InvalidArgument("Attempt to donate a buffer which is also used by the same call to Execute()")

    @staticmethod
    def _arguments(program: ToyProgram, args: Sequence[Buffer], device: ToyDevice | None = None) -> list[np.ndarray]:
        if len(args) != len(program.inputs):
            raise InvalidArgument(f"PJRT_LoadedExecutable_Execute: @main takes {len(program.inputs)} "
                                  f"arguments, got {len(args)}")
        arrays = []
        for i, (buffer, (shape, dtype)) in enumerate(zip(args, program.inputs)):
            if not isinstance(buffer, ToyBuffer):
                raise InvalidArgument(f"argument {i} is {type(buffer).__name__}, not a buffer of this client")
            if device is not None and buffer._device is not device:
                raise InvalidArgument(f"Buffer passed to Execute() as argument {i} is on device "
                                      f"TOY_{buffer._device.description.id()}, but the execution runs on "
                                      f"TOY_{device.description.id()}")
            array = buffer._live(f"PJRT_LoadedExecutable_Execute argument {i}")
            if array.shape != shape or array.dtype != dtype:
                raise InvalidArgument(f"argument {i} of @main is {dtype}{list(shape)}, got "
                                      f"{array.dtype}{list(array.shape)}")
            arrays.append(array)
        return arrays


# -- topology and client -----------------------------------------------------------------------


class ToyTopology(TopologyDescription):
    def __init__(self, num_devices: int) -> None:
        self.descriptions = [ToyDeviceDescription(i) for i in range(num_devices)]

    def platform_name(self) -> str:
        return PLATFORM

    def platform_version(self) -> str:
        return "toy 1.0"

    def get_device_descriptions(self) -> list[DeviceDescription]:
        return list(self.descriptions)

    def serialize(self) -> bytes:
        return json.dumps({"platform": PLATFORM, "devices": len(self.descriptions)}).encode()

    def attributes(self) -> dict[str, Any]:
        return {}


class ToyClient(Client):
    # Class attributes, so that a test's broken plugin can swap one part and keep the rest.
    buffer_class: type[ToyBuffer] = ToyBuffer
    device_class: type[ToyDevice] = ToyDevice
    loaded_executable_class: type[ToyLoadedExecutable] = ToyLoadedExecutable
    memory_class: type[ToyMemory] = ToyMemory
    program_class: type[ToyProgram] = ToyProgram

    def __init__(self, num_devices: int = 2) -> None:
        shared = self.memory_class(num_devices, "pinned_host", 1)
        self.devices_list = [self.device_class(i, self.memory_class(i, "device", 0), shared)
                             for i in range(num_devices)]
        self.memories = [d.memories[0] for d in self.devices_list] + [shared]
        self.devices_by_id = {d.description.id(): d for d in self.devices_list}

    def platform_name(self) -> str:
        return PLATFORM

    def process_index(self) -> int:
        return 0

    def platform_version(self) -> str:
        return "toy 1.0"

    def devices(self) -> list[Device]:
        return list(self.devices_list)

    def addressable_devices(self) -> list[Device]:
        return list(self.devices_list)

    def lookup_device(self, device_id: int) -> Device:
        try:
            return self.devices_by_id[device_id]
        except KeyError:
            raise InvalidArgument(f"No matching device found for device_id {device_id}") from None

    def lookup_addressable_device(self, local_hardware_id: int) -> Device:
        for device in self.devices_list:
            if device.local_hardware_id() == local_hardware_id:
                return device
        raise InvalidArgument(f"No matching device found for local_hardware_id {local_hardware_id}")

    def addressable_memories(self) -> list[Memory]:
        return list(self.memories)

    def default_device_assignment(self, num_replicas: int, num_partitions: int) -> tuple[tuple[int, ...], ...]:
        if num_replicas * num_partitions > len(self.devices_list):
            raise InvalidArgument(f"{num_replicas} replicas x {num_partitions} partitions need more than "
                                  f"the {len(self.devices_list)} devices of this client")
        ids = iter(range(num_replicas * num_partitions))
        return tuple(tuple(next(ids) for _ in range(num_partitions)) for _ in range(num_replicas))

    def compile(self, program: Program, options: CompileOptions | bytes | None = None) -> LoadedExecutable:
        if program.format != "mlir":
            raise InvalidArgument(f"Unknown program format '{program.format}'.")
        if options is not None and not isinstance(options, (CompileOptions, bytes, bytearray, memoryview)):
            raise InvalidArgument(f"compile options must be CompileOptions or serialized bytes, got "
                                  f"{type(options).__name__}")
        decoded = decode_compile_options(options)
        assignment = decoded.device_assignment or self.default_device_assignment(
            decoded.num_replicas, decoded.num_partitions)
        if decoded.num_partitions != 1:
            raise InvalidArgument("the toy plugin runs one partition per program")
        if len(assignment) != decoded.num_replicas or any(len(row) != decoded.num_partitions for row in assignment):
            raise InvalidArgument(f"device_assignment {assignment} is not {decoded.num_replicas} replica(s) x "
                                  f"{decoded.num_partitions} partition(s)")
        for row in assignment:
            for device_id in row:
                self.lookup_device(device_id)
        executable = ToyExecutable(self.program_class(program.text()), decoded)
        return self.loaded_executable_class(self, executable, tuple(tuple(r) for r in assignment))

    def deserialize_and_load(self, serialized: bytes) -> LoadedExecutable:
        try:
            data = json.loads(serialized)
        except ValueError as exc:
            raise InvalidArgument(f"not a serialized toy executable: {exc}") from None
        options = CompileOptions(data["replicas"], data["partitions"],
                                 None if data["assignment"] is None else tuple(map(tuple, data["assignment"])))
        return self.compile(Program(data["text"]), options)

    def _place(self, device: Device | None, memory: Memory | None) -> tuple[ToyDevice, ToyMemory]:
        if memory is not None:
            if not isinstance(memory, ToyMemory):
                raise InvalidArgument(f"{memory!r} is not a memory of this client")
            target = device if device is not None else memory.devices[0]
            if target not in memory.devices:
                raise InvalidArgument(f"memory {memory.to_string()} is not addressable by {target!r}")
            return target, memory
        target = device if device is not None else self.devices_list[0]
        if not isinstance(target, ToyDevice):
            raise InvalidArgument(f"{target!r} is not a device of this client")
        return target, target.memories[0]

    def buffer_from_host_buffer(self, array: np.ndarray, *, device: Device | None = None,
                                memory: Memory | None = None,
                                semantics: HostBufferSemantics = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
                                element_type: BufferType | None = None) -> HostTransfer:
        try:
            HostBufferSemantics(semantics)
        except ValueError:
            raise InvalidArgument(f"PJRT_Client_BufferFromHostBuffer: {semantics!r} is not a host buffer "
                                  "semantics") from None
        array = np.asarray(array)
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        kind = from_numpy_dtype(array.dtype) if element_type is None else BufferType(element_type)
        dtype = to_numpy_dtype(kind)
        if dtype.itemsize != array.dtype.itemsize:
            raise InvalidArgument(f"element type {kind.name} does not match host dtype {array.dtype}")
        target, place = self._place(device, memory)
        data = np.array(array, order="C", copy=True).view(dtype)  # dense row-major, as ToyLayouts says
        return HostTransfer(self.buffer_class(data, kind, target, place), ToyEvent())

    def create_uninitialized_buffer(self, dims: Sequence[int], element_type: BufferType, *,
                                    device: Device | None = None, memory: Memory | None = None) -> Buffer:
        if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in dims):
            raise InvalidArgument(f"PJRT_Client_CreateUninitializedBuffer: dimensions must be non-negative, "
                                  f"got {list(dims)}")
        target, place = self._place(device, memory)
        return self.buffer_class(np.zeros(tuple(dims), to_numpy_dtype(element_type)), BufferType(element_type),
                                 target, place)

    def create_view_of_device_buffer(self, producer: Any, *, device: Device | None = None,
                                     on_delete: Callable[[], None] | None = None) -> Buffer:
        if on_delete is not None and not callable(on_delete):
            raise InvalidArgument(f"PJRT_Client_CreateViewOfDeviceBuffer: on_delete must be callable, got {on_delete!r}")
        try:
            array = np.from_dlpack(producer)
        except Exception as exc:  # noqa: BLE001 - the producer's own error says what is wrong
            raise InvalidArgument(f"PJRT_Client_CreateViewOfDeviceBuffer: cannot view {type(producer).__name__}: "
                                  f"{exc}") from None
        if not array.flags.c_contiguous:
            raise InvalidArgument("PJRT_Client_CreateViewOfDeviceBuffer: the toy views dense row-major memory only; "
                                  f"the producer's array has strides {array.strides}")
        target, place = self._place(device, None)
        return self.buffer_class(array, from_numpy_dtype(array.dtype), target, place, on_delete=on_delete, owned=False)

    def topology_description(self) -> TopologyDescription:
        return ToyTopology(len(self.devices_list))


# -- extensions, the Api and the plugin object -------------------------------------------------


def _own(obj: Any, cls: type, what: str) -> Any:
    """``obj`` (or the toy object behind the host's gate) if it is a ``cls``; else InvalidArgument:
    an extension call describes only the toy's own objects."""
    obj = getattr(obj, "unwrapped", obj)
    if not isinstance(obj, cls):
        raise InvalidArgument(f"{what}: expected a {cls.__name__}, got {obj!r}")
    return obj


class ToyLayouts:
    """Layouts extension, version 1: every toy array is dense and row-major."""

    def buffer_memory_layout(self, buffer: Any) -> MemoryLayout:
        buffer = _own(buffer, ToyBuffer, "Layouts.buffer_memory_layout")
        return MemoryLayout(tuple(reversed(range(len(buffer.dimensions())))))

    def client_default_layout(self, client: Any, element_type: Any, dims: Sequence[int]) -> MemoryLayout:
        what = "Layouts.client_default_layout"
        _own(client, ToyClient, what)
        try:
            BufferType(element_type)
        except (ValueError, TypeError):
            raise InvalidArgument(f"{what}: {element_type!r} is not a PJRT_Buffer_Type") from None
        if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in dims):
            raise InvalidArgument(f"{what}: dimensions must be non-negative, got {list(dims)}")
        return MemoryLayout(tuple(reversed(range(len(dims)))))


class ToyMemoryDescriptions:
    """MemoryDescriptions extension, version 1."""

    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        _own(device_description, ToyDeviceDescription, "MemoryDescriptions.memory_descriptions")
        return [("device", 0), ("pinned_host", 1)]


class ToyApi(Api):
    client_class: type[ToyClient] = ToyClient

    def __init__(self, plugin: "ToyPlugin") -> None:
        self.plugin = plugin

    def api_version(self) -> ApiVersion:
        return ApiVersion.parse(self.plugin.api_version)

    def extensions(self) -> Mapping[str, Any]:
        offered = {"Layouts": ToyLayouts(), "MemoryDescriptions": ToyMemoryDescriptions()}
        return {name: offered[name] for name in self.plugin.extensions if name in offered}

    def plugin_attributes(self) -> dict[str, Any]:
        return {"toy_version": "1.0", "stablehlo_current_version": [1, 0, 0],
                "stablehlo_minimum_version": [1, 0, 0]}

    def client_create(self, options: Mapping[str, Any] | None = None, *,
                      kv_store: KeyValueStore | None = None) -> Client:
        # The key-value callbacks are how the processes of a job meet; the toy is always one
        # process, so it has nothing to exchange and leaves them unused (JAX passes them whenever
        # jax.distributed is initialized, a one-process job included).
        del kv_store
        return self.client_class(int(dict(options or {}).get("num_devices", self.plugin.num_devices)))

    def topology_deserialize(self, serialized: bytes) -> TopologyDescription:
        try:
            data = json.loads(serialized)
        except ValueError as exc:
            raise InvalidArgument(f"not a serialized toy topology: {exc}") from None
        if data.get("platform") != PLATFORM:
            raise InvalidArgument(f"not a toy topology: platform {data.get('platform')!r}")
        return ToyTopology(int(data["devices"]))


#: What the toy cannot do, as data: its compiler knows a few elementwise ops, so the corpus
#: programs (reductions, dots, control flow) do not compile. Strict: one that compiles is an error.
TOY_LIMITATIONS = (
    Limitation("the toy compiler knows only elementwise add/subtract/multiply/divide/remainder/maximum/"
               "minimum/negate/abs, constant, convert and scalar broadcast; the corpus programs need more",
               ("execute/corpus_*",)),
    Limitation("the toy compiler runs no collective op (all_reduce, all_gather, replica_id...)",
               ("collectives/*",)),
    Limitation("served to JAX, the toy compiles JAX's elementwise programs only: jax.jit of tanh, a sum or a "
               "matrix product needs ops it does not know, and it runs one partition per program",
               ("jax/jit", "jax/block_until_ready", "jax/several_devices")),
)


class ToyPlugin:
    """The pluggy plugin object: ``toy = "pjrt_hub.testing.toy:plugin"`` as an entry point."""

    api_class: type[ToyApi] = ToyApi

    def __init__(self, *, api_version: str = "0.117", min_framework_version: str | None = None,
                 num_devices: int = 2, extensions: Mapping[str, int] | None = None,
                 limitations: Sequence[Limitation] = TOY_LIMITATIONS, description: str = "") -> None:
        self.api_version = api_version
        self.min_framework_version = min_framework_version
        self.num_devices = num_devices
        self.extensions = dict({"Layouts": 1, "MemoryDescriptions": 1} if extensions is None else extensions)
        self.limitations = tuple(limitations)
        self.description = description or "the toy plugin of pjrt_hub.testing"

    @hookimpl
    def pjrt_hub_declare(self) -> PluginDeclaration:
        return PluginDeclaration(api_version=self.api_version, platform_name=PLATFORM,
                                 extensions=dict(self.extensions),
                                 min_framework_version=self.min_framework_version,
                                 limitations=self.limitations, description=self.description)

    @hookimpl
    def pjrt_hub_get_api(self) -> Api:
        return self.api_class(self)


#: The default toy: PJRT API 0.105, two devices.
plugin = ToyPlugin()
