"""The extensions of the host-memory runtime: Layouts and MemoryDescriptions, as XLA's CPU plugin.

XLA's CPU plugin offers Layouts, MemoryDescriptions, FFI and PhaseCompile (and, from 0.106,
Shardings). This runtime offers the two whose answers it can make true:

* **Layouts** (version 3, the node XLA's CPU plugin ships from 0.106): every array this runtime
  holds is dense and row-major. Host arrays are aliased only when C-contiguous and copied into C
  order otherwise; DLPack views must be C-contiguous; copies are C order; execution results that
  are not C-contiguous are copied into C order before they become buffers
  (``CpuLoadedExecutable._run_program``). So every layout, of a buffer, a client's or topology's
  default, or an executable's parameters and outputs, is the row-major one: ``minor_to_major``
  ``(rank-1, ..., 1, 0)`` without tiles, which is what XLA's CPU client reports (``{1,0}``).
* **MemoryDescriptions** (version 1): the kinds of a device's memories, with their ids, the
  default first, read from a device description without a client; the same kinds a client's
  device then has (``device``, ``pinned_host``, ``unpinned_host``).

FFI is left out: the compilers have no custom calls, so a registered handler could never run, and
an extension that accepts handlers it cannot call would lie. PhaseCompile and Shardings have no
protocol in :mod:`pjrt_hub.extensions`.

Arguments may come through the host's version gate, which hands the plugin's own object over as
``unwrapped``; anything that is not this runtime's own object is an InvalidArgument naming it.
"""

from __future__ import annotations

from typing import Any, Sequence

from pjrt_hub.abi import BufferType, InvalidArgument, to_numpy_dtype
from pjrt_hub.extensions import MemoryLayout

from ._buffers import CpuBuffer
from ._client import CpuClient
from ._devices import MEMORY_KINDS
from ._executables import CpuExecutable, CpuLoadedExecutable
from ._topology import CpuDeviceDescription, CpuTopologyDescription
from .builtin import EXTENSION_VERSIONS

__all__ = ["CpuLayouts", "CpuMemoryDescriptions", "builtin_extensions", "row_major"]


def _unwrap(obj: Any) -> Any:
    return getattr(obj, "unwrapped", obj)


def row_major(rank: int) -> MemoryLayout:
    """The dense row-major layout of an array of this rank: the last dimension varies fastest."""
    return MemoryLayout(tuple(range(rank - 1, -1, -1)))


def _checked_dims(dims: Sequence[int], what: str) -> tuple[int, ...]:
    try:
        values = tuple(dims)
    except TypeError:
        raise InvalidArgument(f"{what}: dims must be a sequence of ints, got {dims!r}") from None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in values):
        raise InvalidArgument(f"{what}: dims must be non-negative ints, got {list(values)}")
    return values


def _checked_type(element_type: Any, what: str) -> BufferType:
    try:
        kind = BufferType(element_type)
    except (ValueError, TypeError):
        raise InvalidArgument(f"{what}: element_type {element_type!r} is not a PJRT_Buffer_Type") from None
    to_numpy_dtype(kind)  # InvalidArgument for a type the runtime cannot hold (INVALID, TOKEN, ...)
    return kind


def _executable(executable: Any, what: str) -> CpuExecutable:
    executable = _unwrap(executable)
    if isinstance(executable, CpuLoadedExecutable):
        executable = _unwrap(executable.get_executable())
    if not isinstance(executable, CpuExecutable):
        raise InvalidArgument(f"{what}: expected an executable of this plugin, got {executable!r}")
    return executable


class CpuLayouts:
    """Layouts, version 3: every layout is the dense row-major one (see the module docstring)."""

    version = EXTENSION_VERSIONS["Layouts"]

    def buffer_memory_layout(self, buffer: Any) -> MemoryLayout:
        """The layout of the buffer's data: row-major, also for a buffer still being computed."""
        buffer = _unwrap(buffer)
        if not isinstance(buffer, CpuBuffer):
            raise InvalidArgument(f"Layouts.buffer_memory_layout: expected a buffer of this plugin, got {buffer!r}")
        return row_major(len(buffer._layout.shape))

    def client_default_layout(self, client: Any, element_type: Any, dims: Sequence[int]) -> MemoryLayout:
        """The layout the client gives a new buffer of this element type and shape."""
        what = "Layouts.client_default_layout"
        if not isinstance(_unwrap(client), CpuClient):
            raise InvalidArgument(f"{what}: expected a client of this plugin, got {client!r}")
        _checked_type(element_type, what)
        return row_major(len(_checked_dims(dims, what)))

    def topology_default_layout(self, topology: Any, element_type: Any, dims: Sequence[int]) -> MemoryLayout:
        """The layout a program compiled for this topology gives an array (the C extension's
        ``PJRT_Layouts_PJRT_Topology_GetDefaultLayout``, which the protocol does not name)."""
        what = "Layouts.topology_default_layout"
        if not isinstance(_unwrap(topology), CpuTopologyDescription):
            raise InvalidArgument(f"{what}: expected a topology of this plugin, got {topology!r}")
        _checked_type(element_type, what)
        return row_major(len(_checked_dims(dims, what)))

    def executable_output_layouts(self, executable: Any) -> list[MemoryLayout]:
        """The layout of each output of a compiled program (a loaded one or not)."""
        compiled = _executable(executable, "Layouts.executable_output_layouts")
        return [row_major(len(layout.shape)) for layout in compiled._outputs]

    def executable_parameter_layouts(self, executable: Any) -> list[MemoryLayout]:
        """The layout each parameter of a compiled program expects."""
        compiled = _executable(executable, "Layouts.executable_parameter_layouts")
        return [row_major(len(layout.shape)) for layout in compiled._inputs]

    def __repr__(self) -> str:
        return f"<CpuLayouts version {self.version}: dense row-major>"


class CpuMemoryDescriptions:
    """MemoryDescriptions, version 1: the memory kinds every CPU device has, the default first."""

    version = EXTENSION_VERSIONS["MemoryDescriptions"]

    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        """``(kind, kind_id)`` of each memory of the device, the default one first."""
        description = _unwrap(device_description)
        if not isinstance(description, CpuDeviceDescription):
            raise InvalidArgument(f"MemoryDescriptions.memory_descriptions: expected a device description of "
                                  f"this plugin, got {description!r}")
        return list(MEMORY_KINDS.items())

    def __repr__(self) -> str:
        return f"<CpuMemoryDescriptions {', '.join(MEMORY_KINDS)}>"


def builtin_extensions() -> dict[str, Any]:
    """One implementation of each extension in :data:`EXTENSION_VERSIONS`, by name."""
    return {"Layouts": CpuLayouts(), "MemoryDescriptions": CpuMemoryDescriptions()}
