"""PJRT_TopologyDescription_* and PJRT_Compile: topologies and compiling ahead of time."""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

from pjrt_hub.abi import Unimplemented

from ..library import decode_named_values
from ._base import _Base, _Executable, _U64, encode_compile_options_default


class _TopologySlots(_Base):
    """The topology functions of :class:`~.ServedApi`."""

    # -- topologies and ahead-of-time compilation --------------------------------------------

    def _topology(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "topology", what)

    def _TopologyDescription_Create(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Create_Args")
        options = decode_named_values(args.create_options, args.num_options, what="PJRT_TopologyDescription_Create",
                                      plugin=self.name) if args.num_options else {}
        args.topology = self._handles.new("topology", self.api.topology_create(options))

    def _TopologyDescription_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Destroy_Args")
        entry = self._handles.entry(args.topology, "topology", "PJRT_TopologyDescription_Destroy") \
            if args.topology else None
        if entry is not None and self._handles.interned.get(("topology", id(entry.obj))) != args.topology:
            self._handles.drop(args.topology, "topology", "PJRT_TopologyDescription_Destroy")

    def _TopologyDescription_PlatformName(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_PlatformName_Args")
        topology = self._topology(args.topology, "PJRT_TopologyDescription_PlatformName")
        name = self.platform_name or topology.platform_name()
        args.platform_name, args.platform_name_size = self._string(("topology platform", args.topology), name)

    def _TopologyDescription_PlatformVersion(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_PlatformVersion_Args")
        text = self._topology(args.topology, "PJRT_TopologyDescription_PlatformVersion").platform_version()
        args.platform_version, args.platform_version_size = self._string(("topology version", args.topology), text)

    def _TopologyDescription_GetDeviceDescriptions(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_GetDeviceDescriptions_Args")
        entry = self._handles.entry(args.topology, "topology", "PJRT_TopologyDescription_GetDeviceDescriptions")
        handles = [self._handles.intern("description", d) for d in entry.obj.get_device_descriptions()]
        args.descriptions = self._pointer_array(entry, "descriptions", handles)
        args.num_descriptions = len(handles)

    def _TopologyDescription_Serialize(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Serialize_Args")
        data = self._topology(args.topology, "PJRT_TopologyDescription_Serialize").serialize()
        self._serialized(data, args, "serialized_bytes", "serialized_bytes_size", "serialized_topology",
                         "serialized_topology_deleter")

    def _TopologyDescription_Deserialize(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Deserialize_Args")
        data = ctypes.string_at(args.serialized_topology, args.serialized_topology_size)
        args.topology = self._handles.new("topology", self.api.topology_deserialize(data))

    def _TopologyDescription_Attributes(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Attributes_Args")
        entry = self._handles.entry(args.topology, "topology", "PJRT_TopologyDescription_Attributes")
        values = entry.kept("attributes") or entry.keep("attributes", self._named_values(
            entry.obj.attributes(), "PJRT_TopologyDescription_Attributes"))
        args.attributes = values.address or None
        args.num_attributes = values.count

    def _TopologyDescription_Fingerprint(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Fingerprint_Args")
        topology = self._topology(args.topology, "PJRT_TopologyDescription_Fingerprint")
        try:
            data = topology.serialize()
        except Unimplemented:
            data = repr([(d.id(), d.kind()) for d in topology.get_device_descriptions()]).encode()
        digest = hashlib.sha256((self.platform_name or topology.platform_name()).encode() + b"\0" + data).digest()
        args.fingerprint = int.from_bytes(digest[:8], "little") & _U64

    def _Compile(self, address: int) -> None:
        args = self._args(address, "PJRT_Compile_Args")
        topology = self._topology(args.topology, "PJRT_Compile")
        program = self._program(args.program, "PJRT_Compile")
        options = ctypes.string_at(args.compile_options, args.compile_options_size) \
            if args.compile_options_size else encode_compile_options_default()
        executable = self.api.compile(program, topology, options)
        args.executable = self._handles.new("executable", _Executable(executable, options))
