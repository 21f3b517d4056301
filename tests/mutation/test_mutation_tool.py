"""The mutation run's own logic, without cosmic-ray: the seeded stratified sample, the filter of
annotations, the stable ids, the private copy, the survivors' reasons and the report's verdict
(on a made-up session)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from .model import (
    Candidate,
    ExplainedKind,
    MutantResult,
    Outcome,
    Reason,
    allocate,
    annotation_spans,
    assign_ids,
    build_report,
    draw_sample,
    in_spans,
    load_reasons,
    render_markdown,
    scope_of,
)
from .run import REASONS, TARGETS, copy_path, main, make_copy, repo_path


def _population(sizes: dict[str, int], prefix: str = "job") -> list[Candidate]:
    return [Candidate(f"{prefix}-{module}-{i}", module, "core/NumberReplacer", i, (i + 1, 4), (i + 1, 5))
            for module, n in sizes.items() for i in range(n)]


SIZES = {"a.py": 1000, "b.py": 300, "c.py": 40, "d.py": 3}


# -- sampling ----------------------------------------------------------------------------------


def test_allocation_gives_every_module_its_minimum_then_shares_in_proportion():
    shares = allocate(SIZES, 400, 5)
    assert sum(shares.values()) == 400
    assert shares["d.py"] == 3  # all it has
    assert all(shares[m] >= min(5, n) for m, n in SIZES.items())
    # Beyond the minimum, a module with 3.3 times the mutants gets about 3.3 times the share.
    assert abs((shares["a.py"] - 5) / (shares["b.py"] - 5) - 995 / 295) < 0.05
    assert allocate(SIZES, 10_000, 5) == SIZES
    with pytest.raises(ValueError):
        allocate(SIZES, 10, 5)


def test_the_sample_is_reproducible_from_the_seed_and_stratified():
    population = _population(SIZES)
    first = draw_sample(population, 400, seed=41, minimum=5)
    assert len(first) == 400 == len({c.job_id for c in first})
    # The same seed draws the same mutants, whatever order the session lists them in.
    assert draw_sample(list(reversed(population)), 400, seed=41, minimum=5) == first
    # cosmic-ray gives each session random job ids: the draw goes by place, not by id.
    renamed = draw_sample(_population(SIZES, prefix="other"), 400, seed=41, minimum=5)
    assert [(c.module, c.start) for c in renamed] == [(c.module, c.start) for c in first]
    assert draw_sample(population, 400, seed=42, minimum=5) != first
    assert Counter(c.module for c in first) == allocate(SIZES, 400, 5)


def test_a_module_draws_from_its_own_stream():
    """A change to one module's mutants leaves the others' picks alone while their shares stay."""
    before = draw_sample(_population(SIZES), 400, seed=41, minimum=5)
    changed = _population(SIZES)
    changed = [c if c.module != "a.py" or c.occurrence != 0 else Candidate(c.job_id, c.module, "core/AddNot", 0,
                                                                            c.start, c.end) for c in changed]
    after = draw_sample(changed, 400, seed=41, minimum=5)
    assert [c for c in before if c.module != "a.py"] == [c for c in after if c.module != "a.py"]


# -- the filter of annotations -----------------------------------------------------------------

ANNOTATED = textwrap.dedent('''\
    from __future__ import annotations

    LIMIT: int | None = 3


    def f(x: int | None = 1 | 2, *, é: str | bytes = "") -> list[int] | None:
        y: dict[str, int] | None = None
        return [x | 4]
    ''')


def _find(source: str, line: int, text: str, nth: int = 0) -> tuple[tuple[int, int], tuple[int, int]]:
    column = -1
    for _ in range(nth + 1):
        column = source.splitlines()[line - 1].index(text, column + 1)
    return (line, column), (line, column + len(text))


def test_annotations_are_found_and_the_code_around_them_is_not():
    spans = annotation_spans(ANNOTATED)
    inside = [_find(ANNOTATED, 3, "|"), _find(ANNOTATED, 6, "|"), _find(ANNOTATED, 6, "|", 2),
              _find(ANNOTATED, 6, "|", 3), _find(ANNOTATED, 7, "|")]
    # The default value of x and the returned expression are code; the line with "é" has a
    # two-byte character before the return annotation, which ast counts in bytes.
    outside = [_find(ANNOTATED, 6, "|", 1), _find(ANNOTATED, 8, "|"), _find(ANNOTATED, 3, "3")]
    assert all(in_spans(start, end, spans) for start, end in inside)
    assert not any(in_spans(start, end, spans) for start, end in outside)


def test_annotations_are_code_without_the_future_import_or_where_something_reads_them():
    assert annotation_spans(ANNOTATED.replace("from __future__ import annotations", "")) == []
    assert annotation_spans(ANNOTATED + "import pydantic\n") == []
    assert annotation_spans(ANNOTATED + "from typing import get_type_hints\n") == []


# -- stable ids --------------------------------------------------------------------------------

SOURCE = textwrap.dedent('''\
    class Pool:
        @property
        def size(self):
            return self.n + 1

        def grow(self):
            self.n = self.n + 1
            self.n = self.n + 1
    ''')


def _candidates_of(source: str) -> list[Candidate]:
    line = source.splitlines().index("        return self.n + 1") + 1
    grow = [i + 1 for i, t in enumerate(source.splitlines()) if t == "        self.n = self.n + 1"]
    scope = scope_of(source)
    out = [Candidate("add-1", "m.py", "core/NumberReplacer", 0, (line, 23), (line, 24), scope(line)),
           Candidate("add-2", "m.py", "core/NumberReplacer", 1, (line, 23), (line, 24), scope(line))]
    for k, g in enumerate(grow):
        out.append(Candidate(f"grow-{k}", "m.py", "core/ReplaceBinaryOperator_Add_Sub", k, (g, 24), (g, 25), scope(g)))
    return out


def test_ids_survive_edits_elsewhere_and_tell_variants_and_twins_apart():
    ids = assign_ids(_candidates_of(SOURCE), {"m.py": SOURCE})
    assert len(set(ids.values())) == 4
    assert ids["add-1"].startswith("m.py:NumberReplacer:")
    assert ids["grow-1"] == ids["grow-0"] + "-2"  # the same line twice in one function
    edited = "import os\n\n\n" + SOURCE.replace("    def grow", "    def other(self):\n        pass\n\n    def grow")
    assert assign_ids(_candidates_of(edited), {"m.py": edited}) == ids


def test_a_decorator_belongs_to_what_it_decorates():
    scope = scope_of(SOURCE)
    assert (scope(1), scope(2), scope(4), scope(7)) == ("Pool", "Pool.size", "Pool.size", "Pool.grow")


# -- the private copy --------------------------------------------------------------------------


def test_paths_map_between_the_repository_and_the_installed_layout():
    dirs = {"pjrt_hub": "pjrt_hub", "pjrt_hub.backends": "backends", "pjrt_hub.abi": "abi"}
    assert copy_path("backends/cpu_runtime/_api.py", dirs) == "pjrt_hub/backends/cpu_runtime/_api.py"
    assert copy_path("pjrt_hub/testing/toy.py", dirs) == "pjrt_hub/testing/toy.py"
    for path in ("backends/reference/plugin.py", "abi/binding.py", "pjrt_hub/cli.py"):
        assert repo_path(copy_path(path, dirs), dirs) == path


def test_the_copy_imports_as_the_package_with_its_own_entry_points(tmp_path):
    source = tmp_path / "src"
    (source / "core").mkdir(parents=True)
    (source / "plugins" / "inner").mkdir(parents=True)
    (source / "pyproject.toml").write_text(textwrap.dedent('''\
        [project]
        name = "fake-hub"
        version = "1.2.3"
        [project.entry-points."fake_hub.plugins"]
        inner = "fake_hub.plugins.inner.mod"
        [tool.setuptools]
        package-dir = { "fake_hub" = "core", "fake_hub.plugins" = "plugins" }
        '''))
    (source / "core" / "__init__.py").write_text("")
    (source / "plugins" / "__init__.py").write_text("")
    (source / "plugins" / "inner" / "__init__.py").write_text("")
    (source / "plugins" / "inner" / "mod.py").write_text("VALUE = 7\n")
    copy = tmp_path / "copy"
    make_copy(source, copy, ["plugins/inner"])
    assert (copy / "fake_hub" / "plugins" / "inner" / "mod.py").is_file()
    # The mutated modules have no bytecode a mutant could be mistaken for; the others do.
    assert not list((copy / "fake_hub" / "plugins" / "inner").rglob("*.pyc"))
    assert list((copy / "fake_hub" / "plugins").glob("__pycache__/__init__.*.pyc"))
    probe = ("import importlib.metadata as md, json; "
             "(ep,) = md.entry_points(group='fake_hub.plugins'); "
             "print(json.dumps([ep.load().VALUE, md.version('fake-hub')]))")
    out = subprocess.run([sys.executable, "-c", probe], env={"PYTHONPATH": str(copy)}, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == [7, "1.2.3"]


# -- reasons and the report --------------------------------------------------------------------


def _result(i: int, outcome: Outcome, module: str = "backends/cpu_runtime/_api.py") -> MutantResult:
    return MutantResult(id=f"{module}:AddNot:{i:010x}", module=module, operator="core/AddNot", occurrence=i,
                        line=10 + i, outcome=outcome, diff=f"-    if x{i}:\n+    if not x{i}:")


def _report(results, reasons=()):
    per_module = Counter(r.module for r in results)
    return build_report(results=results, per_module={m: (10 * n, n) for m, n in per_module.items()},
                        reasons={r.id: r for r in reasons}, tool="cosmic-ray", tool_version="8.7.0", seed=41,
                        sample_size=len(results), min_per_module=5, population=1000, filtered_annotations=100,
                        targets=list(TARGETS), test_command="pjrt-hub conformance --plugin reference",
                        timeout_s=60.0, baseline_s=9.0, workers=2, source="/src")


def test_the_threshold_and_the_survivors_decide_the_verdict():
    killed = [_result(i, Outcome.KILLED) for i in range(17)] + [_result(17, Outcome.TIMEOUT)]
    survivors = [_result(18, Outcome.SURVIVED), _result(19, Outcome.SURVIVED, "backends/reference/compiler.py")]
    report = _report(killed + survivors)
    assert (report.killed, report.tested, report.kill_rate) == (18, 20, 0.9)
    assert not report.ok and [m.id for m in report.unexplained] == [s.id for s in survivors]

    explained = [Reason(survivors[0].id, ExplainedKind.EQUIVALENT, "the same value either way"),
                 Reason(survivors[1].id, ExplainedKind.UNTESTABLE, "only a message changes")]
    report = _report(killed + survivors, explained)
    assert report.ok and report.problems == []
    assert report.equivalent == 1 and report.score_without_equivalents == pytest.approx(18 / 19)
    by_module = {m.module: m for m in report.modules}
    assert (by_module["backends/cpu_runtime/_api.py"].killed, by_module["backends/cpu_runtime/_api.py"].timeouts,
            by_module["backends/cpu_runtime/_api.py"].survived) == (17, 1, 1)
    assert by_module["backends/reference/compiler.py"].kill_rate == 0.0

    # One more survivor: 18/21 is under 90%, however well explained.
    extra = _result(20, Outcome.SURVIVED)
    report = _report(killed + survivors + [extra], explained + [Reason(extra.id, ExplainedKind.EQUIVALENT, "x")])
    assert not report.ok and report.problems == ["kill rate 85.7% is under 90%"]


def test_a_known_gap_an_error_and_a_stale_reason_are_reported():
    results = [_result(i, Outcome.KILLED) for i in range(30)]
    gap, error = _result(30, Outcome.SURVIVED), _result(31, Outcome.ERROR)
    reasons = [Reason(gap.id, ExplainedKind.GAP, "no case destroys a client twice"),
               Reason(results[0].id, ExplainedKind.EQUIVALENT, "it was, once")]
    report = _report(results + [gap, error], reasons)
    assert report.problems == ["1 survivors are recorded gaps of the suite", "1 mutants could not be tested"]
    assert report.stale_reasons == [results[0].id]
    text = render_markdown(report)
    assert f"### gap: `{gap.id}`" in text and "no case destroys a client twice" in text
    assert "+    if not x30:" in text and "## Not tested" in text and results[0].id in text
    unexplained = render_markdown(_report(results + [gap]))
    assert f"### UNEXPLAINED: `{gap.id}`" in unexplained


def test_rereport_applies_the_reasons_as_they_are_now(tmp_path, capsys):
    survivor = _result(9, Outcome.SURVIVED)
    before = _report([_result(i, Outcome.KILLED) for i in range(9)] + [survivor])
    (tmp_path / "mutation.json").write_text(before.model_dump_json())
    reasons = tmp_path / "reasons.toml"
    reasons.write_text("")
    args = ["--rereport", str(tmp_path / "mutation.json"), "--reasons", str(reasons), "--output", str(tmp_path / "out")]
    assert main(args) == 1
    reasons.write_text(f'[[survivor]]\nid = "{survivor.id}"\nkind = "untestable"\nreason = "a log line"\n')
    assert main(args) == 0
    again = json.loads((tmp_path / "out" / "mutation.json").read_text())
    assert [m["explanation"] for m in again["mutants"] if m["outcome"] == "survived"] == ["untestable"]
    assert "a log line" in (tmp_path / "out" / "mutation.md").read_text()


def test_the_shipped_reasons_are_well_formed(tmp_path):
    reasons = load_reasons(REASONS)
    for r in reasons.values():
        module, operator, digest = r.id.split(":")
        assert any(module == t or module.startswith(t + "/") for t in TARGETS), r.id
        assert operator and len(digest.split("-")[0]) == 10, r.id
    bad = tmp_path / "bad.toml"
    bad.write_text('[[survivor]]\nid = "x"\nkind = "harmless"\nreason = "r"\n')
    with pytest.raises(ValueError, match="needs id, a kind"):
        load_reasons(bad)
    bad.write_text('[[survivor]]\nid = "x"\nkind = "gap"\nreason = "r"\n' * 2)
    with pytest.raises(ValueError, match="listed twice"):
        load_reasons(bad)


def test_tox_and_the_weekly_workflow_run_it():
    import configparser

    import yaml

    root = Path(__file__).resolve().parents[2]
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(root / "tox.ini")
    assert tox["testenv:mutation"]["extras"].strip() == "mutation"
    assert tox["testenv:mutation"]["commands"].strip() == "python -m tests.mutation {posargs}"
    workflow = yaml.safe_load((root / ".github" / "workflows" / "mutation.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key "on" as true
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    commands = [s.get("run", "") for s in workflow["jobs"]["mutation"]["steps"]]
    assert any(c.startswith("tox -e mutation --") and "--output mutation-out" in c for c in commands)
