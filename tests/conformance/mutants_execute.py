"""Mutants for the cases of pjrt_hub/testing/cases/contract_execute.py: one defect each, in the
compile and execute calls, of the kind plugins ship (a compile that reads the caller's program
late, a cache that hands out one executable twice, outputs that share an input's storage, an error
that stops at the execution it happened in).

Each is built like those of tests/conformance/mutants.py (whose factories it reuses): a toy with
one method replaced, or the reference plugin with one runtime method patched for the run, and
names the contract cases that must fail on it. tests/conformance/test_mutation_contract.py runs
them and the unmodified bases as controls. Those marked held-out copy defects of a catalogue written
without reading the suite (kept outside the repository), which the suite once let through.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from typing import Any, Callable, Sequence

import numpy as np

from pjrt_hub.abi import (
    BufferType,
    CompileOptions,
    ExecuteOptions,
    ExecuteResult,
    ExecutionError,
    HostBufferSemantics,
    InvalidArgument,
    Program,
)
from pjrt_hub.testing._mutation import Base, Mutant
from pjrt_hub.testing.toy import ToyBuffer, ToyClient, ToyLoadedExecutable, ToyProgram

from .mutants import BASES as _BASES, _executable_class, _runtime, _runtime_module, reference, toy

#: The bases the mutants here are made from (the same as the main catalogue's).
BASES: tuple[Base, ...] = _BASES


# -- compile ---------------------------------------------------------------------------------------


def _compile_keeps_the_program(self: ToyClient, program: Any, options: Any = None) -> Any:
    loaded = ToyClient.compile(self, program, options)
    loaded.source = program  # parsed again at each execution, from the caller's memory
    return loaded


def _execute_parses_now(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                        execute_device: Any = None) -> Any:
    source = getattr(self, "source", None)
    if source is not None:
        self.executable.program = type(self.executable.program)(source.text())
    return ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)


def _fingerprint_of_the_code() -> Callable[..., Any]:
    """The executable's fingerprint hashes the program code only, not the options it was compiled with."""

    def fingerprint(self: Any) -> str:
        code = self._code.encode() if isinstance(self._code, str) else bytes(self._code or b"")
        return hashlib.sha256(code).hexdigest()

    return fingerprint


def _aot_compile_drops_options() -> Callable[..., Any]:
    api = _runtime_module("_api").CpuApi
    original = api.compile

    def compile(self: Any, program: Any, topology: Any, options: Any = None) -> Any:
        return original(self, program, topology, None)

    return compile


def _text_keyed_compile_cache() -> Callable[..., Any]:
    """Compiling a program already compiled hands out the same loaded executable."""
    cache: dict[str, Any] = {}

    def compile(self: ToyClient, program: Any, options: Any = None) -> Any:
        key = program.text()
        if key not in cache:
            cache[key] = ToyClient.compile(self, program, options)
        return cache[key]

    return compile


def _execute_remembering_outputs(self: ToyLoadedExecutable, *args: Any, **kwargs: Any) -> Any:
    result = ToyLoadedExecutable.execute(self, *args, **kwargs)
    self.__dict__.setdefault("made", []).extend(b for outputs in result.outputs for b in outputs)
    return result


def _delete_with_outputs(self: ToyLoadedExecutable) -> None:
    ToyLoadedExecutable.delete(self)
    for buffer in self.__dict__.get("made", []):
        buffer.delete()


def _devices_by_id(self: ToyLoadedExecutable) -> list[Any]:
    return sorted(self.devices, key=lambda d: d.description.id())


def _deserialize_on_default_devices(self: ToyClient, serialized: bytes) -> Any:
    data = json.loads(serialized)
    return ToyClient.compile(self, Program(data["text"]), CompileOptions(data["replicas"], data["partitions"]))


def _cost_kept_on_the_executable(self: Any) -> dict[str, Any]:
    cost = self.__dict__.get("cost")
    if cost is None:
        cost = self.__dict__["cost"] = {"flops": float(len(self.program.steps))}
    return cost


