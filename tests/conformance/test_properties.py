"""The properties group (pjrt_hub/testing/cases/properties.py): its cases pass the plugins pjrt-hub
ships and the toy, fail plugins that carry one defect that generated inputs or the comparison with
the reference plugin bring out, report a minimal reproducer, and give the same verdict on every run.

The mutants are the toy or the reference plugin with one defect each (the factories of
tests/conformance/mutants.py). A defect planted in the reference plugin's runtime is in the
oracle too (both are that runtime): those mutants are killed by what PJRT promises whatever the
oracle says, which the cases check on the plugin by itself.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from typing import Any

import numpy as np
import pytest

from pjrt_hub.abi import HostTransfer, InvalidArgument, PjrtError, ToHost
from pjrt_hub.testing import CASES
from pjrt_hub.testing._mutation import Base, Mutant, run_control, run_mutant
from pjrt_hub.testing.toy import ToyBuffer, ToyClient, ToyEvent, ToyLoadedExecutable, ToyPlugin

from .mutants import reference, toy

PROPERTIES = tuple(sorted(c for c in CASES if c.startswith("properties/")))

# -- defects -----------------------------------------------------------------------------------


def _to_host_hands_out_storage(self: ToyBuffer, dst: np.ndarray | None = None) -> ToHost:
    """ToHostBuffer into a new array returns the buffer's own array: the caller's writes reach it."""
    if dst is not None:
        return ToyBuffer.to_host_buffer(self, dst)
    return ToHost(self._live("PJRT_Buffer_ToHostBuffer"), ToyEvent())


def _swaps_bytes_in_place(self: ToyClient, array: Any, **kwargs: Any) -> HostTransfer:
    """A host array in the other byte order is converted where it lies, in the caller's memory."""
    array = np.asarray(array)
    if not array.dtype.isnative:
        array.byteswap(inplace=True)
        array = array.view(array.dtype.newbyteorder("="))
    return ToyClient.buffer_from_host_buffer(self, array, **kwargs)


def _reads_memory_order(self: ToyClient, array: Any, **kwargs: Any) -> HostTransfer:
    """The elements are taken in the order they lie in memory, as a plugin that reads the data
    pointer and the dimensions but not the byte strides does."""
    array = np.asarray(array)
    return ToyClient.buffer_from_host_buffer(self, array.ravel(order="K").reshape(array.shape), **kwargs)


def _ignores_non_donatable_indices(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                   execute_device: Any = None) -> Any:
    """ExecuteOptions.non_donatable_input_indices is not read: a kept input is consumed anyway."""
    return ToyLoadedExecutable.execute(self, argument_lists, None, execute_device)


def _refused_execution_still_donates(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                                     execute_device: Any = None) -> Any:
    """An execution refused for a bad argument has already consumed the inputs it donates."""
    try:
        return ToyLoadedExecutable.execute(self, argument_lists, options, execute_device)
    except PjrtError:
        kept = getattr(options, "non_donatable_input_indices", ())
        for arguments in argument_lists:
            for index in self.executable.program.aliases.values():
                if index < len(arguments) and index not in kept:
                    arguments[index].delete()
        raise


def _staged_arguments(self: ToyLoadedExecutable, argument_lists: Any, options: Any = None,
                      execute_device: Any = None) -> Any:
    """The arguments wait in an attribute of the executable until the launch reads them: a
    caller on another thread overwrites them in between."""
    self.staged = argument_lists
    time.sleep(0.002)
    return ToyLoadedExecutable.execute(self, self.staged, options, execute_device)


def _checks_only_the_size(self: ToyBuffer, dst: np.ndarray | None = None) -> ToHost:
    """ToHostBuffer into the caller's array checks its size in bytes only (all the C API passes)."""
    array = self._live("PJRT_Buffer_ToHostBuffer")
    if dst is None:
        return ToHost(array.copy(), ToyEvent())
    if dst.nbytes != array.nbytes:
        raise InvalidArgument(f"PJRT_Buffer_ToHostBuffer: the destination has {dst.nbytes} bytes, the buffer "
                              f"{array.nbytes}")
    dst.reshape(-1).view(np.uint8)[...] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return ToHost(dst, ToyEvent())


def _saturating_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu":
        return np.add(a, b)
    info = np.iinfo(a.dtype)
    return np.clip(a.astype(object) + b.astype(object), int(info.min), int(info.max)).astype(a.dtype)


def _copy_shares_storage(self: Any, memory: Any, action: str) -> Any:
    """CpuBuffer._copy_to of a ready buffer without the copy: the new buffer has the source's
    array, which a donation of the source then overwrites in place."""
    buffers = importlib.import_module("pjrt_hub.backends.cpu_runtime._buffers")
    array = self._array
    if array is None:
        return _COPY_TO(self, memory, action)
    with memory._device._client._lock:
        memory._alloc(self._layout.nbytes)
    return buffers.CpuBuffer._make(memory, self._layout, array, buffers.READY, self._layout.nbytes, True)


