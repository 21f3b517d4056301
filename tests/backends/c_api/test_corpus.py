"""The public corpus (StableHLO as JAX emits it) through the bridge on xla-cpu-pjrt 0.81, checked
against the manifest's expected outputs and tolerances."""

from __future__ import annotations

import pytest

from pjrt_hub.abi import Program

from ...corpus import assert_output, program_text, public_arrays, public_programs

pytestmark = pytest.mark.real_plugin

_PROGRAMS = public_programs()


@pytest.mark.parametrize("entry", _PROGRAMS, ids=[p["name"] for p in _PROGRAMS])
def test_corpus_program(client, entry):
    exe = client.compile(Program(program_text("public", entry)))
    inputs, expected = public_arrays(entry)
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
        assert_output(fetched.array, want, spec, f"{entry['name']}: {spec['name']}")
