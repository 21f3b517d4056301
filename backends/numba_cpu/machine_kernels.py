"""Machine kernels: the float32 functions of :mod:`.vecmath` (and IEEE max/min) as array loops,
row reductions in the lane order of :mod:`.lanes`, and the row machine of :mod:`.row_programs`,
compiled by numba once per machine and loaded by the eager tier without numba.

The eager tier (:mod:`.eager`) must give the compiled code's bits, so it computes vecmath's
float32 functions op for op in numpy (:mod:`.eager_math`), every fused multiply-add emulated in
float64: on large arrays that takes tens of times as long as the compiled loop, and a chain of
such functions seconds (docs/two-tiers.md). numba cannot help a program's first result (it
takes half a second to import and seconds to compile), but these loops do not depend on the
program: compiled once, kept as native object code, they load quickly with llvmlite alone (in
a thread started with the client) and need no compile at all.

* **Same bits.** Each kernel is a loop calling the very vecmath function that the fused kernels
  inline (a row reduction: their lane code), with numpy's error model and no fast-math, so it
  computes what they compute. Each is
  also compared with its numpy twin on special values once per process before its first use;
  one that differs is never used, and says so once.
* **Once per machine.** The object code depends on the CPU, on numba's and llvmlite's versions
  and settings (the vecmath decision of :mod:`.target`) and on vecmath's source: those make the
  file's key. It lives in ``machine/`` of pjrt-hub's cache (``$PJRT_HUB_CACHE``, else
  ``~/.cache/pjrt-hub``), or in ``$PJRT_HUB_MACHINE_CACHE``: ``bench`` points that at the
  machine's folder when it times compiles with an empty program cache, since these kernels serve
  every program and are not part of any program's compile.
* **Built in the background.** The first time the eager tier meets a large array that a missing
  kernel would serve, it starts a builder (``python -m pjrt_hub.backends.numba_cpu.machine_kernels
  build``), detached and at low priority, as ``git gc --auto`` does: tens of seconds of one core, once.
  The builder writes the file under a temporary name, has a fresh process (without numba) load it
  and compare every kernel with its numpy twin on special values and random bit patterns, and
  renames it into place only if all agree; otherwise it leaves a ``.failed`` note saying why, and
  no process starts a builder for that key again (a failure of the moment, such as a full disk,
  leaves no note: the next process tries again). A lock file keeps builders from running twice,
  and no builder starts for a folder nobody can write.
* **Safe to lose.** A missing, truncated or corrupt file (its header holds the SHA-256 of the
  code) is never loaded: the numpy twins answer, with the same bits, and a corrupt file is
  rebuilt. ``PJRT_HUB_MACHINE_KERNELS=0`` turns the kernels (and their builds) off.

Object code is loaded into an MCJIT engine, which ends the process if the code names a symbol it
cannot resolve. What keeps that from a user's process is that a file is published only after
another process has loaded it and run every kernel; the builder also refuses kernels whose code
declares anything but LLVM intrinsics (some of which can still become C library calls, which a
Python process has loaded).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pjrt_hub._cache_root import cache_folder

from . import target
from pjrt_hub.backends.cpu_runtime.helper_thread import HelperThread

__all__ = ["FUNCTIONS", "MIN_ELEMENTS", "REDUCTIONS", "ROW_MACHINE", "apply", "available", "build", "directory", "enabled",
           "ensure_built", "file_path", "machine_key", "preload", "reduce_rows", "row_machine", "row_machine_table",
           "rows_lanes", "verify"]

#: The vecmath functions served, with their number of float32 operands.
FUNCTIONS: dict[str, int] = {
    **dict.fromkeys((
        "exp_f32", "expm1_f32", "log_f32", "log1p_f32", "tanh_f32", "logistic_f32", "erf_f32", "erfc_f32",
        "sin_f32", "cos_f32", "tan_f32", "atan_f32", "asin_f32", "acos_f32", "sinh_f32", "cosh_f32",
        "asinh_f32", "acosh_f32", "atanh_f32", "cbrt_f32"), 1),
    **dict.fromkeys(("pow_f32", "atan2_f32", "fmod_f32"), 2),
    # IEEE maximum/minimum (.intrinsics): one pass, where numpy needs three for signed zeros.
    **dict.fromkeys(("fmaximum", "fminimum"), 2),
}
#: Row reductions: ``name -> (operation, element type)``. Each reduces every row of a
#: C-contiguous 2-D array (rows made of innermost rows of ``width`` elements) in ``k`` lanes:
#: ``add`` and ``mul`` in the order the compiled code keeps (:mod:`.lanes`), IEEE ``max`` and
#: ``min`` (exact in any order) in lanes for speed. ``init`` is the caller's to combine.
REDUCTIONS: dict[str, tuple[str, str]] = {
    **{f"lanes_{op}_{t}": (op, t) for op in ("add", "mul") for t in ("f32", "f64")},
    # numpy's own float64 max is as fast.
    "lanes_max_f32": ("max", "f32"), "lanes_min_f32": ("min", "f32")}
#: The row machine (:mod:`.row_programs`): one native call runs a float32 row segment.
ROW_MACHINE = "row_machine"
#: What a file's entry says of each kernel: its number of operands, ``"rows"`` or ``"machine"``.
_SIGNATURES: dict[str, int | str] = {**FUNCTIONS, **dict.fromkeys(REDUCTIONS, "rows"), ROW_MACHINE: "machine"}
_DTYPES: dict[str, np.dtype[Any]] = {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64)}
#: Arrays smaller than this stay with the numpy twins (a ctypes call and its checks cost a few
#: microseconds, about what numpy takes for so few elements).
MIN_ELEMENTS = 1 << 12
#: From this many elements, a kernel runs in two halves on two threads.
SPLIT_ELEMENTS = 1 << 18
#: From this many elements, an operation waits for kernels still loading (at most
#: :data:`LOAD_WAIT_S`): numpy would take longer than the load.
WAIT_ELEMENTS = 1 << 18
LOAD_WAIT_S = 2.0
#: From this many elements, a missing file is worth a build.
BUILD_ELEMENTS = 1 << 16
#: A builder's lock older than this is taken to belong to a builder that died.
STALE_LOCK_S = 1200.0

_FORMAT = "pjrt_hub.machine_kernels/2"
_VARIABLE = "PJRT_HUB_MACHINE_KERNELS"
#: numba's settings that change the code it generates.
_NUMBA_SETTINGS = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_OPT", "NUMBA_ENABLE_AVX", "NUMBA_LOOP_VECTORIZE",
                   "NUMBA_SLP_VECTORIZE", "NUMBA_FASTMATH")
_MODULE = "pjrt_hub.backends.numba_cpu.machine_kernels"
_SOURCES = ("vecmath.py", "mathconst.py", "intrinsics.py", "target.py", "lanes.py", "lane_intrinsics.py",
            "support.py", "row_programs.py", "machine_kernels.py")


class MachineKernelError(Exception):
    """A kernel file that cannot be built, or loaded as it is."""


def enabled() -> bool:
    return os.environ.get(_VARIABLE, "").strip() != "0"


def directory() -> Path:
    root = os.environ.get("PJRT_HUB_MACHINE_CACHE")
    return Path(root) if root else cache_folder("machine")


def _cpu_identity() -> bytes:
    """What this CPU is, read without llvmlite: /proc/cpuinfo's model and flags (elsewhere, what
    :mod:`platform` says)."""
    seen: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("vendor_id", "cpu family", "model", "model name", "flags") and name not in seen:
                    seen[name] = value.strip()
    except OSError:
        import platform

        seen["platform"] = f"{platform.machine()} {platform.processor()}"
    return json.dumps(seen, sort_keys=True).encode()


def _package_file(package: str, name: str) -> bytes:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return b"-"
    try:
        return (Path(list(spec.submodule_search_locations)[0]) / name).read_bytes()
    except OSError:
        return b"?"


def machine_key() -> str:
    """The key of this machine's kernel file (see the module docstring), computed without
    importing numba or llvmlite."""
    h = hashlib.sha256(_FORMAT.encode())
    h.update(_cpu_identity())
    for package in ("numba", "llvmlite"):
        h.update(_package_file(package, "_version.py"))
    for name in _NUMBA_SETTINGS:
        h.update(f"{name}={os.environ.get(name)}\n".encode())
    h.update(target.TAG.encode())
    here = Path(__file__).parent
    for name in _SOURCES:
        h.update((here / name).read_bytes())
    return h.hexdigest()[:24]


def file_path(key: str | None = None) -> Path:
    return directory() / f"vecmath-{key or machine_key()}.bin"


# -- the file ----------------------------------------------------------------------------------


def _write(path: Path, key: str, entries: list[dict[str, Any]], code: bytes) -> None:
    header = {"format": _FORMAT, "key": key, "entries": entries, "sha256": hashlib.sha256(code).hexdigest(),
              "size": len(code)}
    with open(path, "wb") as f:
        f.write(json.dumps(header).encode() + b"\n")
        f.write(code)
        f.flush()
        os.fsync(f.fileno())


def _read(path: Path, key: str) -> tuple[list[dict[str, Any]], bytes]:
    """The entries and object code of a kernel file, or :class:`MachineKernelError` saying what
    is wrong with it."""
    data = path.read_bytes()
    line, newline, code = data.partition(b"\n")
    try:
        header = json.loads(line) if newline else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise MachineKernelError(f"{path}: not a machine kernel file")
    if header.get("key") != key:
        raise MachineKernelError(f"{path}: built for another machine or version ({header.get('key')})")
    if header.get("size") != len(code):
        raise MachineKernelError(f"{path}: truncated ({len(code)} of {header.get('size')} bytes of code)")
    if hashlib.sha256(code).hexdigest() != header.get("sha256"):
        raise MachineKernelError(f"{path}: corrupt (its code does not match its checksum)")
    entries = header.get("entries")
    if not isinstance(entries, list):
        raise MachineKernelError(f"{path}: no kernel list")
    for e in entries:
        if (not isinstance(e, dict) or _SIGNATURES.get(str(e.get("name"))) != e.get("arity")
                or not isinstance(e.get("symbol"), str) or not isinstance(e.get("offset"), int)
                or not isinstance(e.get("size"), int) or e["offset"] < 0 or e["offset"] + e["size"] > len(code)):
            raise MachineKernelError(f"{path}: bad kernel entry {e!r}")
        if e["name"] == ROW_MACHINE and not (isinstance(e.get("table"), list)
                                             and all(isinstance(k, str) for k in e["table"])):
            raise MachineKernelError(f"{path}: the row machine's entry has no formula table")
    return entries, code


# -- loading (llvmlite, no numba) ----------------------------------------------------------------


#: ``int32 kernel(retptr, excinfo, operand..., out, n)`` (a row reduction: ``(retptr, excinfo,
#: x, out, lanes, rows, n, width, k)``): numba's calling convention for a function without a
#: Python wrapper; 0 is success.
def _prototype(arity: int | str) -> Any:
    p, i = ctypes.c_void_p, ctypes.c_int64
    if arity == "rows":
        return ctypes.CFUNCTYPE(ctypes.c_int32, p, p, p, p, p, i, i, i, i)
    if arity == "machine":  # (code, ninstr, base, count, advance, nslots, pointers, r0, r1, block, lanes)
        return ctypes.CFUNCTYPE(ctypes.c_int32, p, p, p, i, p, p, p, i, p, i, i, i, p)
    assert isinstance(arity, int)
    return ctypes.CFUNCTYPE(ctypes.c_int32, p, p, *([p] * (arity + 1)), i)


class Kernels:
    """The loaded kernels of one file (the execution engine that holds their code stays alive
    with this object)."""

    def __init__(self, path: Path, key: str) -> None:
        import llvmlite.binding as llvm

        entries, code = _read(path, key)
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        machine = llvm.Target.from_default_triple().create_target_machine(jit=True)
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        self._objects = []
        for e in entries:
            obj = llvm.ObjectFileRef.from_data(code[e["offset"]:e["offset"] + e["size"]])
            self._engine.add_object_file(obj)
            self._objects.append(obj)
        self._engine.finalize_object()
        self.functions: dict[str, Callable[..., int]] = {}
        #: The row machine's formula of each elementwise opcode (see :mod:`.row_programs`).
        self.table: list[str] = []
        for e in entries:
            if e["name"] == ROW_MACHINE:
                self.table = list(e["table"])
            address = self._engine.get_function_address(e["symbol"])
            if not address:
                raise MachineKernelError(f"{path}: {e['name']} ({e['symbol']}) is not in its code")
            self.functions[e["name"]] = _prototype(e["arity"])(address)

    def call(self, name: str, operands: Sequence[np.ndarray], out: np.ndarray) -> bool:
        """Run kernel ``name`` on C-contiguous float32 ``operands`` of ``out``'s size (large
        ones in two halves, one on a helper thread: ctypes lets go of the GIL)."""
        fn = self.functions[name]
        n = out.size
        pointers = [a.ctypes.data for a in operands] + [out.ctypes.data]

        def part(start: int, stop: int) -> int:
            ret, exc = ctypes.c_void_p(), ctypes.c_void_p()
            return fn(ctypes.byref(ret), ctypes.byref(exc), *[p + 4 * start for p in pointers], stop - start)

        return all(status == 0 for status in _HELPER.split(part, n, n // 2 if n >= SPLIT_ELEMENTS else 0))

    def row_machine(self, code: np.ndarray, ninstr: int, base: np.ndarray, count: np.ndarray,
                    advance: np.ndarray, nslots: int, pointers: np.ndarray, r0: int, r1: int, block: int,
                    lanes: np.ndarray) -> int:
        """Run a row program (see :mod:`.row_programs`) on rows ``[r0, r1)``: 0 on success."""
        ret, exc = ctypes.c_void_p(), ctypes.c_void_p()
        status: int = self.functions[ROW_MACHINE](
            ctypes.byref(ret), ctypes.byref(exc), code.ctypes.data, ninstr, base.ctypes.data, count.ctypes.data,
            advance.ctypes.data, nslots, pointers.ctypes.data, r0, r1, block, lanes.ctypes.data)
        return status

    def reduce(self, name: str, x: np.ndarray, width: int, k: int, out: np.ndarray) -> bool:
        """Row reduction ``name`` of the C-contiguous 2-D ``x`` into ``out`` (one value a row),
        in ``k`` lanes over innermost rows of ``width`` elements (large ones in two halves)."""
        fn = self.functions[name]
        rows, n = x.shape
        size = x.dtype.itemsize

        def part(start: int, stop: int) -> int:
            ret, exc = ctypes.c_void_p(), ctypes.c_void_p()
            lanes = np.empty(k, x.dtype)
            return fn(ctypes.byref(ret), ctypes.byref(exc), x.ctypes.data + start * n * size,
                      out.ctypes.data + start * size, lanes.ctypes.data, stop - start, n, width, k)

        return all(status == 0 for status in _HELPER.split(part, rows, rows // 2 if x.size >= SPLIT_ELEMENTS else 0))


_HELPER = HelperThread("pjrt-hub-machine-kernels")


def _bits(x: np.ndarray) -> np.ndarray:
    """Bit patterns, every NaN made the same quiet NaN (payloads are not part of the contract;
    a pattern that is a number would let a NaN pass for it)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return np.where(np.isnan(x), np.uint64(0x7FF8000000000000), x.view(np.uint64))
    x = np.asarray(x, np.float32)
    return np.where(np.isnan(x), np.uint32(0x7FC00000), x.view(np.uint32))


