"""The release atlas (pjrt_hub.atlas): dating minors from releases, the version policy's window
over those dates, the choice of the wheel to measure, the whole refresh path against a package
index served from this process (wheels built around fake C plugins, probed for real), writing
the atlas file, and ``pjrt-hub atlas``. Nothing here touches the network or the user's cache.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import re
import struct
import zipfile
from pathlib import Path
from typing import Iterator

import pytest

from pjrt_hub import Policy, judge
from pjrt_hub.abi import ApiVersion, history
from pjrt_hub.atlas import (ATLAS_FORMAT, AtlasFile, MinorDates, PluginRelease, Store, date_minors, refresh,
                            write_atlas)
from pjrt_hub.atlas._index import IndexFile, choose_wheel
from pjrt_hub.cli import main

from .atlas_helpers import (FakeIndex, compile_fake_plugin, compile_library, linux_wheel_name, macos_wheel_name,
                            utc, wheel)

V = ApiVersion.parse
PKG = "fakepkg"


def release(minor: int, uploaded: str, *, package: str = "jax-fake-pjrt", version: str = "1.0",
            yanked: bool = False) -> PluginRelease:
    return PluginRelease(package=package, version=version, uploaded=utc(uploaded), yanked=yanked,
                         outcome="measured", pjrt_api=f"0.{minor}")


def day(text: str) -> dt.date:
    return dt.date.fromisoformat(text)


# -- dating the minors ------------------------------------------------------------------------


def test_a_changelog_date_wins_over_an_index_date():
    # 0.40 is dated 2023-11-27 by the changelog; a release reporting it later does not move it.
    dates = date_minors([release(40, "2023-12-05")])
    entry = dates.get(40)
    assert (entry.source, entry.date) == ("changelog", history.release(40).date)
    assert entry.date == day("2023-11-27")


def test_a_minor_only_releases_report_is_dated_by_its_earliest_upload():
    dates = date_minors([release(60, "2024-12-10", package="late-pkg", version="3.0"),
                         release(60, "2024-12-01T23:30", package="early-pkg", version="2.0"),
                         release(61, "2024-12-20")])
    entry = dates.get(60)
    assert (entry.source, entry.date, entry.earliest, entry.latest) == ("index", day("2024-12-01"),
                                                                        day("2024-12-01"), day("2024-12-01"))
    assert "early-pkg 2.0" in entry.evidence and "late-pkg" not in entry.evidence


def test_a_yanked_release_dates_nothing():
    alone = date_minors([release(60, "2024-12-01", yanked=True)])
    assert alone.get(60).source == "bounded"
    # Beside a release that is not yanked, the yanked one's earlier upload does not count either.
    both = date_minors([release(60, "2024-12-01", yanked=True, version="0.9"), release(60, "2024-12-15")])
    assert (both.get(60).source, both.get(60).date) == ("index", day("2024-12-15"))


def test_a_minor_first_uploaded_after_a_newer_one_is_only_bounded():
    # xla-cpu-pjrt 0.0.1 at 0.81 came long after newer minors: its upload is no date for 0.81.
    dates = date_minors([release(81, "2025-03-01", package="xla-cpu-pjrt", version="0.0.1"),
                         release(90, "2025-01-15")])
    entry = dates.get(81)
    assert entry.source == "bounded" and entry.date is None
    assert entry.latest is not None and entry.latest <= day("2025-01-15")
    assert entry.earliest == day("2024-11-11")  # 0.56, the newest changelog date below
    assert "xla-cpu-pjrt 0.0.1" in entry.evidence
    assert dates.get(90).source == "index"


def test_a_minor_no_release_reports_lies_between_its_dated_neighbours():
    dates = date_minors([release(60, "2024-12-01"), release(70, "2025-02-01")])
    between = dates.get(65)
    assert (between.source, between.date, between.earliest, between.latest) == (
        "bounded", None, day("2024-12-01"), day("2025-02-01"))
    # The changelog's dates are neighbours too: 0.57 after 0.56 (changelog), before 0.60 (index).
    assert (dates.get(57).earliest, dates.get(57).latest) == (day("2024-11-11"), day("2024-12-01"))
    assert (dates.get(51).earliest, dates.get(51).latest) == (day("2024-04-26"), day("2024-11-11"))
    # Past the newest dated minor the range is open above.
    assert (dates.get(80).earliest, dates.get(80).latest) == (day("2025-02-01"), None)


def test_minors_newer_than_the_history_extend_the_range():
    newest = history.NEWEST_KNOWN.minor
    dates = date_minors([release(newest + 1, "2025-06-01")])
    assert len(dates) == newest + 1 - history.OLDEST_KNOWN.minor + 1
    assert (dates.get(newest + 1).source, dates.get(newest + 1).date) == ("index", day("2025-06-01"))
    assert dates.get(newest).latest == day("2025-06-01")
    assert dates.get(newest + 2) is None
    wider = date_minors([release(newest + 1, "2025-06-01")], newest=newest + 3)
    assert (wider.get(newest + 3).source, wider.get(newest + 3).earliest, wider.get(newest + 3).latest) == (
        "bounded", day("2025-06-01"), None)


def test_counts_are_minors_per_source():
    total = history.NEWEST_KNOWN.minor - history.OLDEST_KNOWN.minor + 1
    in_changelog = sum(1 for m in range(history.OLDEST_KNOWN.minor, history.NEWEST_KNOWN.minor + 1)
                       if history.release(m) is not None and history.release(m).date is not None)
    assert in_changelog >= 23  # 0.29-0.50 and 0.56 at least
    assert date_minors().counts() == {"changelog": in_changelog, "index": 0, "bounded": total - in_changelog}
    dated = date_minors([release(60, "2024-12-01"), release(70, "2025-02-01"), release(40, "2023-12-05")])
    assert dated.counts() == {"changelog": in_changelog, "index": 2, "bounded": total - in_changelog - 2}


def test_dates_only_go_forward_with_the_minor():
    # A release reporting 0.57 uploaded before 0.56's changelog date cannot date 0.57.
    dates = date_minors([release(57, "2024-10-01")])
    earliest = [(d.minor, d.earliest) for d in dates if d.earliest is not None]
    backwards = [(a, b) for a, b in zip(earliest, earliest[1:]) if b[1] < a[1]]
    assert not backwards, f"earliest dates go backwards: {backwards}"


# -- the version policy over explicit dates ---------------------------------------------------


def dated(**minors: str) -> MinorDates:
    """Dates from releases reporting ``m82="2025-01-01"`` etc. (index dates, exact)."""
    return date_minors([release(int(k[1:]), v, version=k) for k, v in minors.items()])


def verdict(dates: MinorDates, weeks: int = 6):
    return judge(V("0.81"), Policy(framework=V("0.117"), dates=dates, window_weeks=weeks), kind="c")


def suggested_weeks(reasons: tuple[str, ...]) -> int:
    found = re.search(r"--window-weeks (\d+)", " ".join(reasons))
    assert found, reasons
    return int(found.group(1))


def test_a_plugin_superseded_long_before_the_framework_is_refused_with_a_window_that_fits():
    dates = dated(m82="2025-01-01", m117="2025-06-01")  # 151 days apart
    refused = verdict(dates)
    assert (refused.accepted, refused.rule) == (False, "window")
    text = " ".join(refused.reasons)
    assert "2025-01-01" in text and "2025-06-01" in text
    weeks = suggested_weeks(refused.reasons)
    assert verdict(dates, weeks).accepted and verdict(dates, weeks).rule == "window"
    # The suggestion is the narrowest window that accepts it.
    assert (verdict(dates, weeks - 1).accepted, verdict(dates, weeks - 1).rule) == (False, "window")


def test_a_plugin_superseded_inside_the_window_is_accepted():
    accepted = verdict(dated(m82="2025-05-01", m117="2025-06-01"))
    assert (accepted.accepted, accepted.rule) == (True, "window")


def test_bounds_that_leave_the_window_open_accept_under_the_floor():
    # 0.82 lies between 2025-01-01 (0.81) and 2025-05-15 (0.83); the window opens 2025-04-20.
    open_case = verdict(dated(m81="2025-01-01", m83="2025-05-15", m117="2025-06-01"))
    assert (open_case.accepted, open_case.rule) == (True, "window-bounded")
    # Bounds that put 0.82 certainly before the window refuse, and the suggestion still accepts.
    dates = dated(m81="2024-12-01", m83="2025-01-01", m117="2025-06-01")
    refused = verdict(dates)
    assert (refused.accepted, refused.rule) == (False, "window")
    assert verdict(dates, suggested_weeks(refused.reasons)).accepted


def test_the_window_edge_superseded_exactly_n_weeks_before_is_outside():
    fw = (day("2025-01-01") + dt.timedelta(weeks=10)).isoformat()
    dates = dated(m82="2025-01-01", m117=fw)
    at_edge = verdict(dates, 10)
    assert (at_edge.accepted, at_edge.rule) == (False, "window")
    assert suggested_weeks(at_edge.reasons) == 11
    assert (verdict(dates, 11).accepted, verdict(dates, 11).rule) == (True, "window")


# -- choosing the wheel -----------------------------------------------------------------------


def index_file(filename: str, size: int) -> IndexFile:
    return IndexFile(filename, f"https://example.invalid/{filename}", None, size, None)


LINUX = "manylinux_2_17_x86_64.manylinux2014_x86_64"


def test_choose_wheel_prefers_py3_then_cp311_then_the_smallest():
    files = [index_file("p-1.0.tar.gz", 1), index_file("p-1.0-py3-none-macosx_11_0_arm64.whl", 2),
             index_file("p-1.0-py3-none-manylinux2014_aarch64.whl", 3),
             index_file(f"p-1.0-cp312-cp312-{LINUX}.whl", 10), index_file(f"p-1.0-cp310-cp310-{LINUX}.whl", 5),
             index_file(f"p-1.0-cp311-cp311-{LINUX}.whl", 50), index_file(f"p-1.0-py3-none-{LINUX}.whl", 100),
             index_file("p-1.0-py3-none-manylinux_2_27_x86_64.whl", 90)]
    assert choose_wheel(files).filename == "p-1.0-py3-none-manylinux_2_27_x86_64.whl"
    no_py3 = [f for f in files if "-py3-" not in f.filename or "macosx" in f.filename or "aarch64" in f.filename]
    assert choose_wheel(no_py3).filename == f"p-1.0-cp311-cp311-{LINUX}.whl"
    others = [f for f in no_py3 if "cp311" not in f.filename]
    assert choose_wheel(others).filename == f"p-1.0-cp310-cp310-{LINUX}.whl"


def test_choose_wheel_finds_nothing_without_an_x86_64_linux_wheel():
    assert choose_wheel([index_file("p-1.0-py3-none-macosx_11_0_arm64.whl", 1),
                         index_file("p-1.0-cp311-cp311-manylinux2014_aarch64.whl", 1)]) is None
    assert choose_wheel([index_file("p-1.0.tar.gz", 1)]) is None
    assert choose_wheel([]) is None


# -- the refresh path, against an index served here -------------------------------------------


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's cache is its own: the atlas store, wheels and work folders never reach ~/.cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv("PJRT_HUB_CACHE", str(root))
    return root


@pytest.fixture(scope="module")
def plugin_library(cc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake PJRT plugin at 0.90 (built once: every wheel of the module carries the same one)."""
    return compile_fake_plugin(cc, tmp_path_factory.mktemp("plugin"), "fake90", "MINOR=90")


