"""What the JAX-suite runner decides without running anything: the sample of tests, the outcome
of each test from the child's log, the comparison of the two platforms and the report.

The comparison counts only tests that pass on JAX's CPU: a test JAX's own backend fails or skips
says nothing about numba_cpu. Of those, a test that numba_cpu fails, times out on, or crashes in
is a failure; one it skips, or that the time budget left unrun, is counted apart and kept out of
the ratio (it did not run on both). Failures are grouped by their first error line with digits
folded (generated names and shapes differ from test to test where the cause is one). Each
failure is looked up in ``known_failures.toml``, which maps test ids (shell patterns) to keys of
:data:`pjrt_hub.jax.JAX_LIMITATIONS`; the run is good when the pass ratio reaches
:data:`GOAL` and every failure is listed there.
"""

from __future__ import annotations

import enum
import fnmatch
import json
import random
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from pjrt_hub.jax import JaxLimitation

__all__ = [
    "GOAL",
    "FailureGroup",
    "FileReport",
    "KnownFailure",
    "Outcome",
    "SuiteReport",
    "TestResult",
    "build_file_report",
    "ChildLog",
    "build_report",
    "draw_sample",
    "group_key",
    "load_known_failures",
    "read_log",
    "render_text",
]

#: The share of the tests passing on JAX's CPU that must pass on numba_cpu (issue 42).
GOAL = 0.995


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    XFAILED = "xfailed"
    #: The per-test time bound ended the process.
    TIMEOUT = "timeout"
    #: The process died inside the test.
    CRASHED = "crashed"
    #: The time budget ran out first.
    NOT_RUN = "not_run"


#: Outcomes that count as a numba_cpu failure of a test JAX's CPU passes.
FAILING = frozenset({Outcome.FAILED, Outcome.TIMEOUT, Outcome.CRASHED})


class TestResult(BaseModel):
    __test__ = False  # not a pytest class

    nodeid: str
    outcome: Outcome
    message: str = ""
    duration: float = 0.0


def draw_sample(ids: Sequence[str], size: int | None, seed: int, stream: str) -> list[str]:
    """``size`` of ``ids`` (all when ``size`` is None or larger), drawn from a random stream
    seeded by ``seed`` and ``stream`` (the file's name): one seed, one sample per file, whatever
    the other files hold. Returned in collection order."""
    if size is None or size >= len(ids):
        return list(ids)
    if size < 0:
        raise ValueError(f"a sample cannot have {size} tests")
    chosen = set(random.Random(f"{seed}:{stream}").sample(sorted(ids), size))
    return [i for i in ids if i in chosen]


@dataclass
class ChildLog:
    """What a child pytest wrote: the finished tests, the test it was inside when it ended
    without finishing it (None if none), JAX's default backend there and the tests it collected
    (None: it never said)."""

    results: dict[str, TestResult]
    open_test: str | None
    platform: str | None
    collected: list[str] | None = None


def read_log(path: Path) -> ChildLog:
    """A child's JSON-lines log (:mod:`.collector`)."""
    results: dict[str, TestResult] = {}
    open_test: str | None = None
    platform: str | None = None
    collected: list[str] | None = None
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a dying process
                continue
            if record["event"] == "session":
                platform = record["platform"]
            elif record["event"] == "collected":
                collected = record["ids"]
            elif record["event"] == "start":
                open_test = record["nodeid"]
            else:
                results[record["nodeid"]] = TestResult(nodeid=record["nodeid"], outcome=Outcome(record["outcome"]),
                                                       message=record.get("message", ""),
                                                       duration=record.get("duration", 0.0))
                if open_test == record["nodeid"]:
                    open_test = None
    return ChildLog(results, open_test, platform, collected)


# -- limitations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownFailure:
    """Tests (shell patterns on their ids, ``file.py::Class::test*``) that fail on numba_cpu for
    the reason of one JAX limitation."""

    limitation: str
    tests: tuple[str, ...]

    def covers(self, nodeid: str) -> bool:
        return any(fnmatch.fnmatchcase(nodeid, pattern) for pattern in self.tests)


