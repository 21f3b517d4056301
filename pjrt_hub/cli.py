"""``pjrt-hub``: the command line, for people and for release CI.

Every command prints a readable report, or with ``--json`` the same report as JSON from the
pydantic models in :mod:`pjrt_hub._reports` (``--schema`` prints their JSON schema). The exit
status means something:

====  =======================================================================================
0     everything asked for is fine
1     something asked for is not: a plugin refused or failed, a case failed
2     usage error (bad command line)
3     bad input: a malformed program, inputs of the wrong number, shape or dtype
4     a plugin failed while working (compile, execute, crash, time-out)
5     a plugin asked for by name does not exist (``--plugin``, or ``--only`` /
      ``PJRT_HUB_PLUGINS``, which name the plugins the user wants: a name there that matches
      nothing is a request that cannot be met, not a filter that happens to be empty)
====  =======================================================================================

A block-list entry (``--disable``, ``PJRT_HUB_DISABLE_PLUGINS``) that matches nothing is said on
stderr but keeps the exit status: blocking a plugin that is not installed leaves nothing to do.

With ``--json``, a command that fails before it has a report to print (a missing file, a bad
program, an unknown plugin, a usage error) prints ``{"command": ..., "exit_code": N, "error":
"..."}`` on stdout instead, the error being the line it also writes on stderr: CI reading stdout
always gets JSON.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import subprocess
import sys
import textwrap
import warnings
from typing import Any, Callable, Sequence, TextIO

from pydantic import BaseModel

from pjrt_hub._discovery import shown_path
from pjrt_hub._progress import Progress
from pjrt_hub.abi import ApiVersion, history

__all__ = ["ExitCode", "main"]


class ExitCode(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    BAD_INPUT = 3
    PLUGIN_ERROR = 4
    NOT_FOUND = 5


class _Usage(Exception):
    """A command-line value that argparse cannot check by itself."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the usage text is one ``--help`` away)."""

    def error(self, message: str) -> Any:
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """Warnings as one readable line, without Python's source location and code line."""
    stream = file if file is not None else sys.stderr
    try:
        stream.write(f"pjrt-hub: warning: {_one_line(message)}\n")
    except (OSError, ValueError):
        pass  # a closed or broken stderr must not turn a warning into an error


#: Seconds a C library may take to be probed (``probe --timeout``; the registry's default).
_PROBE_TIMEOUT = 30.0


# -- shared options ----------------------------------------------------------------------------


