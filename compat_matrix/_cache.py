"""Cell results reused across runs: keyed by what decides them.

The key is the plugin's name and identity (its distribution and version, plus a hash of its code where
that can change without a version bump; a C plugin's library hash), the framework version, the
suite version (a hash of the case definitions) and the environment (Python and numba versions).
Anything else changed means a new key and a fresh run. Results live as one JSON file per cell
under ``PJRT_HUB_CACHE`` or the output directory; deleting the folder (or ``--refresh``) forgets them.

Only green cells are kept: passed and refused, verdicts that the plugin's identity and the key
decide. A red cell is never served from the cache: an error (a crash, a hang, a plugin that could
not be found or loaded) and a failed case (a case's time-out on a loaded host, a harness bug) may
come from the harness or the machine as well as from the plugin, and a red cell is the one a
developer is working on, so the next run tries it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from ._models import CellResult, CellStatus

__all__ = ["CellCache", "ENV_CACHE", "cache_key", "default_cache_dir"]

ENV_CACHE = "PJRT_HUB_CACHE"
#: Bumped when what a cell computes changes in a way the suite version does not show.
#: 2: red cells are no longer cached (format 1 caches may hold errors of a broken harness), and the
#: plugin's name is part of the key (format 1 gave numba_cpu and reference, which share pjrt-hub's
#: identity, one key, so one was served the other's results).
CELL_FORMAT = 2
#: The statuses kept (see the module's docstring).
CACHED_STATUSES = frozenset({CellStatus.PASSED, CellStatus.REFUSED})


def cache_key(plugin: str, identity: str, framework: str, suite: str, environment: Mapping[str, str | None],
              cases: Sequence[str] = ()) -> str:
    """``plugin``: its registry name (one distribution may hold several plugins, which share the
    ``identity``); ``cases``: the case patterns a partial run was limited to (none: the whole suite)."""
    payload = json.dumps({"plugin": plugin.lower(), "identity": identity, "framework": framework, "suite": suite,
                          "environment": dict(environment), "cases": sorted(cases), "format": CELL_FORMAT},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def default_cache_dir(output: "str | os.PathLike[str]") -> Path:
    """``$PJRT_HUB_CACHE/matrix``, else ``cache`` under the matrix's output folder (absolute)."""
    base = os.environ.get(ENV_CACHE)
    return (Path(base) / "matrix" if base else Path(output) / "cache").resolve()


class CellCache:
    """Cell results by cache key, one JSON file each; written atomically, safe to share between
    environments running at once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "cells"

    @classmethod
    def default(cls, output: Path) -> "CellCache":
        return cls(default_cache_dir(output))

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> CellResult | None:
        try:
            text = self._path(key).read_text()
        except OSError:
            return None
        try:
            result = CellResult.model_validate_json(text)
        except ValueError:  # a file from an older format or a torn write: run the cell again
            return None
        return result if result.status in CACHED_STATUSES else None

    def put(self, result: CellResult) -> None:
        """Keep ``result`` if it is green (see the module's docstring)."""
        if not result.key or result.status not in CACHED_STATUSES:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{result.key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(result.model_dump_json())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self._path(result.key))
        except BaseException:
            os.unlink(tmp)
            raise
