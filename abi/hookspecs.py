"""Every hook of the ``pjrt_hub`` plugin API, in lifecycle order.

A Python plugin is any object (usually a module) named by an entry point in the group
``pjrt_hub.plugins`` whose functions are marked with :data:`hookimpl`::

    # my_plugin.py
    from pjrt_hub.abi import PluginDeclaration, hookimpl

    @hookimpl
    def pjrt_hub_declare():
        return PluginDeclaration(api_version="0.105", platform_name="cpu")

    @hookimpl
    def pjrt_hub_get_api():
        from my_plugin._impl import MyApi   # heavy imports belong here, not at module top
        return MyApi()

PJRT C libraries are reached through *loaders*, objects named by entry points in the group
``pjrt_hub.loaders`` that implement the two library hooks below; pjrt-hub's own ctypes bridge is
one, registered the same way.

Rules (pluggy's, stated for this API): adding a hook or a hook argument is a minor bump; removing
or renaming one is a major bump. An implementation may accept fewer arguments than its spec.
Implementation arguments must not have defaults: pluggy never passes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import pluggy

if TYPE_CHECKING:
    from .binding import Api
    from .declaration import PluginDeclaration
    from .probe import ProbeReport

__all__ = ["PROJECT", "hookimpl"]

#: The pluggy project name; hookimpl markers carry it.
PROJECT = "pjrt_hub"

_spec = pluggy.HookspecMarker(PROJECT)
#: Marks a plugin's hook implementations.
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- discovery ---------------------------------------------------------------------------------


@_spec(firstresult=True)
def pjrt_hub_declare() -> "PluginDeclaration | Mapping[str, object]":
    """Declare the plugin: its PJRT API version, platform, extensions and policies.

    Called before the plugin is registered, so that a skewed version is refused with a version
    message. Must be cheap and free of side effects: no device access, no heavy imports.

    :return: a :class:`~pjrt_hub.abi.PluginDeclaration` or a mapping with the same keys.
        Stops at first non-None result.

    .. versionadded:: 0.29 (the oldest API version of the history)
    """


# -- loading -----------------------------------------------------------------------------------


@_spec(firstresult=True)
def pjrt_hub_get_api() -> "Api":
    """Return the plugin's API object, the analogue of ``GetPjrtApi()`` in a C plugin.

    Called once the declaration was accepted. This is the place for heavy imports.

    :return: an instance of a subclass of :class:`~pjrt_hub.abi.Api`. Stops at first non-None result.

    .. versionadded:: 0.29
    """


# -- C libraries (loaders) ---------------------------------------------------------------------


@_spec(firstresult=True)
def pjrt_hub_probe_library(path: str, timeout: float) -> "ProbeReport | Mapping[str, Any] | None":
    """Read what a PJRT C library declares, without risking the caller's process.

    A library may abort, hang or crash when loaded or called, so a loader reads it in a separate
    process with ``timeout`` seconds to finish.

    :param path: the shared library (``.so``) to read.
    :param timeout: seconds before the reading is abandoned and reported as timed out.
    :return: a :class:`~pjrt_hub.abi.probe.ProbeReport` (``from pjrt_hub.abi.probe import
        ProbeReport``): ``outcome`` (``"ok"``, or what went wrong: ``"load_failed"``,
        ``"no_symbol"``, ``"crashed"``, ``"timed_out"``, ...) and ``reason``; when ok,
        ``api_version`` (``"0.81"``), ``extensions`` (type id, name and struct_size of each)
        and, when creating a client is known to be unsafe here, ``client_creation_risk`` (why).
        A mapping of the same fields is accepted too (``message`` for ``reason``; ``path`` and
        ``name`` may be left out); the host validates it into a ProbeReport, and reports keys
        beyond its fields as they are. None if this loader cannot read such a file. Stops at
        first non-None result.

    .. versionadded:: 0.29
    """


@_spec(firstresult=True)
def pjrt_hub_load_library(path: str, name: str) -> "Api | None":
    """Load a PJRT C library into this process and return its API object.

    Called only for a library whose probe was accepted by the version policy.

    :param path: the shared library.
    :param name: the plugin's name, for messages.
    :return: an :class:`~pjrt_hub.abi.Api` over the library. Stops at first non-None result.

    .. versionadded:: 0.29
    """
