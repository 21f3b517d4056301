"""What a mutation run decides without running anything: which mutants, under which ids, and
what their outcomes add up to.

A cosmic-ray session lists every mutant of the target modules (thousands); a run tests a sample.
The sample is drawn per module (stratified: every module gets its share of the budget, in
proportion to its mutants, and at least a few), each module from its own random stream seeded by
the run's seed and the module's path, so one seed gives one sample for one source tree, and a
change to one module redraws that module's share only. A mutant is named by an id that does not
depend on line numbers or on cosmic-ray's occurrence counter (both move when unrelated code
above changes): the module, the enclosing definition, the operator, the text of the line it
mutates and its place there. Survivors are matched to their reasons (``survivors.toml``) by that
id; the report counts them and says which survivors nobody has explained.
"""

from __future__ import annotations

import ast
import difflib
import enum
import hashlib
import random
import tomllib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from pydantic import BaseModel, Field

__all__ = [
    "Candidate",
    "ExplainedKind",
    "ModuleScore",
    "MutantResult",
    "MutationRunReport",
    "Outcome",
    "Reason",
    "THRESHOLD",
    "allocate",
    "annotation_spans",
    "assign_ids",
    "build_report",
    "draw_sample",
    "in_spans",
    "load_reasons",
    "render_markdown",
    "scope_of",
]

#: The share of the sample the suite must kill (issue 41).
THRESHOLD = 0.9

Position = tuple[int, int]


@dataclass(frozen=True)
class Candidate:
    """One mutant of the session: where cosmic-ray would plant it. Positions are parso's: line
    from 1, column from 0, in characters."""

    job_id: str
    #: The module's path in the repository (``backends/cpu_runtime/_buffers.py``).
    module: str
    operator: str
    occurrence: int
    start: Position
    end: Position
    #: The qualified name of the function or class around it (:func:`scope_of`).
    definition: str | None = None


# -- sampling ----------------------------------------------------------------------------------


def allocate(counts: Mapping[str, int], size: int, minimum: int) -> dict[str, int]:
    """How many mutants each module gets out of ``size``: first ``minimum`` each (all of a
    module that has fewer), then the rest in proportion to the mutants left in each module,
    rounded by largest remainder (ties to the module name) so the shares add up to ``size``
    exactly, or to every mutant when there are fewer than ``size``."""
    if size < 0 or minimum < 0:
        raise ValueError("size and minimum must not be negative")
    total = sum(counts.values())
    if size >= total:
        return dict(counts)
    shares = {m: min(n, minimum) for m, n in counts.items()}
    budget = size - sum(shares.values())
    if budget < 0:
        raise ValueError(f"a sample of {size} cannot give {minimum} mutants to each of {len(counts)} modules")
    left = {m: n - shares[m] for m, n in counts.items()}
    pool = sum(left.values())
    if budget == 0 or pool == 0:
        return shares
    exact = {m: budget * n / pool for m, n in left.items()}
    for m, x in exact.items():
        shares[m] += int(x)
    short = size - sum(shares.values())
    by_remainder = sorted(exact, key=lambda m: (-(exact[m] - int(exact[m])), m))
    for m in by_remainder[:short]:
        shares[m] += 1
    return shares


def _order(c: Candidate) -> tuple:
    return (c.start, c.end, c.operator, c.occurrence)


def draw_sample(candidates: Iterable[Candidate], size: int, seed: int, minimum: int) -> list[Candidate]:
    """The seeded stratified sample (see the module's docstring), sorted by module and place.
    It depends on the candidates as a set, not on their order (cosmic-ray's job ids are random,
    and its session lists work in any order)."""
    by_module: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates:
        by_module[c.module].append(c)
    shares = allocate({m: len(cs) for m, cs in by_module.items()}, size, minimum)
    sample: list[Candidate] = []
    for module in sorted(by_module):
        pool = sorted(by_module[module], key=_order)
        rng = random.Random(f"{seed}:{module}")
        sample += sorted(rng.sample(pool, shares[module]), key=_order)
    return sample


# -- filtering ---------------------------------------------------------------------------------


