"""``pjrt-hub atlas show|refresh``: what the release atlas holds, and measuring it again.

``show`` prints the atlas's coverage (releases per package, and what each reports) and, with
``--minors``, the date of every minor with its source. ``refresh`` measures the releases of the
plugin packages that are not measured yet (all of them, or ``--package``), into the cache, and
with ``--output FILE`` writes the merged atlas there (how the shipped file is regenerated).

Exit status: 0 done; 1 some release or package could not be had (listed; a later refresh tries
again); 3 bad input (an ``--output`` that is not an atlas).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pjrt_hub._progress import Progress

from ._dates import date_minors
from ._index import DEFAULT_INDEX
from ._load import load_releases, shipped_atlas
from ._models import PluginRelease
from ._refresh import PLUGIN_PACKAGES, Store, refresh, write_atlas

__all__ = ["add_parser"]


class MinorDateRow(BaseModel):
    minor: str = Field(description='the minor, written like "0.81"')
    source: str = Field(description="changelog, index or bounded")
    date: dt.date | None
    earliest: dt.date | None
    latest: dt.date | None
    evidence: str


class PackageCoverage(BaseModel):
    package: str
    releases: int
    outcomes: dict[str, int] = Field(description="releases per measure outcome")
    minors: list[str] = Field(description="the minors its releases report, oldest first")
    first_upload: dt.datetime | None
    last_upload: dt.datetime | None


class AtlasShowReport(BaseModel):
    generated_at: dt.datetime | None = Field(description="when the shipped atlas was generated")
    packages: list[PackageCoverage]
    minors_by_source: dict[str, int]
    minors: list[MinorDateRow] = Field(default_factory=list, description="with --minors")
    releases: list[PluginRelease] = Field(default_factory=list, description="with --releases")


class AtlasRefreshReport(BaseModel):
    packages: list[str]
    measured: int = Field(description="releases measured in this run")
    reused: int = Field(description="releases already measured (kept in the cache)")
    errors: list[dict[str, str]] = Field(description="what could not be had; a later refresh tries again")
    downloaded_bytes: int
    seconds: float
    output: str | None = Field(description="the atlas file written (--output)")
    minors_by_source: dict[str, int]


def add_parser(sub: Any, add_output: Any) -> None:
    p = sub.add_parser("atlas", help="the release atlas: which PJRT minor each plugin release reports, and "
                                     "the minors' dates (show, refresh)")
    actions = p.add_subparsers(dest="atlas_command", required=True, metavar="ACTION")
    s = actions.add_parser("show", help="what the atlas holds: releases per package and their minors")
    s.add_argument("--package", action="append", default=[], metavar="NAME", help="only this package (repeatable)")
    s.add_argument("--minors", action="store_true", help="also every minor's date and where it comes from")
    s.add_argument("--releases", action="store_true", help="also every release")
    add_output(s)
    s.set_defaults(func=cmd_show)
    r = actions.add_parser("refresh", help="measure the plugin packages' releases from their wheels "
                                           "(downloads each wheel once; resumes where it stopped)")
    r.add_argument("--package", action="append", default=[], metavar="NAME",
                   help=f"only this package (repeatable; default: {', '.join(PLUGIN_PACKAGES)})")
    r.add_argument("--last", type=int, default=None, metavar="N", help="only each package's newest N releases")
    r.add_argument("--jobs", type=int, default=2, metavar="N", help="releases measured at once (default 2)")
    r.add_argument("--keep-wheels", action="store_true",
                   help="keep the wheels in the wheels cache (tens of GB for every package)")
    r.add_argument("--index", default=DEFAULT_INDEX, metavar="URL",
                   help=f"the package index's JSON API (default {DEFAULT_INDEX}; a mirror's, for one)")
    r.add_argument("--output", type=Path, default=None, metavar="FILE",
                   help="write the merged atlas to FILE (releases of other packages already there are kept)")
    add_output(r)
    r.set_defaults(func=cmd_refresh)


def _coverage(releases: list[PluginRelease], only: list[str]) -> list[PackageCoverage]:
    by_package: dict[str, list[PluginRelease]] = {}
    for release in releases:
        if not only or release.package in only:
            by_package.setdefault(release.package, []).append(release)
    rows = []
    for package in sorted(by_package):
        items = by_package[package]
        uploads = [r.uploaded for r in items if r.uploaded is not None]
        minors = sorted({r.minor for r in items if r.minor is not None})
        rows.append(PackageCoverage(package=package, releases=len(items),
                                    outcomes=dict(Counter(r.outcome for r in items)),
                                    minors=[f"0.{m}" for m in minors],
                                    first_upload=min(uploads) if uploads else None,
                                    last_upload=max(uploads) if uploads else None))
    return rows


def _minor_rows(releases: list[PluginRelease]) -> tuple[list[MinorDateRow], dict[str, int]]:
    dates = date_minors(releases)
    rows = [MinorDateRow(minor=f"0.{d.minor}", source=d.source, date=d.date, earliest=d.earliest,
                         latest=d.latest, evidence=d.evidence) for d in dates]
    return rows, dates.counts()


def cmd_show(args: argparse.Namespace) -> int:
    if args.schema:
        print(json.dumps(AtlasShowReport.model_json_schema(), indent=2))
        return 0
    releases = load_releases()
    unknown = [p for p in args.package if p not in {r.package for r in releases}]
    if unknown:
        from pjrt_hub.cli import _Usage

        raise _Usage(f"the atlas has no package {', '.join(unknown)} (pjrt-hub atlas refresh --package NAME "
                     f"measures one)")
    rows, counts = _minor_rows(releases)
    report = AtlasShowReport(generated_at=shipped_atlas().generated_at, packages=_coverage(releases, args.package),
                             minors_by_source=counts, minors=rows if args.minors else [],
                             releases=[r for r in releases if not args.package or r.package in args.package]
                             if args.releases else [])
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0
    print(_render_show(report))
    return 0


def _render_show(report: AtlasShowReport) -> str:
    lines = [f"{'package':<30} {'releases':>8}  {'minors reported':<28} outcomes"]
    for row in report.packages:
        minors = f"{row.minors[0]} .. {row.minors[-1]} ({len(row.minors)})" if row.minors else "-"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row.outcomes.items()))
        lines.append(f"{row.package:<30} {row.releases:>8}  {minors:<28} {outcomes}")
    total = sum(r.releases for r in report.packages)
    by = report.minors_by_source
    lines.append(f"{total} releases. Minor dates: {by.get('changelog', 0)} from the changelog, "
                 f"{by.get('index', 0)} from the package index, {by.get('bounded', 0)} bounded by their neighbours.")
    for minor in report.minors:
        when = str(minor.date) if minor.date else f"{minor.earliest or '?'} .. {minor.latest or '?'}"
        lines.append(f"  {minor.minor:<6} {minor.source:<9} {when:<24} {minor.evidence}")
    for release in report.releases:
        lines.append(f"  {release.package} {release.version}: {release.outcome} {release.pjrt_api or ''} "
                     f"{release.uploaded.date() if release.uploaded else ''} {release.reason or ''}".rstrip())
    return "\n".join(lines)


def cmd_refresh(args: argparse.Namespace) -> int:
    from pjrt_hub.cli import _Usage

    if args.schema:
        print(json.dumps(AtlasRefreshReport.model_json_schema(), indent=2))
        return 0
    if args.jobs < 1:
        raise _Usage(f"--jobs must be at least 1, got {args.jobs}")
    if args.last is not None and args.last < 1:
        raise _Usage(f"--last must be at least 1, got {args.last}")
    packages = args.package or list(PLUGIN_PACKAGES)
    progress = Progress.for_command("atlas refresh", json_output=args.json)
    with progress:
        result = refresh(packages, jobs=args.jobs, keep_wheels=args.keep_wheels, last=args.last,
                         index=args.index, store=Store(), progress=progress)
    written = None
    if args.output is not None:
        try:
            write_atlas(result.atlas(), args.output)
        except ValueError as exc:
            print(f"pjrt-hub atlas refresh: {exc}", file=sys.stderr)
            return 3
        written = str(args.output)
    _, counts = _minor_rows(load_releases())
    report = AtlasRefreshReport(packages=packages, measured=result.measured, reused=result.reused,
                                errors=[{"package": p, "version": v, "error": e} for p, v, e in result.errors],
                                downloaded_bytes=result.downloaded_bytes, seconds=round(result.seconds, 1),
                                output=written, minors_by_source=counts)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(f"{report.measured} releases measured, {report.reused} already measured; downloaded "
              f"{report.downloaded_bytes / 1e9:.2f} GB in {report.seconds:.0f} s"
              + (f"; wrote {written}" if written else ""))
        for error in report.errors:
            what = f"{error['package']} {error['version']}".strip()
            print(f"  could not measure {what}: {error['error']}")
        print(f"Minor dates: {counts['changelog']} from the changelog, {counts['index']} from the package index, "
              f"{counts['bounded']} bounded.")
    return 1 if report.errors else 0
