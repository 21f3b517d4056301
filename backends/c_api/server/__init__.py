"""Serving a Python plugin as a PJRT C plugin: a ``PJRT_Api`` struct built with ctypes.

The C bridge (:mod:`.library`, :mod:`.client`, ...) consumes a C plugin through the Python binding;
this module is the other direction. :class:`ServedApi` takes any :class:`pjrt_hub.abi.Api` (numba_cpu,
the reference interpreter, a third-party Python plugin) and lays out a ``PJRT_Api`` in process
memory whose function slots are ctypes callbacks into it, so that a C caller (jaxlib, or the C
bridge itself) drives the Python plugin exactly as it drives a ``.so``.

The struct is built from the binding's own version history: it reports the plugin's API version,
holds exactly the slots :func:`pjrt_hub.abi.history.function_slots` gives that minor (in that
order, with the ``struct_size`` the history gives), and every slot is callable: a function the
server maps to a binding method forwards to it, any other answers ``UNIMPLEMENTED`` naming
itself, as XLA's own C API wrapper does for what a plugin lacks. Args structs are read and written
through the layouts of :mod:`.structs` (one table for both directions); a caller's ``struct_size``
decides which of the later fields are read.

Rules the C side imposes, kept here once for every slot:

* No exception ever crosses into C. A ctypes callback that raises returns NULL, which PJRT reads
  as success; every callback catches everything and returns a ``PJRT_Error*`` with the code of the
  :class:`~pjrt_hub.abi.PjrtError` (``INTERNAL`` for anything else, naming the function).
* Everything handed out (the struct, the callbacks, the capsule name, strings, arrays) lives as
  long as the C side may read it: the struct for the life of the process, a string of a buffer
  until the buffer is destroyed, a serialized executable until its deleter runs.
* Handles are addresses of small blocks of our own memory, so they are unique while alive; a
  ``PJRT_Error`` and a ``PJRT_Memory`` start with a pointer to their function table (the ``vtable``
  the newer headers give them), so a caller that follows it finds working functions.
* Blocking calls (``PJRT_Event_Await``, a compile) release the GIL while they wait, and callbacks
  into the caller (``PJRT_Event_OnReady``) are called through ctypes, which releases it too, so
  the caller's threads never wait on a lock we hold.

Program text: a framework sends StableHLO as MLIR bytecode (JAX sends a portable artifact); the
server hands the plugin what ``program_reader`` makes of the bytes (the JAX layer converts the
artifact to text with jaxlib's MLIR bindings). Without a reader the bytes go as they are.
"""

from __future__ import annotations

import atexit
from typing import Callable, Mapping

from pjrt_hub.abi import Api, ApiVersion

from ._base import CAPSULE_NAME, AttributeHook, CompileHook, ProgramReader
from ._buffers import _BufferSlots
from ._client import _ClientSlots
from ._devices import _DeviceSlots
from ._events import _PluginEventSlots
from ._executables import _ExecutableSlots
from ._extensions import _ExtensionSlots
from ._topology import _TopologySlots

__all__ = ["CAPSULE_NAME", "AttributeHook", "CompileHook", "ProgramReader", "ServedApi", "serve"]


class ServedApi(_PluginEventSlots, _ClientSlots, _DeviceSlots, _ExecutableSlots, _BufferSlots, _TopologySlots,
                _ExtensionSlots):
    """A ``PJRT_Api`` in this process whose functions are a Python plugin's binding methods.

    :param api: the plugin's :class:`~pjrt_hub.abi.Api`, or a function that makes it (called once,
        on the first call that needs it: the struct can be handed out before the plugin's heavy
        imports).
    :param name: the plugin's name, for messages.
    :param version: the PJRT API version to report; it decides the slots. Default: the Api's.
    :param platform_name: what ``PJRT_Client_PlatformName`` and the topology report instead of
        the plugin's own name (frameworks pick their lowering by it: JAX emits CPU-only custom
        calls for ``"cpu"``).
    :param program_reader: turns the code of an ``"mlir"`` program that is not text (bytecode)
        into what the plugin compiles.
    :param extensions: extension name -> version to serve, for the extensions the server knows
        (Layouts, MemoryDescriptions); their functions call the Api's ``extensions()`` objects.
    :param compile_hook: compiles for ``PJRT_Client_Compile`` instead of ``client.compile``; it
        gets the program as the caller sent it (the reader is not applied).
    :param device_attribute_hook: rewrites the attributes of a device and of its description
        before they are laid out, for a caller that cannot read some ``PJRT_NamedValue`` types
        (jaxlib aborts on boolean and float device attributes).
    """


def serve(api: Api | Callable[[], Api], *, name: str, version: ApiVersion | str | None = None,
          platform_name: str | None = None, program_reader: ProgramReader | None = None,
          extensions: Mapping[str, int] | None = None, compile_hook: CompileHook | None = None,
          device_attribute_hook: AttributeHook | None = None) -> ServedApi:
    """A :class:`ServedApi` for ``api``, kept for the life of the process (a C caller keeps raw
    pointers into it and everything it hands out)."""
    served = ServedApi(api, name=name, version=version, platform_name=platform_name,
                       program_reader=program_reader, extensions=extensions, compile_hook=compile_hook,
                       device_attribute_hook=device_attribute_hook)
    _SERVED.append(served)
    return served


#: Every struct served in this process: a C caller keeps raw pointers into them forever.
_SERVED: list[ServedApi] = []


@atexit.register
def _retire_all() -> None:
    for served in _SERVED:
        served.retire()
