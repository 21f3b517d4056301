"""Executing on the host runtime: argument checks, replicas, result checks and donation."""

from __future__ import annotations

import threading
import time
from dataclasses import fields

import numpy as np
import pytest
from .cpu_runtime_minihlo import MiniCompiler, MiniProgram, add_module, module

from pjrt_hub.abi import (
    CompileOptions,
    ExecuteOptions,
    FailedPrecondition,
    HostBufferSemantics,
    InvalidArgument,
    Program,
)
from pjrt_hub.backends.cpu_runtime import READY, CpuApi, CpuBuffer

S = HostBufferSemantics
F32 = np.float32


def ones(n=4, value=1.0):
    return np.full(n, value, F32)


def test_execute_returns_ready_outputs_for_a_tiny_program(client, put, compile_text):
    executable = compile_text(add_module())
    a, b = put(np.arange(4, dtype=F32)), put(ones(value=10))
    result = executable.execute([[a, b]])
    (out,) = result.outputs[0]
    assert result.device_complete_events[0].is_ready()
    assert out.ready_event().is_ready() and out.device() is client.devices()[0]
    np.testing.assert_array_equal(out.to_host_buffer().array, [10, 11, 12, 13])
    assert not a.is_deleted() and not b.is_deleted()  # nothing donated without an alias


def test_wrong_number_of_argument_lists_and_arguments(put, compile_text):
    executable = compile_text(add_module())
    a = put(ones())
    with pytest.raises(InvalidArgument, match=r"jit_add runs on 1 device\(s\) \(cpu:0\) and needs one argument list per device; got 2"):
        executable.execute([[a, a], [a, a]])
    with pytest.raises(InvalidArgument) as info:
        executable.execute([[a]])
    assert info.value.message.startswith("Execution supplied 1 buffers but compiled program expected 2 buffers")


def test_argument_on_the_wrong_device(put, compile_text):
    executable = compile_text(add_module())
    with pytest.raises(InvalidArgument) as info:
        executable.execute([[put(ones()), put(ones(), device=2)]])
    assert info.value.message == ("Buffer passed to Execute() as argument 1 to replica 0 is on device cpu:2, "
                                  "but replica is assigned to device cpu:0.")


@pytest.mark.parametrize(("array", "got"), [
    (np.ones(4, np.float64), r"f64\[4\]"),
    (np.ones(5, F32), r"f32\[5\]"),
    (np.ones((2, 2), F32), r"f32\[2,2\]"),
])
def test_argument_of_the_wrong_shape_or_type(put, compile_text, array, got):
    executable = compile_text(add_module())
    with pytest.raises(InvalidArgument, match=rf"argument 1 of jit_add \(replica 0\) has the wrong shape or element type: expected f32\[4\], got {got}"):
        executable.execute([[put(ones()), put(array)]])


def test_argument_that_is_not_a_buffer(put, compile_text):
    with pytest.raises(InvalidArgument, match="argument 0 of jit_add .* is not a buffer of a pjrt-hub CPU client: got ndarray"):
        compile_text(add_module()).execute([[ones(), put(ones())]])


def test_deleted_argument(put, compile_text):
    a = put(ones())
    a.delete()
    with pytest.raises(FailedPrecondition, match=r"argument 1 of jit_add \(replica 0\): the f32\[4\] buffer on cpu:0 was deleted"):
        compile_text(add_module()).execute([[put(ones()), a]])


def test_replicas_run_one_argument_list_per_device(client, put, compile_text):
    executable = compile_text(add_module(attributes="mhlo.num_replicas = 3 : i32"))
    lists = [[put(ones(value=r), device=r), put(ones(value=10), device=r)] for r in range(3)]
    result = executable.execute(lists)
    assert len(result.outputs) == len(result.device_complete_events) == 3
    for replica, (out,) in enumerate(result.outputs):
        assert out.device() is client.devices()[replica]
        np.testing.assert_array_equal(out.to_host_buffer().array, 10 + replica)
    with pytest.raises(InvalidArgument, match="argument 0 to replica 1 is on device cpu:0, but replica is assigned to device cpu:1"):
        executable.execute([lists[0], lists[0], lists[2]])


