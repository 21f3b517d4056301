"""What a Python plugin does must survive the C ABI: served as a ``PJRT_Api`` and consumed back
through the C bridge, each behaviour here gives what the plugin gives directly (the conformance
verdicts of ``--via c_api`` rest on them). The reference interpreter is served (no numba compile);
the JAX side runs in a child process, since JAX reads its plugins once per process.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.abi import (
    FRAMEWORK_VERSION,
    CompileError,
    DeadlineExceeded,
    ErrorCode,
    FailedPrecondition,
    HostBufferSemantics,
    Internal,
    PjrtError,
    Program,
)
from pjrt_hub.backends.c_api import CApi
from pjrt_hub.backends.c_api.abi_check import check_struct_sizes
from pjrt_hub.backends.c_api.library import PluginLibrary
from pjrt_hub.backends.c_api.served import publish, served_path
from pjrt_hub.backends.c_api.server import ServedApi
from pjrt_hub.backends.cpu_runtime import CpuApi
from pjrt_hub.backends.cpu_runtime.builtin import STABLEHLO_ATTRIBUTES
from pjrt_hub.backends.reference import ReferenceCompiler
from pjrt_hub.testing import toy
from pjrt_hub.testing._programs import failing_program


def _api(**kwargs: Any) -> CpuApi:
    return CpuApi(ReferenceCompiler(), platform_name="cpu", api_version=FRAMEWORK_VERSION,
                  attributes=dict(STABLEHLO_ATTRIBUTES), **kwargs)


#: Served structs live as long as the process: a C caller keeps raw pointers into them.
_SERVED: list[ServedApi] = []


def _served(api: Any, name: str, **kwargs: Any) -> ServedApi:
    served = ServedApi(api, name=name, **kwargs)
    _SERVED.append(served)
    return served


def _bridge(served: ServedApi, name: str = "served") -> CApi:
    return CApi(PluginLibrary.from_address(served.address, name, f"pjrt-hub-served:{name}"))


@pytest.fixture(scope="module")
def client() -> Any:
    return _bridge(_served(_api(), "reference")).client_create()


def _fetch(buffer: Any) -> np.ndarray:
    copy = buffer.to_host_buffer()
    copy.event.await_(timeout=10)
    return copy.array


def _error_of(call: Any) -> PjrtError:
    with pytest.raises(PjrtError) as caught:
        call()
    return caught.value


# -- an errored output on its way to the host ---------------------------------------------------


def _failed_outputs(client: Any) -> list[Any]:
    executable = client.compile(Program(failing_program()))
    result = executable.execute([[client.buffer_from_host_buffer(np.arange(4, dtype=np.float32)).buffer,
                                  client.buffer_from_host_buffer(np.float32(2)).buffer]])
    for event in result.device_complete_events:
        with pytest.raises(PjrtError):
            event.await_(timeout=30)
    return result.outputs[0]


def test_an_output_of_a_failed_execution_gives_its_own_error_not_a_host_allocation():
    direct = _api().client_create()
    bridged = _bridge(_served(_api(), "reference")).client_create()
    for index in range(2):  # the small output, and the one too large to allocate
        want = _error_of(lambda i=index: _fetch(_failed_outputs(direct)[i]))
        got = _error_of(lambda i=index: _fetch(_failed_outputs(bridged)[i]))
        # The C ABI carries the code and the message (not pjrt-hub's stage class: ExecutionError).
        assert (got.code, got.message) == (want.code, want.message)


class _NegativeBuffer(toy.ToyBuffer):
    def dimensions(self) -> tuple[int, ...]:
        return (-3,)


class _NegativeClient(toy.ToyClient):
    buffer_class = _NegativeBuffer


class _NegativeApi(toy.ToyApi):
    client_class = _NegativeClient


def test_dimensions_that_cannot_be_allocated_are_a_pjrt_error():
    client = _bridge(_served(_NegativeApi(toy.ToyPlugin()), "negative")).client_create()
    buffer = client.buffer_from_host_buffer(np.zeros(3, np.float32)).buffer
    with pytest.raises(Internal, match=r"PJRT_Buffer_Dimensions answered \[-3\]"):
        buffer.to_host_buffer()


# -- element types below a byte ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2,
                                   ml_dtypes.float4_e2m1fn])
def test_sub_byte_types_cross_one_element_per_byte(client, dtype):
    host = np.array([[0, 1, 1], [1, 0, 1]]).astype(dtype)
    buffer = client.buffer_from_host_buffer(host).buffer
    back = _fetch(buffer)
    assert back.dtype == host.dtype and back.shape == host.shape
    assert back.view(np.uint8).tolist() == host.view(np.uint8).tolist()


# -- host arrays the bridge must copy ----------------------------------------------------------


def test_a_foreign_byte_order_array_under_mutable_zero_copy_is_copied_and_free_at_once(client):
    host = np.arange(6, dtype=">f4").reshape(2, 3)
    transfer = client.buffer_from_host_buffer(host, semantics=HostBufferSemantics.MUTABLE_ZERO_COPY)
    assert transfer.done_with_host_buffer.is_ready()  # copied during the call: the array is the caller's
    np.testing.assert_array_equal(_fetch(transfer.buffer), host)


# -- views and DLPack --------------------------------------------------------------------------


def test_a_view_of_host_memory_aliases_it_and_runs_on_delete_once(client):
    host = np.arange(8, dtype=np.float32)
    calls: list[int] = []
    view = client.create_view_of_device_buffer(host, on_delete=lambda: calls.append(1))
    host[0] = -1.0
    assert _fetch(view)[0] == -1.0
    assert calls == []
    view.delete()
    view.destroy()
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    gc.collect()
    assert calls == [1]


def test_a_host_buffer_exports_through_dlpack_without_a_copy_holding_a_reference(client):
    host = np.array([3.0, 1.0, 4.0, 1.5], np.float32)
    buffer = client.buffer_from_host_buffer(host).buffer
    consumer = np.from_dlpack(buffer)
    np.testing.assert_array_equal(consumer, host)
    assert consumer.ctypes.data == buffer.unsafe_pointer()
    with pytest.raises(FailedPrecondition):
        buffer.delete()  # the consumer's external reference holds the memory
    del consumer
    gc.collect()
    buffer.delete()
    assert buffer.is_deleted()


# -- key-value callbacks, both ways ------------------------------------------------------------


class _Store:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.changed = threading.Condition()

    def get(self, key: str, timeout: float) -> bytes:
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.values, timeout):
                raise DeadlineExceeded(f"{key} was not put within {timeout} s")
            return self.values[key]

    def try_get(self, key: str) -> bytes | None:
        return self.values.get(key)

    def put(self, key: str, value: bytes) -> None:
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()


def test_the_processes_of_a_job_meet_through_key_value_callbacks_across_the_c_abi():
    api = _bridge(_served(_api(num_devices=2), "reference"))
    store = _Store()
    seen: dict[int, list[tuple[int, bool]]] = {}

    def node(index: int) -> None:
        client = api.client_create({"num_nodes": 2, "node_id": index}, kv_store=store)
        seen[index] = [(d.get_description().id(), d.is_addressable()) for d in client.devices()]

    threads = [threading.Thread(target=node, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen[0] == [(0, True), (1, True), (2, False), (3, False)]
    assert seen[1] == [(0, False), (1, False), (2, True), (3, True)]
    assert store.values  # the topology went through the caller's store


# -- the served struct itself ------------------------------------------------------------------


def test_the_struct_sizes_of_a_served_struct_are_checked_in_this_process(capsys):
    publish("parity_sizes", _served(_api(), "reference"))
    report = check_struct_sizes(served_path("parity_sizes"))
    assert report.outcome == "ok", report.reason
    assert len(report.checks) > 80 and all(c.plugin_expects is not None for c in report.checks)
    assert not report.too_small()
    assert capsys.readouterr().out == ""  # no child's progress lines in this process's output


def test_an_extension_node_ends_at_its_version_and_its_later_functions_answer_unimplemented():
    served = _served(toy.ToyPlugin().pjrt_hub_get_api(), "toy", extensions={"Layouts": 1})
    (node,) = served._node_memory
    size = ctypes.c_size_t.from_address(ctypes.addressof(node)).value
    assert size == 24 + 8 * 5  # what the bridge and any careful caller read as version 1
    # jaxlib reads the executable layout functions of later versions without looking at the size.
    assert ctypes.sizeof(node) >= size + 16
    later = ctypes.c_void_p.from_address(ctypes.addressof(node) + size).value
    lib = PluginLibrary.from_address(served.address, "toy", "served")
    args = (ctypes.c_uint64 * 8)(64)
    error = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(later)(ctypes.addressof(args))
    got = lib.error(error, "PJRT_Layouts_PJRT_Executable_GetOutputLayouts")
    assert got.code is ErrorCode.UNIMPLEMENTED and "not in version 1 of the Layouts extension" in got.message


# -- messages ----------------------------------------------------------------------------------


def _numba_typing_error() -> Exception:
    import numba

    @numba.njit
    def add_text(x: Any) -> Any:
        return x + "a"

    try:
        add_text(1)
    except Exception as exc:  # noqa: BLE001 - the error numba raises is what is tested
        return exc
    raise AssertionError("numba compiled int + str")


def test_a_plugin_error_made_of_a_coloured_message_carries_no_terminal_codes():
    typing_error = _numba_typing_error()
    assert "\x1b[" in str(typing_error)  # numba colours it for a terminal
    error = CompileError(f"numba could not compile the generated code ({typing_error})")  # as numba_cpu does
    assert "No implementation of function" in error.message and "\x1b" not in str(error)


def test_an_exception_raised_through_a_served_struct_reaches_c_without_terminal_codes():
    typing_error = _numba_typing_error()

    class Colourful(CpuApi):
        def plugin_attributes(self) -> dict[str, Any]:
            raise typing_error

    served = _served(Colourful(ReferenceCompiler()), "colourful")
    lib = PluginLibrary.from_address(served.address, "colourful", "served")
    args = lib.args("PJRT_Plugin_Attributes_Args")
    error = lib.function("PJRT_Plugin_Attributes")(ctypes.addressof(args))
    message_args = lib.args("PJRT_Error_Message_Args", error=error)
    lib.call_void("PJRT_Error_Message", message_args)
    raw = ctypes.string_at(message_args.message, message_args.message_size)
    lib.destroy_error(error)
    assert b"No implementation of function" in raw and b"\x1b" not in raw


# -- JAX: devices and extensions as a JAX user meets them ----------------------------------------

_JAX_CHILD = textwrap.dedent("""
    import json
    import numpy as np
    import pjrt_hub.jax as pj
    from pjrt_hub import PluginRegistry, RegistrySettings
    from pjrt_hub.testing.toy import ToyPlugin

    registry = PluginRegistry(RegistrySettings(autoload=False))
    registry.register(ToyPlugin(), "toy")  # a boolean device attribute, the Layouts extension at version 1
    pj.register("toy", registry=registry)
    pj.register("reference")
    import jax

    toy = jax.devices("toy")[0]
    reference = jax.devices("reference")[0]
    x = jax.device_put(np.arange(4, dtype=np.float32), toy)
    print(json.dumps({"reference": [repr(reference), str(reference), reference.platform],
                      "toy": [repr(toy), getattr(toy, "toy_device", None)],
                      "toy_jit": np.asarray(jax.jit(lambda a: a * 2 + 1)(x)).tolist()}))
""")


def test_jax_shows_each_plugins_devices_as_its_own_and_survives_what_it_cannot_read():
    pytest.importorskip("jax")
    done = subprocess.run([sys.executable, "-c", _JAX_CHILD], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PJRT_HUB_JAX_PLUGINS": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["reference"] == ["ReferenceDevice(id=0)", "reference:0", "reference"]
    assert seen["toy"] == ["ToyDevice(id=0)", 1]  # True, as a C caller reads a boolean
    assert seen["toy_jit"] == [1.0, 3.0, 5.0, 7.0]
