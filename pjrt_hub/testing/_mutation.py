"""Mutation testing of the suite: does it fail plugins that carry one realistic defect each?

A *mutant* is a working plugin (the toy of :mod:`pjrt_hub.testing.toy`, the reference plugin,
or a vendor's own) with exactly one behaviour changed, the way plugins ship defects: a launch
loop that reads the wrong argument list, a kernel that saturates where it should wrap, an event
that says ready too early. The suite *kills* a mutant when every case expected to catch the
defect fails on it. The unmodified plugins the mutants are made from (the *bases*) run the same
cases as controls: they must pass, or the kills prove nothing.

Mutants run in this process, registered by hand in a registry of their own, and only on the
cases that concern them, so a catalogue of dozens runs in well under a minute. A catalogue is a
Python file (or module) defining ``MUTANTS`` (a sequence of :class:`Mutant`) and ``BASES`` (a
sequence of :class:`Base`); pjrt-hub's own is ``tests/conformance/mutants.py``, and
``pjrt-hub conformance --mutation-report [CATALOGUE]`` prints its score per group.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, ContextManager, Iterable, Sequence

from pydantic import BaseModel, Field

from ._case import CASES, GROUPS, CaseFailure, CaseSkipped, matching, suite_version

__all__ = [
    "Base",
    "ControlResult",
    "GroupScore",
    "Mutant",
    "MutantResult",
    "MutationReport",
    "load_catalogue",
    "patched",
    "render_mutation_report",
    "run_cases_on",
    "run_mutation",
]

#: What a mutant or a base builds: a context in which a pluggy plugin object (``pjrt_hub_declare``
#: and ``pjrt_hub_get_api`` hook implementations) is the plugin, as changed.
PluginFactory = Callable[[], ContextManager[Any]]


@dataclass(frozen=True)
class Base:
    """An unmodified plugin that mutants are made from; it runs their cases as the control."""

    name: str
    build: PluginFactory


@dataclass(frozen=True)
class Mutant:
    """One defect planted in a base plugin, and the cases that must catch it."""

    name: str
    #: The group of the behaviour changed (one of :data:`~._case.GROUPS`): where it is scored.
    group: str
    #: The defect, as a vendor would ship it.
    description: str
    #: Case ids that must all fail on the mutant.
    kills: tuple[str, ...]
    build: PluginFactory
    #: The base it is made from (the name of a :class:`Base`).
    base: str = "toy"
    #: The cases run on it (fnmatch patterns); the kills by default.
    cases: tuple[str, ...] = ()
    #: For defects that make calls hang: a smaller bound keeps the run quick.
    timeout_scale: float = 1.0

    @property
    def patterns(self) -> tuple[str, ...]:
        return self.cases or self.kills


class MutantResult(BaseModel):
    name: str
    group: str
    base: str
    description: str
    killed: bool = Field(description="every expected case failed")
    expected: list[str]
    failed: dict[str, str] = Field(description="case id -> failure message, of every case that failed")
    missed: dict[str, str] = Field(description="expected case id -> what it did instead of failing")
    duration_s: float


class ControlResult(BaseModel):
    base: str
    cases_run: int
    passed: int
    failed: dict[str, str] = Field(description="case id -> failure message: the control must pass")
    duration_s: float


class GroupScore(BaseModel):
    group: str
    killed: int
    total: int

    @property
    def score(self) -> float:
        return self.killed / self.total if self.total else 1.0


class MutationReport(BaseModel):
    """``pjrt-hub conformance --mutation-report --json``."""

    suite_version: str
    catalogue: str
    mutants: list[MutantResult]
    controls: list[ControlResult]
    groups: list[GroupScore]
    ok: bool = Field(description="every mutant killed and every control passed")


# -- running -------------------------------------------------------------------------------------


def run_cases_on(plugin: Any, name: str, patterns: Sequence[str], *,
                 timeout_scale: float = 1.0) -> dict[str, tuple[str, str]]:
    """Register ``plugin`` by hand in a registry of its own and run the matching cases on it:
    case id -> (outcome, message), outcomes passed, failed, skipped, xfailed (a declared
    limitation held) and xpassed."""
    from pjrt_hub import PluginRegistry, RegistrySettings

    from ._context import PluginUnderTest

    registry = PluginRegistry(RegistrySettings(autoload=False), environ={})
    registry.register(plugin, name)
    return run_matching(PluginUnderTest(registry, name, timeout_scale=timeout_scale), patterns)


def run_matching(ctx: Any, patterns: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Run the cases matching ``patterns`` on ``ctx`` (a ``PluginUnderTest``), without pytest:
    case id -> (outcome, message), as :func:`run_cases_on` says."""
    from ._runner import run_case
    from . import cases as _cases  # noqa: F401 - registers the cases

    results: dict[str, tuple[str, str]] = {}
    # In the order of a conformance run (group by group): the first case to meet a defect is
    # the one that reports it there too.
    for case_id, item in sorted(CASES.items(), key=lambda kv: GROUPS.index(kv[1].group)):
        if not matching(case_id, patterns):
            continue
        limited = ctx.limitation_for(item) is not None
        try:
            run_case(item, ctx)
        except CaseSkipped as exc:
            results[case_id] = ("skipped", str(exc))
        except CaseFailure as exc:
            results[case_id] = ("xfailed" if limited else "failed", str(exc))
        else:
            results[case_id] = ("xpassed" if limited else "passed", "")
    return results


