"""The extensions pjrt-hub knows: PJRT type id, own version, and the Python protocol of each.

Versions are the extension's own, independent of the core API: a C extension carries none at
run time, so for C plugins the version is read off the node's ``struct_size`` (which function
pointers it covers), and for Python plugins it is declared. Inside a protocol, ``@added(n)`` marks
the methods that version ``n`` brought; an implementation of version ``n`` must have every method
up to ``n``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

from pjrt_hub.abi import ExtensionType

__all__ = [
    "CrossHostTransfersExtension",
    "ExtensionSpec",
    "FfiExtension",
    "KNOWN_EXTENSIONS",
    "LayoutsExtension",
    "MemoryDescriptionsExtension",
    "MemoryLayout",
    "ProfilerExtension",
    "RawBufferExtension",
    "StreamExtension",
    "extension_spec",
    "version_from_struct_size",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def added(version: int) -> Callable[[_F], _F]:
    """Mark a protocol method as brought by ``version`` of its extension."""

    def mark(fn: _F) -> _F:
        fn.__extension_version__ = version  # type: ignore[attr-defined]  # a marker on the function: no Callable type declares it
        return fn

    return mark


@dataclass(frozen=True, slots=True)
class MemoryLayout:
    """``PJRT_Buffer_MemoryLayout`` (tiled form): dimension order and tiles."""

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()


@runtime_checkable
class LayoutsExtension(Protocol):
    """Layouts (type 4, core 0.51): memory layouts of buffers, clients and executables."""

    @added(1)
    def buffer_memory_layout(self, buffer: Any) -> MemoryLayout: ...

    @added(1)
    def client_default_layout(self, client: Any, element_type: Any, dims: Sequence[int]) -> MemoryLayout: ...

    @added(2)
    def executable_output_layouts(self, executable: Any) -> list[MemoryLayout]:
        """Added with core 0.81."""
        ...

    @added(3)
    def executable_parameter_layouts(self, executable: Any) -> list[MemoryLayout]:
        """Added with core 0.93."""
        ...


@runtime_checkable
class MemoryDescriptionsExtension(Protocol):
    """MemoryDescriptions (type 6, core 0.59): memory kinds of a device without a client."""

    @added(1)
    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        """``(kind, kind_id)`` of each memory, the default one first."""
        ...


@runtime_checkable
class ProfilerExtension(Protocol):
    """Profiler (type 1, core 0.34): a profiler session that collects a trace."""

    @added(1)
    def start_profiler(self, options: Mapping[str, Any]) -> Any: ...

    @added(1)
    def stop_profiler(self, session: Any) -> bytes:
        """Stop the session and return the collected trace (XSpace bytes for XLA)."""
        ...


@runtime_checkable
class FfiExtension(Protocol):
    """FFI (type 5, core 0.53): custom-call handlers and user data from the framework."""

    @added(1)
    def type_id_register(self, name: str) -> int: ...

    @added(1)
    def user_data_add(self, context: Any, type_id: int, data: Any) -> None: ...

    @added(2)
    def register_handler(self, target_name: str, platform_name: str, handler: Any) -> None: ...


@runtime_checkable
class StreamExtension(Protocol):
    """Stream (type 3, core 0.49): stream handshakes for DLPack consumers."""

    @added(1)
    def get_stream_for_external_ready_events(self, device: Any) -> int: ...

    @added(1)
    def wait_until_buffer_ready_on_stream(self, stream: int, buffer: Any) -> None: ...


@runtime_checkable
class RawBufferExtension(Protocol):
    """RawBuffer (type 8, experimental): untyped views of a buffer's device memory."""

    @added(1)
    def create_raw_alias_of_buffer(self, buffer: Any) -> Any: ...

    @added(1)
    def copy_raw_host_to_device(self, raw_buffer: Any, data: bytes, offset: int) -> Any: ...

    @added(1)
    def copy_raw_device_to_host(self, raw_buffer: Any, offset: int, size: int) -> bytes: ...


