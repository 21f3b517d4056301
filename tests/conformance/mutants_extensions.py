"""Mutant plugins for the cases read off the extension headers (pjrt_hub/testing/cases/contract_extensions.py).

One defect each, of the kinds vendors ship in their Layouts and MemoryDescriptions extensions: a
default layout that is right for matrices but not for scalars, a layout that is a view of its
buffer, executable layouts listed in the wrong order or cached by module name, a compiler that
refuses the layout_mode attributes the Layouts header announces, a memory kind listed twice or
numbered per device, and calls that describe whatever they are given. Each is planted with the
factories of the main catalogue (``toy(...)``, ``reference(...)``); the toy's and the reference
plugin's unmodified extensions are the controls. ``pjrt-hub conformance --mutation-report
tests/conformance/mutants_extensions.py`` runs it from the command line.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from pjrt_hub.abi import ParseError
from pjrt_hub.extensions import MemoryLayout
from pjrt_hub.testing._mutation import Mutant
from pjrt_hub.testing.toy import ToyLayouts, ToyMemoryDescriptions, ToyProgram

try:
    from .mutants import BASES, _extensions, _runtime_module, reference, toy
except ImportError:  # loaded as a plain file by the CLI: the main catalogue is its neighbour
    _path = Path(__file__).with_name("mutants.py")
    _spec = importlib.util.spec_from_file_location("pjrt_hub_mutants_main_catalogue", _path)
    assert _spec is not None and _spec.loader is not None, _path
    _main = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _main
    _spec.loader.exec_module(_main)
    BASES, _extensions, _runtime_module, reference, toy = (
        _main.BASES, _main._extensions, _main._runtime_module, _main.reference, _main.toy)

__all__ = ["BASES", "MUTANTS"]


# -- Layouts ---------------------------------------------------------------------------------------


class _ScalarAsVector(ToyLayouts):
    """Builds the default layout as if every array had at least one dimension."""

    def client_default_layout(self, client: Any, element_type: Any, dims: Sequence[int]) -> MemoryLayout:
        ToyLayouts.client_default_layout(self, client, element_type, dims)
        return MemoryLayout(tuple(reversed(range(max(len(dims), 1)))))


class _LiveLayout(MemoryLayout):
    """A layout that reads its buffer's shape whenever it is looked at."""

    __slots__ = ("_buffer",)

    def __init__(self, buffer: Any) -> None:
        object.__setattr__(self, "_buffer", buffer)

    @property  # type: ignore[override]  # the defect: a property where the value should be
    def minor_to_major(self) -> tuple[int, ...]:
        return tuple(reversed(range(self._buffer._live("Layouts.buffer_memory_layout").ndim)))

    @property  # type: ignore[override]
    def tiles(self) -> tuple[tuple[int, ...], ...]:
        return ()


class _LayoutViewsItsBuffer(ToyLayouts):
    def buffer_memory_layout(self, buffer: Any) -> MemoryLayout:
        return _LiveLayout(getattr(buffer, "unwrapped", buffer))


class _UncheckedDefaultLayout(ToyLayouts):
    """Answers for any element type and any dimensions, negative ones included."""

    def client_default_layout(self, client: Any, element_type: Any, dims: Sequence[int]) -> MemoryLayout:
        return MemoryLayout(tuple(reversed(range(len(dims)))))


def _cpu_layouts() -> Any:
    return _runtime_module("_extensions").CpuLayouts


_OUTPUT_LAYOUTS = _cpu_layouts().executable_output_layouts


def _output_layouts_reversed(self: Any, executable: Any) -> list[MemoryLayout]:
    return list(reversed(_OUTPUT_LAYOUTS(self, executable)))


def _output_layouts_cached_by_name() -> Callable[[Any, Any], list[MemoryLayout]]:
    """The first program compiled under a module name gives its layouts to every later one."""
    cache: dict[str, list[MemoryLayout]] = {}

    def layouts(self: Any, executable: Any) -> list[MemoryLayout]:
        target = getattr(executable, "unwrapped", executable)
        name = target.get_executable().name() if hasattr(target, "get_executable") else target.name()
        if name not in cache:
            cache[name] = _OUTPUT_LAYOUTS(self, executable)
        return list(cache[name])

    return layouts


_ARGUMENT_ATTRIBUTES = re.compile(r"%[\w#]+\s*:\s*tensor<[^>]*>\s*\{([^}]*)\}")


