"""Mutation testing is part of the test suite: the conformance suite fails every mutant plugin of
the catalogue (tests/conformance/mutants.py) with the cases expected, and passes the unmodified
plugins they are made from."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.testing import CASES, GROUPS
from pjrt_hub.testing._mutation import load_catalogue, run_control, run_mutant

from .mutants import BASES, MUTANTS
from .test_mutation_contract import MUTANTS as CONTRACT_MUTANTS

#: The cases that observe behaviour (rather than that calls return), each with a mutant it kills.
OBSERVING_CASES = (
    [c for c in CASES if c.split("/")[0] in ("numerics", "lifetime", "concurrency")]
    + [c for c in CASES if c.startswith("errors/")]
    + ["buffers/uninitialized_f32", "transfers/strided_host_arrays", "transfers/copy_to_device_is_independent",
       "transfers/copy_to_memory_is_independent", "transfers/view_aliases_and_calls_its_deleter_once",
       "transfers/dlpack_export_aliases", "events/pending_execution", "events/pending_input",
       "events/execution_error_reaches_every_event_and_output", "compile/same_module_name",
       "execute/execute_device", "extensions/layouts_describe_memory", "transfers/zero_copy_holds_the_host_array",
       "execute/scalar_and_empty_arrays", "devices/memory_stats_follow_allocations",
       "extensions/memory_descriptions_match_memories"]
)


def test_the_catalogue_has_at_least_60_mutants_over_every_group():
    assert len(MUTANTS) >= 60
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    groups = Counter(m.group for m in MUTANTS)
    # abi's cases read a C plugin's function table: no Python plugin can carry their defects
    # (tests/conformance/test_abi.py plants them in fake probe data instead). The jax cases drive a
    # plugin served to JAX (--via jax): their defects are the other groups' seen through JAX. The
    # properties group's mutants are in tests/conformance/test_properties.py.
    assert set(groups) == set(GROUPS) - {"abi", "jax", "properties"}
    for mutant in MUTANTS:
        assert mutant.kills and all(k in CASES for k in mutant.kills), mutant.name
        assert mutant.base in {b.name for b in BASES}


def test_every_observing_case_has_a_mutant_that_it_kills():
    # The cases read off the header have theirs in their area's catalogue (mutants_<area>.py).
    killed = {k for m in [*MUTANTS, *(m for _, m in CONTRACT_MUTANTS)] for k in m.kills}
    assert [c for c in OBSERVING_CASES if c not in killed] == []


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_suite_fails_the_mutant_with_the_expected_cases(mutant):
    result = run_mutant(mutant)
    assert result.killed, (f"{mutant.name} ({mutant.description}) survived: " + "; ".join(
        f"{k}: {v}" for k, v in result.missed.items()))


@pytest.mark.parametrize("base", BASES, ids=[b.name for b in BASES])
def test_the_unmodified_plugins_pass_the_same_cases(base):
    patterns = [p for m in MUTANTS if m.base == base.name for p in m.patterns]
    control = run_control(base, patterns)
    assert control.cases_run > 0 and control.failed == {}


def test_the_cli_prints_the_score_per_group(capsys):
    code = main(["conformance", "--mutation-report", str(Path(__file__).with_name("mutants.py")), "--mutant", "bf16_*",
                 "--mutant", "survives_delete"])
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    lines = {" ".join(line.split()) for line in out.splitlines()}
    assert {"numerics 2/2 killed 100.0%", "buffers 1/1 killed 100.0%", "all 3/3 killed 100.0%"} <= lines
    assert out.rstrip().endswith("OK: every mutant killed, every control passed.")


def test_a_surviving_mutant_fails_the_report(tmp_path, capsys):
    catalogue = tmp_path / "weak.py"
    catalogue.write_text(
        "import contextlib\n"
        "from pjrt_hub.testing._mutation import Base, Mutant\n"
        "from pjrt_hub.testing.toy import ToyPlugin\n"
        "BASES = (Base('toy', lambda: contextlib.nullcontext(ToyPlugin())),)\n"
        "# No defect at all: the suite has nothing to catch, so this 'mutant' survives.\n"
        "MUTANTS = (Mutant('unchanged', 'client', 'nothing changed', ('client/process_index',),\n"
        "                  lambda: contextlib.nullcontext(ToyPlugin())),)\n")
    assert main(["conformance", "--mutation-report", str(catalogue), "--json"]) == ExitCode.FAILURE
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    (mutant,) = report["mutants"]
    assert mutant["killed"] is False and mutant["missed"] == {"client/process_index": "passed"}
    assert report["groups"] == [{"group": "client", "killed": 0, "total": 1}]


def test_a_catalogue_that_is_not_one_is_a_usage_error(tmp_path, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    assert main(["conformance", "--mutation-report", str(empty)]) == ExitCode.USAGE
    assert "defines no MUTANTS and BASES" in capsys.readouterr().err
    assert main(["conformance", "--mutation-report", str(tmp_path / "missing.py")]) == ExitCode.USAGE
    assert "no mutant catalogue at" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no mutant catalogue"):
        load_catalogue(str(tmp_path / "missing.py"))
