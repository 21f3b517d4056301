"""Discovery: find plugin candidates without running any of their code.

Sources, the ecosystem's real conventions:

* entry points in ``pjrt_hub.plugins`` (Python plugins, loaded later through pluggy);
* entry points in ``jax_plugins`` (JAX's group: ``jax-cuda12-pjrt``, ``jax-tt-plugin``) and
  ``xla_plugins`` (``xla-cpu-pjrt``): the value names a module that ships a PJRT C library; the
  library is found in the distribution's file list or next to the module, never by importing the
  module (a JAX plugin module imports jax and registers itself on import);
* modules of the ``jax_plugins`` namespace package that carry a shared library;
* ``PJRT_NAMES_AND_LIBRARY_PATHS=name:path,...`` (a path may be a JSON config with
  ``library_path`` and ``create_options``, as in JAX);
* explicit library paths given by the user.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata as md
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Protocol

__all__ = [
    "C_GROUPS",
    "Candidate",
    "ENV_LIBRARY_PATHS",
    "PYTHON_GROUP",
    "candidate_for_path",
    "discover",
    "is_library_path",
]

PYTHON_GROUP = "pjrt_hub.plugins"
C_GROUPS = ("jax_plugins", "xla_plugins")
ENV_LIBRARY_PATHS = "PJRT_NAMES_AND_LIBRARY_PATHS"

_SHARED_SUFFIXES = (".so", ".dylib", ".dll")


@dataclass(frozen=True)
class Candidate:
    """One plugin found, not yet loaded."""

    name: str
    kind: Literal["python", "c"]
    #: Where it was found: ``entry point pjrt_hub.plugins``, ``PJRT_NAMES_AND_LIBRARY_PATHS``, ...
    source: str
    entry_point: md.EntryPoint | None = None
    distribution: str | None = None
    distribution_version: str | None = None
    #: The distribution's Requires-Dist lines (for pins on framework distributions).
    requires: tuple[str, ...] = ()
    library_path: str | None = None
    create_options: dict[str, Any] = field(default_factory=dict)
    #: A problem found during discovery (a malformed setting, no library); the candidate fails.
    problem: str | None = None

    @property
    def entry_point_text(self) -> str | None:
        ep = self.entry_point
        return None if ep is None else f"{ep.group}: {ep.name} = {ep.value}"


def _dist_facts(dist: md.Distribution | None) -> dict[str, Any]:
    if dist is None:
        return {}
    meta = dist.metadata  # parsed once: .version and .requires would each parse it again
    requires = meta.get_all("Requires-Dist") if meta is not None else None
    return {
        "distribution": meta["Name"] if meta is not None else None,
        "distribution_version": meta["Version"] if meta is not None else None,
        "requires": tuple(requires if requires is not None else dist.requires or ()),
    }


def is_library_path(value: str) -> bool:
    """Whether a plugin argument (``--plugin``, ``--pjrt-plugin``, ``probe``) names a library or a
    JAX plugin config by path rather than a plugin by name: it holds a path separator, or ends
    like a shared library or a config. A registry name never does (``toy@c_api`` has no slash)."""
    return "/" in value or os.sep in value or value.endswith((*_SHARED_SUFFIXES, ".json"))


def _is_shared_library(name: str) -> bool:
    return name.endswith(_SHARED_SUFFIXES) or ".so." in name


def _preference(path: Path) -> tuple[int, int]:
    name = path.name.lower()
    hinted = any(word in name for word in ("pjrt", "plugin", "tpu"))
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    return (1 if hinted else 0, size)


def _pick_library(paths: Iterable[Path]) -> Path | None:
    existing = [p for p in paths if p.is_file()]
    return max(existing, key=_preference) if existing else None


def _module_locations(module: str) -> list[Path]:
    """Directories (or the file) of a module, found on sys.path without importing anything."""
    parts = module.split(".")
    search: list[str] | None = None
    spec = None
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), search)
        if spec is None:
            return []
        search = list(spec.submodule_search_locations or [])
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin).parent] if spec.origin else []


def _library_for_module(module: str, dist: md.Distribution | None) -> Path | None:
    """The shared library that ships with ``module``: from the dist's file list, else on disk."""
    if dist is not None and dist.files:
        prefix = module.replace(".", "/") + "/"
        owned = [f for f in dist.files if str(f).startswith(prefix) and _is_shared_library(f.name)]
        if not owned:
            owned = [f for f in dist.files if _is_shared_library(f.name) and "pjrt" in f.name.lower()]
        found = _pick_library(Path(str(dist.locate_file(f))) for f in owned)
        if found is not None:
            return found
    for location in _module_locations(module):
        if location.is_dir():
            found = _pick_library(p for p in location.rglob("*") if _is_shared_library(p.name))
            if found is not None:
                return found
    return None


