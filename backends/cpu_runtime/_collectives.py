"""Collectives of the host runtime: where the replicas and partitions of one execution meet.

An execution of a program with ``num_replicas x num_partitions`` processes runs each process on
its device's worker thread. When a process reaches a collective op, it calls
:func:`run_collective` (the backends do: numba_cpu from its compiled code, the reference
interpreter from its op table), which finds the process's :class:`Participant` in a
thread-local set by the runtime around the program's run.

All local processes of one execution meet at each op instance: a :class:`_Meeting` keyed by the
execution, the op's key and how many times this process has run that op (a collective inside a
``while`` body is a new instance each iteration). Each process deposits its operands and the
outputs it allocated, waits for the others, computes its share (for a sum: a slice of the
result, written to every member's output; for data movement: its own result, read from the
others' operands), and waits again so that nobody's operands are released while another still
reads them. Every wait has a deadline, and a process that fails marks its execution failed,
which wakes the others at once: a collective that cannot complete is an error on every process,
never a hang.

Groups that span processes of a job (several OS processes, each with its devices) go through the
:class:`CrossProcess` engine of the client: the local processes meet as above, then one of them
exchanges with the other OS processes on behalf of all.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np

from pjrt_hub.abi import Aborted, DeadlineExceeded, ExecutionError, InvalidArgument

if TYPE_CHECKING:
    from pjrt_hub.backends.stablehlo.collectives import Collective

__all__ = [
    "CollectiveRun",
    "CrossProcess",
    "DEFAULT_COLLECTIVE_TIMEOUT",
    "Participant",
    "Rendezvous",
    "current_participant",
    "exchange_for_reduction",
    "partition_id",
    "participating",
    "replica_id",
    "run_collective",
]

#: Seconds a process waits for the others at a collective before the execution fails.
DEFAULT_COLLECTIVE_TIMEOUT = 300.0

_local = threading.local()
_run_ids = itertools.count(1)

#: numpy reductions for the regions every engine knows (bool and integer ``and``/``or``/``xor``
#: are logical for bool and bitwise for integers, as StableHLO's ops are).
_UFUNCS: dict[str, Callable[..., Any]] = {
    "sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}


class CrossProcess(Protocol):
    """What the runtime needs from an engine that reaches other OS processes of a job."""

    def allgather(self, processes: Sequence[int], payload: bytes, deadline: float, what: str) -> list[bytes]:
        """Every listed process's payload, in the order of ``processes`` (ranks of the job)."""
        ...

    def allreduce(self, processes: Sequence[int], array: np.ndarray, reduction: str,
                  deadline: float, what: str) -> np.ndarray | None:
        """The reduction over ``processes`` of ``array``, or None when the engine cannot do this
        reduction for this dtype (the runtime then gathers and reduces itself)."""
        ...


class CollectiveRun:
    """One execution of a program that may run collectives: shared by its local launches."""

    __slots__ = ("key", "num_replicas", "num_partitions", "local", "process_of", "timeout", "hub",
                 "engine", "failure", "_groups", "_lock", "__weakref__")

    def __init__(self, key: Any, num_replicas: int, num_partitions: int, local: Sequence[int], *,
                 hub: "Rendezvous", timeout: float = DEFAULT_COLLECTIVE_TIMEOUT,
                 process_of: Callable[[int], int] | None = None, engine: CrossProcess | None = None) -> None:
        self.key = key
        self.num_replicas = num_replicas
        self.num_partitions = num_partitions
        #: Flattened ids (replica * num_partitions + partition) run by this OS process.
        self.local = tuple(local)
        #: flattened id -> index of the OS process that runs it (all 0 in one process).
        self.process_of = process_of or (lambda flat: 0)
        self.timeout = timeout
        self.hub = hub
        self.engine = engine
        #: (flattened id, error) of the first process that failed.
        self.failure: tuple[int, BaseException] | None = None
        self._groups: dict[int, tuple[tuple[int, ...], ...]] = {}
        self._lock = threading.Lock()

    def describe(self, flat: int) -> str:
        replica, partition = divmod(flat, self.num_partitions)
        if self.num_partitions == 1:
            return f"replica {replica}"
        if self.num_replicas == 1:
            return f"partition {partition}"
        return f"replica {replica} partition {partition}"

    def groups(self, spec: "Collective") -> tuple[tuple[int, ...], ...]:
        groups = self._groups.get(spec.key)
        if groups is None:
            from pjrt_hub.backends.stablehlo.collectives import CollectiveError

            try:
                groups = spec.process_groups(self.num_replicas, self.num_partitions)
            except CollectiveError as exc:
                raise InvalidArgument(str(exc)) from None
            self._groups[spec.key] = groups
        return groups

    def fail(self, flat: int, error: BaseException) -> None:
        """Record that a process failed and wake everyone waiting at a meeting of this run."""
        with self._lock:
            if self.failure is None:
                self.failure = (flat, error)
        self.hub.wake(self)


