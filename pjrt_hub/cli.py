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
5     a plugin asked for by name does not exist
====  =======================================================================================
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from typing import Any, Callable, Sequence

from pydantic import BaseModel

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
    g.add_argument("--disable", action="append", default=[], metavar="NAME",
                   help="never load this plugin (repeatable; also PJRT_HUB_DISABLE_PLUGINS=a,b)")
    g.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="load only these plugins (repeatable; also PJRT_HUB_PLUGINS=a,b)")
    g.add_argument("--no-autoload", action="store_true",
                   help="do not read entry points (also PJRT_HUB_PLUGIN_AUTOLOAD=0)")
    g.add_argument("--require-ext", action="append", default=[], metavar="NAME[>=V]",
                   help="refuse plugins without this extension (repeatable)")
    g.add_argument("--want-ext", action="append", default=[], metavar="NAME[>=V]",
                   help="warn about plugins without this extension (repeatable)")
    g.add_argument("--library", action="append", default=[], metavar="PATH",
                   help="also consider the PJRT C plugin at PATH (repeatable)")


def _registry(args: argparse.Namespace) -> Any:
    from pjrt_hub._policy import Policy, strict_from_environment
    from pjrt_hub._registry import PluginRegistry, RegistrySettings
    from pjrt_hub.extensions import parse_request

    strict_source = "--strict" if args.strict else strict_from_environment()
    policy = Policy(
        framework=args.framework_version or history.NEWEST_KNOWN,
        window_weeks=args.window_weeks,
        floor_minor=args.floor_minor,
        strict=strict_source is not None,
        strict_source=strict_source or "--strict",
    )
    try:
        requests = tuple(parse_request(t, required=True) for t in args.require_ext)
        requests += tuple(parse_request(t, required=False) for t in args.want_ext)
    except ValueError as exc:
        raise _Usage(str(exc)) from None
    settings = RegistrySettings.from_environment(policy=policy, extension_requests=requests,
                                                 paths=tuple(args.library),
                                                 probe_timeout=getattr(args, "probe_timeout", 120.0))
    overrides: dict[str, Any] = {}
    if args.disable:
        overrides["disabled"] = settings.disabled | {n.lower() for n in args.disable}
    if args.only:
        overrides["allowed"] = frozenset(n.lower() for n in args.only)
    if args.no_autoload:
        overrides["autoload"] = False
    if overrides:
        from dataclasses import replace

        settings = replace(settings, **overrides)
    return PluginRegistry(settings)


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


def _render_plugins(plugins: Sequence[Any], framework: str) -> str:
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
            lines.append(f"{p.name}: library {p.library_path}")
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
    report = ListReport(framework_version=str(registry.policy.framework),
                        pjrt_hub_version=_hub_version(), plugins=records)
    _emit(args, report, lambda r: _render_plugins(r.plugins, r.framework_version))
    return ExitCode.OK


def cmd_check(args: argparse.Namespace) -> int:
    from pjrt_hub._reports import CheckReport, Outcome

    if args.schema:
        print(json.dumps(CheckReport.model_json_schema(), indent=2))
        return ExitCode.OK
    registry = _registry(args)
    records = registry.load()
    by_name = {r.name.lower(): r for r in records}
    problems, missing = [], []
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
        ok=not problems, problems=problems,
    )

    def render(r: CheckReport) -> str:
        head = (f"Policy: framework {r.framework_version}, window {r.window_weeks} weeks, floor "
                f"{r.floor_minor}, strict {'on' if r.strict else 'off'}")
        verdict = "OK: every plugin asked for is loaded." if r.ok else \
            "NOT OK:\n" + "\n".join(f"  - {p}" for p in r.problems)
        return "\n".join([head, _render_plugins(r.plugins, r.framework_version), "", verdict])

    _emit(args, report, render)
    if missing:
        return ExitCode.NOT_FOUND
    return ExitCode.OK if report.ok else ExitCode.FAILURE


# -- conformance -------------------------------------------------------------------------------


