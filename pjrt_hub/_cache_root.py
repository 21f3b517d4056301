"""Where pjrt-hub keeps what it caches: one root, ``$PJRT_HUB_CACHE``, else
``~/.cache/pjrt-hub``, with a folder per cache (numba_cpu's programs and machine kernels, probe
results, plugin wheels), so that one variable moves them all and one ``rm -r`` clears them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

__all__ = ["cache_folder"]


def cache_folder(name: str, environ: Mapping[str, str] | None = None) -> Path:
    """``$PJRT_HUB_CACHE/<name>``, else ``~/.cache/pjrt-hub/<name>`` (``environ``: os.environ)."""
    root = (os.environ if environ is None else environ).get("PJRT_HUB_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "pjrt-hub") / name
