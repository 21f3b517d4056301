"""Run one StableHLO program on one plugin: the engine of ``pjrt-hub run`` (and of ``bench``).

The contract of ``run``: the arguments of ``@main`` are ``in0..inN`` of an ``.npz`` file, in
order; the results are written as ``out0..outM``. Inputs are checked against ``@main``'s
signature before the plugin sees them, so a wrong count, shape or dtype gets the same clear
message on every plugin, C plugins included.

Time limits (``run --timeout``) bound running the program: from the input transfers to the
results on the host. Creating the client and compiling are not counted: a cold numba_cpu
compile takes seconds, and a run killed while compiling would never fill the compile cache, so
every later run would be cold too. The execution gets what is left of the limit as
``ExecuteOptions.timeout``, so a plugin that can stop it (numba_cpu, reference) does, and the
client stays usable. A plugin that cannot (a C plugin: the PJRT C API has no cancellation, and
XLA:CPU even runs a small program inside the ``execute`` call) is waited for on a helper thread
(:func:`within`) and left running once the limit has passed: :class:`LeftRunning` says so, and
:func:`exit_when_done` ends the process at exit without tearing down a client whose work is
still going on.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import re
import stat
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Sequence, TypeVar

import numpy as np

from pjrt_hub.abi import CompileOptions, DeadlineExceeded, ExecuteOptions, PjrtHubError, Program

__all__ = ["BadInput", "LeftRunning", "OutputRefused", "RunClock", "RunResult", "check_inputs",
           "check_output_path", "exit_when_done", "host_array", "load_inputs", "main_signature", "npz_array",
           "read_npz", "read_program", "run_program", "within", "write_npz_atomically"]

_T = TypeVar("_T")

#: How long past a time limit a plugin gets to report that it stopped the execution itself.
GRACE_SECONDS = 1.0

_INPUT_KEY = re.compile(r"in(\d+)")
#: Expected outputs may ride along in the same file (the corpus's .npz files do).
_OUTPUT_KEY = re.compile(r"out\d+")


class BadInput(PjrtHubError):
    """The program or its inputs are wrong (what ``pjrt-hub run`` exits 3 for)."""


def load_inputs(path: str | Path) -> list[np.ndarray]:
    """Read ``in0..inN`` from an ``.npz`` file, in order. ``out*`` arrays beside them are
    expected outputs and are skipped; a file of ``out0..outM`` alone (what ``run --out``
    wrote) is read as ``in0..inM``, so an output file feeds back as an input file."""
    arrays = read_npz(path)
    if arrays and all(_OUTPUT_KEY.fullmatch(key) for key in arrays):
        arrays = {"in" + key[3:]: value for key, value in arrays.items()}
    indices: dict[int, str] = {}
    for key in arrays:
        match = _INPUT_KEY.fullmatch(key)
        if match is None and _OUTPUT_KEY.fullmatch(key):
            continue
        if match is None:
            raise BadInput(f"{path}: unexpected array {key!r}; inputs must be named in0, in1, ...")
        index = int(match.group(1))
        if key != f"in{index}":
            # in00 and in0 would both be argument 0: which one was meant cannot be told.
            twin = f" (and in{index} is there too)" if f"in{index}" in arrays else ""
            raise BadInput(f"{path}: array name {key!r} is ambiguous{twin}; inputs are named "
                           f"in0, in1, ... without leading zeros")
        indices[index] = key
    missing = [i for i in range(len(indices)) if i not in indices]
    if missing:
        raise BadInput(f"{path}: inputs must be in0..in{len(indices) - 1} without gaps; "
                       f"missing {', '.join(f'in{i}' for i in missing)}")
    return [arrays[indices[i]] for i in range(len(indices))]


# -- reading and writing .npz files -------------------------------------------------------------
#
# np.load trusts its file: a truncated archive, a corrupt member or a header that claims 4 TiB
# come out as zipfile, zlib, EOFError or MemoryError tracebacks, and a member that is not .npy
# comes back as bytes. The archive is read here member by member instead: every header is
# checked against the bytes the member really holds before anything is allocated, and pickled
# (object) members are refused without being unpickled.

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK"


def _human(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _open_regular(path: Path, what: str) -> BinaryIO:
    """Open a regular file for reading; BadInput naming it otherwise (a FIFO or a device could
    block or never end, and a directory is a slip of the shell)."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{what} {path} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{what} {path} is not a regular file (a device, pipe or socket)")
        return open(path, "rb")
    except FileNotFoundError:
        raise BadInput(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive by name, or BadInput naming the file and what is wrong."""
    path = Path(path)
    with _open_regular(path, "input file") as f:
        head = f.read(len(_NPY_MAGIC))
        if not head:
            raise BadInput(f"input file {path} is empty; expected an .npz archive written by "
                           "numpy.savez(path, in0=..., in1=...)")
        if head == _NPY_MAGIC:
            raise BadInput(f"input file {path} is a single .npy array, not an .npz archive; write "
                           "the inputs with numpy.savez(path, in0=..., in1=...)")
        if not head.startswith(_ZIP_MAGIC):
            raise BadInput(f"input file {path} is not an .npz archive (no zip header); write the "
                           "inputs with numpy.savez(path, in0=..., in1=...)")
        f.seek(0)
        try:
            archive = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
            raise BadInput(f"input file {path} is not a readable .npz archive (truncated or "
                           f"corrupt: {exc})") from None
        with archive:
            members = archive.infolist()
            names = [m.filename for m in members]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise BadInput(f"input file {path} holds more than one member named "
                               f"{', '.join(map(repr, twice))}")
            return {_array_name(path, m): _read_member(path, archive, m) for m in members}


def _array_name(path: Path, member: zipfile.ZipInfo) -> str:
    if not member.filename.endswith(".npy") or member.is_dir():
        raise BadInput(f"input file {path}: member {member.filename!r} is not a .npy array; "
                       "write the inputs with numpy.savez(path, in0=..., in1=...)")
    return member.filename[:-len(".npy")]


def _read_member(path: Path, archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> np.ndarray:
    name = member.filename[:-len(".npy")]
    where = f"input file {path}: array {name!r}"
    try:
        with archive.open(member) as fp:
            assert isinstance(fp, zipfile.ZipExtFile)  # what open() reads with: it has readinto
            version = np.lib.format.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
            else:
                raise BadInput(f"{where} has .npy format version {version}, which numpy does not write")
            if dtype.hasobject:
                raise BadInput(f"{where} holds Python objects (dtype {dtype}), which would have to be "
                               "unpickled; pjrt-hub never unpickles, pass numeric arrays")
            if dtype.fields is not None or dtype.subdtype is not None:
                raise BadInput(f"{where} has a structured dtype {dtype}; inputs are plain tensors")
            if any(d < 0 for d in shape):
                raise BadInput(f"{where} has a negative dimension in its shape {shape}")
            count = 1
            for d in shape:
                count *= d
            nbytes = count * dtype.itemsize
            held = member.file_size - fp.tell()
            if nbytes > held:
                raise BadInput(f"{where} claims {dtype}{list(shape)} ({_human(nbytes)}) but holds "
                               f"{_human(max(held, 0))}: the file is truncated or corrupt")
            memory = _physical_memory()
            if memory is not None and nbytes > memory:
                raise BadInput(f"{where} needs {_human(nbytes)}, more than this machine's memory "
                               f"({_human(memory)})")
            data = bytearray(nbytes)
            view, got = memoryview(data), 0
            while got < nbytes:
                n = fp.readinto(view[got:])
                if not n:
                    raise BadInput(f"{where} ends after {_human(got)} of {_human(nbytes)}: the file "
                                   "is truncated or corrupt")
                got += n
    except BadInput:
        raise
    except MemoryError:
        raise BadInput(f"{where} does not fit in memory") from None
    except Exception as exc:  # noqa: BLE001 - zipfile, zlib and numpy's header parser raise many kinds
        detail = str(exc) or type(exc).__name__
        raise BadInput(f"{where} cannot be read (truncated or corrupt: {' '.join(detail.split())})") from None
    array = np.frombuffer(data, dtype=dtype, count=count)
    return array.reshape(shape, order="F" if fortran else "C")


class OutputRefused(PjrtHubError):
    """``--out`` names a place the results must not or cannot go (a usage error, exit 2)."""


def check_output_path(out: str | Path, *, protected: Sequence[str | Path]) -> Path:
    """Where the results will go, checked before any work is done: its directory exists, it is
    not a directory, and it is none of the ``protected`` files (the program, the inputs), compared
    by resolved path and by identity (a hard link or a symlink to an input is that input)."""
    out = Path(out)
    try:
        target = out.resolve()
    except (OSError, RuntimeError) as exc:
        raise OutputRefused(f"--out {out}: {exc}") from None
    if target.is_dir():
        raise OutputRefused(f"--out {out} is a directory; name the file to write, e.g. {out / 'out.npz'}")
    if not target.parent.is_dir():
        raise OutputRefused(f"--out {out}: directory {out.parent} does not exist")
    for other in protected:
        other = Path(other)
        try:
            same = target == other.resolve() or (target.exists() and os.path.samefile(target, other))
        except OSError:
            same = False
        if same:
            raise OutputRefused(f"--out {out} is {other}, an input of this run; it would be "
                                "overwritten: write the results to another file")
    return out


def write_npz_atomically(out: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` to exactly ``out`` (no ``.npz`` appended): a temporary file in the same
    directory, then a rename, so a reader never sees half a file and a failure leaves the old one.

    An ``out`` that exists and is not a regular file (``/dev/null``, a FIFO a reader waits on)
    is written into as it is: renaming over it would replace the device or pipe with a file."""
    out = Path(out)
    # savez's one keyword of its own is allow_pickle, which no output name ("out<i>") is.
    members: dict[str, Any] = arrays
    try:
        special = not stat.S_ISREG(os.stat(out).st_mode) and not out.is_dir()
    except OSError:
        special = False
    if special:  # a zip needs seeking, which a device or pipe does not do: built in memory first
        buffer = io.BytesIO()
        np.savez(buffer, **members)
        with open(out, "wb") as f:
            f.write(buffer.getbuffer())
        return out
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **members)
            f.flush()
            os.fsync(f.fileno())
        try:
            mode = stat.S_IMODE(os.stat(out).st_mode)
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return out


