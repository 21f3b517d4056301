"""The matrix as data: pydantic models, the schema of ``matrix.json`` (``pjrt-hub matrix --schema``)."""

from __future__ import annotations

import enum

from pydantic import BaseModel, Field

from pjrt_hub.testing._report import Counts

__all__ = ["CaseBrief", "CellResult", "CellStatus", "EnvironmentInfo", "MatrixReport", "PluginInfo", "SCHEMA_VERSION"]

#: Bumped when matrix.json changes incompatibly.
SCHEMA_VERSION = 1


class CellStatus(str, enum.Enum):
    #: The version policy accepted the plugin and no conformance case failed.
    PASSED = "passed"
    #: Accepted, but conformance cases failed.
    FAILED = "failed"
    #: The version policy refused the plugin (the rule says why); nothing else ran.
    REFUSED = "refused"
    #: The cell could not be judged: the plugin crashed, hung, or failed to load.
    ERROR = "error"


class CaseBrief(BaseModel):
    id: str
    message: str | None = None


class CellResult(BaseModel):
    """One plugin at one framework version, in one environment."""

    plugin: str
    environment: str
    framework_version: str
    status: CellStatus
    plugin_api_version: str | None = Field(None, description="the PJRT API version the plugin declares")
    accepted: bool | None = Field(None, description="the version verdict; None when it could not be read")
    rule: str | None = Field(None, description="the policy rule that decided (exact, window, backward-policy, ...)")
    reasons: list[str] = Field(default_factory=list)
    counts: Counts | None = Field(None, description="conformance counts, where the suite ran")
    failures: list[CaseBrief] = Field(default_factory=list)
    xfailed: list[CaseBrief] = Field(default_factory=list)
    skipped: list[CaseBrief] = Field(default_factory=list)
    error: str | None = Field(None, description="why the cell is an error: crash, time-out, load failure")
    duration_s: float = 0.0
    cached: bool = Field(False, description="reused from the cache, not run again")
    key: str = Field("", description="the cache key: plugin identity, framework, suite and environment")


class PluginInfo(BaseModel):
    name: str
    kind: str
    environment: str
    distribution: str | None = None
    distribution_version: str | None = None
    library_path: str | None = None
    api_version: str | None = None
    identity: str = Field(description="what the cache keys the plugin by (distribution version, library hash)")
    description: str = ""


class EnvironmentInfo(BaseModel):
    name: str
    python: str | None = None
    numba: str | None = None
    status: str = Field(description="ran, missing (no interpreter), failed (tox could not build it)")
    note: str | None = None


class MatrixReport(BaseModel):
    """``matrix.json``: every cell of plugins x framework versions x environments."""

    schema_version: int = SCHEMA_VERSION
    generated_at: str
    suite_version: str
    pjrt_hub_version: str
    framework_versions: list[str]
    environments: list[EnvironmentInfo]
    plugins: list[PluginInfo]
    cells: list[CellResult]

    def cell(self, plugin: str, framework: str, environment: str | None = None) -> CellResult:
        for c in self.cells:
            if c.plugin == plugin and c.framework_version == framework and environment in (None, c.environment):
                return c
        raise KeyError(f"no cell for plugin {plugin} at framework {framework}")
