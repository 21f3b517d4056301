"""The package index's own metadata: a project's releases, their files and upload times (PyPI's
JSON API, ``GET {index}/{project}/json``), and the choice of the wheel to measure."""

from __future__ import annotations

import datetime as dt
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["DEFAULT_INDEX", "IndexUnavailable", "IndexFile", "IndexRelease", "choose_wheel", "releases"]

DEFAULT_INDEX = "https://pypi.org/pypi"


class IndexUnavailable(RuntimeError):
    """The index could not be read, or did not answer as its JSON API does."""


@dataclass(frozen=True, slots=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    size: int
    uploaded: dt.datetime | None


@dataclass(frozen=True, slots=True)
class IndexRelease:
    package: str
    version: str
    files: tuple[IndexFile, ...]
    yanked: bool

    @property
    def uploaded(self) -> dt.datetime | None:
        """The first upload of any of the release's files."""
        times = [f.uploaded for f in self.files if f.uploaded is not None]
        return min(times) if times else None


def _time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def releases(package: str, *, index: str = DEFAULT_INDEX, timeout: float = 60.0) -> list[IndexRelease]:
    """Every release of ``package`` the index lists (yanked ones marked), oldest upload first."""
    url = f"{index.rstrip('/')}/{urllib.parse.quote(package)}/json"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            payload = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise IndexUnavailable(f"{package}: the index has no such project ({url})") from None
        raise IndexUnavailable(f"{package}: the index answered HTTP {exc.code} for {url}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise IndexUnavailable(f"{package}: cannot reach the index at {url}: {getattr(exc, 'reason', exc)}") from None
    except ValueError as exc:
        raise IndexUnavailable(f"{package}: the index's answer at {url} is not JSON: {exc}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("releases"), dict):
        raise IndexUnavailable(f"{package}: the index's answer at {url} has no 'releases'")
    found = []
    for version, entries in payload["releases"].items():
        if not isinstance(entries, list):
            continue
        files = tuple(
            IndexFile(str(e.get("filename", "")), urllib.parse.urljoin(url, str(e.get("url", ""))),
                      (e.get("digests") or {}).get("sha256"), int(e.get("size") or 0),
                      _time(e.get("upload_time_iso_8601") or e.get("upload_time")))
            for e in entries if isinstance(e, dict))
        if not files:
            continue  # a version with no files was never a release anyone could install
        found.append(IndexRelease(package, str(version), files, all(bool(e.get("yanked")) for e in entries
                                                                    if isinstance(e, dict))))
    return sorted(found, key=lambda r: (r.uploaded or dt.datetime.max.replace(tzinfo=dt.timezone.utc), r.version))


_WHEEL = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def choose_wheel(files: Sequence[IndexFile]) -> IndexFile | None:
    """The wheel to measure: one that runs on x86_64 Linux, a ``py3`` one before a CPython one
    (the plugin library is the same), then the smallest."""
    fitting = []
    for f in files:
        match = _WHEEL.match(f.filename)
        if match is None:
            continue
        plat = match.group("plat")
        if not any(tag.startswith(("manylinux", "linux", "musllinux")) and tag.endswith("x86_64")
                   for tag in plat.split(".")):
            continue
        py = match.group("py")
        rank = 0 if any(tag.startswith("py3") for tag in py.split(".")) else 1 if "cp311" in py else 2
        fitting.append((rank, f.size, f.filename, f))
    return min(fitting)[3] if fitting else None
