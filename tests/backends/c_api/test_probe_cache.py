"""Probe reports cached on disk: used while the library is the same file, probed again when it
changes, recovered when an entry is corrupt; probes of several libraries run in parallel and give
the report serial probing gives.

Probes are counted by wrapping the child runner: a cache hit starts no child.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from pjrt_hub import Outcome, PluginRegistry, RegistrySettings
from pjrt_hub.abi.history import NEWEST_KNOWN, slot_count
from pjrt_hub.backends.c_api import _child
from pjrt_hub.backends.c_api.probe_cache import LibraryIdentity, ProbeCache, default_cache_dir
from pjrt_hub.cli import build_parser

from .fakes import fake


class Probes:
    """Counts the probe children started, and the most that ran at once."""

    def __init__(self) -> None:
        self.count = 0
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, module: str, args: list[str], **kwargs: Any) -> Any:
        with self._lock:
            self.count += 1
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return _run_child(module, args, **kwargs)
        finally:
            with self._lock:
                self.running -= 1


_run_child = _child.run_child


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Probes:
    counter = Probes()
    monkeypatch.setattr(_child, "run_child", counter)
    return counter


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "probe-cache"
    monkeypatch.setenv("PJRT_HUB_PROBE_CACHE", str(directory))
    return directory


def in_window(build_so, name: str, minor: int = NEWEST_KNOWN.minor) -> str:
    """A fake library at ``minor`` (the newest by default, so the default framework loads it)."""
    return fake(build_so, name, f"MINOR={minor}", f"NSLOTS={slot_count(minor)}")


def load(*libraries: str, autoload: bool = False) -> dict[str, Any]:
    """A fresh registry over these libraries (named lib0, lib1, ...): records by name."""
    env = {"PJRT_NAMES_AND_LIBRARY_PATHS": ",".join(f"lib{i}:{p}" for i, p in enumerate(libraries))}
    registry = PluginRegistry(RegistrySettings(autoload=autoload), environ=env)
    return {r.name: r for r in registry.load()}


def test_a_second_load_reads_the_cache_and_starts_no_probe(build_so, cache_dir, probes):
    path = in_window(build_so, "cached")
    first = load(path)["lib0"]
    assert probes.count == 1 and first.details["probe_cache"] == "stored"
    second = load(path)["lib0"]
    assert probes.count == 1, "the second load started a probe"
    assert second.details["probe_cache"] == "hit"
    assert second.reason.startswith("probe read from the cache (the library is unchanged); ")
    assert first.reason.startswith("probed in a subprocess; ")
    assert second.model_dump(exclude={"details", "reason"}) == first.model_dump(exclude={"details", "reason"})
    assert {k: v for k, v in second.details.items() if k != "probe_cache"} == \
        {k: v for k, v in first.details.items() if k != "probe_cache"}
    assert second.outcome is Outcome.LOADED and second.api_version == str(NEWEST_KNOWN)


def test_an_entry_is_stale_once_the_library_changes(build_so, cache_dir, probes):
    path = fake(build_so, "changing")
    load(path)
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # touched
    assert load(path)["lib0"].details["probe_cache"] == "stored" and probes.count == 2
    assert load(path)["lib0"].details["probe_cache"] == "hit" and probes.count == 2
    # Replaced by a copy with the same size and mtime: another inode, so another file.
    copy = Path(path).with_suffix(".copy")
    shutil.copy2(path, copy)
    os.replace(copy, path)
    assert load(path)["lib0"].details["probe_cache"] == "stored" and probes.count == 3
    # Rebuilt as another minor: the new facts, not the cached ones.
    fake(build_so, "changing", "MINOR=106", "NSLOTS=136")
    record = load(path)["lib0"]
    assert probes.count == 4 and record.api_version == "0.106"


def test_a_corrupt_entry_is_ignored_and_rewritten(build_so, cache_dir, probes):
    path = in_window(build_so, "corrupt")
    load(path)
    (entry,) = cache_dir.glob("*.json")
    for garbage in (b"{not json", b'{"key": 1}', json.dumps({"key": json.loads(entry.read_text())["key"],
                                                            "report": {"outcome": "what"}}).encode()):
        good = entry.read_bytes()
        entry.write_bytes(garbage)
        before = probes.count
        record = load(path)["lib0"]
        assert probes.count == before + 1 and record.outcome is Outcome.LOADED
        assert record.details["probe_cache"] == "stored"
        assert json.loads(entry.read_bytes()) == json.loads(good) | {"report": json.loads(entry.read_bytes())["report"]}
    assert load(path)["lib0"].details["probe_cache"] == "hit"
    assert not list(cache_dir.glob("*.tmp")), "a temporary file was left behind"


def test_failures_that_may_depend_on_the_machine_are_probed_every_time(build_so, cache_dir, probes):
    path = fake(build_so, "aborts", "ABORT")
    for expected in (1, 2):
        record = load(path)["lib0"]
        assert record.outcome is Outcome.FAILED and record.details["probe_cache"] == "not stored"
        assert probes.count == expected
    assert not list(cache_dir.glob("*.json"))


def test_the_cache_can_be_turned_off(build_so, monkeypatch, probes, tmp_path):
    monkeypatch.setenv("PJRT_HUB_PROBE_CACHE", "off")
    assert default_cache_dir() is None and ProbeCache.default() is None
    path = fake(build_so, "uncached")
    assert load(path)["lib0"].details["probe_cache"] == "off"
    assert load(path)["lib0"].details["probe_cache"] == "off" and probes.count == 2
    monkeypatch.delenv("PJRT_HUB_PROBE_CACHE")
    monkeypatch.setenv("PJRT_HUB_CACHE", str(tmp_path / "hub"))
    assert default_cache_dir() == tmp_path / "hub" / "probe"


def test_the_identity_follows_symlinks(build_so, tmp_path):
    path = fake(build_so, "linked")
    link = tmp_path / "link.so"
    link.symlink_to(path)
    assert LibraryIdentity.of(str(link)) == LibraryIdentity.of(path)


def _comparable(records: dict[str, Any]) -> dict[str, Any]:
    varying = {"elapsed_s", "probe_cache", "stderr_tail", "stderr_highlights"}
    out = {}
    for name, record in records.items():
        data = record.model_dump()
        data["details"] = {k: v for k, v in data["details"].items() if k not in varying}
        data["reason"] = (data["reason"] or "").split("\n")[0]
        out[name] = data
    return out


def test_parallel_probes_give_the_report_serial_probes_give(build_so, tmp_path, monkeypatch, probes):
    monkeypatch.setenv("PJRT_HUB_PROBE_CACHE", "off")
    not_elf = tmp_path / "libtext.so"
    not_elf.write_text("not a library")
    libraries = [in_window(build_so, "par117"), in_window(build_so, "par115", minor=115),
                 fake(build_so, "parabort", "ABORT"), str(not_elf), str(tmp_path / "missing.so")]
    parallel = load(*libraries)
    assert probes.count == 3 and probes.most > 1, "the probes did not overlap"
    monkeypatch.setattr(PluginRegistry, "_probe_ahead", lambda self, candidates: None)
    serial = load(*libraries)
    assert probes.count == 6
    assert _comparable(parallel) == _comparable(serial)
    outcomes = [parallel[f"lib{i}"].outcome for i in range(len(libraries))]
    assert outcomes == [Outcome.LOADED, Outcome.LOADED, Outcome.FAILED, Outcome.FOUND, Outcome.FAILED]


def test_blocked_and_duplicate_libraries_are_not_probed(build_so, cache_dir, probes):
    a, b = in_window(build_so, "pa"), in_window(build_so, "pb")
    env = {"PJRT_NAMES_AND_LIBRARY_PATHS": f"one:{a},one:{b},two:{b}", "PJRT_HUB_DISABLE_PLUGINS": "two"}
    registry = PluginRegistry(RegistrySettings.from_environment(env, autoload=False), environ=env)
    outcomes = [(r.name, r.outcome) for r in registry.load()]
    assert outcomes == [("one", Outcome.LOADED), ("one", Outcome.DUPLICATE), ("two", Outcome.BLOCKED)]
    assert probes.count == 1


def test_a_hanging_library_costs_at_most_30_seconds_by_default():
    assert RegistrySettings().probe_timeout <= 30
    assert build_parser().parse_args(["probe", "x.so"]).probe_timeout <= 30


def test_a_cached_probe_imports_nothing_heavy(build_so, cache_dir):
    from ...cli.test_light_imports import imported_by_list_and_check

    path = in_window(build_so, "light")
    env = dict(os.environ, PJRT_NAMES_AND_LIBRARY_PATHS=f"light:{path}")
    load(path)  # fills the cache
    assert imported_by_list_and_check(env) == {"codes": [0, 0, 0], "heavy": []}
