"""The conformance report, as pydantic models: what ``pjrt-hub conformance --json`` prints and
``pytest --pjrt-report FILE`` writes. ``pjrt-hub conformance --schema`` prints the JSON schema."""

from __future__ import annotations

import enum

from pydantic import BaseModel, Field

__all__ = ["CaseOutcome", "CaseResult", "ConformanceReport", "Counts", "PluginConformance", "SCHEMA_VERSION"]

#: Bumped when the report's JSON changes incompatibly.
SCHEMA_VERSION = 1


class CaseOutcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    #: A declared limitation held: the case failed, as the plugin said it would.
    XFAILED = "xfailed"
    SKIPPED = "skipped"


class CaseResult(BaseModel):
    id: str = Field(description="group/name")
    group: str
    name: str
    description: str
    outcome: CaseOutcome
    message: str | None = Field(None, description="why it failed, or why it was skipped")
    limitation: str | None = Field(None, description="the declared limitation that made it an expected failure")
    contract: list[str] = Field(default_factory=list,
                                description="for a failed case: the behaviours of pjrt_c_api.h it checks, "
                                            "'FUNCTION: behaviour' (pjrt-hub conformance --coverage)")
    duration_s: float = 0.0


class Counts(BaseModel):
    passed: int = 0
    failed: int = 0
    xfailed: int = 0
    skipped: int = 0

    @classmethod
    def of(cls, results: "list[CaseResult]") -> "Counts":
        counts = cls()
        for r in results:
            setattr(counts, r.outcome.value, getattr(counts, r.outcome.value) + 1)
        return counts

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.xfailed + self.skipped

    def __str__(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.xfailed} xfailed, {self.skipped} skipped"


class PluginConformance(BaseModel):
    """Every case of one plugin."""

    plugin: str
    kind: str
    distribution: str | None = None
    distribution_version: str | None = None
    library_path: str | None = None
    api_version: str | None = None
    load_outcome: str = Field(description="the registry's outcome for the plugin (loaded, incompatible, ...)")
    load_reason: str | None = None
    verdict_rule: str | None = None
    call_limit: str | None = Field(None, description="the API version every call was kept to")
    counts: Counts
    cases: list[CaseResult]
    tested: bool = Field(True, description="at least one case ran (passed, failed or failed as a declared "
                                           "limitation); when every case was skipped nothing was tested")
    ok: bool = Field(description="no case failed, and something was tested")


class ConformanceReport(BaseModel):
    """``pjrt-hub conformance --json``."""

    schema_version: int = SCHEMA_VERSION
    suite_version: str = Field(description="hash of the case definitions")
    pjrt_hub_version: str
    framework_version: str
    plugins: list[PluginConformance]
    ok: bool = Field(description="every plugin passed every case that was not skipped or expected to fail, "
                                 "and every plugin had a case that was not skipped")