def read_program(path: str | Path) -> str:
    """The program text of ``path``, or BadInput naming it and what is wrong with it."""
    path = Path(path)
    with _open_regular(path, "program") as f:
        try:
            raw = f.read()
        except OSError as exc:
            raise BadInput(f"cannot read program {path}: {exc.strerror or exc}") from None
    if raw.startswith(b"ML\xefR"):
        raise BadInput(f"program {path} is MLIR bytecode; pjrt-hub run reads StableHLO text as JAX "
                       "prints it (jax.jit(f).lower(...).as_text())")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"program {path} is not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); "
                       "pjrt-hub run reads StableHLO text as JAX prints it") from None


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
        module = parse_module(text)
    except Exception:  # noqa: BLE001 - any parser failure just means "no pre-check"
        return None
    # A module the parser reads but that has no @main is refused here (CompileError), the same
    # way for every plugin: no plugin may run another function in its place.
    main = module.main
    try:
        return [(tuple(v.tensor_type.shape), v.tensor_type.dtype) for v in main.args]
    except Exception:  # noqa: BLE001 - an argument type without a numpy dtype: the plugin judges
        return None


def _spell(shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


def check_inputs(signature: Sequence[tuple[tuple[int, ...], np.dtype]],
                 arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The arrays as ``@main``'s arguments (see :func:`as_argument`); BadInput names the first
    argument whose count, shape or dtype is wrong."""
    if len(arrays) != len(signature):
        given = f"in0..in{len(arrays) - 1}" if len(arrays) > 1 else "in0" if arrays else "none"
        raise BadInput(f"@main takes {len(signature)} arguments but {len(arrays)} inputs were given ({given})")
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


class LeftRunning(DeadlineExceeded):
    """A time limit passed and the plugin could not stop its work: it goes on in this process."""


class RunClock:
    """The time limit of one run, shared by the thread doing the work and the one waiting.

    ``deadline`` is set when the program starts running (:meth:`start`), so the limit does not
    count client creation and compile; ``stage`` says what the plugin is doing.
    """

    __slots__ = ("limit", "deadline", "stage")

    def __init__(self, limit: float | None) -> None:
        #: Seconds, or None for no limit.
        self.limit = limit
        #: ``time.monotonic()`` by which the run must be done (None: not running yet).
        self.deadline: float | None = None
        self.stage = "creating the client"

    def start(self) -> None:
        if self.limit is not None and self.deadline is None:
            self.deadline = time.monotonic() + self.limit

    def left(self) -> float | None:
        """Seconds left (None without a limit)."""
        if self.deadline is None:
            return self.limit
        return max(self.deadline - time.monotonic(), 0.0)

    def passed(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def run_program(client: Any, text: str, arrays: Sequence[np.ndarray], *,
                options: CompileOptions | None = None, timeout: float | None = None,
                clock: RunClock | None = None) -> RunResult:
    """Compile ``text`` on ``client``, run it on ``arrays`` on the first device, return host arrays.

    ``timeout`` (or ``clock``, shared with :func:`within`) bounds the run from the input
    transfers on. The execution gets what is left as ``ExecuteOptions.timeout``; a plugin that
    stops the execution reports DeadlineExceeded on its completion event, which is raised here.
    If an event is still pending :data:`GRACE_SECONDS` after the limit, the plugin could not
    stop the work: :class:`LeftRunning`, and nothing of the run is destroyed, since the plugin
    may still be using it.
    """
    clock = clock or RunClock(timeout)
    keep = False

    def wait(event: Any, what: str) -> None:
        """Await ``event``; a wait that runs out while it is pending means work left running."""
        nonlocal keep
        left = clock.left()
        try:
            event.await_(None if left is None else left + GRACE_SECONDS)
        except DeadlineExceeded:
            if event.is_ready():
                raise  # the plugin stopped the work at the limit and says so
            keep = True
            raise LeftRunning(f"{what} was still pending {GRACE_SECONDS:g} s after the limit") from None

    t0 = time.perf_counter()
    clock.stage = "compiling"
    executable = client.compile(Program(text, "mlir"), options or CompileOptions())
    t1 = time.perf_counter()
    try:
        clock.stage = "transferring the inputs"
        clock.start()
        device = client.addressable_devices()[0]
        buffers = []
        for array in arrays:
            transfer = client.buffer_from_host_buffer(host_array(array), device=device)
            buffers.append(transfer.buffer)
            wait(transfer.done_with_host_buffer, "an input transfer")
        t2 = time.perf_counter()
        clock.stage = "executing"
        left = clock.left()
        result = executable.execute([buffers], None if left is None else ExecuteOptions(timeout=left))
        for event in result.device_complete_events:
            wait(event, "the execution")
        clock.stage = "reading the results"
        outputs = []
        for buffer in result.outputs[0]:
            host = buffer.to_host_buffer()
            wait(host.event, "a transfer of the results")
            outputs.append(host.array)
        t3 = time.perf_counter()
        for buffer in [*buffers, *result.outputs[0]]:
            buffer.destroy()
    finally:
        if not keep:
            executable.destroy()
    return RunResult(outputs, t1 - t0, t3 - t2)


def within(clock: RunClock, work: Callable[[], _T]) -> _T:
    """``work()``, given up on 2 x :data:`GRACE_SECONDS` after ``clock``'s deadline.

    The work runs on a daemon thread, because a plugin call may never return (a C plugin's
    ``execute`` can run the program before it returns). Its result or exception is handed back
    here; if it is still running when the wait ends, :class:`LeftRunning` is raised and the
    thread is left to run (nothing in Python can stop it). The wait is longer than the grace
    :func:`run_program` gives the plugin, so that a plugin call that does return gets to say
    how the work ended. Before the clock starts (client creation, compile) there is no limit.
    """
    if clock.limit is None:
        return work()
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name="pjrt-hub run", daemon=True)
    thread.start()
    while thread.is_alive():
        deadline = clock.deadline
        if deadline is None:
            thread.join(0.05)  # not running the program yet: no limit, look again soon
            continue
        left = deadline + 2 * GRACE_SECONDS - time.monotonic()
        if left <= 0:
            break
        thread.join(left)
    if not outcome:
        raise LeftRunning(f"the plugin did not return {2 * GRACE_SECONDS:g} s after the limit")
    ok, value = outcome[0]
    if ok:
        return value
    raise value


def exit_when_done(code: int) -> None:
    """End the process with ``code`` at interpreter exit, skipping the rest of the teardown.

    For when plugin work that cannot be stopped is still running (:class:`LeftRunning`): the
    usual teardown would destroy its client under it (the C bridge destroys live clients at
    exit), which may wait for the work forever or crash. Registered last, this handler runs
    before the others; output is flushed first. A caller of ``pjrt_hub.cli.main`` inside a
    longer-lived process gets this too: its process ends with ``code`` when it exits.
    """

    def end() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)

    atexit.register(end)
