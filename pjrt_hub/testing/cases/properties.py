"""properties: the calls that take data, on generated inputs, side by side with the reference plugin.

Each case draws its inputs with Hypothesis (shapes from 0-d to 4-d with empty dimensions, every
element type both plugins carry, host arrays with any strides, each host-buffer semantics and
memory, small elementwise programs with and without donation, sequences of buffer operations,
executions from several threads at once), makes the same calls on the plugin under test and on
the reference plugin (pjrt-hub's numpy interpreter, reached through discovery like any plugin, one
client per run), and compares what each showed: values bit for bit (any NaN matching any NaN in
computed results, whose payloads are the hardware's), element types, dimensions, error codes up to
the class within which PJRT's implementations differ, readiness, which buffers are alive. What
PJRT promises whatever the oracle does (the host array untouched, a buffer alive until deleted, a
copy to host or to another device independent of its source, donation exactly as the program
asks) is checked on the plugin by itself, so the cases still mean something when the plugin under
test is the reference plugin, or when a defect sits in the runtime the two share. Hypothesis runs
bounded and reproducible: derandomized (a fixed seed per property), no example database, no
deadline, a few dozen examples; a failure is shrunk and its minimal input is written into the
case's message. Programs use only the ops both plugins compile (probed once per run): a compiler's
op coverage is the compile and numerics groups' concern, not this one's.
"""

from __future__ import annotations

import queue
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from pjrt_hub.abi import (BufferType, ErrorCode, ExecuteOptions, HostBufferSemantics, NotFound, PjrtError,
                          to_numpy_dtype)
from pjrt_hub.abi.types import mlir_element_type

from .._case import CaseFailure, CaseSkipped, case, fail, skip
from .._context import CALL_TIMEOUT, COMPILE_TIMEOUT, PluginUnderTest, describe
from .._programs import Tolerance, _module, framework_options, tensor
from .buffers import _SUB_BYTE_BITS, REQUIRED_TYPES, TYPE_MINORS, _types_with_numpy, sample
from .client import device_id
from .extensions import _unwrap

#: The plugin whose answers the others are compared with.
ORACLE = "reference"

#: The codes with which a caller's mistake is refused (a bad argument, or an object in the wrong
#: state): abi/errors.py and XLA's clients name different ones for the same misuse (a deleted
#: buffer, see errors.GONE), so a difference within this class is not a finding.
REFUSED = frozenset({ErrorCode.INVALID_ARGUMENT, ErrorCode.FAILED_PRECONDITION})

#: Exact comparison (the corpus manifests' rule with no tolerance): used for the dtype and shape
#: of every result, and to word a difference in values.
EXACT = Tolerance()

#: Seconds a property may take: a few dozen examples of a few plugin calls each, and the
#: shrinking of a failure.
PROPERTY_TIMEOUT = 120.0

#: The element types of generated programs, the first the simplest (Hypothesis shrinks toward it).
PROGRAM_TYPES = (BufferType.F32, BufferType.S32, BufferType.F64, BufferType.F16, BufferType.BF16, BufferType.S8,
                 BufferType.S16, BufferType.S64, BufferType.U8, BufferType.U16, BufferType.U32, BufferType.U64)
_FLOATS = frozenset({BufferType.F16, BufferType.BF16, BufferType.F32, BufferType.F64})
_SIGNED = (BufferType.S8, BufferType.S16, BufferType.S32, BufferType.S64)
_UNSIGNED = (BufferType.U8, BufferType.U16, BufferType.U32, BufferType.U64)
BINARY = ("add", "subtract", "multiply", "maximum", "minimum")
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


# -- running Hypothesis inside a case ------------------------------------------------------------


def _settings(examples: int, *, shrink: bool) -> settings:
    phases = (Phase.explicit, Phase.generate, Phase.shrink) if shrink else (Phase.explicit, Phase.generate)
    # derandomize: the same examples on every run and machine (a seed per property, derived from
    # its code); database=None: nothing written where the user runs the suite; no deadline: the
    # time of a plugin call is not a property of the plugin here.
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=phases,
                    report_multiple_bugs=False, print_blob=False, verbosity=Verbosity.quiet,
                    suppress_health_check=list(HealthCheck))


def explore(strategy: st.SearchStrategy[Any], prop: Callable[[Any], None], *, examples: int,
            shrink: bool = True) -> None:
    """Run ``prop`` on ``examples`` inputs drawn from ``strategy``; a failure is shrunk and
    reported with its minimal input (each example describes itself: ``describe()``)."""

    @_settings(examples, shrink=shrink)
    @given(strategy)
    def check_one(example: Any) -> None:
        try:
            prop(example)
        except CaseFailure as exc:
            raise CaseFailure(f"{exc}\nMinimal input (Hypothesis, derandomized): {example.describe()}") from None
        except PjrtError as exc:  # from a call whose every error is a failure (a buffer's metadata)
            raise CaseFailure(f"a call failed: {describe(exc)}\nMinimal input (Hypothesis, derandomized): "
                              f"{example.describe()}") from None

    try:
        check_one()
    except Flaky as exc:
        # The same input failed once and passed when run again: a race or a stale state is a
        # failure all the same.
        inner = getattr(exc, "exceptions", ())
        details = "; ".join(str(e) for e in inner) or str(exc)
        fail(f"a property failed, then passed when Hypothesis ran the same input again (the plugin's answers "
             f"change from run to run): {details}")


# -- the two sides -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Refused:
    """A call that failed with a PJRT error (the message is shown, never compared)."""

    code: ErrorCode
    message: str

    @property
    def klass(self) -> str:
        return "a refusal (INVALID_ARGUMENT or FAILED_PRECONDITION)" if self.code in REFUSED else self.code.name

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


@dataclass(frozen=True, eq=False)
class Values:
    """An array that came back to the host. ``computed``: made by a program, where any NaN
    matches any NaN; a copied array keeps every bit."""

    array: np.ndarray
    computed: bool = False