def _char_column(line: str, byte_offset: int) -> int:
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def annotation_spans(source: str) -> list[tuple[Position, Position]]:
    """The spans of the type annotations of a module that Python never evaluates: every
    annotation of a module that has ``from __future__ import annotations`` (PEP 563 keeps them
    as strings) and does not hand them to something that reads them back as types (pydantic,
    ``typing.get_type_hints``). A mutant inside one cannot change what the module does; none of
    another module's annotations is spared. Positions as cosmic-ray's (characters, line from 1)."""
    tree = ast.parse(source)
    future = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                 and any(a.name == "annotations" for a in node.names) for node in tree.body)
    reads_types = "pydantic" in source or "get_type_hints" in source
    if not future or reads_types:
        return []
    lines = source.splitlines()
    annotations: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            annotations.append(node.returns)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            annotations.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    spans = []
    for a in annotations:
        assert a.end_lineno is not None and a.end_col_offset is not None
        start = (a.lineno, _char_column(lines[a.lineno - 1], a.col_offset))
        end = (a.end_lineno, _char_column(lines[a.end_lineno - 1], a.end_col_offset))
        spans.append((start, end))
    return spans


def in_spans(start: Position, end: Position, spans: Sequence[tuple[Position, Position]]) -> bool:
    return any(s <= start and end <= e for s, e in spans)


# -- stable ids --------------------------------------------------------------------------------


def scope_of(source: str) -> "Callable[[int], str | None]":
    """A function giving, for a line of ``source``, the qualified name of the innermost class or
    function around it (its decorators included: a mutant that removes one belongs to what it
    decorates), or None at module level."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                spans.append((first, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")

    def scope(line: int) -> str | None:
        inside = [(start, name) for start, end, name in spans if start <= line <= end]
        return max(inside)[1] if inside else None

    return scope



def assign_ids(candidates: Iterable[Candidate], sources: Mapping[str, str]) -> dict[str, str]:
    """A stable id for every candidate (by job id): ``module:operator:hash``, the hash over the
    enclosing definition, the text of the line (stripped), the column from its first non-blank
    character, the span's length and which of the operator's variants at that place it is.
    Identical lines mutated identically in one definition get ``-2``, ``-3`` ... in source order."""
    candidates = list(candidates)
    lines = {m: s.splitlines() for m, s in sources.items()}
    variants: dict[tuple, list[Candidate]] = defaultdict(list)
    for c in candidates:
        variants[(c.module, c.operator, c.start, c.end)].append(c)
    keys: dict[str, str] = {}
    for group in variants.values():
        for variant, c in enumerate(sorted(group, key=lambda c: c.occurrence)):
            text = lines[c.module][c.start[0] - 1]
            indent = len(text) - len(text.lstrip())
            span = c.end[1] - c.start[1] if c.start[0] == c.end[0] else -(c.end[0] - c.start[0])
            material = "\0".join([c.definition or "", text.strip(), str(c.start[1] - indent), str(span), str(variant)])
            digest = hashlib.sha1(material.encode("utf-8")).hexdigest()[:10]
            keys[c.job_id] = f"{c.module}:{c.operator.removeprefix('core/')}:{digest}"
    seen: Counter[str] = Counter()
    ids = {}
    for c in sorted(candidates, key=lambda c: (c.module, _order(c))):
        key = keys[c.job_id]
        seen[key] += 1
        ids[c.job_id] = key if seen[key] == 1 else f"{key}-{seen[key]}"
    return ids


# -- reasons -----------------------------------------------------------------------------------


class ExplainedKind(str, enum.Enum):
    #: No input can tell the mutant from the original.
    EQUIVALENT = "equivalent"
    #: It changes behaviour no conformance case can observe from outside the plugin (a message
    #: text, a process layout the suite cannot build, a resource bound).
    UNTESTABLE = "untestable"
    #: A real gap of the suite: recorded so the report can say what a case would have to do,
    #: but not an excuse: a run with a surviving gap fails.
    GAP = "gap"


@dataclass(frozen=True)
class Reason:
    id: str
    kind: ExplainedKind
    reason: str


def load_reasons(path: Path) -> dict[str, Reason]:
    """The survivors' reasons: ``[[survivor]]`` tables with ``id``, ``kind`` (equivalent,
    untestable or gap) and ``reason``; other keys (``line``, ``code``) are for the reader."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    reasons: dict[str, Reason] = {}
    for entry in data.get("survivor", []):
        try:
            reason = Reason(entry["id"], ExplainedKind(entry["kind"]), " ".join(entry["reason"].split()))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{path}: survivor entry {entry.get('id', '?')!r}: needs id, a kind "
                             f"({', '.join(k.value for k in ExplainedKind)}) and a reason") from exc
        if not reason.reason:
            raise ValueError(f"{path}: survivor {reason.id} has an empty reason")
        if reason.id in reasons:
            raise ValueError(f"{path}: survivor {reason.id} is listed twice")
        reasons[reason.id] = reason
    return reasons