def test_execute_device_runs_a_single_device_executable_elsewhere(client, put, compile_text):
    executable = compile_text(add_module())
    device = client.devices()[3]
    a = put(ones(), device=3)
    (out,), = executable.execute([[a, a]], execute_device=device).outputs
    assert out.device() is device
    np.testing.assert_array_equal(out.to_host_buffer().array, 2.0)
    with pytest.raises(InvalidArgument, match="is not a device of this client"):
        executable.execute([[a, a]], execute_device=object())
    replicated = compile_text(add_module(), CompileOptions(num_replicas=2))
    with pytest.raises(InvalidArgument, match="execute_device is only for single-device executables"):
        replicated.execute([[a, a]], execute_device=device)


def test_results_that_alias_inputs_are_copied(put, compile_text):
    identity = compile_text(module("return %arg0 : tensor<4xf32>", args="%arg0: tensor<4xf32>",
                                   results="tensor<4xf32>", name="jit_identity"))
    a = put(np.arange(4, dtype=F32))
    (out,), = identity.execute([[a]]).outputs
    assert out.unsafe_pointer() != a.unsafe_pointer()
    reshape = compile_text(module("%0 = stablehlo.reshape %arg0 : (tensor<4xf32>) -> tensor<2x2xf32>\n"
                                  "return %0 : tensor<2x2xf32>", args="%arg0: tensor<4xf32>",
                                  results="tensor<2x2xf32>", name="jit_reshape"))
    (view,), = reshape.execute([[a]]).outputs
    assert not np.shares_memory(np.from_dlpack(view), np.from_dlpack(a))
    np.testing.assert_array_equal(view.to_host_buffer().array, [[0, 1], [2, 3]])


def test_results_of_the_wrong_shape_are_execution_errors(client, compiler, put, compile_text):
    executable = compile_text(add_module())
    program = executable.get_executable().program
    program.outputs = ()  # irrelevant to the runtime's precomputed plan
    program.run = lambda args, out=None: [np.zeros(3, F32)]
    (out,), = executable.execute([[put(ones()), put(ones())]]).outputs
    with pytest.raises(Exception, match=r"jit_add: result 0 is float32\[3\] but the program declares f32\[4\]"):
        out.to_host_buffer()
    program.run = lambda args, out=None: []
    (out,), = executable.execute([[put(ones()), put(ones())]]).outputs
    with pytest.raises(Exception, match="returned 0 results but declares 1 outputs"):
        out.to_host_buffer()


# -- donation ---------------------------------------------------------------------------------


def test_donation_reuses_the_storage_of_an_aliased_input(client, put, compile_text):
    executable = compile_text(add_module(alias=True))
    a, b = put(np.arange(4, dtype=F32)), put(ones(value=10))
    pointer = a.unsafe_pointer()
    device = client.devices()[0]
    in_use = device.memory_stats().bytes_in_use
    (out,), = executable.execute([[a, b]]).outputs
    assert out.unsafe_pointer() == pointer
    np.testing.assert_array_equal(out.to_host_buffer().array, [10, 11, 12, 13])
    assert a.is_deleted() and not b.is_deleted()
    assert device.memory_stats().bytes_in_use == in_use  # the output took the input's bytes
    with pytest.raises(FailedPrecondition, match=r"the f32\[4\] buffer on cpu:0 was donated to an execution of jit_add; it can no longer be used"):
        a.to_host_buffer()
    with pytest.raises(FailedPrecondition, match="argument 0 of jit_add .* was donated to an execution of jit_add"):
        executable.execute([[a, b]])
    # The output is donatable in its turn: a chain of in-place updates.
    (again,), = executable.execute([[out, b]]).outputs
    assert again.unsafe_pointer() == pointer
    np.testing.assert_array_equal(again.to_host_buffer().array, [20, 21, 22, 23])


