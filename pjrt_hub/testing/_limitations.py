"""Known limitations of plugins that cannot declare their own: C plugins.

A Python plugin lists its gaps in its declaration (:class:`pjrt_hub.abi.Limitation`). A C plugin
has no place for that, so the suite keeps them here, keyed by plugin (its registry name or its
distribution, fnmatch patterns) and PJRT API version. Every entry becomes a strict xfail: when a
new release of the plugin fixes the gap, the case passes, the run fails with XPASS(strict), and
the entry must go. Each entry says what was seen and on which release.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from pjrt_hub.abi import Limitation

if TYPE_CHECKING:
    from pjrt_hub import PluginRecord

__all__ = ["C_PLUGIN_LIMITATIONS", "KnownLimitations", "known_limitations"]


@dataclass(frozen=True)
class KnownLimitations:
    """Limitations of the C plugins whose name or distribution matches ``plugin``, at ``api_versions``."""

    plugin: str
    limitations: tuple[Limitation, ...]
    #: fnmatch pattern on the plugin's PJRT API version (``"0.81"``, ``"0.1*"``).
    api_versions: str = "*"

    def applies(self, record: "PluginRecord") -> bool:
        names = [record.name, record.distribution or ""]
        version = record.api_version or ""
        return any(fnmatchcase(n.lower(), self.plugin.lower()) for n in names if n) and \
            fnmatchcase(version, self.api_versions)


C_PLUGIN_LIMITATIONS: tuple[KnownLimitations, ...] = ()


def known_limitations(record: "PluginRecord",
                      table: tuple[KnownLimitations, ...] = C_PLUGIN_LIMITATIONS) -> tuple[Limitation, ...]:
    """The table's limitations for a C plugin (none for Python plugins: they declare their own)."""
    if record.kind != "c":
        return ()
    found: list[Limitation] = []
    for entry in table:
        if entry.applies(record):
            found.extend(entry.limitations)
    return tuple(found)
