"""Cell results reused across runs: keyed by what decides them.

The key is the plugin's identity (its distribution and version, plus a hash of its code where
that can change without a version bump; a C plugin's library hash), the framework version, the
suite version (a hash of the case definitions) and the environment (Python and numba versions).
Anything else changed means a new key and a fresh run. Results live as one JSON file per cell
under ``PJRT_HUB_CACHE`` or the output directory; deleting the folder (or ``--refresh``) forgets them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, Sequence

from ._models import CellResult

__all__ = ["CellCache", "ENV_CACHE", "cache_key"]

ENV_CACHE = "PJRT_HUB_CACHE"
#: Bumped when what a cell computes changes in a way the suite version does not show.
CELL_FORMAT = 1


def cache_key(identity: str, framework: str, suite: str, environment: Mapping[str, str | None],
              cases: Sequence[str] = ()) -> str:
    """``cases``: the case patterns a partial run was limited to (none: the whole suite)."""
    payload = json.dumps({"plugin": identity, "framework": framework, "suite": suite,
                          "environment": dict(environment), "cases": sorted(cases), "format": CELL_FORMAT},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


class CellCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "cells"

    @classmethod
    def default(cls, output: Path) -> "CellCache":
        base = os.environ.get(ENV_CACHE)
        return cls(Path(base) / "matrix" if base else Path(output) / "cache")

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> CellResult | None:
        try:
            text = self._path(key).read_text()
        except OSError:
            return None
        try:
            return CellResult.model_validate_json(text)
        except ValueError:  # a file from an older format or a torn write: run the cell again
            return None

    def put(self, result: CellResult) -> None:
        if not result.key:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self._path(result.key).with_suffix(".tmp")
        tmp.write_text(result.model_dump_json())
        tmp.replace(self._path(result.key))
