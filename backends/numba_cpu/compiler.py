"""``NumbaCompiler``: StableHLO text -> a :class:`NumbaProgram` the CPU runtime can run.

Stages: parse (:mod:`pjrt_hub.backends.stablehlo`), inline calls (:mod:`.inline`), lower to the
source of one numba function (:mod:`.codegen`), compile with numba. numba's compilation costs
seconds, so compiled programs are cached on disk, twice over:

* the generated module is written to the cache directory as ``p_<fingerprint>.py`` and imported
  from there, so numba's own ``cache=True`` stores the machine code next to it (numba needs a
  real source file for that); the fingerprint is a hash of the generated source, numba's version
  and the lowering options, so two texts that lower alike (pretty and generic form of one
  program) share an entry;
* ``index/<hash of the program text and options>`` names the module a text produced, so a warm
  compile skips parsing and lowering altogether and only loads numba's cached code.

The cache directory is ``$PJRT_HUB_CACHE/numba`` if that is set, else ``~/.cache/pjrt-hub/numba``.
A serialized executable carries the generated module itself, so it can be rebuilt in a process
(or on a machine) whose cache does not have it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence, cast

import numpy as np

from pjrt_hub._cache_root import cache_folder
from pjrt_hub.abi import CompileError, CompileOptions, InvalidArgument, PjrtHubError
from pjrt_hub.backends.cpu_runtime.compiler import TensorSpec

from .heap import fault_without_compaction, keep_freed_memory

if TYPE_CHECKING:  # .tiers imports this module; the rest is imported when first needed
    from pjrt_hub.backends.stablehlo import Function, Module

    from .codegen import LoweringOptions
    from .tiers import TieredProgram

__all__ = ["NumbaCompiler", "NumbaProgram", "CacheStats", "default_cache_dir", "dtype_from_name", "numba_loaded"]

#: Bump when the cache layout changes.
CODEGEN_VERSION = "1"
_SERIAL_FORMAT = "pjrt_hub.numba_cpu/1"


def default_cache_dir() -> Path:
    return cache_folder("numba")


@dataclass
class CacheStats:
    """How compiles were served; tests assert on these instead of timing."""

    #: Compiles answered from this process's memory.
    memory_hits: int = 0
    #: Compiles that found the program text in the on-disk index (no parse, no lowering).
    index_hits: int = 0
    #: Compiles that lowered the program but found its module already on disk.
    module_hits: int = 0
    #: Compiles that wrote a new module (numba compiled it from scratch).
    misses: int = 0
    #: Entry functions numba loaded from its cache instead of compiling (checked after import).
    numba_cache_loads: int = 0
    #: Programs answered by the eager tier first (tiered compiles).
    eager_programs: int = 0
    #: Broken cache files dropped (and their programs compiled again).
    corrupt_entries: int = 0
    #: Background compiles that failed, leaving their programs on the eager tier (.tiers).
    background_failures: int = 0


@functools.lru_cache(maxsize=None)
def backend_digest() -> str:
    """Hash of the source that shapes the generated code (this backend and the shared StableHLO
    front end): part of every cache key, so that a change to a lowering rule, a helper (whose
    machine code numba inlines into the cached functions) or the parser can never be served
    stale code from the cache. With it, exp's path (.target: fused multiply-adds or not), which
    changes the code the helpers compile to."""
    from .target import TAG

    h = hashlib.sha256(TAG.encode())
    here = Path(__file__).parent
    for path in sorted([*here.glob("*.py"), *(here.parent / "stablehlo").glob("*.py")]):
        if path.name != "plugin.py":
            h.update(f"{path.parent.name}/{path.name}".encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _numba_version() -> str:
    """numba's version, read from its distribution's metadata directory name rather than by
    importing numba (half a second), which the eager tier must not wait for."""
    spec = importlib.util.find_spec("numba")
    if spec is not None and spec.origin:
        site = Path(spec.origin).parent.parent
        found = sorted(site.glob("numba-*.dist-info"))
        if len(found) == 1:
            return found[0].name[len("numba-"):-len(".dist-info")]
    import numba

    return numba.__version__


def _default_threads() -> int:
    """The threads numba's parallel loops use (its NUMBA_NUM_THREADS default), without
    importing numba."""
    value = os.environ.get("NUMBA_NUM_THREADS")
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _env_flag(name: str) -> bool | None:
    """A yes/no environment variable: None when unset or empty; InvalidArgument for anything
    that is not one of the usual spellings (a typo must not silently mean the default)."""
    text = os.environ.get(name, "")
    value = text.strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    if not value:
        return None
    raise InvalidArgument(f"{name}={text!r}: expected 0 or 1 (also false/true, no/yes, off/on)")


def _compile_after_from_environment() -> int:
    """``PJRT_HUB_NUMBA_COMPILE_AFTER``: eager runs before the background compile (default 1)."""
    text = os.environ.get("PJRT_HUB_NUMBA_COMPILE_AFTER", "").strip()
    if not text:
        return 1
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgument(f"PJRT_HUB_NUMBA_COMPILE_AFTER={text!r}: expected a whole number of runs "
                              "(0: compile at once)")
    return value


def _dtype_name(dt: np.dtype) -> str:
    return str(dt)


def _is_narrow(dt: np.dtype) -> bool:
    """float16 and the ml_dtypes types (bfloat16, the 8-bit floats, int4...), which the
    generated code reads and writes as unsigned bits of their width."""
    return dt == np.float16 or dt.type.__module__.startswith("ml_dtypes")


def dtype_from_name(name: str) -> np.dtype:
    """The numpy dtype of a name in a program's metadata (``"float32"``, ``"bfloat16"``...)."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # bfloat16 and friends register with numpy on import

        return np.dtype(getattr(ml_dtypes, name))


