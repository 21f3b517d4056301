"""The seam between the host-memory CPU runtime and the program compilers that run on it.

The runtime (devices, memories, buffers, events, executables, donation, DLPack) is the same for
every backend that keeps its arrays in host memory: numba_cpu and the reference interpreter. What
differs is how a program becomes something that runs; that is a :class:`ProgramCompiler`, and what
it returns is a :class:`CompiledProgram`.

Besides the members of the protocol, the runtime reads these optional attributes of a compiled
program when present (``getattr`` with a default, so older compilers keep working):

``num_replicas``, ``num_partitions`` (int, default 1)
    The module's ``mhlo.num_replicas`` / ``mhlo.num_partitions``; compile options that keep the
    default 1 take these, and options that disagree with them are refused.
``donated_inputs`` (iterable of int, default: the inputs named in ``aliases``)
    Inputs donated without naming an output (``jax.buffer_donor``): they are consumed by an
    execution, and their storage is freed rather than reused.
``generated_code_size_in_bytes``, ``temp_size_in_bytes`` (int, default 0)
    Reported by ``PJRT_Executable_SizeOfGeneratedCodeInBytes`` and the compiled memory stats.
``cancellable`` (bool, default False)
    The program has a loop whose trip count is only known at run time (a ``while``), so a run
    may never end, and ``run`` takes a keyword ``cancel``: a one-element int32 array that the
    runtime sets non-zero to stop the run (``ExecuteOptions.timeout``,
    ``LoadedExecutable.cancel``). The program reads it at every loop iteration and, once it is
    set, raises any exception (the runtime reports the cancel reason instead). The read must
    not be hoisted out of the loop by a compiler (numba_cpu uses an atomic load).
``fresh_results`` (bool, default False)
    ``run`` always returns new arrays of the declared shapes and dtypes, distinct from one
    another and from its inputs, that the program keeps no reference to (or, for a donated
    output, the ``out`` array it was given). The runtime then skips its per-result checks, the
    larger part of a tiny program's execute (numba_cpu's generated code returns such arrays).
``direct_entry()`` (method; absent: None)
    With ``fresh_results``: a callable that takes the input arrays as positional arguments
    (C-contiguous, writeable, of the declared types: what a buffer holds) and returns a tuple
    of the results, one fresh array per output, as ``run(args)`` would; or None while the
    program has none (numba_cpu's tiered program until its compiled code is loaded). A
    single-device execution then calls it instead of ``run`` (a tenth of a tiny program's
    execute is ``run``'s own work). When it raises TypeError (numba's dispatcher refusing an
    array), the runtime calls ``run`` with the same arrays, which coerces them; any other
    exception is the execution's error, as from ``run``. The runtime asks for the entry, and
    calls it, holding the client's lock (for short programs only: see the runtime's fast path),
    so neither may wait for another thread that uses the client.
``unbounded_loops`` (bool, default False)
    A loop of the program may run long or forever: it is not a counted loop of a few
    iterations (``pjrt_hub.backends.stablehlo.loops``). Such a program never runs inline on the
    caller's thread, whatever its cost figures say, so that ``execute`` returns at once.

What ``run`` may do with its arrays:

* ``args`` are the buffers' own storage: read them, never write them.
* ``out[i]``, when not None, is the storage of the input that output ``i`` aliases (donation):
  it may be the very memory of that input, so read what you need of the input before writing
  ``out[i]`` (elementwise code can do both in one pass; a transpose cannot).
* Return arrays of the declared shapes and dtypes. The runtime copies a result that is an input,
  a view of one, or the same array as another result, because two buffers must never share
  storage; a result the program keeps a reference to (a constant returned every call) is used
  as it is but never overwritten by donation. A result that is not C-contiguous is copied into
  C order, because every buffer is dense row-major (what the Layouts extension reports).
  Returning fresh C-order arrays is the cheap path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from pjrt_hub.abi import CompileOptions

__all__ = ["CompiledProgram", "ProgramCompiler", "TensorSpec"]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape and dtype of one argument or result of ``@main``."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def matches(self, array: np.ndarray) -> bool:
        return array.shape == self.shape and array.dtype == self.dtype


@runtime_checkable
class CompiledProgram(Protocol):
    """A program ready to run on host arrays."""

    #: Module name (``jit_f`` for ``module @jit_f``), or ``main``.
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    #: output index -> input index the program lets the output reuse (``tf.aliasing_output``,
    #: ``jax.buffer_donor`` / ``input_output_alias``); the runtime donates only these.
    aliases: Mapping[int, int]
    #: Stable hash of the program and the options it was compiled with.
    fingerprint: str

    def run(self, args: Sequence[np.ndarray], out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        """Compute the outputs. Arrays in ``out`` (same specs as ``outputs``) may be written
        into and returned, which is how donated input storage is reused; ``None`` entries are
        allocated by the program. Must not keep references to ``args`` after returning.
        Raising is how a program reports an execution error: the runtime puts it on the
        execution's event and outputs (see the module docstring for the rules on arrays)."""
        ...

    def cost_analysis(self) -> Mapping[str, float]:
        """At least ``flops`` and ``bytes accessed``, the keys XLA uses."""
        ...

    def serialize(self) -> bytes:
        """Bytes that :meth:`ProgramCompiler.deserialize` turns back into this program."""
        ...


@runtime_checkable
class ProgramCompiler(Protocol):
    """Turns program text into a :class:`CompiledProgram`."""

    #: Short name used in messages and cache keys (``numba_cpu``, ``reference``).
    name: str
    # Optional: ``option_names``, the compile option overrides it reads (others than XLA's
    # ``xla_*`` are refused at compile time).

    def compile(self, code: str | bytes, options: CompileOptions) -> CompiledProgram:
        """Compile StableHLO text (pretty or generic MLIR). Raises ParseError,
        UnsupportedOpError or CompileError with a message naming what was wrong."""
        ...

    def deserialize(self, data: bytes) -> CompiledProgram:
        ...

