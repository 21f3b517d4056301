"""Extension negotiation: what the framework asks for against what the plugin offers.

A pure function, like the version policy: it returns what was agreed and why, and the caller
decides what to do (refuse the plugin, warn once, or go on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ._specs import KNOWN_EXTENSIONS, extension_spec

__all__ = ["ExtensionRequest", "ExtensionWarning", "Negotiation", "negotiate", "parse_request"]


class ExtensionWarning(UserWarning):
    """An optional extension the framework asked for is absent or too old; features degrade."""

    __module__ = "pjrt_hub"


@dataclass(frozen=True, slots=True)
class ExtensionRequest:
    """The framework asks for an extension, at a minimum version, required or optional."""

    name: str
    min_version: int = 1
    required: bool = False

    def __post_init__(self) -> None:
        if extension_spec(self.name) is None:
            raise ValueError(
                f"unknown extension {self.name!r}; known: {', '.join(sorted(KNOWN_EXTENSIONS))}"
            )
        if self.min_version < 0:
            raise ValueError(f"extension {self.name} min_version must be >= 0, got {self.min_version}")

    def __str__(self) -> str:
        kind = "required" if self.required else "optional"
        return f"{self.name}>={self.min_version} ({kind})"


_REQUEST_RE = re.compile(r"\s*([A-Za-z_]+)\s*(?:>=\s*(\d+))?\s*")


def parse_request(text: str, *, required: bool) -> ExtensionRequest:
    """Read ``"Layouts"`` or ``"Layouts>=2"`` as a request."""
    match = _REQUEST_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"bad extension request {text!r}: expected NAME or NAME>=VERSION")
    spec = extension_spec(match.group(1))
    if spec is None:
        raise ValueError(
            f"unknown extension {match.group(1)!r}; known: {', '.join(sorted(KNOWN_EXTENSIONS))}"
        )
    return ExtensionRequest(spec.name, int(match.group(2) or 1), required)


@dataclass(frozen=True, slots=True)
class Negotiation:
    """The outcome: agreed versions, and the reasons anything fell short."""

    #: extension name -> version both sides speak (the older of offered and known).
    agreed: Mapping[str, int] = field(default_factory=dict)
    #: One message per optional request that could not be met.
    degraded: tuple[str, ...] = ()
    #: One message per required request that could not be met; non-empty refuses the plugin.
    refusals: tuple[str, ...] = ()

    @property
    def accepted(self) -> bool:
        return not self.refusals


def negotiate(offered: Mapping[str, int], requests: Sequence[ExtensionRequest], *,
              plugin: str = "the plugin") -> Negotiation:
    """Agree on extensions.

    Every offered extension pjrt-hub knows is agreed at ``min(offered, known)``; offered names it
    does not know are left out (they are reported by the caller's validation). Each request is
    then checked against the agreed set.
    """
    agreed: dict[str, int] = {}
    for name, version in offered.items():
        spec = extension_spec(name)
        if spec is not None:
            agreed[spec.name] = min(version, spec.version)
    degraded, refusals = [], []
    for request in requests:
        have = agreed.get(request.name)
        if have is not None and have >= request.min_version:
            continue
        if have is None:
            problem = f"{plugin} does not offer the {request.name} extension"
        else:
            problem = (f"{plugin} offers the {request.name} extension at version {have}, "
                       f"older than the version {request.min_version} asked for")
        if request.required:
            refusals.append(f"required extension missing: {problem}; install a release of the "
                            f"plugin that implements {request.name} >= {request.min_version}")
        else:
            degraded.append(f"optional extension unavailable: {problem}; features that need "
                            f"{request.name} are disabled")
    return Negotiation(agreed, tuple(degraded), tuple(refusals))
