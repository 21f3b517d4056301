"""Running one case on one plugin, within its time bound, to one of three ends.

A case passes by returning. Everything else is translated here, once, for the pytest plugin and
any other caller: the case's own :class:`CaseFailure` and :class:`CaseSkipped` pass through; a
call the version gate refused becomes a skip (the framework, not the plugin, ruled it out); any
other PJRT error is a failure naming its code; a bare Python exception from a plugin is a failure
that says so, with where it came from; and a case still running at its deadline is a failure that
names the plugin call in progress. The case's thread is left behind as a daemon.
"""

from __future__ import annotations

import os
import threading
import traceback

from pjrt_hub.abi import PjrtError, VersionGateRefusal

from ._case import Case, CaseFailure, CaseSkipped
from ._context import PluginUnderTest, _plugin_frame, _Slot, describe

__all__ = ["run_case"]

def run_case(item: Case, ctx: PluginUnderTest) -> None:
    """Run ``item`` on ``ctx``: return if it passed, raise CaseFailure or CaseSkipped otherwise."""
    reason = ctx.not_applicable(item)
    if reason is not None:
        raise CaseSkipped(reason)
    limit = ctx.seconds(item.timeout)
    ctx.case_id = item.id
    slot = _Slot()
    worker = threading.Thread(target=slot.fill, args=(lambda: item.run(ctx),),
                              name=f"pjrt-conformance {item.id}[{ctx.name}]", daemon=True)
    worker.start()
    if not slot.done.wait(limit):
        ctx.case_timed_out(item.id)
        step = f"; the plugin call in progress: {ctx.step}" if ctx.step else ""
        raise CaseFailure(f"{item.id} did not finish within {limit:g} s{step}")
    exc = slot.error
    if exc is None:
        return
    if isinstance(exc, (CaseFailure, CaseSkipped)):
        raise exc
    if isinstance(exc, VersionGateRefusal):  # the framework ruled the call out, not the plugin
        raise CaseSkipped(f"the version gate refused a call: {exc.message}") from exc
    if isinstance(exc, PjrtError):
        raise CaseFailure(f"the plugin raised {describe(exc)}{_plugin_frame(exc)}") from exc
    if _raised_by_suite(exc):
        raise CaseFailure(f"the case itself raised {describe(exc)}{_plugin_frame(exc)}: a bug in the "
                          "conformance suite, not necessarily in the plugin") from exc
    raise CaseFailure(f"the plugin raised {describe(exc)} instead of a PjrtError{_plugin_frame(exc)}") from exc


_SUITE_DIR = os.path.dirname(os.path.abspath(__file__))


def _raised_by_suite(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(_SUITE_DIR + os.sep) \
        and not os.path.basename(frames[-1].filename) == "toy.py"

