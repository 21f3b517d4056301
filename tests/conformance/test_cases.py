"""The cases are data: well-formed, grouped like upstream's tests, and versioned by a hash."""

from __future__ import annotations

import dataclasses

from pjrt_hub.abi import api_methods, binding
from pjrt_hub.testing import CASES, GROUPS, suite_version
from pjrt_hub.testing._case import Case, case as register_case
from pjrt_hub.testing._programs import load_corpus


def test_every_case_is_well_formed():
    assert len(CASES) > 100
    for case_id, item in CASES.items():
        assert case_id == f"{item.group}/{item.name}"
        assert item.group in GROUPS
        assert item.description, case_id
        assert item.kind in ("python", "c", "both")
        assert item.timeout > 0
    assert {c.group for c in CASES.values()} == set(GROUPS)


def test_upstream_tests_have_their_counterparts():
    for case_id in ("version/api_version", "plugin/attributes", "client/lookup_device_negative_id",
                    "client/lookup_device_out_of_range_id", "client/default_device_assignment",
                    "buffers/decrease_reference_count_returns_error", "buffers/is_deleted", "buffers/ready_event",
                    "transfers/immutable_until_transfer_completes", "compile/invalid_option",
                    "compile/invalid_program_format", "abi/api_struct_size", "events/on_ready_fires_once"):
        assert case_id in CASES


def test_every_corpus_program_and_every_newer_call_has_a_case():
    corpus = load_corpus()
    assert len(corpus) >= 20
    for program in corpus:
        assert f"execute/corpus_{program.name}" in CASES
    for cls in (binding.Client, binding.Device, binding.Memory, binding.Buffer, binding.Executable,
                binding.LoadedExecutable, binding.Api):
        for name, info in api_methods(cls).items():
            if info.since:
                item = CASES[f"version/implements_{cls.__name__}.{name}"]
                assert item.min_api_minor == info.since and item.kind == "python"


def test_the_suite_version_is_a_hash_of_the_definitions():
    first = suite_version()
    assert first == suite_version() and len(first) == 16
    changed = dict(CASES)
    key = "client/process_index"
    changed[key] = dataclasses.replace(CASES[key], min_api_minor=99)
    assert suite_version(changed) != first
    fewer = {k: v for k, v in CASES.items() if k != key}
    assert suite_version(fewer) != first


def test_the_suite_version_changes_with_the_limitations_table(monkeypatch):
    # Matrix cells are cached by suite version: a new limitation must not leave old verdicts.
    import inspect

    from pjrt_hub.testing import _limitations

    first = suite_version()
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda obj: real(obj) + ("# edited" if obj is _limitations else ""))
    assert suite_version() != first


def test_a_case_in_an_unknown_group_or_twice_is_refused():
    import pytest

    with pytest.raises(ValueError, match="unknown group 'gpu'"):
        register_case("gpu")(lambda ctx: None)
    with pytest.raises(ValueError, match="defined twice"):
        register_case("client", "process_index")(lambda ctx: None)
    assert isinstance(CASES["client/process_index"], Case)