def test_a_fresh_result_can_be_donated_in_its_turn(client, put, compile_text):
    produce = compile_text(add_module(name="jit_produce"))
    update = compile_text(add_module(alias=True))
    (fresh,), = produce.execute([[put(ones()), put(ones())]]).outputs
    pointer = fresh.unsafe_pointer()
    (updated,), = update.execute([[fresh, put(ones())]]).outputs
    assert fresh.is_deleted()
    assert updated.unsafe_pointer() == pointer  # the program's own result array was reused
    np.testing.assert_array_equal(updated.to_host_buffer().array, 3.0)


def test_non_donatable_inputs_are_kept(put, compile_text):
    executable = compile_text(add_module(alias=True))
    a, b = put(np.arange(4, dtype=F32)), put(ones())
    (out,), = executable.execute([[a, b]], ExecuteOptions(non_donatable_input_indices=(0,))).outputs
    assert not a.is_deleted()
    assert out.unsafe_pointer() != a.unsafe_pointer()
    np.testing.assert_array_equal(a.to_host_buffer().array, [0, 1, 2, 3])
    np.testing.assert_array_equal(out.to_host_buffer().array, [1, 2, 3, 4])


def test_same_buffer_twice_where_one_is_donated(put, compile_text):
    executable = compile_text(add_module(alias=True))
    a = put(ones())
    with pytest.raises(InvalidArgument) as info:
        executable.execute([[a, a]])
    assert info.value.message == (
        "Attempt to donate a buffer which is also used by the same call to Execute() (flattened argument 1, "
        "replica 0, first use: 0). Toy example for this bug: `f(a, donate(a))`.")
    assert not a.is_deleted()  # nothing happened
    both = compile_text(module("%0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>\nreturn %0, %0 : tensor<4xf32>, tensor<4xf32>",
                               args="%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}, "
                                    "%arg1: tensor<4xf32> {tf.aliasing_output = 1 : i32}",
                               results="tensor<4xf32>, tensor<4xf32>"))
    with pytest.raises(InvalidArgument, match=r"Attempt to donate the same buffer twice in Execute\(\) \(flattened argument 1, replica 0, first use: 0\)"):
        both.execute([[a, a]])
    with pytest.raises(InvalidArgument, match=r"Attempt to donate a buffer which is also used .*`f\(a, donate\(a\)\)`"):
        both.execute([[a, a]], ExecuteOptions(non_donatable_input_indices=(1,)))
    (x, y), = both.execute([[a, a]], ExecuteOptions(non_donatable_input_indices=(0, 1))).outputs
    assert not a.is_deleted()
    np.testing.assert_array_equal(x.to_host_buffer().array, 2.0)
    # Two results of one value never share storage.
    assert x.unsafe_pointer() != y.unsafe_pointer()


def test_a_failing_replica_check_donates_nothing(put, compile_text):
    executable = compile_text(add_module(alias=True, attributes="mhlo.num_replicas = 2 : i32"))
    a0, b0 = put(ones()), put(ones())
    wrong = put(ones())  # on device 0, but replica 1 runs on device 1
    with pytest.raises(InvalidArgument, match="to replica 1"):
        executable.execute([[a0, b0], [wrong, put(ones(), device=1)]])
    assert not a0.is_deleted() and not wrong.is_deleted()


def test_buffer_donor_is_donated_without_an_output(put, compile_text):
    executable = compile_text(module("%0 = stablehlo.multiply %arg0, %arg1 : tensor<4xf32>\nreturn %0 : tensor<4xf32>",
                                     args="%arg0: tensor<4xf32> {jax.buffer_donor = true}, %arg1: tensor<4xf32>",
                                     results="tensor<4xf32>"))
    a, b = put(ones(value=3)), put(ones(value=2))
    (out,), = executable.execute([[a, b]]).outputs
    assert a.is_deleted()
    np.testing.assert_array_equal(out.to_host_buffer().array, 6.0)


