"""Fixtures of the host runtime's tests: an Api over the mini compiler, and clients of it."""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pytest
from .cpu_runtime_minihlo import MiniCompiler

from pjrt_hub.abi import HostBufferSemantics, Program
from pjrt_hub.backends.cpu_runtime import CpuApi, CpuBuffer, CpuClient, CpuLoadedExecutable


@pytest.fixture
def compiler() -> MiniCompiler:
    return MiniCompiler()


@pytest.fixture
def api(compiler: MiniCompiler) -> CpuApi:
    return CpuApi(compiler, api_version="0.105",
                  attributes={"xla_version": 2, "stablehlo_current_version": [1, 9, 0],
                              "stablehlo_minimum_version": [0, 9, 0]})


@pytest.fixture
def client(api: CpuApi) -> Iterator[CpuClient]:
    client = api.client_create()
    yield client
    client.destroy()


@pytest.fixture
def async_client(compiler: MiniCompiler) -> Iterator[CpuClient]:
    """A client that runs every program on the device workers (no inline fast path)."""
    from pjrt_hub.backends.cpu_runtime import InlinePolicy

    client = CpuApi(compiler, inline_policy=InlinePolicy(max_flops=-1)).client_create()
    yield client
    client.destroy()


@pytest.fixture
def put(client: CpuClient) -> Callable[..., CpuBuffer]:
    """``put(array, device=0, semantics=copy)``: a buffer of ``client`` holding ``array``."""

    def put(array, device: int = 0, semantics=HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
            on: CpuClient | None = None) -> CpuBuffer:
        target = on or client
        return target.buffer_from_host_buffer(np.asarray(array), device=target.devices()[device],
                                              semantics=semantics).buffer

    return put


@pytest.fixture
def compile_text(client: CpuClient) -> Callable[..., CpuLoadedExecutable]:
    def compile_text(text: str, options=None, on: CpuClient | None = None) -> CpuLoadedExecutable:
        return (on or client).compile(Program(text), options)

    return compile_text
