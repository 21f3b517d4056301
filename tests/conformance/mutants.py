"""pjrt-hub's catalogue of mutant plugins: the toy or the reference plugin, one defect each.

Each mutant is the kind of defect a real plugin ships (a kernel that saturates where it should
wrap, a copy that shares its source's storage, an event that fires before the copy it guards),
planted by swapping one method of one class of the toy (subclasses, nothing global) or, for the
behaviour only the host runtime has (asynchrony, in-place donation, device worker threads), by
patching one method of the reference plugin's runtime for the duration of the run. Each names the
cases that must fail on it; ``tests/conformance/test_mutation.py`` runs them all and the
unmodified plugins as controls, and ``pjrt-hub conformance --mutation-report`` prints the score
per group. A new case comes with a mutant here that it kills.

This file imports only pjrt-hub, so it loads as a plain file from the CLI.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import time
from typing import Any, Callable

import ml_dtypes
import numpy as np

from pjrt_hub.abi import (ApiVersion, Buffer, BufferType, Device, ExecuteResult, Internal, InvalidArgument,
                          to_numpy_dtype)
from pjrt_hub.extensions import MemoryLayout
from pjrt_hub.testing._mutation import Base, Mutant, patched
from pjrt_hub.testing.toy import (ToyApi, ToyBuffer, ToyClient, ToyDevice, ToyDeviceDescription, ToyEvent,
                                  ToyLayouts, ToyLoadedExecutable, ToyMemory, ToyMemoryDescriptions, ToyPlugin,
                                  ToyProgram, ToyTopology)
from pjrt_hub.testing import toy as toy_module

# -- building mutants ----------------------------------------------------------------------------


def toy(*, buffer: dict | None = None, client: dict | None = None, loaded: dict | None = None,
        api: dict | None = None, ops: dict | None = None, program: dict | None = None, device: dict | None = None,
        memory: dict | None = None, **settings: Any) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A factory of toy plugins whose classes have the given methods replaced (a subclass each)."""

    def build() -> contextlib.AbstractContextManager[Any]:
        buffer_cls = type("MutantBuffer", (ToyBuffer,), dict(buffer or {}))
        program_attrs = dict(program or {})
        if ops:
            program_attrs["ops"] = {**ToyProgram.ops, **ops}
        program_cls = type("MutantProgram", (ToyProgram,), program_attrs)
        loaded_cls = type("MutantLoadedExecutable", (ToyLoadedExecutable,), dict(loaded or {}))
        device_cls = type("MutantDevice", (ToyDevice,), dict(device or {}))
        memory_cls = type("MutantMemory", (ToyMemory,), dict(memory or {}))
        client_cls = type("MutantClient", (ToyClient,), {
            "buffer_class": buffer_cls, "program_class": program_cls, "loaded_executable_class": loaded_cls,
            "device_class": device_cls, "memory_class": memory_cls, **(client or {})})
        api_cls = type("MutantApi", (ToyApi,), {"client_class": client_cls, **(api or {})})
        plugin_cls = type("MutantPlugin", (ToyPlugin,), {"api_class": api_cls})
        return contextlib.nullcontext(plugin_cls(**settings))

    return build