def _api_version(text: str) -> ApiVersion:
    try:
        return ApiVersion.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _positive(text: str) -> float:
    """A time or a factor: a finite number above zero (a NaN or a negative time-out is a typo)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--schema", action="store_true", help="print the JSON schema of --json and exit")


def _add_registry(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("plugins and version policy")
    g.add_argument("--framework-version", type=_api_version, default=None, metavar="MAJOR.MINOR",
                   help=f"act as a framework at this PJRT API version (default: the newest in "
                        f"the history, {history.NEWEST_KNOWN})")
    g.add_argument("--window-weeks", type=_non_negative, default=6, metavar="N",
                   help="forward-compatibility window for older plugins, in weeks (default 6)")
    g.add_argument("--floor-minor", type=_non_negative, default=history.FLOOR_MINOR, metavar="MINOR",
                   help=f"oldest plugin minor accepted where the history has no dates "
                        f"(default {history.FLOOR_MINOR}, upstream's kMinPjRtMinor)")
    g.add_argument("--strict", action="store_true",
                   help="require the exact framework version (also PJRT_HUB_STRICT=1 or "
                        "ENABLE_PJRT_COMPATIBILITY=false)")
    g.add_argument("--disable", action="append", default=[], metavar="NAME[@DIST|@PATH]",
                   help="never load this plugin; NAME@DIST or NAME@PATH blocks only the one from that "
                        "distribution or library, when two share a name (repeatable; also "
                        "PJRT_HUB_DISABLE_PLUGINS=a,b)")
    g.add_argument("--only", action="append", default=[], metavar="NAME[@DIST|@PATH]",
                   help="load only these plugins; exit 5 if one is not found (repeatable; also "
                        "PJRT_HUB_PLUGINS=a,b)")
    g.add_argument("--no-autoload", action="store_true",
                   help="do not read entry points (also PJRT_HUB_PLUGIN_AUTOLOAD=0)")
    g.add_argument("--require-ext", action="append", default=[], metavar="NAME[>=V]",
                   help="refuse plugins without this extension (repeatable)")
    g.add_argument("--want-ext", action="append", default=[], metavar="NAME[>=V]",
                   help="warn about plugins without this extension (repeatable)")
    g.add_argument("--library", action="append", default=[], metavar="PATH",
                   help="also consider the PJRT C plugin at PATH (repeatable)")


def _registry(args: argparse.Namespace) -> Any:
    from pjrt_hub._policy import Policy
    from pjrt_hub._registry import PluginRegistry, selector
    from pjrt_hub.extensions import parse_request

    # PJRT_HUB_STRICT and the other variables are read by PluginRegistry.from_environment, as for
    # every other entry point; the options here only add to them.
    policy = Policy(framework=args.framework_version or history.NEWEST_KNOWN, window_weeks=args.window_weeks,
                    floor_minor=args.floor_minor, strict=args.strict)
    try:
        requests = tuple(parse_request(t, required=True) for t in args.require_ext)
        requests += tuple(parse_request(t, required=False) for t in args.want_ext)
    except ValueError as exc:
        raise _Usage(str(exc)) from None
    overrides: dict[str, Any] = {"disabled": frozenset(selector(n) for n in args.disable if n.strip())}
    if args.only:
        overrides["allowed"] = frozenset(selector(n) for n in args.only if n.strip())
    if args.no_autoload:
        overrides["autoload"] = False
    # isolate_python: a plugin whose import ends the process fails alone, not the command.
    registry = PluginRegistry.from_environment(
        policy=policy, extension_requests=requests, paths=tuple(args.library),
        probe_timeout=getattr(args, "probe_timeout", _PROBE_TIMEOUT), isolate_python=True, **overrides)
    args.built_registry = registry  # for _late_selection_notes
    return registry


def _late_selection_notes(args: argparse.Namespace) -> None:
    """After a command other than list and check: say what the selection options did when they
    matched nothing, if the command loaded its registry (a note never changes its exit status)."""
    registry = getattr(args, "built_registry", None)
    if registry is not None and registry.is_loaded and not getattr(args, "notes_said", False):
        _selection_notes(registry, args)


def _selection_notes(registry: Any, args: argparse.Namespace, *,
                     print_missing: bool = True) -> tuple[list[str], list[str]]:
    """What the allow-list and block-list did when an entry matched nothing, each said once on
    stderr: ``(notes, missing)``, ``missing`` the notes on allow-list entries, which name plugins
    the user asked for (exit 5; ``check`` lists them with its problems instead of on stderr)."""
    unmatched = registry.unmatched()
    args.notes_said = True
    for note in unmatched:
        if print_missing or note.setting != "allowed":
            print(f"pjrt-hub {args.command}: {note.message}", file=sys.stderr)
    return [n.message for n in unmatched], [n.message for n in unmatched if n.setting == "allowed"]


def _emit(args: argparse.Namespace, report: BaseModel, render: Callable[[Any], str]) -> None:
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(render(report))


def _hub_version() -> str:
    import pjrt_hub

    return pjrt_hub.__version__


# -- list / check ------------------------------------------------------------------------------


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _render_plugins(plugins: Sequence[Any], framework: str, autoload: bool = True) -> str:
    if not plugins and not autoload:
        return (f"No plugins found (framework PJRT API {framework}): autoload is off (--no-autoload or "
                "PJRT_HUB_PLUGIN_AUTOLOAD=0), so installed plugins, the built-in ones included, were not "
                "looked for; only PJRT_NAMES_AND_LIBRARY_PATHS and --library were read.")
    if not plugins:
        return (f"No plugins found (framework PJRT API {framework}). Install a package with a "
                "'pjrt_hub.plugins' entry point, or set PJRT_NAMES_AND_LIBRARY_PATHS=name:path.")
    rows = [["NAME", "KIND", "DISTRIBUTION", "API", "OUTCOME", "EXTENSIONS"]]
    for p in plugins:
        dist = f"{p.distribution} {p.distribution_version}" if p.distribution else "-"
        exts = ", ".join(f"{k} {v}" for k, v in sorted(p.extensions.items())) or "-"
        rows.append([p.name, p.kind, dist, p.api_version or "?", p.outcome.value, exts])
    lines = [f"Framework PJRT API {framework}", _table(rows), ""]
    for p in plugins:
        if p.reason:
            lines.append(f"{p.name}: {p.outcome.value}: {p.reason}")
        if p.library_path:
            lines.append(f"{p.name}: library {shown_path(p.library_path)}")
        if p.error and p.error not in (p.reason or ""):
            lines.append(f"{p.name}: error: {p.error}")
        for w in p.warnings:
            lines.append(f"{p.name}: warning: {w}")
        if p.verdict and p.verdict.gated_calls and p.verdict.accepted:
            lines.append(f"{p.name}: {len(p.verdict.gated_calls)} calls unavailable at "
                         f"{p.api_version}: " + ", ".join(c.split(" ")[0] for c in p.verdict.gated_calls))
    return "\n".join(lines).rstrip()


def cmd_list(args: argparse.Namespace) -> int:
    from pjrt_hub._reports import ListReport

    if args.schema:
        print(json.dumps(ListReport.model_json_schema(), indent=2))
        return ExitCode.OK
    registry = _registry(args)
    records = registry.load()
    notes, missing = _selection_notes(registry, args)
    report = ListReport(framework_version=str(registry.policy.framework),
                        pjrt_hub_version=_hub_version(), plugins=records,
                        autoload=registry.settings.autoload, notes=notes)
    _emit(args, report, lambda r: _render_plugins(r.plugins, r.framework_version, r.autoload))
    return ExitCode.NOT_FOUND if missing else ExitCode.OK


def cmd_check(args: argparse.Namespace) -> int:
    from pjrt_hub._reports import CheckReport, Outcome

    if args.schema:
        print(json.dumps(CheckReport.model_json_schema(), indent=2))
        return ExitCode.OK
    registry = _registry(args)
    records = registry.load()
    notes, missing = _selection_notes(registry, args, print_missing=False)
    by_name = {r.name.lower(): r for r in records}
    problems = list(missing)
    for name in args.plugin:
        if name.lower() not in by_name:
            missing.append(name)
            problems.append(f"{name}: no such plugin (found: "
                            f"{', '.join(sorted(r.name for r in records)) or 'none'})")
    asked = [by_name[n.lower()] for n in args.plugin if n.lower() in by_name] if args.plugin else records
    for r in asked:
        if r.outcome in (Outcome.INCOMPATIBLE, Outcome.FAILED):
            problems.append(f"{r.name}: {r.outcome.value}: {r.reason}")
        elif args.plugin and r.outcome is not Outcome.LOADED:
            problems.append(f"{r.name}: {r.outcome.value}: {r.reason}")
    policy = registry.policy
    report = CheckReport(
        framework_version=str(policy.framework), pjrt_hub_version=_hub_version(), plugins=records,
        window_weeks=policy.window_weeks, floor_minor=f"{policy.framework.major}.{policy.floor_minor}",
        strict=policy.strict, requested=list(args.plugin),
        required_extensions=[str(r) for r in registry.settings.extension_requests if r.required],
        optional_extensions=[str(r) for r in registry.settings.extension_requests if not r.required],
        ok=not problems, problems=problems, autoload=registry.settings.autoload, notes=notes,
    )

    def render(r: CheckReport) -> str:
        head = (f"Policy: framework {r.framework_version}, window {r.window_weeks} weeks, floor "
                f"{r.floor_minor}, strict {'on' if r.strict else 'off'}")
        verdict = "OK: every plugin asked for is loaded." if r.ok else \
            "NOT OK:\n" + "\n".join(f"  - {p}" for p in r.problems)
        return "\n".join([head, _render_plugins(r.plugins, r.framework_version, r.autoload), "", verdict])

    _emit(args, report, render)
    if missing:
        return ExitCode.NOT_FOUND
    return ExitCode.OK if report.ok else ExitCode.FAILURE


# -- conformance -------------------------------------------------------------------------------


#: Skipped cases sharing a reason are listed under it once when there are at least this many.
_GROUP_SKIPS = 3


def _render_conformance(report: Any, verbose: bool = False) -> str:
    """The report for a person: per plugin its counts, the failures (with the behaviours they
    break) and the expected failures, the skips grouped by reason; ``verbose`` adds every passed
    case and the ids of grouped skips."""
    marks = {"passed": "passed ", "failed": "FAILED ", "xfailed": "xfailed", "skipped": "skipped"}
    lines = [f"PJRT conformance suite {report.suite_version}, framework PJRT API {report.framework_version}"]
    for p in report.plugins:
        dist = f", {p.distribution} {p.distribution_version}" if p.distribution else ""
        lines += ["", f"{p.plugin} ({p.kind}{dist}, PJRT API {p.api_version or '?'}): {p.counts}"]
        # A reason many cases were skipped for (a plugin that cannot be used, a C-only check)
        # is printed once, with their ids, where the first of them would be.
        skips: dict[str, list[str]] = {}
        for c in p.cases:
            if c.outcome.value == "skipped":
                skips.setdefault(" ".join((c.message or "").split()), []).append(c.id)
        for c in p.cases:
            detail = c.message or ""
            if c.outcome.value == "xfailed":
                detail = f"limitation: {c.limitation}" + (f" ({c.message})" if c.message else "")
            text = " ".join(detail.split())
            same = skips.get(text, []) if c.outcome.value == "skipped" else []
            if len(same) >= _GROUP_SKIPS:
                if c.id == same[0]:
                    lines.append(f"  {marks['skipped']}  {len(same)} cases" + (f": {text}" if text else ""))
                    if verbose:
                        lines += textwrap.wrap(", ".join(same), 100, initial_indent=" " * 11,
                                               subsequent_indent=" " * 11, break_on_hyphens=False)
                continue
            if c.outcome.value == "passed" and not verbose:
                continue
            lines.append(f"  {marks[c.outcome.value]}  {c.id}" + (f": {text}" if text else ""))
            for broken in c.contract:
                lines += textwrap.wrap(f"breaks {broken}", 100, initial_indent=" " * 11, subsequent_indent=" " * 13)
        if not p.tested:
            lines.append("  nothing was tested: every selected case was skipped")
        elif p.counts.passed and not verbose:
            lines.append(f"  passed   {p.counts.passed} cases (-v lists them)")
    failed = sum(p.counts.failed for p in report.plugins)
    untested = [p.plugin for p in report.plugins if not p.tested]
    if report.ok:
        verdict = "OK: no case failed."
    else:
        why = [f"{failed} cases failed"] if failed else []
        why += [f"nothing was tested on {', '.join(untested)} (every selected case was skipped)"] if untested else []
        verdict = "NOT OK: " + ("; ".join(why) or "no plugin was tested") + "."
    lines += ["", verdict]
    return "\n".join(lines)


def cmd_mutation_report(args: argparse.Namespace) -> int:
    """``conformance --mutation-report``: the suite run on a catalogue of mutant plugins."""
    from pjrt_hub.testing._mutation import load_catalogue, render_mutation_report, run_mutation

    try:
        catalogue = load_catalogue(args.mutation_report)
        report = run_mutation(catalogue.mutants, catalogue.bases, catalogue=args.mutation_report, only=args.mutant)
    except ValueError as exc:
        print(f"--mutation-report: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    _emit(args, report, render_mutation_report)
    return ExitCode.OK if report.ok else ExitCode.FAILURE


def cmd_conformance(args: argparse.Namespace) -> int:
    from pjrt_hub.testing._report import ConformanceReport

    if args.mutation_report is not None:
        return cmd_mutation_report(args)
    if args.coverage:
        from pjrt_hub.testing import CASES
        from pjrt_hub.testing.contract import coverage, render_coverage

        _emit(args, coverage(list(CASES)), render_coverage)
        return ExitCode.OK
    if args.schema:
        print(json.dumps(ConformanceReport.model_json_schema(), indent=2))
        return ExitCode.OK
    from pathlib import Path

    from pjrt_hub._registry import default_plugin_name
    from pjrt_hub.testing._case import CASES, GROUPS, matching
    from pjrt_hub.testing._run import ConformanceRunError, run_conformance
    from pjrt_hub.testing._session import make_registry

    # A pattern that selects nothing is a typo, not a pass: refuse it before anything runs.
    unmatched = [p for p in args.case if not any(matching(c, [p]) for c in CASES)]
    if unmatched:
        raise _Usage(f"--case {', '.join(map(repr, unmatched))} matches no case (case ids are "
                     f"group/name, e.g. 'execute/*'; groups: {', '.join(GROUPS)})")
    if args.junit:
        junit = Path(args.junit)
        if junit.is_dir():
            raise _Usage(f"--junit {junit} is a directory; name the XML file to write")
        try:
            junit.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _Usage(f"--junit {junit}: cannot create directory {junit.parent}: {exc.strerror or exc}") from None
    plugins = args.plugin or [default_plugin_name()]
    framework = str(args.framework_version) if args.framework_version else None
    if args.via == "jax":
        try:
            import jax  # noqa: F401
        except ImportError:
            print("pjrt-hub conformance --via jax needs JAX: pip install 'pjrt-hub[jax]'", file=sys.stderr)
            return ExitCode.USAGE
    policy = {"framework": framework, "strict": args.strict, "window_weeks": args.window_weeks,
              "floor_minor": args.floor_minor}
    registry, names = make_registry(plugins, **policy)
    known = {r.name.lower() for r in registry.records}
    missing = [p for p, n in zip(plugins, names) if n.lower() not in known]
    if missing:
        found = ", ".join(sorted(r.name for r in registry.records)) or "none"
        print(f"pjrt-hub conformance: no plugin named {', '.join(missing)} (found: {found})", file=sys.stderr)
        return ExitCode.NOT_FOUND
    progress = Progress.for_command("", json_output=args.json or args.pytest_output)
    try:
        report = run_conformance(plugins, **policy, cases=args.case,
                                 timeout_scale=args.timeout_scale, junit=args.junit,
                                 show_output=args.pytest_output and not args.json,
                                 progress=progress.update if progress.enabled else None, via=args.via)
    except ConformanceRunError as exc:
        print(f"pjrt-hub conformance: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    finally:
        progress.clear()
    _emit(args, report, lambda r: _render_conformance(r, verbose=args.verbose))
    return ExitCode.OK if report.ok else ExitCode.FAILURE


# -- matrix ------------------------------------------------------------------------------------


def _render_matrix_summary(report: Any, paths: dict[str, str] | None = None) -> str:
    from collections import Counter

    tally = Counter(c.status.value for c in report.cells)
    lines = [f"PJRT compatibility matrix: {len(report.plugins)} plugins x {len(report.framework_versions)} "
             f"framework versions ({', '.join(report.framework_versions)}) in {len(report.environments)} environments",
             "cells: " + ", ".join(f"{tally.get(k, 0)} {k}" for k in ("passed", "failed", "refused", "error"))
             + (f", {tally['missing']} missing" if tally.get("missing") else "")]
    for e in report.environments:
        lines.append(f"environment {e.name}: {e.status}" + (f" ({e.note})" if e.note else ""))
    for c in report.cells:
        if c.status.value in ("failed", "error", "missing"):
            why = c.error or "; ".join(f.id for f in c.failures)
            lines.append(f"RED {c.plugin} at {c.framework_version} ({c.environment}): {c.status.value}: "
                         f"{' '.join(why.split())[:300]}")
    for path in (paths or {}).values():
        lines.append(f"wrote {path}")
    return "\n".join(lines)


def _matrix_exit(report: Any) -> int:
    """0 only for a matrix that ran something and has no red cell."""
    return ExitCode.FAILURE if (report.red or not report.cells) else ExitCode.OK


def _matrix_progress(args: argparse.Namespace, what: str) -> Any:
    from pjrt_hub._progress import Progress

    return Progress.for_command(what, json_output=args.json)


def _plan_from_args(args: argparse.Namespace, *, here: str | None, split: str, available_only: bool) -> Any:
    from pjrt_hub.compat_matrix import make_plan

    return make_plan(frameworks=args.framework_version, plugins=args.plugin, libraries=args.library,
                     fixtures=not args.no_fixtures, c_plugins=args.c_plugins, cases=args.case,
                     environments=args.env, here=here, split=split, cell_timeout=args.cell_timeout,
                     available_only=available_only)


def _write_text(path: Any, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _matrix_errors(run: Callable[[], int]) -> int:
    """The matrix's bad input as one line and its exit code: an unknown plugin 5, an unusable
    plan or result 3, a selection that cannot be planned 2."""
    from pjrt_hub.compat_matrix import MergeError, PlanError, PluginNotFound

    try:
        return run()
    except PluginNotFound as exc:
        print(f"pjrt-hub matrix: {exc}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    except MergeError as exc:
        print(f"pjrt-hub matrix: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except PlanError as exc:
        print(f"pjrt-hub matrix: {exc}", file=sys.stderr)
        return ExitCode.USAGE


def cmd_matrix(args: argparse.Namespace) -> int:
    from pjrt_hub.compat_matrix import MatrixReport

    if getattr(args, "schema", False):
        print(json.dumps(MatrixReport.model_json_schema(), indent=2))
        return ExitCode.OK
    return _matrix_errors(lambda: _matrix_local(args))


def _matrix_local(args: argparse.Namespace) -> int:
    """``pjrt-hub matrix``: plan, every job here (tox environments in parallel), merge."""
    from pathlib import Path

    from pjrt_hub.compat_matrix import (default_cache_dir, matrix_project, merge_results, no_checkout, run_plan,
                                        tox_command, write_outputs)

    if not args.no_tox and tox_command() is None:
        print("pjrt-hub matrix: tox is not installed: pip install 'pjrt-hub[test]' (or -e '.[test]' in a "
              "clone), or run this environment only with --no-tox", file=sys.stderr)
        return ExitCode.FAILURE
    output = Path(args.output).resolve()
    plan = _plan_from_args(args, here=args.env_name if args.no_tox else None, split="environment",
                           available_only=True)
    project = None
    if any(cell.tox_env is not None for cell in plan.cells):
        project = matrix_project()
        if project is None:  # before anything is written or run
            print(f"pjrt-hub matrix: {no_checkout(Path.cwd())}", file=sys.stderr)
            return ExitCode.FAILURE
    plan_path = output / "plan.json"
    _write_text(plan_path, plan.model_dump_json(indent=2))
    cache_dir = Path(args.cache).resolve() if args.cache else default_cache_dir(output)
    with _matrix_progress(args, "cells") as progress:
        results = run_plan(plan, plan_path, output / "cells", cache_dir=cache_dir, jobs=args.jobs,
                           refresh=args.refresh, project=project, progress=progress.update)
    report = merge_results(plan, [(output / "cells" / f"{r.cell_id}.json", r) for r in results])
    paths = write_outputs(report, output)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(_render_matrix_summary(report, paths))
        ran = sum(1 for c in report.cells if not c.cached and c.status.value != "missing")
        jobs = len(plan.cells)
        cached = sum(c.cached for c in report.cells)
        print(f"{jobs} job{'s' if jobs != 1 else ''}, {ran} cells run, {cached} from the cache, "
              f"in {sum(j.duration_s or 0 for j in report.jobs):.0f} s of job time")
    return _matrix_exit(report)


def cmd_matrix_plan(args: argparse.Namespace) -> int:
    def run() -> int:
        from pathlib import Path

        from pjrt_hub.compat_matrix import render_plan

        plan = _plan_from_args(args, here=args.env_name if args.no_tox else None, split=args.split,
                               available_only=False)
        if args.output:
            _write_text(Path(args.output), plan.model_dump_json(indent=2))
        print(render_plan(plan, args.format))
        return ExitCode.OK

    return _matrix_errors(run)


def cmd_matrix_cell(args: argparse.Namespace) -> int:
    def run() -> int:
        from pathlib import Path

        from pjrt_hub.compat_matrix import (CellCache, default_cache_dir, job_is_red, load_plan, run_job_here,
                                            run_job_tox, write_result)

        plan = load_plan(args.plan)
        known = {c.id: c for c in plan.cells}
        ids = list(args.id)
        if not ids:
            if not args.tox_env:
                raise _Usage("name a job of the plan (its ids: " + ", ".join(known) + ")")
            ids = [c.id for c in plan.cells if c.tox_env == args.tox_env]
        for cell_id in ids:
            if cell_id not in known:
                print(f"pjrt-hub matrix cell: the plan {args.plan} has no job {cell_id!r} (its jobs: "
                      f"{', '.join(known)})", file=sys.stderr)
                return ExitCode.USAGE
            if args.tox_env and known[cell_id].tox_env != args.tox_env:
                print(f"pjrt-hub matrix cell: job {cell_id!r} is planned for {known[cell_id].tox_env or 'no tox'} "
                      f"environment, not {args.tox_env}", file=sys.stderr)
                return ExitCode.USAGE
        output = Path(args.output)
        cache = CellCache(Path(args.cache) if args.cache else default_cache_dir(output))
        reports = []
        for cell_id in ids:
            cell = known[cell_id]
            if cell.tox_env is None or args.no_tox:
                with _matrix_progress(args, cell_id) as progress:
                    report = run_job_here(plan, cell, cache=cache, jobs=args.jobs, refresh=args.refresh,
                                          progress=progress.update)
                write_result(report, output)
            else:
                extra = (["--cache", str(Path(args.cache).resolve())] if args.cache else []) + \
                    (["--refresh"] if args.refresh else [])
                report = run_job_tox(plan, Path(args.plan), cell, output, extra=extra)
                if not (output / f"{cell_id}.json").exists() or report.error:
                    write_result(report, output)
            reports.append(report)
            if args.json:
                print(report.model_dump_json(indent=2))
            else:
                from collections import Counter

                tally = Counter(c.status.value for c in report.cells)
                print(f"job {cell_id} ({cell.environment}): "
                      + (f"error: {report.error}" if report.error else
                         ", ".join(f"{n} {k}" for k, n in tally.items()) or "no cells")
                      + f" in {report.duration_s:.1f} s; wrote {output / (cell_id + '.json')}")
        return ExitCode.FAILURE if any(job_is_red(r) for r in reports) else ExitCode.OK

    return _matrix_errors(run)


def cmd_matrix_merge(args: argparse.Namespace) -> int:
    def run() -> int:
        from pathlib import Path

        from pjrt_hub.compat_matrix import load_plan, load_results, merge_results, write_outputs

        plan = load_plan(args.plan)
        report = merge_results(plan, load_results(args.results))
        paths = write_outputs(report, Path(args.output))
        if args.json:
            print(report.model_dump_json(indent=2))
        else:
            print(_render_matrix_summary(report, paths))
            for job in report.jobs:
                took = f"{job.duration_s:.1f} s" if job.duration_s is not None else "-"
                print(f"job {job.id}: {job.status}, {took}" + (f" ({job.error})" if job.error else ""))
        return _matrix_exit(report)

    return _matrix_errors(run)


# -- run ---------------------------------------------------------------------------------------


def _plugin_target(args: argparse.Namespace, value: str | None) -> str | None:
    """A plugin given by path becomes an explicit library candidate; return its name."""
    from pjrt_hub._discovery import candidate_for_path, is_library_path

    if value and is_library_path(value):

        args.library = [*args.library, value]
        return candidate_for_path(value).name
    return value


def _time_limit_passed(program: str, plugin: str, clock: Any, exc: Exception) -> str:
    """The one line of ``run --timeout``; when the plugin's work goes on, the process ends at exit."""
    from pjrt_hub._run import LeftRunning, exit_when_done

    if isinstance(exc, LeftRunning):
        exit_when_done(ExitCode.PLUGIN_ERROR)
        outcome = "the plugin cannot stop it, so it is left running and the process ends now"
    else:
        outcome = "the plugin stopped it"
    return (f"pjrt-hub run: {program} on {plugin}: DEADLINE_EXCEEDED: not finished within the "
            f"{clock.limit:g} s limit (--timeout) while {clock.stage}; {outcome}")