COMPILE = [
    Mutant("program_parsed_at_first_execute", "compile", "compilation is deferred to each execution, which reads "
           "the caller's program then", ("compile/program_read_only_during_compile",),
           toy(client={"compile": _compile_keeps_the_program}, loaded={"execute": _execute_parses_now})),
    Mutant("aot_compile_drops_options", "compile", "PJRT_Compile ignores the compile options (the device "
           "assignment)", ("compile/topology_compile_loads_and_runs",),
           reference((_runtime_module("_api").CpuApi, "compile", _aot_compile_drops_options())), base="reference"),
    Mutant("executable_destroy_frees_the_program", "compile", "GetExecutable hands out the loaded executable's own "
           "executable, whose Destroy frees the program", ("compile/executable_destroy_leaves_loaded_executable",),
           toy(client=_executable_class(destroy=lambda self: setattr(self, "program", None)))),
    Mutant("compile_cache_hands_out_one_executable", "compile", "compiling a program again returns the loaded "
           "executable of the first compile", ("compile/delete_is_per_executable",),
           toy(client={"compile": _text_keyed_compile_cache()})),
    Mutant("delete_frees_outputs", "compile", "LoadedExecutable_Delete frees the outputs of the executable's "
           "executions too", ("compile/delete_lets_running_executions_finish",),
           toy(loaded={"execute": _execute_remembering_outputs, "delete": _delete_with_outputs})),
    Mutant("addressable_devices_by_id", "compile", "AddressableDevices lists the devices by id, not in the "
           "assignment's order", ("compile/replicated_executable_describes_its_devices",),
           toy(loaded={"addressable_devices": _devices_by_id})),
    Mutant("deserialize_on_default_devices", "compile", "DeserializeAndLoad loads onto the default devices, not "
           "those the executable was compiled for", ("compile/serialize_round_trip_keeps_properties",),
           toy(client={"deserialize_and_load": _deserialize_on_default_devices})),
    Mutant("fingerprint_ignores_compile_options", "compile", "Executable.Fingerprint hashes the program text only: "
           "one program compiled for 1 and for 2 replicas has one fingerprint (held-out "
           "ref_fingerprint_ignores_compile_options)", ("compile/fingerprint_tells_replica_counts_apart",),
           reference((_runtime_module("_executables").CpuExecutable, "fingerprint", _fingerprint_of_the_code())),
           base="reference"),
    Mutant("cost_analysis_shared_with_the_caller", "compile", "GetCostAnalysis hands the caller the executable's "
           "own mapping", ("compile/executable_queries_are_stable",),
           toy(client=_executable_class(get_cost_analysis=_cost_kept_on_the_executable))),
]


# -- execute ---------------------------------------------------------------------------------------


def _arguments_passed_through(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                              execute_device: Any = None) -> Any:
    """An output that is a parameter returned as it is comes back as the argument's own buffer."""
    result = ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)
    program = self.executable.program
    for arguments, outputs in zip(argument_lists, result.outputs):
        for index, name in enumerate(program.returns):
            if name in program.params:
                outputs[index] = arguments[program.params.index(name)]
    return result


def _repeated_value_one_buffer(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                               execute_device: Any = None) -> Any:
    """A value the program returns twice comes back as one buffer in both places."""
    result = ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)
    returns = self.executable.program.returns
    for outputs in result.outputs:
        for index, name in enumerate(returns):
            outputs[index] = outputs[returns.index(name)]
    return result


def _outputs_reused_across_runs(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                execute_device: Any = None) -> Any:
    """Output buffers made by the first run and refilled by every later one."""
    result = ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)
    last = self.__dict__.get("last")
    fresh = [b for outputs in result.outputs for b in outputs]
    if last is None or len(last) != len(fresh) or any(b.array is None for b in fresh):
        self.__dict__["last"] = result.outputs
        return result
    for old, new in zip(last, result.outputs):
        for kept, made in zip(old, new):
            kept.array = made.array
    return ExecuteResult(last, result.device_complete_events)


def _one_event_for_all_devices(self: ToyLoadedExecutable, *args: Any, **kwargs: Any) -> Any:
    result = ToyLoadedExecutable.execute(self, *args, **kwargs)
    return ExecuteResult(result.outputs, result.device_complete_events[:1])


