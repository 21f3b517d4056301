"""The matrix as data: pydantic models for the plan, a cell job's result and ``matrix.json``.

A :class:`MatrixPlan` lists the jobs of a matrix (``pjrt-hub matrix plan``); each job
(:class:`PlanCell`) runs somewhere and writes a :class:`CellReport` that says which plan and job it
belongs to and what it ran on, so that the merge into a :class:`MatrixReport` (the schema of
``matrix.json``, ``pjrt-hub matrix --schema``) never trusts a file name.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, Field

from pjrt_hub.testing._report import Counts

__all__ = ["CaseBrief", "CellReport", "CellResult", "CellStatus", "EnvironmentInfo", "JobInfo", "MatrixPlan",
           "MatrixReport", "PlanCell", "PluginInfo", "SCHEMA_VERSION", "RED"]

#: Bumped when matrix.json, the plan or a cell result changes incompatibly.
SCHEMA_VERSION = 2


class CellStatus(str, enum.Enum):
    #: The version policy accepted the plugin and no conformance case failed.
    PASSED = "passed"
    #: Accepted, but conformance cases failed.
    FAILED = "failed"
    #: The version policy refused the plugin (the rule says why); nothing else ran.
    REFUSED = "refused"
    #: The cell could not be judged: the plugin crashed, hung, or failed to load.
    ERROR = "error"
    #: The plan has the cell but no result came back for it (the job never ran or never reported).
    MISSING = "missing"


#: The statuses that make a matrix fail (a non-zero exit, a red cell).
RED = frozenset({CellStatus.FAILED, CellStatus.ERROR, CellStatus.MISSING})


class CaseBrief(BaseModel):
    id: str
    message: str | None = None
    limitation: str | None = Field(None, description="the declared limitation, for an expected failure")


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
    key: str = Field("", description="the cache key: plugin name and identity, framework, suite and environment")


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
    """An environment of the matrix and the versions of everything in it."""

    name: str
    python: str | None = None
    numba: str | None = None
    numpy: str | None = None
    pjrt_hub: str | None = Field(None, description="the pjrt-hub version the environment ran")
    platform: str | None = Field(None, description="the host: operating system, release, machine")
    packages: dict[str, str] = Field(default_factory=dict,
                                     description="other distributions the cells depend on, with their versions")
    status: str = Field(description="ran; missing (not planned here, or no result); failed (could not be built)")
    note: str | None = None


class JobInfo(BaseModel):
    """One job of the plan, as the merge found it."""

    id: str
    environment: str
    tox_env: str | None = None
    plugins: list[str] = Field(default_factory=list)
    status: str = Field(description="ran; error (its environment could not be built); missing (no result)")
    duration_s: float | None = None
    error: str | None = None
    facts: EnvironmentInfo | None = Field(None, description="what the job ran on")


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
    plan_id: str | None = Field(None, description="the plan the cells were run from")
    jobs: list[JobInfo] = Field(default_factory=list, description="the plan's jobs: where and how long each ran")

    @property
    def red(self) -> list[CellResult]:
        return [c for c in self.cells if c.status in RED]

    def cell(self, plugin: str, framework: str, environment: str | None = None) -> CellResult:
        for c in self.cells:
            if c.plugin == plugin and c.framework_version == framework and environment in (None, c.environment):
                return c
        raise KeyError(f"no cell for plugin {plugin} at framework {framework}")


# -- the plan and a job's result -----------------------------------------------------------------


class PlanCell(BaseModel):
    """One job of the matrix: an environment and the plugins it covers, at the plan's frameworks."""

    id: str = Field(description="unique in the plan; the result file is <id>.json")
    environment: str = Field(description="the environment's name in the report")
    tox_env: str | None = Field(None, description="the tox environment that installs it; none: run where planned")
    python: str = Field(description="the Python version the job needs (for the CI's setup step)")
    plugins: list[str] = Field(description="the plugins (rows) it covers")
    fixtures: list[str] = Field(default_factory=list, description="those of plugins that are fixture plugins")
    libraries: list[str] = Field(default_factory=list, description="PJRT C plugin library paths it is given")
    wheel_plugins: list[str] = Field(default_factory=list,
                                     description="real C plugins it takes from the wheel cache (requirements)")
    frameworks: list[str] = Field(description="the framework versions (columns) it covers")
    command: str = Field(description="the command that runs it, from the directory holding plan.json")


class MatrixPlan(BaseModel):
    """``plan.json``: every job of a matrix, and what the cells of every job share."""

    schema_version: int = SCHEMA_VERSION
    plan_id: str = Field(description="a hash of everything below: results carry it, the merge checks it")
    pjrt_hub_version: str
    suite_version: str
    frameworks: list[str]
    cases: list[str] = Field(default_factory=list, description="case patterns the suite is limited to")
    cell_timeout: float
    cells: list[PlanCell]
    not_planned: list[EnvironmentInfo] = Field(default_factory=list,
                                               description="environments left out, with why")

    def job(self, cell_id: str) -> PlanCell:
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        raise KeyError(cell_id)


class CellReport(BaseModel):
    """``<id>.json``: what one job of a plan ran, on what, and how each of its cells went."""

    schema_version: int = SCHEMA_VERSION
    kind: str = Field("pjrt-hub matrix cell", description="marks the file as a cell result")
    plan_id: str
    cell_id: str
    environment: EnvironmentInfo
    suite_version: str
    started_at: str
    duration_s: float
    plugins: list[PluginInfo] = Field(default_factory=list)
    cells: list[CellResult] = Field(default_factory=list)
    error: str | None = Field(None, description="the job could not run its cells (its environment failed)")