@dataclass
class Participant:
    """One process of an execution: what the program running on a device thread sees."""

    run: CollectiveRun
    flat: int
    counts: dict[int, int] = field(default_factory=dict)

    @property
    def replica(self) -> int:
        return self.flat // self.run.num_partitions

    @property
    def partition(self) -> int:
        return self.flat % self.run.num_partitions


class participating:
    """``with participating(p):`` makes ``p`` the current participant of this thread."""

    __slots__ = ("participant", "previous")

    def __init__(self, participant: Participant | None) -> None:
        self.participant = participant

    def __enter__(self) -> Participant | None:
        self.previous = getattr(_local, "participant", None)
        _local.participant = self.participant
        return self.participant

    def __exit__(self, *exc: object) -> None:
        _local.participant = self.previous


def current_participant() -> Participant | None:
    return getattr(_local, "participant", None)


def replica_id() -> int:
    """``stablehlo.replica_id`` of the running process (0 outside a replicated execution)."""
    p = current_participant()
    return 0 if p is None else p.replica


def partition_id() -> int:
    p = current_participant()
    return 0 if p is None else p.partition


# -- meetings -----------------------------------------------------------------------------------


class _Meeting:
    __slots__ = ("expected", "arrived", "inputs", "outputs", "left", "kind", "error", "remote", "reduced")

    def __init__(self, expected: int, kind: str) -> None:
        self.expected = expected
        self.kind = kind
        self.arrived = 0
        self.inputs: dict[int, list[np.ndarray]] = {}
        self.outputs: dict[int, list[np.ndarray]] = {}
        #: Operands of processes of other OS processes, once exchanged.
        self.remote: dict[int, list[np.ndarray]] | None = None
        #: For an all_reduce across OS processes: each spanning group's results, once reduced.
        self.reduced: dict[tuple[int, ...], list[np.ndarray]] | None = None
        self.left = 0
        self.error: BaseException | None = None


