"""``pjrt-hub launch``: start a job of P processes on this host, the way ``torchrun`` does.

The launcher runs the job's store (loopback, a random secret it keeps) and starts the processes
under MPICH's ``mpiexec`` when mpi4py and MPICH are installed (``pjrt-hub[distributed]``), else
as plain subprocesses (then only collectives within a process work). Each process gets its rank
and that rank's credential, never the secret: a subprocess in its environment, a process of
``mpiexec`` through :mod:`._handoff`. ``mpiexec`` is told not to kill the job when one process
dies: the store notices the dead process and the others fail their collectives with an error
naming it, then exit; the launcher reports every exit. A process that cannot (one stuck inside
MPI's start-up, where no Python runs, when another died there) is killed with the rest of the
job once the job has failed and the store's timeout has passed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from . import ENV_CREDENTIAL, ENV_DEVICES, ENV_RANK, ENV_SIZE, ENV_STORE, ENV_TIMEOUT
from ._handoff import credential_file
from ._store import FAILED_KEY, StoreServer, new_token

__all__ = ["launch", "mpiexec_path"]


def mpiexec_path() -> str | None:
    """MPICH's launcher next to this Python (the ``mpich`` wheel's), if mpi4py is importable too.

    The ``gforker`` process manager is preferred: when one process dies it interrupts the others
    (SIGINT) rather than killing them, which gives them the time to name the dead one (see
    :func:`pjrt_hub.distributed.initialize`); hydra kills them outright."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    for name in ("mpiexec.gforker", "mpiexec"):
        here = Path(sys.executable).parent / name
        if here.exists():
            return str(here)
    return shutil.which("mpiexec")


def launch(command: Sequence[str], processes: int, *, devices_per_process: int = 1, timeout: float = 60.0,
           host: str = "127.0.0.1", use_mpi: bool | None = None, out=sys.stderr) -> int:
    """Run ``command`` as ``processes`` processes of one job; the exit status of the job."""
    mpiexec = mpiexec_path() if use_mpi is not False else None
    if use_mpi and mpiexec is None:
        print("pjrt-hub launch: --mpi needs mpi4py and MPICH: pip install 'pjrt-hub[distributed]'", file=out)
        return 2
    server = StoreServer(new_token(), host=host).start()
    # What a process of an enclosing job was given is not this job's.
    env = {name: value for name, value in os.environ.items() if name not in (ENV_RANK, ENV_CREDENTIAL)}
    env.update({ENV_STORE: server.address, ENV_SIZE: str(processes),
                ENV_DEVICES: str(devices_per_process), ENV_TIMEOUT: str(timeout)})
    handoff: str | None = None
    try:
        # Each in a session of its own, so that the job can be ended whole (mpiexec's ranks too);
        # an interrupt of the launcher is passed on to it (see _wait).
        grace = max(MIN_GRACE_SECONDS, timeout)
        if mpiexec is not None:
            # Hydra would kill every process when one dies; leave that to the job (the store
            # names the dead process to the others) so that every survivor says what happened.
            extra = [] if mpiexec.endswith("gforker") else ["-disable-auto-cleanup", "-bind-to", "none"]
            handoff = tempfile.mkdtemp(prefix="pjrt-hub-job-")  # only this user may open it
            _write_credentials(server, handoff, processes)
            argv = [mpiexec, "-n", str(processes), *extra, sys.executable, "-I", "-S", HANDOFF, handoff, "--",
                    *command]
            child = subprocess.Popen(argv, env=env, start_new_session=True)
            code = _wait([child], server, grace, out)[0]
        else:
            children = []
            for rank in range(processes):
                own = {ENV_RANK: str(rank), ENV_CREDENTIAL: server.credential(rank)}
                children.append(subprocess.Popen(list(command), env={**env, **own}, start_new_session=True))
            codes = _wait(children, server, grace, out)
            for rank, c in enumerate(codes):
                if c:
                    why = f"killed by {signal.Signals(-c).name}" if c < 0 else f"exit status {c}"
                    print(f"pjrt-hub launch: rank {rank} failed ({why})", file=out)
            code = next((c for c in codes if c), 0)
    except KeyboardInterrupt:
        code = 130
    finally:
        failed = server.value(FAILED_KEY)
        if failed:
            print(f"pjrt-hub launch: {failed.decode(errors='replace')}", file=out)
            # gforker reports 0 for processes it had to signal: the job failed all the same.
            code = code or 1
        for why in server.refused:
            print(f"pjrt-hub launch: the store refused a stranger: {why}", file=out)
        for why in server.refused_puts:
            print(f"pjrt-hub launch: {why}", file=out)
        server.close()
        if handoff is not None:
            shutil.rmtree(handoff, ignore_errors=True)
    if code < 0:
        code = 128 - code
    return code


#: The least time the processes of a failed job get to end by themselves (see :func:`_wait`).
MIN_GRACE_SECONDS = 5.0
#: What each process of ``mpiexec`` runs first, to take its credential (run by path, so that it
#: imports nothing of pjrt-hub).
HANDOFF = str(Path(__file__).with_name("_handoff.py"))


def _write_credentials(server: StoreServer, directory: str, processes: int) -> None:
    """One file per rank in ``directory``, holding the rank's credential, for :mod:`._handoff`."""
    for rank in range(processes):
        fd = os.open(credential_file(directory, rank), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, server.credential(rank).encode())
        finally:
            os.close(fd)


def _signal_groups(processes: Sequence[subprocess.Popen], sig: int) -> None:
    for process in processes:
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait(processes: Sequence[subprocess.Popen], server: StoreServer, grace: float, out) -> list[int]:
    """The exit status of each of ``processes`` (each the leader of its own process group).

    Once the job has failed (the store recorded a death, or a process exited with an error),
    what is still running gets ``grace`` seconds to end by itself, then its group is killed. An
    interrupt of the launcher is passed on to the groups, with the same grace; a second one
    kills them (and either is raised again once they are gone)."""
    failed_at: float | None = None
    interrupted = False
    while True:
        try:
            codes = [p.poll() for p in processes]
            if all(c is not None for c in codes):
                break
            if failed_at is None and (server.value(FAILED_KEY) or any(codes)):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > grace:
                print(f"pjrt-hub launch: the job failed and {sum(c is None for c in codes)} of its processes "
                      f"were still running {grace:g} s later: killed", file=out)
                _signal_groups(processes, signal.SIGKILL)
                break
            time.sleep(0.05)
        except KeyboardInterrupt:
            if interrupted:
                _signal_groups(processes, signal.SIGKILL)
                break
            interrupted = True
            failed_at = time.monotonic() if failed_at is None else failed_at
            _signal_groups(processes, signal.SIGINT)
    statuses = [p.wait() for p in processes]
    if interrupted:
        raise KeyboardInterrupt
    return statuses
