"""A date for every PJRT C API minor, with where it comes from.

In order of precedence:

* ``changelog``: the date upstream's ``CHANGELOG.md`` gives the minor (:mod:`pjrt_hub.abi.history`);
* ``index``: the first upload, on the package index, of a release whose library reports that
  minor (the atlas's measurements): the minor existed by then;
* ``bounded``: neither, or an index date later than a newer minor's (a package built long after
  from an old tree, as xla-cpu-pjrt 0.0.1 at 0.81): the minor lies between its nearest dated
  neighbours, which are its earliest and latest possible dates (either may be open).

Dates only go forward with the minor: the earliest date of a newer minor is never before an
older one's.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping

from pjrt_hub.abi import history

from ._models import PluginRelease

__all__ = ["MinorDate", "MinorDates", "date_minors"]

DateSource = Literal["changelog", "index", "bounded"]


@dataclass(frozen=True, slots=True)
class MinorDate:
    """When a minor appeared: exactly (``date``), or between ``earliest`` and ``latest``."""

    minor: int
    source: DateSource
    #: The minor's date where it is known (changelog, index), else None.
    date: dt.date | None
    earliest: dt.date | None
    latest: dt.date | None
    #: In words: "changelog", "first seen in jax-cuda12-pjrt 0.4.30", ...
    evidence: str

    def describe(self) -> str:
        """``2024-06-18, first seen in ...`` or ``between 2024-11-11 and 2025-01-20: no release ...``."""
        if self.date is not None:
            return f"{self.date}, {'from the changelog' if self.source == 'changelog' else self.evidence}"
        return f"{_span(self.earliest, self.latest)}: {self.evidence}"


def _span(earliest: dt.date | None, latest: dt.date | None) -> str:
    if earliest is None and latest is None:
        return "undated"
    if earliest is None:
        return f"on or before {latest}"
    if latest is None:
        return f"on or after {earliest}"
    return f"between {earliest} and {latest}"


class MinorDates:
    """The dates of minors ``0.first`` to ``0.last`` (immutable, hashable by identity of content)."""

    __slots__ = ("_entries", "_key")

    def __init__(self, entries: Mapping[int, MinorDate]) -> None:
        self._entries = dict(entries)
        self._key = tuple(sorted(self._entries.items()))

    def get(self, minor: int) -> MinorDate | None:
        return self._entries.get(minor)

    def __iter__(self):
        return iter(self._entries[m] for m in sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MinorDates) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for entry in self._entries.values():
            counts[entry.source] = counts.get(entry.source, 0) + 1
        return f"MinorDates({len(self)} minors: {counts})"

    def to_json(self) -> str:
        """These dates as JSON (for a child process that must judge as this one does)."""
        return json.dumps([[d.minor, d.source, *(None if x is None else x.isoformat()
                                                 for x in (d.date, d.earliest, d.latest)), d.evidence]
                           for d in self])

    @classmethod
    def from_json(cls, text: str) -> "MinorDates":
        def day(x: str | None) -> dt.date | None:
            return None if x is None else dt.date.fromisoformat(x)

        return cls({m: MinorDate(m, source, day(d), day(lo), day(hi), evidence)
                    for m, source, d, lo, hi, evidence in json.loads(text)})

    def counts(self) -> dict[str, int]:
        """Minors per source."""
        found = {"changelog": 0, "index": 0, "bounded": 0}
        for entry in self._entries.values():
            found[entry.source] += 1
        return found


def date_minors(releases: Iterable[PluginRelease] = (), newest: int | None = None) -> MinorDates:
    """The dates of every minor from the history's oldest to the newest that the history or a
    release knows (or ``newest``)."""
    first_seen: dict[int, tuple[dt.datetime, PluginRelease]] = {}
    for release in releases:
        minor = release.minor
        if minor is None or release.uploaded is None or release.yanked or release.pjrt_api is None:
            continue
        if release.pjrt_api.split(".")[0] != "0":
            continue
        seen = first_seen.get(minor)
        if seen is None or release.uploaded < seen[0]:
            first_seen[minor] = (release.uploaded, release)
    last = max([history.NEWEST_KNOWN.minor, *first_seen, *([newest] if newest is not None else [])])
    first = history.OLDEST_KNOWN.minor

    exact: dict[int, tuple[dt.date, DateSource, str]] = {}
    late: dict[int, str] = {}
    newer_min: dt.date | None = None
    for minor in range(last, first - 1, -1):
        entry = history.release(minor)
        if entry is not None and entry.date is not None:
            exact[minor] = (entry.date, "changelog", "changelog")
        elif minor in first_seen:
            uploaded, release = first_seen[minor]
            note = f"first seen in {release.package} {release.version}"
            if newer_min is None or uploaded.date() <= newer_min:
                exact[minor] = (uploaded.date(), "index", note)
            else:
                late[minor] = f"{note} (uploaded {uploaded.date()}, after newer minors were)"
        if minor in exact:
            newer_min = exact[minor][0] if newer_min is None else min(newer_min, exact[minor][0])

    # ...and never before an older minor's (an upload "before" a changelog date is not the minor's).
    older_max: dt.date | None = None
    for minor in range(first, last + 1):
        if minor not in exact:
            continue
        day, source, evidence = exact[minor]
        if source == "index" and older_max is not None and day < older_max:
            del exact[minor]
            late[minor] = f"{evidence} (uploaded {day}, before an older minor's date)"
            continue
        older_max = day if older_max is None else max(older_max, day)

    dates: dict[int, MinorDate] = {}
    for minor in range(first, last + 1):
        if minor in exact:
            day, source, evidence = exact[minor]
            dates[minor] = MinorDate(minor, source, day, day, day, evidence)
            continue
        older = max((m for m in exact if m < minor), default=None)
        newer = min((m for m in exact if m > minor), default=None)
        earliest = exact[older][0] if older is not None else None
        latest = exact[newer][0] if newer is not None else None
        parts = []
        if older is not None:
            parts.append(f"after 0.{older}")
        if newer is not None:
            parts.append(f"before 0.{newer}")
        why = ", ".join(parts) if parts else "no dated neighbour"
        if minor in late:
            why = f"{late[minor]}; {why}"
        else:
            why = f"no release reports it; {why}"
        dates[minor] = MinorDate(minor, "bounded", None, earliest, latest, why)
    return MinorDates(dates)
