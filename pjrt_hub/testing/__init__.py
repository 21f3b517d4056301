"""``pjrt_hub.testing``: the PJRT conformance suite, shipped as a pytest plugin.

``pytest --pjrt-plugin NAME`` (or ``pjrt-hub conformance --plugin NAME``) runs every case on a
plugin. Cases are data (:data:`CASES`, :class:`Case`), grouped like the PJRT C API's own tests;
:mod:`pjrt_hub.testing.toy` is a tiny complete plugin that passes them. :class:`Mutant` plugins
(one planted defect each) test the suite itself: :func:`run_mutation` scores it by group.

Names are imported lazily: the pytest plugin module is imported by every pytest run of an
environment with pjrt-hub installed, and must not pull in the suite unless asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    # Written `X as X`: the explicit re-export form, for type checkers and linters.
    from ._case import (
        CASES as CASES, GROUPS as GROUPS, Case as Case, CaseFailure as CaseFailure,
        CaseSkipped as CaseSkipped, suite_version as suite_version,
    )
    from ._context import PluginUnderTest as PluginUnderTest
    from ._limitations import (
        C_PLUGIN_LIMITATIONS as C_PLUGIN_LIMITATIONS, KnownLimitations as KnownLimitations,
    )
    from ._mutation import (
        Base as Base, Mutant as Mutant, MutationReport as MutationReport,
        run_mutation as run_mutation,
    )
    from ._report import (
        CaseOutcome as CaseOutcome, CaseResult as CaseResult,
        ConformanceReport as ConformanceReport, Counts as Counts,
        PluginConformance as PluginConformance,
    )
    from ._run import ConformanceRunError as ConformanceRunError, run_conformance as run_conformance
    from ._runner import run_case as run_case

_EXPORTS = {
    "CASES": "._case", "GROUPS": "._case", "Case": "._case", "CaseFailure": "._case",
    "CaseSkipped": "._case", "suite_version": "._case",
    "PluginUnderTest": "._context",
    "C_PLUGIN_LIMITATIONS": "._limitations", "KnownLimitations": "._limitations",
    "CaseOutcome": "._report", "CaseResult": "._report", "ConformanceReport": "._report",
    "Counts": "._report", "PluginConformance": "._report",
    "run_case": "._runner",
    "run_conformance": "._run", "ConformanceRunError": "._run",
    "Base": "._mutation", "Mutant": "._mutation", "MutationReport": "._mutation", "run_mutation": "._mutation",
}

__all__ = sorted(_EXPORTS)

# The registry of cases is only whole once the case modules are imported.
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, import_first={"._case": ".cases", "._runner": ".cases"})
