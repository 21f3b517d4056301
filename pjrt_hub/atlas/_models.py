"""The atlas's records: what one release of a PJRT plugin package is, as measured from its wheel."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ATLAS_FORMAT", "AtlasFile", "MeasureOutcome", "PluginRelease"]

#: The shipped file's format; a file of another format is refused, not misread.
ATLAS_FORMAT = "pjrt-hub.atlas/1"

MeasureOutcome = Literal["measured", "header_only", "load_failed", "no_library", "no_wheel", "failed"]


class PluginRelease(BaseModel):
    """One release of a plugin package on the package index, and what its library reports."""

    package: str = Field(description="the project's name on the index (jax-cuda12-pjrt)")
    version: str
    uploaded: dt.datetime | None = Field(None, description="the first upload of any of the release's files (UTC)")
    yanked: bool = False
    artifact: str | None = Field(None, description="the wheel measured")
    sha256: str | None = Field(None, description="the wheel's sha256, checked against the index's")
    size: int | None = Field(None, description="the wheel's size in bytes")
    library: str | None = Field(None, description="the plugin library inside the wheel (exports GetPjrtApi)")
    outcome: MeasureOutcome = Field(description="measured (probed), header_only (the library did not load; "
                                                "the minor is the wheel's own pjrt_c_api.h), load_failed, "
                                                "no_library, no_wheel (none for x86_64 Linux) or failed")
    reason: str | None = Field(None, description="why the outcome is not measured")
    pjrt_api: str | None = Field(None, description='the PJRT C API version, written like "0.81"')
    api_struct_size: int | None = Field(None, description="PJRT_Api.struct_size")
    extensions: list[str] = Field(default_factory=list, description="extension chain, NAME:struct_size in order")
    requires: list[str] = Field(default_factory=list, description="the wheel's Requires-Dist (its Python-level pins)")
    measured_at: dt.datetime | None = None
    measured_by: str | None = Field(None, description="the pjrt-hub that measured it")

    @property
    def minor(self) -> int | None:
        return None if self.pjrt_api is None else int(self.pjrt_api.split(".")[1])

    @property
    def key(self) -> tuple[str, str]:
        return (self.package, self.version)


class AtlasFile(BaseModel):
    """The file ``pjrt-hub atlas refresh --output`` writes and the package ships."""

    # Another JSON object is not an empty atlas: it is refused, and never overwritten.
    model_config = ConfigDict(extra="forbid")

    format: str
    generated_at: dt.datetime | None = None
    releases: list[PluginRelease] = Field(default_factory=list)
