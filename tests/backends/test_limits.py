"""Limits, not crashes: a tensor whose size cannot be counted in 64 bits is InvalidArgument at
compile time, naming the op; regions nested a thousand deep compile. The large cases compile in
a child process whose address space is capped at 4 GiB, so that an allocation attempt shows as
MemoryError instead of the clean refusal.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from pjrt_hub import PluginRegistry, RegistrySettings
from pjrt_hub.abi import CompileError, Program
from pjrt_hub.backends.stablehlo import parse_module
from pjrt_hub.backends.stablehlo.limits import check_sizes

#: Compiles the program on stdin with the plugin named in argv[1], its address space capped.
_CHILD = """
import json, resource, sys
cap = 4 << 30
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from pjrt_hub import PluginRegistry, RegistrySettings
from pjrt_hub.abi import PjrtError, Program
client = PluginRegistry(RegistrySettings.from_environment()).create_client(sys.argv[1])
try:
    client.compile(Program(sys.stdin.read()))
    print(json.dumps({"class": None}))
except MemoryError:
    print(json.dumps({"class": "MemoryError"}))
except PjrtError as exc:
    print(json.dumps({"class": type(exc).__name__, "code": exc.code.name, "message": exc.message}))
"""


def _compile_capped(plugin: str, text: str, tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PJRT_HUB_DISABLE_PLUGINS", "PJRT_HUB_PLUGINS", "PJRT_NAMES_AND_LIBRARY_PATHS")}
    env["PJRT_HUB_CACHE"] = str(tmp_path / "cache")
    done = subprocess.run([sys.executable, "-c", _CHILD, plugin], input=text, capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _broadcast(shape: str) -> str:
    return f"""func.func @main(%arg0: tensor<f32>) -> tensor<{shape}xf32> {{
  %0 = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> tensor<{shape}xf32>
  return %0 : tensor<{shape}xf32>
}}
"""


def _nested_cases(depth: int) -> str:
    head, tail = [], []
    for level in range(depth):
        pad = "  " * (level + 1)
        head.append(f'{pad}%r{level} = "stablehlo.case"(%i) ({{')
        ret = "return" if level == 0 else "stablehlo.return"
        tail.append(f"{pad}}}) : (tensor<i32>) -> tensor<f32>\n{pad}{ret} %r{level} : tensor<f32>")
    return "\n".join(["func.func @main(%i: tensor<i32>, %x: tensor<f32>) -> tensor<f32> {", *head,
                      "  " * (depth + 1) + "stablehlo.return %x : tensor<f32>", *tail[::-1], "}"]) + "\n"


PLUGINS = ["reference", pytest.param("numba_cpu", marks=pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba is not installed"))]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_an_element_count_past_int64_is_invalid(plugin, tmp_path):
    got = _compile_capped(plugin, _broadcast("4000000000x4000000000x4000000000"), tmp_path)
    assert got["code"] == "INVALID_ARGUMENT" and got["class"] == "CompileError"
    assert got["message"].startswith("stablehlo.broadcast_in_dim (%0) at line 2")
    assert "tensor<4000000000x4000000000x4000000000xf32>" in got["message"]
    assert f"has {64 * 10**27} elements" in got["message"]


def test_check_sizes_walks_region_arguments_and_results():
    text = """func.func @main(%i: tensor<i32>, %x: tensor<f32>) -> tensor<f32> {
  %0 = "stablehlo.case"(%i) ({
    %1 = stablehlo.broadcast_in_dim %x, dims = [] : (tensor<f32>) -> tensor<4000000000x4000000000x4000000000xf32>
    %2 = stablehlo.slice %1 [0:1, 0:1, 0:1] : (tensor<4000000000x4000000000x4000000000xf32>) -> tensor<1x1x1xf32>
    %3 = stablehlo.reshape %2 : (tensor<1x1x1xf32>) -> tensor<f32>
    stablehlo.return %3 : tensor<f32>
  }) : (tensor<i32>) -> tensor<f32>
  return %0 : tensor<f32>
}
"""
    with pytest.raises(CompileError, match=r"stablehlo.broadcast_in_dim \(%1\) at line 3.* in @main: its result"):
        check_sizes(parse_module(text))


def test_a_byte_size_past_int64_is_invalid():
    n = 2**62  # counts in 64 bits; its bytes (as f32) do not
    with pytest.raises(CompileError, match="bytes, more than a 64-bit size"):
        check_sizes(parse_module(_broadcast(str(n))))


@pytest.fixture
def client(request, tmp_path, monkeypatch):
    monkeypatch.setenv("PJRT_HUB_CACHE", str(tmp_path / "cache"))
    for name in ("PJRT_HUB_DISABLE_PLUGINS", "PJRT_HUB_PLUGINS", "PJRT_NAMES_AND_LIBRARY_PATHS"):
        monkeypatch.delenv(name, raising=False)
    client = PluginRegistry(RegistrySettings.from_environment()).create_client(request.param)
    yield client
    client.destroy()


@pytest.mark.parametrize("client", ["reference"], indirect=True)
def test_a_thousand_nested_cases_compile(client):
    # Deeper than Python's default recursion limit in every recursive walk of the regions (the
    # reference's analyses after its front end walked them unprotected). numba_cpu compiles it
    # too, in minutes: not a test for every CI run.
    executable = client.compile(Program(_nested_cases(1000)))
    assert executable.get_executable().num_outputs() == 1
