"""``CpuApi``: the ``PJRT_Api`` of a host-memory plugin, given the compiler that makes its programs.

The numba_cpu plugin and the reference plugin are both this class with their own compiler,
API version and attributes; everything else (devices, buffers, events, executables) is shared.
"""

from __future__ import annotations

from typing import Any, Mapping

import json

from pjrt_hub.abi import (
    Api,
    DeadlineExceeded,
    KeyValueStore,
    PjrtError,
    ApiVersion,
    Client,
    CompileOptions,
    Executable,
    InvalidArgument,
    NamedValues,
    Program,
    TopologyDescription,
)
from pjrt_hub.abi.version import VersionLike

from ._client import CpuClient, _compile_options, compile_program
from ._collectives import DEFAULT_COLLECTIVE_TIMEOUT
from ._executables import InlinePolicy
from ._topology import (
    DEFAULT_NUM_DEVICES,
    DEVICE_COUNT_OPTIONS,
    CpuDeviceDescription,
    CpuTopologyDescription,
    _attributes,
    copied,
    deserialize_topology,
    read_num_devices,
)
from .compiler import ProgramCompiler

__all__ = ["CLIENT_OPTIONS", "DEFAULT_API_VERSION", "CpuApi"]

#: Create options a client accepts, with their types. Anything else is refused, as XLA's CPU
#: plugin does from 0.115 on ("Unexpected option name passed to PJRT_Client_Create").
CLIENT_OPTIONS: dict[str, type] = {"num_devices": int, "cpu_device_count": int, "asynchronous": bool,
                                   "collective_timeout": float, "node_id": int, "num_nodes": int}

#: The PJRT C API version a plugin reports unless it says otherwise: the newest upstream header.
DEFAULT_API_VERSION = ApiVersion(0, 105)

_DEFAULT_INLINE_POLICY = InlinePolicy()

#: Options of PJRT_TopologyDescription_Create: only the device count.
TOPOLOGY_OPTIONS: dict[str, type] = {name: int for name in DEVICE_COUNT_OPTIONS}


