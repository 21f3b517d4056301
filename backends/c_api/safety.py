"""Whether a client may be created for a C plugin on this machine, and a way to try it safely.

Creating a client is where plugins touch hardware and the network, and where they fail worst:
libtpu contacts the cloud metadata server and retries for minutes on a machine without TPUs,
jax-tt-plugin aborts the whole process when it finds no Tenstorrent chip, CUDA plugins refuse
cleanly without a GPU. :func:`client_creation_risk` knows these plugins by name, attributes and
needed libraries and checks for their device nodes, so the host can say which plugins it did not
start and why. For a plugin it knows nothing about, :func:`safe_client_check` creates and destroys
a client in a child process with a timeout before the host does it in its own process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from .probe import ProbeReport, resolve_library

__all__ = ["ClientCheck", "KnownRisk", "KNOWN_RISKS", "client_creation_risk", "safe_client_check"]


@dataclass(frozen=True)
class KnownRisk:
    """A family of plugins that needs hardware to create a client, and what happens without it."""

    family: str
    #: Lower-case fragments of the plugin's name or path that identify the family.
    name_hints: tuple[str, ...]
    #: Fragments of DT_NEEDED library names, and plugin attribute keys, that identify it too.
    library_hints: tuple[str, ...] = ()
    attribute_hints: tuple[str, ...] = ()
    #: Glob patterns of the device nodes whose presence means the hardware is there.
    devices: tuple[str, ...] = ()
    without_hardware: str = ""


KNOWN_RISKS: tuple[KnownRisk, ...] = (
    KnownRisk("TPU", ("libtpu",), (), (), ("/dev/accel*", "/dev/vfio/[0-9]*"),
              "libtpu contacts the cloud metadata server when it creates a client and retries for "
              "minutes on a machine without TPU chips (seen hanging past 120 s)"),
    KnownRisk("Tenstorrent", ("libtt", "jax_plugins/tt", "pjrt_plugin_tt", "tenstorrent"), (), (),
              ("/dev/tenstorrent*",),
              "jax-tt-plugin aborts the whole process in PJRT_Client_Create when it finds no chip "
              "(TT_FATAL: No chips detected, SIGABRT)"),
    KnownRisk("CUDA", ("cuda", "xla_gpu", "nvidia"), ("libcuda", "libcudart", "libcublas", "libcupti"),
              ("cuda_version",), ("/dev/nvidia[0-9]*",),
              "CUDA plugins cannot create a client without an NVIDIA GPU "
              "(FAILED_PRECONDITION: No visible GPU devices)"),
    KnownRisk("ROCm", ("rocm", "amdgpu"), ("libamdhip64", "librocm", "libhsa-runtime"), ("rocm_version",),
              ("/dev/kfd",), "ROCm plugins cannot create a client without an AMD GPU (/dev/kfd)"),
    KnownRisk("oneAPI", ("oneapi", "xla_xpu", "intel_extension_for_openxla"),
              ("libsycl", "libze_loader", "libmkl"), (), ("/dev/dri/renderD*",),
              "oneAPI plugins need an Intel GPU and its runtime"),
)


def _default_devices_present(patterns: tuple[str, ...]) -> bool:
    import glob  # here, not at the top: list and check import this module on every run

    return any(glob.glob(pattern) for pattern in patterns)


def client_creation_risk(subject: ProbeReport | str, *,
                         devices_present: Callable[[tuple[str, ...]], bool] = _default_devices_present
                         ) -> str | None:
    """Why creating a client for this plugin here is unsafe or bound to fail; None if no reason is known.

    ``subject`` is a probe report (name, path, needed libraries and attributes are used) or a path
    (name and needed libraries only). A known family whose device nodes exist is not a risk.
    """
    if isinstance(subject, ProbeReport):
        text = f"{subject.name} {subject.path}".lower()
        needed = [n.lower() for n in subject.needed]
        attributes = set(subject.attributes or {})
    else:
        from .elf import NotElfError, read_elf
        from .library import default_plugin_name

        text = f"{default_plugin_name(subject)} {subject}".lower()
        try:
            needed = [n.lower() for n in read_elf(subject).needed]
        except (NotElfError, OSError):
            needed = []
        attributes = set()
    for risk in KNOWN_RISKS:
        matched = (any(h in text for h in risk.name_hints)
                   or any(h in n for h in risk.library_hints for n in needed)
                   or bool(attributes & set(risk.attribute_hints)))
        if matched and not devices_present(risk.devices):
            return f"{risk.family} plugin and no {risk.family} device here ({', '.join(risk.devices)} absent): " \
                   f"{risk.without_hardware}"
    return None


# -- creating a client in a child ------------------------------------------------------------

CheckOutcome = Literal["ok", "error", "load_failed", "crashed", "aborted", "timed_out"]


class ClientCheck(BaseModel):
    """How creating (and destroying) a client went in a child process."""

    model_config = ConfigDict(defer_build=True)  # built on first use, not by every pjrt-hub list

    path: str
    name: str
    outcome: CheckOutcome
    reason: str | None = None
    error_code: str | None = None
    stage: str | None = None
    signal: str | None = None
    platform_name: str | None = None
    platform_version: str | None = None
    device_count: int | None = None
    addressable_device_count: int | None = None
    device_kinds: list[str] = Field(default_factory=list)
    elapsed_s: float | None = None
    stderr_tail: str | None = None
    stderr_highlights: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def safe_client_check(path_or_name: str, options: dict[str, Any] | None = None, *,
                      timeout: float = 60.0, env: dict[str, str] | None = None) -> ClientCheck:
    """Create, query and destroy a client in a child process; report how it went, never raise
    for what the plugin does."""
    from .library import default_plugin_name

    path = resolve_library(path_or_name)
    args = [path, "--options", json.dumps(options or {})]
    from . import _child

    result = _child.run_child("pjrt_hub.backends.c_api._client_check", args, timeout=timeout, env=env)
    data: dict[str, Any] = {"path": path, "name": default_plugin_name(path)}
    data.update({k: v for k, v in result.snapshot.items() if k in ClientCheck.model_fields})
    data.update(elapsed_s=result.elapsed_s, stderr_tail=result.stderr_tail,
                stderr_highlights=result.stderr_highlights, signal=result.signal)
    failure = result.failure(timeout)
    if failure is not None:
        data["outcome"], data["reason"] = failure
    return ClientCheck.model_validate(data)