_CPU_BUFFER = importlib.import_module("pjrt_hub.backends.cpu_runtime._buffers").CpuBuffer
_COPY_TO = _CPU_BUFFER._copy_to


def _mutant(name: str, description: str, kills: str, build: Any, base: str = "toy") -> Mutant:
    return Mutant(name, "properties", description, (f"properties/{kills}",), build, base=base)


MUTANTS = (
    _mutant("to_host_hands_out_storage", "PJRT_Buffer_ToHostBuffer returns the buffer's memory instead of a copy",
            "host_round_trip", toy(buffer={"to_host_buffer": _to_host_hands_out_storage})),
    _mutant("put_swaps_bytes_in_place", "PJRT_Client_BufferFromHostBuffer converts a host array of the other byte "
            "order in the caller's memory", "host_round_trip",
            toy(client={"buffer_from_host_buffer": _swaps_bytes_in_place})),
    _mutant("put_reads_memory_order", "PJRT_Client_BufferFromHostBuffer ignores the byte strides and takes the "
            "elements in memory order", "host_round_trip",
            toy(client={"buffer_from_host_buffer": _reads_memory_order})),
    _mutant("non_donatable_inputs_consumed", "an input listed in non_donatable_input_indices is donated anyway",
            "elementwise_programs", toy(loaded={"execute": _ignores_non_donatable_indices})),
    _mutant("refused_execution_donates", "an execution refused for a bad argument still consumes the inputs it "
            "donates", "buffer_sequences", toy(loaded={"execute": _refused_execution_still_donates})),
    _mutant("concurrent_executes_share_arguments", "concurrent executions of one executable read each other's "
            "arguments", "concurrent_executes", toy(loaded={"execute": _staged_arguments})),
    _mutant("destination_checked_by_size", "PJRT_Buffer_ToHostBuffer fills a caller's array of another shape or "
            "type if its size in bytes matches", "to_host_destination",
            toy(buffer={"to_host_buffer": _checks_only_the_size})),
    _mutant("integer_add_saturates", "integer add saturates instead of wrapping around", "elementwise_programs",
            toy(ops={"add": _saturating_add})),
    _mutant("copy_shares_storage", "PJRT_Buffer_CopyToDevice and CopyToMemory give the source's memory instead of a "
            "copy (in the reference runtime, the oracle's too)", "copies",
            reference((_CPU_BUFFER, "_copy_to", _copy_shares_storage)), base="reference"),
)

BASES = (
    Base("toy", lambda: contextlib.nullcontext(ToyPlugin())),
    Base("reference", lambda: contextlib.nullcontext(importlib.import_module("pjrt_hub.backends.reference.plugin"))),
)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_properties_fail_the_mutant(mutant):
    result = run_mutant(mutant)
    assert result.killed, f"{mutant.name} ({mutant.description}) survived: {result.missed}"
    (message,) = result.failed.values()
    # The message names what differs and the minimal input Hypothesis found.
    assert "PJRT_" in message and "Minimal input (Hypothesis, derandomized): " in message


@pytest.mark.parametrize("base", BASES, ids=[b.name for b in BASES])
def test_the_unmodified_plugins_pass_the_properties(base):
    control = run_control(base, PROPERTIES)
    assert control.cases_run == len(PROPERTIES) >= 6 and control.failed == {}


@pytest.mark.parametrize("name", ["reference", "numba_cpu"])
def test_the_builtin_plugins_pass_the_properties_quickly(run_cases, name):
    if name == "numba_cpu":
        pytest.importorskip("numba")
    started = time.perf_counter()
    results = run_cases(name, ("properties/*",))
    elapsed = time.perf_counter() - started
    assert {k: v for k, v in results.items() if v[0] != "passed"} == {}
    assert set(results) == set(PROPERTIES)
    # Bounded: a few dozen examples per property. The bound is loose (the machine may be busy);
    # an unbounded exploration would take minutes.
    assert elapsed < 60


def test_a_failure_is_the_same_on_every_run_and_writes_nothing(tmp_path, monkeypatch):
    """Derandomized: the same examples, the same shrunk input, the same message; and no example
    database where the suite runs."""
    monkeypatch.chdir(tmp_path)
    mutant = next(m for m in MUTANTS if m.name == "put_reads_memory_order")
    first, second = run_mutant(mutant), run_mutant(mutant)
    assert first.failed == second.failed and first.failed
    assert list(tmp_path.iterdir()) == []


def test_without_the_oracle_the_properties_are_skipped_saying_why(monkeypatch):
    """The oracle is reached through discovery: with the reference plugin blocked by the
    environment there is nothing to compare with."""
    from pjrt_hub.testing._mutation import run_cases_on

    monkeypatch.setenv("PJRT_HUB_DISABLE_PLUGINS", "reference")
    results = run_cases_on(ToyPlugin(), "toy", ("properties/*",))
    assert set(results) == set(PROPERTIES)
    assert all(outcome == "skipped" and "the oracle of the properties, plugin reference, cannot be used: blocked"
               in message for outcome, message in results.values())