def test_alias_to_an_output_of_another_shape_donates_without_reuse(client, put, compile_text):
    executable = compile_text(module("%0 = stablehlo.reshape %arg0 : (tensor<4xf32>) -> tensor<2x2xf32>\n"
                                     "%1 = stablehlo.negate %0 : tensor<2x2xf32>\nreturn %1 : tensor<2x2xf32>",
                                     args="%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}",
                                     results="tensor<2x2xf32>"))
    a = put(np.arange(4, dtype=F32))
    (out,), = executable.execute([[a]]).outputs
    assert a.is_deleted()
    np.testing.assert_array_equal(out.to_host_buffer().array, [[0, -1], [-2, -3]])
    assert client.devices()[0].memory_stats().bytes_in_use == 16


def test_immutable_zero_copy_input_is_donated_but_never_written(client, compile_text):
    executable = compile_text(add_module(alias=True))
    host = np.arange(4, dtype=F32)
    transfer = client.buffer_from_host_buffer(host, semantics=S.IMMUTABLE_ZERO_COPY)
    b = client.buffer_from_host_buffer(ones()).buffer
    (out,), = executable.execute([[transfer.buffer, b]]).outputs
    assert transfer.buffer.is_deleted()
    np.testing.assert_array_equal(host, [0, 1, 2, 3])  # the runtime promised not to write it
    np.testing.assert_array_equal(out.to_host_buffer().array, [1, 2, 3, 4])
    assert transfer.done_with_host_buffer.is_ready()  # the execution let go of it


def test_mutable_zero_copy_input_is_updated_in_place(client, compile_text):
    executable = compile_text(add_module(alias=True))
    host = np.arange(4, dtype=F32)
    transfer = client.buffer_from_host_buffer(host, semantics=S.MUTABLE_ZERO_COPY)
    b = client.buffer_from_host_buffer(ones()).buffer
    (out,), = executable.execute([[transfer.buffer, b]]).outputs
    np.testing.assert_array_equal(host, [1, 2, 3, 4])  # written where it lives
    assert out.unsafe_pointer() == host.__array_interface__["data"][0]
    # The host array now backs the output: the runtime is done with it only when that goes.
    assert not transfer.done_with_host_buffer.is_ready()
    out.delete()
    assert transfer.done_with_host_buffer.is_ready()


def test_a_constant_result_is_never_overwritten_by_donation(put, compile_text):
    constant = compile_text(module("%0 = stablehlo.constant dense<5.0> : tensor<4xf32>\nreturn %0 : tensor<4xf32>",
                                   args="", results="tensor<4xf32>", name="jit_constant"))
    double = compile_text(add_module(alias=True))
    (c,), = constant.execute([[]]).outputs
    (doubled,), = double.execute([[c, put(ones(value=5))]]).outputs
    np.testing.assert_array_equal(doubled.to_host_buffer().array, 10.0)
    # The program returns the same array every run; donation must not have written into it.
    (again,), = constant.execute([[]]).outputs
    np.testing.assert_array_equal(again.to_host_buffer().array, 5.0)


def test_ready_event_of_outputs_is_shared_and_ready(put, compile_text):
    (out,), = compile_text(add_module()).execute([[put(ones()), put(ones())]]).outputs
    assert out.ready_event() is READY


# -- the fast path (one device, ready inputs, nothing donated, inline) --------------------------


@pytest.mark.parametrize("bad", ["deleted", "donated", "wrong_dtype", "wrong_shape", "wrong_device", "not_a_buffer"])
def test_a_bad_argument_after_a_good_one_is_refused_and_the_good_one_is_left_free(client, put, compile_text, bad):
    # add_module() takes the runtime's fast path; a bad second argument sends the call to the
    # general checks, and the hold the fast path took on the first must be given back: the
    # first buffer's storage is then still reused in place when it is donated.
    executable = compile_text(add_module())
    good = put(np.arange(4, dtype=F32))
    if bad in ("deleted", "donated"):
        other = put(ones())
        if bad == "deleted":
            other.delete()
        else:
            compile_text(add_module(alias=True, name="jit_donate")).execute([[other, put(ones())]])
        expected = (FailedPrecondition, rf"argument 1 of jit_add \(replica 0\): the f32\[4\] buffer on cpu:0 "
                                        rf"was {'deleted' if bad == 'deleted' else 'donated to an execution of jit_donate'}")
    elif bad == "wrong_dtype":
        other, expected = put(np.ones(4, np.float64)), (InvalidArgument, r"expected f32\[4\], got f64\[4\]")
    elif bad == "wrong_shape":
        other, expected = put(np.ones(3, F32)), (InvalidArgument, r"expected f32\[4\], got f32\[3\]")
    elif bad == "wrong_device":
        other, expected = put(ones(), device=1), (InvalidArgument, "argument 1 to replica 0 is on device cpu:1")
    else:
        other, expected = ones(), (InvalidArgument, "argument 1 of jit_add .* is not a buffer of a pjrt-hub CPU client")
    with pytest.raises(expected[0], match=expected[1]):
        executable.execute([[good, other]])
    pointer = good.unsafe_pointer()
    (updated,), = compile_text(add_module(alias=True)).execute([[good, put(ones())]]).outputs
    assert good.is_deleted() and updated.unsafe_pointer() == pointer
    np.testing.assert_array_equal(updated.to_host_buffer().array, [1, 2, 3, 4])