def run_mutant(mutant: Mutant) -> MutantResult:
    started = time.perf_counter()
    with mutant.build() as plugin:
        results = run_cases_on(plugin, f"mutant_{mutant.name}", mutant.patterns, timeout_scale=mutant.timeout_scale)
    failed = {k: v[1] for k, v in results.items() if v[0] in ("failed", "xpassed")}
    missed = {k: (f"{results[k][0]}: {results[k][1]}".rstrip(": ") if k in results else "not run (no such case)")
              for k in mutant.kills if k not in failed}
    return MutantResult(name=mutant.name, group=mutant.group, base=mutant.base, description=mutant.description,
                        killed=not missed, expected=list(mutant.kills), failed=failed, missed=missed,
                        duration_s=round(time.perf_counter() - started, 3))


def run_control(base: Base, patterns: Iterable[str]) -> ControlResult:
    started = time.perf_counter()
    patterns = sorted(set(patterns))
    with base.build() as plugin:
        results = run_cases_on(plugin, f"control_{base.name}", patterns)
    failed = {k: v[1] for k, v in results.items() if v[0] in ("failed", "xpassed")}
    return ControlResult(base=base.name, cases_run=len(results),
                         passed=sum(1 for v in results.values() if v[0] == "passed"), failed=failed,
                         duration_s=round(time.perf_counter() - started, 3))


def run_mutation(mutants: Sequence[Mutant], bases: Sequence[Base], *, catalogue: str = "",
                 only: Sequence[str] = ()) -> MutationReport:
    """Run every mutant (or those whose name matches a pattern of ``only``) and the controls of
    their bases; score by group."""
    from . import cases as _cases  # noqa: F401 - registers the cases (and makes the suite version whole)

    chosen = [m for m in mutants if not only or matching(m.name, only)]
    if not chosen:
        raise ValueError(f"no mutant of the catalogue matches {' '.join(only)}")
    by_base = {b.name: b for b in bases}
    for mutant in chosen:
        if mutant.base not in by_base:
            raise ValueError(f"mutant {mutant.name}: no base named {mutant.base!r} "
                             f"(bases: {', '.join(by_base) or 'none'})")
        if mutant.group not in GROUPS:
            raise ValueError(f"mutant {mutant.name}: unknown group {mutant.group!r}")
    results = [run_mutant(m) for m in chosen]
    controls = []
    for name, base in by_base.items():
        patterns = [p for m in chosen if m.base == name for p in m.patterns]
        if patterns:
            controls.append(run_control(base, patterns))
    totals, killed = Counter(m.group for m in results), Counter(m.group for m in results if m.killed)
    groups = [GroupScore(group=g, killed=killed[g], total=totals[g]) for g in GROUPS if totals[g]]
    return MutationReport(suite_version=suite_version(), catalogue=catalogue, mutants=results, controls=controls,
                          groups=groups, ok=all(m.killed for m in results) and not any(c.failed for c in controls))


# -- catalogues ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Catalogue:
    mutants: tuple[Mutant, ...]
    bases: tuple[Base, ...]
    source: str = field(default="")


def load_catalogue(where: str) -> Catalogue:
    """The ``MUTANTS`` and ``BASES`` of a Python file or an importable module; ValueError saying
    what is missing otherwise."""
    module: ModuleType
    path = Path(where)
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise ValueError(f"no mutant catalogue at {where} (a Python file defining MUTANTS and BASES)")
        spec = importlib.util.spec_from_file_location(f"pjrt_hub_mutants_{abs(hash(str(path.resolve())))}", path)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot load {where} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses and pickling look modules up by name
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ValueError(f"no mutant catalogue {where}: neither a file nor an importable module ({exc})") from None
    mutants, bases = getattr(module, "MUTANTS", None), getattr(module, "BASES", None)
    if not mutants or bases is None:
        raise ValueError(f"{where} defines no MUTANTS and BASES")
    return Catalogue(tuple(mutants), tuple(bases), str(where))


def render_mutation_report(report: MutationReport) -> str:
    lines = [f"Mutation testing of the PJRT conformance suite {report.suite_version} ({report.catalogue})", ""]
    width = max((len(g.group) for g in report.groups), default=5)
    for g in report.groups:
        lines.append(f"  {g.group:<{width}}  {g.killed:>3}/{g.total:<3} killed  {100 * g.score:5.1f}%")
    total, killed = len(report.mutants), sum(m.killed for m in report.mutants)
    lines.append(f"  {'all':<{width}}  {killed:>3}/{total:<3} killed  {100 * killed / max(total, 1):5.1f}%")
    survivors = [m for m in report.mutants if not m.killed]
    if survivors:
        lines += ["", "Survivors (the suite passed a defective plugin):"]
        for m in survivors:
            misses = "; ".join(f"{k}: {' '.join(v.split())[:160]}" for k, v in m.missed.items())
            lines.append(f"  {m.name} [{m.group}] {m.description}: {misses}")
    bad = [c for c in report.controls if c.failed]
    for c in report.controls:
        lines.append(f"control {c.base}: {c.passed} of {c.cases_run} cases passed"
                     + (f", {len(c.failed)} FAILED: {', '.join(sorted(c.failed))}" if c.failed else ""))
    lines += ["", "OK: every mutant killed, every control passed." if report.ok else
              f"NOT OK: {len(survivors)} mutant(s) survived, {len(bad)} control(s) failed."]
    return "\n".join(lines)


@contextlib.contextmanager
def patched(*changes: tuple[Any, str, Any]) -> Any:
    """Set ``obj.attr = value`` for each change for the duration (for mutants of plugins whose
    classes cannot be swapped by subclassing); restores the originals, in reverse order."""
    saved = []
    try:
        for obj, attr, value in changes:
            saved.append((obj, attr, obj.__dict__[attr] if attr in getattr(obj, "__dict__", {}) else None,
                          attr in getattr(obj, "__dict__", {})))
            setattr(obj, attr, value)
        yield
    finally:
        for obj, attr, old, existed in reversed(saved):
            if existed:
                setattr(obj, attr, old)
            else:
                delattr(obj, attr)