class _Caller:
    """Makes one plugin's calls on a thread of its own, waiting for each at most its bound, as
    :meth:`PluginUnderTest.call` does; but one thread serves every call (a thread started per
    call costs more than most calls here, thousands per property). A call that does not return in
    time fails the case, and its thread is left behind: the next call gets a new one."""

    def __init__(self, ctx: PluginUnderTest) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Any] | None = None

    def __call__(self, fn: Callable[..., Any], args: Any, kwargs: Any, what: str, timeout: float) -> Any:
        limit = self._ctx.seconds(timeout)
        self._ctx.step = what
        with self._lock:
            if self._queue is None:
                self._queue = queue.SimpleQueue()
                threading.Thread(target=_serve, args=(self._queue,), name="pjrt-conformance properties calls",
                                 daemon=True).start()
            tasks = self._queue
        done = threading.Event()
        box: dict[str, Any] = {}
        tasks.put((fn, args, kwargs, done, box))
        if not done.wait(limit):
            with self._lock:
                if self._queue is tasks:
                    self._queue = None  # its thread is stuck in the plugin
            raise CaseFailure(f"{what} did not return within {limit:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]


def _serve(tasks: "queue.SimpleQueue[Any]") -> None:
    while True:
        fn, args, kwargs, done, box = tasks.get()
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
        finally:
            done.set()


class Side:
    """One plugin as the properties drive it: its client, its devices, how a call is bounded."""

    def __init__(self, name: str, client: Any, *, ctx: PluginUnderTest | None = None,
                 layouts: Any = None, timeout_scale: float = 1.0) -> None:
        self.name = name
        self.client = client
        self.devices = list(client.addressable_devices())
        if not self.devices:
            raise CaseFailure(f"{name}: PJRT_Client_AddressableDevices returned no device")
        self.layouts = layouts
        self._caller = _Caller(ctx) if ctx is not None else None
        self.timeout_scale = timeout_scale
        #: Compiled programs by text, reused across examples (a framework compiles a program once).
        self.executables: dict[str, Any] = {}

    @property
    def seconds(self) -> float:
        return CALL_TIMEOUT * self.timeout_scale

    def call(self, fn: Callable[..., Any], *args: Any, what: str, timeout: float = CALL_TIMEOUT,
             **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; for the plugin under test bounded by ``timeout`` s (the oracle
        is trusted)."""
        if self._caller is not None:
            return self._caller(fn, args, kwargs, what, timeout)
        return fn(*args, **kwargs)

    def attempt(self, fn: Callable[..., Any], *args: Any, what: str, timeout: float = CALL_TIMEOUT,
                **kwargs: Any) -> Any:
        """The call's value, or :class:`Refused` for a PJRT error; any other exception is the
        plugin's failure to answer with a PJRT error."""
        try:
            return self.call(fn, *args, what=what, timeout=timeout, **kwargs)
        except PjrtError as exc:
            return Refused(exc.code, exc.message)
        except (CaseFailure, CaseSkipped):
            raise
        except Exception as exc:  # noqa: BLE001 - a bare Python error is the finding
            fail(f"{what}: {self.name} raised {type(exc).__name__}: {exc} instead of a PJRT error")

    def wait(self, event: Any, what: str) -> Refused | None:
        """Await ``event``: None when it becomes ready without an error, else the error."""
        # The plugin gets the bound too, so that a well-behaved one leaves no thread behind.
        return _as_none(self.attempt(event.await_, self.seconds, what=f"{what}: PJRT_Event_Await",
                                     timeout=CALL_TIMEOUT + 1.0))

    def put(self, array: np.ndarray, *, device: int = 0, memory: str | None = None,
            semantics: HostBufferSemantics = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL) -> Any:
        """``PJRT_Client_BufferFromHostBuffer`` onto device ``device`` (taken modulo the devices
        there are), into its memory of kind ``memory`` if it has one (else its default memory):
        the HostTransfer, or Refused."""
        return self.attempt(self.client.buffer_from_host_buffer, array, semantics=semantics,
                            what="PJRT_Client_BufferFromHostBuffer", **self.placement(device, memory))

    def placement(self, device: int, memory: str | None) -> dict[str, Any]:
        target = self.devices[device % len(self.devices)]
        if memory is not None:
            for candidate in target.addressable_memories():
                if candidate.kind() == memory:
                    return {"memory": candidate}
        return {"device": target}

    def fetch(self, buffer: Any, what: str = "PJRT_Buffer_ToHostBuffer") -> np.ndarray | Refused:
        result = self.attempt(buffer.to_host_buffer, what=what)
        if isinstance(result, Refused):
            return result
        error = self.wait(result.event, what)
        return error if error is not None else np.asarray(result.array)

    def compiled(self, text: str) -> Any:
        """The executable of ``text`` (compiled once per run), or Refused."""
        if text not in self.executables:
            self.executables[text] = self.attempt(self.client.compile, _program(text), framework_options(),
                                                  what="PJRT_Client_Compile", timeout=COMPILE_TIMEOUT)
        return self.executables[text]

    def execute(self, executable: Any, arguments: Sequence[Any], options: ExecuteOptions | None = None
                ) -> list[Any] | Refused:
        """``PJRT_LoadedExecutable_Execute`` on one device, awaited: the outputs, or Refused (from
        the call or from the completion event)."""
        what = "PJRT_LoadedExecutable_Execute"
        result = self.attempt(executable.execute, [list(arguments)], options or ExecuteOptions(), what=what,
                              timeout=COMPILE_TIMEOUT)
        if isinstance(result, Refused):
            return result
        for event in result.device_complete_events or ():
            error = self.wait(event, what)
            if error is not None:
                return error
        return list(result.outputs[0])


def _program(text: str) -> Any:
    from pjrt_hub.abi import Program

    return Program(text)


def _as_none(value: Any) -> Refused | None:
    return value if isinstance(value, Refused) else None


def _call_minor(ctx: PluginUnderTest) -> int:
    """The newest minor whose calls the plugin may be asked for here (the version gate's limit)."""
    return ctx.call_limit if ctx.call_limit is not None else ctx.framework.minor


def plugin_side(ctx: PluginUnderTest) -> Side:
    def make() -> Side:
        layouts = ctx.api.extensions().get("Layouts") if "Layouts" in ctx.offered_extensions else None
        return Side(ctx.name, ctx.client, ctx=ctx, layouts=layouts, timeout_scale=ctx.timeout_scale)

    return ctx.memo("properties/plugin", make)


def oracle_side(ctx: PluginUnderTest) -> Side:
    """The reference plugin, from a registry of its own built from the environment as every
    command builds one, under the run's version policy: one client per run."""
    return ctx.memo("properties/oracle", lambda: _make_oracle(ctx))


def _make_oracle(ctx: PluginUnderTest) -> Side:
    from pjrt_hub import Outcome, PluginRegistry

    registry = PluginRegistry.from_environment(policy=ctx.registry.policy, requested=frozenset({ORACLE}))
    try:
        record = registry.record(ORACLE)
    except NotFound:
        skip(f"the oracle of the properties, plugin {ORACLE}, is not installed (its entry point "
             "pjrt_hub.plugins:reference is missing)")
    if record.outcome is not Outcome.LOADED:
        skip(f"the oracle of the properties, plugin {ORACLE}, cannot be used: {record.outcome.value}: {record.reason}")
    try:
        client = registry.create_client(ORACLE)
    except PjrtError as exc:
        skip(f"the oracle of the properties, plugin {ORACLE}, made no client: {describe(exc)}")
    return Side(ORACLE, client)


def sides(ctx: PluginUnderTest) -> tuple[Side, Side]:
    return plugin_side(ctx), oracle_side(ctx)


def _carried_types(side: Side, minor: int) -> frozenset[BufferType]:
    """The element types ``side`` takes from the host and gives back bit for bit."""
    kinds = set()
    for kind in _types_with_numpy():
        if TYPE_MINORS.get(kind, 0) > minor:
            continue
        host = sample(kind, (2,))
        transfer = side.put(host)
        if isinstance(transfer, Refused):
            continue
        back = side.fetch(transfer.buffer)
        if isinstance(back, np.ndarray) and _bit_difference(back, host, computed=False) is None:
            kinds.add(kind)
    return frozenset(kinds)


def common_types(ctx: PluginUnderTest) -> tuple[BufferType, ...]:
    """The element types both plugins carry, the required ones first (Hypothesis shrinks toward them)."""
    plugin, oracle = sides(ctx)
    minor = _call_minor(ctx)
    mine = ctx.memo("properties/types", lambda: _carried_types(plugin, minor))
    theirs = ctx.memo("properties/oracle_types", lambda: _carried_types(oracle, minor))
    both = mine & theirs
    missing = [k.name for k in REQUIRED_TYPES if k not in mine]
    if missing:
        fail(f"plugin {ctx.name} does not carry {', '.join(missing)} arrays from the host and back bit for bit "
             f"(see buffers/round_trip_*)")
    return tuple(k for k in REQUIRED_TYPES if k in both) + tuple(
        sorted((k for k in both if k not in REQUIRED_TYPES), key=int))


# -- comparing ---------------------------------------------------------------------------------


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or (dtype.kind == "V" and dtype.name.startswith(("bfloat", "float")))


def _nans(array: np.ndarray) -> np.ndarray:
    """Where a float array holds a NaN (any payload; either part of a complex)."""
    with np.errstate(invalid="ignore"):
        return np.isnan(array.astype(np.complex128 if array.dtype.kind == "c" else np.float64))


def _bytes(array: np.ndarray) -> np.ndarray:
    """Each element's bytes, along a last axis (any dtype, 0-d included)."""
    dense = np.array(array, order="C", copy=True)
    return dense.reshape(-1).view(np.uint8).reshape(dense.shape + (dense.dtype.itemsize,))


def _hex(array: np.ndarray, index: tuple[int, ...]) -> str:
    """The bits of one element, most significant first (as a hex literal reads)."""
    raw = _bytes(array)[index].tobytes()
    return "0x" + (raw[::-1] if sys.byteorder == "little" else raw).hex()


def _bit_difference(got: np.ndarray, want: np.ndarray, *, computed: bool) -> str | None:
    """None when ``got`` is ``want`` bit for bit (with any NaN matching any NaN if ``computed``);
    else the difference in words."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return EXACT.mismatch(got, want)
    bad = (_bytes(got) != _bytes(want)).any(axis=-1)
    if computed and _is_float(want.dtype):
        bad &= ~(_nans(got) & _nans(want))
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ bit for bit, first at {list(where)}: got "
            f"{got[where]!r} ({_hex(got, where)}), expected {want[where]!r} ({_hex(want, where)})")


def show(value: Any, *, every: bool = False) -> str:
    """A value for a message: an array with its first elements (``every``: all of them, and the
    bits of each where a NaN's payload would otherwise be lost)."""
    if isinstance(value, Values):
        value = value.array
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        shown = flat if every else flat[:8]
        text = ", ".join(repr(x) for x in shown.tolist()) + ("" if shown.size == flat.size else ", ...")
        if every and _is_float(value.dtype) and bool(_nans(value).any()):
            text += "; bits " + ", ".join(_hex(flat, (i,)) for i in range(flat.size))
        return f"{value.dtype}{list(value.shape)} [{text}]"
    if isinstance(value, Refused):
        return f"an error {value}"
    if isinstance(value, BufferType):
        return value.name
    return repr(value)


def disagreement(got: Any, want: Any) -> str | None:
    """Why the plugin's observation ``got`` is not the oracle's ``want``, or None."""
    if isinstance(got, Refused) or isinstance(want, Refused):
        if isinstance(got, Refused) and isinstance(want, Refused):
            return None if got.klass == want.klass else f"{got.klass} where the oracle gave {want.klass}"
        return "the call failed" if isinstance(got, Refused) else "the call succeeded"
    if isinstance(got, Values) and isinstance(want, Values):
        return _bit_difference(got.array, want.array, computed=want.computed)
    return None if got == want else "another answer"


class Observed:
    """What one plugin showed of one example, in order: ``seen`` is compared with the oracle's;
    ``own`` (sizes, places, layouts, which differ between plugins) only with what PJRT promises."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}
        self.own: dict[str, Any] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        self.seen[key] = value

    def __getitem__(self, key: str) -> Any:
        return self.seen.get(key)


def compare(plugin: Side, mine: Observed, oracle: Side, theirs: Observed) -> None:
    """Fail at the first observation where the plugin and the oracle differ."""
    for key in dict.fromkeys([*theirs.seen, *mine.seen]):
        if key not in mine.seen or key not in theirs.seen:
            shown = (f"{plugin.name} showed {show(mine.seen[key])}, {oracle.name} (the oracle) never got there"
                     if key in mine.seen else f"{plugin.name} never got there, {oracle.name} (the oracle) showed "
                     f"{show(theirs.seen[key])}")
            fail(f"{key}: {shown}")
        problem = disagreement(mine.seen[key], theirs.seen[key])
        if problem is not None:
            fail(f"{key}: {problem}: {plugin.name} gave {show(mine.seen[key])}, {oracle.name} (the oracle) gave "
                 f"{show(theirs.seen[key])}")


def promise(condition: object, message: str | Callable[[], str]) -> None:
    """What PJRT promises whatever the oracle does (``check`` by another name, for reading)."""
    if not condition:
        fail(message() if callable(message) else message)


# -- host arrays -------------------------------------------------------------------------------

#: How a generated host array lies in memory: ``detail`` is the axis permutation (transposed),
#: the step of each axis (steps), the axis of stride 0 (broadcast).
ARRANGEMENTS = ("dense", "transposed", "steps", "fortran", "broadcast", "byteswapped", "unaligned")
#: A byte the memory around and between a strided array's elements is filled with, so that a
#: plugin reading memory it should not read gets values it did not expect.
_SCRIBBLE = 0xA5


@dataclass(frozen=True, eq=False)
class HostArray:
    """A host array as a caller hands it over: element type, shape, memory arrangement, values."""

    kind: BufferType
    shape: tuple[int, ...]
    arrangement: str
    detail: tuple[int, ...]
    #: The logical values, C order, native byte order; for a broadcast, before broadcasting.
    values: np.ndarray

    @property
    def dtype(self) -> np.dtype:
        return to_numpy_dtype(self.kind)

    def expected(self) -> np.ndarray:
        """What the array shows: what a buffer made from it must hold."""
        return np.array(np.broadcast_to(self.values, self.shape), order="C", copy=True)

    def build(self) -> tuple[np.ndarray, np.ndarray]:
        """(the array handed to the plugin, the whole allocation it lies in)."""
        dtype, shape, detail = self.dtype, self.shape, self.detail
        if self.arrangement == "broadcast":
            values = self.values.copy()
            return np.broadcast_to(values, shape), values
        if self.arrangement == "transposed":
            base = np.empty(tuple(shape[p] for p in detail), dtype)
            view = base.transpose(tuple(int(i) for i in np.argsort(detail)))
        elif self.arrangement == "steps":
            base = np.empty(tuple(d * abs(s) for d, s in zip(shape, detail)), dtype)
            view = base[tuple(slice(None, None, s) for s in detail)]
        elif self.arrangement == "fortran":
            base = view = np.empty(shape, dtype, order="F")
        elif self.arrangement == "byteswapped":
            base = view = np.empty(shape, dtype.newbyteorder())
        elif self.arrangement == "unaligned":
            base = np.empty(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize + 1, np.uint8)
            view = base[1:].view(dtype).reshape(shape)
        else:
            base = view = np.empty(shape, dtype)
        base.reshape(-1, order="A").view(np.uint8)[...] = _SCRIBBLE
        view[...] = self.values
        return view, base

    def describe(self) -> str:
        view, _ = self.build()
        if self.arrangement == "transposed":
            how = f"a transposed view (axes {self.detail})"
        elif self.arrangement == "steps":
            how = f"a view with steps {self.detail}"
        elif self.arrangement == "broadcast":
            how = f"broadcast along axis {self.detail[0]}"
        else:
            how = {"dense": "dense, row-major", "fortran": "column-major (Fortran order)",
                   "byteswapped": "in non-native byte order", "unaligned": "at an odd address"}[self.arrangement]
        return (f"{self.kind.name}{list(self.shape)} {how}, byte strides {view.strides}, values "
                f"{show(self.expected(), every=True)}")


def _snapshot(base: np.ndarray) -> bytes:
    return base.tobytes(order="A")


@st.composite
def shapes(draw: Any, max_rank: int = 4, min_rank: int = 0) -> tuple[int, ...]:
    """0-d to ``max_rank``-d, at most 64 elements; one array in four is empty (a zero
    dimension), the others have dimensions of 1 to 4 (shrinking toward 2, where strides show)."""
    rank = draw(st.integers(min_rank, max_rank))
    dims = [draw(st.sampled_from((2, 3, 1, 4) if rank <= 3 else (2, 1))) for _ in range(rank)]
    if rank and draw(st.sampled_from((False, False, False, True))):
        dims[draw(st.integers(0, rank - 1))] = 0
    return tuple(dims)


def values_of(kind: BufferType, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    """Any values of ``kind``: every bit pattern where every pattern is a value (NaN payloads,
    negative zeros, infinities included), the valid values of booleans and sub-byte types."""
    dtype = to_numpy_dtype(kind)
    count = int(np.prod(shape, dtype=np.int64))
    if kind is BufferType.PRED:
        return st.lists(st.booleans(), min_size=count, max_size=count).map(
            lambda v: np.array(v, dtype=bool).reshape(shape))
    if kind in _SUB_BYTE_BITS:
        bits = _SUB_BYTE_BITS[kind]
        if kind is BufferType.F4E2M1FN:  # its 4-bit codes, held one per byte
            return st.lists(st.integers(0, (1 << bits) - 1), min_size=count, max_size=count).map(
                lambda v: np.array(v, np.uint8).view(dtype).reshape(shape))
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype)
        return st.lists(st.integers(int(info.min), int(info.max)), min_size=count, max_size=count).map(
            lambda v: np.array(v, np.int64).astype(dtype).reshape(shape))
    size = count * dtype.itemsize
    return st.binary(min_size=size, max_size=size).map(
        lambda b: np.frombuffer(b, dtype=dtype).reshape(shape).copy())


#: The fewest dimensions each arrangement needs to mean something.
_MIN_RANK = {"dense": 0, "transposed": 2, "steps": 1, "fortran": 2, "broadcast": 1, "byteswapped": 0, "unaligned": 0}


def _arranges(arrangement: str, kind: BufferType) -> bool:
    """Whether arrays of ``kind`` can lie in memory this way."""
    dtype = to_numpy_dtype(kind)
    if arrangement == "byteswapped":  # numpy's own types only: ml_dtypes' have no other byte order
        return dtype.itemsize > 1 and dtype.type.__module__ == "numpy"
    if arrangement == "unaligned":
        return dtype.itemsize > 1
    return True


@st.composite
def host_arrays(draw: Any, kinds: Sequence[BufferType], max_rank: int = 4,
                arrangements: Sequence[str] = ARRANGEMENTS) -> HostArray:
    # The arrangement first, so that each is drawn as often as the others whatever the types.
    arrangement = draw(st.sampled_from([a for a in arrangements if _MIN_RANK[a] <= max_rank
                                        and any(_arranges(a, k) for k in kinds)]))
    kind = draw(st.sampled_from([k for k in kinds if _arranges(arrangement, k)]))
    shape = draw(shapes(max_rank, min_rank=_MIN_RANK[arrangement]))
    detail: tuple[int, ...] = ()
    values_shape = shape
    if arrangement == "transposed":
        detail = tuple(draw(st.permutations(range(len(shape))).filter(lambda p: p != sorted(p))))
    elif arrangement == "steps":
        detail = tuple(draw(st.lists(st.sampled_from((-1, 2, -2, 3, 1)), min_size=len(shape),
                                     max_size=len(shape)).filter(lambda steps: set(steps) != {1})))
    elif arrangement == "broadcast":
        axis = draw(st.integers(0, len(shape) - 1))
        detail = (axis,)
        values_shape = shape[:axis] + (1,) + shape[axis + 1:]
    values = draw(values_of(kind, values_shape))
    return HostArray(kind, shape, arrangement, detail, values)


def _semantics(minor: int) -> tuple[HostBufferSemantics, ...]:
    return tuple(s for s in HostBufferSemantics if s is not HostBufferSemantics.MUTABLE_ZERO_COPY or minor >= 48)


def _memory_kinds(side: Side) -> tuple[str, ...]:
    return tuple(m.kind() for m in side.devices[0].addressable_memories())


def _memory_of(side: Side, device: int, kind: str | None) -> Any:
    """The memory a buffer placed by (device, kind) must be in, on ``side``."""
    placed = side.placement(device, kind)
    return placed["memory"] if "memory" in placed else placed["device"].default_memory()


def _least_bytes(kind: BufferType, shape: tuple[int, ...]) -> int:
    count = int(np.prod(shape, dtype=np.int64))
    return (count * _SUB_BYTE_BITS.get(kind, to_numpy_dtype(kind).itemsize * 8) + 7) // 8


# -- BufferFromHostBuffer and ToHostBuffer -----------------------------------------------------


@dataclass(frozen=True, eq=False)
class Transfer:
    """A host array put on a device (or into one of its memories) with some semantics."""

    host: HostArray
    semantics: HostBufferSemantics
    device: int
    #: The kind of memory asked for (None: the device, so its default memory).
    memory: str | None

    def describe(self) -> str:
        where = f"device {self.device}" + (f", memory kind {self.memory!r}" if self.memory else "")
        return f"{self.host.describe()}; semantics {self.semantics.name}; onto {where}"


def _observe_transfer(side: Side, example: Transfer) -> Observed:
    seen = Observed()
    host, base = example.host.build()
    before = _snapshot(base)
    put = "PJRT_Client_BufferFromHostBuffer"
    transfer = side.put(host, device=example.device, memory=example.memory, semantics=example.semantics)
    seen[put] = transfer if isinstance(transfer, Refused) else "accepted"
    if isinstance(transfer, Refused):
        return seen
    buffer, done = transfer.buffer, transfer.done_with_host_buffer
    seen["PJRT_Buffer_ElementType"] = buffer.element_type()
    seen["PJRT_Buffer_Dimensions"] = tuple(buffer.dimensions())
    fetched = side.fetch(buffer)
    seen[FIRST_COPY] = fetched if isinstance(fetched, Refused) else Values(fetched.copy())
    if isinstance(fetched, np.ndarray) and fetched.flags.writeable:
        # The array a copy to host returns is the caller's: writing it must not reach the buffer.
        _scribble(fetched)
    again = side.fetch(buffer)
    seen[SECOND_COPY] = again if isinstance(again, Refused) else Values(again)
    seen["the host array (and the memory around it) after the transfer"] = (
        "unchanged" if _snapshot(base) == before else "changed")
    seen["PJRT_Buffer_IsDeleted before PJRT_Buffer_Delete"] = buffer.is_deleted()
    seen["PJRT_Buffer_ReadyEvent"] = side.wait(buffer.ready_event(), "PJRT_Buffer_ReadyEvent")
    seen.own["on-device size"] = buffer.on_device_size_in_bytes()
    seen.own["placement"] = _placement_of(buffer)
    if side.layouts is not None:
        layout = side.call(side.layouts.buffer_memory_layout, _unwrap(buffer), what="Layouts.buffer_memory_layout")
        default = side.call(side.layouts.client_default_layout, _unwrap(side.client), buffer.element_type(),
                            tuple(buffer.dimensions()), what="Layouts.client_default_layout")
        seen.own["layout"] = (tuple(layout.minor_to_major), tuple(default.minor_to_major))
    buffer.delete()
    seen["PJRT_Buffer_IsDeleted after PJRT_Buffer_Delete"] = buffer.is_deleted()
    seen["done_with_host_buffer, once the buffer is deleted"] = side.wait(done, "done_with_host_buffer")
    return seen


FIRST_COPY = "PJRT_Buffer_ToHostBuffer (values)"
SECOND_COPY = "PJRT_Buffer_ToHostBuffer after the caller wrote into the array of the first copy"


def _scribble(array: np.ndarray) -> None:
    """Overwrite every element of ``array`` with the scribble byte pattern."""
    pattern = np.frombuffer(bytes([_SCRIBBLE]) * array.dtype.itemsize, dtype=array.dtype).reshape(())
    np.copyto(array, pattern)


@dataclass(frozen=True)
class Placement:
    """Where a buffer is: its device, its memory, and the devices that can address that memory."""

    device: int
    memory: tuple[str, int]
    addressers: tuple[int, ...]


def _placement_of(buffer: Any) -> Placement:
    memory = buffer.memory()
    return Placement(device_id(buffer.device()), (memory.kind(), memory.id()),
                     tuple(sorted(device_id(d) for d in memory.addressable_by_devices())))


def _check_placement(function: str, side: Side, placed: Placement, device: int, memory: str | None) -> None:
    """The buffer is in the memory asked for (the device's default one when only the device was
    named), on the device asked for or, for a memory, on a device that addresses it."""
    wanted = _memory_of(side, device, memory)
    promise(placed.memory == (wanted.kind(), wanted.id()),
            f"{function}: the buffer is in memory {placed.memory[0]} {placed.memory[1]} on {side.name}, it was "
            f"sent to {wanted.kind()} {wanted.id()}")
    target = side.placement(device, memory)
    if "device" in target:
        promise(placed.device == device_id(target["device"]),
                f"{function}: the buffer is on device {placed.device} on {side.name}, it was sent to device "
                f"{device_id(target['device'])}")
    promise(placed.device in placed.addressers,
            f"{function}: the buffer is on device {placed.device}, which cannot address its memory "
            f"{placed.memory[0]} {placed.memory[1]} (addressed by devices {list(placed.addressers)})")


def _check_transfer_promises(side: Side, example: Transfer, seen: Observed) -> None:
    host = example.host
    name = side.name
    if isinstance(seen["PJRT_Client_BufferFromHostBuffer"], Refused):
        return  # whether it may refuse is the oracle's to say
    promise(seen["PJRT_Buffer_ElementType"] == host.kind,
            lambda: f"PJRT_Buffer_ElementType: a {host.dtype} host array became a "
                    f"{show(seen['PJRT_Buffer_ElementType'])} buffer on {name}, expected {host.kind.name}")
    promise(seen["PJRT_Buffer_Dimensions"] == host.shape,
            lambda: f"PJRT_Buffer_Dimensions: {list(seen['PJRT_Buffer_Dimensions'])} on {name}, the host array's "
                    f"shape is {list(host.shape)}")
    for key, what in ((FIRST_COPY, "the buffer's values, copied to host,"),
                      (SECOND_COPY, "the buffer's values after the caller wrote into the array "
                                    "PJRT_Buffer_ToHostBuffer had returned (that array is a copy, not the buffer's "
                                    "memory)")):
        got = seen[key]
        promise(isinstance(got, Values), lambda: f"{key}: failed on {name}: {show(got)}")  # noqa: B023
        problem = _bit_difference(got.array, host.expected(), computed=False)
        promise(problem is None, f"{key}: {what} are not what the host array showed: {problem}")
    promise(seen["the host array (and the memory around it) after the transfer"] == "unchanged",
            f"PJRT_Client_BufferFromHostBuffer: {name} changed the host array it was given, or the memory around "
            "it; a transfer only reads the caller's array")
    promise(seen["PJRT_Buffer_IsDeleted before PJRT_Buffer_Delete"] is False,
            f"PJRT_Buffer_IsDeleted: a buffer nobody deleted or donated reports deleted on {name}")
    promise(seen["PJRT_Buffer_ReadyEvent"] is None,
            lambda: f"PJRT_Buffer_ReadyEvent of a transferred buffer failed on {name}: "
                    f"{seen['PJRT_Buffer_ReadyEvent']}")
    size, least = seen.own["on-device size"], _least_bytes(host.kind, host.shape)
    promise(isinstance(size, int) and size >= least,
            f"PJRT_Buffer_OnDeviceSizeInBytes is {size!r} on {name}, less than the {least} bytes of "
            f"{host.kind.name}{list(host.shape)}")
    _check_placement("PJRT_Client_BufferFromHostBuffer", side, seen.own["placement"], example.device, example.memory)
    if "layout" in seen.own:
        layout, default = seen.own["layout"]
        promise(layout == default, f"Layouts.buffer_memory_layout: a buffer made from a host array has minor_to_major "
                                   f"{layout}, but Layouts.client_default_layout says {default}: without a device "
                                   "layout, PJRT_Client_BufferFromHostBuffer gives the default one, whatever the "
                                   "host array's strides")
    promise(seen["PJRT_Buffer_IsDeleted after PJRT_Buffer_Delete"] is True,
            f"PJRT_Buffer_IsDeleted is false after PJRT_Buffer_Delete on {name}")
    promise(seen["done_with_host_buffer, once the buffer is deleted"] is None,
            lambda: f"done_with_host_buffer ({example.semantics.name}) did not fire cleanly once the buffer was "
                    f"deleted on {name}: {show(seen['done_with_host_buffer, once the buffer is deleted'])}; the host "
                    "array is then never the caller's again")


@case("properties", timeout=PROPERTY_TIMEOUT)
def host_round_trip(ctx: PluginUnderTest) -> None:
    """PJRT_Client_BufferFromHostBuffer then PJRT_Buffer_ToHostBuffer, on generated host arrays
    (0-d to 4-d, empty dimensions, every element type both plugins carry, any strides, byte order
    and alignment), with each host-buffer semantics, into each memory of the device: the same bits
    come back (also after the caller writes into a first copy), with the element type, dimensions,
    an on-device size that holds them, the memory asked for and the default layout; the host array
    is left untouched, the buffer alive until deleted, and done_with_host_buffer fires; as on the
    reference plugin."""
    plugin, oracle = sides(ctx)
    kinds = common_types(ctx)
    minor = _call_minor(ctx)
    memories: tuple[str | None, ...] = (None, *_memory_kinds(plugin))
    devices = min(2, len(plugin.devices))
    strategy = st.builds(Transfer, host_arrays(kinds), st.sampled_from(_semantics(minor)),
                         st.integers(0, devices - 1), st.sampled_from(memories))

    def prop(example: Transfer) -> None:
        mine, theirs = _observe_transfer(plugin, example), _observe_transfer(oracle, example)
        _check_transfer_promises(plugin, example, mine)
        compare(plugin, mine, oracle, theirs)

    explore(strategy, prop, examples=40)


# -- ToHostBuffer into the caller's array -------------------------------------------------------

#: Destinations of a copy to host: the right one, and each way a caller gets one wrong.
DESTINATIONS = ("exact", "reshaped", "one element more", "one element fewer", "another type of the same width",
                "another width")


@dataclass(frozen=True, eq=False)
class Destination:
    """A buffer copied to host into a caller's array: the right one, or one of another shape,
    size or element type."""

    host: HostArray
    variant: str

    def array(self) -> np.ndarray:
        dtype, shape = self.host.dtype, self.host.shape
        count = int(np.prod(shape, dtype=np.int64))
        if self.variant == "reshaped":
            shape = (count,) if len(shape) != 1 else (1, count)
        elif self.variant == "one element more":
            shape = (count + 1,)
        elif self.variant == "one element fewer":
            shape = (count - 1,)
        elif self.variant == "another type of the same width":
            dtype = np.dtype(f"u{dtype.itemsize}") if dtype.kind != "u" else np.dtype(f"i{dtype.itemsize}")
        elif self.variant == "another width":
            dtype = np.dtype(np.float64) if dtype.itemsize != 8 else np.dtype(np.float32)
        dst = np.empty(shape, dtype)
        _scribble(dst)
        return dst

    def describe(self) -> str:
        dst = self.array()
        return f"a buffer of {self.host.describe()}; destination {dst.dtype}{list(dst.shape)} ({self.variant})"


def _observe_destination(side: Side, example: Destination) -> Observed:
    seen = Observed()
    host, _ = example.host.build()
    transfer = side.put(host)
    if isinstance(transfer, Refused):
        seen["PJRT_Client_BufferFromHostBuffer"] = transfer
        return seen
    buffer = transfer.buffer
    dst = example.array()
    fresh = dst.copy()
    what = "PJRT_Buffer_ToHostBuffer into the caller's array"
    result = side.attempt(buffer.to_host_buffer, dst, what=what)
    if not isinstance(result, Refused):
        result = side.wait(result.event, what) or "filled"
    seen[what] = result
    if isinstance(result, Refused):
        seen.own["destination before and after the refusal"] = fresh, dst.copy()
    else:
        seen["the destination array after the copy"] = Values(dst.copy())
    seen["PJRT_Buffer_IsDeleted after the copy"] = buffer.is_deleted()
    back = side.fetch(buffer)
    seen["PJRT_Buffer_ToHostBuffer into a new array, afterwards"] = back if isinstance(back, Refused) else Values(back)
    return seen


@case("properties", timeout=PROPERTY_TIMEOUT)
def to_host_destination(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_ToHostBuffer into a caller's array of the right shape and element type fills it
    bit for bit; into one of another shape, size, element type or width it is refused with the
    error class the reference plugin gives, leaving the array and the buffer as they were."""
    plugin, oracle = sides(ctx)
    kinds = common_types(ctx)
    strategy = st.builds(Destination, host_arrays(kinds, max_rank=3, arrangements=("dense",)),
                         st.sampled_from(DESTINATIONS)).filter(
        lambda d: d.variant != "one element fewer" or int(np.prod(d.host.shape, dtype=np.int64)) > 0)

    def prop(example: Destination) -> None:
        mine, theirs = _observe_destination(plugin, example), _observe_destination(oracle, example)
        expected = example.host.expected()
        filled = mine["the destination array after the copy"]
        if filled is not None and example.variant == "exact":
            problem = _bit_difference(filled.array, expected, computed=False)
            promise(problem is None, f"PJRT_Buffer_ToHostBuffer into the caller's array: the array holds other "
                                     f"values than the buffer: {problem}")
        if "destination before and after the refusal" in mine.own:
            before, after = mine.own["destination before and after the refusal"]
            promise(_bit_difference(after, before, computed=False) is None,
                    "PJRT_Buffer_ToHostBuffer into the caller's array failed, but wrote into the array anyway")
        back = mine["PJRT_Buffer_ToHostBuffer into a new array, afterwards"]
        if back is not None:
            promise(isinstance(back, Values) and _bit_difference(back.array, expected, computed=False) is None,
                    lambda: f"PJRT_Buffer_ToHostBuffer after a copy into the caller's array gave {show(back)}, "
                            f"expected {show(expected)}")
        compare(plugin, mine, oracle, theirs)

    explore(strategy, prop, examples=30)


# -- CopyToDevice and CopyToMemory -------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Copy:
    """A buffer copied to a device or a memory, and then one of the two deleted or donated."""

    host: HostArray
    source: int
    #: ("device", device index) or ("memory", memory kind on the source's device).
    target: tuple[str, Any]
    #: What happens to one of the two afterwards: "delete source", "delete copy", "donate source".
    then: str

    @property
    def function(self) -> str:
        return "PJRT_Buffer_CopyToDevice" if self.target[0] == "device" else "PJRT_Buffer_CopyToMemory"

    def describe(self) -> str:
        to = f"device {self.target[1]}" if self.target[0] == "device" else f"memory kind {self.target[1]!r}"
        return f"a buffer of {self.host.describe()} on device {self.source}; {self.function} to {to}; then {self.then}"


def _overwriting(kind: BufferType, shape: tuple[int, ...]) -> str:
    """``x + x`` with ``x`` donated to the result: a plugin that reuses donated storage writes
    the result over the input's memory."""
    t = tensor(shape, mlir_element_type(kind))
    return _module("jit_overwrite", (
        f"  func.func public @main(%arg0: {t} {{tf.aliasing_output = 0 : i32}}) -> ({t} {{jax.result_info = "
        f"\"result\"}}) {{\n"
        f"    %0 = stablehlo.add %arg0, %arg0 : {t}\n"
        f"    return %0 : {t}\n"
        f"  }}\n"))


def _observe_copy(side: Side, example: Copy) -> Observed:
    seen = Observed()
    host, _ = example.host.build()
    transfer = side.put(host, device=example.source)
    if isinstance(transfer, Refused):
        seen["PJRT_Client_BufferFromHostBuffer"] = transfer
        return seen
    source = transfer.buffer
    how, where = example.target
    function = example.function
    if how == "device":
        copy = side.attempt(source.copy_to_device, side.placement(where, None)["device"], what=function)
    else:
        copy = side.attempt(source.copy_to_memory, _memory_of(side, example.source, where), what=function)
    seen[function] = copy if isinstance(copy, Refused) else "accepted"
    if isinstance(copy, Refused):
        return seen
    seen.own["placement"] = _placement_of(copy)
    seen[f"{function}: the copy's element type"] = copy.element_type()
    seen[f"{function}: the copy's dimensions"] = tuple(copy.dimensions())
    for name, buffer in (("the copy", copy), ("the source", source)):
        got = side.fetch(buffer)
        seen[f"PJRT_Buffer_ToHostBuffer of {name}"] = got if isinstance(got, Refused) else Values(got)
    survivor, name = (source, "the source") if example.then == "delete copy" else (copy, "the copy")
    if example.then == "donate source":
        executable = side.compiled(_overwriting(example.host.kind, example.host.shape))
        seen[f"{example.then}: PJRT_Client_Compile"] = _as_none(executable)
        if not isinstance(executable, Refused):
            outputs = side.execute(executable, [source])
            seen[f"{example.then}: PJRT_LoadedExecutable_Execute"] = _as_none(outputs)
    else:
        (source if example.then == "delete source" else copy).delete()
    seen[f"after {example.then}: PJRT_Buffer_IsDeleted of {name}"] = survivor.is_deleted()
    got = side.fetch(survivor)
    seen[f"after {example.then}: PJRT_Buffer_ToHostBuffer of {name}"] = got if isinstance(got, Refused) else Values(got)
    return seen


@case("properties", timeout=PROPERTY_TIMEOUT)
def copies(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_CopyToDevice and PJRT_Buffer_CopyToMemory of generated buffers (every element
    type both plugins carry, 0-d to 4-d, empty ones included) to each device and into each memory:
    the copy is where it was sent, with the source's element type, dimensions and bits, and stays
    so when its source is deleted or donated (its memory reused); the source stays so when the
    copy is deleted; as on the reference plugin."""
    plugin, oracle = sides(ctx)
    kinds = common_types(ctx)
    devices = min(2, len(plugin.devices))
    targets = [st.tuples(st.just("device"), st.integers(0, devices - 1))]
    if _call_minor(ctx) >= 32:
        targets.append(st.tuples(st.just("memory"), st.sampled_from(_memory_kinds(plugin))))
    adds = set(_program_ops(ctx).with_add())
    strategy = st.builds(Copy, host_arrays(kinds), st.integers(0, devices - 1), st.one_of(*targets),
                         st.sampled_from(("delete source", "delete copy", "donate source"))).filter(
        # Donation needs a program the plugin compiles for the type, on the device it runs on.
        lambda c: c.then != "donate source" or (c.host.kind in adds and c.source == 0))

    def prop(example: Copy) -> None:
        mine, theirs = _observe_copy(plugin, example), _observe_copy(oracle, example)
        expected = example.host.expected()
        for key, value in mine.seen.items():
            if "PJRT_Buffer_ToHostBuffer" in key:
                promise(isinstance(value, Values) and _bit_difference(value.array, expected, computed=False) is None,
                        lambda: f"{key}: {plugin.name} gave {show(value)}, expected the source's values "  # noqa: B023
                                f"{show(expected)}; a copy is a buffer of its own, independent of its source")
            if "PJRT_Buffer_IsDeleted" in key:
                promise(value is False, f"{key}: true on {plugin.name}; only the buffer deleted or donated is gone")
        if "placement" in mine.own:
            how, where = example.target
            if how == "device":
                _check_placement(example.function, plugin, mine.own["placement"], where, None)
            else:
                _check_placement(example.function, plugin, mine.own["placement"], example.source, where)
        compare(plugin, mine, oracle, theirs)

    explore(strategy, prop, examples=30)


# -- generated elementwise programs ---------------------------------------------------------------


def _converts(kind: BufferType) -> tuple[BufferType, ...]:
    """The conversions whose result StableHLO defines for every value of ``kind``: float to float
    (from f64 only to f32: reaching f16 or bf16 through f32 rounds twice, a shortcut whose last
    bits are the numerics group's concern), integer to a wider integer, integer to f32 or f64.
    Float to integer (NaN, overflow) and integer narrowing are left to the implementation, and
    left out."""
    if kind in _FLOATS:
        targets = [BufferType.F32, BufferType.F64] if kind is BufferType.F64 else sorted(_FLOATS, key=int)
        return tuple(t for t in targets if t is not kind)
    width = to_numpy_dtype(kind).itemsize
    wider = [t for t in (*_SIGNED, *_UNSIGNED) if to_numpy_dtype(t).itemsize > width
             and (kind in _UNSIGNED or t in _SIGNED)]
    return (*wider, BufferType.F32, BufferType.F64)


def _compare_type(kind: BufferType) -> str:
    return "FLOAT" if kind in _FLOATS else "SIGNED" if kind in _SIGNED else "UNSIGNED"


@dataclass(frozen=True)
class Step:
    """One op of a generated program: its name, operands (value indices) and the direction of
    a compare or the type a convert goes to."""

    op: str
    operands: tuple[int, ...]
    detail: Any = None


@dataclass(frozen=True, eq=False)
class Generated:
    """A straight-line elementwise program of one shape, every op's value a result."""

    kind: BufferType
    shape: tuple[int, ...]
    params: int
    steps: tuple[Step, ...]
    #: input -> output whose storage it may become (``tf.aliasing_output``: JAX's donation).
    aliases: Mapping[int, int] = field(default_factory=dict)
    #: ExecuteOptions.non_donatable_input_indices.
    kept: tuple[int, ...] = ()
    inputs: tuple[np.ndarray, ...] = ()
    #: The element type of each parameter where they differ (the op probe of several types at
    #: once); empty: every parameter is of ``kind``.
    param_kinds: tuple[BufferType, ...] = ()

    def kinds(self) -> list[BufferType]:
        """The element type of every value: the parameters, then each step."""
        kinds = list(self.param_kinds) or [self.kind] * self.params
        for step in self.steps:
            if step.op == "compare":
                kinds.append(BufferType.PRED)
            elif step.op == "convert":
                kinds.append(step.detail)
            else:
                kinds.append(kinds[step.operands[-1]])
        return kinds

    def text(self) -> str:
        kinds = self.kinds()
        types = [tensor(self.shape, mlir_element_type(k)) for k in kinds]
        names = [f"%arg{i}" for i in range(self.params)] + [f"%{i}" for i in range(len(self.steps))]
        args = ", ".join(f"%arg{i}: {types[i]}" + (f" {{tf.aliasing_output = {self.aliases[i]} : i32}}"
                                                    if i in self.aliases else "") for i in range(self.params))
        results = list(range(self.params, len(kinds)))
        outs = ", ".join(f"{types[i]} {{jax.result_info = \"[{n}]\"}}" for n, i in enumerate(results))
        lines = []
        for index, step in enumerate(self.steps):
            operands = [names[i] for i in step.operands]
            result = types[self.params + index]
            if step.op == "compare":
                t = types[step.operands[0]]
                lines.append(f"    %{index} = stablehlo.compare {step.detail}, {operands[0]}, {operands[1]}, "
                             f"{_compare_type(kinds[step.operands[0]])} : ({t}, {t}) -> {result}\n")
            elif step.op == "select":
                lines.append(f"    %{index} = stablehlo.select {', '.join(operands)} : {types[step.operands[0]]}, "
                             f"{result}\n")
            elif step.op == "convert":
                lines.append(f"    %{index} = stablehlo.convert {operands[0]} : ({types[step.operands[0]]}) -> "
                             f"{result}\n")
            else:
                lines.append(f"    %{index} = stablehlo.{step.op} {', '.join(operands)} : {result}\n")
        return _module("jit_generated", (
            f"  func.func public @main({args}) -> ({outs}) {{\n" + "".join(lines)
            + f"    return {', '.join(names[i] for i in results)} : {', '.join(types[i] for i in results)}\n"
            + "  }\n"))

    def describe(self) -> str:
        kinds = self.kinds()
        names = [f"x{i}" for i in range(self.params)] + [f"v{i}" for i in range(len(self.steps))]
        ops = []
        for index, step in enumerate(self.steps):
            args = ", ".join(names[i] for i in step.operands)
            extra = (f" {step.detail}" if step.op == "compare" else f" to {step.detail.name}" if step.op == "convert"
                     else "")
            ops.append(f"{names[self.params + index]} = {step.op}{extra}({args}): {kinds[self.params + index].name}")
        donated = ", ".join(f"x{i} -> output {o}" + (" (listed in non_donatable_input_indices)" if i in self.kept
                                                      else "") for i, o in sorted(self.aliases.items()))
        inputs = "; ".join(f"x{i} = {show(a, every=True)}" for i, a in enumerate(self.inputs))
        return (f"@main({', '.join(names[:self.params])}: {self.kind.name}{list(self.shape)}) {{ {'; '.join(ops)} }}, "
                f"every value a result; donated: {donated or 'none'}; inputs {inputs}")


class ProgramOps:
    """Which ops, on which element types, both plugins compile and run (probed once per run)."""

    def __init__(self, ops: Mapping[BufferType, frozenset[str]]) -> None:
        self.ops = dict(ops)

    def kinds(self) -> list[BufferType]:
        """The types a program can start from: some op other than select (which needs a
        comparison's result first) works on them."""
        return [k for k in PROGRAM_TYPES if self.ops.get(k, frozenset()) - {"select"}]

    def has(self, kind: BufferType, op: str) -> bool:
        return op in self.ops.get(kind, frozenset())

    def with_add(self) -> list[BufferType]:
        return [k for k in PROGRAM_TYPES if self.has(k, "add")]


def _op_probes(kind: BufferType) -> dict[str, list[Step]]:
    """For each op name, a program (two parameters of ``kind``, a third of PRED) using it."""
    probes: dict[str, list[Step]] = {op: [Step(op, (0, 1))] for op in BINARY}
    probes["negate"] = [Step("negate", (0,))]
    if kind not in _UNSIGNED:
        probes["abs"] = [Step("abs", (0,))]
    probes["compare"] = [Step("compare", (0, 1), "LT")]
    probes["select"] = [Step("compare", (0, 1), "LT"), Step("select", (2, 0, 1))]
    for target in _converts(kind):
        probes[f"convert:{target.name}"] = [Step("convert", (0,), target)]
    return probes


def _runs(side: Side, program: Generated) -> bool:
    executable = side.compiled(program.text())
    if isinstance(executable, Refused):
        return False
    arguments = []
    for array in program.inputs:
        transfer = side.put(array)
        if isinstance(transfer, Refused):
            return False
        arguments.append(transfer.buffer)
    outputs = side.execute(executable, arguments)
    return not isinstance(outputs, Refused) and all(isinstance(side.fetch(o), np.ndarray) for o in outputs)


def _probe(kinds: Sequence[BufferType], only: Callable[[BufferType, str], bool] = lambda k, op: True) -> Generated:
    """One program with two parameters of each of ``kinds`` and the probe of each op (that
    ``only`` keeps) on them."""
    count = 2 * len(kinds)
    params: list[BufferType] = []
    inputs: list[np.ndarray] = []
    steps: list[Step] = []
    for kind in kinds:
        first = len(params)
        dtype = to_numpy_dtype(kind)
        params += [kind, kind]
        inputs += [np.arange(3).astype(dtype), np.arange(3)[::-1].astype(dtype)]
        for op, probe in _op_probes(kind).items():
            if not only(kind, op):
                continue
            # In a probe, operands 0 and 1 are the type's two parameters, 2 the probe's first step.
            own = count + len(steps)
            steps += [Step(s.op, tuple(first + i if i < 2 else own + i - 2 for i in s.operands), s.detail)
                      for s in probe]
    return Generated(kinds[0], (3,), count, tuple(steps), inputs=tuple(inputs), param_kinds=tuple(params))


def _probe_ops(side: Side, kinds: Sequence[BufferType]) -> dict[BufferType, frozenset[str]]:
    """Every op of :func:`_op_probes` on every type in one program; where it fails, one program
    per type; where that fails, each op alone: one compile for a plugin that has them all."""
    everything = {kind: frozenset(_op_probes(kind)) for kind in kinds}
    if not kinds or _runs(side, _probe(kinds)):
        return everything
    found: dict[BufferType, frozenset[str]] = {}
    for kind in kinds:
        if _runs(side, _probe([kind])):
            found[kind] = everything[kind]
            continue
        found[kind] = frozenset(op for op in everything[kind]
                                if _runs(side, _probe([kind], lambda k, o: o == op)))  # noqa: B023
    return found


def _program_ops(ctx: PluginUnderTest) -> ProgramOps:
    plugin, oracle = sides(ctx)
    kinds = [k for k in PROGRAM_TYPES if k in common_types(ctx)]
    mine = ctx.memo("properties/ops", lambda: _probe_ops(plugin, kinds))
    theirs = ctx.memo("properties/oracle_ops", lambda: _probe_ops(oracle, kinds))
    both = {}
    for kind in kinds:
        ops = mine.get(kind, frozenset()) & theirs.get(kind, frozenset())
        # A convert is usable only to a type both carry whose values the program can return.
        both[kind] = frozenset(op for op in ops if not op.startswith("convert:")
                               or BufferType[op.removeprefix("convert:")] in kinds)
    return ProgramOps(both)


def _program_values(kind: BufferType, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    """Inputs of a generated program. Floats are whole numbers, signed zeros, infinities, NaN and
    the type's largest value: sums, differences and products of those are whole, infinite or NaN,
    never subnormal, whose flushing to zero (XLA's CPU runtime does it) is left to the plugin."""
    dtype = to_numpy_dtype(kind)
    count = int(np.prod(shape, dtype=np.int64))
    if kind in _FLOATS:
        import ml_dtypes

        big = float(ml_dtypes.finfo(dtype).max)
        element = st.one_of(st.integers(-40, 40).map(float),
                            st.sampled_from([-0.0, np.inf, -np.inf, np.nan, big, -big, 65504.0, 3.0e4]))
        return st.lists(element, min_size=count, max_size=count).map(
            lambda v: np.array(v, np.float64).astype(dtype).reshape(shape))
    # Integers: the type's extremes half the time, so that sums, differences and products wrap.
    info = np.iinfo(dtype)
    low, high = int(info.min), int(info.max)
    edges = st.sampled_from(sorted({0, 1, low, high, low + 1, high - 1, max(low, -1), high // 2 + 1}))
    return st.lists(st.one_of(edges, st.integers(low, high)), min_size=count, max_size=count).map(
        lambda v: np.array(v, dtype=object).astype(dtype).reshape(shape))


@st.composite
def generated_programs(draw: Any, ops: ProgramOps, *, minor: int, donation: bool = True,
                       max_steps: int = 5) -> Generated:
    """A program of one to ``max_steps`` ops drawn from those both plugins have (``ops``), over
    one to three parameters of one type and shape, with its inputs; with ``donation``, each
    parameter may be donated to an output of its type, some of them then listed as not donatable
    (from 0.39, ``minor``)."""
    kind = draw(st.sampled_from(ops.kinds()))
    shape = draw(shapes(max_rank=3))
    params = draw(st.integers(1, 3))
    kinds = [kind] * params
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, max_steps))):
        choices: list[tuple[str, BufferType]] = []
        for k in dict.fromkeys(kinds):
            if k is BufferType.PRED:
                continue
            choices += [(op, k) for op in (*BINARY, "negate", "abs", "compare") if ops.has(k, op)]
            if ops.has(k, "select") and BufferType.PRED in kinds:
                choices.append(("select", k))
            choices += [("convert", k)] if any(op.startswith("convert:") for op in ops.ops.get(k, ())) else []
        op, k = draw(st.sampled_from(choices))
        same = [i for i, x in enumerate(kinds) if x is k]
        if op in BINARY or op == "compare":
            step = Step(op, (draw(st.sampled_from(same)), draw(st.sampled_from(same))),
                        draw(st.sampled_from(DIRECTIONS)) if op == "compare" else None)
        elif op == "select":
            pred = [i for i, x in enumerate(kinds) if x is BufferType.PRED]
            step = Step(op, (draw(st.sampled_from(pred)), draw(st.sampled_from(same)), draw(st.sampled_from(same))))
        elif op == "convert":
            targets = [BufferType[o.removeprefix("convert:")] for o in sorted(ops.ops[k]) if o.startswith("convert:")]
            step = Step(op, (draw(st.sampled_from(same)),), draw(st.sampled_from(targets)))
        else:
            step = Step(op, (draw(st.sampled_from(same)),))
        steps.append(step)
        kinds.append(BufferType.PRED if op == "compare" else step.detail if op == "convert" else k)
    aliases: dict[int, int] = {}
    kept: tuple[int, ...] = ()
    if donation:
        free = [i - params for i in range(params, len(kinds)) if kinds[i] is kind]
        for param in range(params):
            choice = draw(st.none() | st.sampled_from(free)) if free else None
            if choice is not None:
                aliases[param] = choice
                free.remove(choice)
        if aliases and minor >= 39 and draw(st.sampled_from((False, False, True))):
            kept = tuple(sorted(draw(st.sets(st.sampled_from(sorted(aliases)), min_size=1))))
    inputs = tuple(draw(_program_values(kind, shape)) for _ in range(params))
    return Generated(kind, shape, params, tuple(steps), aliases, kept, inputs)


def _observe_program(side: Side, program: Generated) -> Observed:
    seen = Observed()
    executable = side.compiled(program.text())
    seen["PJRT_Client_Compile"] = _as_none(executable)
    if isinstance(executable, Refused):
        return seen
    arguments = []
    for index, array in enumerate(program.inputs):
        transfer = side.put(array)
        seen[f"PJRT_Client_BufferFromHostBuffer of input {index}"] = _as_none(transfer)
        if isinstance(transfer, Refused):
            return seen
        arguments.append(transfer.buffer)
    options = ExecuteOptions(non_donatable_input_indices=program.kept) if program.kept else None
    outputs = side.execute(executable, arguments, options)
    seen["PJRT_LoadedExecutable_Execute"] = _as_none(outputs)
    if isinstance(outputs, Refused):
        return seen
    seen["PJRT_LoadedExecutable_Execute: the number of outputs"] = len(outputs)
    for index, output in enumerate(outputs):
        got = side.fetch(output)
        seen[_output(index)] = got if isinstance(got, Refused) else Values(got, computed=True)
    # Which inputs an execution consumes is the plugin's to choose among the donated ones (see
    # elementwise_programs), so it is checked against the program, not against the oracle.
    seen.own["PJRT_Buffer_IsDeleted of each input after the execution"] = tuple(b.is_deleted() for b in arguments)
    for index, buffer in enumerate(arguments):
        if not buffer.is_deleted():
            got = side.fetch(buffer)
            seen.own[_kept_input(index)] = got if isinstance(got, Refused) else Values(got)
    return seen


def _output(index: int) -> str:
    return f"PJRT_LoadedExecutable_Execute: output {index} (v{index})"


def _kept_input(index: int) -> str:
    return f"PJRT_Buffer_ToHostBuffer of input {index}, not donated, after the execution"


@case("properties", timeout=PROPERTY_TIMEOUT)
def elementwise_programs(ctx: PluginUnderTest) -> None:
    """Generated elementwise programs (add, subtract, multiply, maximum, minimum, negate, abs,
    compare, select and convert, composed over generated shapes and element types, as JAX prints
    them), with and without donated inputs (tf.aliasing_output, and non_donatable_input_indices):
    every value bit for bit as on the reference plugin (any NaN for any NaN), no input consumed
    that the program does not donate, and every input that survives unchanged."""
    plugin, oracle = sides(ctx)
    ops = _program_ops(ctx)
    if not ops.kinds():
        skip(f"plugin {ctx.name} compiles none of the elementwise ops on any type the reference plugin has")
    strategy = generated_programs(ops, minor=_call_minor(ctx))

    def prop(program: Generated) -> None:
        mine, theirs = _observe_program(plugin, program), _observe_program(oracle, program)
        deleted = mine.own.get("PJRT_Buffer_IsDeleted of each input after the execution")
        if deleted is not None:
            donated = tuple(i in program.aliases and i not in program.kept for i in range(program.params))
            # tf.aliasing_output lets the compiler reuse an input; it does not oblige it to (XLA
            # keeps a donated input it finds no use for). An input that is not donated is never
            # consumed, and an input that survives keeps its values.
            promise(all(d <= don for d, don in zip(deleted, donated)),
                    f"PJRT_LoadedExecutable_Execute: the inputs deleted afterwards are "
                    f"{[i for i, d in enumerate(deleted) if d]}, the program donates only "
                    f"{[i for i, d in enumerate(donated) if d]} (tf.aliasing_output, less "
                    "non_donatable_input_indices): an input that is not donated is never consumed")
            for index, array in enumerate(program.inputs):
                kept = mine.own.get(_kept_input(index))
                if kept is not None:
                    problem = (_bit_difference(kept.array, array, computed=False) if isinstance(kept, Values)
                               else show(kept))
                    promise(problem is None, f"{_kept_input(index)}: the input changed when the program ran: {problem}")
        compare(plugin, mine, oracle, theirs)

    explore(strategy, prop, examples=40)


# -- sequences of buffer operations ---------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One operation of a sequence. ``slot`` and ``other`` pick buffers (modulo the buffers made
    so far); ``device`` a device (modulo two, or the devices there are)."""

    verb: str
    slot: int = 0
    other: int = 0
    device: int = 0
    #: put: the other shape; execute: the program that donates its first argument.
    flag: bool = False


OPS = st.one_of(
    st.builds(Op, st.just("put"), st.integers(0, 50), st.just(0), st.integers(0, 1), st.booleans()),
    st.builds(Op, st.just("fetch"), st.integers(0, 7)),
    st.builds(Op, st.just("delete"), st.integers(0, 7)),
    st.builds(Op, st.just("copy"), st.integers(0, 7), st.just(0), st.integers(0, 1)),
    st.builds(Op, st.just("execute"), st.integers(0, 7), st.integers(0, 7), st.just(0), st.booleans()),
)


@dataclass(frozen=True, eq=False)
class OpSequence:
    """Operations on buffers of one element type, in a generated order."""

    kind: BufferType
    shape: tuple[int, ...]
    #: Devices the operations spread over: the same number on both plugins.
    devices: int
    ops: tuple[Op, ...]

    @property
    def other_shape(self) -> tuple[int, ...]:
        return self.shape[:-1] + (self.shape[-1] + 1,) if self.shape else (2,)

    def programs(self) -> tuple[str, str]:
        """``x + y``, and ``x + y`` with ``x`` donated."""
        t = tensor(self.shape, mlir_element_type(self.kind))
        texts = []
        for donate in (False, True):
            alias = " {tf.aliasing_output = 0 : i32}" if donate else ""
            texts.append(_module("jit_add", (
                f"  func.func public @main(%arg0: {t}{alias}, %arg1: {t}) -> "
                f"({t} {{jax.result_info = \"result\"}}) {{\n"
                f"    %0 = stablehlo.add %arg0, %arg1 : {t}\n"
                f"    return %0 : {t}\n"
                f"  }}\n")))
        return texts[0], texts[1]

    def label(self, op: Op, slots: int) -> str:
        """``op`` in words, when ``slots`` buffers have been made (b0, b1, ...)."""
        def pick(n: int) -> str:
            return f"b{n % slots}" if slots else "(no buffer yet)"

        if op.verb == "put":
            shape = self.other_shape if op.flag else self.shape
            values = list(_seed_values(self.kind, shape, op.slot).reshape(-1).tolist())
            return f"b{slots} = put({self.kind.name}{list(shape)} {values}, device {op.device % self.devices})"
        if op.verb == "copy":
            return f"b{slots} = copy_to_device({pick(op.slot)}, device {op.device % self.devices})"
        if op.verb == "execute":
            return f"b{slots} = execute({'donating ' if op.flag else ''}x + y, {pick(op.slot)}, {pick(op.other)})"
        return f"{op.verb}({pick(op.slot)})"

    def describe(self) -> str:
        labels, slots = [], 0
        for index, op in enumerate(self.ops):
            labels.append(f"{index + 1}. {self.label(op, slots)}")
            slots += op.verb in ("put", "copy", "execute")  # as if it succeeded
        return f"{self.kind.name}{list(self.shape)} buffers, x + y on device 0; steps: " + "; ".join(labels)


def _seed_values(kind: BufferType, shape: tuple[int, ...], seed: int) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    return ((np.arange(count) * 3 + seed) % 100).astype(to_numpy_dtype(kind)).reshape(shape)


#: What a step of a sequence gave: None (it succeeded), Refused, the values fetched, or a note.
StepOutcome = Any


def _run_sequence(side: Side, example: OpSequence) -> list[tuple[str, StepOutcome, tuple[bool, ...]]]:
    """Each step's label, outcome, and the IsDeleted of every buffer made so far."""
    plain, donating = (side.compiled(t) for t in example.programs())
    slots: list[Any] = []
    records = []
    for op in example.ops:
        label = example.label(op, len(slots))
        outcome: StepOutcome = None
        made = None
        if op.verb == "put":
            shape = example.other_shape if op.flag else example.shape
            transfer = side.put(_seed_values(example.kind, shape, op.slot), device=op.device % example.devices)
            outcome, made = (transfer, None) if isinstance(transfer, Refused) else (None, transfer.buffer)
        elif not slots:
            outcome = "nothing to do: no buffer yet"
        elif op.verb == "fetch":
            got = side.fetch(slots[op.slot % len(slots)])
            outcome = got if isinstance(got, Refused) else Values(got)
        elif op.verb == "delete":
            outcome = _as_none(side.attempt(slots[op.slot % len(slots)].delete, what="PJRT_Buffer_Delete"))
        elif op.verb == "copy":
            copy = side.attempt(slots[op.slot % len(slots)].copy_to_device,
                                side.devices[op.device % example.devices], what="PJRT_Buffer_CopyToDevice")
            outcome, made = (copy, None) if isinstance(copy, Refused) else (None, copy)
        else:
            executable = donating if op.flag else plain
            outputs = executable if isinstance(executable, Refused) else side.execute(
                executable, [slots[op.slot % len(slots)], slots[op.other % len(slots)]])
            outcome, made = (outputs, None) if isinstance(outputs, Refused) else (None, outputs[0])
        if made is not None:
            slots.append(made)
        records.append((label, outcome, tuple(b.is_deleted() for b in slots)))
    return records


def _step_difference(got: StepOutcome, want: StepOutcome) -> str | None:
    if isinstance(got, str) or isinstance(want, str):
        return None if got == want else "another outcome"
    if got is None or want is None:
        return None if got is want else "the call succeeded" if got is None else "the call failed"
    return disagreement(got, want)


def _show_step(outcome: StepOutcome) -> str:
    return "success" if outcome is None else outcome if isinstance(outcome, str) else show(outcome)


@case("properties", timeout=PROPERTY_TIMEOUT)
def buffer_sequences(ctx: PluginUnderTest) -> None:
    """Generated sequences of puts, copies to a device, deletes, executions of x + y (with and
    without donating x; with buffers of the wrong shape, on the wrong device, deleted, donated,
    or the same buffer twice) and copies to host: after every step the same buffers are alive and
    deleted as on the reference plugin, every call fails where it fails there (with an error of
    the same class), and every copy to host gives the same bits."""
    plugin, oracle = sides(ctx)
    adds = _program_ops(ctx).with_add()
    if not adds:
        skip(f"plugin {ctx.name} compiles no add on a type the reference plugin has")
    devices = min(2, len(plugin.devices), len(oracle.devices))
    strategy = st.builds(OpSequence, st.sampled_from(adds[:4]), shapes(max_rank=2), st.just(devices),
                         st.lists(OPS, min_size=1, max_size=12).map(tuple))

    def prop(example: OpSequence) -> None:
        mine, theirs = _run_sequence(plugin, example), _run_sequence(oracle, example)
        for (label, got, alive), (_, want, alive_there) in zip(mine, theirs):
            problem = _step_difference(got, want)
            if problem is not None:
                fail(f"step {label}: {problem}: {plugin.name} gave {_show_step(got)}, {oracle.name} (the oracle) "
                     f"gave {_show_step(want)}")
            if alive != alive_there:
                fail(f"after step {label}: PJRT_Buffer_IsDeleted of b0, b1, ... is {list(alive)} on {plugin.name}, "
                     f"{list(alive_there)} on {oracle.name} (the oracle)")

    explore(strategy, prop, examples=25)


# -- one executable, several threads -----------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Concurrent:
    """One program executed from several threads at once, each with inputs of its own."""

    program: Generated
    #: inputs[thread][run]: the arguments of each execution.
    inputs: tuple[tuple[tuple[np.ndarray, ...], ...], ...]

    def describe(self) -> str:
        runs = "; ".join(f"thread {t} run {r}: " + ", ".join(show(a, every=True) for a in arrays)
                         for t, per in enumerate(self.inputs) for r, arrays in enumerate(per))
        return f"{len(self.inputs)} threads executing {self.program.describe()}; their inputs: {runs}"


@st.composite
def concurrent_runs(draw: Any, ops: ProgramOps, minor: int) -> Concurrent:
    program = draw(generated_programs(ops, minor=minor, donation=False, max_steps=3))
    threads = draw(st.integers(2, 4))
    runs = draw(st.integers(1, 3))
    values = _program_values(program.kind, program.shape)
    inputs = tuple(tuple(tuple(draw(values) for _ in range(program.params)) for _ in range(runs))
                   for _ in range(threads))
    return Concurrent(program, inputs)


def _one_caller(side: Side, executable: Any, runs: Sequence[Sequence[np.ndarray]], results: list[Any],
                start: threading.Barrier) -> None:
    """What one thread does: its own puts, executions and copies to host (the plugin's calls made
    directly, each bounded by the event waits and the caller's join)."""
    try:
        start.wait(side.seconds)
        for arrays in runs:
            arguments = [side.client.buffer_from_host_buffer(a, device=side.devices[0]).buffer for a in arrays]
            result = executable.execute([arguments], ExecuteOptions())
            for event in result.device_complete_events or ():
                event.await_(side.seconds)
            got = []
            for output in result.outputs[0]:
                copy = output.to_host_buffer()
                copy.event.await_(side.seconds)
                got.append(np.asarray(copy.array))
            results.append(got)
    except PjrtError as exc:
        results.append(Refused(exc.code, exc.message))
    except threading.BrokenBarrierError:
        results.append("the threads never all started")
    except Exception as exc:  # noqa: BLE001 - reported by the caller, as the plugin's
        results.append(f"{type(exc).__name__}: {exc} (not a PJRT error)")


@case("properties", timeout=PROPERTY_TIMEOUT)
def concurrent_executes(ctx: PluginUnderTest) -> None:
    """One executable of a generated elementwise program, executed from two to four threads at
    once, each with inputs of its own, one to three times: every caller gets the results of its
    own inputs, bit for bit those of the reference plugin."""
    plugin, oracle = sides(ctx)
    ops = _program_ops(ctx)
    if not ops.kinds():
        skip(f"plugin {ctx.name} compiles none of the elementwise ops on any type the reference plugin has")
    strategy = concurrent_runs(ops, _call_minor(ctx))

    def prop(example: Concurrent) -> None:
        executable = plugin.compiled(example.program.text())
        if isinstance(executable, Refused):
            fail(f"PJRT_Client_Compile: {plugin.name} refused a program of ops it compiled before: {executable}")
        program = example.program
        expected = {}
        for t, per in enumerate(example.inputs):
            for r, arrays in enumerate(per):
                run = Generated(program.kind, program.shape, program.params, program.steps, inputs=arrays)
                expected[t, r] = _observe_program(oracle, run)
        results: list[list[Any]] = [[] for _ in example.inputs]
        start = threading.Barrier(len(example.inputs))
        threads = [threading.Thread(target=_one_caller, args=(plugin, executable, per, results[t], start),
                                    name=f"pjrt-conformance properties caller {t}", daemon=True)
                   for t, per in enumerate(example.inputs)]
        for thread in threads:
            thread.start()
        limit = plugin.seconds * (2 + len(example.inputs[0]))
        for thread in threads:
            thread.join(limit)
            promise(not thread.is_alive(), f"PJRT_LoadedExecutable_Execute from {len(threads)} threads at once: a "
                                           f"caller had not finished after {limit:g} s")
        what = f"PJRT_LoadedExecutable_Execute of one executable from {len(threads)} threads at once"
        for t, got in enumerate(results):
            for r, outputs in enumerate(got):
                promise(isinstance(outputs, list),
                        lambda: f"{what}: run {r} of thread {t} failed: {_show_step(outputs)}")  # noqa: B023
                want = expected[t, r]
                count = want["PJRT_LoadedExecutable_Execute: the number of outputs"]
                promise(len(outputs) == count, f"{what}: run {r} of thread {t} gave {len(outputs)} outputs, the "
                                               f"oracle {oracle.name} {count}")
                for index, array in enumerate(outputs):
                    reference = want[_output(index)]
                    promise(isinstance(reference, Values),
                            lambda: f"the oracle {oracle.name} failed to run {program.describe()}: "  # noqa: B023
                                    f"{show(want.seen)}")  # noqa: B023
                    problem = _bit_difference(np.asarray(array), reference.array, computed=True)
                    promise(problem is None,
                            f"{what}: output {index} of thread {t}'s run {r} is not the result of its own inputs "
                            f"({problem}); each caller gets the results of the arguments it passed")
            promise(len(got) == len(example.inputs[t]),
                    f"{what}: thread {t} made {len(got)} of its {len(example.inputs[t])} executions")

    # Not shrunk: a race needs the same timing to show again, which a smaller input rarely gives.
    explore(strategy, prop, examples=5, shrink=False)