class Rendezvous:
    """Where the local processes of executions meet; one per client."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._meetings: dict[tuple, _Meeting] = {}

    def wake(self, run: CollectiveRun) -> None:
        with self._cond:
            self._cond.notify_all()

    def _wait(self, run: CollectiveRun, spec: "Collective", ready: Callable[[], bool], deadline: float,
              meeting: _Meeting, me: int, stage: str) -> None:
        """Wait (holding the condition) until ``ready()``; raise on failure or deadline."""
        while not ready():
            if meeting.error is not None:
                raise meeting.error
            if run.failure is not None:
                flat, error = run.failure
                meeting.error = Aborted(
                    f"{spec.describe()}: {run.describe(flat)} failed, so the collective cannot complete: "
                    f"{getattr(error, 'message', None) or error}")
                self._cond.notify_all()
                raise meeting.error
            left = deadline - time.monotonic()
            if left <= 0:
                present = sorted(meeting.inputs)
                missing = [run.describe(f) for f in run.local if f not in present]
                meeting.error = DeadlineExceeded(
                    f"{spec.describe()}: the collective did not complete within {run.timeout:g} s "
                    f"({stage}); {run.describe(me)} waited for {', '.join(missing) or 'the other processes'}")
                run.fail(me, meeting.error)
                self._cond.notify_all()
                raise meeting.error
            self._cond.wait(min(left, 0.5))

    def meet(self, participant: Participant, spec: "Collective", operands: list[np.ndarray],
             outputs: list[np.ndarray], work: Callable[[_Meeting], None]) -> None:
        """Deposit, wait for everyone, ``work(meeting)``, wait again until everyone is done."""
        run = participant.run
        count = participant.counts.get(spec.key, 0)
        participant.counts[spec.key] = count + 1
        key = (id(run), spec.key, count)
        deadline = time.monotonic() + run.timeout
        me = participant.flat
        cond = self._cond
        with cond:
            meeting = self._meetings.get(key)
            if meeting is None:
                meeting = self._meetings[key] = _Meeting(len(run.local), spec.kind)
            elif meeting.kind != spec.kind:
                meeting.error = InvalidArgument(
                    f"processes of one execution reached different collectives at the same point: "
                    f"{meeting.kind} and {spec.describe()} (divergent control flow?)")
                cond.notify_all()
                raise meeting.error
            meeting.inputs[me] = operands
            meeting.outputs[me] = outputs
            meeting.arrived += 1
            if meeting.arrived == meeting.expected:
                cond.notify_all()
            try:
                self._wait(run, spec, lambda: meeting.arrived >= meeting.expected, deadline, meeting, me,
                           "waiting for the processes to arrive")
            except BaseException:
                self._meetings.pop(key, None)
                raise
        try:
            work(meeting)
        except BaseException as exc:
            with cond:
                if meeting.error is None:
                    meeting.error = exc if isinstance(exc, Exception) else ExecutionError(str(exc))
                cond.notify_all()
            with cond:
                self._meetings.pop(key, None)
            raise
        with cond:
            meeting.left += 1
            if meeting.left == meeting.expected:
                self._meetings.pop(key, None)
                cond.notify_all()
            try:
                self._wait(run, spec, lambda: meeting.left >= meeting.expected, deadline, meeting, me,
                           "waiting for the processes to finish reading")
            except BaseException:
                self._meetings.pop(key, None)
                raise


# -- the ops --------------------------------------------------------------------------------------


def _group_of(groups: tuple[tuple[int, ...], ...], flat: int) -> tuple[int, ...] | None:
    for group in groups:
        if flat in group:
            return group
    return None


def _split(array: np.ndarray, parts: int, dim: int) -> list[np.ndarray]:
    return np.split(array, parts, axis=dim) if parts else []


def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.zeros(shape, dtype)


def _needs_engine(run: CollectiveRun, groups: tuple[tuple[int, ...], ...]) -> bool:
    if run.engine is None:
        return False
    local = set(run.local)
    return any(not set(g) <= local and set(g) & local for g in groups)


def _exchange(run: CollectiveRun, spec: "Collective", groups, meeting: _Meeting, deadline: float) -> None:
    """Fill ``meeting.remote`` with the operands of the processes of other OS processes that
    share a group with a local process (done once, by the first local process)."""
    if meeting.remote is not None:
        return
    engine = run.engine
    assert engine is not None
    local = set(run.local)
    involved = sorted({run.process_of(f) for g in groups if set(g) & local for f in g})
    payload = b"".join(a.tobytes() for f in sorted(local) for a in meeting.inputs[f])
    blobs = engine.allgather(involved, payload, deadline, spec.describe())
    remote: dict[int, list[np.ndarray]] = {}
    all_flat = range(run.num_replicas * run.num_partitions)
    for process, blob in zip(involved, blobs):
        flats = [f for f in all_flat if run.process_of(f) == process]
        offset = 0
        for f in flats:
            arrays = []
            for shape, dtype in zip(spec.operand_shapes, spec.operand_dtypes):
                dtype = np.dtype(dtype)
                n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                arrays.append(np.frombuffer(blob, dtype=dtype, count=n // dtype.itemsize if dtype.itemsize else 0,
                                            offset=offset).reshape(shape))
                offset += n
            if f not in local:
                remote[f] = arrays
    meeting.remote = remote


def _inputs_of(meeting: _Meeting, flat: int) -> list[np.ndarray]:
    got = meeting.inputs.get(flat)
    if got is None and meeting.remote is not None:
        got = meeting.remote.get(flat)
    if got is None:
        raise ExecutionError(f"internal: no operands of process {flat} at this collective")
    return got


def _as_compute(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A view of a backend's storage (bf16 as uint16 bits) in the op's real dtype."""
    if array.dtype != dtype and array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    return array