@runtime_checkable
class CrossHostTransfersExtension(Protocol):
    """CrossHostTransfers (type 12, core 0.74): buffers sent between hosts."""

    @added(1)
    def make_cross_host_receive_buffers(self, client: Any, shapes: Sequence[Any], device: Any) -> list[Any]: ...

    @added(1)
    def copy_to_remote_device(self, buffer: Any, descriptor: bytes) -> Any: ...


@dataclass(frozen=True, slots=True)
class ExtensionSpec:
    """What pjrt-hub knows of one extension."""

    name: str
    type_id: ExtensionType
    #: The newest version of the extension pjrt-hub speaks.
    version: int
    #: The Python protocol a plugin implements; None for extensions only C plugins carry.
    protocol: type | None = None
    #: C node ``struct_size`` at which each version's last function pointer is covered.
    struct_sizes: Mapping[int, int] = field(default_factory=dict)
    description: str = ""

    def methods(self, version: int) -> tuple[str, ...]:
        """The protocol methods an implementation of ``version`` must have."""
        if self.protocol is None:
            return ()
        names = []
        for name, value in vars(self.protocol).items():
            since = getattr(value, "__extension_version__", None)
            if since is not None and since <= version:
                names.append(name)
        return tuple(names)

    def missing_methods(self, impl: object, version: int) -> tuple[str, ...]:
        return tuple(m for m in self.methods(version) if not callable(getattr(impl, m, None)))


_PROTOCOLS: dict[str, tuple[type, dict[int, int], str]] = {
    # Version 1's methods need the node up to Buffer_MemoryLayout (56 bytes: destroy, serialize,
    # client default layout, buffer layout); Topology_GetDefaultLayout, which came next, is not
    # part of the protocol.
    "Layouts": (LayoutsExtension, {1: 56, 2: 72, 3: 80}, "buffer, client and executable memory layouts"),
    "MemoryDescriptions": (MemoryDescriptionsExtension, {1: 40}, "memory kinds of a device description"),
    "Profiler": (ProfilerExtension, {1: 40}, "profiler sessions and traces"),
    "FFI": (FfiExtension, {1: 40, 2: 48}, "custom-call handlers and user data"),
    "Stream": (StreamExtension, {1: 40}, "external streams for DLPack"),
    "RawBuffer": (RawBufferExtension, {1: 72, 2: 80}, "raw device memory views (experimental)"),
    "CrossHostTransfers": (CrossHostTransfersExtension, {1: 56}, "transfers between hosts"),
}


def _build() -> dict[str, ExtensionSpec]:
    specs = {}
    for kind in ExtensionType:
        protocol, sizes, text = _PROTOCOLS.get(kind.name, (None, {}, "C plugins only"))
        version = max(sizes) if sizes else 1
        specs[kind.name] = ExtensionSpec(kind.name, kind, version, protocol, sizes, text)
    return specs


#: Every extension type of ``PJRT_Extension_Type``, by name.
KNOWN_EXTENSIONS: Mapping[str, ExtensionSpec] = _build()

_BY_LOWER = {name.lower(): spec for name, spec in KNOWN_EXTENSIONS.items()}


def extension_spec(name_or_type: str | int) -> ExtensionSpec | None:
    """Look an extension up by name (case-insensitive) or PJRT type id."""
    if isinstance(name_or_type, str):
        return _BY_LOWER.get(name_or_type.lower())
    for spec in KNOWN_EXTENSIONS.values():
        if spec.type_id == name_or_type:
            return spec
    return None


def version_from_struct_size(spec: ExtensionSpec, struct_size: int) -> int:
    """The newest version whose fields a C node of this ``struct_size`` covers (0: none known)."""
    if not spec.struct_sizes:
        return 1
    covered = [v for v, size in spec.struct_sizes.items() if size <= struct_size]
    return max(covered, default=0)