class CpuApi(Api):
    """A plugin's ``PJRT_Api`` over the host-memory runtime.

    :param compiler: turns program text into :class:`~.compiler.CompiledProgram` objects.
    :param platform_name: ``PJRT_Client_PlatformName`` (``"cpu"``).
    :param api_version: the PJRT C API version the plugin implements.
    :param attributes: ``PJRT_Plugin_Attributes``; add ``xla_version``,
        ``stablehlo_current_version`` and ``stablehlo_minimum_version`` for frameworks that read them.
    :param platform_version: ``PJRT_Client_PlatformVersion``; defaults to one naming the compiler.
    :param num_devices: devices of a client created without a device-count option.
    :param device_attributes: ``PJRT_DeviceDescription_Attributes`` of every device.
    :param extensions: extension implementations by name, handed to the host as they are.
    :param inline_policy: which programs run on the calling thread instead of a device worker.
    :param backend: the plugin's name, which its devices' strings carry (default: none, the
        devices read as the platform's).
    """

    __slots__ = ("_compiler", "_platform_name", "_api_version", "_attributes", "_platform_version",
                 "_num_devices", "_device_attributes", "_extensions", "_inline_policy", "_backend")

    def __init__(self, compiler: ProgramCompiler, *, platform_name: str = "cpu",
                 api_version: VersionLike = DEFAULT_API_VERSION,
                 attributes: Mapping[str, Any] | None = None, platform_version: str | None = None,
                 num_devices: int = DEFAULT_NUM_DEVICES,
                 device_attributes: Mapping[str, Any] | None = None,
                 extensions: Mapping[str, Any] | None = None,
                 inline_policy: InlinePolicy = _DEFAULT_INLINE_POLICY, backend: str = "") -> None:
        if not isinstance(compiler, ProgramCompiler):
            raise InvalidArgument(
                f"CpuApi needs a ProgramCompiler (name, compile, deserialize), got {type(compiler).__name__}"
            )
        self._compiler = compiler
        self._platform_name = platform_name
        self._api_version = ApiVersion.parse(api_version)
        self._attributes = _attributes(attributes)
        self._platform_version = platform_version or f"pjrt-hub cpu_runtime; compiler {compiler.name}"
        if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
            raise InvalidArgument(f"CpuApi: num_devices must be a positive int, got {num_devices!r}")
        self._num_devices = num_devices
        self._device_attributes = _attributes(device_attributes)
        self._extensions = dict(extensions or {})
        self._inline_policy = inline_policy
        self._backend = backend

    @property
    def compiler(self) -> ProgramCompiler:
        return self._compiler

    def api_version(self) -> ApiVersion:
        return self._api_version

    def extensions(self) -> Mapping[str, Any]:
        return dict(self._extensions)

    def plugin_attributes(self) -> dict[str, Any]:
        return copied(self._attributes)

    def client_create(self, options: NamedValues | None = None, *, kv_store: KeyValueStore | None = None) -> Client:
        options = _check_options(options, CLIENT_OPTIONS, "PJRT_Client_Create")
        local = read_num_devices(options, self._num_devices)
        node_id, num_nodes = options.get("node_id", 0), options.get("num_nodes", 1)
        if num_nodes < 1 or not 0 <= node_id < num_nodes:
            raise InvalidArgument(f"create options node_id={node_id}, num_nodes={num_nodes}: need 0 <= node_id < num_nodes")
        if num_nodes > 1:
            return self._job_client(options, local, node_id, num_nodes, kv_store)
        topology = self._topology(local)
        timeout = options.get("collective_timeout", DEFAULT_COLLECTIVE_TIMEOUT)
        if timeout <= 0:
            raise InvalidArgument(f"create option collective_timeout={timeout}: seconds must be positive")
        return CpuClient(self._compiler, topology, asynchronous=options.get("asynchronous", True),
                         inline_policy=self._inline_policy, collective_timeout=timeout)

    def _job_client(self, options: dict[str, Any], local: int, node_id: int, num_nodes: int,
                    kv_store: KeyValueStore | None) -> Client:
        """A client of one process of a job: exchange local topologies through the store (each
        process puts its device count, then reads everyone's), give every device a global id
        (node by node, as XLA's ``BuildGlobalTopology`` does) and its process index."""
        if kv_store is None:
            raise InvalidArgument(f"PJRT_Client_Create: num_nodes={num_nodes} needs the job's key-value store "
                                  "(the kv callbacks)")
        from ._mpi import MpiEngine

        timeout = float(options.get("collective_timeout", DEFAULT_COLLECTIVE_TIMEOUT))
        prefix = f"{self._platform_name}:topology/"
        kv_store.put(f"{prefix}{node_id}", json.dumps({"num_devices": local}).encode())
        counts = []
        for node in range(num_nodes):
            try:
                raw = kv_store.get(f"{prefix}{node}", timeout)
                counts.append(int(json.loads(raw)["num_devices"]))
            except PjrtError as exc:
                raise DeadlineExceeded(f"PJRT_Client_Create: node {node} of the job did not publish its topology "
                                       f"within {timeout:g} s ({exc.message})") from None
            except (ValueError, KeyError, TypeError):
                raise InvalidArgument(f"PJRT_Client_Create: node {node} published a topology this plugin cannot read") from None
        first = sum(counts[:node_id])
        topology = CpuTopologyDescription(
            local, platform_name=self._platform_name, platform_version=self._platform_version,
            attributes={"num_devices": local}, device_attributes=self._device_attributes,
            first_id=first, process_index=node_id, backend=self._backend)
        remote = []
        for node, count in enumerate(counts):
            if node == node_id:
                continue
            start = sum(counts[:node])
            remote += [CpuDeviceDescription(start + i, self._platform_name, self._device_attributes, node,
                                            self._backend) for i in range(count)]
        return CpuClient(self._compiler, topology, asynchronous=options.get("asynchronous", True),
                         inline_policy=self._inline_policy, collective_timeout=timeout, remote=remote,
                         process_index=node_id, engine=MpiEngine(node_id, num_nodes, kv_store))

    def topology_create(self, options: NamedValues | None = None) -> TopologyDescription:
        options = _check_options(options, TOPOLOGY_OPTIONS, "PJRT_TopologyDescription_Create")
        return self._topology(read_num_devices(options, self._num_devices))

    def topology_deserialize(self, serialized: bytes) -> TopologyDescription:
        topology = deserialize_topology(serialized)
        if topology.platform_name() != self._platform_name:
            raise InvalidArgument(
                f"PJRT_TopologyDescription_Deserialize: the topology is for platform "
                f"{topology.platform_name()!r}; this plugin is {self._platform_name!r}"
            )
        return topology

    def compile(self, program: Program, topology: TopologyDescription,
                options: CompileOptions | bytes | None = None) -> Executable:
        if not isinstance(topology, CpuTopologyDescription):
            raise InvalidArgument(f"PJRT_Compile: {topology!r} is not a topology of a pjrt-hub CPU plugin")
        return compile_program(self._compiler, program, _compile_options(options), topology.num_devices)

    def _topology(self, num_devices: int) -> CpuTopologyDescription:
        return CpuTopologyDescription(
            num_devices, platform_name=self._platform_name, platform_version=self._platform_version,
            attributes={"num_devices": num_devices}, device_attributes=self._device_attributes,
            backend=self._backend,
        )

    def __repr__(self) -> str:
        return f"<CpuApi {self._platform_name} {self._api_version} compiler={self._compiler.name}>"


def _check_options(options: NamedValues | None, known: Mapping[str, type], action: str) -> dict[str, Any]:
    options = dict(options or {})
    for name, value in options.items():
        expected = known.get(name)
        if expected is None:
            raise InvalidArgument(
                f"Unexpected option name passed to {action}: {name} (known options: {', '.join(known)})"
            )
        if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
            ok = False
        elif expected is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, expected)
        if not ok:
            raise InvalidArgument(
                f"Option passed to {action} with name {name} has type {type(value).__name__} "
                f"but expected type {expected.__name__}"
            )
    return options