def run_collective(spec: "Collective", operands: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run one collective op for the current participant; returns its results.

    ``operands`` are the op's operands (any storage of the same itemsize as the real dtype: a
    bf16 tensor may come as its uint16 bits, and comes back the same way). ``all_reduce`` and
    ``reduce_scatter`` need a known ``spec.reduction``; for other regions a backend calls
    :func:`exchange_for_reduction` and folds the region itself.
    """
    participant = current_participant()
    storage = [np.asarray(a, order="C") for a in operands]
    dtypes = [np.dtype(d) for d in spec.operand_dtypes]
    values = [_as_compute(a, d) for a, d in zip(storage, dtypes)]
    kind = spec.kind
    if kind in ("all_reduce", "reduce_scatter") and spec.reduction is None:
        raise InvalidArgument(f"{spec.describe()}: run_collective needs a known reduction; "
                              "use exchange_for_reduction for this region")
    if participant is None:
        participant = _solo()
    run = participant.run
    groups = run.groups(spec)
    me = participant.flat
    outputs = [np.empty(shape, d) for shape, d in zip(spec.result_shapes, dtypes)]
    deadline = time.monotonic() + run.timeout
    cross = _needs_engine(run, groups)

    def work(meeting: _Meeting) -> None:
        if cross and kind == "all_reduce" and _leader_reduce(run, spec, groups, meeting, deadline, me):
            group = _group_of(groups, me)
            if group is not None and meeting.reduced is not None and group in meeting.reduced:
                for out, value in zip(outputs, meeting.reduced[group]):
                    np.copyto(out, value)
                return
        elif cross:
            _leader_exchange(run, spec, groups, meeting, deadline, me)
        _compute(spec, run, groups, meeting, me, outputs, cross)

    run.hub.meet(participant, spec, values, outputs, work)
    return [o.view(s.dtype) if o.dtype != s.dtype else o for o, s in zip(outputs, storage)] \
        if len(storage) == len(outputs) else outputs


def _leader_exchange(run: CollectiveRun, spec: "Collective", groups, meeting: _Meeting, deadline: float,
                     me: int) -> None:
    hub = run.hub
    # The first local process exchanges for all; the others wait for it under the hub's lock.
    with hub._cond:
        leader = min(meeting.inputs)
        if me != leader:
            hub._wait(run, spec, lambda: meeting.remote is not None, deadline, meeting, me,
                      "waiting for the exchange with the other processes of the job")
            return
    try:
        _exchange(run, spec, groups, meeting, deadline)
    finally:
        with hub._cond:
            hub._cond.notify_all()


def _leader_reduce(run: CollectiveRun, spec: "Collective", groups, meeting: _Meeting, deadline: float,
                   me: int) -> bool:
    """An all_reduce whose groups span OS processes, the hierarchical way: each process folds
    its members' operands, the engine reduces those partial results across processes (one call
    per spanning group, in the same order everywhere), and every local member copies its
    group's result. False when the engine cannot reduce this dtype (the caller then exchanges
    operands instead); the answer depends only on the op, so every process takes the same path."""
    engine = run.engine
    assert engine is not None
    hub = run.hub
    local = set(run.local)
    spanning = sorted(g for g in groups if not set(g) <= local and set(g) & local)
    assert spec.reduction is not None  # a reducing op without a known reduction is refused at entry
    ufunc = _UFUNCS[spec.reduction]
    with hub._cond:
        leader = min(meeting.inputs)
        if me != leader:
            hub._wait(run, spec, lambda: meeting.reduced is not None, deadline, meeting, me,
                      "waiting for the reduction across the processes of the job")
            return bool(meeting.reduced) or not spanning
    reduced: dict[tuple[int, ...], list[np.ndarray]] = {}
    try:
        for group in spanning:
            members = [f for f in group if f in local]
            nodes = sorted({run.process_of(f) for f in group})
            results = []
            for j in range(len(spec.operand_dtypes)):
                partial = np.array(meeting.inputs[members[0]][j], copy=True)
                if len(members) > 1:
                    _fold(ufunc, [meeting.inputs[m][j] for m in members], partial)
                total = engine.allreduce(nodes, partial, spec.reduction or "", deadline, spec.describe())
                if total is None:
                    reduced = {}
                    break
                results.append(total)
            else:
                reduced[group] = results
                continue
            break
    finally:
        with hub._cond:
            meeting.reduced = reduced
            hub._cond.notify_all()
    return bool(reduced) or not spanning


def _compute(spec: "Collective", run: CollectiveRun, groups, meeting: _Meeting, me: int,
             outputs: list[np.ndarray], cross: bool) -> None:
    kind = spec.kind
    if kind == "collective_permute":
        source = next((s for s, t in groups if t == me), None)
        if source is None:
            outputs[0][...] = 0
        else:
            np.copyto(outputs[0], _inputs_of(meeting, source)[0])
        return
    group = _group_of(groups, me)
    if kind == "collective_broadcast":
        for j, out in enumerate(outputs):
            if group is None:
                out[...] = 0
            else:
                np.copyto(out, _inputs_of(meeting, group[0])[j])
        return
    assert group is not None
    n = len(group)
    pos = group.index(me)
    if kind == "all_gather":
        for j, out in enumerate(outputs):
            parts = _split(out, n, spec.dimension)
            for k, member in enumerate(group):
                np.copyto(parts[k], _inputs_of(meeting, member)[j])
        return
    if kind == "all_to_all":
        count = spec.split_count
        for j, out in enumerate(outputs):
            parts = _split(out, count, spec.concat_dimension)
            for k, member in enumerate(group):
                np.copyto(parts[k], _split(_inputs_of(meeting, member)[j], count, spec.dimension)[pos])
        return
    assert spec.reduction is not None  # a reducing op without a known reduction is refused at entry
    ufunc = _UFUNCS[spec.reduction]
    if kind == "reduce_scatter":
        sources = [_split(_inputs_of(meeting, member)[0], n, spec.dimension)[pos] for member in group]
        _fold(ufunc, sources, outputs[0])
        return
    # all_reduce: with every member in this OS process, member k reduces slice k of the
    # flattened operands and writes it to every member's output (the work splits n ways);
    # otherwise each computes its own result from the exchanged operands.
    local_group = all(f in meeting.outputs for f in group)
    for j, out in enumerate(outputs):
        if local_group:
            size = out.size
            lo, hi = size * pos // n, size * (pos + 1) // n
            if hi <= lo:
                continue
            flat_out = meeting.outputs[group[0]][j].reshape(-1)[lo:hi]
            _fold(ufunc, [_inputs_of(meeting, m)[j].reshape(-1)[lo:hi] for m in group], flat_out)
            for member in group[1:]:
                np.copyto(meeting.outputs[member][j].reshape(-1)[lo:hi], flat_out)
        else:
            _fold(ufunc, [_inputs_of(meeting, m)[j] for m in group], out)


def _fold(ufunc: Callable[..., Any], sources: list[np.ndarray], out: np.ndarray) -> None:
    """``out = ((s0 op s1) op s2) ...`` in group order (deterministic)."""
    if out.dtype == np.bool_ and ufunc in (np.add, np.multiply):
        ufunc = np.logical_or if ufunc is np.add else np.logical_and
    if len(sources) == 1:
        np.copyto(out, sources[0])
        return
    ufunc(sources[0], sources[1], out=out)
    for s in sources[2:]:
        ufunc(out, s, out=out)


def exchange_for_reduction(spec: "Collective", operands: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For a reduction the backend folds itself: per operand, the group members' contributions
    to this process's result stacked in group order (``[n, *result shape]``): their whole
    operands for ``all_reduce``, their slice for this process for ``reduce_scatter``."""
    participant = current_participant() or _solo()
    run = participant.run
    groups = run.groups(spec)
    me = participant.flat
    storage = [np.asarray(a, order="C") for a in operands]
    group = _group_of(groups, me)
    assert group is not None
    n = len(group)
    pos = group.index(me)
    outputs = [np.empty((n, *shape), a.dtype) for shape, a in zip(spec.result_shapes, storage)]
    deadline = time.monotonic() + run.timeout
    cross = _needs_engine(run, groups)
    spec_bytes = spec if all(a.dtype == np.dtype(d) for a, d in zip(storage, spec.operand_dtypes)) else _as_storage(spec, storage)

    def work(meeting: _Meeting) -> None:
        if cross:
            _leader_exchange(run, spec_bytes, groups, meeting, deadline, me)
        for j, out in enumerate(outputs):
            for k, member in enumerate(group):
                value = _inputs_of(meeting, member)[j]
                if spec.kind == "reduce_scatter":
                    value = _split(value, n, spec.dimension)[pos]
                np.copyto(out[k, ...], value)

    run.hub.meet(participant, spec, storage, outputs, work)
    return outputs


def _as_storage(spec: "Collective", storage: list[np.ndarray]) -> "Collective":
    import dataclasses

    return dataclasses.replace(spec, operand_dtypes=tuple(a.dtype for a in storage))


_SOLO_HUB = Rendezvous()


def _solo() -> Participant:
    """The participant of a program run outside a replicated execution: one process."""
    run = CollectiveRun(("solo", next(_run_ids)), 1, 1, (0,), hub=_SOLO_HUB)
    return Participant(run, 0)