def test_the_fast_path_counts_every_output_in_the_memory_statistics(client, put, compile_text):
    executable = compile_text(module(
        "%0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>\n%1 = stablehlo.multiply %arg0, %arg1 : tensor<4xf32>\n"
        "%2 = stablehlo.reshape %1 : (tensor<4xf32>) -> tensor<2x2xf32>\nreturn %0, %2 : tensor<4xf32>, tensor<2x2xf32>",
        args="%arg0: tensor<4xf32>, %arg1: tensor<4xf32>", results="tensor<4xf32>, tensor<2x2xf32>"))
    a, b = put(ones()), put(ones())
    memory = client.devices()[0].default_memory()
    before = memory.stats()
    outputs = executable.execute([[a, b]]).outputs[0]
    after = memory.stats()
    assert after.bytes_in_use - before.bytes_in_use == 16 + 16
    assert after.num_allocs - before.num_allocs == 2
    assert after.largest_alloc_size >= 16 and after.peak_bytes_in_use >= after.bytes_in_use
    for output in outputs:
        output.destroy()
    assert memory.stats().bytes_in_use == before.bytes_in_use


# -- a program with a direct entry (``fresh_results`` and ``direct_entry``: numba_cpu's) ----------


class _FreshProgram(MiniProgram):
    """A mini program that returns fresh arrays and offers a direct entry once ``ready``."""

    fresh_results = True

    def __init__(self, program: MiniProgram) -> None:
        super().__init__(**{f.name: getattr(program, f.name) for f in fields(MiniProgram)})
        self.ready = False
        self.entry_calls = 0
        self.refuse = False  # the entry raises TypeError, as numba's dispatcher does for odd arrays
        self.fail = False  # the entry raises as a failing program does
        self.during = None  # called inside the entry

    def direct_entry(self):
        if not self.ready:
            return None

        def entry(*arrays):
            self.entry_calls += 1
            if self.during is not None:
                self.during()
            if self.refuse:
                raise TypeError("No matching definition for argument type(s)")
            if self.fail:
                raise FloatingPointError("the program's own failure")
            return tuple(self._compute(arrays))

        return entry

    def run(self, args, out=None):
        if self.during is not None:
            self.during()
        return super().run(args, out)

    def _compute(self, arrays):
        env = dict(zip(self.arg_names, arrays))
        for name, step in self.steps:
            env[name] = step(env)
        return [np.array(env[name]) for name in self.result_names]


@pytest.fixture
def fresh_client():
    class Compiler(MiniCompiler):
        def compile(self, code, options):
            self.last = _FreshProgram(super().compile(code, options))
            return self.last

    compiler = Compiler()
    client = CpuApi(compiler).client_create()
    yield client, compiler
    client.destroy()


TWO_OUTPUTS = ("%0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>\n%1 = stablehlo.multiply %arg0, %arg1 : tensor<4xf32>\n"
               "%2 = stablehlo.reshape %1 : (tensor<4xf32>) -> tensor<2x2xf32>\nreturn %0, %2 : tensor<4xf32>, tensor<2x2xf32>")


