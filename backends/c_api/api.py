"""``PJRT_Api`` of a loaded C plugin: :class:`CApi` and :func:`load_api`."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Mapping

from pjrt_hub.abi import (
    Api,
    ApiVersion,
    CompileOptions,
    InvalidArgument,
    NamedValues,
    Program,
    TopologyDescription,
)

from .client import CClient, CTopologyDescription, _compile_error, _options_bytes, _program_structs
from .executables import CExecutable, CExecuteContext
from .extensions import CExtension, wrap_extension
from .kv import forget_store, store_callbacks
from .library import PluginLibrary, encode_named_values, open_library

#: ``PJRT_Client_Create_Args.kv_try_get_callback`` arrived with PJRT C API 0.61.
KV_TRY_GET_SINCE = 61


_INITIALIZED: set[str] = set()
_INIT_LOCK = threading.Lock()


class CApi(Api):
    """``PJRT_Api`` of a loaded C plugin: the entry to its clients, topologies and compiler."""

    __slots__ = ("_lib", "_extensions")

    def __init__(self, lib: PluginLibrary) -> None:
        self._lib = lib
        self._extensions: dict[str, CExtension] | None = None

    @property
    def library(self) -> PluginLibrary:
        return self._lib

    @property
    def name(self) -> str:
        return self._lib.name

    def api_version(self) -> ApiVersion:
        return self._lib.version

    def has(self, c_function: str) -> bool:
        """Whether the plugin's table holds ``c_function`` (and pjrt-hub may call it)."""
        return self._lib.has(c_function)

    def extensions(self) -> Mapping[str, CExtension]:
        """The extension chain by extension name, in chain order: each node with its data
        (``struct_size``, ``type``, ``version``) and, for Layouts, MemoryDescriptions and FFI, the
        methods of the extension's protocol (:mod:`.extensions`)."""
        if self._extensions is None:
            nodes, _stopped = self._lib.extensions()
            wrapped: dict[str, CExtension] = {}
            for node in nodes:
                # A chain may repeat a type; the first node is the one a C caller finds.
                wrapped.setdefault(node.name, wrap_extension(self._lib, node))
            self._extensions = wrapped
        return dict(self._extensions)

    def execute_context_create(self) -> CExecuteContext:
        """``PJRT_ExecuteContext_Create``: a context carrying FFI user data into executions."""
        self.plugin_initialize()
        args = self._lib.args("PJRT_ExecuteContext_Create_Args")
        self._lib.call("PJRT_ExecuteContext_Create", args)
        return CExecuteContext(self._lib, args.context)

    def plugin_initialize(self) -> None:
        with _INIT_LOCK:
            if self._lib.path in _INITIALIZED:
                return
            self._lib.call("PJRT_Plugin_Initialize", self._lib.args("PJRT_Plugin_Initialize_Args"))
            _INITIALIZED.add(self._lib.path)

    def plugin_attributes(self) -> dict[str, Any]:
        return self._lib.plugin_attributes()

    def client_create(self, options: NamedValues | None = None, *, kv_store: Any = None) -> CClient:
        lib = self._lib
        fn = lib.function("PJRT_Client_Create")
        self.plugin_initialize()
        values = encode_named_values(options, minor=lib.minor, what="PJRT_Client_Create options")
        args = lib.args("PJRT_Client_Create_Args", create_options=values.address or None,
                        num_options=values.count)
        callbacks = store_callbacks(kv_store) if kv_store is not None else None
        if callbacks is not None:
            args.kv_get_callback, args.kv_get_user_arg = callbacks.get, callbacks.user_arg
            args.kv_put_callback, args.kv_put_user_arg = callbacks.put, callbacks.user_arg
            if lib.minor >= KV_TRY_GET_SINCE:
                args.kv_try_get_callback, args.kv_try_get_user_arg = callbacks.try_get, callbacks.user_arg
        try:
            lib.check(fn(ctypes.addressof(args)), "PJRT_Client_Create")
        except BaseException:
            if callbacks is not None:
                forget_store(callbacks)
            raise
        client = CClient(lib, args.client)
        if callbacks is not None:
            callbacks.release_with(client._owner)  # the plugin may call them for the client's life
        return client

    def topology_create(self, options: NamedValues | None = None, *, name: str = "") -> CTopologyDescription:
        lib = self._lib
        fn = lib.function("PJRT_TopologyDescription_Create")
        self.plugin_initialize()
        values = encode_named_values(options, minor=lib.minor, what="PJRT_TopologyDescription_Create options")
        encoded = name.encode()
        name_buf = ctypes.create_string_buffer(encoded, max(1, len(encoded)))
        args = lib.args("PJRT_TopologyDescription_Create_Args", topology_name=ctypes.addressof(name_buf),
                        topology_name_size=len(encoded), create_options=values.address or None,
                        num_options=values.count)
        lib.check(fn(ctypes.addressof(args)), "PJRT_TopologyDescription_Create")
        return CTopologyDescription(lib, args.topology, owned=True)

    def topology_deserialize(self, serialized: bytes) -> CTopologyDescription:
        lib = self._lib
        data = bytes(serialized)
        buf = ctypes.create_string_buffer(data, max(1, len(data)))
        args = lib.args("PJRT_TopologyDescription_Deserialize_Args", serialized_topology=ctypes.addressof(buf),
                        serialized_topology_size=len(data))
        lib.call("PJRT_TopologyDescription_Deserialize", args)
        return CTopologyDescription(lib, args.topology, owned=True)

    def compile(self, program: Program, topology: TopologyDescription,
                options: CompileOptions | bytes | None = None, *, client: CClient | None = None) -> CExecutable:
        lib = self._lib
        fn = lib.function("PJRT_Compile")
        if not isinstance(topology, CTopologyDescription):
            raise InvalidArgument(f"compile: expected a topology of this plugin, got {topology!r}")
        prog, keep = _program_structs(lib, program)
        opts = _options_bytes(options)
        opts_buf = ctypes.create_string_buffer(opts, max(1, len(opts)))
        args = lib.args("PJRT_Compile_Args", topology=topology._live("compile"), program=ctypes.addressof(prog),
                        compile_options=ctypes.addressof(opts_buf), compile_options_size=len(opts),
                        client=client._live("compile") if client is not None else None)
        err = fn(ctypes.addressof(args))
        del keep
        if err:
            raise _compile_error(lib, err, "PJRT_Compile")
        return CExecutable(lib, args.executable, client)

    def __repr__(self) -> str:
        return f"<CApi {self._lib.name!r} PJRT C API {self._lib.version}>"


def load_api(path: str, name: str | None = None) -> CApi:
    """Load the plugin at ``path`` in this process and wrap its ``PJRT_Api``.

    This dlopens the library and calls ``GetPjrtApi``; it creates no client. Probe an unknown
    plugin first (:func:`.probe.probe`): loading runs the plugin's static initializers here.
    """
    return CApi(open_library(path, name))