def _arguments_with_known_attributes_only(self: ToyProgram, text: str) -> None:
    """A parser that knows JAX's donation marker and refuses every other argument attribute."""
    for attributes in _ARGUMENT_ATTRIBUTES.findall(text):
        names = {entry.split("=")[0].strip() for entry in attributes.split(",") if entry.strip()}
        unknown = sorted(names - {"tf.aliasing_output"})
        if unknown:
            raise ParseError(f"unknown argument attribute(s) {unknown} on @main")
    ToyProgram.__init__(self, text)


# -- MemoryDescriptions ------------------------------------------------------------------------------


class _DefaultDescribedTwice(ToyMemoryDescriptions):
    """Lists the default memory, then every memory, the default among them."""

    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        every = ToyMemoryDescriptions.memory_descriptions(self, device_description)
        return [every[0], *every]


class _KindIdsPerDevice(ToyMemoryDescriptions):
    """Numbers each device's kinds from the device's id (the memory's id mistaken for the kind's)."""

    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        every = ToyMemoryDescriptions.memory_descriptions(self, device_description)
        first = 2 * getattr(device_description, "unwrapped", device_description).id()
        return [(kind, first + index) for index, (kind, _) in enumerate(every)]


class _DescribesAnything(ToyMemoryDescriptions):
    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        return [("device", 0), ("pinned_host", 1)]


MUTANTS: list[Mutant] = [
    Mutant("default_layout_scalar_as_vector", "extensions", "Layouts.client_default_layout gives a scalar the "
           "one-dimensional layout (0,), while scalar buffers have ()",
           ("extensions/default_layout_is_every_new_buffers",),
           toy(api={"extensions": _extensions(Layouts=_ScalarAsVector())})),
    Mutant("buffer_layout_views_its_buffer", "extensions", "Layouts.buffer_memory_layout returns a view that reads "
           "the buffer when looked at, which fails once the buffer is deleted",
           ("extensions/buffer_layout_outlives_its_buffer",),
           toy(api={"extensions": _extensions(Layouts=_LayoutViewsItsBuffer())})),
    Mutant("default_layout_unchecked", "extensions", "Layouts.client_default_layout answers for negative dimensions "
           "and for element types that are no PJRT_Buffer_Type",
           ("extensions/layouts_refuse_what_they_cannot_describe",),
           toy(api={"extensions": _extensions(Layouts=_UncheckedDefaultLayout())})),
    Mutant("output_layouts_reversed", "extensions", "Layouts.executable_output_layouts lists the outputs last to "
           "first", ("extensions/executable_layouts_are_their_own_and_stay",),
           reference((_cpu_layouts(), "executable_output_layouts", _output_layouts_reversed)), base="reference"),
    Mutant("output_layouts_cached_by_module_name", "extensions", "Layouts.executable_output_layouts caches by module "
           "name: a second program named like the first gets the first's layouts",
           ("extensions/executable_layouts_are_their_own_and_stay",),
           reference((_cpu_layouts(), "executable_output_layouts", _output_layouts_cached_by_name())),
           base="reference"),
    Mutant("layout_mode_attribute_refused", "extensions", "offers Layouts, but the compiler refuses every argument "
           "attribute but tf.aliasing_output, mhlo.layout_mode included",
           ("extensions/layout_mode_default_programs_run",),
           toy(program={"__init__": _arguments_with_known_attributes_only})),
    Mutant("memory_kind_described_twice", "extensions", "MemoryDescriptions lists the default memory first and then "
           "again among all memories", ("extensions/memory_descriptions_name_each_kind_once",),
           toy(api={"extensions": _extensions(MemoryDescriptions=_DefaultDescribedTwice())})),
    Mutant("memory_kind_ids_per_device", "extensions", "MemoryDescriptions numbers the kinds per device, so one kind "
           "has another id on each device", ("extensions/memory_descriptions_name_each_kind_once",),
           toy(api={"extensions": _extensions(MemoryDescriptions=_KindIdsPerDevice())})),
    Mutant("memory_descriptions_of_anything", "extensions", "MemoryDescriptions describes whatever it is given, a "
           "device or the client as well as a device description",
           ("extensions/memory_descriptions_refuse_other_objects",),
           toy(api={"extensions": _extensions(MemoryDescriptions=_DescribesAnything())})),
]
