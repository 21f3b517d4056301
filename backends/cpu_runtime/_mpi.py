"""Collectives across the OS processes of a job, over MPI (mpi4py with MPICH's wheel).

Used only for groups that span processes; devices of one process keep meeting in memory. MPI is
an optional dependency (``pip install 'pjrt-hub[distributed]'``), imported on first use, and the
job must have been started by an MPI launcher (``pjrt-hub launch`` runs ``mpiexec``) so that
``MPI.COMM_WORLD`` holds every process, rank = ``node_id``. Every call is non-blocking and
polled against the collective's deadline and the job store's failure mark (the store records a
process that left the job without its goodbye), so a dead peer is an error naming it, never a
hang. Communicators for subsets of the processes are made once and kept.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import numpy as np

from pjrt_hub.abi import Aborted, DeadlineExceeded, FailedPrecondition, KeyValueStore, Unimplemented

#: Seconds a collective tests its MPI request without sleeping (see ``_Engine._wait``): enough
#: for a 64 MiB transfer at memory bandwidth.
_SPIN = 0.05

__all__ = ["FAILED_KEY", "MpiEngine"]

#: The key a job's store sets when a process left without its goodbye (see
#: ``pjrt_hub.distributed``): the value names it.
FAILED_KEY = "pjrt_hub/job/failed"


class MpiEngine:
    def __init__(self, node_id: int, num_nodes: int, kv_store: KeyValueStore | None) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.kv_store = kv_store
        self._mpi: Any = None
        self._comms: dict[tuple[int, ...], Any] = {}

    def _world(self) -> Any:
        if self._mpi is None:
            try:
                from mpi4py import MPI
            except ImportError:
                raise Unimplemented(
                    "collectives across processes need MPI: pip install 'pjrt-hub[distributed]' "
                    "(mpi4py and MPICH) and start the job with `pjrt-hub launch`") from None
            world = MPI.COMM_WORLD
            if world.Get_size() != self.num_nodes or world.Get_rank() != self.node_id:
                raise FailedPrecondition(
                    f"MPI's world has {world.Get_size()} process(es) and this is rank {world.Get_rank()}, but "
                    f"the client is node {self.node_id} of {self.num_nodes}: start the job with "
                    "`pjrt-hub launch` (which runs mpiexec) so that MPI ranks are the job's nodes")
            # Errors come back as exceptions (a dead peer), not as MPI_Abort of this process.
            world.Set_errhandler(MPI.ERRORS_RETURN)
            self._mpi = MPI
        return self._mpi

    def _comm(self, processes: tuple[int, ...]) -> Any:
        MPI = self._world()
        comm = self._comms.get(processes)
        if comm is None:
            world = MPI.COMM_WORLD
            if processes == tuple(range(self.num_nodes)):
                comm = world
            else:
                comm = world.Create_group(world.Get_group().Incl(list(processes)), tag=7)
            self._comms[processes] = comm
        return comm

    def _wait(self, request: Any, deadline: float, what: str, processes: Sequence[int]) -> None:
        # MPI moves a non-blocking collective along only inside calls such as Test: a process
        # that sleeps between tests stalls the transfer (docs/measurements.md). So test
        # without sleeping for SPIN seconds, yielding the core (2 ranks may share 2 cores), and
        # only then back off to short sleeps, for peers that are late rather than busy.
        started = time.monotonic()
        next_check = started + 0.1
        pause = 0.0
        while True:
            try:
                if request.Test():
                    return
            except self._mpi.Exception as exc:
                # MPI saw a peer go: the store says which one (it notices the closed connection).
                end = time.monotonic() + 2.0
                while time.monotonic() < end:
                    failed = self.kv_store.try_get(FAILED_KEY) if self.kv_store is not None else None
                    if failed:
                        raise Aborted(f"{what}: {failed.decode(errors='replace')}; the collective cannot complete") from None
                    time.sleep(0.05)
                raise Aborted(f"{what}: MPI failed: {exc}") from None
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 0.1
                failed = self.kv_store.try_get(FAILED_KEY) if self.kv_store is not None else None
                if failed:
                    raise Aborted(f"{what}: {failed.decode(errors='replace')}; the collective cannot complete")
            if now >= deadline:
                others = [p for p in processes if p != self.node_id]
                raise DeadlineExceeded(f"{what}: processes {others} did not join the collective in time")
            if now - started < _SPIN:
                os.sched_yield()
                continue
            if pause:
                time.sleep(pause)
            pause = min(pause + 0.00002, 0.0005)

    def allgather(self, processes: Sequence[int], payload: bytes, deadline: float, what: str) -> list[bytes]:
        comm = self._comm(tuple(processes))
        MPI = self._mpi
        sizes = np.zeros(comm.Get_size(), np.int64)
        mine = np.array([len(payload)], np.int64)
        self._wait(comm.Iallgather(mine, sizes), deadline, what, processes)
        total = int(sizes.sum())
        out = np.empty(total, np.uint8)
        displs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        send = np.frombuffer(payload, np.uint8) if payload else np.empty(0, np.uint8)
        request = comm.Iallgatherv(send, [out, (sizes, displs), MPI.BYTE])
        self._wait(request, deadline, what, processes)
        raw = out.tobytes()
        return [raw[int(d):int(d) + int(n)] for d, n in zip(displs, sizes)]

    def allreduce(self, processes: Sequence[int], array: np.ndarray, reduction: str, deadline: float,
                  what: str) -> np.ndarray | None:
        MPI = self._world()
        ops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
        if reduction not in ops or array.dtype.kind not in "fiuc" or array.dtype.itemsize < 4 and array.dtype.kind == "f":
            return None
        comm = self._comm(tuple(processes))
        out = np.empty_like(array)
        self._wait(comm.Iallreduce(np.ascontiguousarray(array), out, op=ops[reduction]), deadline, what, processes)
        return out
