"""Run one StableHLO program on one plugin: the engine of ``pjrt-hub run`` (and of ``bench``).

The contract of ``run``: the arguments of ``@main`` are ``in0..inN`` of an ``.npz`` file, in
order; the results are written as ``out0..outM``. Inputs are checked against ``@main``'s
signature before the plugin sees them, so a wrong count, shape or dtype gets the same clear
message on every plugin, C plugins included.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pjrt_hub.abi import CompileOptions, PjrtHubError, Program

__all__ = ["BadInput", "RunResult", "check_inputs", "host_array", "load_inputs", "main_signature", "npz_array",
           "run_program"]

_INPUT_KEY = re.compile(r"in(\d+)")
#: Expected outputs may ride along in the same file (the corpus's .npz files do).
_OUTPUT_KEY = re.compile(r"out\d+")


class BadInput(PjrtHubError):
    """The program or its inputs are wrong (what ``pjrt-hub run`` exits 3 for)."""


def load_inputs(path: str | Path) -> list[np.ndarray]:
    """Read ``in0..inN`` from an ``.npz`` file, in order."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise BadInput(f"input file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read inputs from {path}: {exc}") from None
    indices = {}
    for key in arrays:
        match = _INPUT_KEY.fullmatch(key)
        if match is None and _OUTPUT_KEY.fullmatch(key):
            continue
        if match is None:
            raise BadInput(f"{path}: unexpected array {key!r}; inputs must be named in0, in1, ...")
        indices[int(match.group(1))] = key
    missing = [i for i in range(len(indices)) if i not in indices]
    if missing:
        raise BadInput(f"{path}: inputs must be in0..in{len(indices) - 1} without gaps; "
                       f"missing {', '.join(f'in{i}' for i in missing)}")
    return [arrays[indices[i]] for i in range(len(indices))]


def main_signature(text: str) -> list[tuple[tuple[int, ...], np.dtype]] | None:
    """Shapes and dtypes of ``@main``'s arguments, or None if the shared parser cannot tell.

    The plugin stays the judge of the program: a text the shared parser does not read is still
    handed to the plugin as it is.
    """
    try:
        from pjrt_hub.backends.stablehlo import parse_module
    except ImportError:
        return None
    try:
        main = parse_module(text).main
        return [(tuple(t.shape), t.dtype) for t in main.arg_types]
    except Exception:  # noqa: BLE001 - any parser failure just means "no pre-check"
        return None


def _spell(shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


def check_inputs(signature: Sequence[tuple[tuple[int, ...], np.dtype]],
                 arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The arrays as ``@main``'s arguments (see :func:`as_argument`); BadInput names the first
    argument whose count, shape or dtype is wrong."""
    if len(arrays) != len(signature):
        raise BadInput(f"@main takes {len(signature)} arguments but {len(arrays)} inputs were given "
                       f"(in0..in{len(arrays) - 1})")
    converted = []
    for i, ((shape, dtype), array) in enumerate(zip(signature, arrays)):
        argument = as_argument(array, dtype)
        if argument is None or argument.shape != shape:
            raise BadInput(f"input in{i}: @main expects {_spell(shape, dtype)}, got "
                           f"{_spell(np.shape(array), np.asarray(array).dtype)}"
                           + _bits_hint(dtype))
        converted.append(argument)
    return converted


# -- arrays in and out ---------------------------------------------------------------------------
#
# An .npz cannot name the ml_dtypes element types (bfloat16, the 8-bit floats, int4...): np.savez
# writes them as raw void (``V2``), and numpy cannot even spell them. So `run` takes such an
# argument either as the ml_dtypes array itself or as unsigned integers of the same width holding
# its bits (uint16 for bfloat16, uint8 for the 8-bit floats and for int4/uint4, which ml_dtypes
# stores one per byte), and `run --out` writes such a result as those unsigned bits: an output
# file can be fed back as an input file, and ``out.view(ml_dtypes.bfloat16)`` reads it.


def _is_ml_dtype(dtype: np.dtype) -> bool:
    """bfloat16, the 8-bit floats, int4... : numpy dtypes that ml_dtypes adds."""
    return dtype.type.__module__.startswith("ml_dtypes")


def _bits_hint(dtype: np.dtype) -> str:
    if not _is_ml_dtype(dtype):
        return ""
    return f" (an .npz carries {dtype} as its bits: give uint{dtype.itemsize * 8})"


def host_array(array: Any) -> np.ndarray:
    """``array`` as a C-contiguous, aligned, native-byte-order ndarray of the same shape.

    Unlike ``np.ascontiguousarray`` it keeps 0-d arrays 0-d (a numpy scalar ``np.float32(2)``
    is a ``f32[]`` argument, not ``f32[1]``), and copies only when it must (negative strides,
    views with gaps, big-endian data, unaligned memory)."""
    a = np.asarray(array)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not (a.flags.c_contiguous and a.flags.aligned):
        a = np.array(a, order="C", copy=True)
    return a


def as_argument(array: Any, dtype: np.dtype) -> np.ndarray | None:
    """``array`` made ready to be an argument of element type ``dtype`` (see :func:`host_array`),
    or None if its dtype does not fit. Byte order does not matter; an ml_dtypes type also
    accepts unsigned integers (or raw void, as np.savez writes it) of its width as its bits."""
    a = host_array(array)
    if a.dtype == dtype:
        return a
    if _is_ml_dtype(dtype) and a.dtype.kind in "uV" and a.dtype.itemsize == dtype.itemsize:
        return a.view(dtype)
    return None


def npz_array(array: np.ndarray) -> np.ndarray:
    """A result as ``run --out`` writes it: ml_dtypes types as their unsigned bits."""
    if _is_ml_dtype(array.dtype):
        return host_array(array).view(f"u{array.dtype.itemsize}")
    return array


@dataclass(frozen=True)
class RunResult:
    outputs: list[np.ndarray]
    compile_seconds: float
    execute_seconds: float


def run_program(client: Any, text: str, arrays: Sequence[np.ndarray], *,
                options: CompileOptions | None = None, timeout: float | None = None) -> RunResult:
    """Compile ``text`` on ``client``, run it on ``arrays`` on the first device, return host arrays."""
    t0 = time.perf_counter()
    executable = client.compile(Program(text, "mlir"), options or CompileOptions())
    t1 = time.perf_counter()
    try:
        device = client.addressable_devices()[0]
        buffers = []
        for array in arrays:
            transfer = client.buffer_from_host_buffer(host_array(array), device=device)
            transfer.done_with_host_buffer.await_(timeout)
            buffers.append(transfer.buffer)
        t2 = time.perf_counter()
        result = executable.execute([buffers])
        for event in result.device_complete_events:
            event.await_(timeout)
        outputs = []
        for buffer in result.outputs[0]:
            host = buffer.to_host_buffer()
            host.event.await_(timeout)
            outputs.append(host.array)
        t3 = time.perf_counter()
        for buffer in [*buffers, *result.outputs[0]]:
            buffer.destroy()
    finally:
        executable.destroy()
    return RunResult(outputs, t1 - t0, t3 - t2)
