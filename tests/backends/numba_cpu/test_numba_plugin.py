"""numba_cpu as users reach it: discovered through its entry point, created by the registry."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pjrt_hub import Outcome, PluginRegistry, RegistrySettings
from pjrt_hub.abi import FailedPrecondition, Program

SCALE = """func.func @main(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {{
  %c = stablehlo.constant dense<{k}.0> : tensor<16xf32>
  %0 = stablehlo.multiply %a, %c : tensor<16xf32>
  %1 = stablehlo.add %0, %b : tensor<16xf32>
  return %1 : tensor<16xf32>
}}
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PJRT_HUB_CACHE", str(tmp_path_factory.mktemp("hub-cache")))  # cold, as on CI
        registry = PluginRegistry(RegistrySettings(allowed=frozenset({"numba_cpu"})), environ={})
        registry.load()
        assert registry.record("numba_cpu").outcome is Outcome.LOADED
        yield registry.create_client("numba_cpu")


def test_eight_threads_compile_and_execute_at_once(client):
    errors, results = [], {}
    barrier = threading.Barrier(8)

    def work(i):
        try:
            k = 2 + i % 2  # two distinct programs, each compiled by four threads at once
            barrier.wait()
            exe = client.compile(Program(SCALE.format(k=k)))
            a = np.full(16, i, np.float32)
            b = np.arange(16, dtype=np.float32)
            for _ in range(20):
                bufs = [client.buffer_from_host_buffer(x).buffer for x in (a, b)]
                out = exe.execute([bufs]).outputs[0][0]
                host = out.to_host_buffer()
                host.event.await_(30)
                np.testing.assert_array_equal(host.array, a * k + b)
            results[i] = True
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(results) == 8


def test_donation_and_dlpack_through_the_gate(client):
    text = ("func.func @main(%a: tensor<8xf32> {tf.aliasing_output = 0 : i32}) -> tensor<8xf32> {\n"
            "  %0 = stablehlo.add %a, %a : tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n")
    exe = client.compile(Program(text))
    donated = client.buffer_from_host_buffer(np.ones(8, np.float32)).buffer
    out = exe.execute([[donated]]).outputs[0][0]
    assert donated.is_deleted()
    with pytest.raises(FailedPrecondition, match="donated"):
        donated.to_host_buffer()
    view = np.from_dlpack(out)
    np.testing.assert_array_equal(view, np.full(8, 2, np.float32))
    with pytest.raises(FailedPrecondition, match="external reference"):
        out.delete()
    del view
    out.delete()
    assert out.is_deleted()


def test_results_that_are_inputs_constants_or_repeated_get_storage_of_their_own(client):
    # numba_cpu's programs promise fresh results and the runtime does not check them (see
    # ``fresh_results``): the generated code itself must copy these.
    text = ("func.func @main(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,"
            " tensor<f32>, tensor<f32>) {\n"
            "  %c = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>\n"
            "  %s = stablehlo.constant dense<7.0> : tensor<f32>\n"
            "  %d = stablehlo.add %a, %a : tensor<4xf32>\n"
            "  return %a, %c, %d, %d, %s, %s : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,"
            " tensor<f32>, tensor<f32>\n}\n")
    exe = client.compile(Program(text))
    assert exe.unwrapped.get_executable().program.fresh_results
    a = client.buffer_from_host_buffer(np.arange(4, dtype=np.float32)).buffer
    runs = [exe.execute([[a]]).outputs[0] for _ in range(2)]
    pointers = [b.unsafe_pointer() for outs in runs for b in outs] + [a.unsafe_pointer()]
    assert len(set(pointers)) == len(pointers)
    for outs in runs:
        hosts = []
        for b in outs:
            host = b.to_host_buffer()
            host.event.await_(30)
            hosts.append(host.array)
        assert [h.tolist() for h in hosts] == [[0, 1, 2, 3], [1, 2, 3, 4], [0, 2, 4, 6], [0, 2, 4, 6], 7.0, 7.0]