def test_the_fast_path_calls_a_direct_entry_once_the_program_has_one(fresh_client):
    client, compiler = fresh_client
    executable = client.compile(Program(module(TWO_OUTPUTS, args="%arg0: tensor<4xf32>, %arg1: tensor<4xf32>",
                                               results="tensor<4xf32>, tensor<2x2xf32>")))
    program = compiler.last
    device = client.devices()[0]
    a = client.buffer_from_host_buffer(np.arange(4, dtype=F32), device=device).buffer
    b = client.buffer_from_host_buffer(ones(value=3), device=device).buffer

    def outputs():
        added, multiplied = executable.execute([[a, b]]).outputs[0]
        np.testing.assert_array_equal(added.to_host_buffer().array, [3, 4, 5, 6])
        np.testing.assert_array_equal(multiplied.to_host_buffer().array, [[0, 3], [6, 9]])
        return added, multiplied

    outputs()  # no entry yet: run answers
    assert (program.runs, program.entry_calls) == (1, 0)
    program.ready = True
    memory = device.default_memory()
    before = memory.stats()
    added, multiplied = outputs()
    assert (program.runs, program.entry_calls) == (1, 1)
    after = memory.stats()
    assert (after.bytes_in_use - before.bytes_in_use, after.num_allocs - before.num_allocs) == (32, 2)
    assert after.peak_bytes_in_use >= after.bytes_in_use and after.largest_alloc_size >= 16
    # The outputs the fast path built are the buffers CpuBuffer._make builds, slot for slot.
    for output in (added, multiplied):
        made = CpuBuffer._make(memory, output._layout, output._array, READY, output._layout.nbytes, True)
        slots = [name for name in CpuBuffer.__slots__ if name != "__weakref__"]
        assert {name: getattr(output, name) for name in slots} == {name: getattr(made, name) for name in slots}
        made._accounted = 0  # the same storage: freed once, by the output
        output.destroy()
    assert memory.stats().bytes_in_use == before.bytes_in_use
    # An entry that refuses the arrays (TypeError) hands the call to run, with the same result.
    program.refuse = True
    outputs()
    assert (program.runs, program.entry_calls) == (2, 2)
    # Any other exception is the execution's error, on the event and every output; the program
    # is not run a second time.
    program.refuse, program.fail = False, True
    result = executable.execute([[a, b]])
    assert (program.runs, program.entry_calls) == (2, 3)
    with pytest.raises(Exception, match="the program's own failure"):
        result.device_complete_events[0].await_()
    assert all(out.ready_event().error() is not None for out in result.outputs[0])


@pytest.mark.parametrize("kind", ["short", "long_synchronous"])
def test_a_delete_from_another_thread_during_a_run(kind):
    # The fast path runs a short program's compiled entry holding the client's lock: a delete
    # from another thread waits for the run, then happens. A synchronous client runs every
    # program inline, however long: one beyond the inline policy's limits goes through run with
    # the lock let go (the delete goes ahead; the run keeps its hold on the array), never
    # through the entry under the lock. Either way the run reads the whole array.
    from pjrt_hub.backends.cpu_runtime._executables import InlinePolicy

    class Compiler(MiniCompiler):
        def compile(self, code, options):
            self.last = _FreshProgram(super().compile(code, options))
            return self.last

    compiler = Compiler()
    if kind == "short":
        client = CpuApi(compiler).client_create()
    else:
        client = CpuApi(compiler, inline_policy=InlinePolicy(max_flops=-1)).client_create({"asynchronous": False})
    try:
        executable = client.compile(Program(add_module()))
        program = compiler.last
        program.ready = True
        device = client.devices()[0]
        a = client.buffer_from_host_buffer(np.arange(4, dtype=F32), device=device).buffer
        b = client.buffer_from_host_buffer(ones(value=3), device=device).buffer
        seen = {}

        def during():
            deleter = threading.Thread(target=a.delete)
            deleter.start()
            deleter.join(0.3 if kind == "short" else 10)
            seen.update(deleter=deleter, went_ahead=not deleter.is_alive(), deleted=a.is_deleted())

        program.during = during
        (out,) = executable.execute([[a, b]]).outputs[0]
        seen["deleter"].join(10)
        if kind == "short":
            assert (program.runs, program.entry_calls) == (0, 1)
            assert not seen["went_ahead"] and not seen["deleted"]
        else:
            assert (program.runs, program.entry_calls) == (1, 0)
            assert seen["went_ahead"] and seen["deleted"]
        assert a.is_deleted()
        np.testing.assert_array_equal(out.to_host_buffer().array, [3, 4, 5, 6])
    finally:
        client.destroy()


