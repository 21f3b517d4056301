"""Several processes, one job: the framework side of PJRT's multi-node bootstrap.

``pjrt-hub launch -n P [--devices-per-process D] -- python script.py`` starts a job on this
host (the way ``torchrun`` does): it runs the job's key-value store (:class:`StoreServer`,
loopback only, each process admitted with its own rank's credential) and starts P processes,
under MPICH's ``mpiexec`` when the ``[distributed]`` extra is installed, so that collectives
spanning processes go over MPI.
In each process, :func:`initialize` reads what the launcher set and gives a :class:`Job`::

    job = pjrt_hub.distributed.initialize()
    client = job.create_client("numba_cpu")   # node_id, num_nodes and the job's store

:class:`JaxKeyValueStore` lets JAX's ``DistributedRuntimeClient`` be the store instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pjrt_hub.abi import DeadlineExceeded, InvalidArgument

from ._handoff import ENV_CREDENTIAL, ENV_RANK, MPI_RANK_VARIABLES
from ._store import FAILED_KEY, StoreClient, StoreServer, new_token, rank_credential

__all__ = ["FAILED_KEY", "Job", "JaxKeyValueStore", "StoreClient", "StoreServer", "initialize", "new_token",
           "rank_credential"]

#: Environment the launcher sets for every process (and, each its own, ENV_RANK and ENV_CREDENTIAL).
ENV_STORE, ENV_SIZE, ENV_DEVICES, ENV_TIMEOUT = (
    "PJRT_HUB_STORE", "PJRT_HUB_WORLD_SIZE", "PJRT_HUB_DEVICES_PER_PROCESS", "PJRT_HUB_KV_TIMEOUT")


@dataclass
class Job:
    """This process's place in a job."""

    rank: int
    world_size: int
    devices_per_process: int
    store: Any
    timeout: float = 60.0
    clients: list = field(default_factory=list)

    def create_client(self, plugin: str = "numba_cpu", registry: Any = None, **options: Any) -> Any:
        """A client of ``plugin`` for this process: its local devices, knowing the whole job."""
        if registry is None:
            from pjrt_hub._registry import PluginRegistry

            registry = PluginRegistry.from_environment()
        api = registry.api(plugin)
        create = {"node_id": self.rank, "num_nodes": self.world_size,
                  "cpu_device_count": self.devices_per_process, "collective_timeout": float(self.timeout),
                  **options}
        client = api.client_create(create, kv_store=self.store)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            try:
                client.destroy()
            except Exception:  # noqa: BLE001 - closing
                pass
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


def _rank_from_env(environ) -> int:
    for name in (ENV_RANK, *MPI_RANK_VARIABLES):
        if environ.get(name) not in (None, ""):
            return int(environ[name])
    raise InvalidArgument(f"no rank for this process: run it with `pjrt-hub launch` (which sets {ENV_RANK}) "
                          "or pass rank= to initialize()")


def initialize(*, rank: int | None = None, world_size: int | None = None, store: Any = None,
               environ: Any = None) -> Job:
    """Join the job the launcher started (or the one described by the arguments)."""
    environ = os.environ if environ is None else environ
    rank = _rank_from_env(environ) if rank is None else rank
    world_size = int(environ.get(ENV_SIZE, "1")) if world_size is None else world_size
    devices = int(environ.get(ENV_DEVICES, "1"))
    timeout = float(environ.get(ENV_TIMEOUT, "60"))
    if store is None:
        address, credential = environ.get(ENV_STORE), environ.get(ENV_CREDENTIAL)
        if not address or not credential:
            raise InvalidArgument(f"no job store: run under `pjrt-hub launch` (which sets {ENV_STORE} and "
                                  f"{ENV_CREDENTIAL}) or pass store=")
        store = StoreClient(address, credential, rank)
    if not 0 <= rank < world_size:
        raise InvalidArgument(f"rank {rank} is outside the job's {world_size} processes")
    if environ.get(ENV_STORE):
        _interrupt_after_grace()
    return Job(rank, world_size, devices, store, timeout)


_GRACE_SECONDS = 3.0
_grace_started = False


def _interrupt_after_grace() -> None:
    """When MPI's process manager interrupts a process because another one died, give it a few
    seconds to fail its collective with an error naming the dead process (the store records who
    left), then interrupt it as usual. Installed only in the main thread, for launched jobs."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame) -> None:
        global _grace_started
        if _grace_started:
            return
        _grace_started = True

        def later() -> None:
            import _thread
            import time

            time.sleep(_GRACE_SECONDS)
            _thread.interrupt_main()

        threading.Thread(target=later, daemon=True).start()

    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, handler)


class JaxKeyValueStore:
    """JAX's ``DistributedRuntimeClient`` (``jax._src.distributed.global_state.client``) as the
    job's store, under a key prefix (XLA uses ``"cpu:"`` for its CPU client)."""

    def __init__(self, client: Any, prefix: str = "pjrt_hub:") -> None:
        self._client = client
        self._prefix = prefix

    def get(self, key: str, timeout: float) -> bytes:
        try:
            return bytes(self._client.blocking_key_value_get_bytes(self._prefix + key, int(timeout * 1000)))
        except Exception as exc:  # noqa: BLE001 - the JAX client raises its own error types
            if "DEADLINE" in str(exc).upper() or "TIMEOUT" in str(exc).upper():
                raise DeadlineExceeded(f"JAX's key-value store has no {key!r} after {timeout:g} s") from None
            raise

    def try_get(self, key: str) -> bytes | None:
        try:
            return bytes(self._client.key_value_try_get_bytes(self._prefix + key))
        except Exception as exc:  # noqa: BLE001 - a missing key raises NOT_FOUND there
            if "NOT_FOUND" in str(exc).upper() or "NOT FOUND" in str(exc).upper():
                return None
            raise

    def put(self, key: str, value: bytes) -> None:
        self._client.key_value_set_bytes(self._prefix + key, bytes(value))