def _failed_inputs_read_as_zeros() -> Callable[..., Any]:
    executables = _runtime_module("_executables")
    original = executables.CpuLoadedExecutable._check

    def check(self: Any, args: Any, device: Any, replica: int, non_donatable: Any) -> Any:
        launch = original(self, args, device, replica, non_donatable)
        if launch.error is not None:
            for index, buffer in enumerate(args):
                if buffer._array is None and buffer._error is not None:
                    layout = self._inputs[index]
                    launch.arrays[index] = np.zeros(layout.shape, layout.dtype)
            launch.error = None
        return launch

    return check


def _execute_device_takes_any_lists(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                    execute_device: Any = None) -> Any:
    if execute_device is None or len(argument_lists) == 1:
        return ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)
    outputs, events = [], []
    for arguments in argument_lists:
        result = ToyLoadedExecutable.execute(self, [arguments], options, execute_device)
        outputs += result.outputs
        events += result.device_complete_events
    return ExecuteResult(outputs, events)


def _shared_buffers_checked_on_every_alias(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                           execute_device: Any = None) -> Any:
    aliased = list(self.executable.program.aliases.values())
    for arguments in argument_lists:
        self._check_donation(arguments, aliased)
    return ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)


def _immutable_zero_copy_as_mutable() -> Callable[..., Any]:
    client = _runtime_module("_client").CpuClient
    original = client.buffer_from_host_buffer

    def buffer_from_host_buffer(self: Any, array: Any, **kwargs: Any) -> Any:
        transfer = original(self, array, **kwargs)
        if kwargs.get("semantics") is HostBufferSemantics.IMMUTABLE_ZERO_COPY:
            transfer.buffer._mutable = True  # as if kMutableZeroCopy: donation may write the host array
        return transfer

    return buffer_from_host_buffer


def _step(program: ToyProgram, values: Any, step: tuple[str, str, list[str], Any]) -> None:
    """One step of a toy program, its result stored in ``values`` (as ``ToyProgram.run`` does)."""
    out, op, operands, extra = step
    inputs = [values[o] for o in operands]
    if op == "constant":
        values[out] = extra
    elif op == "convert":
        values[out] = inputs[0].astype(extra)
    elif op == "broadcast":
        values[out] = np.full(extra[0], inputs[0], dtype=extra[1])
    else:
        with np.errstate(all="ignore"):
            values[out] = np.asarray(program.ops[op](*inputs), dtype=inputs[0].dtype)