def _chain(n: int) -> str:
    """A module of ``n`` f32[4] arguments whose result is their sum plus 1 (n = 0: the constant 1)."""
    lines = ["%c = stablehlo.constant dense<1.0> : tensor<4xf32>"]
    last = "%c"
    for i in range(n):
        lines.append(f"%s{i} = stablehlo.add {last}, %arg{i} : tensor<4xf32>")
        last = f"%s{i}"
    lines.append(f"%r = stablehlo.add {last}, %c : tensor<4xf32>")
    lines.append("return %r : tensor<4xf32>")
    return module("\n".join(lines), args=", ".join(f"%arg{i}: tensor<4xf32>" for i in range(n)),
                  results="tensor<4xf32>")


@pytest.mark.parametrize("n", [0, 1, 3, 16, 17, 40])
def test_the_fast_path_of_every_arity_runs_and_refuses_a_bad_last_argument(fresh_client, n):
    # The fast path is written out per number of arguments (._fast): each arity computes, with
    # run and with the direct entry, and a bad last argument leaves no hold on the others.
    client, compiler = fresh_client
    executable = client.compile(Program(_chain(n)))
    program = compiler.last
    device = client.devices()[0]
    buffers = [client.buffer_from_host_buffer(np.full(4, i + 1, F32), device=device).buffer for i in range(n)]
    expected = np.full(4, 2 + n * (n + 1) / 2, F32)
    for ready in (False, True):
        program.ready = ready
        (out,), = executable.execute([buffers]).outputs
        np.testing.assert_array_equal(out.to_host_buffer().array, expected)
    assert (program.runs, program.entry_calls) == (1, 1)
    assert all(buffer._uses == 0 for buffer in buffers)
    if n:
        wrong = client.buffer_from_host_buffer(np.ones(4, np.float64), device=device).buffer
        with pytest.raises(InvalidArgument, match=rf"argument {n - 1} of .* expected f32\[4\], got f64\[4\]"):
            executable.execute([[*buffers[:-1], wrong]])
        assert all(buffer._uses == 0 for buffer in buffers)
    else:
        with pytest.raises(InvalidArgument, match="supplied 1 buffers but compiled program expected 0"):
            executable.execute([[client.buffer_from_host_buffer(ones(), device=device).buffer]])


def test_a_zero_copy_argument_deleted_during_a_fast_execution_is_released_after_it(client, compile_text):
    # The fast path holds its arguments while the program runs: the owner of a zero-copy host
    # array hears that it is free only once the execution that read it is over.
    from .cpu_runtime_minihlo import gate

    executable = compile_text(module(
        "%0 = stablehlo.custom_call @gate_fastpath_release(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
        "return %0 : tensor<4xf32>", args="%arg0: tensor<4xf32>", results="tensor<4xf32>"))
    host = np.arange(4, dtype=F32)
    transfer = client.buffer_from_host_buffer(host, semantics=S.IMMUTABLE_ZERO_COPY)
    results = []
    running = threading.Thread(target=lambda: results.append(executable.execute([[transfer.buffer]])))
    running.start()
    deadline = time.monotonic() + 30
    while transfer.buffer._uses == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    transfer.buffer.delete()
    assert transfer.buffer.is_deleted() and not transfer.done_with_host_buffer.is_ready()
    gate("fastpath_release").set()
    running.join(30)
    assert transfer.done_with_host_buffer.is_ready()
    (out,), = results[0].outputs
    np.testing.assert_array_equal(out.to_host_buffer().array, host)
