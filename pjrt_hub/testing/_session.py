"""The conformance run inside pytest: items for (plugin, case), outcomes, the JSON report.

The items hang off the session (there is no test file to collect), one collector per plugin, so
node ids read ``pjrt-conformance[toy]::client/lookup_device``, ``-k`` selects by plugin, group or
case, and everything pytest offers (``-x``, ``--junitxml``, ``-v``, xdist-free reruns) applies. A
declared limitation becomes a strict xfail marker on its items. The cases of a C plugin, and of a
Python plugin of another distribution than pjrt-hub, run in a worker process (:mod:`._worker`),
so that a plugin that crashes fails a case instead of ending the run; ``--pjrt-in-process`` runs
them here (for a debugger).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pjrt_hub import Outcome
from pjrt_hub.abi import ApiVersion

from .contract import explain
from ._case import CASES, GROUPS, Case, CaseFailure, CaseSkipped, matching, suite_version
from ._context import COMPILE_TIMEOUT, PluginUnderTest
from ._report import CaseOutcome, CaseResult, ConformanceReport, Counts, PluginConformance
from ._runner import run_case
from ._worker import CaseWorker, isolation_available
from . import cases as _cases  # noqa: F401 - registers the cases

__all__ = ["ConformanceItem", "ConformanceSession", "make_registry"]

SUITE_NODE = "pjrt-conformance"


def suite_policy(framework: str | None = None, strict: bool = False, window_weeks: int | None = None,
                 floor_minor: int | None = None) -> Any:
    """The version policy of a conformance run: the defaults, but for what was asked."""
    from pjrt_hub import Policy

    asked: dict[str, Any] = {"strict": strict}
    if framework:
        asked["framework"] = ApiVersion.parse(framework)
    if window_weeks is not None:
        asked["window_weeks"] = window_weeks
    if floor_minor is not None:
        asked["floor_minor"] = floor_minor
    return Policy(**asked)


def make_registry(plugins: list[str], *, framework: str | None = None, strict: bool = False,
                  window_weeks: int | None = None, floor_minor: int | None = None,
                  isolate_python: bool = True) -> tuple[Any, list[str]]:
    """A registry for the named plugins (library paths are added as C plugins); returns the
    registry and the registry names of the plugins, in order. The environment applies as to
    every command (``PJRT_HUB_STRICT``, the block- and allow-lists, ...). ``isolate_python``:
    import a Python plugin of another distribution in a child process first (a conformance
    worker, which is such a process itself, does not)."""
    from pjrt_hub import PluginRegistry
    from pjrt_hub._discovery import candidate_for_path, is_library_path

    policy = suite_policy(framework, strict, window_weeks, floor_minor)
    paths = tuple(p for p in plugins if is_library_path(p))
    names = [candidate_for_path(p).name if is_library_path(p) else p for p in plugins]
    # Only the plugins asked for are imported: another installed plugin that hangs or crashes
    # while it is declared must not take this run with it.
    # isolate_python: a plugin whose import ends the process fails version/loaded, not the run.
    registry = PluginRegistry.from_environment(policy=policy, paths=paths, isolate_python=isolate_python,
                                               requested=frozenset(n.lower() for n in names))
    registry.load()
    return registry, names


class ConformanceItem(pytest.Item):
    def __init__(self, *, case: Case, ctx: PluginUnderTest, worker: CaseWorker | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.ctx = ctx
        self.worker = worker
        self.keywords[case.group] = True
        self.keywords[ctx.name] = True
        limitation = ctx.limitation_for(case)
        self.limitation = limitation
        if limitation is not None:
            self.add_marker(pytest.mark.xfail(reason=f"declared limitation: {limitation.description}", strict=True))

    def runtest(self) -> None:
        # Outside the except blocks, so that pytest does not print the case's exception chain.
        skipped = failed = None
        try:
            self._run()
        except CaseSkipped as exc:
            skipped = str(exc)
        except CaseFailure as exc:
            failed = str(exc)
        if skipped is not None:
            pytest.skip(skipped)
        if failed is not None:
            broken = explain(self.case.id)
            if broken:  # a section of pytest's report, so the failure message itself stays the case's
                self.add_report_section("call", "PJRT contract", "the case checks:\n" + "\n".join(broken))
            pytest.fail(failed, pytrace=False)

    def _run(self) -> None:
        if self.worker is None:
            run_case(self.case, self.ctx)
            return
        # What applies is decided here, from the registry record: no worker for a skip.
        reason = self.ctx.not_applicable(self.case)
        if reason is not None:
            raise CaseSkipped(reason)
        self.worker.run(self.case)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{self.case.id}[{self.ctx.name}]"


class PluginSuite(pytest.Collector):
    """The cases of one plugin (a collector only so that node ids group by plugin)."""

    def collect(self) -> list[pytest.Item]:
        return list(self._items)

    def build(self, ctx: PluginUnderTest, selected: list[Case], worker: CaseWorker | None) -> list[ConformanceItem]:
        self._items = [ConformanceItem.from_parent(self, name=c.id, case=c, ctx=ctx, worker=worker,
                                                   nodeid=f"{self.nodeid}::{c.id}") for c in selected]
        return self._items


class ConformanceSession:
    """Registered by :func:`pjrt_hub.testing.pytest_plugin.pytest_configure` when asked for."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.requested: list[str] = list(config.getoption("pjrt_plugin"))
        self.patterns: list[str] = list(config.getoption("pjrt_case"))
        self.timeout_scale: float = config.getoption("pjrt_timeout_scale")
        self.report_path: str | None = config.getoption("pjrt_report")
        self.only: bool = config.getoption("pjrt_only")
        self.via: str | None = config.getoption("pjrt_via", default=None)
        #: The version policy asked for (see suite_policy).
        self.policy_options: dict[str, Any] = {
            "framework": config.getoption("pjrt_framework_version"), "strict": config.getoption("pjrt_strict"),
            "window_weeks": config.getoption("pjrt_window_weeks", default=None),
            "floor_minor": config.getoption("pjrt_floor_minor", default=None)}
        from pjrt_hub.abi import NotFound, PjrtHubError

        try:
            if self.via:
                from ._via import served_registry

                self.registry, names = served_registry(self.requested, via=self.via, **self.policy_options)
            else:
                self.registry, names = make_registry(self.requested, **self.policy_options)
        except (PjrtHubError, ValueError) as exc:
            option = f"--pjrt-via {self.via}" if self.via else "--pjrt-framework-version"
            raise pytest.UsageError(f"{option}: {exc}") from None

        isolate = not config.getoption("pjrt_in_process") and isolation_available() and not self.via
        if isolate:
            # A Python plugin of another distribution creates its first client in a child process:
            # one whose creation ends the process fails version/loaded instead of ending the run.
            for name in dict.fromkeys(names):
                try:
                    self.registry.preflight_client(name, COMPILE_TIMEOUT * self.timeout_scale)
                except NotFound:
                    pass  # reported below, with the option that named it
        self.contexts: list[PluginUnderTest] = []
        for asked, name in zip(self.requested, names):
            try:
                self.contexts.append(PluginUnderTest(self.registry, name, timeout_scale=self.timeout_scale))
            except NotFound as exc:
                raise pytest.UsageError(f"--pjrt-plugin {asked}: {exc.message}") from None
        # C plugins and Python plugins of other distributions run in worker processes (a crash
        # fails one case), unless asked otherwise: a Python plugin may call native code as well.
        # pjrt-hub's own run here, as does a served struct (JAX holds it in this process), and a
        # Python plugin the preflight above found unusable: its cases are judged from this
        # registry's record (a worker's own registry makes no client first, and would not know).
        self.workers: dict[str, CaseWorker] = {}
        for asked, ctx in zip(self.requested, self.contexts):
            foreign = ctx.kind == "c" or (self.registry.isolated(ctx.name)
                                          and self.registry.record(ctx.name).outcome is Outcome.LOADED)
            if isolate and foreign and ctx.name not in self.workers:
                self.workers[ctx.name] = CaseWorker(asked, timeout_scale=self.timeout_scale,
                                                    policy=self.policy_options)
        self.results: dict[str, CaseResult] = {}
        self.owners: dict[str, tuple[PluginUnderTest, Case]] = {}
        self.started = time.monotonic()

    def selected_cases(self) -> list[Case]:
        ordered = sorted(CASES.values(), key=lambda c: GROUPS.index(c.group))
        if not self.patterns:
            return ordered
        chosen = [c for c in ordered if matching(c.id, self.patterns)]
        if not chosen:
            raise pytest.UsageError(f"--pjrt-case {' '.join(self.patterns)} matches no case")
        return chosen

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        # The suites join the session's own collection, so pytest counts, selects (-k, -m) and
        # reports their items like any test's.
        report = yield
        if isinstance(collector, pytest.Session) and report.passed:
            selected = self.selected_cases()
            for ctx in self.contexts:
                name = f"{SUITE_NODE}[{ctx.name}]"
                suite = PluginSuite.from_parent(collector, name=name, nodeid=name)
                for item in suite.build(ctx, selected, self.workers.get(ctx.name)):
                    self.owners[item.nodeid] = (ctx, item.case)
                report.result.append(suite)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if not self.only:
            return
        others = [i for i in items if i.nodeid not in self.owners]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [i for i in items if i.nodeid in self.owners]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        owner = self.owners.get(report.nodeid)
        if owner is None:
            return
        ctx, item = owner
        previous = self.results.get(report.nodeid)
        if report.when == "teardown" and report.passed:
            return
        if previous is not None and previous.outcome is not CaseOutcome.PASSED and report.when == "teardown":
            return
        outcome, message = _outcome(report)
        limitation = ctx.limitation_for(item)
        duration = report.duration + (previous.duration_s if previous else 0.0)
        self.results[report.nodeid] = CaseResult(
            id=item.id, group=item.group, name=item.name, description=item.description, outcome=outcome,
            message=message, limitation=limitation.description if limitation and outcome is not CaseOutcome.SKIPPED
            else None, contract=explain(item.id) if outcome is CaseOutcome.FAILED else [],
            duration_s=round(duration, 4))

    def report(self) -> ConformanceReport:
        import pjrt_hub

        plugins = []
        for ctx in self.contexts:
            prefix = f"{SUITE_NODE}[{ctx.name}]::"
            results = [r for nodeid, r in self.results.items() if nodeid.startswith(prefix)]
            counts = Counts.of(results)
            # A run that skipped every case proved nothing: it is not a pass.
            tested = counts.passed + counts.failed + counts.xfailed > 0
            r = ctx.record
            # Where the cases ran in a worker, the plugin's Api was asked for there, not here.
            seen = self.workers[ctx.name].record if ctx.name in self.workers else None
            outcome, reason = (seen["outcome"], seen["reason"]) if seen else (r.outcome.value, r.reason)
            plugins.append(PluginConformance(
                plugin=ctx.name, kind=ctx.kind, distribution=r.distribution,
                distribution_version=r.distribution_version, library_path=r.library_path,
                api_version=r.api_version, load_outcome=outcome, load_reason=reason,
                verdict_rule=r.verdict.rule if r.verdict else None,
                call_limit=r.verdict.call_limit if r.verdict else None,
                counts=counts, cases=results, tested=tested, ok=counts.failed == 0 and tested))
        return ConformanceReport(suite_version=suite_version(), pjrt_hub_version=pjrt_hub.__version__,
                                 framework_version=str(self.registry.policy.framework), plugins=plugins,
                                 ok=bool(plugins) and all(p.ok for p in plugins))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for worker in self.workers.values():
            worker.close()
        report = self.report()
        if session.exitstatus == pytest.ExitCode.OK and any(p.cases and not p.tested for p in report.plugins):
            # Every case of a plugin was skipped: nothing was tested, and that is not a pass.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.report_path:
            path = Path(self.report_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(report.model_dump_json(indent=2))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        report = self.report()
        terminalreporter.section("PJRT conformance")
        for p in report.plugins:
            terminalreporter.line(f"{p.plugin} ({p.kind}, PJRT API {p.api_version or '?'}, framework "
                                  f"{report.framework_version}, suite {report.suite_version}): {p.counts}")
            if p.cases and not p.tested:
                terminalreporter.line(f"{p.plugin}: nothing was tested: every selected case was skipped",
                                      red=True)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _failure_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = report.longreprtext.strip()
    if text.startswith("[XPASS(strict)]"):
        return text
    return text or (crash.message if crash is not None else "failed")


def _outcome(report: pytest.TestReport) -> tuple[CaseOutcome, str | None]:
    if hasattr(report, "wasxfail"):
        if report.skipped:
            return CaseOutcome.XFAILED, _failure_text(report) or report.wasxfail
        # A strict xfail that passed: the limitation no longer holds.
        return CaseOutcome.FAILED, (f"XPASS(strict): {report.wasxfail}; the case passed, so the limitation "
                                    "no longer holds: remove it from the plugin's declaration")
    if report.passed:
        return CaseOutcome.PASSED, None
    if report.skipped:
        return CaseOutcome.SKIPPED, _skip_reason(report)
    text = _failure_text(report)
    if text.startswith("[XPASS(strict)]"):
        return CaseOutcome.FAILED, (f"XPASS(strict): {text.removeprefix('[XPASS(strict)]').strip()}; the case "
                                    "passed, so the limitation no longer holds: remove it")
    return CaseOutcome.FAILED, text