# -- the report --------------------------------------------------------------------------------


class Outcome(str, enum.Enum):
    KILLED = "killed"
    #: Killed too: the suite did not finish within the time bound (a hang is a detected defect).
    TIMEOUT = "timeout"
    SURVIVED = "survived"
    #: No measurement: the worker failed, or cosmic-ray could not plant the mutant.
    ERROR = "error"


class MutantResult(BaseModel):
    id: str
    module: str
    operator: str
    occurrence: int
    line: int
    definition: str | None = None
    outcome: Outcome
    #: The cases that failed on it (empty for a crash of the whole run, or a timeout).
    failed_cases: list[str] = Field(default_factory=list)
    diff: str = ""
    explanation: ExplainedKind | None = None
    reason: str | None = None
    #: A worker's error output, for an ERROR.
    error: str | None = None


class ModuleScore(BaseModel):
    module: str
    population: int
    sampled: int
    killed: int = 0
    timeouts: int = 0
    survived: int = 0
    errors: int = 0

    @property
    def kill_rate(self) -> float | None:
        tested = self.killed + self.timeouts + self.survived + self.errors
        return (self.killed + self.timeouts) / tested if tested else None


class MutationRunReport(BaseModel):
    tool: str
    tool_version: str
    seed: int
    sample_size: int
    min_per_module: int
    #: Every mutant cosmic-ray made of the targets, and how many of them were left out before
    #: sampling because they sit in annotations that are never evaluated.
    population: int
    filtered_annotations: int
    targets: list[str]
    test_command: str
    timeout_s: float
    baseline_s: float
    workers: int
    source: str
    source_commit: str | None = None
    #: Files of the copied folders that differ from the commit (the run measured them as they were).
    source_changes: list[str] = Field(default_factory=list)
    threshold: float = THRESHOLD
    modules: list[ModuleScore]
    mutants: list[MutantResult]
    #: Reasons in survivors.toml for mutants of this sample that did not survive: out of date.
    stale_reasons: list[str] = Field(default_factory=list)

    def count(self, *outcomes: Outcome) -> int:
        return sum(m.outcome in outcomes for m in self.mutants)

    @property
    def tested(self) -> int:
        return len(self.mutants)

    @property
    def killed(self) -> int:
        return self.count(Outcome.KILLED, Outcome.TIMEOUT)

    @property
    def kill_rate(self) -> float:
        """Killed (timeouts included) over every mutant of the sample, errors counting as not killed."""
        return self.killed / self.tested if self.tested else 0.0

    @property
    def equivalent(self) -> int:
        return sum(m.outcome is Outcome.SURVIVED and m.explanation is ExplainedKind.EQUIVALENT for m in self.mutants)

    @property
    def score_without_equivalents(self) -> float:
        """The textbook mutation score: killed over the mutants that are not equivalent."""
        rest = self.tested - self.equivalent
        return self.killed / rest if rest else 0.0

    @property
    def unexplained(self) -> list[MutantResult]:
        """Survivors without an accepted reason (none at all, or a recorded gap)."""
        return [m for m in self.mutants if m.outcome is Outcome.SURVIVED
                and m.explanation not in (ExplainedKind.EQUIVALENT, ExplainedKind.UNTESTABLE)]

    @property
    def problems(self) -> list[str]:
        problems = []
        if self.tested == 0:
            problems.append("no mutant was tested")
        elif self.kill_rate < self.threshold:
            problems.append(f"kill rate {self.kill_rate:.1%} is under {self.threshold:.0%}")
        gaps = [m for m in self.unexplained if m.explanation is ExplainedKind.GAP]
        if gaps:
            problems.append(f"{len(gaps)} survivors are recorded gaps of the suite")
        if len(self.unexplained) > len(gaps):
            problems.append(f"{len(self.unexplained) - len(gaps)} survivors have no reason in survivors.toml")
        errors = self.count(Outcome.ERROR)
        if errors:
            problems.append(f"{errors} mutants could not be tested")
        return problems

    @property
    def ok(self) -> bool:
        return not self.problems


