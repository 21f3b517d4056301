"""What a plugin declares about itself before the host loads it.

A declaration is plain data, cheap to produce: the host reads it first and judges the version
before it registers the plugin with pluggy, the way a framework reads ``PJRT_Api_Version`` before
it calls anything else. Plugins may return a :class:`PluginDeclaration` or a plain mapping with
the same keys; the host validates either strictly and reports garbage as a failed plugin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

__all__ = ["Limitation", "PluginDeclaration"]


@dataclass(frozen=True, slots=True)
class Limitation:
    """A known gap of a plugin, as data: the conformance cases it affects become strict xfails.

    ``cases`` are conformance case ids (``group/name``) or fnmatch patterns of them.
    """

    description: str
    cases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PluginDeclaration:
    """A plugin's statement about itself.

    :param api_version: the PJRT C API version the plugin implements, ``"0.105"``.
    :param platform_name: ``"cpu"``, ``"cuda"``, ...
    :param extensions: extension name to the version the plugin implements.
    :param min_framework_version: the backward-compatibility policy: the oldest framework API
        version this plugin supports when it is newer than the framework. None: only frameworks
        at or above the plugin's own minor (no backward promise).
    :param framework_requires: requirement strings on framework distributions, checked with
        ``packaging`` (``"pjrt-hub>=0.1"``), like JAX's plugin == jaxlib pin.
    :param needs_hardware: creating a client needs hardware or network that may be absent; the
        host then reads the version only and never creates a client on its own.
    :param limitations: known gaps, for the conformance suite.
    """

    api_version: str
    platform_name: str = "unknown"
    extensions: Mapping[str, int] = field(default_factory=dict)
    min_framework_version: str | None = None
    framework_requires: Sequence[str] = ()
    needs_hardware: bool = False
    limitations: Sequence[Limitation] = ()
    description: str = ""