@pytest.fixture(scope="module")
def plain_library(cc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared library that is no plugin: it exports no GetPjrtApi."""
    return compile_library(cc, tmp_path_factory.mktemp("plain"), "plain", "int helper(void) { return 1; }\n")


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    served = FakeIndex()
    yield served
    served.close()


def test_refresh_measures_every_release_then_reuses_them(index, plugin_library, tmp_path):
    first = wheel(plugin_library, header_minor=77)  # the library's own answer wins over the header
    digest = index.add(PKG, "1.0", linux_wheel_name(PKG, "1.0"), first, uploaded="2025-01-10T08:00:00")
    # The release's upload time is its first file's, here the macOS wheel's.
    index.add(PKG, "1.0", macos_wheel_name(PKG, "1.0"), b"not measured", uploaded="2025-01-09T20:00:00")
    index.add(PKG, "1.1", linux_wheel_name(PKG, "1.1"), wheel(plugin_library), uploaded="2025-02-01T00:00:00")
    store = Store(tmp_path / "atlas")

    report = refresh([PKG], index=index.url, store=store, jobs=2)
    assert report.errors == []
    assert (report.measured, report.reused) == (2, 0)
    by_version = {r.version: r for r in report.releases}
    one = by_version["1.0"]
    assert (one.outcome, one.pjrt_api, one.api_struct_size) == ("measured", "0.90", 40 + 8 * 118)
    assert one.extensions == ["Shardings:40", "Layouts:24"]  # the fake's chain at a minor >= 45
    assert one.requires == ["jax>=0.4.30"]
    assert one.uploaded == utc("2025-01-09T20:00:00")
    assert (one.artifact, one.sha256, one.size) == (linux_wheel_name(PKG, "1.0"), digest, len(first))
    assert one.library == "jax_plugins/fake/fake_plugin.so"
    assert by_version["1.1"].uploaded == utc("2025-02-01T00:00:00")
    assert report.downloaded_bytes == len(first) + len(index.files[linux_wheel_name(PKG, "1.1")])
    assert sorted(r.version for r in store.all()) == ["1.0", "1.1"]

    downloads = len(index.wheel_downloads())
    again = refresh([PKG], index=index.url, store=store, jobs=2)
    assert (again.measured, again.reused, again.errors, again.downloaded_bytes) == (0, 2, [], 0)
    assert len(index.wheel_downloads()) == downloads
    assert {r.version: r for r in again.releases}["1.0"] == one


def test_a_wheel_whose_digest_does_not_match_is_an_error_and_tried_again(index, plugin_library, tmp_path):
    data = wheel(plugin_library)
    index.add(PKG, "1.0", linux_wheel_name(PKG, "1.0"), data, uploaded="2025-01-10T08:00:00",
              sha256=hashlib.sha256(b"another wheel").hexdigest())
    store = Store(tmp_path / "atlas")
    report = refresh([PKG], index=index.url, store=store)
    assert report.measured == 0 and [(p, v) for p, v, _ in report.errors] == [(PKG, "1.0")]
    assert store.get(PKG, "1.0") is None
    # Not stored, so the next run tries again: with the digest right it is measured.
    index.add(PKG, "1.0", linux_wheel_name(PKG, "1.0"), data, uploaded="2025-01-10T08:00:00")
    retried = refresh([PKG], index=index.url, store=store)
    assert (retried.measured, retried.errors) == (1, [])
    assert store.get(PKG, "1.0").outcome == "measured"


def test_a_wheel_without_a_plugin_library_says_so_or_reads_its_header(index, plain_library, tmp_path):
    index.add(PKG, "1.0", linux_wheel_name(PKG, "1.0"), wheel(plain_library), uploaded="2025-01-10T08:00:00")
    index.add(PKG, "2.0", linux_wheel_name(PKG, "2.0"), wheel(plain_library, header_minor=77),
              uploaded="2025-02-10T08:00:00")
    report = refresh([PKG], index=index.url, store=Store(tmp_path / "atlas"))
    assert report.errors == []
    by_version = {r.version: r for r in report.releases}
    assert (by_version["1.0"].outcome, by_version["1.0"].pjrt_api) == ("no_library", None)
    assert (by_version["2.0"].outcome, by_version["2.0"].pjrt_api) == ("header_only", "0.77")
    assert by_version["2.0"].requires == ["jax>=0.4.30"]


def test_a_release_without_a_linux_wheel_is_no_wheel_and_downloads_nothing(index, tmp_path):
    index.add(PKG, "1.0", macos_wheel_name(PKG, "1.0"), b"macOS only", uploaded="2025-01-10T08:00:00",
              yanked=True)
    report = refresh([PKG], index=index.url, store=Store(tmp_path / "atlas"))
    assert report.errors == [] and report.measured == 1
    (only,) = report.releases
    assert (only.outcome, only.yanked, only.pjrt_api) == ("no_wheel", True, None)
    assert index.wheel_downloads() == []


def test_an_unknown_package_is_an_error_naming_it(index, tmp_path):
    report = refresh(["nosuch-pjrt"], index=index.url, store=Store(tmp_path / "atlas"))
    assert report.measured == 0 and report.releases == []
    (error,) = report.errors
    assert error[:2] == ("nosuch-pjrt", "") and "nosuch-pjrt" in error[2]


def test_a_truncated_wheel_is_an_error_and_not_stored(index, plugin_library, tmp_path):
    data = wheel(plugin_library)
    index.add(PKG, "1.0", linux_wheel_name(PKG, "1.0"), data[: len(data) // 2], uploaded="2025-01-10T08:00:00")
    store = Store(tmp_path / "atlas")
    report = refresh([PKG], index=index.url, store=store)
    assert report.measured == 0 and [(p, v) for p, v, _ in report.errors] == [(PKG, "1.0")]
    assert store.get(PKG, "1.0") is None


def corrupt_member(data: bytes, member: str) -> bytes:
    """``data`` with the compressed stream of ``member`` broken at its first byte (a deflate
    block of the reserved type): the archive's directory is intact, the member cannot be read."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(member)
    name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_length + extra_length
    return data[:start] + b"\xff" + data[start + 1:]


def test_a_wheel_with_a_corrupt_library_is_an_error_not_a_crash(index, plugin_library, tmp_path):
    # A broken deflate stream in the library (the zip's index still reads) raises zlib.error
    # while it is copied out: an error of that release, not the end of the run's report.
    data = corrupt_member(wheel(plugin_library), "jax_plugins/fake/fake_plugin.so")
    index.add(PKG, "1.0", linux_wheel_name(PKG, "1.0"), data, uploaded="2025-01-10T08:00:00")
    store = Store(tmp_path / "atlas")
    report = refresh([PKG], index=index.url, store=store)
    assert report.measured == 0 and [(p, v) for p, v, _ in report.errors] == [(PKG, "1.0")]
    assert store.get(PKG, "1.0") is None


# -- writing the atlas file -------------------------------------------------------------------


def test_write_atlas_keeps_the_releases_of_other_packages(tmp_path):
    path = tmp_path / "atlas.json"
    old = AtlasFile(format=ATLAS_FORMAT, releases=[release(81, "2024-12-01", package="other-pjrt", version="0.1"),
                              release(82, "2025-01-01", package=PKG, version="1.0")])
    write_atlas(old, path)
    new = AtlasFile(format=ATLAS_FORMAT, releases=[release(90, "2025-01-01", package=PKG, version="1.0"),
                              release(91, "2025-02-01", package=PKG, version="2.0")])
    written = write_atlas(new, path)
    on_disk = AtlasFile.model_validate_json(path.read_text())
    assert on_disk.format == ATLAS_FORMAT
    assert {(r.package, r.version, r.pjrt_api) for r in on_disk.releases} == {
        ("other-pjrt", "0.1", "0.81"), (PKG, "1.0", "0.90"), (PKG, "2.0", "0.91")}
    assert written.releases == on_disk.releases


@pytest.mark.parametrize("content", ["not an atlas\n", '{"format": "pjrt-hub.atlas/0", "releases": []}\n', "[]\n"],
                         ids=["text", "other-format", "json-list"])
def test_write_atlas_refuses_a_file_that_is_not_an_atlas(tmp_path, content):
    path = tmp_path / "atlas.json"
    path.write_text(content)
    with pytest.raises(ValueError):
        write_atlas(AtlasFile(format=ATLAS_FORMAT, releases=[release(90, "2025-01-01")]), path)
    assert path.read_text() == content


def test_write_atlas_refuses_a_json_object_that_is_not_an_atlas(tmp_path):
    # Any JSON object (a package.json, a probe report) is not an empty atlas to overwrite.
    path = tmp_path / "package.json"
    content = '{"name": "something else", "version": "1.0"}\n'
    path.write_text(content)
    with pytest.raises(ValueError):
        write_atlas(AtlasFile(format=ATLAS_FORMAT, releases=[release(90, "2025-01-01")]), path)
    assert path.read_text() == content


# -- pjrt-hub atlas ---------------------------------------------------------------------------


def test_cli_refresh_reports_what_it_measured_as_json(index, plugin_library, private_cache, capsys):
    index.add(PKG, "1.0", linux_wheel_name(PKG, "1.0"), wheel(plugin_library), uploaded="2025-01-10T08:00:00")
    index.add(PKG, "1.1", macos_wheel_name(PKG, "1.1"), b"macOS only", uploaded="2025-01-20T08:00:00")
    code = main(["atlas", "refresh", "--index", index.url, "--package", PKG, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert (report["measured"], report["reused"], report["errors"]) == (2, 0, [])
    # Measured into PJRT_HUB_CACHE, where the next process's policy finds it.
    assert Store().get(PKG, "1.0").pjrt_api == "0.90"
    assert Store().root.is_relative_to(private_cache)


def test_cli_refresh_exits_1_when_a_package_cannot_be_had(index, capsys):
    index.add(PKG, "1.0", macos_wheel_name(PKG, "1.0"), b"macOS only", uploaded="2025-01-10T08:00:00")
    code = main(["atlas", "refresh", "--index", index.url, "--package", PKG, "--package", "nosuch-pjrt", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert report["measured"] == 1 and [e["package"] for e in report["errors"]] == ["nosuch-pjrt"]


def test_cli_refresh_output_writes_the_atlas_and_refuses_a_file_that_is_not_one(index, tmp_path, capsys):
    index.add(PKG, "1.0", macos_wheel_name(PKG, "1.0"), b"macOS only", uploaded="2025-01-10T08:00:00")
    output = tmp_path / "atlas.json"
    assert main(["atlas", "refresh", "--index", index.url, "--package", PKG, "--output", str(output)]) == 0
    assert [(r.package, r.version, r.outcome) for r in AtlasFile.model_validate_json(output.read_text()).releases] \
        == [(PKG, "1.0", "no_wheel")]
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    assert main(["atlas", "refresh", "--index", index.url, "--package", PKG, "--output", str(other)]) == 3
    assert other.read_text() == "my notes\n"
    capsys.readouterr()


def test_cli_show_of_an_unknown_package_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["atlas", "show", "--package", "nosuch-pjrt"])
    assert exit_info.value.code == 2
    assert "nosuch-pjrt" in capsys.readouterr().err


# -- the shipped atlas ---------------------------------------------------------------------------


def test_the_shipped_atlas_dates_the_minors_of_the_real_cpu_plugins_and_the_framework():
    from pjrt_hub.atlas import shipped_atlas

    atlas = shipped_atlas()
    assert atlas.format == ATLAS_FORMAT and len(atlas.releases) >= 150
    for r in atlas.releases:
        assert (r.pjrt_api is not None) == (r.outcome in ("measured", "header_only")), r
        if r.outcome == "measured":
            assert r.api_struct_size and r.sha256 and r.artifact and r.uploaded, r
    packages = {r.package for r in atlas.releases}
    assert {"jax-cuda12-pjrt", "libtpu", "xla-cpu-pjrt", "jax-tt-plugin"} <= packages
    dates = date_minors(atlas.releases)
    # Every minor from the oldest to the newest has a date, or bounds on both sides.
    for d in dates:
        assert d.date is not None or (d.earliest is not None and d.latest is not None), d
    # xla-cpu-pjrt (0.81), fastatomstruct (0.106) and lammps (0.115) under 0.117, 6 and 12 weeks.
    policy = {w: Policy(framework=ApiVersion(0, 117), window_weeks=w, dates=dates) for w in (6, 12)}
    for minor, accepted in ((81, False), (106, False), (115, True)):
        for weeks in (6, 12):
            verdict = judge(ApiVersion(0, minor), policy[weeks], kind="c")
            assert (verdict.accepted, verdict.rule) == (accepted, "window"), verdict.reasons
            assert f"0.{minor + 1} (" in verdict.reasons[0] and "0.117: 20" in verdict.reasons[0]
