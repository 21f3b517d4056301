"""Known limitations of plugins that cannot declare their own: C plugins.

A Python plugin lists its gaps in its declaration (:class:`pjrt_hub.abi.Limitation`). A C plugin
has no place for that, so the suite keeps them here, keyed by plugin (its registry name or its
distribution, fnmatch patterns) and PJRT API version. Every entry becomes a strict xfail: when a
new release of the plugin fixes the gap, the case passes, the run fails with XPASS(strict), and
the entry must go. Each entry says what was seen, on which release, and what XLA does there.

The real CPU plugins on PyPI are one XLA CPU client under several names: ``xla-cpu-pjrt``
(``xla_cpu_pjrt.so``), ``fastatomstruct-xla-cpu`` (``libpjrt_cpu.so``) and
``lammps-jax-pjrt-cpu`` (``pjrt_c_api_cpu_plugin.so``, XLA's own target name), so their gaps are
keyed by XLA's API version, not by who packaged it. Versions not listed have not been seen: a gap
there fails, as it should, until someone looks.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from pjrt_hub.abi import Limitation

if TYPE_CHECKING:
    from pjrt_hub import PluginRecord
    from pjrt_hub.abi.probe import ProbeReport

__all__ = ["C_PLUGIN_LIMITATIONS", "KnownLimitations", "XLA_CPU_PLUGINS", "known_limitations"]


def _patterns(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _normal(name: str) -> str:
    """Names compare like distribution names: case, ``-`` and ``_`` do not matter."""
    return name.lower().replace("-", "_")


@dataclass(frozen=True)
class KnownLimitations:
    """Limitations of the C plugins whose name or distribution matches ``plugin``, at ``api_versions``."""

    #: fnmatch pattern(s) on the plugin's registry name or its distribution (case, ``-`` and ``_``
    #: do not matter).
    plugin: str | tuple[str, ...]
    limitations: tuple[Limitation, ...]
    #: fnmatch pattern(s) on the plugin's PJRT API version (``"0.81"``, ``("0.81", "0.106")``).
    api_versions: str | tuple[str, ...] = "*"

    def applies(self, record: "PluginRecord") -> bool:
        names = [_normal(n) for n in (record.name, record.distribution or "") if n]
        version = record.api_version or ""
        return any(fnmatchcase(n, _normal(p)) for n in names for p in _patterns(self.plugin)) and \
            any(fnmatchcase(version, p) for p in _patterns(self.api_versions))


#: The names XLA's CPU plugin goes by on PyPI: the distributions (also the names the matrix gives
#: them) and the registry names of their library files.
XLA_CPU_PLUGINS = ("xla-cpu-pjrt", "fastatomstruct-xla-cpu", "lammps-jax-pjrt-cpu",
                   "pjrt_cpu", "pjrt_c_api_cpu_plugin")

_NO_MEMORY_DESCRIPTIONS = Limitation(
    "XLA's CPU plugin offers the MemoryDescriptions extension but its device descriptions describe no "
    "memory: PJRT_DeviceDescription_MemoryDescriptions returns an empty list for the descriptions of "
    "the client's devices and of its topology alike, though every CPU device has device, pinned_host "
    "and unpinned_host memories. Seen on API 0.81 (xla-cpu-pjrt 0.0.1), 0.106 "
    "(fastatomstruct-xla-cpu 2026.6.23) and 0.115 (lammps-jax-pjrt-cpu 0.11.2).",
    ("extensions/MemoryDescriptions", "extensions/memory_descriptions_match_memories"))

_DELETE_IS_A_NO_OP = Limitation(
    "XLA's CPU client does not delete executables: PJRT_LoadedExecutable_Delete calls "
    "PjRtCpuExecutable::Delete, an empty function, and PjRtCpuExecutable::IsDeleted returns a "
    "constant false (both read off the machine code of xla-cpu-pjrt 0.0.1), so the 'deleted' "
    "executable keeps running. Seen on API 0.81 (xla-cpu-pjrt 0.0.1) and 0.106 "
    "(fastatomstruct-xla-cpu 2026.6.23).",
    ("compile/executable_delete", "compile/execute_deleted"))

_DELETED_STILL_RUNS = Limitation(
    "XLA's CPU client marks an executable deleted (PJRT_LoadedExecutable_IsDeleted is true after "
    "Delete) but PJRT_LoadedExecutable_Execute does not check the mark: the deleted executable still "
    "runs and returns its results. Seen on API 0.115 (lammps-jax-pjrt-cpu 0.11.2).",
    ("compile/execute_deleted",))


_ARGUMENTS_CHECKED_BY_SIZE = Limitation(
    "XLA's CPU client checks an argument buffer against its parameter by size (and memory space) only, as XLA's "
    "runtime defines its input check (error E0102, 'Program Input Mismatch': \"expected parameter N of size S "
    "but got buffer with incompatible size\"); element types are left to the framework (JAX checks them before "
    "dispatch). An s32[4] given for an f32[4] parameter runs, its bits read as f32. Seen on API 0.81 "
    "(xla-cpu-pjrt 0.0.1), 0.106 (fastatomstruct-xla-cpu 2026.6.23) and 0.115 (lammps-jax-pjrt-cpu 0.11.2).",
    ("errors/execute_with_wrong_element_type",))

_NON_DONATABLE_STOPS_LATER_DONATIONS = Limitation(
    "XLA's CPU client at API 0.81 stops donating at the first input listed in non_donatable_input_indices: with "
    "inputs 0 and 1 both aliased to outputs, non_donatable_input_indices=(0,) leaves input 1 undonated too "
    "(PJRT_Buffer_IsDeleted false), while (1,) donates input 0 as it should. Seen on API 0.81 (xla-cpu-pjrt "
    "0.0.1); 0.106 (fastatomstruct-xla-cpu 2026.6.23) and 0.115 (lammps-jax-pjrt-cpu 0.11.2) donate input 1.",
    ("buffers/non_donatable_leaves_the_other_donations",))


C_PLUGIN_LIMITATIONS: tuple[KnownLimitations, ...] = (
    KnownLimitations(XLA_CPU_PLUGINS, (_NO_MEMORY_DESCRIPTIONS, _ARGUMENTS_CHECKED_BY_SIZE),
                     ("0.81", "0.106", "0.115")),
    KnownLimitations(XLA_CPU_PLUGINS, (_DELETE_IS_A_NO_OP,), ("0.81", "0.106")),
    KnownLimitations(XLA_CPU_PLUGINS, (_DELETED_STILL_RUNS,), "0.115"),
    KnownLimitations(XLA_CPU_PLUGINS, (_NON_DONATABLE_STOPS_LATER_DONATIONS,), "0.81"),
)


def known_limitations(record: "PluginRecord", probe: "ProbeReport | None" = None,
                      table: tuple[KnownLimitations, ...] = C_PLUGIN_LIMITATIONS) -> tuple[Limitation, ...]:
    """The table's limitations for a C plugin (none for Python plugins: they declare their own),
    and those a served Python plugin declared, which travel in its ``probe`` report (:mod:`._via`)."""
    if record.kind != "c":
        return ()
    found: list[Limitation] = list(probe.declared_limitations) if probe is not None else []
    for entry in table:
        if entry.applies(record):
            found.extend(entry.limitations)
    return tuple(found)
