"""The cases read off pjrt_c_api.h and the extension headers (pjrt_hub/testing/cases/contract_*.py)
fail the mutants of their area's catalogue (tests/conformance/mutants_<area>.py) with the cases
each names, and pass the unmodified plugins the mutants are made from; every case an area adds is
in the contract table and has a mutant it kills."""

from __future__ import annotations

import importlib

import pytest

from pjrt_hub.testing import CASES
from pjrt_hub.testing._mutation import run_control, run_mutant
from pjrt_hub.testing.contract import BEHAVIOURS, behaviours_of

AREAS = ("client", "buffers", "execute", "extensions", "binding")
CATALOGUES = {area: importlib.import_module(f".mutants_{area}", __package__) for area in AREAS}


def area_cases(area: str) -> list[str]:
    return sorted(k for k, item in CASES.items() if item.run.__module__.endswith(f".cases.contract_{area}"))


MUTANTS = [(area, m) for area in AREAS for m in CATALOGUES[area].MUTANTS]
CONTROLS = [(area, b) for area in AREAS for b in CATALOGUES[area].BASES
            if b.name in {m.base for m in CATALOGUES[area].MUTANTS}]


@pytest.mark.parametrize("area", AREAS)
def test_every_case_of_the_area_is_in_the_table_and_has_a_mutant_it_kills(area):
    cases = area_cases(area)
    mutants = CATALOGUES[area].MUTANTS
    assert cases
    assert [c for c in cases if not behaviours_of(c)] == []
    killed = {k for m in mutants for k in m.kills}
    assert [c for c in cases if c not in killed] == []
    assert len({m.name for m in mutants}) == len(mutants)
    bases = {b.name for b in CATALOGUES[area].BASES}
    for mutant in mutants:
        assert mutant.kills and all(k in CASES for k in mutant.kills), mutant.name
        assert mutant.base in bases, mutant.name


def test_mutant_names_are_unique_across_the_catalogues():
    names = [m.name for _, m in MUTANTS]
    assert len(set(names)) == len(names)
    assert len(BEHAVIOURS) > 0


@pytest.mark.parametrize("area, mutant", MUTANTS, ids=[f"{a}-{m.name}" for a, m in MUTANTS])
def test_the_suite_fails_the_mutant_with_the_expected_cases(area, mutant):
    result = run_mutant(mutant)
    assert result.killed, (f"{mutant.name} ({mutant.description}) survived: " + "; ".join(
        f"{k}: {v}" for k, v in result.missed.items()))


@pytest.mark.parametrize("area, base", CONTROLS, ids=[f"{a}-{b.name}" for a, b in CONTROLS])
def test_the_unmodified_plugins_pass_the_area(area, base):
    cases = area_cases(area)
    control = run_control(base, cases)
    assert control.cases_run > 0 and control.failed == {}
