"""Fetch a PJRT plugin wheel from PyPI once, unpack it, and find its plugin library.

Real plugins are 60-190 MB wheels, so they are downloaded with
``pip download --no-deps --only-binary=:all: NAME==VERSION`` into one cache folder
(``$PJRT_HUB_CACHE/wheels``, else ``~/.cache/pjrt-hub/wheels``) and unpacked next to the wheel; later
calls find them there without the network. Tests and the compatibility matrix use this to get
``xla-cpu-pjrt`` and friends; nothing here installs anything.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pjrt_hub._cache_root import cache_folder

__all__ = ["WheelUnavailable", "cache_dir", "fetch_wheel", "plugin_library"]


class WheelUnavailable(RuntimeError):
    """The wheel could not be had: no build for this platform, no network, or pip failed."""


def cache_dir() -> Path:
    """``$PJRT_HUB_CACHE/wheels``, else ``~/.cache/pjrt-hub/wheels``: beside the numba and matrix
    caches under one root, so that one variable moves (or one ``rm -r`` clears) them all."""
    return cache_folder("wheels")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _parse(requirement: str) -> tuple[str, str | None]:
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*([A-Za-z0-9.+!_-]+))?\s*", requirement)
    if match is None:
        raise ValueError(f"{requirement!r}: expected NAME or NAME==VERSION")
    return match.group(1), match.group(2)


def _find(cache: Path, name: str, version: str | None) -> Path | None:
    pattern = f"{_normalize(name)}-{version or '*'}-*.whl"
    wheels = sorted(p for p in cache.glob(pattern) if p.is_file())
    if not wheels:
        # Wheel file names keep the project's own spelling of the name.
        wheels = sorted(p for p in cache.glob("*.whl")
                        if _normalize(p.name.split("-")[0]) == _normalize(name)
                        and (version is None or p.name.split("-")[1] == version))
    return wheels[-1] if wheels else None


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _unpack(wheel: Path) -> Path:
    target = wheel.with_suffix("")
    if target.is_dir():
        return target
    scratch = Path(tempfile.mkdtemp(dir=wheel.parent, prefix=".unpack-"))
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(scratch)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def fetch_wheel(requirement: str, *, cache: Path | None = None, timeout: float = 1800) -> Path:
    """The unpacked folder of the wheel ``NAME==VERSION``, downloading it on first use."""
    cache = cache or cache_dir()
    name, version = _parse(requirement)
    with _locked(cache):
        wheel = _find(cache, name, version)
        if wheel is None:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "-q", "-d", str(cache), requirement]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise WheelUnavailable(f"pip download {requirement} took longer than {timeout:g} s") from None
            wheel = _find(cache, name, version)
            if done.returncode != 0 or wheel is None:
                lines = [ln for ln in (done.stderr or done.stdout).splitlines()
                         if ln.strip() and "is ignored: it is neither a file nor a directory" not in ln]
                raise WheelUnavailable(f"pip download {requirement} failed: " + " / ".join(lines[-3:]))
        return _unpack(wheel)


def plugin_library(requirement: str, *, cache: Path | None = None) -> str:
    """The path of the plugin library (the one ``.so`` exporting ``GetPjrtApi``) in a wheel."""
    from .probe import resolve_library

    return resolve_library(str(fetch_wheel(requirement, cache=cache)))