def _specials() -> np.ndarray:
    tiny = float(np.finfo(np.float32).tiny)
    values: list[float] = [0.0, 1.0, 0.5, 2.0, 3.0, 0.1, 1e-3, 1e-6, 1e-20, 7.5, 10.0, 20.0, 44.0, 88.0, 88.8, 89.5, 100.0,
              104.0, 1e10, 1e30, 3.4028235e38, np.inf, np.nan, tiny, tiny / 2, 1e-45, 0.99999994, 1.0000001,
              np.pi / 2, np.pi, 1e5, 7e5, 2.0 ** 24 + 2]
    return np.array(values + [-v for v in values], np.float32)


def _reduce(kernels: Kernels, name: str, x: np.ndarray, width: int, k: int) -> np.ndarray | None:
    out = np.empty(x.shape[0], x.dtype)
    return out if kernels.reduce(name, x, width, k, out) else None


def _run(kernels: Kernels, name: str, operands: Sequence[Any], shape: tuple[int, ...]) -> np.ndarray | None:
    """Kernel ``name`` on float32 ``operands`` broadcast to ``shape`` (None if it failed)."""
    arrays = [np.ascontiguousarray(x if np.shape(x) == shape else np.broadcast_to(x, shape)) for x in operands]
    out = np.empty(shape, np.float32)
    return out if kernels.call(name, arrays, out) else None


