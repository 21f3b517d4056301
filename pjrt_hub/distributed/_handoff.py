"""Give a process started by ``mpiexec`` its rank's credential, and only that, then become its command.

``mpiexec`` starts every process of a job with the same environment, so the launcher cannot put
each rank's credential there; nor on ``mpiexec``'s command line, which every user of the host can
read. It writes one file per rank in a directory only its user can open, and runs each process as
``python _handoff.py DIRECTORY -- COMMAND...``: this reads the file of the rank MPI gave it,
deletes it, and replaces itself with the command, with :data:`ENV_RANK` and :data:`ENV_CREDENTIAL`
set. It runs before any of the job's own code (with ``python -I -S``, importing nothing of
pjrt-hub), so that by the time the program runs its credential file is gone. Processes of one
user on one host can still read each other's environment: the credential stops a process from
speaking for another rank through the store, it is not a wall between processes of one user.
"""

from __future__ import annotations

import os
import signal
import sys

#: This process's rank in the job, and the credential proving it to the job's store.
ENV_RANK = "PJRT_HUB_RANK"
ENV_CREDENTIAL = "PJRT_HUB_RANK_CREDENTIAL"
#: Where MPI launchers put a process's rank (MPICH's, then Open MPI's).
MPI_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK")


def credential_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank-{rank}")


def take_credential(directory: str, rank: int) -> str:
    """The credential the launcher left for ``rank``; the file is deleted, so it is taken once."""
    path = credential_file(directory, rank)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        credential = os.read(fd, 4096).decode().strip()
    finally:
        os.close(fd)
    os.unlink(path)
    return credential


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python _handoff.py DIRECTORY -- COMMAND...", file=sys.stderr)
        return 2
    directory, command = argv[0], argv[2:]
    rank = next((os.environ[name] for name in MPI_RANK_VARIABLES if os.environ.get(name)), None)
    if rank is None or not rank.isdigit():
        print("pjrt-hub launch: this process has no MPI rank: it was not started by mpiexec", file=sys.stderr)
        return 2
    try:
        credential = take_credential(directory, int(rank))
    except OSError as exc:
        print(f"pjrt-hub launch: no credential for rank {rank} ({exc.strerror}): another process took it, "
              "or the job is over", file=sys.stderr)
        return 2
    env = {**os.environ, ENV_RANK: str(int(rank)), ENV_CREDENTIAL: credential}
    # Python ignores SIGPIPE; an exec keeps ignored signals ignored, and the command expects
    # the default.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"pjrt-hub launch: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
