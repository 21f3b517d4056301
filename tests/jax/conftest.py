"""Real JAX driving pjrt-hub plugins: what the JAX test module registers, once, before JAX makes
its backends.

Nothing here imports JAX: the test module skips itself when JAX is not installed (``pip install
-e '.[test,jax]'`` brings it), and only then calls :func:`register_all`. Besides
numba_cpu (4 devices) and the reference interpreter, two hand-made plugins are served: ``faulty``,
the reference interpreter whose programs fail at run time when an input holds a negative number
(how an error raised inside a program reaches a JAX user), and ``with_layouts``, the reference
interpreter with the Layouts and MemoryDescriptions extensions (what JAX asks of them).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from pjrt_hub import PluginRegistry, RegistrySettings
from pjrt_hub.abi import FRAMEWORK_VERSION, CompileOptions, ExecutionError, PluginDeclaration, hookimpl

NUMBA = "numba_cpu"
REFERENCE = "reference"
FAULTY = "faulty"
WITH_LAYOUTS = "with_layouts"


class _FaultyProgram:
    """A reference program that refuses negative inputs when it runs (an execution error)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        for name in ("name", "inputs", "outputs", "aliases", "fingerprint"):
            setattr(self, name, getattr(inner, name))

    def run(self, args: Sequence[np.ndarray], out: Any = None) -> list[np.ndarray]:
        for i, array in enumerate(args):
            if np.any(np.asarray(array) < 0):
                raise ExecutionError(f"faulty: argument {i} holds a negative number")
        return self._inner.run(args, out)

    def cost_analysis(self) -> Any:
        return self._inner.cost_analysis()

    def serialize(self) -> bytes:
        return self._inner.serialize()


class _FaultyCompiler:
    name = "faulty"

    def __init__(self) -> None:
        from pjrt_hub.backends.reference import ReferenceCompiler

        self._inner = ReferenceCompiler()

    def compile(self, code: str | bytes, options: CompileOptions) -> _FaultyProgram:
        return _FaultyProgram(self._inner.compile(code, options))

    def deserialize(self, data: bytes) -> _FaultyProgram:
        return _FaultyProgram(self._inner.deserialize(data))


class _FaultyPlugin:
    @hookimpl
    def pjrt_hub_declare(self) -> PluginDeclaration:
        return PluginDeclaration(api_version=str(FRAMEWORK_VERSION), platform_name="faulty",
                                 description="the reference interpreter, failing on negative inputs")

    @hookimpl
    def pjrt_hub_get_api(self) -> Any:
        from pjrt_hub.backends.cpu_runtime import CpuApi
        from pjrt_hub.backends.cpu_runtime.builtin import STABLEHLO_ATTRIBUTES

        return CpuApi(_FaultyCompiler(), platform_name="faulty", api_version=FRAMEWORK_VERSION,
                      attributes=dict(STABLEHLO_ATTRIBUTES), num_devices=1)


class _Layouts:
    """The Layouts extension (version 3) of a host-memory plugin: dense row-major everywhere."""

    @staticmethod
    def _row_major(rank: int) -> Any:
        from pjrt_hub.extensions import MemoryLayout

        return MemoryLayout(tuple(range(rank - 1, -1, -1)))

    def buffer_memory_layout(self, buffer: Any) -> Any:
        return self._row_major(len(buffer.dimensions()))

    def client_default_layout(self, client: Any, element_type: Any, dims: Sequence[int]) -> Any:
        return self._row_major(len(dims))

    def executable_output_layouts(self, executable: Any) -> list[Any]:
        return [self._row_major(len(d)) for d in executable.output_dimensions()]

    def executable_parameter_layouts(self, executable: Any) -> list[Any]:
        return [self._row_major(len(spec.shape)) for spec in executable.program.inputs]


class _MemoryDescriptions:
    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        return [("device", 0), ("pinned_host", 1), ("unpinned_host", 2)]


class _WithLayoutsPlugin:
    """The reference interpreter with the Layouts and MemoryDescriptions extensions."""

    @hookimpl
    def pjrt_hub_declare(self) -> PluginDeclaration:
        return PluginDeclaration(api_version=str(FRAMEWORK_VERSION), platform_name=WITH_LAYOUTS,
                                 extensions={"Layouts": 3, "MemoryDescriptions": 1})

    @hookimpl
    def pjrt_hub_get_api(self) -> Any:
        from pjrt_hub.backends.cpu_runtime import CpuApi
        from pjrt_hub.backends.cpu_runtime.builtin import STABLEHLO_ATTRIBUTES
        from pjrt_hub.backends.reference import ReferenceCompiler

        return CpuApi(ReferenceCompiler(), platform_name=WITH_LAYOUTS, api_version=FRAMEWORK_VERSION,
                      attributes=dict(STABLEHLO_ATTRIBUTES), num_devices=1,
                      extensions={"Layouts": _Layouts(), "MemoryDescriptions": _MemoryDescriptions()})


_SERVED: dict[str, Any] = {}


def register_all() -> dict[str, Any]:
    """Register numba_cpu, reference, faulty and with_layouts with JAX (once per session: JAX reads
    its plugins when it first makes its backends); returns the served structs by backend name."""
    if _SERVED:
        return _SERVED
    import pjrt_hub.jax as pj

    served = {NUMBA: pj.register(NUMBA), REFERENCE: pj.register(REFERENCE)}
    registry = PluginRegistry(RegistrySettings(autoload=False))
    registry.register(_FaultyPlugin(), FAULTY)
    registry.register(_WithLayoutsPlugin(), WITH_LAYOUTS)
    served[FAULTY] = pj.register(FAULTY, registry=registry)
    served[WITH_LAYOUTS] = pj.register(WITH_LAYOUTS, registry=registry)
    _SERVED.update(served)
    return _SERVED
