"""The extension functions the server serves: Layouts and MemoryDescriptions from the plugin's
extension protocols, Shardings from its executables."""

from __future__ import annotations

import ctypes
from typing import Any

from pjrt_hub.abi import Unimplemented
from pjrt_hub.extensions import MemoryLayout

from ..extensions import format_xla_layout
from ._base import _U64, _Base, _buffer_type, _MemoryDescription


class _ExtensionSlots(_Base):
    """The extension functions of :class:`~.ServedApi`."""

    # -- extensions ----------------------------------------------------------------------------

    def _extension(self, name: str, what: str) -> Any:
        found = self.api.extensions().get(name)
        if found is None:
            raise Unimplemented(f"{what}: plugin {self.name!r} declares the {name} extension but its Api offers "
                                "no implementation of it")
        return found

    def _layout_handle(self, value: MemoryLayout) -> int:
        return self._handles.new("layout", value)

    def _Layouts_MemoryLayout_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Layouts_MemoryLayout_Destroy_Args")
        self._handles.drop(args.layout, "layout", "PJRT_Layouts_MemoryLayout_Destroy")

    def _Layouts_MemoryLayout_Serialize(self, address: int) -> None:
        args = self._args(address, "PJRT_Layouts_MemoryLayout_Serialize_Args")
        value = self._handles.get(args.layout, "layout", "PJRT_Layouts_MemoryLayout_Serialize")
        self._serialized(format_xla_layout(value).encode(), args, "serialized_bytes", "serialized_bytes_size",
                         "serialized_layout", "serialized_layout_deleter")

    def _Layouts_PJRT_Client_GetDefaultLayout(self, address: int) -> None:
        what = "PJRT_Layouts_PJRT_Client_GetDefaultLayout"
        args = self._args(address, what + "_Args")
        client = self._client(args.client, what)
        dims = self._int64s(args.dims, args.num_dims, what)
        value = self._extension("Layouts", what).client_default_layout(client, _buffer_type(args.type, what), dims)
        args.layout = self._layout_handle(value)

    def _Layouts_PJRT_Buffer_MemoryLayout(self, address: int) -> None:
        what = "PJRT_Layouts_PJRT_Buffer_MemoryLayout"
        args = self._args(address, what + "_Args")
        buffer = self._buffer(args.buffer, what)
        args.layout = self._layout_handle(self._extension("Layouts", what).buffer_memory_layout(buffer))

    def _Layouts_PJRT_Topology_GetDefaultLayout(self, address: int) -> None:
        what = "PJRT_Layouts_PJRT_Topology_GetDefaultLayout"
        args = self._args(address, what + "_Args")
        topology = self._topology(args.topology_description, what)
        dims = self._int64s(args.dims, args.num_dims, what)
        extension = self._extension("Layouts", what)
        method = getattr(extension, "topology_default_layout", None)
        if method is not None:
            value = method(topology, _buffer_type(args.type, what), dims)
        else:
            # The protocol has no topology method: a dense row-major layout is what every
            # pjrt-hub CPU plugin gives, and what a client of this topology would give.
            value = MemoryLayout(tuple(range(len(dims) - 1, -1, -1)))
        args.layout = self._layout_handle(value)

    def _executable_layouts(self, address: int, what: str, method: str, count: str) -> None:
        args = self._args(address, what + "_Args")
        entry = self._executable_entry(args.executable, what)
        values = getattr(self._extension("Layouts", what), method)(entry.obj.obj)
        # The layouts belong to the executable: the caller reads them and never destroys them.
        handles = [self._handles.new("layout", v) for v in values]
        entry.keep(method, [(h, self._handles.entries[h]) for h in handles])
        setattr(args, count, len(handles))
        args.layouts = self._pointer_array(entry, method + " array", handles)

    def _Layouts_PJRT_Executable_GetOutputLayouts(self, address: int) -> None:
        self._executable_layouts(address, "PJRT_Layouts_PJRT_Executable_GetOutputLayouts",
                                 "executable_output_layouts", "num_outputs")

    def _Layouts_PJRT_Executable_GetParameterLayouts(self, address: int) -> None:
        self._executable_layouts(address, "PJRT_Layouts_PJRT_Executable_GetParameterLayouts",
                                 "executable_parameter_layouts", "num_parameters")

    def _executable_shardings(self, address: int, what: str, method: str, count: str) -> None:
        args = self._args(address, what + "_Args")
        entry = self._executable_entry(args.executable, what)
        getter = getattr(entry.obj.obj, method, None)
        protos = getter() if getter is not None else None
        if protos is None:
            setattr(args, count, 0)
            args.shardings = None
            args.sharding_sizes = None
            return
        bufs = [ctypes.create_string_buffer(bytes(p), max(1, len(p))) for p in protos]
        pointers = (ctypes.c_void_p * max(1, len(bufs)))(*[ctypes.addressof(b) for b in bufs])
        sizes = (ctypes.c_size_t * max(1, len(bufs)))(*[len(p) for p in protos])
        entry.keep(method, (bufs, pointers, sizes))
        setattr(args, count, len(protos))
        args.shardings = ctypes.addressof(pointers)
        args.sharding_sizes = ctypes.addressof(sizes)

    def _Shardings_PJRT_Executable_ParameterShardings(self, address: int) -> None:
        self._executable_shardings(address, "PJRT_Shardings_PJRT_Executable_ParameterShardings",
                                   "parameter_shardings", "num_parameters")

    def _Shardings_PJRT_Executable_OutputShardings(self, address: int) -> None:
        self._executable_shardings(address, "PJRT_Shardings_PJRT_Executable_OutputShardings",
                                   "output_shardings", "num_outputs")

    def _DeviceDescription_MemoryDescriptions(self, address: int) -> None:
        what = "PJRT_DeviceDescription_MemoryDescriptions"
        args = self._args(address, what + "_Args")
        entry = self._handles.entry(args.device_description, "description", what)
        kinds = self._extension("MemoryDescriptions", what).memory_descriptions(entry.obj)
        handles = [self._handles.intern("memory_description", _MemoryDescription(str(k), int(i), entry.obj))
                   for k, i in kinds]
        entry.keep("memory descriptions", [self._handles.entries[h].obj for h in handles])
        args.memory_descriptions = self._pointer_array(entry, "memory description array", handles)
        args.num_memory_descriptions = len(handles)
        args.default_memory_index = 0 if handles else _U64  # the protocol lists the default first

    def _MemoryDescription_Kind(self, address: int) -> None:
        args = self._args(address, "PJRT_MemoryDescription_Kind_Args")
        description = self._handles.get(args.memory_description, "memory_description", "PJRT_MemoryDescription_Kind")
        args.kind, args.kind_size = self._string(("memory description", description.kind), description.kind)
        args.kind_id = description.kind_id