class _EveryEntryPoint(Protocol):
    """What ``md.entry_points()`` gives: EntryPoints, or on Python 3.11 SelectableGroups; both
    select by group."""

    def select(self, *, group: str) -> Iterable[md.EntryPoint]: ...


def _iter_entry_points(group: str, everything: _EveryEntryPoint | None = None
                       ) -> Iterator[tuple[md.EntryPoint, md.Distribution | None]]:
    """The entry points of ``group``; from ``everything`` (every group, read once by discover:
    each lookup by group reads every distribution's entry_points.txt again)."""
    selected = md.entry_points(group=group) if everything is None else everything.select(group=group)
    for ep in selected:
        yield ep, getattr(ep, "dist", None)


def _python_candidates(everything: _EveryEntryPoint | None = None) -> Iterator[Candidate]:
    for ep, dist in _iter_entry_points(PYTHON_GROUP, everything):
        yield Candidate(ep.name, "python", f"entry point {PYTHON_GROUP}", ep, **_dist_facts(dist))


#: pjrt-hub's own ``jax_plugins`` entry point serves its Python plugins to JAX (``pjrt_hub.jax``);
#: it ships no C library and is not a plugin of its own.
_OWN_MODULE_PREFIX = "pjrt_hub."


def _c_entry_point_candidates(everything: _EveryEntryPoint | None = None) -> Iterator[Candidate]:
    for group in C_GROUPS:
        for ep, dist in _iter_entry_points(group, everything):
            module = ep.value.split(":")[0].strip()
            if module.startswith(_OWN_MODULE_PREFIX):
                continue
            library = _library_for_module(module, dist)
            problem = None if library else (
                f"no shared library found for module {module!r} of entry point {ep.name!r} "
                f"(looked in the distribution's files and next to the module)"
            )
            yield Candidate(ep.name, "c", f"entry point {group}", ep,
                            library_path=str(library) if library else None, problem=problem,
                            **_dist_facts(dist))


def _namespace_candidates(seen_modules: set[str]) -> Iterator[Candidate]:
    """Submodules of the ``jax_plugins`` namespace package that ship a shared library."""
    spec = importlib.machinery.PathFinder.find_spec("jax_plugins")
    if spec is None or not spec.submodule_search_locations:
        return
    for location in spec.submodule_search_locations:
        base = Path(location)
        if not base.is_dir():
            continue
        for child in sorted(base.iterdir()):
            module = f"jax_plugins.{child.name}"
            if not child.is_dir() or module in seen_modules or child.name.startswith(("_", ".")):
                continue
            library = _pick_library(p for p in child.rglob("*") if _is_shared_library(p.name))
            if library is not None:
                yield Candidate(child.name, "c", "jax_plugins namespace package",
                                library_path=str(library))


def _env_candidates(value: str) -> Iterator[Candidate]:
    source = f"environment {ENV_LIBRARY_PATHS}"
    for item in filter(None, (part.strip() for part in value.split(","))):
        pieces = item.split(os.path.pathsep)
        if len(pieces) != 2 or not all(pieces):
            yield Candidate(shown_path(item), "c", source, problem=(
                f"invalid value {shown_path(item)!r} in env var {ENV_LIBRARY_PATHS}: expected "
                f"'name{os.path.pathsep}path' items separated by ','"))
            continue
        name, path = pieces
        yield candidate_for_path(path, name=name, source=source)


