"""The data that crosses pjrt-hub's edges, as pydantic models.

Plugin declarations come in (validated strictly: a plugin that declares garbage fails with the
reason); load reports and verdicts go out (``pjrt-hub list --json``, ``check --json``). The JSON
schema of each report is published by ``pjrt-hub <command> --schema``.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

from pjrt_hub.abi import ApiVersion, PluginDeclaration
from pjrt_hub.extensions import KNOWN_EXTENSIONS, extension_spec

__all__ = [
    "ArrayInfo",
    "BenchReport",
    "CheckReport",
    "DeclarationModel",
    "LimitationModel",
    "ListReport",
    "NegotiationModel",
    "Outcome",
    "PluginRecord",
    "ProbeCommandReport",
    "RunReport",
    "VerdictModel",
    "declaration_from_plugin",
]

#: Bumped when a report's JSON changes incompatibly.
SCHEMA_VERSION = 1


class _Model(BaseModel):
    """The base of every model here. A model's validator is built the first time it is used, not
    at import: ``pjrt-hub list`` imports this module and uses half of its models."""

    model_config = ConfigDict(defer_build=True)


class Outcome(str, enum.Enum):
    """What became of a plugin candidate."""

    LOADED = "loaded"
    FOUND = "found"  # a C plugin seen but not probed
    INCOMPATIBLE = "incompatible"
    BLOCKED = "blocked"
    DUPLICATE = "duplicate"
    FAILED = "failed"


def _api_version(value: Any, what: str) -> str:
    if isinstance(value, ApiVersion):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string like '0.105', got {type(value).__name__} {value!r}")
    try:
        ApiVersion.parse(value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    return value.strip()


class LimitationModel(_Model):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: StrictStr
    cases: tuple[StrictStr, ...] = ()


class DeclarationModel(_Model):
    """A plugin's declaration, validated. See :class:`pjrt_hub.abi.PluginDeclaration`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_version: StrictStr
    platform_name: StrictStr = "unknown"
    extensions: dict[StrictStr, StrictInt] = Field(default_factory=dict)
    min_framework_version: StrictStr | None = None
    framework_requires: tuple[StrictStr, ...] = ()
    needs_hardware: StrictBool = False
    limitations: tuple[LimitationModel, ...] = ()
    description: StrictStr = ""

    @field_validator("api_version", mode="before")
    @classmethod
    def _check_version(cls, value: Any) -> str:
        return _api_version(value, "api_version")

    @field_validator("min_framework_version", mode="before")
    @classmethod
    def _check_min(cls, value: Any) -> str | None:
        return None if value is None else _api_version(value, "min_framework_version")

    @field_validator("extensions")
    @classmethod
    def _check_extensions(cls, value: dict[str, int]) -> dict[str, int]:
        canonical = {}
        for name, version in value.items():
            spec = extension_spec(name)
            if spec is None:
                raise ValueError(f"unknown extension {name!r}; known: {', '.join(sorted(KNOWN_EXTENSIONS))}")
            if version < 0:
                raise ValueError(f"extension {name} version must be >= 0, got {version}")
            canonical[spec.name] = version
        return canonical

    @field_validator("framework_requires")
    @classmethod
    def _check_requires(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            return value
        from packaging.requirements import InvalidRequirement, Requirement  # only when there are some

        for text in value:
            try:
                Requirement(text)
            except InvalidRequirement as exc:
                raise ValueError(f"framework_requires entry {text!r} is not a requirement: {exc}") from None
        return value

    @property
    def version(self) -> ApiVersion:
        return ApiVersion.parse(self.api_version)

    @property
    def min_framework(self) -> ApiVersion | None:
        return None if self.min_framework_version is None else ApiVersion.parse(self.min_framework_version)


def declaration_from_plugin(value: Any) -> DeclarationModel:
    """Validate what ``pjrt_hub_declare`` returned (a PluginDeclaration or a mapping)."""
    if isinstance(value, PluginDeclaration):
        data: Any = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        data["limitations"] = [dataclasses.asdict(x) if dataclasses.is_dataclass(x) else x
                               for x in value.limitations]
        data["extensions"] = dict(value.extensions)
    elif isinstance(value, Mapping):
        data = dict(value)
    else:
        raise TypeError(f"pjrt_hub_declare returned {type(value).__name__}, expected a "
                        "PluginDeclaration or a mapping")
    return DeclarationModel.model_validate(data)


class VerdictModel(_Model):
    accepted: bool
    rule: str
    reasons: list[str]
    gated_calls: list[str] = Field(default_factory=list)
    call_limit: str | None = Field(None, description="API version every call is kept to")


class NegotiationModel(_Model):
    agreed: dict[str, int]
    degraded: list[str] = Field(default_factory=list)
    refusals: list[str] = Field(default_factory=list)


class PluginRecord(_Model):
    """One plugin candidate and what became of it."""

    name: str
    kind: Literal["python", "c"]
    source: str = Field(description="where it was found (entry point group, environment, path)")
    entry_point: str | None = None
    distribution: str | None = None
    distribution_version: str | None = None
    library_path: str | None = None
    api_version: str | None = None
    platform_name: str | None = None
    extensions: dict[str, int] = Field(default_factory=dict, description="offered: name -> version")
    outcome: Outcome
    reason: str | None = Field(None, description="why this outcome, in words")
    error: str | None = Field(None, description="the exception, type and message, when one was raised")
    verdict: VerdictModel | None = None
    negotiation: NegotiationModel | None = None
    warnings: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict, description="kind-specific facts (probe results)")


