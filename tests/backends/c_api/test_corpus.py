"""The public corpus (StableHLO as JAX emits it) through the bridge on xla-cpu-pjrt 0.81, checked
against the manifest's expected outputs and tolerances."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from pjrt_hub.abi import Program

pytestmark = pytest.mark.real_plugin

_CORPUS = resources.files("pjrt_hub.data.corpus.public")
_PROGRAMS = json.loads((_CORPUS / "manifest.json").read_text())["programs"]


@pytest.mark.parametrize("entry", _PROGRAMS, ids=[p["name"] for p in _PROGRAMS])
def test_corpus_program(client, entry):
    exe = client.compile(Program((_CORPUS / entry["file"]).read_text()))
    with np.load(_CORPUS / entry["data"]) as data:
        inputs = [data[spec["name"]] for spec in entry["inputs"]]
        expected = [data[spec["name"]] for spec in entry["outputs"]]
    buffers = []
    for array in inputs:
        transfer = client.buffer_from_host_buffer(array)
        transfer.done_with_host_buffer.await_()
        buffers.append(transfer.buffer)
    result = exe.execute([buffers])
    result.device_complete_events[0].await_()
    outputs = result.outputs[0]
    assert len(outputs) == len(expected)
    for spec, buffer, want in zip(entry["outputs"], outputs, expected):
        fetched = buffer.to_host_buffer()
        fetched.event.await_()
        got = fetched.array
        assert (got.dtype, got.shape) == (want.dtype, want.shape), spec["name"]
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=spec["rtol"], atol=spec["atol"], equal_nan=False,
                                       err_msg=spec["name"])
        else:
            np.testing.assert_array_equal(got, want, err_msg=spec["name"])
