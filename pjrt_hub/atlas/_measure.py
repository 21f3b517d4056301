"""Measure one plugin release from its wheel: download it (checked against the index's sha256),
find the library that exports ``GetPjrtApi``, probe it in a child process (the same safe probe as
``pjrt-hub probe``: a library that aborts, hangs or segfaults harms only the child), and read the
wheel's own ``pjrt_c_api.h`` and ``Requires-Dist``. Nothing is installed or imported from the wheel.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from email.parser import Parser
from pathlib import Path
from typing import Any, Callable

from ._index import IndexRelease, choose_wheel
from ._models import PluginRelease

__all__ = ["MeasureError", "measure_release"]

_CHUNK = 1 << 20
_MINOR_DEFINE = re.compile(rb"#define\s+PJRT_API_MINOR\s+(\d+)")
_MAJOR_DEFINE = re.compile(rb"#define\s+PJRT_API_MAJOR\s+(\d+)")


class MeasureError(RuntimeError):
    """The wheel could not be had or read (network, digest, a corrupt archive)."""


def _hub_version() -> str:
    import pjrt_hub

    return f"pjrt-hub {pjrt_hub.__version__}"


def download(url: str, target: Path, sha256: str | None, *, timeout: float = 120.0,
             on_bytes: Callable[[int], None] | None = None) -> None:
    """Stream ``url`` into ``target``, checking the digest; nothing is left behind on failure."""
    digest = hashlib.sha256()
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "wb") as out:
            while True:
                chunk = response.read(_CHUNK)
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
        if sha256 is not None and digest.hexdigest() != sha256.lower():
            raise MeasureError(f"{url}: the download's sha256 is {digest.hexdigest()}, the index says {sha256}")
        partial.replace(target)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise MeasureError(f"cannot download {url}: {getattr(exc, 'reason', exc)}") from None
    finally:
        partial.unlink(missing_ok=True)


def _library_candidates(members: list[tuple[str, int]]) -> list[str]:
    """Shared libraries of the wheel (name, size), the likeliest plugin first: under a plugin
    namespace or named like one, then the largest (a plugin is hundreds of MB; helpers are small)."""
    def rank(member: tuple[str, int]) -> tuple[int, int]:
        name, size = member
        hinted = any(h in name.lower() for h in ("jax_plugins/", "xla_plugins/", "pjrt", "plugin", "libtpu"))
        return (0 if hinted else 1, -size)

    return [name for name, _ in sorted(members, key=rank)]


def _header_version(archive: zipfile.ZipFile) -> str | None:
    for name in archive.namelist():
        if name.endswith("pjrt_c_api.h"):
            text = archive.read(name)
            minor, major = _MINOR_DEFINE.search(text), _MAJOR_DEFINE.search(text)
            if minor is not None:
                return f"{int(major.group(1)) if major else 0}.{int(minor.group(1))}"
    return None


def _requires(archive: zipfile.ZipFile) -> list[str]:
    for name in archive.namelist():
        if name.endswith(".dist-info/METADATA"):
            meta = Parser().parsestr(archive.read(name).decode("utf-8", errors="replace"), headersonly=True)
            return [str(r) for r in meta.get_all("Requires-Dist") or []]
    return []


def _probe_library(archive: zipfile.ZipFile, scratch: Path, timeout: float):
    """(member, ProbeReport) of the first shared library that exports GetPjrtApi, or (None, None)."""
    from pjrt_hub.backends.c_api.elf import NotElfError, read_elf
    from pjrt_hub.backends.c_api.probe import probe

    members = [(i.filename, i.file_size) for i in archive.infolist()
               if re.search(r"\.so(\.\d+)*$", i.filename) and i.file_size > 0]
    for member in _library_candidates(members):
        path = scratch / Path(member).name
        with archive.open(member) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
        try:
            exports = read_elf(str(path)).exports_pjrt()
        except (NotElfError, OSError, ValueError):
            exports = False
        if exports:
            return member, probe(str(path), timeout=timeout)
        path.unlink()
    return None, None


def measure_release(release: IndexRelease, work: Path, *, keep_wheels: Path | None = None,
                    probe_timeout: float = 120.0, on_bytes: Callable[[int], None] | None = None) -> PluginRelease:
    """What ``release`` is, measured from its wheel. Raises MeasureError when the wheel cannot be
    had or read, so that a later run tries again; everything the wheel itself says (no library, a
    library that does not load) is an outcome instead."""
    base: dict[str, Any] = dict(package=release.package, version=release.version, uploaded=release.uploaded,
                yanked=release.yanked, measured_at=dt.datetime.now(dt.timezone.utc), measured_by=_hub_version())
    wheel_file = choose_wheel(release.files)
    if wheel_file is None:
        names = ", ".join(f.filename for f in release.files[:4]) + (" ..." if len(release.files) > 4 else "")
        return PluginRelease(**base, outcome="no_wheel", reason=f"no wheel for x86_64 Linux ({names})")
    base.update(artifact=wheel_file.filename, sha256=wheel_file.sha256, size=wheel_file.size)
    work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="measure-", dir=work))
    try:
        wheel = (keep_wheels / wheel_file.filename) if keep_wheels is not None else scratch / wheel_file.filename
        if not wheel.is_file():
            wheel.parent.mkdir(parents=True, exist_ok=True)
            download(wheel_file.url, wheel, wheel_file.sha256, on_bytes=on_bytes)
        try:
            with zipfile.ZipFile(wheel) as archive:
                header = _header_version(archive)
                requires = _requires(archive)
                member, report = _probe_library(archive, scratch, probe_timeout)
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
            if keep_wheels is not None:
                wheel.unlink(missing_ok=True)  # a corrupt kept wheel is fetched again next time
            raise MeasureError(f"{wheel_file.filename}: not a readable wheel: {exc}") from None
        base.update(requires=requires)
        if member is None or report is None:
            if header is not None:
                return PluginRelease(**base, outcome="header_only", pjrt_api=header,
                                     reason="no library in the wheel exports GetPjrtApi; the minor is the "
                                            "wheel's own pjrt_c_api.h")
            return PluginRelease(**base, outcome="no_library", reason="no library in the wheel exports GetPjrtApi")
        base.update(library=member)
        if report.api_version is None:
            why = report.reason or report.outcome
            if header is not None:
                return PluginRelease(**base, outcome="header_only", pjrt_api=header,
                                     reason=f"the library did not report its version ({why}); the minor is "
                                            f"the wheel's own pjrt_c_api.h")
            return PluginRelease(**base, outcome="load_failed", reason=str(why))
        return PluginRelease(**base, outcome="measured", pjrt_api=report.api_version,
                             api_struct_size=report.api_struct_size,
                             extensions=[f"{e.name}:{e.struct_size}" if e.struct_size is not None else e.name
                                         for e in report.extensions])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