def _limit_seconds(text: str) -> float:
    """``--timeout``: seconds > 0 (``inf`` for no limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 (inf for no limit), got {text!r}")
    return value


def _run_many(args: argparse.Namespace, registry: Any, name: str, text: str) -> int:
    """``run`` for programs over several devices: replicas (``r{R}_in{I}``), partitions, and
    shard_map's SPMD programs (global ``in{I}``/``out{J}``); see :mod:`pjrt_hub._multi`."""

    from pjrt_hub._multi import run_many
    from pjrt_hub._reports import ArrayInfo, RunReport
    from pjrt_hub._run import BadInput, read_npz, write_npz_atomically
    from pjrt_hub.abi import CompileError, PjrtError, Unimplemented

    def client_for(count: int) -> Any:
        client = registry.create_client(name, allow_hardware=args.allow_hardware)
        if len(client.addressable_devices()) < count:
            client = registry.create_client(name, {"cpu_device_count": count}, allow_hardware=args.allow_hardware)
        return client

    timeout = None if args.timeout == float("inf") else args.timeout
    try:
        arrays = read_npz(args.inputs)
        done = run_many(client_for, text, arrays, timeout=timeout, error=BadInput)
    except Unimplemented as exc:
        print(f"pjrt-hub run: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.FAILURE
    except (BadInput, CompileError) as exc:
        print(f"pjrt-hub run: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except PjrtError as exc:
        print(f"pjrt-hub run: plugin {name} failed: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.PLUGIN_ERROR
    written = None
    if args.out:
        try:
            written = str(write_npz_atomically(args.out, done.outputs))
        except OSError as exc:
            print(f"pjrt-hub run: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return ExitCode.FAILURE

    def info(items: dict) -> list[ArrayInfo]:
        return [ArrayInfo(name=k, shape=list(a.shape), dtype=str(a.dtype)) for k, a in items.items()]

    report = RunReport(plugin=name, program=args.program, out=written, inputs=info(done.inputs),
                       outputs=info(done.outputs), compile_ms=done.compile_seconds * 1e3,
                       execute_ms=done.execute_seconds * 1e3)

    def render(r: RunReport) -> str:
        lines = [f"{r.program} on {r.plugin}: compiled in {r.compile_ms:.1f} ms, ran in {r.execute_ms:.2f} ms"]
        lines += _output_lines(r.outputs, done.outputs.values())
        if r.out:
            lines.append(f"wrote {r.out}")
        return "\n".join(lines)

    _emit(args, report, render)
    return ExitCode.OK


def _output_lines(outputs: Any, arrays: Any) -> list[str]:
    """``pjrt-hub run``'s lines for its results: each one's type, then its values as numpy
    prints them, large arrays cut to their corners."""
    import numpy as np

    lines = []
    for o, array in zip(outputs, arrays):
        lines.append(f"  {o.name}: {o.dtype}[{','.join(map(str, o.shape))}]")
        try:
            text = np.array2string(np.asarray(array), threshold=64, edgeitems=3, max_line_width=96)
        except (TypeError, ValueError):  # a type numpy cannot print
            continue
        lines += [f"    {line}" for line in text.splitlines()]
    return lines


def cmd_run(args: argparse.Namespace) -> int:
    from pjrt_hub._registry import default_plugin_name
    from pjrt_hub._reports import ArrayInfo, RunReport
    from pjrt_hub._run import (BadInput, OutputRefused, RunClock, check_inputs, check_output_path, load_inputs,
                               main_signature, npz_array, read_program, run_program, within, write_npz_atomically)
    from pjrt_hub.abi import CompileError, DeadlineExceeded, NotFound, PjrtError, PluginLoadError

    if args.schema:
        print(json.dumps(RunReport.model_json_schema(), indent=2))
        return ExitCode.OK
    if not args.program or not args.inputs:
        raise _Usage("run needs PROGRAM and --inputs")
    name = _plugin_target(args, args.plugin)
    if args.out:
        # Before any work: a run of minutes must not end in "cannot write", nor in an input lost.
        try:
            check_output_path(args.out, protected=[args.program, args.inputs, *args.library])
        except OutputRefused as exc:
            raise _Usage(str(exc)) from None
    registry = _registry(args)
    name = name or default_plugin_name()
    clock = RunClock(None if args.timeout == float("inf") else args.timeout)
    try:
        text = read_program(args.program)
        from pjrt_hub._multi import runs_on_many_devices

        if runs_on_many_devices(text):
            return _run_many(args, registry, name, text)
        arrays = load_inputs(args.inputs)
        signature = main_signature(text)
        if signature is not None:
            arrays = check_inputs(signature, arrays)

        def work() -> Any:
            client = registry.create_client(name, allow_hardware=args.allow_hardware)
            return run_program(client, text, arrays, clock=clock)

        # On a helper thread, so that the command returns on time even if a plugin call never
        # does (see pjrt_hub._run on time limits).
        result = within(clock, work)
    except (BadInput, CompileError) as exc:
        print(f"pjrt-hub run: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except DeadlineExceeded as exc:
        if not clock.passed():  # the plugin's own deadline (a collective's peer...), not ours
            print(f"pjrt-hub run: plugin {name} failed: {exc}", file=sys.stderr)
            return ExitCode.PLUGIN_ERROR
        print(_time_limit_passed(args.program, name, clock, exc), file=sys.stderr)
        return ExitCode.PLUGIN_ERROR
    except NotFound as exc:
        print(f"pjrt-hub run: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    except PluginLoadError as exc:
        print(f"pjrt-hub run: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.FAILURE
    except PjrtError as exc:
        print(f"pjrt-hub run: plugin {name} failed: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.PLUGIN_ERROR
    except Exception as exc:  # noqa: BLE001 - a Python plugin's bug is the plugin failing, not us
        print(f"pjrt-hub run: plugin {name} failed: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.PLUGIN_ERROR

    written = None
    if args.out:
        try:
            written = str(write_npz_atomically(args.out, {f"out{i}": npz_array(a) for i, a in enumerate(result.outputs)}))
        except OSError as exc:
            print(f"pjrt-hub run: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return ExitCode.FAILURE
    report = RunReport(
        plugin=name, program=args.program, out=written,
        inputs=[ArrayInfo(name=f"in{i}", shape=list(a.shape), dtype=str(a.dtype)) for i, a in enumerate(arrays)],
        outputs=[ArrayInfo(name=f"out{i}", shape=list(a.shape), dtype=str(a.dtype))
                 for i, a in enumerate(result.outputs)],
        compile_ms=result.compile_seconds * 1e3, execute_ms=result.execute_seconds * 1e3,
    )

    def render(r: RunReport) -> str:
        lines = [f"{r.program} on {r.plugin}: compiled in {r.compile_ms:.1f} ms, ran in {r.execute_ms:.2f} ms"]
        lines += _output_lines(r.outputs, result.outputs)
        if r.out:
            as_bits = [f"{o.name} as uint{a.dtype.itemsize * 8}" for o, a in zip(r.outputs, result.outputs)
                       if npz_array(a).dtype != a.dtype]
            lines.append(f"wrote {r.out}" + (f" ({', '.join(as_bits)} bits)" if as_bits else ""))
        return "\n".join(lines)

    _emit(args, report, render)
    return ExitCode.OK


# -- probe -------------------------------------------------------------------------------------


def _render_probe(r: Any, p: Any) -> str:
    """``probe``'s text: the command's report ``r`` and the loader's ProbeReport ``p``."""
    lines = [f"{r.name}: {shown_path(p.path or r.path)}"]
    if p.outcome != "ok":
        lines.append(f"  outcome: {p.outcome} (stage {p.stage}): {p.reason or ''}")
        if p.stderr_tail:
            lines.append("  stderr: " + p.stderr_tail.strip().replace("\n", "\n          "))
        return "\n".join(lines)
    lines.append(f"  loads: yes ({p.machine or '?'}), GetPjrtApi exported")
    if p.probe_cache == "hit":
        lines.append("  (from the probe cache: the library is unchanged since it was probed)")
    lines.append(f"  PJRT API {p.api_version}; PJRT_Api struct_size {p.api_struct_size}, "
                 f"{p.num_slots} slots (history expects {p.expected_slots})")
    lines.append(f"  functions: {len(p.functions)} present, {len(p.null_functions)} null" +
                 (": " + ", ".join(p.null_functions) if p.null_functions else ""))
    lines.append(f"  extensions ({p.extension_layout}): " +
                 (", ".join(f"{e.name} (type {e.type}, {e.struct_size} B)" for e in p.extensions) or "none"))
    for key, value in sorted((p.attributes or {}).items()):
        lines.append(f"  attribute {key} = {value}")
    if p.attributes_error:
        lines.append(f"  attributes: {p.attributes_error}")
    for w in p.warnings:
        lines.append(f"  warning: {w}")
    if r.verdict:
        lines.append(f"  verdict vs framework {r.framework_version}: "
                     f"{'accepted' if r.verdict.accepted else 'refused'} ({r.verdict.rule}): {r.verdict.reasons[0]}")
    if r.client_creation_risk:
        lines.append(f"  client: not created here: {r.client_creation_risk}")
    return "\n".join(lines)


def cmd_probe(args: argparse.Namespace) -> int:
    from pjrt_hub._reports import ProbeCommandReport
    from pjrt_hub.abi import NotFound

    if args.schema:
        print(json.dumps(ProbeCommandReport.model_json_schema(), indent=2))
        return ExitCode.OK
    if not args.target:
        raise _Usage("probe needs a library path or a plugin name")
    name = _plugin_target(args, args.target)
    registry = _registry(args)
    try:
        record = registry.record(name)
    except NotFound as exc:
        print(f"pjrt-hub probe: {exc}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    if record.kind != "c":
        print(f"pjrt-hub probe: {record.name} is a Python plugin; probe reads PJRT C libraries "
              f"(use pjrt-hub list or check)", file=sys.stderr)
        return ExitCode.USAGE
    probe = registry.probe_report(record.name)
    report = ProbeCommandReport(
        name=record.name, path=record.library_path or args.target, framework_version=str(registry.policy.framework),
        outcome=record.outcome, reason=record.reason, probe=record.details, verdict=record.verdict,
        client_creation_risk=probe.client_creation_risk if probe is not None else None,
    )
    if probe is None:
        # Nothing was probed: the file is missing, is not a file, or is not a library any
        # loader reads. Say that, rather than an empty probe.
        if args.json:
            print(report.model_dump_json(indent=2))
        else:
            reason = (report.reason or "").removeprefix("C plugin found but not probed: ")
            print(f"{report.name}: {shown_path(report.path)}\n  not probed: {reason}")
        return ExitCode.BAD_INPUT
    _emit(args, report, lambda r: _render_probe(r, probe))
    return ExitCode.OK if probe.ok else ExitCode.PLUGIN_ERROR


# -- bench -------------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from pjrt_hub._bench import bench, bench_programs
    from pjrt_hub._reports import BenchReport, Outcome
    from pjrt_hub.abi import NotFound, PjrtHubError, PluginLoadError, VersionError

    if args.schema:
        print(json.dumps(BenchReport.model_json_schema(), indent=2))
        return ExitCode.OK
    _check_stability_options(args)
    if args.collectives:
        return _bench_collectives(args)
    suite = "corpus" if args.corpus else "perf"
    known = [p.name for p in bench_programs(suite)]
    unknown = [p for p in args.program if p not in known]
    if unknown:
        raise _Usage(f"unknown {suite} program(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if args.via == "jax":
        if args.corpus:
            raise _Usage("--via jax times the perf programs as JAX code; it does not take --corpus")
        return _bench_via_jax(args)
    for path in args.library:
        _plugin_target(args, path)
    registry = _registry(args)
    records = registry.load()
    # A plugin named twice is timed once: its processes are known by its name.
    plugins = list(dict.fromkeys(args.plugin)) or ["numba_cpu", "reference"]
    if not args.plugin:
        # Real C plugins found (installed wheels, --library) join the run, unless a client for them
        # would need hardware that is not here.
        plugins += [r.name for r in records if r.kind == "c" and r.outcome is Outcome.LOADED
                    and not registry.client_creation_risk(r.name)]
    try:
        registry.require(plugins)
    except NotFound as exc:
        print(f"pjrt-hub bench: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    except (VersionError, PluginLoadError) as exc:  # refused or failed to load: not benched
        print(f"pjrt-hub bench: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.FAILURE
    progress = Progress.for_command("", json_output=args.json)
    try:
        c_plugins = {r.name for r in records if r.kind == "c"}
        report = bench(registry, plugins, args.program or None, warm=not args.no_warm,
                       library=tuple(args.library), runs=args.runs or None,
                       progress=progress.update if progress.enabled else None, suite=suite,
                       fastest_of=[p for p in plugins if p in c_plugins],
                       spread=args.spread or 0, under_load=args.under_load or 0,
                       own_sessions=args.neighbour_sessions == "own")
    except PjrtHubError as exc:
        print(f"pjrt-hub bench: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.PLUGIN_ERROR
    finally:
        progress.clear()
    model = BenchReport.model_validate(report)
    _emit(args, model, lambda r: _format_bench(report))
    failed = [r for r in report["programs"] if "error" in r or not r.get("outputs_match", False)]
    return ExitCode.FAILURE if failed else ExitCode.OK


# -- launch ------------------------------------------------------------------------------------


def cmd_launch(args: argparse.Namespace) -> int:
    from pjrt_hub.distributed._launch import launch

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise _Usage("launch needs a command after --, e.g. pjrt-hub launch -n 2 -- python train.py")
    if args.processes < 1 or args.devices_per_process < 1:
        raise _Usage("launch: -n and --devices-per-process must be at least 1")
    return launch(command, args.processes, devices_per_process=args.devices_per_process,
                  timeout=args.kv_timeout, host=args.host, use_mpi=False if args.no_mpi else None)


def _check_stability_options(args: argparse.Namespace) -> None:
    """``--spread`` / ``--under-load``: their values, and what they do not combine with."""
    if args.spread is not None and args.spread < 2:
        raise _Usage(f"--spread {args.spread}: a spread needs at least 2 processes")
    if args.under_load is not None and args.under_load < 1:
        raise _Usage(f"--under-load {args.under_load}: needs at least 1 busy neighbour process")
    if args.neighbour_sessions is not None and args.under_load is None:
        raise _Usage("--neighbour-sessions only applies to --under-load K")
    if args.spread is not None or args.under_load is not None:
        clash = [flag for flag, on in (("--spread", args.spread is not None),
                                       ("--under-load", args.under_load is not None),
                                       ("--collectives", args.collectives), ("--via", args.via is not None)) if on]
        if len(clash) > 1:
            raise _Usage(f"{' and '.join(clash)} cannot be combined: run them one at a time")


def _format_bench(report: dict[str, Any]) -> str:
    """The bench table, then the ``--spread`` or ``--under-load`` table when there is one."""
    from pjrt_hub._bench import format_report
    from pjrt_hub._bench_stability import format_spread, format_under_load

    text = format_report(report)
    if report.get("spread") is not None:
        text += "\n\nspread over fresh processes (execute, median of each process):\n" + format_spread(report["spread"], report.get("spread_ratios") or ())
    if report.get("under_load") is not None:
        text += "\n\nunder load (execute medians):\n" + format_under_load(report["under_load"])
    return text


def _bench_collectives(args: argparse.Namespace) -> int:
    from pjrt_hub._bench_collectives import across_processes, bench_collectives, format_table
    from pjrt_hub.abi import PjrtHubError

    plugin = (args.plugin or ["numba_cpu"])[0]
    registry = _registry(args)
    progress = None if args.json else (lambda m: print(m, file=sys.stderr))
    report: dict[str, Any] = {"plugin": plugin, "note": "noisy on a shared machine: compare medians of several runs"}
    try:
        client = registry.create_client(plugin, {"cpu_device_count": 2})
        report["one_process_two_devices"] = bench_collectives(client, progress=progress)
        if args.processes > 1:
            report["two_processes"] = across_processes(plugin)
    except (PjrtHubError, OSError, subprocess.SubprocessError) as exc:
        print(f"pjrt-hub bench: {exc}", file=sys.stderr)
        return ExitCode.PLUGIN_ERROR
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report["one_process_two_devices"], f"{plugin}: 2 devices in one process"))
        if "two_processes" in report:
            print(format_table(report["two_processes"], f"{plugin}: 2 processes (MPI), one device each"))
    return ExitCode.OK


def _bench_via_jax(args: argparse.Namespace) -> int:
    """``bench --via jax``: JAX driving the plugin next to JAX on XLA:CPU (:mod:`pjrt_hub.jax._bench`)."""
    try:
        import jax  # noqa: F401
    except ImportError:
        print("pjrt-hub bench --via jax needs JAX: pip install 'pjrt-hub[jax]'", file=sys.stderr)
        return ExitCode.USAGE
    from pjrt_hub.abi import NotFound, PjrtHubError
    from pjrt_hub.jax._bench import bench_via_jax, failures, format_jax_report

    plugins = list(args.plugin) or ["numba_cpu"]
    registry = _registry(args)
    registry.load()
    try:
        registry.require(plugins)
    except NotFound as exc:
        print(f"pjrt-hub bench: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    except PjrtHubError as exc:  # refused or failed to load: the registry's own message
        print(f"pjrt-hub bench: {_one_line(exc)}", file=sys.stderr)
        return ExitCode.FAILURE
    report = bench_via_jax(plugins, args.program or None, runs=args.runs or None,
                           progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    print(json.dumps(report, indent=2) if args.json else format_jax_report(report))
    problems = failures(report)
    for problem in problems if not args.json else ():
        print(f"NOT OK: {problem}", file=sys.stderr)
    return ExitCode.FAILURE if problems else ExitCode.OK


# -- entry point -------------------------------------------------------------------------------


def _add_matrix_selection(p: argparse.ArgumentParser) -> None:
    """What a matrix covers: the same options for ``matrix`` and ``matrix plan``."""
    p.add_argument("--framework-version", type=_api_version, action="append", default=[], metavar="MAJOR.MINOR",
                   help="a framework version column (repeatable; default 0.81, 0.95, 0.106, 0.115 and "
                        f"{history.NEWEST_KNOWN})")
    p.add_argument("--plugin", action="append", default=[], metavar="NAME",
                   help="only this plugin (repeatable; default: every plugin of each environment)")
    p.add_argument("--library", action="append", default=[], metavar="PATH",
                   help="also a PJRT C plugin library (repeatable)")
    p.add_argument("--no-fixtures", action="store_true", help="leave out the toy fixture plugins")
    p.add_argument("--c-plugins", action="store_true",
                   help="also the real CPU plugins xla-cpu-pjrt (0.81), fastatomstruct-xla-cpu (0.106) and "
                        "lammps-jax-pjrt-cpu (0.115): with tox, the environment matrix-py311-cplugins, which "
                        "installs them; with --no-tox, from the wheel cache ($PJRT_HUB_CACHE/wheels, else "
                        "~/.cache/pjrt-hub/wheels; downloaded on first use, about 63 MB each) where this "
                        "environment has not installed them")
    p.add_argument("--case", action="append", default=[], metavar="PATTERN",
                   help="only conformance cases matching this pattern (repeatable)")
    p.add_argument("--no-tox", action="store_true",
                   help="this environment only, run here without tox (it is every plugin found here)")
    p.add_argument("--env", action="append", default=[], metavar="TOXENV",
                   help="tox environments (repeatable; default: the matrix-* environments of tox.ini)")
    p.add_argument("--env-name", default="local", metavar="NAME",
                   help="with --no-tox: the name of this environment in the report (default local)")
    p.add_argument("--cell-timeout", type=float, default=900.0, metavar="S",
                   help="seconds before a cell is a red time-out (default 900)")


def _add_matrix_running(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="cells at a time (default: the cores)")
    p.add_argument("--cache", default=None, metavar="DIR",
                   help="the cell cache (default: $PJRT_HUB_CACHE/matrix, else cache/ under the output)")
    p.add_argument("--refresh", action="store_true", help="run every cell again, ignoring the cache")


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="pjrt-hub",
        description="Load, check and test PJRT device plugins.",
        epilog="Exit status: 0 fine, 1 something asked for is not, 2 usage, 3 bad input, "
               "4 plugin error, 5 no such plugin (--plugin, --only).",
    )
    parser.add_argument("--version", action="version", version=f"pjrt-hub {_hub_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list every plugin found, with its outcome")
    _add_registry(p)
    _add_output(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("check", help="judge plugins against the framework version; non-zero "
                                     "exit if one asked for is refused or failed")
    p.add_argument("--plugin", action="append", default=[], metavar="NAME",
                   help="check this plugin (repeatable; default: all found)")
    _add_registry(p)
    _add_output(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("conformance", help="run the PJRT conformance suite on plugins; non-zero exit if "
                                           "a case fails")
    p.add_argument("--plugin", action="append", default=[], metavar="NAME",
                   help="a plugin name or a PJRT C plugin library path (repeatable; default: PJRT_DEVICE "
                        "or numba_cpu)")
    p.add_argument("--case", action="append", default=[], metavar="PATTERN",
                   help="only cases whose id (group/name) matches this fnmatch pattern (repeatable)")
    p.add_argument("--framework-version", type=_api_version, default=None, metavar="MAJOR.MINOR",
                   help=f"act as a framework at this PJRT API version (default {history.NEWEST_KNOWN})")
    p.add_argument("--strict", action="store_true", help="require the exact framework version")
    p.add_argument("--window-weeks", type=_non_negative, default=None, metavar="N",
                   help="forward-compatibility window for older plugins, in weeks (default 6)")
    p.add_argument("--floor-minor", type=_non_negative, default=None, metavar="MINOR",
                   help=f"oldest plugin minor accepted where the history has no dates "
                        f"(default {history.FLOOR_MINOR}, upstream's kMinPjRtMinor)")
    p.add_argument("--timeout-scale", type=_positive, default=1.0, metavar="X",
                   help="multiply every case's time bound by X")
    p.add_argument("--junit", default=None, metavar="FILE", help="also write a JUnit XML report")
    p.add_argument("--pytest-output", action="store_true", help="show pytest's own output as it runs")
    p.add_argument("--mutation-report", nargs="?", const="tests/conformance/mutants.py", default=None,
                   metavar="CATALOGUE",
                   help="instead, run the suite on a catalogue of mutant plugins (a Python file or module "
                        "defining MUTANTS and BASES; default: pjrt-hub's own, tests/conformance/mutants.py of a "
                        "checkout) and print the mutation score per group; non-zero exit if one survives")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list every case, passed ones included, and the ids of skips that share a reason")
    p.add_argument("--coverage", action="store_true",
                   help="instead, print what the suite checks of the PJRT C API: each behaviour pjrt_c_api.h "
                        "states, function by function, with the cases that check it or why none can")
    p.add_argument("--mutant", action="append", default=[], metavar="PATTERN",
                   help="with --mutation-report: only the mutants whose name matches (repeatable)")
    p.add_argument("--via", choices=("c_api", "jax"), default=None,
                   help="serve each (Python) plugin as a PJRT_Api struct and run the suite on the struct "
                        "through the C bridge: c_api; with the struct registered with JAX and the jax cases "
                        "(JAX driving the plugin) added: jax (needs pip install 'pjrt-hub[jax]')")
    _add_output(p)
    p.set_defaults(func=cmd_conformance)

    p = sub.add_parser("matrix", help="the compatibility matrix: plugins x framework versions x environments; "
                                      "non-zero exit if a cell is red (plan, cell, merge: the same in CI)")
    _add_matrix_selection(p)
    p.add_argument("--output", default="matrix", metavar="DIR",
                   help="where plan.json, the jobs' results (cells/), matrix.json, matrix.md, matrix.html and "
                        "the cache go (default ./matrix)")
    _add_matrix_running(p)
    _add_output(p)
    p.set_defaults(func=cmd_matrix)
    msub = p.add_subparsers(dest="matrix_command", metavar="STEP")

    q = msub.add_parser("plan", help="print the matrix's jobs as CI matrix data (GitHub, GitLab, JSON)")
    _add_matrix_selection(q)
    q.add_argument("--format", choices=("github", "gitlab", "json"), default="json",
                   help="github: {\"include\": [...]} for fromJSON; gitlab: a child pipeline; json: the plan "
                        "(default)")
    q.add_argument("--split", choices=("plugin", "environment"), default="plugin",
                   help="one job per plugin of each environment (the fixture plugins share one; default), or "
                        "one per environment")
    q.add_argument("--output", default=None, metavar="FILE", help="also write the plan (JSON) to FILE, for "
                                                                  "the cell and merge steps")
    q.set_defaults(func=cmd_matrix_plan, json=False)

    q = msub.add_parser("cell", help="run jobs of a plan and write DIR/<id>.json each; in its tox environment "
                                     "unless --no-tox")
    q.add_argument("id", nargs="*", metavar="ID", help="a job of the plan (repeatable; with --tox-env and no "
                                                        "ID: every job of that environment)")
    q.add_argument("--plan", required=True, metavar="FILE", help="the plan (pjrt-hub matrix plan --output)")
    q.add_argument("--output", required=True, metavar="DIR", help="where the result <id>.json goes")
    q.add_argument("--no-tox", action="store_true", help="run here, in this environment (tox.ini does this "
                                                          "inside the job's environment)")
    q.add_argument("--tox-env", default=None, metavar="NAME",
                   help="the tox environment this runs in (tox.ini passes it): jobs must be planned for it")
    _add_matrix_running(q)
    q.add_argument("--json", action="store_true", help="print the results as JSON")
    q.set_defaults(func=cmd_matrix_cell)

    q = msub.add_parser("merge", help="build matrix.json, matrix.md and matrix.html from a plan and its jobs' "
                                      "results; a job without a result is red")
    q.add_argument("results", nargs="*", metavar="RESULT", help="result files, or folders of them")
    q.add_argument("--plan", required=True, metavar="FILE", help="the plan the results were run from")
    q.add_argument("--output", default="matrix", metavar="DIR", help="where the report goes (default ./matrix)")
    q.add_argument("--json", action="store_true", help="print the report as JSON")
    q.set_defaults(func=cmd_matrix_merge)
    p = sub.add_parser("probe", help="read a PJRT C library safely (in a subprocess): version, "
                                     "functions, extensions, attributes")
    p.add_argument("target", nargs="?", metavar="PATH_OR_NAME", help="a .so path, or a C plugin's name")
    p.add_argument("--timeout", dest="probe_timeout", type=_positive, default=_PROBE_TIMEOUT, metavar="SECONDS",
                   help=f"give up on a library that takes longer (default {_PROBE_TIMEOUT:g})")
    _add_registry(p)
    _add_output(p)
    p.set_defaults(func=cmd_probe)

    from pjrt_hub.atlas._cli import add_parser as add_atlas

    add_atlas(sub, _add_output)

    p = sub.add_parser("bench", help="time the perf corpus (or --corpus: the public corpus) on several "
                                     "plugins in one run")
    p.add_argument("--plugin", action="append", default=[], metavar="NAME",
                   help="plugins to time, the first being the one ratios are about (default: "
                        "numba_cpu, reference and every loaded CPU-safe C plugin)")
    p.add_argument("--program", action="append", default=[], metavar="NAME",
                   help="programs to run (default: all of the suite)")
    p.add_argument("--corpus", action="store_true",
                   help="time every public corpus program instead of the perf programs, with geometric "
                        "means of the first plugin's times over each other plugin's")
    p.add_argument("--no-warm", action="store_true", help="skip the warm-cache compile (a subprocess each)")
    p.add_argument("--collectives", action="store_true",
                   help="time each collective op at 4 KiB, 4 MiB and 64 MiB of f32 over 2 devices instead")
    p.add_argument("--processes", type=int, default=1, choices=(1, 2),
                   help="with --collectives: also across 2 processes (pjrt-hub launch, MPI)")
    p.add_argument("--runs", type=_non_negative, default=None, metavar="N",
                   help="timed runs per program (default: 30, softmax 60, more for short programs, "
                        "up to 0.25 s each; tiny add 3000)")
    p.add_argument("--spread", type=int, default=None, metavar="N",
                   help="time the programs in N (>= 2) rounds of fresh processes, one per plugin, and "
                        "report the min / median / max of the per-process medians (shows a time that "
                        "depends on the process) and the first plugin's time over the others', round by round")
    p.add_argument("--under-load", type=int, default=None, metavar="K",
                   help="time the programs quiet and while K (>= 1) CPU-bound neighbour processes spin "
                        "(two processes per plugin, taking turns program by program, the neighbours stopped for the quiet "
                        "ones), and report loaded / quiet, flagging ratios above 3")
    p.add_argument("--neighbour-sessions", choices=("shared", "own"), default=None,
                   help="with --under-load: run the neighbours in the bench's session (shared, the default: "
                        "the cores are shared among threads) or each in a session of its own, as programs "
                        "from other terminals are (where the kernel's autogroup is on, the cores are then "
                        "shared among sessions first)")
    p.add_argument("--via", choices=("jax",), default=None,
                   help="through JAX: jit dispatch, first-call latency and the perf programs as JAX code on "
                        "the plugin (default numba_cpu) next to XLA:CPU and the plugin driven directly "
                        "(needs pip install 'pjrt-hub[jax]')")
    _add_registry(p)
    _add_output(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("launch", help="start a job of several processes on this host (like torchrun); "
                                      "pjrt_hub.distributed.initialize() in each reads what it set")
    p.add_argument("-n", "--processes", type=int, required=True, metavar="P", help="processes in the job")
    p.add_argument("--devices-per-process", type=int, default=1, metavar="D", help="CPU devices per process (default 1)")
    p.add_argument("--kv-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long a process waits for the others (store gets, collectives); default 60")
    p.add_argument("--host", default="127.0.0.1", help="address the job's store listens on (default loopback only)")
    p.add_argument("--no-mpi", action="store_true", help="plain subprocesses even if MPI is installed")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command of every process")
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("run", help="compile a StableHLO program and run it on inputs from an .npz")
    p.add_argument("program", nargs="?", metavar="PROGRAM.mlir", help="StableHLO text, as JAX prints it")
    p.add_argument("--plugin", default=None, metavar="NAME_OR_PATH",
                   help="plugin name, or path of a PJRT C library (default: PJRT_DEVICE, else numba_cpu)")
    p.add_argument("--inputs", metavar="IN.npz", help="arguments of @main as in0..inN")
    p.add_argument("--out", metavar="OUT.npz", help="write the results as out0..outM")
    p.add_argument("--timeout", type=_limit_seconds, default=600.0, metavar="SECONDS",
                   help="time limit of running the program, compile not counted; past it, exit 4: "
                        "numba_cpu and reference stop the execution, a C plugin's is left running "
                        "and the process ends (default: 600; inf: no limit)")
    p.add_argument("--allow-hardware", action="store_true",
                   help="create a client even for a plugin that declares it needs hardware")
    _add_registry(p)
    _add_output(p)
    p.set_defaults(func=cmd_run)
    return parser


#: Set to 1 to let an unexpected exception end in its traceback (for a bug report).
ENV_TRACEBACK = "PJRT_HUB_TRACEBACK"


class _Recorded:
    """A text stream passed through, remembering whether anything was written and the last
    line (for ``--json`` failures, :func:`main`)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.wrote = False
        self.last_line = ""

    def write(self, text: str) -> int:
        if text:
            self.wrote = True
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                self.last_line = lines[-1]
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    if "--json" not in words:
        return _main(parser.parse_args(words))
    # --json: whatever fails, argparse's own errors included, stdout gets JSON (module docstring).
    out, err = _Recorded(sys.stdout), _Recorded(sys.stderr)
    sys.stdout, sys.stderr = out, err
    command = next((w for w in words if not w.startswith("-")), "")
    code: int | None = None
    try:
        args = parser.parse_args(words)
        command = args.command
        code = _main(args)
        return code
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else ExitCode.USAGE
        raise
    finally:
        sys.stdout, sys.stderr = out._stream, err._stream
        if code and not out.wrote:
            prefix = f"pjrt-hub {command}: "
            error = err.last_line[len(prefix):] if err.last_line.startswith(prefix) else err.last_line
            print(json.dumps({"command": command, "exit_code": int(code), "error": error}))


def _main(args: argparse.Namespace) -> int:
    command = f"pjrt-hub {args.command}"
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            code = int(args.func(args))
            _late_selection_notes(args)
            return code
        except _Usage as exc:
            # As argparse's own usage errors (_ArgumentParser.error): one line, then SystemExit(2).
            print(f"{command}: error: {_one_line(exc)} (see {command} --help)", file=sys.stderr)
            raise SystemExit(ExitCode.USAGE) from None
        except BrokenPipeError:
            return ExitCode.OK
        except KeyboardInterrupt:
            print(f"{command}: interrupted", file=sys.stderr)
            return 128 + 2  # as a shell reports SIGINT
        except Exception as exc:  # noqa: BLE001 - the last line of the one-line-error contract
            if os.environ.get(ENV_TRACEBACK, "").strip() not in ("", "0"):
                raise
            print(f"{command}: internal error: {type(exc).__name__}: {_one_line(exc)[:1000]} (this is a "
                  f"bug in pjrt-hub; {ENV_TRACEBACK}=1 shows the traceback for a report)", file=sys.stderr)
            return ExitCode.FAILURE


if __name__ == "__main__":
    sys.exit(main())