def _agree(kernels: Kernels, name: str, twin: Callable[..., Any], operands: Sequence[np.ndarray]) -> bool:
    got = _run(kernels, name, operands, np.broadcast_shapes(*[a.shape for a in operands]))
    if got is None:
        return False
    with np.errstate(all="ignore"):
        expected = twin(*operands)
    return bool(np.array_equal(_bits(got), _bits(expected)))


def _rows_agree(kernels: Kernels, name: str, twin: Callable[..., Any], rng: np.random.Generator | None = None,
                random: int = 0) -> bool:
    """A row reduction against its twin, on rows of special values (and ``random`` random bit
    patterns) in innermost rows of several widths: below, at and past the lane count."""
    op, element = REDUCTIONS[name]
    dtype = _DTYPES[element]
    specials = _specials().astype(dtype)
    k = rows_lanes(name)
    for width, per in ((k, k), (k + 36, 3 * k + 108), (2 * k + 2, 2 * k + 2), (5 * k, 5 * k), (3, 3)):
        if width < k and op in ("add", "mul"):
            continue  # fewer lanes: numpy's
        # Specials in every lane and order (a fixed shuffle: numpy.random is slow to import).
        picks = ((np.arange(specials.size * per) * 7919 + width) % specials.size).reshape(specials.size, per)
        x = specials[picks]
        if rng is not None and random:
            bits = rng.integers(0, 1 << 64, (max(1, random // per), per), dtype=np.uint64)
            noise = bits.view(np.float64) if dtype == np.float64 else bits.astype(np.uint32).view(np.float32)
            # Finite values of every size too: random patterns of large exponents sum to inf.
            x = np.concatenate([x, noise, (rng.standard_normal((64, per)) * 10.0 ** rng.integers(-30, 30, (64, 1)))
                                .astype(dtype)])
        if op == "mul":
            x = np.concatenate([x, (1 + rng.standard_normal((64, per)) / 100).astype(dtype) if rng is not None
                                else np.full((4, per), 1.0001, dtype)])
        x = np.ascontiguousarray(x)
        got = _reduce(kernels, name, x, width, k)
        with np.errstate(all="ignore"):
            expected = twin(x, width)
        if got is None or not np.array_equal(_bits(got), _bits(expected)):
            return False
    return True


def _kernel_agrees(kernels: Kernels, name: str, twin: Callable[..., Any], rng: np.random.Generator | None = None,
                   random: int = 0) -> bool:
    """Kernel ``name`` (a function or a row reduction) against its numpy ``twin``, on special
    values and ``random`` random bit patterns."""
    if name in REDUCTIONS:
        return _rows_agree(kernels, name, twin, rng, random)
    return _agree(kernels, name, twin, _probe(FUNCTIONS[name], rng, random))


def _probe(arity: int, rng: np.random.Generator | None = None, random: int = 0) -> list[np.ndarray]:
    """Operands to compare a kernel with its twin on: every special value (every pair of them for
    two operands) and ``random`` random bit patterns."""
    s = _specials()
    grid = [s] if arity == 1 else [np.repeat(s, s.size), np.tile(s, s.size)]
    if rng is not None and random:
        extra = [rng.integers(0, 1 << 32, random, dtype=np.uint64).astype(np.uint32).view(np.float32)
                 for _ in range(arity)]
        grid = [np.concatenate([g, e]) for g, e in zip(grid, extra)]
    return grid


class _State:
    """This process's kernels: loaded once, in a thread, when the file exists."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Held while a kernel is compared with numpy: a numpy formula may call another kernel,
        #: and check it, in the same thread.
        self.checking = threading.RLock()
        self.loaded = threading.Event()
        self.thread: threading.Thread | None = None
        self.kernels: Kernels | None = None
        self.checked: dict[str, bool] = {}
        self.key: str | None = None
        self.build_asked = False
        self._on: bool | None = None

    @property
    def on(self) -> bool:
        """``PJRT_HUB_MACHINE_KERNELS`` as the first operation that asked found it (every
        operation asks, for every array it computes)."""
        if self._on is None:
            self._on = enabled()
        return self._on

    def machine_key(self) -> str:
        if self.key is None:
            self.key = machine_key()
        return self.key

    def start(self) -> None:
        with self.lock:
            if self.thread is not None or self.loaded.is_set():
                return
            self.machine_key()
            if not file_path(self.key).is_file():
                self.loaded.set()
                return
            self.thread = threading.Thread(target=self._load, name="pjrt-hub-machine-kernels", daemon=True)
            self.thread.start()

    def _load(self) -> None:
        assert self.key is not None
        path = file_path(self.key)
        try:
            self.kernels = Kernels(path, self.key)
            _HELPER.start()  # now rather than in the first large call
            try:
                os.utime(path)  # in use: another key's build leaves it (see _remove_stale_files)
            except OSError:
                pass
        except MachineKernelError as exc:
            warnings.warn(f"numba_cpu: ignoring the machine kernel file: {exc}; it will be rebuilt",
                          RuntimeWarning, stacklevel=1)
            try:
                path.unlink()
            except OSError:
                pass
        except (OSError, ImportError, RuntimeError) as exc:
            warnings.warn(f"numba_cpu: could not load the machine kernels ({type(exc).__name__}: {exc}); the eager "
                          f"tier computes their functions with numpy (same results, slower)", RuntimeWarning, stacklevel=1)
        finally:
            self.loaded.set()

    def get(self, name: str, twin: Callable[..., Any], wait: bool) -> Kernels | None:
        if not self.loaded.is_set():
            if not wait or not self.loaded.wait(LOAD_WAIT_S):
                return None
        kernels = self.kernels
        if kernels is None or name not in kernels.functions:
            return None
        ok = self._agrees(name, lambda: _kernel_agrees(kernels, name, twin),
                          f"the machine kernel {name} disagrees with its numpy formula")
        return kernels if ok else None

    def _agrees(self, key: str, check: Callable[[], bool], disagreement: str) -> bool:
        """``check()``, once per process for ``key``; a failed one says ``disagreement`` once."""
        ok = self.checked.get(key)
        if ok is None:
            with self.checking:  # one check (and one warning) however many threads ask
                ok = self.checked.get(key)
                if ok is None:
                    ok = self.checked[key] = check()
                    if not ok:
                        warnings.warn(f"numba_cpu: {disagreement} and is not used", RuntimeWarning, stacklevel=1)
        return ok

    def row_machine(self, opcodes: dict[int, Any]) -> Kernels | None:
        """The kernels, if the row machine is loaded and each of ``opcodes`` agrees with numpy
        (checked once per process, with the op given for it, see :func:`.row_programs.check`)."""
        from . import row_programs

        if not self.loaded.is_set():
            return None
        kernels = self.kernels
        if kernels is None or ROW_MACHINE not in kernels.functions:
            return None
        for opcode, example in sorted(opcodes.items()):
            check = functools.partial(row_programs.check, kernels, opcode, example=example)
            if not self._agrees(f"{ROW_MACHINE}:{opcode}", check, f"the row machine's opcode {opcode} disagrees with numpy"):
                return None
        return kernels

    def ask_for_build(self) -> None:
        with self.lock:
            if self.build_asked or self.kernels is not None:
                return
            self.build_asked = True
        path = file_path(self.machine_key())
        if path.is_file() or path.with_suffix(".failed").is_file() or _locked(path) or not _writable(path.parent):
            return
        _spawn_builder()


_STATE = _State()
_STATE_PID = os.getpid()


def _state() -> _State:
    """This process's state: a forked child starts a fresh one (the parent's loading thread,
    and the engine it may have been filling, are not in the child)."""
    global _STATE, _STATE_PID
    if _STATE_PID != os.getpid():
        _STATE, _STATE_PID = _State(), os.getpid()
    return _STATE


def available() -> bool:
    """Whether this machine's kernels are on disk (and on): loaded, or loading, they serve the
    eager tier's large float32 operations."""
    state = _state()
    if not state.on:
        return False
    if state.loaded.is_set():
        return state.kernels is not None
    return file_path(state.machine_key()).is_file()


def ensure_built(timeout: float = 600.0) -> str:
    """Build this machine's kernels now (in a child process, waiting for it) unless they are
    there, off or failed before: what became of them, in a few words, for a report."""
    if not enabled():
        return "off (PJRT_HUB_MACHINE_KERNELS=0)"
    path = file_path()
    if path.is_file():
        return f"present ({path})"
    deadline = time.monotonic() + timeout
    try:
        done = subprocess.run([sys.executable, "-m", _MODULE, "build"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not built: {exc}"
    while not path.is_file() and _locked(path) and time.monotonic() < deadline:
        time.sleep(0.5)  # another process's builder, at work
    if path.is_file():
        return f"built now ({path})"
    failed = path.with_suffix(".failed")
    if failed.is_file():
        return f"not built: {failed.read_text().strip()}"
    lines = done.stderr.strip().splitlines()
    return f"not built: {lines[-1] if lines else f'the builder ended with status {done.returncode}'}"


def preload() -> None:
    """Start loading this machine's kernels in a thread, if their file exists (the eager tier
    then finds them ready)."""
    state = _state()
    if state.on:
        state.start()


def apply(name: str, operands: Sequence[Any], twin: Callable[..., Any]) -> np.ndarray | None:
    """Kernel ``name`` on ``operands`` (broadcast together), or None where the numpy ``twin``
    must answer: the operands are not all float32, too few, or there are no kernels."""
    for x in operands:
        if getattr(x, "dtype", None) != np.float32:
            return None
    shapes = [np.shape(x) for x in operands]
    shape = shapes[0] if all(s == shapes[0] for s in shapes) else np.broadcast_shapes(*shapes)
    kernels = _serving(name, twin, math.prod(shape))
    return None if kernels is None else _run(kernels, name, operands, shape)


def _serving(name: str, twin: Callable[..., Any], n: int) -> Kernels | None:
    """The kernels to run kernel ``name`` on ``n`` elements with, or None where numpy answers:
    too few elements, kernels off, not loaded (waited for from :data:`WAIT_ELEMENTS`; a build
    asked for from :data:`BUILD_ELEMENTS` if there are none), or one that disagrees with ``twin``."""
    state = _state()
    if n < MIN_ELEMENTS or not state.on:
        return None
    state.start()
    kernels = state.get(name, twin, wait=n >= WAIT_ELEMENTS)
    if kernels is None and n >= BUILD_ELEMENTS and state.loaded.is_set():
        state.ask_for_build()
    return kernels


def row_machine_table(wait: bool = False) -> list[str] | None:
    """The formula table of this process's row machine, or None if there is none (yet): the
    eager tier plans row programs for it (:func:`.row_programs.plan`). ``wait``: for kernels
    still loading (at most :data:`LOAD_WAIT_S`); a missing file is then worth a build."""
    state = _state()
    if not state.on:
        return None
    state.start()
    if not state.loaded.is_set() and not (wait and state.loaded.wait(LOAD_WAIT_S)):
        return None
    if state.kernels is None or ROW_MACHINE not in state.kernels.functions:
        if wait:
            state.ask_for_build()
        return None
    return state.kernels.table


def row_machine(opcodes: dict[int, Any]) -> Kernels | None:
    """The kernels to run a row program using ``opcodes`` with, or None (see :meth:`_State.row_machine`)."""
    state = _state()
    return state.row_machine(opcodes) if state.on else None


def reduce_rows(name: str, x: np.ndarray, width: int, k: int, twin: Callable[..., Any]) -> np.ndarray | None:
    """Row reduction ``name`` (see :data:`REDUCTIONS`) of each row of the 2-D ``x``, or None
    where the numpy ``twin`` must answer: ``x`` is not C-contiguous, of the kernel's type, or
    large enough, or there are no kernels."""
    dtype = _DTYPES[REDUCTIONS[name][1]]
    if (x.dtype != dtype or x.ndim != 2 or not x.flags.c_contiguous or x.shape[1] == 0 or width <= 0
            or k != rows_lanes(name)):
        return None
    kernels = _serving(name, twin, x.size)
    return None if kernels is None else _reduce(kernels, name, x, width, k)


# -- building (numba) ---------------------------------------------------------------------------


_DECLARE = re.compile(r"^declare\b.*?@(\"[^\"]+\"|[\w.$]+)\(", re.M)


def _compile(name: str) -> tuple[str, bytes, dict[str, Any]]:
    """numba's object code for kernel ``name``, the symbol of its function, and what else its
    file entry records (the row machine's formula table)."""
    from numba import types

    from . import intrinsics, vecmath

    if name == ROW_MACHINE:
        from .row_programs import compile_machine

        return compile_machine()
    if name in REDUCTIONS:
        return (*_compile_rows(name), {})
    arity = FUNCTIONS[name]
    pointer = types.CPointer(types.float32)
    signature = types.void(*([pointer] * (arity + 1)), types.int64)
    params = [f"x{i}" for i in range(arity)]
    text = (f"def kernel({', '.join(params)}, out, n):\n"
            f"    wide_vectors()\n"
            f"    for i in range(n):\n"
            f"        out[i] = fn({', '.join(p + '[i]' for p in params)})\n")
    scope: dict[str, Any] = {"fn": getattr(vecmath, name, None) or getattr(intrinsics, name),
                             "wide_vectors": intrinsics.wide_vectors}
    exec(compile(text, f"<machine kernel {name}>", "exec"), scope)
    return (*_object_code(name, scope["kernel"], signature), {})


def _rows_text(op: str, k: int) -> str:
    """A row reduction's loop, on the compiled tier's own lane code (:mod:`.lane_intrinsics`):
    each row's ``k`` lanes start at the identity and take its innermost rows in order, then
    fold in halves."""
    return (f"def kernel(x, out, lanes, rows, n, width, k):\n"
            f"    wide_vectors()\n"
            f"    for i in range(rows):\n"
            f"        lanes_reset(lanes, {op!r}, {k})\n"
            f"        for r in range(i * n, (i + 1) * n, width):\n"
            f"            lanes_add(lanes, x, r, width, {op!r}, {k})\n"
            f"        out[i] = lanes_total(lanes, {op!r}, {k})\n")


def rows_lanes(name: str) -> int:
    """The lanes of row reduction ``name``: as many as :mod:`.lanes` gives a row of its type
    at least that wide (narrower rows of ``add`` and ``mul``, whose order is in fewer lanes,
    stay with numpy; ``max`` and ``min`` are exact in any order)."""
    from .lanes import LANE_BYTES

    return LANE_BYTES // _DTYPES[REDUCTIONS[name][1]].itemsize


def _compile_rows(name: str) -> tuple[str, bytes]:
    from numba import types

    from .intrinsics import wide_vectors
    from .lane_intrinsics import lanes_add, lanes_reset, lanes_total

    op, element = REDUCTIONS[name]
    pointer = types.CPointer(types.float32 if element == "f32" else types.float64)
    signature = types.void(pointer, pointer, pointer, types.int64, types.int64, types.int64, types.int64)
    scope: dict[str, Any] = {"wide_vectors": wide_vectors, "lanes_reset": lanes_reset, "lanes_add": lanes_add,
                             "lanes_total": lanes_total}
    exec(compile(_rows_text(op, rows_lanes(name)), f"<machine kernel {name}>", "exec"), scope)
    return _object_code(name, scope["kernel"], signature)


def _object_code(name: str, fn: Callable[..., Any], signature: Any) -> tuple[str, bytes]:
    from numba import njit

    dispatcher = njit(signature, error_model="numpy", nogil=True, no_cpython_wrapper=True,
                      no_cfunc_wrapper=True)(fn)
    result = dispatcher.overloads[signature.args]
    library = result.library
    external = [s for s in _DECLARE.findall(library.get_llvm_str()) if not s.startswith("llvm.")]
    if external:
        raise MachineKernelError(f"{name} calls {', '.join(external)}, which an engine without numba may not resolve")
    return result.fndesc.mangled_name, library._codegen._tm.emit_object(library._final_module)


def build(path: Path, names: Sequence[str] | None = None, *, check: bool = True) -> None:
    """Compile the kernels (all, or ``names``) into the file ``path`` for this machine: written
    under a temporary name, checked by a fresh process (:func:`verify`) when ``check``, then
    renamed into place."""
    key = machine_key()
    entries, code = [], b""
    for name in names or list(_SIGNATURES):
        symbol, obj, extra = _compile(name)
        entries.append({"name": name, "arity": _SIGNATURES[name], "symbol": symbol, "offset": len(code),
                        "size": len(obj), **extra})
        code += obj
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        _write(temporary, key, entries, code)
        if check:
            done = subprocess.run([sys.executable, "-m", _MODULE, "verify", str(temporary)], capture_output=True,
                                  text=True, timeout=600, env=dict(os.environ, **{_VARIABLE: "1"}))
            if done.returncode != 0:
                why = (done.stdout + done.stderr).strip().splitlines()[-3:] or [f"exit status {done.returncode}"]
                raise MachineKernelError("the check of the built kernels failed: " + " / ".join(why))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def verify(path: Path, random: int = 1 << 16) -> list[str]:
    """Load the kernel file ``path`` here and compare every kernel with its numpy twin on special
    values and ``random`` random bit patterns: the kernels that disagree (empty: all agree)."""
    from .eager_math import NUMPY_TWINS
    from .lanes import row_twin

    kernels = Kernels(path, machine_key())
    rng = np.random.default_rng(20261128)
    bad = []
    for name in kernels.functions:
        if name == ROW_MACHINE:
            from .row_programs import OPCODES, check

            ok = all(check(kernels, opcode, rng, random) for opcode in range(OPCODES))
        else:
            twin = row_twin(REDUCTIONS[name][0]) if name in REDUCTIONS else NUMPY_TWINS[name]
            ok = _kernel_agrees(kernels, name, twin, rng, random)
        if not ok:
            bad.append(name)
    return bad


def _writable(folder: Path) -> bool:
    """Whether a builder could write into ``folder`` (or create it)."""
    while not folder.exists():
        if folder.parent == folder:
            return False
        folder = folder.parent
    return os.access(folder, os.W_OK | os.X_OK)


def _locked(path: Path) -> bool:
    try:
        return time.time() - path.with_suffix(".lock").stat().st_mtime < STALE_LOCK_S
    except OSError:
        return False


def _spawn_builder() -> None:
    """Start a detached builder (its own session, no pipes to this process); a thread reaps it
    if this process is still there when it ends."""
    try:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-m", _MODULE, "build"], dict(os.environ),
                             file_actions=[(os.POSIX_SPAWN_OPEN, fd, os.devnull, flags, 0)
                                           for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY))],
                             setsid=True)
    except (AttributeError, NotImplementedError, OSError):
        return
    threading.Thread(target=os.waitpid, args=(pid, 0), name="pjrt-hub-machine-kernels-build", daemon=True).start()


def _take_lock(lock: Path) -> bool:
    """Create ``lock`` (holding this process's id), taking over one older than
    :data:`STALE_LOCK_S` (its builder died): False if another builder holds it."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if not _locked(lock.with_suffix(".bin")):
                lock.unlink(missing_ok=True)
                continue
            return False
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def _release_lock(lock: Path) -> None:
    """Remove ``lock`` if it is still this process's (a builder that took over a stale one
    holds it otherwise)."""
    try:
        if lock.read_text().strip() == str(os.getpid()):
            lock.unlink()
    except OSError:
        pass


#: Files of other keys (another numba, pjrt-hub or setting: each upgrade makes a new key) are
#: removed by a build once they are this old; a process that loads a file touches it.
OTHER_KEYS_KEPT_S = 30 * 86400.0


def _remove_stale_files(folder: Path, key: str) -> None:
    """Files a killed builder left (``*.tmp``, older than :data:`STALE_LOCK_S`), and the files,
    notes and locks of other keys older than :data:`OTHER_KEYS_KEPT_S`."""
    now = time.time()
    for path in folder.glob("vecmath-*"):
        temporary = path.suffix == ".tmp"
        if not temporary and path.name.startswith(f"vecmath-{key}."):
            continue
        try:
            if now - path.stat().st_mtime > (STALE_LOCK_S if temporary else OTHER_KEYS_KEPT_S):
                path.unlink()
        except OSError:
            pass


def _build_here() -> int:
    """``build``: this machine's file, unless it exists, failed before, or another builder holds
    the lock. A failure that says something about these kernels (:class:`MachineKernelError`:
    they call outside code, or disagree with numpy) is recorded in a ``.failed`` note, and no
    process tries again; one of the moment (a full disk, a check that timed out on a busy
    machine) is not, and the next process that needs the kernels tries again."""
    try:
        os.nice(10)
    except OSError:
        pass
    path = file_path()
    if path.is_file() or path.with_suffix(".failed").is_file():
        return 0
    lock = path.with_suffix(".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _take_lock(lock):
            return 0
    except OSError as exc:
        print(f"pjrt-hub machine kernels: cannot build in {path.parent}: {exc}", file=sys.stderr)
        return 1
    try:
        _remove_stale_files(path.parent, machine_key())
        build(path)
        return 0
    except MachineKernelError as exc:
        path.with_suffix(".failed").write_text(f"{exc}\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - of the moment: the next process tries again
        print(f"pjrt-hub machine kernels: build failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        _release_lock(lock)


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["build"]:
        return _build_here()
    if argv[:1] == ["verify"] and len(argv) == 2:
        bad = verify(Path(argv[1]))
        if "numba" in sys.modules:
            print("the check imported numba", file=sys.stderr)
            return 1
        if bad:
            print("kernels that disagree with numpy: " + ", ".join(bad), file=sys.stderr)
            return 1
        return 0
    print(f"usage: python -m {_MODULE} build | verify FILE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