def build_report(*, results: Sequence[MutantResult], per_module: Mapping[str, tuple[int, int]],
                 reasons: Mapping[str, Reason], **fields: object) -> MutationRunReport:
    """The report of a run: ``results`` (one per mutant of the sample) explained from
    ``reasons``, scored per module (``per_module``: module -> mutants after filtering, mutants
    sampled); ``fields`` are the run's settings (see :class:`MutationRunReport`)."""
    explained = []
    stale = []
    for r in results:
        reason = reasons.get(r.id)
        if r.outcome is Outcome.SURVIVED and reason is not None:
            r = r.model_copy(update={"explanation": reason.kind, "reason": reason.reason})
        elif r.outcome is not Outcome.SURVIVED and reason is not None:
            stale.append(r.id)
        explained.append(r)
    scores = {m: ModuleScore(module=m, population=n, sampled=k) for m, (n, k) in sorted(per_module.items())}
    for r in explained:
        score = scores[r.module]
        attr = {Outcome.KILLED: "killed", Outcome.TIMEOUT: "timeouts", Outcome.SURVIVED: "survived",
                Outcome.ERROR: "errors"}[r.outcome]
        setattr(score, attr, getattr(score, attr) + 1)
    return MutationRunReport(modules=list(scores.values()), mutants=explained, stale_reasons=sorted(stale),
                             **fields)


def unified_diff(original: str, mutated: str, module: str) -> str:
    return "\n".join(difflib.unified_diff(original.split("\n"), mutated.split("\n"), f"a/{module}", f"b/{module}",
                                          lineterm="", n=1))


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def render_markdown(report: MutationRunReport) -> str:
    r = report
    lines = [
        "# Mutation testing of the conformance suite",
        "",
        f"{r.tool} {r.tool_version} planted {r.tested} mutants, a sample (seed {r.seed}, stratified by module, at "
        f"least {r.min_per_module} each) of {r.population - r.filtered_annotations} "
        f"({r.population} made, {r.filtered_annotations} left out as they sit in annotations Python never "
        f"evaluates), in {', '.join(r.targets)}; each was run against `{r.test_command}` "
        f"(baseline {r.baseline_s:.1f} s, time bound {r.timeout_s:.0f} s, {r.workers} workers).",
        "",
        f"Source: {r.source}" + (f" at {r.source_commit[:12]}" if r.source_commit else "")
        + (f", with {len(r.source_changes)} changed files" if r.source_changes else ""),
        "",
        f"**Kill rate: {r.killed}/{r.tested} = {r.kill_rate:.1%}** (threshold {r.threshold:.0%}; timeouts "
        f"count as killed). Without the {r.equivalent} equivalent mutants: {r.score_without_equivalents:.1%}.",
        "",
        f"Killed {r.count(Outcome.KILLED)}, timed out {r.count(Outcome.TIMEOUT)}, survived "
        f"{r.count(Outcome.SURVIVED)} ({r.equivalent} equivalent, "
        f"{sum(m.explanation is ExplainedKind.UNTESTABLE for m in r.mutants if m.outcome is Outcome.SURVIVED)} "
        f"untestable, {sum(m.explanation is ExplainedKind.GAP for m in r.unexplained)} known gaps, "
        f"{sum(m.explanation is None for m in r.unexplained)} unexplained), errors {r.count(Outcome.ERROR)}.",
        "",
        ("**OK**" if r.ok else "**NOT OK**: " + "; ".join(r.problems) + "."),
        "",
        "| module | mutants | sampled | killed | timeouts | survived | errors | kill rate |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for score in r.modules:
        lines.append(f"| {score.module} | {score.population} | {score.sampled} | {score.killed} | {score.timeouts} | "
                     f"{score.survived} | {score.errors} | {_percent(score.kill_rate)} |")
    survivors = [m for m in r.mutants if m.outcome is Outcome.SURVIVED]
    errors = [m for m in r.mutants if m.outcome is Outcome.ERROR]
    if survivors:
        lines += ["", "## Survivors", ""]
        order = {None: 0, ExplainedKind.GAP: 1, ExplainedKind.UNTESTABLE: 2, ExplainedKind.EQUIVALENT: 3}
        for m in sorted(survivors, key=lambda m: (order[m.explanation], m.module, m.line)):
            label = "UNEXPLAINED" if m.explanation is None else m.explanation.value
            lines += [f"### {label}: `{m.id}`", "",
                      f"{m.module} line {m.line}" + (f", in `{m.definition}`" if m.definition else "")
                      + f", {m.operator}", ""]
            if m.reason:
                lines += [m.reason, ""]
            lines += ["```diff", m.diff.strip(), "```", ""]
    if errors:
        lines += ["", "## Not tested", ""]
        for m in errors:
            lines += [f"- `{m.id}`: {' '.join((m.error or '').split())[:300]}"]
    if r.stale_reasons:
        lines += ["", "## Reasons for mutants that no longer survive", ""]
        lines += [f"- `{i}`" for i in r.stale_reasons]
    return "\n".join(lines).rstrip() + "\n"
