"""The atlas a process uses: the shipped file, with the user's own measurements (``pjrt-hub atlas
refresh``) over it, and the minor dates that follow."""

from __future__ import annotations

import warnings
from functools import lru_cache
from importlib.resources import files

from ._dates import MinorDates, date_minors
from ._models import ATLAS_FORMAT, AtlasFile, PluginRelease
from ._refresh import Store

__all__ = ["default_minor_dates", "load_releases", "shipped_atlas"]


def shipped_atlas() -> AtlasFile:
    """The atlas the package ships (empty, with a warning, if it is missing or unreadable)."""
    resource = files("pjrt_hub") / "data" / "atlas.json"
    try:
        atlas = AtlasFile.model_validate_json(resource.read_text())
    except (OSError, ValueError) as exc:
        warnings.warn(f"pjrt-hub: the shipped release atlas ({resource}) is unreadable ({type(exc).__name__}); "
                      f"minors are dated by the changelog alone", RuntimeWarning, stacklevel=2)
        return AtlasFile(format=ATLAS_FORMAT)
    if atlas.format != ATLAS_FORMAT:
        warnings.warn(f"pjrt-hub: the shipped release atlas has format {atlas.format!r}, not {ATLAS_FORMAT!r}; "
                      f"minors are dated by the changelog alone", RuntimeWarning, stacklevel=2)
        return AtlasFile(format=ATLAS_FORMAT)
    return atlas


def load_releases(store: Store | None = None) -> list[PluginRelease]:
    """The shipped releases, each replaced by the user's own measurement of it where there is one."""
    merged = {r.key: r for r in shipped_atlas().releases}
    merged.update((r.key, r) for r in (store or Store()).all())
    return list(merged.values())


@lru_cache(maxsize=1)
def default_minor_dates() -> MinorDates:
    """The dates the version policy uses unless it is given others (computed once per process)."""
    return date_minors(load_releases())