def _results_not_copied(self: ToyProgram, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The values a program returns come back as they are: an argument's array, the program's own
    constant, or one array for a value returned twice."""
    values: dict[str, np.ndarray] = dict(zip(self.params, args))
    for step in self.steps:
        _step(self, values, step)
    return [values[name] for name in self.returns]


def _values_on_the_program(self: ToyProgram, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The value table lives on the program, to save a dict per run: concurrent executions of one
    executable read and overwrite each other's intermediate values."""
    self.values = dict(zip(self.params, args))
    for step in self.steps:
        _step(self, self.values, step)
    return [np.array(self.values[name], copy=True) for name in self.returns]


def _first_argument_checked(program: Any, args: Sequence[Any], device: Any = None) -> list[np.ndarray]:
    """The argument check tests the shape and type of argument 0 only (the loop index was compared,
    not each argument)."""
    if len(args) != len(program.inputs):
        raise InvalidArgument(f"@main takes {len(program.inputs)} arguments, got {len(args)}")
    arrays = []
    for i, (buffer, (shape, dtype)) in enumerate(zip(args, program.inputs)):
        if not isinstance(buffer, ToyBuffer):
            raise InvalidArgument(f"argument {i} is not a buffer of this client")
        if device is not None and buffer._device is not device:
            raise InvalidArgument(f"argument {i} is on another device")
        array = buffer._live(f"PJRT_LoadedExecutable_Execute argument {i}")
        if i == 0 and (array.shape != shape or array.dtype != dtype):
            raise InvalidArgument(f"argument {i} of @main is {dtype}{list(shape)}, got {array.dtype}{list(array.shape)}")
        arrays.append(array)
    return arrays


def _execute_device_of_any_client() -> Callable[..., Any]:
    """A one-device executable runs on any CPU device given as execute_device, the owning client
    not compared."""
    executables, devices = _runtime_module("_executables"), _runtime_module("_devices")
    original = executables.CpuLoadedExecutable._portable_device

    def portable_device(self: Any, device: Any) -> Any:
        if len(self._devices) == 1 and isinstance(device, devices.CpuDevice):
            return (device,)
        return original(self, device)

    return portable_device


EXECUTE = [
    Mutant("argument_passed_through", "execute", "an output that is a parameter returned as it is comes back as "
           "the argument's own buffer", ("execute/outputs_do_not_alias_inputs",),
           toy(loaded={"execute": _arguments_passed_through})),
    Mutant("results_alias_inputs_and_constants", "execute", "an output that is an argument, a constant of the "
           "program or another output shares its storage (held-out toy_results_alias_inputs_and_constants)",
           ("execute/outputs_do_not_alias_inputs",), toy(program={"run": _results_not_copied})),
    Mutant("repeated_value_one_buffer", "execute", "a value the program returns twice comes back as one buffer "
           "for both outputs", ("execute/outputs_do_not_alias_inputs",),
           toy(loaded={"execute": _repeated_value_one_buffer})),
    Mutant("outputs_reused_across_runs", "execute", "every execution refills the output buffers of the first",
           ("execute/each_execution_has_outputs_of_its_own",), toy(loaded={"execute": _outputs_reused_across_runs})),
    Mutant("one_memory_kind_for_all_outputs", "execute", "OutputMemoryKinds lists one kind whatever the number of "
           "outputs", ("execute/outputs_are_what_the_executable_declares",),
           toy(client=_executable_class(output_memory_kinds=lambda self: ["device"]))),
    Mutant("one_completion_event", "events", "Execute on several devices returns the first device's completion "
           "event only", ("events/one_completion_event_per_device",),
           toy(loaded={"execute": _one_event_for_all_devices})),
    Mutant("failed_inputs_read_as_zeros", "events", "an input whose producing execution failed is read as zeros",
           ("events/failed_input_fails_the_execution",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_check", _failed_inputs_read_as_zeros())),
           base="reference"),
    Mutant("execute_device_runs_every_list", "errors", "with execute_device set, every argument list runs on that "
           "device", ("errors/execute_device_with_two_argument_lists",),
           toy(loaded={"execute": _execute_device_takes_any_lists})),
    Mutant("execute_checks_first_argument_only", "errors", "Execute checks the shape and type of argument 0 only: "
           "a misfit at argument 1 runs (held-out toy_execute_checks_first_argument_only)",
           ("errors/every_argument_is_checked",), toy(loaded={"_arguments": staticmethod(_first_argument_checked)})),
    Mutant("execute_device_of_other_client", "errors", "Execute runs a one-device executable on an execute_device "
           "of another client (held-out ref_execute_device_of_other_client)",
           ("errors/execute_device_of_another_client",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_portable_device",
                      _execute_device_of_any_client())), base="reference"),
    Mutant("concurrent_runs_share_values", "concurrency", "concurrent executions of one executable share the "
           "program's value table (held-out toy_concurrent_runs_share_values)",
           ("concurrency/concurrent_executions_keep_their_values_apart",), toy(program={"run": _values_on_the_program})),
    Mutant("non_donatable_still_checked_for_sharing", "buffers", "a buffer passed twice is refused when one "
           "parameter is aliased, even if non_donatable_input_indices lists it",
           ("buffers/non_donatable_lets_one_buffer_fill_two_arguments",),
           toy(loaded={"execute": _shared_buffers_checked_on_every_alias})),
    Mutant("immutable_zero_copy_donated_in_place", "buffers", "a kImmutableZeroCopy buffer is treated as "
           "kMutableZeroCopy: donating it writes the result into the caller's host array",
           ("buffers/donation_leaves_an_immutable_zero_copy_array_unwritten",),
           reference((_runtime().CpuClient, "buffer_from_host_buffer", _immutable_zero_copy_as_mutable())),
           base="reference"),
]

# -- gaps found by cosmic-ray and the second held-out set ------------------------------------------


def _fingerprint_of_the_request() -> Callable[..., Any]:
    """(held-out ref_fingerprint_depends_on_options_form) The fingerprint hashes the compile
    request as it came: CompileOptions and the same options serialized give two fingerprints."""
    client = _runtime_module("_client").CpuClient
    original = client.compile

    def compile(self: Any, program: Program, options: Any = None) -> Any:
        loaded = original(self, program, options)
        request = options if isinstance(options, (bytes, bytearray, memoryview)) else repr(options).encode()
        loaded._executable._fingerprint = hashlib.sha256(program.data() + b"\0" + bytes(request)).hexdigest()
        return loaded

    return compile


def _options_required() -> Callable[..., Any]:
    """The options' type test turned around (cosmic-ray's AddNot on the runtime's check): None is
    refused, and options of any other type reach the decoder."""
    client = _runtime_module("_client")
    decode = client.decode_compile_options

    def compile_options(options: Any) -> CompileOptions:
        if options is None:
            raise InvalidArgument("PJRT_Client_Compile: options must be CompileOptions or serialized bytes")
        return decode(bytes(options) if isinstance(options, (bytearray, memoryview)) else options)

    return compile_options


def _deserialize_reads_the_marker_first(self: ToyClient, serialized: bytes) -> Any:
    """The format marker is looked at before the length: empty bytes raise a bare IndexError."""
    if serialized[0] != ord("{"):
        raise InvalidArgument("not a serialized toy executable")
    return ToyClient.deserialize_and_load(self, serialized)


def _assignment_ids_only(assignment: Any, replicas: int, partitions: int, known: Any) -> None:
    """(held-out ref_assignment_shape_unchecked) Only the ids of a device assignment are checked,
    not its shape against the replica and partition counts."""
    seen: set[int] = set()
    for row in assignment:
        for device in row:
            if device not in known or device in seen:
                raise InvalidArgument(f"device_assignment: device {device} unknown or used twice")
            seen.add(device)


def _default_assignment_one_column(self: ToyClient, num_replicas: int, num_partitions: int) -> Any:
    """(held-out toy_default_assignment_ignores_partitions) One device per replica: the
    partitions are forgotten."""
    if num_replicas > len(self.devices_list):
        raise InvalidArgument(f"{num_replicas} replicas need more than the {len(self.devices_list)} devices")
    return tuple((replica,) for replica in range(num_replicas))


def _default_assignment_short_of_one() -> Callable[..., Any]:
    """The default assignment refuses to use every device (cosmic-ray's ``>`` to ``==``, which
    also accepts more than there are)."""
    client = _runtime_module("_client")
    original = client.default_assignment

    def default_assignment(num_replicas: int, num_partitions: int, num_devices: int) -> Any:
        if num_replicas * num_partitions == num_devices:
            raise InvalidArgument(f"default device assignment: {num_replicas} x {num_partitions} need more devices")
        return original(num_replicas, num_partitions, num_devices + num_replicas * num_partitions)

    return default_assignment


def _delete_cancels() -> Callable[..., Any]:
    """(held-out ref_executable_delete_cancels_executions) Delete stops the executions still
    running or queued, which fail with CANCELLED, instead of letting them finish."""

    def delete(self: Any) -> None:
        self._deleted = True
        self.cancel()

    return delete


def _check_indexing_arguments() -> Callable[..., Any]:
    """(held-out ref_too_few_arguments_raw_error) The argument list is indexed up to the parameter
    count before its length is checked: too few arguments raise a bare IndexError."""
    loaded = _runtime_module("_executables").CpuLoadedExecutable
    original = loaded._check

    def check(self: Any, args: Sequence[Any], *rest: Any) -> Any:
        return original(self, [args[index] for index in range(max(len(args), self._num_inputs))], *rest)

    return check


def _launch_per_argument_list() -> Callable[..., Any]:
    """(held-out ref_fewer_argument_lists_run_fewer_devices) One argument list for a two-replica
    executable runs replica 0 alone instead of being refused."""
    loaded = _runtime_module("_executables").CpuLoadedExecutable
    original = loaded.execute

    def execute(self: Any, argument_lists: Any, options: Any = None, execute_device: Any = None) -> Any:
        devices = self._devices
        if execute_device is None and 0 < len(argument_lists) < len(devices):
            self._devices = devices[:len(argument_lists)]
            try:
                return original(self, argument_lists, options, execute_device)
            finally:
                self._devices = devices
        return original(self, argument_lists, options, execute_device)

    return execute


def _non_buffers_reach_the_launch() -> Callable[..., Any]:
    """The general path's check no longer refuses arguments that are no buffer of the client: they
    break later, with a bare AttributeError (cosmic-ray's AddNot on the runtime's type test)."""
    loaded = _runtime_module("_executables").CpuLoadedExecutable
    buffer = _runtime_module("_buffers").CpuBuffer
    original = loaded._check

    def check(self: Any, args: Sequence[Any], *rest: Any) -> Any:
        for argument in args:
            if not isinstance(argument, buffer):
                raise AttributeError(f"{type(argument).__name__!r} object has no attribute '_device'")
        return original(self, args, *rest)

    return check


def _donating_launch_checks_shapes(program: Any, args: Sequence[Any], device: Any = None) -> list[np.ndarray]:
    """A program that donates an input is launched after a check of shapes only: an argument of
    another element type is converted (f64[4] or f16[4] runs as f32[4])."""
    if not program.aliases:
        return ToyLoadedExecutable._arguments(program, args, device)
    if len(args) != len(program.inputs):
        raise InvalidArgument(f"@main takes {len(program.inputs)} arguments, got {len(args)}")
    arrays = []
    for i, (buffer, (shape, dtype)) in enumerate(zip(args, program.inputs)):
        if not isinstance(buffer, ToyBuffer):
            raise InvalidArgument(f"argument {i} is not a buffer of this client")
        array = buffer._live(f"PJRT_LoadedExecutable_Execute argument {i}")
        if array.shape != shape:
            raise InvalidArgument(f"argument {i} of @main has shape {list(shape)}, got {list(array.shape)}")
        arrays.append(array.astype(dtype, copy=False))
    return arrays


def _some_outputs_without_storage() -> Callable[..., Any]:
    """ReferenceProgram.run with storage given for some outputs only (a donated input reused for
    one of them) fails on the others (cosmic-ray's ``is`` to ``is not`` on the None test)."""
    program = importlib.import_module("pjrt_hub.backends.reference.compiler").ReferenceProgram
    original = program.run

    def run(self: Any, args: Any, out: Any = None, **kwargs: Any) -> Any:
        if out is not None and any(buffer is None for buffer in out) and any(buffer is not None for buffer in out):
            raise ExecutionError(f"{self.name}: output storage missing for some outputs")
        return original(self, args, out, **kwargs)

    return run


def _reuse_by_byte_size() -> Callable[..., Any]:
    """A donated input's storage is reused for the output it is aliased to whenever their byte
    sizes match, whatever the element type: an f32 input's array is handed to an s32 result."""
    executables = _runtime_module("_executables")
    original = executables._donation_of

    def donation_of(program: Any, inputs: Any, outputs: Any) -> Any:
        reuse, donated = original(program, inputs, outputs)
        for out_index, in_index in dict(program.aliases).items():
            if inputs[in_index].nbytes == outputs[out_index].nbytes:
                reuse.setdefault(in_index, out_index)
        return reuse, donated

    return donation_of


def _non_donatable_turns_donation_off(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                      execute_device: Any = None) -> Any:
    """Any non_donatable_input_indices turns every donation of the call off, not only the
    listed inputs' (what XLA's CPU plugin at API 0.81 does)."""
    if options is not None and options.non_donatable_input_indices:
        every = tuple(self.executable.program.aliases.values())
        options = ExecuteOptions(non_donatable_input_indices=every)
    return ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)