#: A JAX plugin config holds a library path and a few create options; anything much larger is
#: not one, and is refused before it is read.
MAX_CONFIG_BYTES = 1 << 20


def shown_path(path: str) -> str:
    """``path`` fit for a one-line message: an over-long one keeps its head and its tail."""
    return path if len(path) <= 160 else f"{path[:80]}...{path[-60:]} ({len(path)} characters)"


def _file_problem(path: str, what: str) -> str | None:
    """Why ``path`` is not a readable regular file, or None. Never raises: a path too long for
    the system, a loop of symlinks or a directory is a problem to report, not a crash."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{what} {shown_path(path)} does not exist"
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, EACCES; ValueError: a NUL byte
        return f"{what} {shown_path(path)} cannot be read: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISDIR(st.st_mode):
        return f"{what} {shown_path(path)} is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return f"{what} {shown_path(path)} is not a regular file (a device, pipe or socket)"
    return None


def _read_config(path: str) -> dict[str, Any] | str:
    """A JAX-style plugin config as a dict, or a one-line problem."""
    problem = _file_problem(path, "plugin config")
    if problem:
        return problem
    shown = shown_path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        return f"cannot read plugin config {shown}: {exc.strerror or exc}"
    if len(raw) > MAX_CONFIG_BYTES:
        return (f"plugin config {shown} is larger than {MAX_CONFIG_BYTES // 1024} KiB; a PJRT plugin "
                "config is a small JSON object with library_path and create_options")
    try:
        config = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return f"plugin config {shown} is not UTF-8 text (byte {exc.start})"
    except ValueError as exc:
        return f"plugin config {shown} is not valid JSON: {exc}"
    except RecursionError:
        return f"plugin config {shown} nests too deeply to be read"
    if not isinstance(config, dict) or "library_path" not in config:
        return f'PJRT plugin config file should contain "library_path" field. ({shown})'
    if not isinstance(config["library_path"], str) or not config["library_path"]:
        return f"library_path in plugin config {shown} must be a non-empty string"
    options = config.get("create_options") or {}
    if not isinstance(options, dict):
        return f"create_options in plugin config {shown} must be an object"
    return config


def candidate_for_path(path: str, *, name: str | None = None, source: str = "path") -> Candidate:
    """A C plugin named by a library path, or by a JAX-style JSON config file.

    Whatever the path names (nothing, a directory, a device, garbage, a config nested a million
    levels deep), the result is a candidate; a problem is recorded on it, never raised.
    """
    name = name or Path(path).stem.removeprefix("lib") or path
    if path.endswith(".json"):
        config = _read_config(path)
        if isinstance(config, str):
            return Candidate(name, "c", source, problem=config)
        library = config["library_path"]
        return Candidate(name, "c", source, library_path=library,
                         create_options=config.get("create_options") or {},
                         problem=_file_problem(library, "library"))
    return Candidate(name, "c", source, library_path=path, problem=_file_problem(path, "library"))


def discover(*, autoload: bool = True, environ: dict[str, str] | None = None,
             paths: Iterable[str] = ()) -> list[Candidate]:
    """Every candidate from every source, in a stable order: Python entry points, C entry
    points, the jax_plugins namespace, the environment variable, explicit paths.

    With ``autoload`` off only the explicit paths and the environment variable are read.
    """
    env = os.environ if environ is None else environ
    found: list[Candidate] = []
    if autoload:
        everything = md.entry_points()
        found.extend(_python_candidates(everything))
        c_eps = list(_c_entry_point_candidates(everything))
        found.extend(c_eps)
        modules = {c.entry_point.value.split(":")[0].strip() for c in c_eps if c.entry_point}
        found.extend(_namespace_candidates(modules))
    if env.get(ENV_LIBRARY_PATHS):
        found.extend(_env_candidates(env[ENV_LIBRARY_PATHS]))
    for path in paths:
        found.append(candidate_for_path(path))
    return found
