"""Probe reports cached on disk, so that ``pjrt-hub list`` does not start a child per C library.

Probing a library costs a Python child process (half a second, more for a 250 MB plugin read
cold), and what it learns (version, function table, extension chain, attributes) is a fact of
the file. So a report is kept under ``$PJRT_HUB_PROBE_CACHE`` (else ``$PJRT_HUB_CACHE/probe``,
else ``~/.cache/pjrt-hub/probe``; ``PJRT_HUB_PROBE_CACHE=off`` turns it off), one JSON file per
library path, and used again only while the library's identity is unchanged: its resolved path,
size, ``mtime_ns``, inode and device, together with the version of the code that probed it (the
modules the probe child runs, and the history that names the slots). Rewriting, touching or
replacing the file, or upgrading pjrt-hub, makes the entry stale; it is then probed again and
the entry rewritten.

Only outcomes that belong to the file are kept: ``ok``, ``no_symbol`` and ``bad_layout``. A
library that failed to load (a missing ``libcupti.so.12``), crashed, aborted or timed out may
behave differently once the machine changes, in ways the file's identity does not show, so it is
probed again every time. Entries are written atomically (a temporary file, then a rename); an
entry that cannot be read or does not validate is ignored and rewritten. A cache directory that
cannot be written leaves everything working, only slower.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pjrt_hub._cache_root import cache_folder

if TYPE_CHECKING:
    from .probe import ProbeReport

__all__ = ["CACHED_OUTCOMES", "ENV_PROBE_CACHE", "LibraryIdentity", "ProbeCache", "default_cache_dir"]

ENV_PROBE_CACHE = "PJRT_HUB_PROBE_CACHE"
#: Bump when the entry's layout changes.
CACHE_FORMAT = 1
#: Probe outcomes that are facts of the file, and so worth keeping.
CACHED_OUTCOMES = frozenset({"ok", "no_symbol", "bad_layout"})
#: Entries kept at most; the least recently used go first (test suites probe many temporary files).
MAX_ENTRIES = 256
_OFF = {"0", "off", "false", "no", "none"}

#: What the probe child runs, relative to the package root: a change to any of them may change
#: what a probe reports, so it is part of every entry's key.
_PROBE_CODE = ("backends/c_api/probe/__init__.py", "backends/c_api/library.py", "backends/c_api/elf.py",
               "backends/c_api/structs.py", "backends/c_api/_child.py", "abi/history.py", "abi/types.py",
               "abi/version.py")


def default_cache_dir(environ: Any = None) -> Path | None:
    """Where entries go, or None when the cache is turned off."""
    env = os.environ if environ is None else environ
    chosen = env.get(ENV_PROBE_CACHE)
    if chosen is not None and chosen.strip():
        return None if chosen.strip().lower() in _OFF else Path(chosen)
    return cache_folder("probe", env)


@dataclass(frozen=True, slots=True)
class LibraryIdentity:
    """What must stay the same for a cached report to hold."""

    path: str
    size: int
    mtime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, path: str) -> "LibraryIdentity":
        """The identity of the file at ``path`` (symlinks resolved); OSError if it cannot be read."""
        resolved = os.path.realpath(path)
        st = os.stat(resolved)
        return cls(resolved, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


@lru_cache(maxsize=1)
def probe_code_version() -> str:
    """The version of the probe's code: pjrt-hub's version, and the size and mtime of each module
    the child runs (an editable install changes code without changing the version)."""
    from importlib.metadata import PackageNotFoundError, version

    from pjrt_hub.abi import history

    try:
        stamps = [f"pjrt-hub {version('pjrt-hub')}", f"format {CACHE_FORMAT}"]
    except PackageNotFoundError:
        stamps = ["pjrt-hub unknown", f"format {CACHE_FORMAT}"]
    # abi/ and backends/ sit side by side both in a wheel (site-packages/pjrt_hub/) and in an
    # editable install (the repository root).
    root = Path(history.__file__).resolve().parent.parent
    for relative in _PROBE_CODE:
        try:
            st = (root / relative).stat()
            stamps.append(f"{relative} {st.st_size} {st.st_mtime_ns}")
        except OSError:
            stamps.append(f"{relative} missing")
    return "; ".join(stamps)


class ProbeCache:
    """Probe reports in a directory, one JSON file per library path."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    @classmethod
    def default(cls) -> "ProbeCache | None":
        directory = default_cache_dir()
        return None if directory is None else cls(directory)

    def entry_path(self, identity: LibraryIdentity, *, initialize: bool = False) -> Path:
        # Two CRCs make a 64-bit name: a clash only makes two libraries take turns in one entry,
        # since the key inside is checked. (hashlib would add OpenSSL's start-up to ``list``.)
        text = f"{identity.path}\0{int(initialize)}".encode()
        return self.directory / f"{zlib.crc32(text):08x}{zlib.crc32(text[::-1]):08x}.json"

    def _key(self, identity: LibraryIdentity, initialize: bool) -> dict[str, Any]:
        return {"format": CACHE_FORMAT, "code": probe_code_version(), "initialize": initialize,
                "identity": asdict(identity)}

    def get(self, identity: LibraryIdentity, *, initialize: bool = False) -> "ProbeReport | None":
        """The report cached for this identity, or None (missing, stale, corrupt)."""
        from pydantic import ValidationError

        from .probe import ProbeReport

        entry = self.entry_path(identity, initialize=initialize)
        try:
            document = json.loads(entry.read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(document, dict) or document.get("key") != self._key(identity, initialize):
            return None
        try:
            report = ProbeReport.model_validate(document.get("report"))
        except ValidationError:
            return None
        if report.outcome not in CACHED_OUTCOMES:
            return None
        try:
            os.utime(entry)  # recently used: pruning keeps it
        except OSError:
            pass
        return report

    def put(self, identity: LibraryIdentity, report: "ProbeReport", *, initialize: bool = False) -> bool:
        """Keep ``report`` if its outcome is a fact of the file; True if it was written."""
        if report.outcome not in CACHED_OUTCOMES:
            return False
        document = {"key": self._key(identity, initialize), "report": report.model_dump(mode="json")}
        entry = self.entry_path(identity, initialize=initialize)
        import tempfile

        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=entry.stem + ".", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(document, out)
                os.replace(temp, entry)
            except BaseException:
                try:
                    os.unlink(temp)
                except OSError:
                    pass
                raise
        except OSError:
            return False
        self._prune()
        return True

    def _prune(self) -> None:
        try:
            entries = [(p.stat().st_mtime_ns, p) for p in self.directory.glob("*.json")]
        except OSError:
            return
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort()
        for _mtime, path in entries[: len(entries) - MAX_ENTRIES * 3 // 4]:
            try:
                path.unlink()
            except OSError:
                pass