def _arguments_held_twice() -> Callable[..., Any]:
    """An execution takes its hold on each argument it reads twice and gives it back once: a
    buffer an execution read is never released when deleted (cosmic-ray's ``+= 1`` to ``+= 2``)."""
    loaded = _runtime_module("_executables").CpuLoadedExecutable
    original = loaded._take

    def take(self: Any, launch: Any, non_donatable: Any) -> None:
        original(self, launch, non_donatable)
        for buffer in launch.held:
            buffer._uses += 1

    return take


def _first_event_everywhere() -> Callable[..., Any]:
    """(held-out ref_complete_events_all_first_device) Every entry of device_complete_events is
    the first device's event."""
    loaded = _runtime_module("_executables").CpuLoadedExecutable
    original = loaded.execute

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        events = result.device_complete_events
        return ExecuteResult(result.outputs, [events[0]] * len(events) if events else events)

    return execute


def _input_errors_recoded_internal() -> Callable[..., Any]:
    """(held-out ref_input_error_recoded_internal) An input's error is passed on as a new INTERNAL
    error quoting the original message."""
    loaded = _runtime_module("_executables").CpuLoadedExecutable
    original = loaded._check

    def check(self: Any, *args: Any) -> Any:
        launch = original(self, *args)
        if launch.error is not None:
            launch.error = ExecutionError(f"{self._name}: an input of the execution failed: {launch.error.message}")
        return launch

    return check