class ListReport(_Model):
    """``pjrt-hub list --json``."""

    schema_version: int = SCHEMA_VERSION
    framework_version: str
    pjrt_hub_version: str
    plugins: list[PluginRecord]
    autoload: bool = Field(True, description="whether entry points were read (--no-autoload, "
                           "PJRT_HUB_PLUGIN_AUTOLOAD=0 turn it off)")
    notes: list[str] = Field(default_factory=list, description="allow-list and block-list entries "
                             "that matched no plugin, in words")


class CheckReport(ListReport):
    """``pjrt-hub check --json``: the list, the policy it was judged under, and the result."""

    window_weeks: int
    floor_minor: str
    strict: bool
    required_extensions: list[str] = Field(default_factory=list)
    optional_extensions: list[str] = Field(default_factory=list)
    requested: list[str] = Field(default_factory=list, description="plugins asked for; empty = all")
    ok: bool = Field(description="every plugin asked for was loaded")
    problems: list[str] = Field(default_factory=list)


class ArrayInfo(_Model):
    name: str
    shape: list[int]
    dtype: str


class RunReport(_Model):
    """``pjrt-hub run --json``."""

    schema_version: int = SCHEMA_VERSION
    plugin: str
    program: str
    inputs: list[ArrayInfo]
    outputs: list[ArrayInfo]
    out: str | None = None
    compile_ms: float
    execute_ms: float = Field(description="execute, await and copy the results to host")


class ProbeCommandReport(_Model):
    """``pjrt-hub probe --json``: the probe of one PJRT C library and the verdict on it."""

    schema_version: int = SCHEMA_VERSION
    name: str
    path: str
    framework_version: str
    outcome: Outcome = Field(description="the registry's outcome for the library")
    reason: str | None = None
    probe: dict[str, Any] = Field(description="what the loader read (see pjrt_hub.backends.c_api.probe)")
    verdict: VerdictModel | None = None
    client_creation_risk: str | None = None


class BenchRow(_Model):
    model_config = ConfigDict(extra="allow")

    name: str
    plugin: str
    execute_ms_median: float | None = None
    compile_ms_cold: float | None = None
    compile_ms_warm: float | None = Field(None, description="fresh process, cache warm, plugin started")
    outputs_match: bool | None = Field(None, description="the manifest's probes and sum (perf) or expected outputs (corpus) agree")
    runs: int | None = None
    xla_cpu_baseline_ms: float | None = Field(None, description="XLA:CPU through JAX, from the manifest")
    first_result_ms_cold: float | None = Field(
        None, description="compile + first execute + outputs to host, empty cache (plugin started)")
    first_result_ms_warm: float | None = Field(
        None, description="the same in a fresh process whose cache holds the program")
    xla_cpu_compile_ms: float | None = Field(None, description="XLA:CPU's compile time, from the manifest")
    first_calls_ms_mean: float | None = Field(
        None, description="mean of the executes right after the first result (a few untimed before), with no "
                          "waiting for a faster tier: what a user's first loop costs per call")
    cores_used: float | None = Field(
        None, description="CPU time over wall time of the timed runs (every thread of the process)")
    minor_faults_per_run: float | None = Field(None, description="minor page faults per timed execute")
    cpu_ms_per_run: float | None = Field(None, description="CPU time (all threads) per timed execute, in ms")
    error: str | None = None


class BenchWorst(_Model):
    name: str
    ratio: float


class BenchComparison(_Model):
    """The first plugin's execute time over another's (or the fastest of several, ``of``)."""

    geomean: float = Field(description="geometric mean over the programs of the time ratio")
    worst: BenchWorst = Field(description="the program with the largest ratio")
    programs: int = Field(description="programs both ran with matching outputs")
    of: list[str] | None = None


