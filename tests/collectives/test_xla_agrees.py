"""The collectives conformance programs on XLA's own CPU plugin: a case XLA fails is a bug in the case."""

from __future__ import annotations

import pytest

from pjrt_hub._multi import run_on_devices
from pjrt_hub.abi import CompileOptions
from pjrt_hub.testing.cases.client import device_id
from pjrt_hub.testing.cases.collectives import compare, corpus_programs, spec_programs
from tests.real_plugins import DEFAULT_PLUGIN, real_plugin

pytestmark = pytest.mark.real_plugin


@pytest.fixture(scope="module")
def xla_client():
    from pjrt_hub.backends.c_api import load_api

    api = load_api(real_plugin(DEFAULT_PLUGIN))
    return api.client_create({"cpu_device_count": 4})


@pytest.mark.parametrize("program", spec_programs() + corpus_programs(), ids=lambda p: p.name)
def test_xla_cpu_passes_every_collectives_case(xla_client, program):
    devices = xla_client.devices()[:program.replicas]
    options = CompileOptions(num_replicas=program.replicas, device_assignment=tuple((device_id(d),) for d in devices))
    got = run_on_devices(xla_client, program.text, program.inputs, options=options, timeout=120).outputs
    errors: list[str] = []
    compare(program, got, errors.append)
    assert not errors
