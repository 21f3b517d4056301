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

Rules (pluggy's, stated for this API): adding a hook or a hook argument is a minor bump; removing
or renaming one is a major bump. An implementation may accept fewer arguments than its spec.
Implementation arguments must not have defaults: pluggy never passes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import pluggy

if TYPE_CHECKING:
    from .binding import Api
    from .declaration import PluginDeclaration

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