class BenchSummary(_Model):
    subject: str | None
    vs: dict[str, BenchComparison]
    vs_fastest: BenchComparison | None = Field(None, description="against the faster real XLA plugin, per program")
    first_result_vs_fastest: BenchComparison | None = Field(
        None, description="the cold first result (compile, one execute, the copy out) against the faster real XLA "
                          "plugin's own, per program")
    first_calls_vs_fastest: BenchComparison | None = Field(
        None, description="the executes right after the first result, no waiting for a faster tier, against the "
                          "faster real XLA plugin's, per program")


class BenchSpreadRow(_Model):
    """``bench --spread N``: one program on one plugin over N fresh processes."""

    name: str
    plugin: str
    processes: int
    per_process_ms: list[float | None] = Field(
        description="each process's median execute, in order; null where it failed or its outputs differed")
    min_ms: float | None = None
    median_ms: float | None = Field(None, description="median of the per-process medians")
    max_ms: float | None = None
    max_over_min: float | None = Field(None, description="near 1: stable; near 2: bimodal across processes")
    cores_used_per_process: list[float | None] = Field(
        [], description="each process's CPU time over wall time while timed: which thread count it ran at")
    minor_faults_per_run_per_process: list[float | None] = []
    errors: list[str] = []


class BenchSpreadRatio(_Model):
    """``bench --spread N``: one program, the first plugin's median over another's, round by round
    (each round's processes timed in turns, so that the host's drift cancels)."""

    name: str
    plugin: str = Field(description="the first plugin, whose time is over the other's")
    against: str = Field(description="the other plugin, or 'fastest': in each round the fastest of the real XLA "
                                     "plugins run, where there are two or more (of all the others where none is real)")
    per_process: list[float | None] = Field(description="each round's ratio; null where either failed")
    min_ratio: float | None = None
    median_ratio: float | None = None
    max_ratio: float | None = None
    max_over_min: float | None = None


class BenchLoadRow(_Model):
    """``bench --under-load K``: one program on one plugin, quiet and with K busy neighbours."""

    name: str
    plugin: str
    quiet_ms: float | None = None
    loaded_ms: float | None = None
    ratio: float | None = Field(None, description="loaded_ms / quiet_ms")
    quiet_cores_used: float | None = Field(None, description="CPU time over wall time, quiet")
    loaded_cores_used: float | None = Field(None, description="CPU time over wall time, loaded")
    quiet_cpu_ms_per_run: float | None = Field(None, description="CPU time per run (all threads), quiet")
    loaded_cpu_ms_per_run: float | None = Field(None, description="CPU time per run (all threads), loaded")
    over_ceiling: bool | None = Field(None, description="ratio above the ceiling")
    cpu_per_run_ratio: float | None = Field(
        None, description="CPU time per run, loaded / quiet: near 1 when the program only got less of the "
                          "machine, well above 1 when its threads wasted what they got")
    error: str | None = None


class BenchLoad(_Model):
    neighbours: int = Field(description="CPU-bound processes spinning during the loaded run")
    ceiling: float = Field(description="loaded / quiet above this is a collapse")
    own_sessions: bool | None = Field(
        None, description="the neighbours ran in sessions of their own, not the bench's (None: a report from "
                          "before the choice existed, when they always did)")
    cores: int | None = Field(None, description="the cores the bench could run on")
    autogroup: bool | None = Field(
        None, description="the kernel shares the cores among sessions first (Linux autogroup); None: unknown")
    rows: list[BenchLoadRow]


class BenchReport(_Model):
    """``pjrt-hub bench --json``; rows also carry ``speedup_vs_<plugin>`` ratios."""

    schema_version: int = SCHEMA_VERSION
    programs: list[BenchRow]
    tiny_execute_us: float | None = Field(None, description="the first plugin's tiny-add execute, in us")
    tiny_execute_us_by_plugin: dict[str, float]
    plugins: list[str]
    suite: str = Field("perf", description="perf: the four large programs; corpus: the public corpus")
    summary: BenchSummary | None = None
    spread: list[BenchSpreadRow] | None = Field(None, description="--spread N: per-process medians")
    spread_ratios: list[BenchSpreadRatio] | None = Field(
        None, description="--spread N: the first plugin's median over each other's, round by round")
    under_load: BenchLoad | None = Field(None, description="--under-load K: quiet against loaded")
    machine_kernels: str | None = Field(
        None, description="numba_cpu's machine kernels (compiled once per machine, read by the measuring processes "
                          "whose program cache is empty): present, built now, off, or why not built")