def _render_conformance(report: Any) -> str:
    marks = {"passed": "passed ", "failed": "FAILED ", "xfailed": "xfailed", "skipped": "skipped"}
    lines = [f"PJRT conformance suite {report.suite_version}, framework PJRT API {report.framework_version}"]
    for p in report.plugins:
        dist = f", {p.distribution} {p.distribution_version}" if p.distribution else ""
        lines += ["", f"{p.plugin} ({p.kind}{dist}, PJRT API {p.api_version or '?'}): {p.counts}"]
        for c in p.cases:
            detail = c.message or ""
            if c.outcome.value == "xfailed":
                detail = f"limitation: {c.limitation}" + (f" ({c.message})" if c.message else "")
            text = " ".join(detail.split())
            lines.append(f"  {marks[c.outcome.value]}  {c.id}" + (f": {text}" if text else ""))
    failed = sum(p.counts.failed for p in report.plugins)
    lines += ["", "OK: no case failed." if report.ok else f"NOT OK: {failed} cases failed."]
    return "\n".join(lines)


def cmd_conformance(args: argparse.Namespace) -> int:
    from pjrt_hub.testing._report import ConformanceReport

    if args.schema:
        print(json.dumps(ConformanceReport.model_json_schema(), indent=2))
        return ExitCode.OK
    from pjrt_hub._registry import default_plugin_name
    from pjrt_hub.testing._run import ConformanceRunError, run_conformance
    from pjrt_hub.testing._session import make_registry

    plugins = args.plugin or [default_plugin_name()]
    framework = str(args.framework_version) if args.framework_version else None
    registry, names = make_registry(plugins, framework=framework, strict=args.strict)
    known = {r.name.lower() for r in registry.records}
    missing = [p for p, n in zip(plugins, names) if n.lower() not in known]
    if missing:
        found = ", ".join(sorted(r.name for r in registry.records)) or "none"
        print(f"no plugin named {', '.join(missing)} (found: {found})", file=sys.stderr)
        return ExitCode.NOT_FOUND
    try:
        report = run_conformance(plugins, framework=framework, strict=args.strict, cases=args.case,
                                 timeout_scale=args.timeout_scale, junit=args.junit,
                                 show_output=args.pytest_output and not args.json)
    except ConformanceRunError as exc:
        print(str(exc), file=sys.stderr)
        return ExitCode.USAGE
    _emit(args, report, _render_conformance)
    return ExitCode.OK if report.ok else ExitCode.FAILURE


# -- matrix ------------------------------------------------------------------------------------


def _render_matrix_summary(report: Any, paths: dict[str, str] | None = None) -> str:
    from collections import Counter

    tally = Counter(c.status.value for c in report.cells)
    lines = [f"PJRT compatibility matrix: {len(report.plugins)} plugins x {len(report.framework_versions)} "
             f"framework versions ({', '.join(report.framework_versions)}) in {len(report.environments)} environments",
             "cells: " + ", ".join(f"{tally.get(k, 0)} {k}" for k in ("passed", "failed", "refused", "error"))]
    for e in report.environments:
        lines.append(f"environment {e.name}: {e.status}" + (f" ({e.note})" if e.note else ""))
    for c in report.cells:
        if c.status.value in ("failed", "error"):
            why = c.error or "; ".join(f.id for f in c.failures)
            lines.append(f"RED {c.plugin} at {c.framework_version} ({c.environment}): {c.status.value}: "
                         f"{' '.join(why.split())[:300]}")
    for kind, path in (paths or {}).items():
        lines.append(f"wrote {path}")
    return "\n".join(lines)