def load_known_failures(path: Path, limitations: Iterable["JaxLimitation"], plugin: str) -> list[KnownFailure]:
    """``known_failures.toml``: ``[[failure]]`` tables of ``limitation`` (a key of
    ``JAX_LIMITATIONS`` that concerns ``plugin``) and ``tests`` (patterns). A key that is not
    there, or whose entry does not name the plugin, is a ValueError: a failure is only covered by
    a limitation a user can read."""
    by_key = {entry.key: entry for entry in limitations}
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    known: list[KnownFailure] = []
    for i, table in enumerate(data.get("failure", [])):
        key = table.get("limitation")
        tests = table.get("tests")
        if key not in by_key:
            raise ValueError(f"{path.name}: failure {i} names limitation {key!r}, which pjrt_hub.jax.JAX_LIMITATIONS "
                             f"does not have (known: {', '.join(sorted(by_key))})")
        if plugin not in by_key[key].plugins:
            raise ValueError(f"{path.name}: limitation {key!r} does not concern {plugin}")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"{path.name}: failure {i} ({key}) needs a non-empty list of test patterns")
        known.append(KnownFailure(key, tuple(tests)))
    return known


# -- the report --------------------------------------------------------------------------------


_DIGITS = re.compile(r"\d+")
#: JAX names each program after the function jitted (``jit_reshard``, ``jit__gamma``): one
#: cause shows under many names.
_PROGRAM = re.compile(r"\bjit_\w+")


def group_key(message: str) -> str:
    """The first error line with JAX's program names folded to ``jit_*`` and every run of
    digits to ``#``."""
    return _DIGITS.sub("#", _PROGRAM.sub("jit_*", message.strip()))[:200] or "(no message)"


class FailureGroup(BaseModel):
    key: str
    #: One message as it was, for reading.
    example: str
    tests: list[str]


class FileReport(BaseModel):
    file: str
    keywords: str | None = None
    collected: int
    sampled: int
    cpu: dict[str, int]
    #: Tests that pass on JAX's CPU.
    cpu_passed: int
    #: Of those, how many ran on numba_cpu (not skipped there, not left by the budget).
    compared: int
    numba_passed: int
    numba_skipped: list[str] = Field(default_factory=list)
    not_run: int = 0
    failures: list[FailureGroup] = Field(default_factory=list)
    #: Failing tests and the limitation key covering each (None: unlisted).
    covered_by: dict[str, str | None] = Field(default_factory=dict)
    cpu_seconds: float = 0.0
    numba_seconds: float = 0.0

    @property
    def ratio(self) -> float | None:
        return self.numba_passed / self.compared if self.compared else None


class SuiteReport(BaseModel):
    jax_version: str
    source: str
    seed: int
    sample: int | None
    goal: float = GOAL
    files: list[FileReport]
    errors: list[str] = Field(default_factory=list)

    @property
    def compared(self) -> int:
        return sum(f.compared for f in self.files)

    @property
    def numba_passed(self) -> int:
        return sum(f.numba_passed for f in self.files)

    @property
    def ratio(self) -> float | None:
        return self.numba_passed / self.compared if self.compared else None

    @property
    def unlisted(self) -> list[str]:
        return [t for f in self.files for t, key in f.covered_by.items() if key is None]

    @property
    def problems(self) -> list[str]:
        out = list(self.errors)
        if self.ratio is not None and self.ratio < self.goal:
            out.append(f"{self.numba_passed}/{self.compared} = {self.ratio:.1%} pass on numba_cpu, under the goal "
                       f"of {self.goal:.1%}")
        if self.unlisted:
            out.append(f"{len(self.unlisted)} failures are not in known_failures.toml")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems


def build_file_report(file: str, *, keywords: str | None, collected: int, sampled: Sequence[str],
                      cpu: Mapping[str, TestResult], numba: Mapping[str, TestResult],
                      known: Sequence[KnownFailure], cpu_seconds: float = 0.0,
                      numba_seconds: float = 0.0) -> FileReport:
    """Compare one file's results: ``cpu`` and ``numba`` by node id (a test missing from
    ``numba`` was not run there)."""
    cpu_counts: dict[str, int] = defaultdict(int)
    for nodeid in sampled:
        cpu_counts[cpu[nodeid].outcome.value if nodeid in cpu else Outcome.NOT_RUN.value] += 1
    passed_on_cpu = [n for n in sampled if n in cpu and cpu[n].outcome is Outcome.PASSED]
    compared = numba_passed = not_run = 0
    skipped: list[str] = []
    groups: dict[str, FailureGroup] = {}
    covered_by: dict[str, str | None] = {}
    for nodeid in passed_on_cpu:
        result = numba.get(nodeid)
        if result is None or result.outcome is Outcome.NOT_RUN:
            not_run += 1
            continue
        if result.outcome in (Outcome.SKIPPED, Outcome.XFAILED):
            skipped.append(f"{nodeid}: {result.message}")
            continue
        compared += 1
        if result.outcome is Outcome.PASSED:
            numba_passed += 1
            continue
        message = result.message if result.outcome is Outcome.FAILED else f"{result.outcome.value}: {result.message}"
        key = group_key(message)
        groups.setdefault(key, FailureGroup(key=key, example=message, tests=[])).tests.append(nodeid)
        covered_by[nodeid] = next((k.limitation for k in known if k.covers(nodeid)), None)
    return FileReport(file=file, keywords=keywords, collected=collected, sampled=len(sampled), cpu=dict(cpu_counts),
                      cpu_passed=len(passed_on_cpu), compared=compared, numba_passed=numba_passed,
                      numba_skipped=skipped, not_run=not_run,
                      failures=sorted(groups.values(), key=lambda g: (-len(g.tests), g.key)),
                      covered_by=covered_by, cpu_seconds=round(cpu_seconds, 1),
                      numba_seconds=round(numba_seconds, 1))


def build_report(files: Sequence[FileReport], *, jax_version: str, source: str, seed: int, sample: int | None,
                 errors: Sequence[str] = ()) -> SuiteReport:
    return SuiteReport(jax_version=jax_version, source=source, seed=seed, sample=sample, files=list(files),
                       errors=list(errors))


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def render_text(report: SuiteReport) -> str:
    """The per-file table, then each file's failure groups, then the unlisted failures."""
    head = ("file", "collected", "sampled", "cpu passed", "ran on numba", "numba passed", "%",
            "not run cpu/numba", "cpu s", "numba s")
    rows = [head]
    for f in report.files:
        name = f.file + (f" -k '{f.keywords}'" if f.keywords else "")
        rows.append((name, str(f.collected), str(f.sampled), str(f.cpu_passed), str(f.compared),
                     str(f.numba_passed), _percent(f.ratio), f"{f.cpu.get(Outcome.NOT_RUN.value, 0)}/{f.not_run}",
                     f"{f.cpu_seconds:.0f}",
                     f"{f.numba_seconds:.0f}"))
    rows.append(("total", "", "", str(sum(f.cpu_passed for f in report.files)), str(report.compared),
                 str(report.numba_passed), _percent(report.ratio),
                 f"{sum(f.cpu.get(Outcome.NOT_RUN.value, 0) for f in report.files)}/"
                 f"{sum(f.not_run for f in report.files)}", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [f"JAX {report.jax_version} test suite on numba_cpu against JAX's CPU ({report.source}; "
             f"seed {report.seed}, sample {report.sample or 'all'} per file; goal {report.goal:.1%})", ""]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    for f in report.files:
        if not f.failures and not f.numba_skipped:
            continue
        lines += ["", f"== {f.file}: failures on numba_cpu of tests that pass on JAX's CPU"]
        for g in f.failures:
            keys = sorted({f.covered_by.get(t) or "UNLISTED" for t in g.tests})
            lines.append(f"  {len(g.tests):4d}  [{', '.join(keys)}] {g.example}")
            for t in g.tests[:3]:
                lines.append(f"          {t}")
            if len(g.tests) > 3:
                lines.append(f"          ... and {len(g.tests) - 3} more")
        for s in f.numba_skipped:
            lines.append(f"  skipped on numba_cpu only: {s}")
    if report.unlisted:
        lines += ["", f"Failures not in known_failures.toml ({len(report.unlisted)}):"]
        lines += [f"  {t}" for t in report.unlisted]
    for e in report.errors:
        lines += ["", f"error: {e}"]
    lines += ["", "OK" if report.ok else "NOT OK: " + "; ".join(report.problems)]
    return "\n".join(lines) + "\n"
