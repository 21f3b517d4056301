"""The probe against fake plugins built here with a C compiler: every way a ``.so`` can go wrong
is reported as an outcome, and the test process survives all of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pjrt_hub.backends.c_api import probe
from pjrt_hub.backends.c_api.elf import NotElfError, read_elf
from pjrt_hub.backends.c_api.probe import resolve_library

from .fakes import fake


def test_a_well_formed_fake_is_read_completely(build_so):
    report = probe(fake(build_so, "fake81"), timeout=30)
    assert report.outcome == "ok", report
    assert (report.api_version, report.api_struct_size, report.num_slots) == ("0.81", 984, 118)
    assert report.expected_slots == 118 and report.version_struct_size == 24
    assert report.null_functions == ["PJRT_Event_Error"]
    assert "PJRT_Plugin_Attributes" in report.functions and len(report.functions) == 117
    assert report.extension_layout == "struct_size_type_next"
    assert [(e.type, e.name, e.struct_size) for e in report.extensions] == [(19, "Shardings", 40), (4, "Layouts", 24)]
    assert report.attributes == {"xla_version": 2, "stablehlo_current_version": [1, 13, 3],
                                 "platform": "fakecpu", "speed": 1.5, "fake": True}
    assert report.exports == ["GetPjrtApi"] and report.stage == "done"
    assert not report.warnings


def test_pre_045_extension_nodes_are_read_without_struct_size(build_so):
    report = probe(fake(build_so, "fake40", "MINOR=40", "NSLOTS=96"), timeout=30)
    assert report.outcome == "ok", report
    assert report.extension_layout == "type_next"
    assert [(e.type, e.name, e.struct_size) for e in report.extensions] == [(0, "Gpu_Custom_Call", None),
                                                                            (1, "Profiler", None)]
    assert any("stale PJRT_Api.struct_size" in w for w in report.warnings)


def test_a_cyclic_or_wild_extension_chain_stops_the_walk_not_the_probe(build_so):
    cyclic = probe(fake(build_so, "cycle", "CYCLE"), timeout=30)
    assert cyclic.outcome == "ok" and len(cyclic.extensions) == 2
    assert "loops back" in cyclic.extension_walk_stopped
    wild = probe(fake(build_so, "wild", "WILD_NEXT"), timeout=30)
    assert wild.outcome == "ok" and len(wild.extensions) == 2
    assert "not readable" in wild.extension_walk_stopped


def test_abort_in_GetPjrtApi_is_reported_as_aborted(build_so):
    report = probe(fake(build_so, "aborts", "ABORT"), timeout=30)
    assert report.outcome == "aborted" and report.signal == "SIGABRT"
    assert report.stage == "GetPjrtApi" and "during GetPjrtApi" in report.reason
    assert report.stderr_highlights[0] == "F0000 fake_plugin.cc:1] Check failed: chips > 0"


def test_abort_in_a_static_initializer_is_caught_at_dlopen(build_so):
    report = probe(fake(build_so, "ctor", "CTOR_ABORT"), timeout=30)
    assert (report.outcome, report.stage) == ("aborted", "dlopen")


def test_segfault_is_reported_with_its_signal(build_so):
    report = probe(fake(build_so, "segv", "SEGV"), timeout=30)
    assert report.outcome == "crashed" and report.signal == "SIGSEGV"


def test_a_hanging_plugin_times_out(build_so):
    report = probe(fake(build_so, "hang", "HANG"), timeout=3)
    assert report.outcome == "timed_out" and report.stage == "GetPjrtApi"
    assert "3 s" in report.reason


def test_null_api_and_garbage_headers_are_bad_layouts(build_so):
    null = probe(fake(build_so, "null", "RETURN_NULL"), timeout=30)
    assert null.outcome == "bad_layout" and "NULL" in null.reason
    version = probe(fake(build_so, "badversion", "MAJOR_VALUE=-3"), timeout=30)
    assert version.outcome == "bad_layout" and "garbage" in version.reason
    size = probe(fake(build_so, "badsize", "API_SIZE=1001"), timeout=30)
    assert size.outcome == "bad_layout" and "struct_size is 1001" in size.reason


def test_a_library_without_GetPjrtApi_has_no_symbol(build_so):
    path = build_so("nosym", "int not_a_plugin(void) { return 1; }\n")
    report = probe(path, timeout=30)
    assert report.outcome == "no_symbol" and "GetPjrtApi" in report.reason
    assert report.exports == []


def test_a_missing_dependency_is_the_loaders_message(build_so, tmp_path: Path):
    dep = build_so("pjrthubdep", "int dep(void) { return 1; }\n")
    path = build_so("needsdep", "int dep(void);\nconst void* GetPjrtApi(void) { dep(); return 0; }\n",
                    f"-L{tmp_path}", "-lpjrthubdep")
    os.remove(dep)
    report = probe(path, timeout=30)
    assert report.outcome == "load_failed"
    assert "libpjrthubdep.so: cannot open shared object file" in report.reason
    assert "libpjrthubdep.so" in report.needed


def test_elf_reader_and_library_resolution(build_so, tmp_path: Path):
    path = fake(build_so, "resolve")
    info = read_elf(path)
    assert info.exports_pjrt() and "libc.so.6" in info.needed
    assert resolve_library(str(tmp_path)) == path  # the one library exporting GetPjrtApi
    (tmp_path / "notes.so.txt").write_text("not a library")
    with pytest.raises(NotElfError):
        read_elf(str(tmp_path / "notes.so.txt"))
    fake(build_so, "second")
    with pytest.raises(FileNotFoundError, match="several libraries"):
        resolve_library(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="neither a file"):
        resolve_library("no_such_plugin_package_xyz")