def cmd_matrix(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pjrt_hub.compat_matrix import (FIXTURE_PLUGINS, REAL_C_PLUGINS, CellCache, MatrixReport, merge,
                                        run_environment, run_tox, write_outputs)

    if args.schema:
        print(json.dumps(MatrixReport.model_json_schema(), indent=2))
        return ExitCode.OK
    output = Path(args.output)
    cache = CellCache(Path(args.cache)) if args.cache else None
    options = dict(frameworks=args.framework_version, plugins=args.plugin,
                   fixtures=() if args.no_fixtures else FIXTURE_PLUGINS, libraries=args.library,
                   c_plugins=REAL_C_PLUGINS if args.c_plugins else (), jobs=args.jobs,
                   cell_timeout=args.cell_timeout, cache=cache, refresh=args.refresh, cases=args.case)
    if args.no_tox or args.partial:
        run = run_environment(output, environment=args.env_name, **options)
        report = run.report
        if args.partial:
            partial = Path(args.partial)
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(report.model_dump_json(indent=2))
            paths = {"partial": str(partial)}
        else:
            paths = write_outputs(report, output)
        note = f"{run.cells_run} cells run, {run.cells_cached} from the cache"
    else:
        envs = args.env or None
        partials, missing = run_tox(output, *([envs] if envs else []), extra=args.tox_arg)
        if not partials:
            print("no tox environment produced results: " + "; ".join(f"{m.name}: {m.note}" for m in missing),
                  file=sys.stderr)
            return ExitCode.FAILURE
        report = merge(partials, missing)
        paths = write_outputs(report, output)
        note = f"{len(partials)} environments ran, {len(missing)} gave no result"
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(_render_matrix_summary(report, paths))
        print(note)
    red = [c for c in report.cells if c.status.value in ("failed", "error")]
    return ExitCode.FAILURE if red else ExitCode.OK
# -- run ---------------------------------------------------------------------------------------


def _plugin_target(args: argparse.Namespace, value: str | None) -> str | None:
    """A plugin given by path becomes an explicit library candidate; return its name."""
    if value and ("/" in value or value.endswith((".so", ".dylib", ".json"))):
        from pjrt_hub._discovery import candidate_for_path

        args.library = [*args.library, value]
        return candidate_for_path(value).name
    return value


def cmd_run(args: argparse.Namespace) -> int:
    from pjrt_hub._registry import default_plugin_name
    from pjrt_hub._reports import ArrayInfo, RunReport
    from pjrt_hub._run import BadInput, check_inputs, load_inputs, main_signature, npz_array, run_program
    from pjrt_hub.abi import CompileError, NotFound, PjrtError, PluginLoadError

    if args.schema:
        print(json.dumps(RunReport.model_json_schema(), indent=2))
        return ExitCode.OK
    if not args.program or not args.inputs:
        raise _Usage("run needs PROGRAM and --inputs")
    name = _plugin_target(args, args.plugin)
    registry = _registry(args)
    name = name or default_plugin_name()
    try:
        try:
            text = open(args.program, encoding="utf-8").read()
        except OSError as exc:
            raise BadInput(f"cannot read program {args.program}: {exc.strerror}") from None
        arrays = load_inputs(args.inputs)
        signature = main_signature(text)
        if signature is not None:
            arrays = check_inputs(signature, arrays)
        client = registry.create_client(name, allow_hardware=args.allow_hardware)
        result = run_program(client, text, arrays, timeout=args.timeout)
    except (BadInput, CompileError) as exc:
        print(f"pjrt-hub run: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except NotFound as exc:
        print(f"pjrt-hub run: {exc}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    except PluginLoadError as exc:
        print(f"pjrt-hub run: {exc}", file=sys.stderr)
        return ExitCode.FAILURE
    except PjrtError as exc:
        print(f"pjrt-hub run: plugin {name} failed: {exc}", file=sys.stderr)
        return ExitCode.PLUGIN_ERROR
    import numpy as np

    if args.out:
        np.savez(args.out, **{f"out{i}": npz_array(a) for i, a in enumerate(result.outputs)})
    report = RunReport(
        plugin=name, program=args.program, out=args.out,
        inputs=[ArrayInfo(name=f"in{i}", shape=list(a.shape), dtype=str(a.dtype)) for i, a in enumerate(arrays)],
        outputs=[ArrayInfo(name=f"out{i}", shape=list(a.shape), dtype=str(a.dtype))
                 for i, a in enumerate(result.outputs)],
        compile_ms=result.compile_seconds * 1e3, execute_ms=result.execute_seconds * 1e3,
    )

    def render(r: RunReport) -> str:
        lines = [f"{r.program} on {r.plugin}: compiled in {r.compile_ms:.1f} ms, ran in {r.execute_ms:.2f} ms"]
        lines += [f"  {o.name}: {o.dtype}[{','.join(map(str, o.shape))}]" for o in r.outputs]
        if r.out:
            as_bits = [f"{o.name} as uint{a.dtype.itemsize * 8}" for o, a in zip(r.outputs, result.outputs)
                       if npz_array(a).dtype != a.dtype]
            lines.append(f"wrote {r.out}" + (f" ({', '.join(as_bits)} bits)" if as_bits else ""))
        return "\n".join(lines)

    _emit(args, report, render)
    return ExitCode.OK


# -- probe -------------------------------------------------------------------------------------


def _render_probe(r: Any) -> str:
    p = r.probe
    lines = [f"{r.name}: {p.get('path') or r.path}"]
    outcome = p.get("outcome")
    if outcome != "ok":
        lines.append(f"  outcome: {outcome} (stage {p.get('stage')}): {p.get('reason') or p.get('message') or ''}")
        if p.get("stderr_tail"):
            lines.append("  stderr: " + p["stderr_tail"].strip().replace("\n", "\n          "))
        return "\n".join(lines)
    lines.append(f"  loads: yes ({p.get('machine') or '?'}), GetPjrtApi exported")
    lines.append(f"  PJRT API {p.get('api_version')}; PJRT_Api struct_size {p.get('api_struct_size')}, "
                 f"{p.get('num_slots')} slots (history expects {p.get('expected_slots')})")
    functions, nulls = p.get("functions") or [], p.get("null_functions") or []
    lines.append(f"  functions: {len(functions)} present, {len(nulls)} null" +
                 (": " + ", ".join(nulls) if nulls else ""))
    exts = p.get("extensions") or []
    lines.append(f"  extensions ({p.get('extension_layout')}): " +
                 (", ".join(f"{e['name']} (type {e['type']}, {e.get('struct_size')} B)" for e in exts) or "none"))
    for key, value in sorted((p.get("attributes") or {}).items()):
        lines.append(f"  attribute {key} = {value}")
    if p.get("attributes_error"):
        lines.append(f"  attributes: {p['attributes_error']}")
    for w in p.get("warnings") or []:
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
    probe = record.details or {}
    report = ProbeCommandReport(
        name=record.name, path=record.library_path or args.target, framework_version=str(registry.policy.framework),
        outcome=record.outcome, reason=record.reason, probe=probe, verdict=record.verdict,
        client_creation_risk=probe.get("client_creation_risk"),
    )
    _emit(args, report, _render_probe)
    if not probe:
        return ExitCode.FAILURE  # found but no loader could read it
    return ExitCode.OK if probe.get("outcome") == "ok" else ExitCode.PLUGIN_ERROR


# -- bench -------------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from pjrt_hub._bench import bench, format_report, perf_programs
    from pjrt_hub._reports import BenchReport, Outcome
    from pjrt_hub.abi import PjrtHubError

    if args.schema:
        print(json.dumps(BenchReport.model_json_schema(), indent=2))
        return ExitCode.OK
    known = [e["name"] for e in perf_programs()]
    unknown = [p for p in args.program if p not in known]
    if unknown:
        raise _Usage(f"unknown perf program(s) {', '.join(unknown)}; known: {', '.join(known)}")
    for path in args.library:
        _plugin_target(args, path)
    registry = _registry(args)
    records = registry.load()
    plugins = list(args.plugin) or ["numba_cpu", "reference"]
    if not args.plugin:
        # Real C plugins found (installed wheels, --library) join the run, unless a client for them
        # would need hardware that is not here.
        plugins += [r.name for r in records if r.kind == "c" and r.outcome is Outcome.LOADED
                    and not registry.client_creation_risk(r.name)]
    try:
        registry.require(plugins)
        report = bench(registry, plugins, args.program or None, warm=not args.no_warm,
                       library=tuple(args.library), runs=args.runs or None,
                       progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    except PjrtHubError as exc:
        print(f"pjrt-hub bench: {exc}", file=sys.stderr)
        return ExitCode.PLUGIN_ERROR
    model = BenchReport.model_validate(report)
    _emit(args, model, lambda r: format_report(report))
    failed = [r for r in report["programs"] if "error" in r or not r.get("outputs_match", False)]
    return ExitCode.FAILURE if failed else ExitCode.OK


# -- entry point -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pjrt-hub",
        description="Load, check and test PJRT device plugins.",
        epilog="Exit status: 0 fine, 1 something asked for is not, 2 usage, 3 bad input, "
               "4 plugin error, 5 no such plugin.",
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
    p.add_argument("--timeout-scale", type=float, default=1.0, metavar="X",
                   help="multiply every case's time bound by X")
    p.add_argument("--junit", default=None, metavar="FILE", help="also write a JUnit XML report")
    p.add_argument("--pytest-output", action="store_true", help="show pytest's own output as it runs")
    _add_output(p)
    p.set_defaults(func=cmd_conformance)

    p = sub.add_parser("matrix", help="the compatibility matrix: plugins x framework versions x environments; "
                                      "non-zero exit if a cell is red")
    p.add_argument("--output", default="matrix", metavar="DIR",
                   help="where matrix.json, matrix.md, matrix.html and the cache go (default ./matrix)")
    p.add_argument("--framework-version", type=_api_version, action="append", default=[], metavar="MAJOR.MINOR",
                   help="a framework version column (repeatable; default 0.81, 0.95, 0.106, 0.115 and "
                        f"{history.NEWEST_KNOWN})")
    p.add_argument("--plugin", action="append", default=[], metavar="NAME",
                   help="only this plugin (repeatable; default: every plugin found and the fixture plugins)")
    p.add_argument("--library", action="append", default=[], metavar="PATH",
                   help="also a PJRT C plugin library (repeatable)")
    p.add_argument("--no-fixtures", action="store_true", help="leave out the toy fixture plugins")
    p.add_argument("--c-plugins", action="store_true",
                   help="also the real CPU plugins xla-cpu-pjrt (0.81), fastatomstruct-xla-cpu (0.106) and "
                        "lammps-jax-pjrt-cpu (0.115) from the wheel cache ($PJRT_HUB_CACHE, else "
                        "~/.cache/pjrt-hub/wheels; downloaded on first use, about 63 MB each), where this "
                        "environment has not installed them (with --no-tox; the tox environment "
                        "matrix-py311-cplugins installs them)")
    p.add_argument("--case", action="append", default=[], metavar="PATTERN",
                   help="only conformance cases matching this pattern (repeatable)")
    p.add_argument("--no-tox", action="store_true",
                   help="run this environment only, here, without tox")
    p.add_argument("--env", action="append", default=[], metavar="TOXENV",
                   help="tox environments to run (repeatable; default: the matrix-* environments of tox.ini)")
    p.add_argument("--tox-arg", action="append", default=[], metavar="ARG", help="passed to tox after --")
    p.add_argument("--env-name", default="local", metavar="NAME",
                   help="the name of this environment in the report (tox passes its env name)")
    p.add_argument("--partial", default=None, metavar="FILE",
                   help="write this environment's partial report to FILE and render nothing (for tox)")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="cells at a time (default: the cores)")
    p.add_argument("--cell-timeout", type=float, default=900.0, metavar="S",
                   help="seconds before a cell is a red time-out (default 900)")
    p.add_argument("--cache", default=None, metavar="DIR",
                   help="the cell cache (default: $PJRT_HUB_CACHE/matrix, else DIR/cache under --output)")
    p.add_argument("--refresh", action="store_true", help="run every cell again, ignoring the cache")
    _add_output(p)
    p.set_defaults(func=cmd_matrix)
    p = sub.add_parser("probe", help="read a PJRT C library safely (in a subprocess): version, "
                                     "functions, extensions, attributes")
    p.add_argument("target", nargs="?", metavar="PATH_OR_NAME", help="a .so path, or a C plugin's name")
    p.add_argument("--timeout", dest="probe_timeout", type=float, default=120.0, metavar="SECONDS",
                   help="give up on a library that takes longer (default 120)")
    _add_registry(p)
    _add_output(p)
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("bench", help="time the perf corpus on several plugins in one run")
    p.add_argument("--plugin", action="append", default=[], metavar="NAME",
                   help="plugins to time, the first being the one ratios are about (default: "
                        "numba_cpu, reference and every loaded CPU-safe C plugin)")
    p.add_argument("--program", action="append", default=[], metavar="NAME",
                   help="perf programs to run (default: all)")
    p.add_argument("--no-warm", action="store_true", help="skip the warm-cache compile (a subprocess each)")
    p.add_argument("--runs", type=_non_negative, default=None, metavar="N",
                   help="timed runs per program (default: 30, softmax 60; tiny add 3000)")
    _add_registry(p)
    _add_output(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("run", help="compile a StableHLO program and run it on inputs from an .npz")
    p.add_argument("program", nargs="?", metavar="PROGRAM.mlir", help="StableHLO text, as JAX prints it")
    p.add_argument("--plugin", default=None, metavar="NAME_OR_PATH",
                   help="plugin name, or path of a PJRT C library (default: PJRT_DEVICE, else numba_cpu)")
    p.add_argument("--inputs", metavar="IN.npz", help="arguments of @main as in0..inN")
    p.add_argument("--out", metavar="OUT.npz", help="write the results as out0..outM")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="give up waiting for the plugin after this long")
    p.add_argument("--allow-hardware", action="store_true",
                   help="create a client even for a plugin that declares it needs hardware")
    _add_registry(p)
    _add_output(p)
    p.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except _Usage as exc:
        parser.error(str(exc))
        return ExitCode.USAGE  # parser.error exits; kept for type checkers
    except BrokenPipeError:
        return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
