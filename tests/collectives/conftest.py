from __future__ import annotations

import pytest

from pjrt_hub.backends.cpu_runtime import CpuApi


@pytest.fixture(scope="session", params=["reference", "numba_cpu"])
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def api(backend):
    if backend == "reference":
        from pjrt_hub.backends.reference import ReferenceCompiler

        return CpuApi(ReferenceCompiler())
    from pjrt_hub.backends.numba_cpu.compiler import NumbaCompiler

    return CpuApi(NumbaCompiler())


@pytest.fixture(scope="session")
def client(api):
    return api.client_create({"num_devices": 4, "collective_timeout": 20})
