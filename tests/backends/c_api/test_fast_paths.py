"""The served struct's native fast paths (backends/c_api/_native.py): the per-execute questions a
framework asks are answered without entering Python, with the same answers Python gives, and
everything they cannot answer (stale handles, foreign pointers, short Args, deleted buffers)
still reaches Python and its errors."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pjrt_hub.abi import FRAMEWORK_VERSION, ExecutionError, InvalidArgument, PjrtError, Program
from pjrt_hub.backends.c_api.library import PluginLibrary
from pjrt_hub.backends.c_api.server import ServedApi
from pjrt_hub.backends.cpu_runtime import CpuApi
from pjrt_hub.backends.reference import ReferenceCompiler

from .test_server import ADD, _api, _bridge

pytest.importorskip("llvmlite.binding")


@pytest.fixture()
def served() -> ServedApi:
    served = ServedApi(_api(), name="fast", version=FRAMEWORK_VERSION)
    assert served._ready_event, "llvmlite is installed, so the fast paths must be in place"
    return served


@pytest.fixture()
def lib(served: ServedApi) -> PluginLibrary:
    return PluginLibrary.from_address(served.address, "fast", "served")


def _python_calls(served: ServedApi, name: str) -> int:
    return served.calls[f"PJRT_{name}"]


def _run_add(served: ServedApi):
    client = _bridge(served, "fast").client_create()
    loaded = client.compile(Program(ADD))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs = [client.buffer_from_host_buffer(a).buffer for _ in range(2)]
    return client, loaded, inputs, loaded.execute([inputs])


def test_executable_counts_are_answered_natively_after_the_first_time(served, lib):
    _client, loaded, _inputs, _result = _run_add(served)
    executable = loaded.get_executable()
    assert (executable.num_replicas(), executable.num_partitions(), executable.num_outputs()) == (1, 1, 1)
    before = dict(served.calls)
    for _ in range(5):
        assert (executable.num_replicas(), executable.num_partitions(), executable.num_outputs()) == (1, 1, 1)
    assert dict(served.calls) == before, "a count already given went through Python again"


def test_a_destroyed_executable_handle_reaches_python_and_is_refused(served, lib):
    _client, loaded, _inputs, _result = _run_add(served)
    executable = loaded.get_executable()
    handle = executable.handle
    lib.call("PJRT_Executable_NumOutputs", lib.args("PJRT_Executable_NumOutputs_Args", executable=handle))
    lib.call("PJRT_Executable_Destroy", lib.args("PJRT_Executable_Destroy_Args", executable=handle))
    executable._owned.handle = 0  # destroyed above
    with pytest.raises(InvalidArgument, match="not a live handle"):
        lib.call("PJRT_Executable_NumOutputs", lib.args("PJRT_Executable_NumOutputs_Args", executable=handle))


@pytest.mark.parametrize("foreign", ["outside", "misaligned", "other kind"])
def test_a_pointer_that_is_not_a_tagged_slot_reaches_python(served, lib, foreign):
    _client, loaded, _inputs, result = _run_add(served)
    executable = loaded.get_executable()
    executable.num_outputs()  # tagged from now on
    handle = {"outside": ctypes.addressof(ctypes.create_string_buffer(64)),
              "misaligned": executable.handle + 8,
              "other kind": result.outputs[0][0].handle}[foreign]
    with pytest.raises(InvalidArgument, match="expected a PJRT_Executable"):
        lib.call("PJRT_Executable_NumOutputs", lib.args("PJRT_Executable_NumOutputs_Args", executable=handle))


def test_an_args_struct_too_small_reaches_python_and_is_refused(served, lib):
    _client, loaded, _inputs, _result = _run_add(served)
    executable = loaded.get_executable()
    executable.num_outputs()
    args = lib.args("PJRT_Executable_NumOutputs_Args", executable=executable.handle)
    args.struct_size = 24
    with pytest.raises(InvalidArgument, match="Unexpected PJRT_Executable_NumOutputs_Args size"):
        lib.call("PJRT_Executable_NumOutputs", args)


def test_outputs_of_an_execute_give_place_and_readiness_without_python(served, lib):
    client, _loaded, _inputs, result = _run_add(served)
    out = result.outputs[0][0]
    before = dict(served.calls)
    assert out.device() == client.devices()[0]
    assert out.memory().kind() == client.devices()[0].default_memory().kind()
    event = out.ready_event()
    assert event.is_ready() and event.error() is None
    event.await_()  # Await is Python's, on the same shared handle
    fired = []
    event.on_ready(fired.append)
    assert fired == [None]
    del event
    complete = result.device_complete_events[0]
    assert complete.is_ready() and complete.error() is None
    python = {k: v - before.get(k, 0) for k, v in served.calls.items() if v != before.get(k, 0)}
    assert set(python) <= {"PJRT_Event_Await", "PJRT_Memory_Kind", "PJRT_Device_DefaultMemory",
                           "PJRT_Client_Devices"}, python
    np.testing.assert_array_equal(out.to_host_buffer().array, 2 * np.arange(6, dtype=np.float32).reshape(2, 3))


def test_the_shared_ready_event_outlives_every_destroy(served, lib):
    _client, _loaded, _inputs, result = _run_add(served)
    handle = result.outputs[0][0].handle
    events = [lib.call("PJRT_Buffer_ReadyEvent", lib.args("PJRT_Buffer_ReadyEvent_Args", buffer=handle)).event
              for _ in range(3)]
    assert events == [served._ready_event] * 3
    for event in events:
        lib.call("PJRT_Event_Destroy", lib.args("PJRT_Event_Destroy_Args", event=event))
    args = lib.args("PJRT_Event_IsReady_Args", event=events[0])
    assert lib.call("PJRT_Event_IsReady", args).is_ready
    lib.call("PJRT_Event_Await", lib.args("PJRT_Event_Await_Args", event=events[0]))
    with pytest.raises(InvalidArgument, match="only events made by PJRT_Event_Create can be set"):
        lib.call("PJRT_Event_Set", lib.args("PJRT_Event_Set_Args", event=events[0]))


def test_a_deleted_buffer_is_no_longer_ready(served, lib):
    _client, _loaded, _inputs, result = _run_add(served)
    out = result.outputs[0][0]
    assert out.ready_event().error() is None
    out.delete()
    event = lib.call("PJRT_Buffer_ReadyEvent", lib.args("PJRT_Buffer_ReadyEvent_Args", buffer=out.handle)).event
    assert event != served._ready_event
    with pytest.raises(PjrtError, match="deleted"):
        lib.call("PJRT_Event_Await", lib.args("PJRT_Event_Await_Args", event=event))
    lib.call("PJRT_Event_Destroy", lib.args("PJRT_Event_Destroy_Args", event=event))


DONATING_ADD = ADD.replace("%a: tensor<2x3xf32>,", "%a: tensor<2x3xf32> {tf.aliasing_output = 0 : i32},")


def test_a_donated_argument_is_no_longer_ready(served, lib):
    client, _loaded, _inputs, result = _run_add(served)
    x = result.outputs[0][0]  # an output: tagged ready
    assert lib.call("PJRT_Buffer_ReadyEvent", lib.args("PJRT_Buffer_ReadyEvent_Args", buffer=x.handle)).event \
        == served._ready_event
    donating = client.compile(Program(DONATING_ADD))
    donating.execute([[x, client.buffer_from_host_buffer(np.ones((2, 3), np.float32)).buffer]])
    assert x.is_deleted()
    event = lib.call("PJRT_Buffer_ReadyEvent", lib.args("PJRT_Buffer_ReadyEvent_Args", buffer=x.handle)).event
    assert event != served._ready_event
    with pytest.raises(PjrtError, match="donated|deleted"):
        lib.call("PJRT_Event_Await", lib.args("PJRT_Event_Await_Args", event=event))


def test_a_failed_execution_hands_out_its_own_events():
    class Failing:
        name = "failing"

        def __init__(self) -> None:
            self._inner = ReferenceCompiler()

        def compile(self, code, options):
            program = self._inner.compile(code, options)

            def run(args, out=None):
                raise ExecutionError("the device caught fire")

            program.run = run
            return program

        def deserialize(self, data):
            raise InvalidArgument("not used")

    served = ServedApi(CpuApi(Failing(), api_version=FRAMEWORK_VERSION), name="failing")
    client = _bridge(served, "failing").client_create()
    loaded = client.compile(Program(ADD))
    result = loaded.execute([[client.buffer_from_host_buffer(np.ones((2, 3), np.float32)).buffer
                              for _ in range(2)]])
    assert result.device_complete_events[0].handle != served._ready_event
    for event in (result.device_complete_events[0], result.outputs[0][0].ready_event()):
        assert event.handle != served._ready_event
        with pytest.raises(PjrtError, match="the device caught fire"):
            event.await_()


def test_error_destroy_of_no_error_never_enters_python(served, lib):
    before = _python_calls(served, "Error_Destroy")
    args = lib.args("PJRT_Error_Destroy_Args", error=None)
    lib.function("PJRT_Error_Destroy")(ctypes.addressof(args))
    assert _python_calls(served, "Error_Destroy") == before


def test_without_llvmlite_the_struct_answers_from_python(monkeypatch):
    import pjrt_hub.backends.c_api._native as native

    monkeypatch.setattr(native, "_initialize", lambda: (_ for _ in ()).throw(ImportError("no llvmlite")))
    served = ServedApi(_api(), name="slow", version=FRAMEWORK_VERSION)
    assert served._ready_event == 0
    _client, loaded, _inputs, result = _run_add(served)
    event = result.outputs[0][0].ready_event()
    assert event.handle != 0 and event.is_ready()
    before = _python_calls(served, "Executable_NumOutputs")
    loaded.get_executable().num_outputs()
    loaded.get_executable().num_outputs()
    assert _python_calls(served, "Executable_NumOutputs") == before + 2
