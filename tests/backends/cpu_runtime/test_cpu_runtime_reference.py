"""The runtime with the reference interpreter: every public corpus program, end to end.

Runs only where ``pjrt_hub.backends.reference.compiler.ReferenceCompiler`` exists (it is built
on its own branch); each program is compiled through ``Client.compile``, its inputs uploaded,
executed on the inline path and on the device workers, and compared with the corpus outputs.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from pjrt_hub.abi import Program
from pjrt_hub.backends.cpu_runtime import CpuApi, InlinePolicy

reference = pytest.importorskip("pjrt_hub.backends.reference.compiler")

CORPUS = resources.files("pjrt_hub") / "data" / "corpus" / "public"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
PROGRAMS = {entry["name"]: entry for entry in MANIFEST["programs"]}


@pytest.fixture(scope="module", params=["inline", "workers"])
def reference_client(request):
    policy = InlinePolicy() if request.param == "inline" else InlinePolicy(max_flops=-1)
    client = CpuApi(reference.ReferenceCompiler(), inline_policy=policy).client_create({"num_devices": 2})
    yield client
    client.destroy()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_program_runs_on_the_runtime(reference_client, name):
    entry = PROGRAMS[name]
    data = np.load(str(CORPUS / entry["data"]))
    executable = reference_client.compile(Program((CORPUS / entry["file"]).read_text()))
    device = reference_client.devices()[1]
    arguments = [reference_client.buffer_from_host_buffer(data[spec["name"]], device=device).buffer
                 for spec in entry["inputs"]]
    outputs = executable.execute([arguments], execute_device=device).outputs[0]
    assert len(outputs) == len(entry["outputs"])
    for buffer, spec in zip(outputs, entry["outputs"]):
        host = buffer.to_host_buffer()
        host.event.await_(timeout=60)
        assert buffer.device() is device
        expected = data[spec["name"]]
        if expected.dtype.kind in "biu":
            np.testing.assert_array_equal(host.array, expected, err_msg=f"{name}: {spec['name']}")
        else:
            np.testing.assert_allclose(host.array, expected, rtol=spec["rtol"], atol=spec["atol"],
                                       err_msg=f"{name}: {spec['name']}")