#: The cancel flag of runs the runtime gave none: never set (and writable, as the signature wants).
_NOT_CANCELLED = np.zeros(1, np.int32)


@contextlib.contextmanager
def _threads_for(compiled_for: int) -> Iterator[None]:
    """The calling thread's pools set for a run of a program compiled for ``compiled_for``
    threads (0: unknown, numba's count), and the caller's settings put back after it (see
    .threads, which imports numba: hence here, not at the top)."""
    import numba

    from . import threads

    limit = numba.config.NUMBA_NUM_THREADS
    before = threads.apply(min(compiled_for, limit) if compiled_for else limit)
    try:
        yield
    finally:
        threads.restore(before)


class NumbaProgram:
    """A compiled program: the ``CompiledProgram`` of :mod:`pjrt_hub.backends.cpu_runtime`."""

    def __init__(self, module: ModuleType, source: str, fingerprint: str, cache_dir: Path) -> None:
        meta = module.META
        self._module = module
        self._source = source
        self._cache_dir = cache_dir
        self.name: str = meta["name"]
        self.fingerprint = fingerprint
        self.inputs = tuple(TensorSpec(tuple(s), dtype_from_name(d)) for s, d in meta["inputs"])
        self.outputs = tuple(TensorSpec(tuple(s), dtype_from_name(d)) for s, d in meta["outputs"])
        self.aliases: Mapping[int, int] = {int(k): int(v) for k, v in meta["aliases"].items()}
        self._cost = dict(meta["cost"])
        self.num_replicas = int(meta.get("num_replicas", 1))
        self.num_partitions = int(meta.get("num_partitions", 1))
        self.uses_collectives = bool(meta.get("uses_collectives", False))
        self._entry = module.entry
        # Narrow types travel as unsigned bit patterns through the numba function.
        self._narrow_in = tuple(i for i, s in enumerate(self.inputs) if _is_narrow(s.dtype))
        self._narrow_out = tuple(i for i, s in enumerate(self.outputs) if _is_narrow(s.dtype))
        self._simple = not self._narrow_in and not self._narrow_out
        #: The entry takes the runtime's cancel flag last (it has a ``while`` loop; see .cancel).
        self.cancellable: bool = bool(meta.get("cancellable", False))
        #: A loop may run long or forever (not a short counted loop): never run inline.
        self.unbounded_loops: bool = bool(meta.get("unbounded_loops", self.cancellable))
        #: Parallel kernels or large BLAS products: threads are set per run (see .threads).
        self._threaded = bool(meta.get("threaded", False))
        #: The threads its parallel loops were cut for (LoweringOptions.num_threads).
        self._threads = int(meta.get("threads", 0))
        #: The generated code returns new arrays of the declared types, never an input, a
        #: constant or one array twice (``Lowering.lower`` copies those): the runtime need not
        #: check. Collective helpers run Python code; their results are checked.
        self.fresh_results: bool = not self.uses_collectives
        #: No narrow types or thread setting: without ``out`` or a cancel flag, ``run`` calls
        #: the entry at once, with ``_plain_extra`` (the flag nobody sets, for a loop program).
        self._plain = self._simple and not self._threaded
        self._plain_extra = (_NOT_CANCELLED,) if self.cancellable else ()

    # -- running --

    def direct_entry(self) -> Callable[..., tuple[np.ndarray, ...]] | None:
        """The generated entry itself, for a plain program (see ``direct_entry`` in the
        runtime's compiler protocol); a loop program's gets the flag nobody sets appended."""
        if not self._plain or not self.fresh_results:
            return None
        entry = self._entry
        if not self._plain_extra:
            return cast("Callable[..., tuple[np.ndarray, ...]]", entry)
        extra = self._plain_extra

        def with_flag(*args: np.ndarray) -> tuple[np.ndarray, ...]:
            return entry(*args, *extra)

        return with_flag

    def run(self, args: Sequence[np.ndarray], out: Sequence[np.ndarray | None] | None = None, *,
            cancel: np.ndarray | None = None) -> list[np.ndarray]:
        if self._plain and out is None and cancel is None:
            # The common call, kept short: it is most of a tiny program's run.
            try:
                return list(self._entry(*args, *self._plain_extra))
            except TypeError:
                pass  # arguments numba's dispatcher would not take as they are: the general path
        extra = (_NOT_CANCELLED if cancel is None else cancel,) if self.cancellable else ()
        if self._threaded:
            with _threads_for(self._threads):
                return self._run(args, out, extra)
        return self._run(args, out, extra)

    def _run(self, args: Sequence[np.ndarray], out: Sequence[np.ndarray | None] | None,
             extra: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        if self._simple:
            try:
                results = self._entry(*args, *extra)
            except TypeError:
                results = self._entry(*self._coerce(args), *extra)
        else:
            results = self._run_narrow(args, extra)
        if out is None:
            return list(results)
        results = list(results)
        for i, o in enumerate(out):
            if o is not None:
                np.copyto(o, results[i])
                results[i] = o
        return results

    def _run_narrow(self, args: Sequence[np.ndarray], extra: tuple[np.ndarray, ...] = ()) -> list[np.ndarray]:
        args = list(self._coerce(args))
        for i in self._narrow_in:
            args[i] = args[i].view(f"u{args[i].dtype.itemsize}")
        results = list(self._entry(*args, *extra))
        for i in self._narrow_out:
            results[i] = results[i].view(self.outputs[i].dtype)
        return results

    def _coerce(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(args) != len(self.inputs):
            raise InvalidArgument(f"{self.name}: expected {len(self.inputs)} arguments, got {len(args)}")
        fixed = []
        for i, (a, spec) in enumerate(zip(args, self.inputs)):
            a = np.asarray(a)
            if a.shape != spec.shape or a.dtype != spec.dtype:
                raise InvalidArgument(
                    f"{self.name}: argument {i} is {a.dtype}{list(a.shape)}, the program expects "
                    f"{spec.dtype}{list(spec.shape)}")
            if not a.flags.c_contiguous or not a.flags.writeable or not a.flags.aligned:
                a = np.array(a, order="C", copy=True)
            fixed.append(a)
        return fixed

    # -- introspection --

    def cost_analysis(self) -> Mapping[str, float]:
        return dict(self._cost)

    @property
    def source(self) -> str:
        """The generated Python module (for debugging and the curious)."""
        return self._source

    def serialize(self) -> bytes:
        payload = {"format": _SERIAL_FORMAT, "fingerprint": self.fingerprint, "source": self._source,
                   "numba": _numba_version()}
        return json.dumps(payload).encode("utf-8")

    def __repr__(self) -> str:
        return f"<NumbaProgram {self.name} {self.fingerprint[:12]}>"


class NumbaCompiler:
    """The numba ``ProgramCompiler``. One instance can be shared; it is thread-safe.

    With ``tiered=True`` (what the plugin uses; ``PJRT_HUB_NUMBA_TIERS=0`` turns it off, and
    the compile option ``numba_cpu_tiered=false`` for one program) a program whose compiled
    code is not loaded yet comes back as a :class:`~.tiers.TieredProgram`: it runs on the eager
    numpy tier at once, and numba compiles it in a background process once it has run
    ``compile_after`` times (see :mod:`.tiers`). Otherwise ``compile`` returns the compiled
    :class:`NumbaProgram`, compiling in this thread.
    """

    name = "numba_cpu"
    #: The compile options (``env_option_overrides``) it reads; see _lowering_options, _tiered_for.
    option_names = ("numba_cpu_num_threads", "numba_cpu_parallel_threshold", "numba_cpu_stream_min_bytes",
                    "numba_cpu_tiered")

    def __init__(self, cache_dir: str | os.PathLike | None = None, *, num_threads: int | None = None,
                 parallel_threshold: int | None = None, stream_min_bytes: int | None = None, tiered: bool = False,
                 compile_after: int | None = None) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.stats = CacheStats()
        keep_freed_memory()  # outputs reuse what the last run freed (see .heap)
        fault_without_compaction()  # and new memory faults in without waiting (see .heap)
        self._num_threads = num_threads
        self._parallel_threshold = parallel_threshold
        self._stream_min_bytes = stream_min_bytes
        env = _env_flag("PJRT_HUB_NUMBA_TIERS")
        self.tiered = tiered if env is None else env
        if self.tiered:
            from . import machine_kernels

            machine_kernels.preload()  # for the eager tier's first runs (see .machine_kernels)
        if compile_after is None:
            compile_after = _compile_after_from_environment()
        #: Eager runs of a program before its background compile starts (0: at compile time).
        self.compile_after = max(0, compile_after)
        self._lock = threading.RLock()
        # Weak: a program lives as long as an executable uses it, and its generated module is
        # unregistered from sys.modules when it goes (see _import), so compiling many distinct
        # programs and dropping them does not grow the process. (Tiered programs too.)
        self._programs: weakref.WeakValueDictionary[str, NumbaProgram | TieredProgram] = weakref.WeakValueDictionary()
        #: Cache files found corrupt and recompiled (each warned about once).
        self._warned: set[str] = set()

    def warm_up(self) -> None:
        """Do numba's one-time start-up now (import, target initialisation, the helper modules):
        about half a second that would otherwise land on the first compile of the process.
        Meant for plugin/client creation."""
        from numba.core.registry import cpu_target

        from . import collective_rules, kernels, rules, support  # noqa: F401

        cpu_target.target_context.refresh()
        cpu_target.typing_context.refresh()

    # -- options --

    def _lowering_options(self, options: CompileOptions | None) -> LoweringOptions:
        from .codegen import LoweringOptions

        env = dict(getattr(options, "env_option_overrides", None) or {})
        threads = int(env.get("numba_cpu_num_threads", self._num_threads or _default_threads()))
        threshold = int(env.get("numba_cpu_parallel_threshold",
                                self._parallel_threshold if self._parallel_threshold is not None
                                else LoweringOptions.parallel_threshold))
        stream = int(env.get("numba_cpu_stream_min_bytes",
                             self._stream_min_bytes if self._stream_min_bytes is not None
                             else LoweringOptions.stream_min_bytes))
        return LoweringOptions(parallel_threshold=threshold, num_threads=max(1, threads), stream_min_bytes=stream)

    def _tiered_for(self, options: CompileOptions | None) -> bool:
        env = dict(getattr(options, "env_option_overrides", None) or {})
        value = env.get("numba_cpu_tiered")
        if value is None:
            return self.tiered
        return str(value).strip().lower() not in ("0", "false", "no", "off")

    @staticmethod
    def text_key(text: str, lopts: LoweringOptions) -> str:
        return hashlib.sha256(
            "\0".join([CODEGEN_VERSION, backend_digest(), _numba_version(), repr(lopts), text]).encode("utf-8")
        ).hexdigest()

    # -- compile --

    def compile(self, code: str | bytes, options: CompileOptions | bytes | None = None) -> NumbaProgram | TieredProgram:
        text = code.decode("utf-8") if isinstance(code, (bytes, bytearray, memoryview)) else code
        if isinstance(options, (bytes, bytearray, memoryview)):
            from pjrt_hub.abi import decode_compile_options

            options = decode_compile_options(bytes(options))
        lopts = self._lowering_options(options)
        text_key = self.text_key(text, lopts)
        tiered = self._tiered_for(options)
        with self._lock:
            prog = self._programs.get(text_key)
            if prog is not None:
                self.stats.memory_hits += 1
                return prog
            if tiered and not numba_loaded():
                # Loading even a cached program would import numba first: the eager tier
                # answers, unless it would take longer than that (a large cached program).
                prog = self._tiered_program(text, lopts, text_key)
                if prog is not None and not (self.cached(text_key) and prog.slower_than_loading):
                    self._programs[text_key] = prog
                    return prog.begin()
            prog = self._from_index(text_key)
            if prog is None and tiered:
                prog = self._tiered_program(text, lopts, text_key)
                if prog is not None:
                    prog.begin()
            if prog is None:
                from pjrt_hub.backends.stablehlo.nesting import run_deep

                source = run_deep(self._generate, text, lopts)
                prog = self._load(source, text_key)
            self._programs[text_key] = prog
            return prog

    def _tiered_program(self, text: str, lopts: LoweringOptions, text_key: str) -> TieredProgram | None:
        """The eager tier's program with a background compile to switch to, or None when the
        eager tier does not cover the program."""
        from .eager import EagerProgram, EagerUnsupported
        from .module import program_meta
        from .tiers import TieredProgram

        try:
            module, fn = _front_end(text)
        except RecursionError:  # nested deeper than this thread's stack: compiled only (run_deep)
            return None
        if module.num_replicas * module.num_partitions > 1:
            return None
        try:
            eager = EagerProgram(fn, lopts.num_threads)
        except (EagerUnsupported, RecursionError):
            return None
        meta = program_meta(module, fn)
        if meta["uses_collectives"]:
            return None
        self.stats.eager_programs += 1
        return TieredProgram(self, meta, eager, text, lopts, text_key)

    def _generate(self, text: str, lopts: LoweringOptions) -> str:
        from .codegen import Lowering
        from .module import render_module

        module, fn = _front_end(text)
        gen = Lowering(fn, lopts).lower()
        return render_module(module, fn, gen)

    def compile_to_cache(self, text: str, lopts: LoweringOptions, text_key: str) -> NumbaProgram:
        """Compile a program into the disk cache (what the background compile process does),
        and return it loaded."""
        with self._lock:
            prog = self._from_index(text_key)
            if prog is None:
                prog = self._load(self._generate(text, lopts), text_key)
            return prog

    def cached(self, text_key: str) -> bool:
        """Whether the disk cache has an entry for this text (not checked for soundness)."""
        return (self.cache_dir / "index" / text_key).is_file()

    def load_cached(self, text_key: str) -> NumbaProgram | None:
        """The compiled program of a text the disk cache holds, loaded into this process.
        Without the compiler's lock: the first load imports numba (half a second), and other
        threads' compiles must not wait for it."""
        return self._from_index(text_key)

    def _from_index(self, text_key: str) -> NumbaProgram | None:
        entry = self.cache_dir / "index" / text_key
        try:
            fingerprint = entry.read_text().strip()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._corrupt(entry, f"unreadable ({type(exc).__name__})")
            return None
        if not _FINGERPRINT.fullmatch(fingerprint):
            self._corrupt(entry, "not a module fingerprint")
            return None
        path = self.cache_dir / f"p_{fingerprint}.py"
        try:
            source = path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._corrupt(path, f"unreadable ({type(exc).__name__})", also=(entry,))
            return None
        if _fingerprint_of(source) != fingerprint:
            # Truncated or overwritten: the name says what the content must hash to.
            self._corrupt(path, "its content does not match its name", also=(entry,))
            return None
        try:
            prog = self._import(source, fingerprint, path)
        except CompileError as exc:
            # The module is what this backend generated, so a failure to load it is numba's
            # cache of it (truncated, or from another machine); compile it again.
            cause = exc.__cause__ or exc
            self._corrupt(path, f"numba could not load it: {type(cause).__name__}: {str(cause)[:200]}",
                          also=(entry,), keep=True)
            return None
        self.stats.index_hits += 1
        return prog

    def _corrupt(self, path: Path, why: str, also: Sequence[Path] = (), keep: bool = False) -> None:
        """Drop a broken cache entry (the program is compiled again), warning once per file."""
        self._broken(path, why, stacklevel=5)
        self._drop([*also] if keep else [path, *also])
        self._drop(self._numba_files(path))

    def _broken(self, path: Path, why: str, stacklevel: int = 4) -> None:
        """Count a broken cache file, warning once per file."""
        import warnings

        if str(path) not in self._warned:
            self._warned.add(str(path))
            warnings.warn(f"numba_cpu: cache file {path} is broken ({why}); the program is compiled again",
                          RuntimeWarning, stacklevel=stacklevel)
        self.stats.corrupt_entries += 1

    @staticmethod
    def _numba_files(path: Path) -> list[Path]:
        """numba's cache files of the generated module ``path``."""
        return list((path.parent / "__pycache__").glob(f"{path.stem}.*")) if path.suffix == ".py" else []

    @staticmethod
    def _drop(targets: Sequence[Path]) -> None:
        for target in targets:
            try:
                target.unlink()
            except OSError:
                pass

    def _load(self, source: str, text_key: str | None) -> NumbaProgram:
        fingerprint = _fingerprint_of(source)
        path = self.cache_dir / f"p_{fingerprint}.py"
        try:
            same = path.read_text() == source
        except (OSError, ValueError):
            same = False
        if same:
            self.stats.module_hits += 1
        else:
            _atomic_write(path, source)
            self.stats.misses += 1
        try:
            prog = self._import(source, fingerprint, path)
        except CompileError as exc:
            if not same:
                raise
            # A module identical to the generated one that does not load: numba's cache of it
            # is broken, or the module never compiled (an earlier failure left it). Once more
            # without numba's cache; only if that loads was the cache at fault.
            self._drop(self._numba_files(path))
            prog = self._import(source, fingerprint, path)
            cause = exc.__cause__ or exc
            self._broken(path, f"numba could not load it: {type(cause).__name__}: {str(cause)[:200]}")
        if text_key is not None:
            _atomic_write(self.cache_dir / "index" / text_key, fingerprint)
        return prog

    def _import(self, source: str, fingerprint: str, path: Path) -> NumbaProgram:
        for prog in list(self._programs.values()):
            if prog.fingerprint == fingerprint and isinstance(prog, NumbaProgram):
                return prog
        modname = f"pjrt_hub_numba_cache.p_{fingerprint}"
        spec = importlib.util.spec_from_file_location(modname, path)
        if spec is None or spec.loader is None:  # a .py path always has a spec and a loader
            raise CompileError(f"cannot import the generated module {path}")
        module = importlib.util.module_from_spec(spec)
        # numba finds a function's module through sys.modules, and reloading cached machine
        # code re-imports it by name: the module must be registered before it runs.
        sys.modules[modname] = module
        try:
            spec.loader.exec_module(module)
        except PjrtHubError:
            sys.modules.pop(modname, None)
            raise
        except Exception as exc:  # numba typing/lowering errors: a bug in a lowering rule
            sys.modules.pop(modname, None)
            raise CompileError(
                f"numba could not compile the generated code ({type(exc).__name__}: {str(exc)[:2000]}); "
                f"generated module: {path}") from exc
        entry = module.entry
        try:
            entry.disable_compile()
        except AttributeError:
            pass
        stats = getattr(entry, "stats", None)
        if stats is not None and getattr(stats, "cache_hits", None):
            self.stats.numba_cache_loads += sum(stats.cache_hits.values())
        prog = NumbaProgram(module, source, fingerprint, self.cache_dir)
        weakref.finalize(prog, _forget_module, modname, module)
        return prog

    # -- deserialize --

    def deserialize(self, data: bytes) -> NumbaProgram:
        try:
            payload = json.loads(bytes(data).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidArgument(f"not a serialized numba_cpu executable: {exc}") from None
        if not isinstance(payload, dict) or payload.get("format") != _SERIAL_FORMAT:
            raise InvalidArgument(
                f"not a serialized numba_cpu executable (format {payload.get('format') if isinstance(payload, dict) else None!r}, "
                f"expected {_SERIAL_FORMAT!r})")
        source = payload["source"]
        with self._lock:
            prog = self._load(source, None)
        if prog.fingerprint != payload.get("fingerprint"):
            # Another numba version: the module was recompiled for this one, which is fine.
            pass
        return prog


_FINGERPRINT = re.compile(r"[0-9a-f]{32}")


def _fingerprint_of(source: str) -> str:
    return hashlib.sha256("\0".join([CODEGEN_VERSION, _numba_version(), source]).encode("utf-8")).hexdigest()[:32]


def numba_loaded() -> bool:
    """numba and the helper modules are imported: loading a cached program costs milliseconds."""
    return "pjrt_hub.backends.numba_cpu.support" in sys.modules


def _front_end(text: str) -> tuple[Module, Function]:
    """Parse, verify, inline and drop repeated ops: the module and its one call-free function."""
    from pjrt_hub.backends.stablehlo import parse_module
    from pjrt_hub.backends.stablehlo.nesting import call_depth

    from . import collective_rules, kernels, rules  # noqa: F401  (register the op rules)
    from .cse import eliminate_common_subexpressions
    from .inline import inline_calls
    from .resize import expand_resizing_bitcasts

    from pjrt_hub.backends.stablehlo.custom_calls import lower_custom_calls
    from pjrt_hub.backends.stablehlo.tokens import legalize_tokens

    module = parse_module(text)
    verify = _verifier()
    if verify is not None:
        verify(module)
    module = legalize_tokens(lower_custom_calls(module))
    call_depth(module)
    return module, eliminate_common_subexpressions(expand_resizing_bitcasts(inline_calls(module)))


def _forget_module(name: str, module: ModuleType) -> None:
    """Unregister a generated module once no program uses it (unless a newer import of the same
    name took its place)."""
    if sys.modules.get(name) is module:
        del sys.modules[name]


def _verifier() -> Callable[[Module], object] | None:
    try:
        from pjrt_hub.backends.stablehlo import verify
    except ImportError:
        return None
    return verify


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
