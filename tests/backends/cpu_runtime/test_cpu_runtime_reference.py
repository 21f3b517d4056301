"""The runtime with the reference interpreter: every public corpus program, end to end.

Runs only where ``pjrt_hub.backends.reference.compiler.ReferenceCompiler`` exists (it is built
on its own branch); each program is compiled through ``Client.compile``, its inputs uploaded,
executed on the inline path and on the device workers, and compared with the corpus outputs.
"""

from __future__ import annotations

import pytest

from pjrt_hub.abi import Program
from pjrt_hub.backends.cpu_runtime import CpuApi, InlinePolicy

from ...corpus import assert_output, program_text, public_arrays, public_programs

reference = pytest.importorskip("pjrt_hub.backends.reference.compiler")

PROGRAMS = {entry["name"]: entry for entry in public_programs()}


@pytest.fixture(scope="module", params=["inline", "workers"])
def reference_client(request):
    policy = InlinePolicy() if request.param == "inline" else InlinePolicy(max_flops=-1)
    client = CpuApi(reference.ReferenceCompiler(), inline_policy=policy).client_create({"num_devices": 2})
    yield client
    client.destroy()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_program_runs_on_the_runtime(reference_client, name):
    entry = PROGRAMS[name]
    inputs, expected = public_arrays(entry)
    executable = reference_client.compile(Program(program_text("public", entry)))
    device = reference_client.devices()[1]
    arguments = [reference_client.buffer_from_host_buffer(array, device=device).buffer for array in inputs]
    outputs = executable.execute([arguments], execute_device=device).outputs[0]
    assert len(outputs) == len(entry["outputs"])
    for buffer, spec, want in zip(outputs, entry["outputs"], expected):
        host = buffer.to_host_buffer()
        host.event.await_(timeout=60)
        assert buffer.device() is device
        assert_output(host.array, want, spec, f"{name}: {spec['name']}")