def reference(*changes: tuple[Any, str, Any]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A factory of the reference plugin with runtime methods patched for the duration."""

    @contextlib.contextmanager
    def build() -> Any:
        plugin = importlib.import_module("pjrt_hub.backends.reference.plugin")
        with patched(*changes):
            yield plugin

    return build


def _runtime() -> Any:
    return importlib.import_module("pjrt_hub.backends.cpu_runtime")


def _runtime_module(name: str) -> Any:
    return importlib.import_module(f"pjrt_hub.backends.cpu_runtime.{name}")


BASES = (
    Base("toy", lambda: contextlib.nullcontext(ToyPlugin())),
    Base("reference", lambda: contextlib.nullcontext(importlib.import_module("pjrt_hub.backends.reference.plugin"))),
)

# -- numerics: the toy's op table with one op changed --------------------------------------------


def _narrow(dtype: np.dtype) -> bool:
    return dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _saturating(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def op(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind not in "iu":
            return fn(a, b)
        info = np.iinfo(a.dtype)
        exact = fn(a.astype(object), b.astype(object))
        return np.clip(exact, int(info.min), int(info.max)).astype(a.dtype)
    return op


def _small_ints_through_int32(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """8- and 16-bit integers computed in int32 and stored back with a saturating cast."""
    def op(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind in "iu" and a.dtype.itemsize < 4:
            info = np.iinfo(a.dtype)
            return np.clip(fn(a.astype(np.int32), b.astype(np.int32)), int(info.min), int(info.max)).astype(a.dtype)
        return fn(a, b)
    return op


def _wide_multiply_through_float(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.itemsize == 8 and a.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            product = a.astype(np.float64) * b.astype(np.float64)
        info = np.iinfo(a.dtype)
        return np.clip(product, float(info.min), float(info.max)).astype(a.dtype)
    return np.multiply(a, b)


def _unsigned_subtract_clamps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "u":
        return np.where(a >= b, a - b, np.zeros_like(a))
    return np.subtract(a, b)


def _floor_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return np.floor_divide(a, np.where(b == 0, np.ones_like(b), b))
    return np.divide(a, b)


def _python_remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    safe = np.where(b == 0, np.ones_like(b), b) if a.dtype.kind in "iu" else b
    return np.remainder(a, safe)


def _trapping_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and (b == 0).any():
        raise ZeroDivisionError("integer division by zero")
    return toy_module._divide(a, b)


def _safe_float_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return toy_module._divide(a, b)
    return np.where(b == 0, np.zeros_like(a), np.divide(a, np.where(b == 0, np.ones_like(b), b)))


def _fmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.fmax(a, b)


def _fast_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fast math: x * 0 folded to 0, so 0 * inf is 0 instead of NaN."""
    product = np.multiply(a, b)
    if a.dtype.kind in "fV":
        return np.where((a == 0) | (b == 0), np.zeros_like(product), product)
    return product


def _negate_by_subtraction(a: np.ndarray) -> np.ndarray:
    return np.subtract(np.zeros_like(a), a)


def _abs_by_comparison(a: np.ndarray) -> np.ndarray:
    return np.where(a < 0, -a, a)


def _through(kind: Any, fn: Callable[..., np.ndarray], only: Any) -> Callable[..., np.ndarray]:
    """Compute ``fn`` in float32 and round the result through ``kind`` on its way to ``only``."""
    def op(*xs: np.ndarray) -> np.ndarray:
        if xs[0].dtype != np.dtype(only):
            return fn(*xs)
        with np.errstate(all="ignore"):
            wide = fn(*[x.astype(np.float32) for x in xs])
        return wide.astype(kind).astype(only)
    return op


def _truncate_bf16(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """bf16 results made by dropping the low 16 bits of the float32 result (no rounding)."""
    def op(*xs: np.ndarray) -> np.ndarray:
        if xs[0].dtype != np.dtype(ml_dtypes.bfloat16):
            return fn(*xs)
        with np.errstate(all="ignore"):
            wide = np.asarray(fn(*[x.astype(np.float32) for x in xs]), np.float32)
        return (wide.view(np.uint32) >> 16).astype(np.uint16).view(ml_dtypes.bfloat16)
    return op


def _f16_saturates(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def op(*xs: np.ndarray) -> np.ndarray:
        out = fn(*xs)
        if out.dtype == np.float16:
            return np.where(np.isinf(out) & ~np.isinf(xs[0]), np.copysign(np.float16(65504), out), out).astype(np.float16)
        return out
    return op


def _excess_precision_run(self: ToyProgram, args: Any) -> list[np.ndarray]:
    """f16/bf16 programs computed in float32 from end to end, rounded once at the outputs."""
    if not any(_narrow(a.dtype) for a in args):
        return ToyProgram.run(self, args)
    wide = ToyProgram.run(self, [a.astype(np.float32) if _narrow(a.dtype) else a for a in args])
    with np.errstate(all="ignore"):
        return [w.astype(dtype) for w, (_, dtype) in zip(wide, self.outputs)]


NUMERICS = [
    Mutant("saturating_integer_add", "numerics", "integer add saturates at the type's limits instead of wrapping",
           tuple(f"numerics/integer_wraparound_{t}" for t in ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64")),
           toy(ops={"add": _saturating(np.add)})),
    Mutant("small_integers_through_int32", "numerics", "8- and 16-bit integer arithmetic done in int32 and stored "
           "back with a saturating cast", ("numerics/integer_wraparound_s8", "numerics/integer_wraparound_u16"),
           toy(ops={op: _small_ints_through_int32(fn) for op, fn in
                    (("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply))})),
    Mutant("wide_multiply_through_float64", "numerics", "64-bit integer multiply computed in float64",
           ("numerics/integer_wraparound_s64",), toy(ops={"multiply": _wide_multiply_through_float})),
    Mutant("unsigned_subtract_clamps", "numerics", "unsigned subtract stops at 0", ("numerics/integer_wraparound_u32",),
           toy(ops={"subtract": _unsigned_subtract_clamps})),
    Mutant("integer_divide_floors", "numerics", "integer divide rounds toward -inf (Python's //)",
           ("numerics/integer_division",), toy(ops={"divide": _floor_divide})),
    Mutant("integer_remainder_python", "numerics", "remainder takes the divisor's sign (Python's %)",
           ("numerics/integer_division", "numerics/float_division"), toy(ops={"remainder": _python_remainder})),
    Mutant("integer_divide_by_zero_traps", "numerics", "integer division by zero raises inside the kernel",
           ("numerics/integer_division",), toy(ops={"divide": _trapping_divide})),
    Mutant("float_divide_by_zero_is_zero", "numerics", "a 'safe' float divide that gives 0 for x/0",
           ("numerics/float_division",), toy(ops={"divide": _safe_float_divide})),
    Mutant("maximum_drops_nan", "numerics", "maximum implemented with fmax (NaN-dropping)",
           ("numerics/nan_propagation",), toy(ops={"maximum": _fmax})),
    Mutant("fast_math_multiply", "numerics", "multiply folds x * 0 to 0 (fast math), so 0 * inf is 0",
           ("numerics/nan_propagation",), toy(ops={"multiply": _fast_multiply})),
    Mutant("minimum_ignores_signed_zero", "numerics", "minimum returns either zero for (-0, +0) (numpy's minimum)",
           ("numerics/signed_zero",), toy(ops={"minimum": np.minimum})),
    Mutant("negate_by_subtraction", "numerics", "negate computed as 0 - x, so -(+0) is +0",
           ("numerics/signed_zero",), toy(ops={"negate": _negate_by_subtraction})),
    Mutant("abs_by_comparison", "numerics", "abs computed as x < 0 ? -x : x, so |-0| is -0",
           ("numerics/signed_zero",), toy(ops={"abs": _abs_by_comparison})),
    Mutant("bf16_truncated", "numerics", "bf16 results cut from float32 by dropping bits instead of rounding",
           ("numerics/rounding_bf16",),
           toy(ops={op: _truncate_bf16(fn) for op, fn in (("add", np.add), ("subtract", np.subtract),
                                                          ("multiply", np.multiply), ("divide", np.divide))})),
    Mutant("f16_through_bf16", "numerics", "f16 arithmetic rounded through bf16 (a narrower mantissa)",
           ("numerics/rounding_f16",),
           toy(ops={op: _through(ml_dtypes.bfloat16, fn, np.float16) for op, fn in
                    (("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide))})),
    Mutant("bf16_through_f16", "numerics", "bf16 arithmetic rounded through f16 (a narrower exponent range)",
           ("numerics/rounding_bf16",),
           toy(ops={op: _through(np.float16, fn, ml_dtypes.bfloat16) for op, fn in
                    (("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide))})),
    Mutant("f16_overflow_saturates", "numerics", "f16 results past the largest f16 clamp to it instead of "
           "becoming infinity", ("numerics/rounding_f16",),
           toy(ops={op: _f16_saturates(fn) for op, fn in (("add", np.add), ("multiply", np.multiply))})),
    Mutant("narrow_floats_excess_precision", "numerics", "f16/bf16 programs kept in float32 between ops and "
           "rounded once at the end", ("numerics/rounding_f16", "numerics/rounding_bf16"),
           toy(program={"run": _excess_precision_run})),
]

# -- the reference plugin's numerics: the signed-zero bug it had ---------------------------------


def _reference_numpy_maximum() -> Any:
    elementwise = importlib.import_module("pjrt_hub.backends.reference.elementwise")
    return reference((elementwise, "ieee_maximum", np.maximum), (elementwise, "ieee_minimum", np.minimum))


NUMERICS.append(Mutant("reference_extremes_ignore_signed_zero", "numerics", "the reference interpreter's maximum "
                       "and minimum on numpy's, which return either zero", ("numerics/signed_zero",),
                       _reference_numpy_maximum(), base="reference"))

# -- version, plugin, client, devices, memories, topology ----------------------------------------


def _api_version_081(self: ToyApi) -> ApiVersion:
    return ApiVersion(0, 81)


def _attributes_with_a_dict(self: ToyApi) -> dict[str, Any]:
    return {**ToyApi.plugin_attributes(self), "build": {"compiler": "gcc"}}


def _lookup_by_index(self: ToyClient, device_id: int) -> Device:
    return self.devices_list[device_id]  # Python's negative indexing finds a device for -1


def _same_device_everywhere(self: ToyClient, num_replicas: int, num_partitions: int) -> Any:
    return tuple((0,) * num_partitions for _ in range(num_replicas))


def _memories_without_shared(self: ToyClient) -> list[Any]:
    return [d.memories[0] for d in self.devices_list]


def _free_forgotten(self: Any, nbytes: int) -> None:
    """Freed bytes are never taken off the statistics."""


SURFACE = [
    Mutant("memory_stats_frozen", "devices", "PJRT_Device_MemoryStats reports the same bytes_in_use whatever is "
           "allocated", ("devices/memory_stats_follow_allocations",),
           toy(device={"memory_stats": lambda self: __import__("pjrt_hub.abi", fromlist=["MemoryStats"]).MemoryStats(
               bytes_in_use=0)})),
    Mutant("memory_stats_never_freed", "devices", "the runtime counts freed buffers as still in use",
           ("devices/memory_stats_follow_allocations",),
           reference((_runtime().CpuMemory, "_free", _free_forgotten)), base="reference"),
    Mutant("reports_another_version", "version", "the Api reports 0.81 while the plugin declares 0.105",
           ("version/api_version",), toy(api={"api_version": _api_version_081})),
    Mutant("lacks_a_call_of_its_minor", "version", "PJRT_Device_GetAttributes (0.92) left to the binding's "
           "placeholder in a plugin that declares 0.105", ("version/implements_Device.get_attributes",),
           toy(device={"get_attributes": Device.get_attributes})),
    Mutant("lacks_a_required_call", "version", "PJRT_Buffer_IsDeleted left to the binding's placeholder",
           ("version/required_calls",), toy(buffer={"is_deleted": Buffer.is_deleted})),
    Mutant("attribute_of_no_pjrt_type", "plugin", "a plugin attribute whose value is a dict",
           ("plugin/attributes",), toy(api={"plugin_attributes": _attributes_with_a_dict})),
    Mutant("client_platform_differs", "plugin", "the client reports platform 'toy_cpu', the declaration 'toy'",
           ("plugin/declared_platform",), toy(client={"platform_name": lambda self: "toy_cpu"})),
    Mutant("platform_name_capitalized", "client", "the platform name is 'Toy'", ("client/platform_name",),
           toy(client={"platform_name": lambda self: "Toy"})),
    Mutant("process_index_one", "client", "a single-process client reports process index 1",
           ("client/process_index",), toy(client={"process_index": lambda self: 1})),
    Mutant("lookup_by_list_index", "client", "LookupDevice indexes a list, so -1 finds the last device",
           ("client/lookup_device_negative_id",), toy(client={"lookup_device": _lookup_by_index})),
    Mutant("assignment_reuses_a_device", "client", "the default device assignment puts every replica on device 0",
           ("client/default_device_assignment",), toy(client={"default_device_assignment": _same_device_everywhere})),
    Mutant("addressable_memories_incomplete", "client", "AddressableMemories leaves out the shared host memory",
           ("client/addressable_memories",), toy(client={"addressable_memories": _memories_without_shared})),
    Mutant("device_ids_all_zero", "devices", "every device description has id 0", ("devices/id",),
           toy(device={"get_description": lambda self: ToyDeviceDescription(0)})),
    Mutant("local_hardware_ids_repeat", "devices", "every device has local hardware id 0",
           ("devices/local_hardware_id",), toy(device={"local_hardware_id": lambda self: 0})),
    Mutant("default_memory_not_addressable", "devices", "the default memory is a memory the device does not list",
           ("devices/memories",), toy(device={"default_memory": lambda self: ToyMemory(99, "device", 0)})),
    Mutant("kind_ids_collide", "memories", "every memory kind has kind id 0", ("memories/kind_id",),
           toy(memory={"kind_id": lambda self: 0})),
    Mutant("memory_forgets_its_devices", "memories", "a memory lists no device that can address it",
           ("memories/addressable_by_devices",), toy(memory={"addressable_by_devices": lambda self: []})),
    Mutant("topology_of_another_platform", "topology", "the client's topology reports platform 'cpu'",
           ("topology/platform",), toy(client={"topology_description": lambda self: type(
               "CpuNamedTopology", (ToyTopology,), {"platform_name": lambda t: "cpu"})(len(self.devices_list))})),
    Mutant("topology_misses_a_device", "topology", "the topology describes one device fewer than the client has",
           ("topology/device_descriptions",),
           toy(client={"topology_description": lambda self: ToyTopology(len(self.devices_list) - 1)})),
]

# -- buffers ---------------------------------------------------------------------------------------


def _decrease_never_fails(self: ToyBuffer) -> None:
    self._external_references = max(0, self._external_references - 1)


def _forgets_to_delete(self: ToyBuffer) -> None:
    """Forgets to free: the buffer lives on."""


def _size_in_elements(self: ToyBuffer) -> int:
    return int(np.prod(self._shape, dtype=np.int64))


def _uninitialized_as_f32(self: ToyClient, dims: Any, element_type: BufferType, *, device: Any = None,
                          memory: Any = None) -> Any:
    target, place = self._place(device, memory)
    return self.buffer_class(np.zeros(tuple(dims), np.float32), BufferType(element_type), target, place)


def _uninitialized_scalar_as_vector(self: ToyClient, dims: Any, element_type: BufferType, *, device: Any = None,
                                    memory: Any = None) -> Any:
    return ToyClient.create_uninitialized_buffer(self, tuple(dims) or (1,), element_type, device=device, memory=memory)


def _f16_kept_as_f32(self: ToyClient, array: Any, **kwargs: Any) -> Any:
    array = np.asarray(array)
    if array.dtype == np.float16:
        array = array.astype(np.float32)
    return ToyClient.buffer_from_host_buffer(self, array, **kwargs)


def _bool_as_u8(self: ToyClient, array: Any, **kwargs: Any) -> Any:
    array = np.asarray(array)
    if array.dtype == np.bool_:
        array = array.astype(np.uint8)
    return ToyClient.buffer_from_host_buffer(self, array, **kwargs)


def _no_donation(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None, execute_device: Any = None) -> Any:
    aliases = self.executable.program.aliases
    self.executable.program.aliases = {}
    try:
        return ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)
    finally:
        self.executable.program.aliases = aliases


def _donates_regardless(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                        execute_device: Any = None) -> Any:
    from pjrt_hub.abi import ExecuteOptions

    return ToyLoadedExecutable.execute(self, argument_lists, ExecuteOptions(), execute_device)


def _dimensions_reversed(self: ToyBuffer) -> tuple[int, ...]:
    return tuple(reversed(self._shape))


BUFFERS = [
    Mutant("survives_delete", "buffers", "PJRT_Buffer_Delete forgets to free", ("buffers/is_deleted",),
           toy(buffer={"delete": _forgets_to_delete})),
    Mutant("decrease_at_zero_succeeds", "buffers", "DecreaseExternalReferenceCount at zero returns quietly",
           ("buffers/decrease_reference_count_returns_error",), toy(buffer={"decrease_external_reference_count":
                                                                          _decrease_never_fails})),
    Mutant("size_in_elements", "buffers", "OnDeviceSizeInBytes counts elements, not bytes",
           ("buffers/on_device_size", "buffers/uninitialized_f32"), toy(buffer={"on_device_size_in_bytes": _size_in_elements})),
    Mutant("dimensions_reversed", "buffers", "Dimensions reports the shape in reverse", ("buffers/dimensions",),
           toy(buffer={"dimensions": _dimensions_reversed})),
    Mutant("uninitialized_stored_as_f32", "buffers", "uninitialized buffers of any type get float32 storage",
           ("buffers/uninitialized_s8", "buffers/uninitialized_bf16", "buffers/uninitialized_c128"),
           toy(client={"create_uninitialized_buffer": _uninitialized_as_f32})),
    Mutant("uninitialized_scalar_is_a_vector", "buffers", "an uninitialized scalar is made as a one-element vector",
           ("buffers/uninitialized_f32",), toy(client={"create_uninitialized_buffer": _uninitialized_scalar_as_vector})),
    Mutant("f16_kept_as_f32", "buffers", "half floats are stored as float32, as if the device had no f16",
           ("buffers/round_trip_f16",), toy(client={"buffer_from_host_buffer": _f16_kept_as_f32})),
    Mutant("bool_stored_as_u8", "buffers", "booleans become U8 buffers", ("buffers/round_trip_pred",),
           toy(client={"buffer_from_host_buffer": _bool_as_u8})),
    Mutant("donation_ignored", "buffers", "a donated input is left alive (the aliasing attribute is not read)",
           ("buffers/donation",), toy(loaded={"execute": _no_donation})),
    Mutant("non_donatable_ignored", "buffers", "ExecuteOptions.non_donatable_input_indices is not read",
           ("buffers/non_donatable_input",), toy(loaded={"execute": _donates_regardless})),
]

# -- transfers -----------------------------------------------------------------------------------


def _memory_order(self: ToyClient, array: Any, **kwargs: Any) -> Any:
    """Reads the host array's memory front to back, whatever its strides."""
    array = np.asarray(array)
    if not array.flags.c_contiguous and array.size and all(s >= 0 for s in array.strides) and \
            not any(s == 0 for s in array.strides):
        array = np.ravel(array, order="K").reshape(array.shape)
    return ToyClient.buffer_from_host_buffer(self, array, **kwargs)


def _negative_strides_forward(self: ToyClient, array: Any, **kwargs: Any) -> Any:
    """Walks a negatively strided array forward from its lowest address."""
    array = np.asarray(array)
    flipped = [axis for axis, stride in enumerate(array.strides) if stride < 0]
    if flipped:
        array = np.flip(array, axis=tuple(flipped))
    return ToyClient.buffer_from_host_buffer(self, array, **kwargs)


def _copy_to_memory_stays(self: ToyBuffer, memory: Any) -> Any:
    array = self._live("PJRT_Buffer_CopyToMemory")
    return type(self)(array.copy(), self._type, self._device, self._memory)


def _aliases_host_during_call(self: ToyClient, array: Any, *, device: Any = None, memory: Any = None,
                              semantics: Any = 0, element_type: Any = None) -> Any:
    from pjrt_hub.abi import HostTransfer, from_numpy_dtype

    target, place = self._place(device, memory)
    array = np.asarray(array)
    return HostTransfer(self.buffer_class(array, from_numpy_dtype(array.dtype), target, place), ToyEvent())


def _view_copies(self: ToyClient, producer: Any, *, device: Any = None, on_delete: Any = None) -> Any:
    return ToyClient.create_view_of_device_buffer(self, np.from_dlpack(producer).copy(), device=device,
                                                  on_delete=on_delete)


def _view_without_deleter(self: ToyClient, producer: Any, *, device: Any = None, on_delete: Any = None) -> Any:
    return ToyClient.create_view_of_device_buffer(self, producer, device=device)


def _destroy_calls_deleter_again(self: ToyBuffer) -> None:
    callback = getattr(self, "_remembered", None)
    ToyBuffer.delete(self)
    if callback is not None:
        callback()


def _remember_deleter(self: ToyBuffer, *args: Any, **kwargs: Any) -> None:
    ToyBuffer.__init__(self, *args, **kwargs)
    self._remembered = kwargs.get("on_delete")


def _dlpack_copy(self: ToyBuffer, **kwargs: Any) -> Any:
    return self._live("__dlpack__").copy().__dlpack__()


def _dlpack_keeps_reference(self: ToyBuffer, **kwargs: Any) -> Any:
    self.increase_external_reference_count()
    return self._live("__dlpack__").view().__dlpack__()


def _copy_alias(self: Any, memory: Any, action: str) -> Any:
    """CpuBuffer._copy_to without the copy: the new buffer shares the source's array."""
    runtime = _runtime()
    buffers = _runtime_module("_buffers")
    array = self._array
    if array is None:
        return _ORIGINAL_COPY_TO(self, memory, action)
    return runtime.CpuBuffer._make(memory, self._layout, array, buffers.READY, 0, True)


_ORIGINAL_COPY_TO = importlib.import_module("pjrt_hub.backends.cpu_runtime._buffers").CpuBuffer._copy_to

def _zero_copy_done_at_once() -> Callable[..., Any]:
    """A zero-copy buffer aliases the host array but says at once that it is done with it."""
    client = _runtime().CpuClient
    original = client.buffer_from_host_buffer

    def buffer_from_host_buffer(self: Any, array: Any, **kwargs: Any) -> Any:
        from pjrt_hub.abi import HostTransfer

        transfer = original(self, array, **kwargs)
        return HostTransfer(transfer.buffer, _runtime().READY)

    return buffer_from_host_buffer


def _zero_copy_never_released() -> Callable[..., Any]:
    """A zero-copy buffer forgets to give the host array back when it is deleted."""
    client = _runtime().CpuClient
    original = client.buffer_from_host_buffer

    def buffer_from_host_buffer(self: Any, array: Any, **kwargs: Any) -> Any:
        transfer = original(self, array, **kwargs)
        transfer.buffer._release = None
        return transfer

    return buffer_from_host_buffer


TRANSFERS = [
    Mutant("zero_copy_done_at_once", "transfers", "a zero-copy buffer aliases the host array but fires "
           "done_with_host_buffer at once", ("transfers/zero_copy_holds_the_host_array",),
           reference((_runtime().CpuClient, "buffer_from_host_buffer", _zero_copy_done_at_once())), base="reference"),
    Mutant("zero_copy_never_released", "transfers", "a zero-copy buffer never fires done_with_host_buffer, not even "
           "when deleted", ("transfers/zero_copy_holds_the_host_array",),
           reference((_runtime().CpuClient, "buffer_from_host_buffer", _zero_copy_never_released())),
           base="reference", timeout_scale=0.2),
    Mutant("host_array_in_memory_order", "transfers", "host arrays are read in memory order, ignoring strides "
           "(a transposed array arrives transposed)", ("transfers/strided_host_arrays",),
           toy(client={"buffer_from_host_buffer": _memory_order})),
    Mutant("negative_strides_walked_forward", "transfers", "negatively strided arrays are read forward from their "
           "lowest address", ("transfers/strided_host_arrays",),
           toy(client={"buffer_from_host_buffer": _negative_strides_forward})),
    Mutant("copy_to_device_shares_storage", "transfers", "CopyToDevice hands out the source's storage instead of "
           "a copy", ("transfers/copy_to_device_is_independent",),
           reference((_runtime().CpuBuffer, "_copy_to", _copy_alias)), base="reference"),
    Mutant("copy_to_memory_shares_storage", "transfers", "CopyToMemory hands out the source's storage instead of "
           "a copy", ("transfers/copy_to_memory_is_independent",),
           reference((_runtime().CpuBuffer, "_copy_to", _copy_alias)), base="reference"),
    Mutant("copy_to_memory_ignores_memory", "transfers", "CopyToMemory copies into the source's own memory",
           ("transfers/copy_to_memory",), toy(buffer={"copy_to_memory": _copy_to_memory_stays})),
    Mutant("aliases_host_array_during_call", "transfers", "kImmutableOnlyDuringCall keeps using the host array",
           ("transfers/immutable_only_during_call",), toy(client={"buffer_from_host_buffer": _aliases_host_during_call})),
    Mutant("view_copies", "transfers", "CreateViewOfDeviceBuffer copies the memory it should view",
           ("transfers/view_aliases_and_calls_its_deleter_once",), toy(client={"create_view_of_device_buffer": _view_copies})),
    Mutant("view_deleter_never_called", "transfers", "a view's on_delete callback is dropped",
           ("transfers/view_aliases_and_calls_its_deleter_once",),
           toy(client={"create_view_of_device_buffer": _view_without_deleter}), timeout_scale=0.2),
    Mutant("view_deleter_called_twice", "transfers", "a view's on_delete runs on delete and again on destroy",
           ("transfers/view_aliases_and_calls_its_deleter_once",),
           toy(buffer={"__init__": _remember_deleter, "destroy": _destroy_calls_deleter_again})),
    Mutant("dlpack_export_copies", "transfers", "__dlpack__ exports a copy of a host-memory buffer",
           ("transfers/dlpack_export_aliases",), toy(buffer={"__dlpack__": _dlpack_copy})),
    Mutant("dlpack_reference_leaks", "transfers", "__dlpack__ takes an external reference it never gives back",
           ("transfers/dlpack_export_aliases",), toy(buffer={"__dlpack__": _dlpack_keeps_reference})),
]

# -- compile and execute -------------------------------------------------------------------------


def _fingerprint_by_name(self: Any) -> str:
    return f"toy:{self.program.name}"


def _name_keyed_compile_cache() -> Callable[..., Any]:
    cache: dict[str, Any] = {}

    def compile(self: ToyClient, program: Any, options: Any = None) -> Any:
        name = toy_module._MODULE.search(program.text())
        key = name.group(1) if name else ""
        if key not in cache:
            cache[key] = ToyClient.compile(self, program, options)
        return cache[key]

    return compile


def _name_keyed_deserialize() -> Callable[..., Any]:
    loaded: dict[str, Any] = {}

    def deserialize_and_load(self: ToyClient, serialized: bytes) -> Any:
        text = json.loads(serialized)["text"]
        key = toy_module._MODULE.search(text).group(1)
        if key not in loaded:
            loaded[key] = ToyClient.deserialize_and_load(self, serialized)
        return loaded[key]

    return deserialize_and_load


def _executable_class(**methods: Any) -> dict[str, Any]:
    executable = type("MutantExecutable", (toy_module.ToyExecutable,), methods)

    def compile(self: ToyClient, program: Any, options: Any = None) -> Any:
        loaded = ToyClient.compile(self, program, options)
        loaded.executable.__class__ = executable
        return loaded

    return {"compile": compile}


def _off_by_one(self: ToyLoadedExecutable, *args: Any, **kwargs: Any) -> Any:
    result = ToyLoadedExecutable.execute(self, *args, **kwargs)
    for outputs in result.outputs:
        for buffer in outputs:
            if buffer.array is not None and buffer.array.dtype.kind == "f":
                buffer.array = buffer.array + np.asarray(1, buffer.array.dtype)
    return result


def _outputs_reversed(self: ToyLoadedExecutable, *args: Any, **kwargs: Any) -> Any:
    result = ToyLoadedExecutable.execute(self, *args, **kwargs)
    return ExecuteResult([list(reversed(o)) for o in result.outputs], result.device_complete_events)


def _outputs_on_assigned_device(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                 execute_device: Any = None) -> Any:
    """Runs on execute_device, but places the outputs on the device the executable was compiled for."""
    result = ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)
    assigned = self.devices[0]
    for buffer in result.outputs[0]:
        buffer._device, buffer._memory = assigned, assigned.memories[0]
    return result


def _outputs_on_device_zero(self: ToyLoadedExecutable, *args: Any, **kwargs: Any) -> Any:
    result = ToyLoadedExecutable.execute(self, *args, **kwargs)
    first = self.client.devices_list[0]
    for outputs in result.outputs:
        for buffer in outputs:
            buffer._device, buffer._memory = first, first.memories[0]
    return result


def _launch_loop_reads_the_first_list(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                      execute_device: Any = None) -> Any:
    """Each device's launch reads argument_lists[0]: every replica computes replica 0's inputs."""
    outputs, events = [], []
    for index in range(len(argument_lists)):
        result = ToyLoadedExecutable.execute(self, [argument_lists[0]], options, self.devices[0])
        for buffer in result.outputs[0]:
            device = self.devices[index]
            buffer._device, buffer._memory = device, device.memories[0]
        outputs += result.outputs
        events += result.device_complete_events
    return ExecuteResult(outputs, events)


def _results_at_least_1d(self: ToyProgram, args: Any) -> list[np.ndarray]:
    return [np.atleast_1d(r) for r in ToyProgram.run(self, args)]


COMPILE_AND_EXECUTE = [
    Mutant("scalars_become_vectors", "execute", "0-d results come back as one-element vectors",
           ("execute/scalar_and_empty_arrays",), toy(program={"run": _results_at_least_1d})),
    Mutant("fingerprint_of_the_name", "compile", "the fingerprint is made from the module name",
           ("compile/same_module_name",), toy(client=_executable_class(fingerprint=_fingerprint_by_name))),
    Mutant("compile_cache_keyed_by_name", "compile", "compiled executables are cached by module name",
           ("compile/same_module_name",), toy(client={"compile": _name_keyed_compile_cache()})),
    Mutant("deserialize_cache_keyed_by_name", "compile", "deserialized executables are cached by module name",
           ("compile/same_module_name",), toy(client={"deserialize_and_load": _name_keyed_deserialize()})),
    Mutant("counts_one_output", "compile", "NumOutputs is always 1", ("compile/num_outputs",),
           toy(client=_executable_class(num_outputs=lambda self: 1))),
    Mutant("executable_delete_is_a_no_op", "compile", "LoadedExecutable_Delete does nothing",
           ("compile/executable_delete", "compile/execute_deleted"), toy(loaded={"delete": lambda self: None})),
    Mutant("off_by_one", "execute", "every float output is one too large", ("execute/add_one_program",),
           toy(loaded={"execute": _off_by_one})),
    Mutant("outputs_in_reverse", "execute", "the outputs come back in reverse order", ("execute/several_outputs",),
           toy(loaded={"execute": _outputs_reversed})),
    Mutant("outputs_on_the_compiled_device", "execute", "with execute_device, the outputs are still placed on "
           "the device the program was compiled for", ("execute/execute_device",),
           toy(loaded={"execute": _outputs_on_assigned_device})),
    Mutant("launch_loop_reads_the_first_argument_list", "execute", "the launch loop hands every device the "
           "first argument list", ("execute/replicas",), toy(loaded={"execute": _launch_loop_reads_the_first_list})),
    Mutant("outputs_on_device_zero", "execute", "every output is placed on device 0", ("execute/outputs_on_the_device",
           "execute/replicas"), toy(loaded={"execute": _outputs_on_device_zero})),
]

# -- events and asynchrony (the reference plugin's runtime) ---------------------------------------


class _TwiceEvent(ToyEvent):
    def on_ready(self, callback: Any) -> None:
        ToyEvent.on_ready(self, callback)
        ToyEvent.on_ready(self, callback)


def _events_call_back_twice(self: ToyLoadedExecutable, *args: Any, **kwargs: Any) -> Any:
    result = ToyLoadedExecutable.execute(self, *args, **kwargs)
    events = []
    for event in result.device_complete_events:
        twice = _TwiceEvent(ready=False)
        twice.set(event.error())
        events.append(twice)
    return ExecuteResult(result.outputs, events)


class _Stuck(ToyEvent):
    """Never becomes ready, and ignores the timeout it is given."""

    def __init__(self) -> None:
        super().__init__(ready=False)

    def await_(self, timeout: float | None = None) -> None:
        self._done.wait()


def _to_host_ready_at_once(self: Any, dst: Any = None) -> Any:
    """A copy of a pending buffer reports done at once and copies when the data comes."""
    from pjrt_hub.abi import ToHost

    result = _ORIGINAL_TO_HOST(self, dst)
    if result.event.is_ready():
        return result
    return ToHost(result.array, _runtime().READY)


def _event_set_before_copy() -> Callable[..., Any]:
    """A copy of a pending buffer whose event fires before the copy is made."""
    from pjrt_hub.abi import ToHost

    def to_host_buffer(self: Any, dst: Any = None) -> Any:
        array = self._array
        if array is not None or self._source is None:
            return _ORIGINAL_TO_HOST(self, dst)
        layout = self._layout
        target = np.empty(layout.shape, layout.dtype) if dst is None else dst
        event = _runtime().CpuEvent()
        source, index = self._source, self._index

        def copy(error: Any) -> None:
            event.set(error)
            if error is None:
                np.copyto(target, source.results[index], casting="no")

        source.event.on_ready(copy)
        return ToHost(target, event)

    return to_host_buffer


_ORIGINAL_TO_HOST = _runtime().CpuBuffer.to_host_buffer


def _ready_event_early(self: Any) -> Any:
    return _runtime().READY if self._state == 0 else _ORIGINAL_READY_EVENT(self)


_ORIGINAL_READY_EVENT = _runtime().CpuBuffer.ready_event


def _completion_set_at_submit() -> Callable[..., Any]:
    executables = _runtime_module("_executables")
    original = executables.CpuLoadedExecutable._submit

    def submit(self: Any, launches: Any) -> Any:
        result = original(self, launches)
        return ExecuteResult(result.outputs, [_runtime().READY for _ in result.device_complete_events])

    return submit


def _pending_inputs_read_as_zeros() -> Callable[..., Any]:
    executables = _runtime_module("_executables")
    original = executables.CpuLoadedExecutable._check

    def check(self: Any, args: Any, device: Any, replica: int, non_donatable: Any) -> Any:
        launch = original(self, args, device, replica, non_donatable)
        for index, _source, _position in launch.pending:
            layout = self._inputs[index]
            launch.arrays[index] = np.zeros(layout.shape, layout.dtype)
        launch.pending = []
        return launch

    return check


def _errors_stay_on_the_event() -> Callable[..., Any]:
    """An execution error goes on the completion event; the outputs are settled as zeros."""
    buffers = _runtime_module("_buffers")
    original = buffers.CpuBuffer._settle

    def settle(self: Any, array: Any, error: Any) -> Any:
        if error is not None:
            layout = self._layout
            zeros = np.zeros(layout.shape, layout.dtype) if np.prod(layout.shape) < (1 << 20) else np.zeros(0)
            return original(self, zeros, None)
        return original(self, array, error)

    return settle


def _failed_execution_never_completes() -> Callable[..., Any]:
    """A failed execution returns from the worker without settling or signalling anything."""
    executables = _runtime_module("_executables")
    original = executables._Execution.__call__

    def call(self: Any) -> None:
        results, reusable, error = self.executable._compute(self.launch)
        if error is not None:
            return  # the error is lost, and with it every event of the execution
        original(self)

    return call


def _execution_error_not_on_outputs(self: ToyLoadedExecutable, *args: Any, **kwargs: Any) -> Any:
    """Outputs of a failed execution come back as zeros; only the event carries the error."""
    result = ToyLoadedExecutable.execute(self, *args, **kwargs)
    for outputs in result.outputs:
        for buffer in outputs:
            if buffer.error is not None:
                shape = buffer._shape if int(np.prod(buffer._shape)) < (1 << 20) else (0,)
                buffer.array = np.zeros(shape, to_numpy_dtype(buffer._type))
                buffer.error = None
    return result


EVENTS = [
    Mutant("ready_event_never_fires", "events", "a buffer's ready event never becomes ready and ignores the "
           "timeout it is given", ("buffers/ready_event", "events/await_"),
           toy(buffer={"ready_event": lambda self: _Stuck()}), timeout_scale=0.2),
    Mutant("on_ready_twice", "events", "OnReady runs its callback twice", ("events/on_ready_fires_once",),
           toy(loaded={"execute": _events_call_back_twice})),
    Mutant("copy_of_pending_buffer_ready_at_once", "events", "a copy to host of a pending output reports done at "
           "once", ("events/pending_execution",),
           reference((_runtime().CpuBuffer, "to_host_buffer", _to_host_ready_at_once)), base="reference"),
    Mutant("copy_event_before_copy", "events", "a copy to host fires its event before it copies",
           ("events/pending_execution",),
           reference((_runtime().CpuBuffer, "to_host_buffer", _event_set_before_copy())), base="reference"),
    Mutant("output_ready_too_early", "events", "a pending output's ready event says ready at once",
           ("events/pending_execution",),
           reference((_runtime().CpuBuffer, "ready_event", _ready_event_early)), base="reference"),
    Mutant("completion_event_at_submit", "events", "the execution's event fires when the work is queued",
           ("events/pending_execution",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_submit", _completion_set_at_submit())),
           base="reference"),
    Mutant("pending_input_read_early", "events", "an input still being computed is read before it is ready",
           ("events/pending_input",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_check", _pending_inputs_read_as_zeros())),
           base="reference"),
    Mutant("execution_error_only_on_event", "events", "an execution error reaches the completion event; the "
           "outputs are settled as zeros", ("events/execution_error_reaches_every_event_and_output",),
           reference((_runtime().CpuBuffer, "_settle", _errors_stay_on_the_event())), base="reference"),
    Mutant("failed_execution_never_completes", "events", "a failed execution leaves its event and its outputs "
           "pending for ever", ("events/execution_error_reaches_every_event_and_output",),
           reference((_runtime_module("_executables")._Execution, "__call__", _failed_execution_never_completes())),
           base="reference", timeout_scale=0.3),
    Mutant("toy_execution_error_dropped_from_outputs", "events", "the toy's failed outputs hold zeros",
           ("events/execution_error_reaches_every_event_and_output",),
           toy(loaded={"execute": _execution_error_not_on_outputs})),
]

# -- lifetime --------------------------------------------------------------------------------------


def _donation_ignores_references(args: Any, donated: Any) -> None:
    """Donates whatever the program aliases: neither references nor duplicates are looked at."""


def _delete_frees_shared_memory(self: ToyBuffer) -> None:
    """Deletes at once, references or not; the allocator reuses the memory (scribbled here)."""
    array = self.array
    ToyBuffer.delete(self)
    if array is not None and self._held is not None:
        array[...] = 0
        self._scribbled = array  # kept alive: the case reads it through a raw pointer


def _destroy_drops_queued_work(self: Any) -> None:
    self._destroyed = True
    for device in self._devices:
        worker = device._worker
        with worker._cond:  # the queued executions are dropped, never run
            worker._tasks.clear()
        worker.stop(wait=False)


def _runtime_donates_referenced() -> Callable[..., Any]:
    executables = _runtime_module("_executables")
    original = executables.CpuLoadedExecutable._check

    def check(self: Any, args: Any, device: Any, replica: int, non_donatable: Any) -> Any:
        saved = [(b, b._ext_refs) for b in args]
        try:
            for b, _ in saved:
                b._ext_refs = 0
            return original(self, args, device, replica, non_donatable)
        finally:
            for b, refs in saved:
                b._ext_refs = refs

    return check


LIFETIME = [
    Mutant("toy_donates_referenced_buffer", "lifetime", "donation does not look at external references",
           ("lifetime/external_reference_holds_off_donation",),
           toy(loaded={"_check_donation": staticmethod(_donation_ignores_references)})),
    Mutant("runtime_donates_referenced_buffer", "lifetime", "the runtime donates (and overwrites in place) a "
           "buffer that has an external reference", ("lifetime/external_reference_holds_off_donation",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_check", _runtime_donates_referenced())),
           base="reference"),
    Mutant("delete_frees_shared_memory", "lifetime", "Delete frees memory another framework still references",
           ("lifetime/external_reference_holds_off_deletion",), toy(buffer={"delete": _delete_frees_shared_memory})),
    Mutant("destroy_drops_queued_work", "lifetime", "Client_Destroy stops the device threads and drops what is "
           "queued", ("lifetime/client_destroyed_with_queued_work",),
           reference((_runtime().CpuClient, "destroy", _destroy_drops_queued_work)), base="reference",
           timeout_scale=0.5),
]

# -- concurrency -----------------------------------------------------------------------------------


def _arguments_on_the_executable(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                 execute_device: Any = None) -> Any:
    """Keeps the arguments of 'the' current execution on the executable: not thread-safe."""
    self.current = argument_lists
    time.sleep(0.002)
    return ToyLoadedExecutable.execute(self, self.current, options, execute_device)


def _shared_output_scratch() -> Callable[..., Any]:
    """Each output written into one scratch array per executable, reused by every execution."""
    executables = _runtime_module("_executables")
    original = executables.CpuLoadedExecutable._run_program
    scratches: dict[int, list[np.ndarray]] = {}

    def run_program(self: Any, arrays: Any, out: Any) -> Any:
        results, reusable = original(self, arrays, out)
        scratch = scratches.get(id(self._executable))
        if scratch is None:
            scratch = scratches.setdefault(id(self._executable), [np.empty_like(r) for r in results])
        for target, result in zip(scratch, results):
            np.copyto(target, result)
        return list(scratch), [False] * len(scratch)

    return run_program


CONCURRENCY = [
    Mutant("arguments_kept_on_the_executable", "concurrency", "Execute keeps its arguments on the executable, so "
           "concurrent callers swap them", ("concurrency/same_executable_from_threads",),
           toy(loaded={"execute": _arguments_on_the_executable})),
    Mutant("outputs_share_a_scratch_array", "concurrency", "every execution writes its outputs into one scratch "
           "array of the executable", ("concurrency/same_executable_from_threads",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_run_program", _shared_output_scratch())),
           base="reference"),
]

# -- extensions --------------------------------------------------------------------------------------


class _ColumnMajor(ToyLayouts):
    def buffer_memory_layout(self, buffer: Any) -> MemoryLayout:
        return MemoryLayout(tuple(range(len(buffer.dimensions()))))


class _ColumnMajorDefault(ToyLayouts):
    def client_default_layout(self, client: Any, element_type: Any, dims: Any) -> MemoryLayout:
        return MemoryLayout(tuple(range(len(dims))))


class _FlatLayouts(ToyLayouts):
    def buffer_memory_layout(self, buffer: Any) -> MemoryLayout:
        return MemoryLayout((0,))


class _KindIdsSwapped(ToyMemoryDescriptions):
    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        return [("device", 1), ("pinned_host", 0)]


class _HostFirst(ToyMemoryDescriptions):
    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        return [("pinned_host", 1), ("device", 0)]


def _extensions(**offered: Any) -> Callable[[ToyApi], Any]:
    def extensions(self: ToyApi) -> dict[str, Any]:
        return {**ToyApi.extensions(self), **offered}
    return extensions


EXTENSIONS = [
    Mutant("default_layout_column_major", "extensions", "Layouts.client_default_layout says column-major while new "
           "buffers are row-major", ("extensions/layouts_describe_memory",),
           toy(api={"extensions": _extensions(Layouts=_ColumnMajorDefault())})),
    Mutant("layouts_say_column_major", "extensions", "Layouts reports column-major for row-major data",
           ("extensions/layouts_describe_memory",), toy(api={"extensions": _extensions(Layouts=_ColumnMajor())})),
    Mutant("layouts_flat", "extensions", "Layouts gives every buffer a one-dimensional layout",
           ("extensions/Layouts",), toy(api={"extensions": _extensions(Layouts=_FlatLayouts())})),
    Mutant("memory_kind_ids_swapped", "extensions", "MemoryDescriptions swaps the kind ids of two kinds",
           ("extensions/memory_descriptions_match_memories",),
           toy(api={"extensions": _extensions(MemoryDescriptions=_KindIdsSwapped())})),
    Mutant("memory_descriptions_host_first", "extensions", "MemoryDescriptions lists a host memory before the "
           "default one", ("extensions/MemoryDescriptions",),
           toy(api={"extensions": _extensions(MemoryDescriptions=_HostFirst())})),
    Mutant("declares_an_extension_it_lacks", "extensions", "declares FFI without offering it",
           ("extensions/declared_are_offered",), toy(extensions={"Layouts": 1, "MemoryDescriptions": 1, "FFI": 1})),
]

# -- errors ----------------------------------------------------------------------------------------


def _deleted_read_internal(self: ToyBuffer, action: str) -> np.ndarray:
    array = self.array
    if array is None:
        raise Internal(f"{action}: null buffer")
    return array


def _checks_sizes_only(program: Any, args: Any, device: Any = None) -> list[np.ndarray]:
    """Compares argument sizes, as XLA's CPU client does, and reinterprets the bits."""
    arrays = []
    for i, (buffer, (shape, dtype)) in enumerate(zip(args, program.inputs)):
        array = buffer._live(f"argument {i}")
        if array.nbytes != int(np.prod(shape)) * dtype.itemsize:
            raise InvalidArgument(f"argument {i} has {array.nbytes} bytes")
        arrays.append(array.reshape(shape).view(dtype))
    if len(args) != len(program.inputs):
        raise InvalidArgument("wrong argument count")
    return arrays


def _no_shape_check(program: Any, args: Any, device: Any = None) -> list[np.ndarray]:
    """Arguments go to the kernel as they are: a wrong shape fails inside the execution."""
    if len(args) != len(program.inputs):
        raise InvalidArgument("wrong argument count")
    return [buffer._live(f"argument {i}") for i, buffer in enumerate(args)]


def _no_device_check(program: Any, args: Any, device: Any = None) -> list[np.ndarray]:
    return ToyLoadedExecutable._arguments(program, args, None)


def _uninitialized_unchecked(self: ToyClient, dims: Any, element_type: BufferType, *, device: Any = None,
                             memory: Any = None) -> Any:
    target, place = self._place(device, memory)
    return self.buffer_class(np.zeros(tuple(dims), to_numpy_dtype(element_type)), BufferType(element_type), target,
                             place)


def _lookup_unchecked(self: ToyClient, device_id: int) -> Device:
    return self.devices_by_id[device_id]  # KeyError for an unknown id


def _lookup_addressable_first(self: ToyClient, local_hardware_id: int) -> Device:
    return self.devices_list[0]


def _assignment_internal(self: ToyClient, num_replicas: int, num_partitions: int) -> Any:
    if num_replicas * num_partitions > len(self.devices_list):
        raise Internal("device assignment failed")
    return ToyClient.default_device_assignment(self, num_replicas, num_partitions)


def _one_list_per_device_unchecked(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                   execute_device: Any = None) -> Any:
    return ToyLoadedExecutable.execute(self, argument_lists[:len(self.devices)], options, execute_device)


def _reads_declared_arguments(program: Any, args: Any, device: Any = None) -> list[np.ndarray]:
    return ToyLoadedExecutable._arguments(program, list(args)[:len(program.inputs)], device)


def _donation_without_duplicate_check(args: Any, donated: Any) -> None:
    for index in donated:
        if args[index]._external_references:
            raise InvalidArgument("Donation requested for buffer with external reference")


def _to_host_fills_what_fits(self: ToyBuffer, dst: Any = None) -> Any:
    """A destination of the wrong size gets what fits, silently."""
    from pjrt_hub.abi import ToHost

    array = self._live("PJRT_Buffer_ToHostBuffer")
    if dst is None:
        return ToHost(array.copy(), ToyEvent())
    count = min(dst.size, array.size)
    dst.reshape(-1)[:count] = array.reshape(-1)[:count]
    return ToHost(dst, ToyEvent())


def _any_dtype_as_bytes(self: ToyClient, array: Any, **kwargs: Any) -> Any:
    """A host array of a type PJRT lacks is taken as its raw bytes."""
    array = np.asarray(array)
    if array.dtype.kind in "USO":
        array = np.frombuffer(array.tobytes(), np.uint8)
    return ToyClient.buffer_from_host_buffer(self, array, **kwargs)


ERRORS = [
    Mutant("wrong_destination_filled", "errors", "ToHostBuffer into a destination of the wrong size fills what fits",
           ("errors/wrong_destination",), toy(buffer={"to_host_buffer": _to_host_fills_what_fits})),
    Mutant("unknown_host_dtype_as_bytes", "errors", "a host array of a type PJRT has no element type for becomes a "
           "U8 buffer of its bytes", ("errors/unsupported_host_dtype",),
           toy(client={"buffer_from_host_buffer": _any_dtype_as_bytes})),
    Mutant("deleted_buffer_internal", "errors", "reading a deleted buffer fails with INTERNAL \"null buffer\"",
           ("errors/read_deleted_buffer", "errors/copy_deleted_buffer", "errors/reference_deleted_buffer",
            "errors/execute_with_deleted_argument", "errors/execute_with_donated_argument"),
           toy(buffer={"_live": _deleted_read_internal})),
    Mutant("ready_event_of_deleted_buffer_fine", "errors", "the ready event of a deleted buffer is ready, with no "
           "error", ("errors/ready_event_of_deleted_buffer",), toy(buffer={"ready_event": lambda self: ToyEvent()})),
    Mutant("argument_sizes_only", "errors", "arguments are checked by size only (an s32[4] passes for an f32[4])",
           ("errors/execute_with_wrong_element_type",), toy(loaded={"_arguments": staticmethod(_checks_sizes_only)})),
    Mutant("argument_shapes_unchecked", "errors", "argument shapes are not checked: a wrong one fails inside the "
           "kernel, as an execution error", ("errors/wrong_argument_shape",),
           toy(loaded={"_arguments": staticmethod(_no_shape_check)})),
    Mutant("argument_device_unchecked", "errors", "an argument on another device is used where it is",
           ("errors/execute_on_wrong_device",), toy(loaded={"_arguments": staticmethod(_no_device_check)})),
    Mutant("extra_argument_lists_ignored", "errors", "argument lists beyond the executable's devices are ignored",
           ("errors/execute_with_extra_argument_list",), toy(loaded={"execute": _one_list_per_device_unchecked})),
    Mutant("donates_one_buffer_twice", "errors", "one buffer given for two donated arguments is not refused",
           ("errors/donate_same_buffer_twice",),
           toy(loaded={"_check_donation": staticmethod(_donation_without_duplicate_check)})),
    Mutant("deserialize_raises_value_error", "errors", "DeserializeAndLoad lets json's ValueError out",
           ("errors/deserialize_garbage",), toy(client={"deserialize_and_load": lambda self, data: ToyClient.compile(
               self, __import__("pjrt_hub.abi", fromlist=["Program"]).Program(json.loads(data)["text"]))})),
    Mutant("negative_dimensions_unchecked", "errors", "CreateUninitializedBuffer passes negative dimensions to numpy",
           ("errors/uninitialized_negative_dimension",),
           toy(client={"create_uninitialized_buffer": _uninitialized_unchecked})),
    Mutant("unknown_device_key_error", "errors", "compiling for an unknown device raises KeyError",
           ("errors/compile_for_unknown_device", "client/lookup_device_out_of_range_id"),
           toy(client={"lookup_device": _lookup_unchecked})),
    Mutant("unknown_addressable_device_found", "errors", "LookupAddressableDevice of an unknown id answers device 0",
           ("errors/lookup_unknown_addressable_device",), toy(client={"lookup_addressable_device": _lookup_addressable_first})),
    Mutant("too_many_replicas_internal", "errors", "more replicas than devices fails with INTERNAL",
           ("errors/compile_more_replicas_than_devices",), toy(client={"default_device_assignment": _assignment_internal})),
    Mutant("extra_arguments_ignored", "errors", "the launch loop reads as many arguments as the program takes "
           "and ignores the rest", ("errors/wrong_argument_count",),
           toy(loaded={"_arguments": staticmethod(_reads_declared_arguments)})),
]

# -- collectives (the reference plugin: its processes meet through the CPU runtime) --------------


def _reference_collectives() -> Any:
    return importlib.import_module("pjrt_hub.backends.reference.collectives")


def _own_contribution_only(spec: Any, operands: Any) -> list[np.ndarray]:
    """A reduction that never hears from its peers: each process folds only what it brought."""
    return [np.asarray(a)[np.newaxis, ...] for a in operands]


def _collective_with(change: Callable[[Any, list[np.ndarray], list[np.ndarray]], list[np.ndarray]]) -> Any:
    """The runtime's data movement, with ``change(spec, operands, results)`` applied to its results."""
    from pjrt_hub.backends.cpu_runtime._collectives import run_collective

    def patched_run(spec: Any, operands: Any) -> list[np.ndarray]:
        return change(spec, list(operands), run_collective(spec, operands))

    return patched_run


def _permute_keeps_its_input(spec: Any, operands: list[np.ndarray], results: list[np.ndarray]) -> list[np.ndarray]:
    if spec.kind == "collective_permute":
        return [np.array(a, copy=True) for a in operands]
    return results


def _gather_in_reverse(spec: Any, operands: list[np.ndarray], results: list[np.ndarray]) -> list[np.ndarray]:
    if spec.kind == "all_gather":
        n = results[0].shape[spec.dimension] // operands[0].shape[spec.dimension]
        return [np.concatenate(np.split(r, n, axis=spec.dimension)[::-1], axis=spec.dimension) for r in results]
    return results


def _all_to_all_keeps_its_blocks(spec: Any, operands: list[np.ndarray], results: list[np.ndarray]) -> list[np.ndarray]:
    if spec.kind == "all_to_all":
        return [np.resize(a, r.shape).astype(r.dtype) for a, r in zip(operands, results)]
    return results


COLLECTIVES = [
    Mutant("replica_id_always_zero", "collectives", "replica_id answers 0 on every replica",
           ("collectives/replica_id",),
           reference((_reference_collectives(), "replica_id", lambda: 0)), base="reference"),
    Mutant("reductions_without_peers", "collectives", "all_reduce and reduce_scatter fold only what the process "
           "brought", ("collectives/all_reduce_sum", "collectives/reduce_scatter"),
           reference((_reference_collectives(), "exchange_for_reduction", _own_contribution_only)), base="reference"),
    Mutant("permute_keeps_its_input", "collectives", "collective_permute returns each replica's own operand",
           ("collectives/collective_permute", "collectives/collective_permute_without_source"),
           reference((_reference_collectives(), "run_collective", _collective_with(_permute_keeps_its_input))),
           base="reference"),
    Mutant("all_gather_in_reverse", "collectives", "all_gather concatenates the group in reverse order",
           ("collectives/all_gather",),
           reference((_reference_collectives(), "run_collective", _collective_with(_gather_in_reverse))),
           base="reference"),
    Mutant("all_to_all_keeps_its_blocks", "collectives", "all_to_all sends nothing: each replica keeps its blocks",
           ("collectives/all_to_all",),
           reference((_reference_collectives(), "run_collective", _collective_with(_all_to_all_keeps_its_blocks))),
           base="reference"),
]


MUTANTS: tuple[Mutant, ...] = tuple(NUMERICS + SURFACE + BUFFERS + TRANSFERS + COMPILE_AND_EXECUTE + EVENTS + LIFETIME
                                    + CONCURRENCY + EXTENSIONS + ERRORS + COLLECTIVES)


# -- from the mutation survivors of the CPU runtime and the second held-out catalogue ------------------


def _reference_with_op(name: str, fn: Callable[..., np.ndarray]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """The reference plugin with one entry of its interpreter's op table replaced for the duration."""

    @contextlib.contextmanager
    def build() -> Any:
        importlib.import_module("pjrt_hub.backends.reference.interpreter")  # fills the table
        registry = importlib.import_module("pjrt_hub.backends.reference.registry")
        saved = registry.OPS[name]
        registry.OPS[name] = registry.OpImpl(name, fn, saved.elementwise)
        try:
            yield importlib.import_module("pjrt_hub.backends.reference.plugin")
        finally:
            registry.OPS[name] = saved

    return build


def _shift_left_count_modulo_width(ctx: Any, op: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The held-out catalogue's ref_shift_left_count_modulo_width: the count as x86's shift reads it."""
    bits = a.dtype.itemsize * 8
    return np.left_shift(a, (b.astype(np.int64) & (bits - 1)).astype(a.dtype)).astype(a.dtype)


_cpu_plugin_attributes = _runtime_module("_api").CpuApi.plugin_attributes


def _negative_patch_version(self: Any) -> dict[str, Any]:
    attributes = _cpu_plugin_attributes(self)
    attributes["stablehlo_current_version"] = [*attributes["stablehlo_current_version"][:2], -1]
    return attributes


def _meet_keyed_by_op(self: Any, participant: Any, spec: Any, operands: list[np.ndarray],
                      outputs: list[np.ndarray], work: Callable[[Any], None]) -> None:
    """The held-out catalogue's ref_concurrent_collectives_share_meetings: the runtime's meet, with
    a meeting key that names the op and its instance but not the run, so two executions at the
    same collective at the same time meet each other."""
    collectives = _runtime_module("_collectives")
    run = participant.run
    count = participant.counts.get(spec.key, 0)
    participant.counts[spec.key] = count + 1
    key = (spec.key, count)
    deadline = time.monotonic() + run.timeout
    me = participant.flat
    cond = self._cond
    with cond:
        meeting = self._meetings.get(key)
        if meeting is None:
            meeting = self._meetings[key] = collectives._Meeting(len(run.local), spec.kind)
        meeting.inputs[me] = operands
        meeting.outputs[me] = outputs
        meeting.arrived += 1
        if meeting.arrived == meeting.expected:
            cond.notify_all()
        try:
            self._wait(run, spec, lambda: meeting.arrived >= meeting.expected, deadline, meeting, me,
                       "waiting for the processes to arrive")
        except BaseException:
            self._meetings.pop(key, None)
            raise
    try:
        work(meeting)
    except BaseException as exc:
        with cond:
            if meeting.error is None:
                meeting.error = exc if isinstance(exc, Exception) else Internal(str(exc))
            cond.notify_all()
            self._meetings.pop(key, None)
        raise
    with cond:
        meeting.left += 1
        if meeting.left == meeting.expected:
            self._meetings.pop(key, None)
            cond.notify_all()
        try:
            self._wait(run, spec, lambda: meeting.left >= meeting.expected, deadline, meeting, me,
                       "waiting for the processes to finish reading")
        except BaseException:
            self._meetings.pop(key, None)
            raise


def _failure_not_recorded(self: Any, flat: int, error: BaseException) -> None:
    """A run that wakes the waiting replicas when one fails but never records the failure: they go
    back to waiting, until the collective timeout."""
    self.hub.wake(self)


GAPS = [
    Mutant("shift_left_count_modulo_width", "numerics", "shift_left by the bit width or more shifts by the count "
           "modulo the width (1 << 33 = 2 for i32) instead of giving 0", ("numerics/shift_counts",),
           _reference_with_op("stablehlo.shift_left", _shift_left_count_modulo_width), base="reference"),
    Mutant("stablehlo_version_negative_patch", "plugin", "the stablehlo_current_version attribute ends in -1 "
           "([1, 13, -1])", ("plugin/attributes",),
           reference((_runtime_module("_api").CpuApi, "plugin_attributes", _negative_patch_version)), base="reference"),
    Mutant("partition_id_always_zero", "collectives", "partition_id answers 0 on every partition",
           ("collectives/partition_id",),
           reference((_reference_collectives(), "partition_id", lambda: 0)), base="reference"),
    # A short collective timeout, so that a meeting the mix-up leaves short fails in seconds.
    Mutant("concurrent_collectives_share_meetings", "collectives", "collective meetings are keyed by op and "
           "instance, not by execution: two executions of an all_reduce at once exchange operands",
           ("collectives/concurrent_executions_meet_apart",),
           reference((_runtime_module("_collectives").Rendezvous, "meet", _meet_keyed_by_op),
                     (_runtime_module("_api"), "DEFAULT_COLLECTIVE_TIMEOUT", 3.0)), base="reference"),
    # The timeout is longer than the case's bound, and short enough that the stuck replica ends soon after.
    Mutant("failed_replica_not_recorded", "collectives", "a replica's failure is not recorded for its run: the peers "
           "waiting for it at an all_reduce wait for the collective timeout",
           ("collectives/failed_replica_stops_its_peers",),
           reference((_runtime_module("_collectives").CollectiveRun, "fail", _failure_not_recorded),
                     (_runtime_module("_api"), "DEFAULT_COLLECTIVE_TIMEOUT", 8.0)), base="reference"),
]

MUTANTS = (*MUTANTS, *GAPS)