def _scalar_dimensions_one(self: Any) -> list[tuple[int, ...]]:
    """(held-out ref_scalar_output_dimensions_one) OutputDimensions reports a scalar as (1,)."""
    return [layout.shape or (1,) for layout in self._outputs]


def _pred_declared_u8(self: Any) -> list[BufferType]:
    """(held-out ref_output_types_pred_as_u8) OutputElementTypes names a boolean output by its
    storage, U8, while the buffers are PRED."""
    return [BufferType.U8 if layout.element_type == BufferType.PRED else layout.element_type
            for layout in self._outputs]


GAPS = [
    Mutant("fingerprint_of_the_request", "compile", "Fingerprint hashes the compile request as given: options as "
           "CompileOptions and serialized give two fingerprints (held-out ref_fingerprint_depends_on_options_form)",
           ("compile/fingerprint_ignores_how_options_are_passed",),
           reference((_runtime_module("_client").CpuClient, "compile", _fingerprint_of_the_request())),
           base="reference"),
    Mutant("compile_options_required", "compile", "Compile refuses options=None and hands options of any type to "
           "the decoder", ("compile/compile_options_may_be_left_out",),
           reference((_runtime_module("_client"), "_compile_options", _options_required())), base="reference"),
    Mutant("deserialize_reads_the_marker_first", "errors", "DeserializeAndLoad looks at the first byte before the "
           "length: empty bytes raise IndexError", ("errors/deserialize_truncated_executable",),
           toy(client={"deserialize_and_load": _deserialize_reads_the_marker_first})),
    Mutant("assignment_shape_unchecked", "compile", "Compile checks the ids of a device assignment, not its shape "
           "(held-out ref_assignment_shape_unchecked)", ("compile/device_assignment_and_counts_agree",),
           reference((_runtime_module("_client"), "_check_assignment", _assignment_ids_only)), base="reference"),
    Mutant("default_assignment_one_column", "compile", "DefaultDeviceAssignment(1, 2) gives one device per replica "
           "(held-out toy_default_assignment_ignores_partitions)", ("compile/device_assignment_and_counts_agree",),
           toy(client={"default_device_assignment": _default_assignment_one_column})),
    Mutant("default_assignment_short_of_one", "compile", "the default assignment refuses a program that takes every "
           "device", ("compile/device_assignment_and_counts_agree",),
           reference((_runtime_module("_client"), "default_assignment", _default_assignment_short_of_one())),
           base="reference"),
    Mutant("delete_cancels_executions", "compile", "LoadedExecutable.Delete cancels the executions running or queued "
           "(held-out ref_executable_delete_cancels_executions)", ("compile/delete_lets_running_loops_finish",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "delete", _delete_cancels())),
           base="reference"),
    Mutant("too_few_arguments_index_error", "errors", "Execute with too few arguments raises a bare IndexError "
           "(held-out ref_too_few_arguments_raw_error)", ("errors/argument_lists_are_checked",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_check", _check_indexing_arguments())),
           base="reference"),
    Mutant("fewer_argument_lists_run_fewer_devices", "errors", "one argument list for a two-replica executable runs "
           "replica 0 alone (held-out ref_fewer_argument_lists_run_fewer_devices)",
           ("errors/argument_lists_are_checked",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "execute", _launch_per_argument_list())),
           base="reference"),
    Mutant("non_buffers_reach_the_launch", "errors", "the general launch path lets arguments that are no buffer "
           "through, to fail with AttributeError", ("errors/argument_lists_are_checked",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_check", _non_buffers_reach_the_launch())),
           base="reference"),
    Mutant("donating_launch_checks_shapes", "errors", "a donating program's launch checks shapes only, and converts "
           "an argument of another element type", ("errors/every_argument_is_checked",),
           toy(loaded={"_arguments": staticmethod(_donating_launch_checks_shapes)})),
    Mutant("some_outputs_without_storage", "buffers", "a donated input reused for one of several outputs makes the "
           "run fail on the others", ("buffers/donation_into_one_of_several_outputs",),
           reference((importlib.import_module("pjrt_hub.backends.reference.compiler").ReferenceProgram, "run",
                      _some_outputs_without_storage())), base="reference"),
    Mutant("donated_storage_reused_by_byte_size", "buffers", "a donated input's storage is reused for an aliased "
           "output of another element type of the same byte size", ("buffers/donation_into_an_output_of_another_type",),
           reference((_runtime_module("_executables"), "_donation_of", _reuse_by_byte_size())), base="reference"),
    Mutant("non_donatable_turns_donation_off", "buffers", "any non_donatable_input_indices stops every donation of "
           "the call", ("buffers/non_donatable_leaves_the_other_donations",),
           toy(loaded={"execute": _non_donatable_turns_donation_off})),
    Mutant("arguments_held_twice", "buffers", "an execution holds its arguments twice and lets go once: a deleted "
           "argument is never released", ("buffers/deleting_an_argument_releases_it_once_executions_are_done",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_take", _arguments_held_twice())),
           base="reference"),
    Mutant("complete_events_all_first_device", "events", "every device_complete_events entry is device 0's event "
           "(held-out ref_complete_events_all_first_device)", ("events/one_completion_event_per_device",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "execute", _first_event_everywhere())),
           base="reference"),
    Mutant("input_error_recoded_internal", "events", "an input's error is passed on as INTERNAL (held-out "
           "ref_input_error_recoded_internal)", ("events/failed_input_fails_the_execution",),
           reference((_runtime_module("_executables").CpuLoadedExecutable, "_check", _input_errors_recoded_internal())),
           base="reference"),
    Mutant("scalar_output_dimensions_one", "execute", "OutputDimensions reports a scalar output as (1,) (held-out "
           "ref_scalar_output_dimensions_one)", ("execute/outputs_are_what_the_executable_declares",),
           reference((_runtime_module("_executables").CpuExecutable, "output_dimensions", _scalar_dimensions_one)),
           base="reference"),
    Mutant("pred_outputs_declared_u8", "execute", "OutputElementTypes says U8 for a boolean output (held-out "
           "ref_output_types_pred_as_u8)", ("execute/outputs_are_what_the_executable_declares",),
           reference((_runtime_module("_executables").CpuExecutable, "output_element_types", _pred_declared_u8)),
           base="reference"),
    Mutant("optimized_program_labelled_hlo", "compile", "OptimizedProgram returns StableHLO text labelled 'hlo' "
           "(held-out toy_optimized_program_labelled_hlo)", ("compile/executable_queries_are_stable",),
           toy(client=_executable_class(optimized_program=lambda self: Program(self.program.text, "hlo")))),
]

MUTANTS: tuple[Mutant, ...] = tuple(COMPILE + EXECUTE + GAPS)
