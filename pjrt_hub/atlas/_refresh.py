"""``pjrt-hub atlas refresh``: measure every release of the plugin packages, in parallel, resuming
where an earlier run stopped.

Each measured release is written at once to ``$PJRT_HUB_CACHE/atlas/measured/<package>/<version>.json``
(a rename into place), so a run that is killed loses at most the releases it was measuring, and
the next run skips every release whose measured wheel is still the one the index lists. Wheels
are deleted once measured (tens of GB in all) unless ``keep_wheels`` keeps them in the wheels
cache. A wheel that cannot be had (the network, a digest that does not match) is reported and
tried again next time; what a wheel itself says (no library, a library that does not load) is a
measured outcome.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from pjrt_hub._cache_root import cache_folder
from pjrt_hub._progress import Progress

from ._index import DEFAULT_INDEX, IndexRelease, IndexUnavailable, choose_wheel, releases
from ._measure import MeasureError, measure_release
from ._models import ATLAS_FORMAT, AtlasFile, PluginRelease

__all__ = ["PLUGIN_PACKAGES", "RefreshReport", "Store", "refresh", "write_atlas"]

#: The PJRT plugin packages on PyPI (issue 43's list; jaxlib has no PJRT C plugin library).
PLUGIN_PACKAGES: tuple[str, ...] = (
    "jax-cuda11-pjrt", "jax-cuda12-pjrt", "jax-cuda13-pjrt", "jax-rocm60-pjrt", "jax-rocm7-pjrt",
    "jax-oneapi-pjrt", "libtpu", "jax-tt-plugin", "intel-extension-for-openxla", "xla-cpu-pjrt",
    "xla-cuda12-pjrt", "xla-cuda13-pjrt", "fastatomstruct-xla-cpu", "lammps-jax-pjrt-cpu",
)


class Store:
    """The measured releases kept under the cache, one JSON file each."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root if root is not None else cache_folder("atlas")) / "measured"

    def _path(self, package: str, version: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "._-+" else "_" for c in version)
        return self.root / package / f"{safe}.json"

    def get(self, package: str, version: str) -> PluginRelease | None:
        try:
            return PluginRelease.model_validate_json(self._path(package, version).read_text())
        except (OSError, ValueError):
            return None  # missing, or unreadable: measured again

    def put(self, release: PluginRelease) -> None:
        _write_atomically(self._path(release.package, release.version), release.model_dump_json(indent=1))

    def all(self) -> list[PluginRelease]:
        found = []
        for path in sorted(self.root.glob("*/*.json")):
            try:
                found.append(PluginRelease.model_validate_json(path.read_text()))
            except (OSError, ValueError):
                continue
        return found


def _still_current(kept: PluginRelease, release: IndexRelease) -> bool:
    """Whether a kept measurement is of the wheel the index lists now."""
    wheel = choose_wheel(release.files)
    if wheel is None:
        return kept.outcome == "no_wheel"
    return kept.artifact == wheel.filename and kept.sha256 == wheel.sha256 and kept.outcome != "failed"


@dataclass
class RefreshReport:
    packages: list[str]
    measured: int = 0
    reused: int = 0
    #: (package, version or "", what went wrong): tried again next run.
    errors: list[tuple[str, str, str]] = field(default_factory=list)
    downloaded_bytes: int = 0
    seconds: float = 0.0
    releases: list[PluginRelease] = field(default_factory=list)

    def atlas(self) -> AtlasFile:
        return AtlasFile(format=ATLAS_FORMAT, generated_at=dt.datetime.now(dt.timezone.utc),
                         releases=sorted(self.releases, key=_release_order))


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _release_order(release: PluginRelease) -> tuple[str, dt.datetime, str]:
    """An atlas's order: by package, then by first upload."""
    return (release.package, release.uploaded or _EPOCH, release.version)


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a scratch file renamed into place (removed on failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        scratch.write_text(text)
        scratch.replace(path)
    finally:
        scratch.unlink(missing_ok=True)


def refresh(packages: Sequence[str] = PLUGIN_PACKAGES, *, jobs: int = 2, keep_wheels: bool = False,
            last: int | None = None, index: str = DEFAULT_INDEX, store: Store | None = None,
            progress: Progress | None = None) -> RefreshReport:
    """Measure the releases of ``packages`` not measured yet (``last``: only each one's newest N)."""
    store = store or Store()
    report = RefreshReport(list(packages))
    started = time.monotonic()
    todo: list[IndexRelease] = []
    for package in packages:
        try:
            listed = releases(package, index=index)
        except IndexUnavailable as exc:
            report.errors.append((package, "", str(exc)))
            continue
        for release in listed[-last:] if last else listed:
            kept = store.get(package, release.version)
            if kept is not None and _still_current(kept, release):
                report.reused += 1
                report.releases.append(kept)
            else:
                todo.append(release)
    lock = threading.Lock()
    work = store.root.parent / "work"
    wheels = cache_folder("wheels") if keep_wheels else None

    def counted(n: int) -> None:
        with lock:
            report.downloaded_bytes += n

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(measure_release, r, work, keep_wheels=wheels, on_bytes=counted): r for r in todo}
        for future in as_completed(futures):
            release = futures[future]
            done += 1
            try:
                measured = future.result()
            except MeasureError as exc:
                report.errors.append((release.package, release.version, str(exc)))
            except Exception as exc:  # noqa: BLE001 - one release's surprise must not lose the run's report
                report.errors.append((release.package, release.version, f"{type(exc).__name__}: {exc}"))
            else:
                store.put(measured)
                report.measured += 1
                report.releases.append(measured)
            if progress is not None:
                progress.update(done, len(todo), f"{release.package} {release.version} "
                                                 f"({report.downloaded_bytes / 1e9:.1f} GB)")
    report.seconds = time.monotonic() - started
    return report


def write_atlas(atlas: AtlasFile, path: Path) -> AtlasFile:
    """Write ``atlas`` to ``path`` (a rename into place), keeping the releases an atlas already
    there holds of other packages or versions: a refresh of one package never drops the rest.
    ValueError if ``path`` holds something that is not an atlas (it is not overwritten)."""
    merged: dict[tuple[str, str], PluginRelease] = {}
    if path.exists():
        try:
            old = AtlasFile.model_validate_json(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path} exists and is not an atlas file ({type(exc).__name__}); refusing to "
                             f"overwrite it") from None
        if old.format != atlas.format:
            raise ValueError(f"{path} is an atlas of format {old.format!r}, not {atlas.format!r}; refusing to "
                             f"overwrite it")
        merged.update((r.key, r) for r in old.releases)
    merged.update((r.key, r) for r in atlas.releases)
    result = AtlasFile(format=ATLAS_FORMAT, generated_at=atlas.generated_at,
                       releases=sorted(merged.values(), key=_release_order))
    _write_atomically(path, json.dumps(json.loads(result.model_dump_json()), indent=1) + "\n")
    return result
