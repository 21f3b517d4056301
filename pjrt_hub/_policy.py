"""The version policy: a pure function from two versions and a policy to a verdict with reasons.

Rules, in the order they apply (DESIGN.md, "Version policy"):

1. **Major**: must be equal, in both directions.
2. **Strict mode** (``--strict``, ``PJRT_HUB_STRICT=1``, or upstream's
   ``ENABLE_PJRT_COMPATIBILITY=false``): the minor must be equal too.
3. **Older plugin**: never below the floor minor (upstream's ``kMinPjRtMinor`` = 29). The
   plugin is accepted if its minor was still current less than N weeks (the forward-compatibility
   window, default 6) before the framework's minor appeared: a plugin built in the window carries
   a minor that was current in it. The dates are the changelog's, else the release atlas's
   (:mod:`pjrt_hub.atlas`: the first upload of a release reporting the minor), else bounds
   between dated neighbours; where the bounds leave the answer open the plugin is accepted under
   the floor, and where no date is known at all the floor alone decides. The verdict says which.
4. **Newer plugin**: a Python plugin declares its backward policy (the oldest framework it
   supports); without one it supports no older framework. A C plugin declares nothing: like
   upstream, pjrt-hub accepts it and keeps every call to what the framework's minor knows.

The verdict lists the binding calls an accepted older plugin cannot serve; the client facade turns
them into Unimplemented errors.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Literal, Mapping

from pjrt_hub.abi import ApiVersion, api_methods, binding, history
from pjrt_hub.atlas._dates import MinorDate, MinorDates

__all__ = ["Policy", "Verdict", "gated_calls", "judge", "strict_from_environment"]

PluginKind = Literal["python", "c"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def strict_from_environment(environ: "Mapping[str, str] | None" = None) -> str | None:
    """Which environment setting asks for strict mode, or None.

    ``PJRT_HUB_STRICT`` is ours; ``ENABLE_PJRT_COMPATIBILITY=false`` is upstream's spelling of the
    same thing (compatibility off means exact versions only).
    """
    env = os.environ if environ is None else environ
    if env.get("PJRT_HUB_STRICT", "").strip().lower() in _TRUE:
        return "PJRT_HUB_STRICT=" + env["PJRT_HUB_STRICT"]
    if env.get("ENABLE_PJRT_COMPATIBILITY", "").strip().lower() in _FALSE:
        return "ENABLE_PJRT_COMPATIBILITY=" + env["ENABLE_PJRT_COMPATIBILITY"]
    return None


@dataclass(frozen=True, slots=True)
class Policy:
    """How the framework judges plugin versions."""

    framework: ApiVersion = history.NEWEST_KNOWN
    window_weeks: int = 6
    floor_minor: int = history.FLOOR_MINOR
    strict: bool = False
    #: Where strict mode came from, for messages (``--strict``, ``PJRT_HUB_STRICT=1``).
    strict_source: str = "--strict"
    #: The minors' dates; None: the changelog's and the shipped atlas's, with the user's own
    #: ``pjrt-hub atlas refresh`` over them (:func:`pjrt_hub.atlas.default_minor_dates`).
    dates: MinorDates | None = None

    def minor_date(self, minor: int) -> MinorDate | None:
        if self.dates is not None:
            return self.dates.get(minor)
        from pjrt_hub.atlas import default_minor_dates

        return default_minor_dates().get(minor)

    def __post_init__(self) -> None:
        if self.window_weeks < 0:
            raise ValueError(f"window_weeks must be >= 0, got {self.window_weeks}")
        if self.floor_minor < 0:
            raise ValueError(f"floor_minor must be >= 0, got {self.floor_minor}")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The policy's answer for one plugin."""

    accepted: bool
    #: The rule that decided: exact, major, strict, floor, window, window-floor,
    #: backward-policy, c-newer.
    rule: str
    #: Why, in words a user can act on; a refusal names both versions, the rule and what to do.
    reasons: tuple[str, ...]
    #: Binding calls the plugin's minor predates (``Client.create_view_of_device_buffer ...``).
    gated_calls: tuple[str, ...] = ()
    #: The minor every call is kept to: the older of plugin and framework.
    call_limit: int | None = None


def gated_calls(plugin_minor: int, framework_minor: int) -> tuple[str, ...]:
    """Binding methods added after the plugin's minor and known to the framework."""
    found = []
    for cls in (binding.Api, binding.Client, binding.Device, binding.DeviceDescription,
                binding.Memory, binding.Buffer, binding.Event, binding.Executable,
                binding.LoadedExecutable, binding.TopologyDescription):
        for name, info in api_methods(cls).items():
            if info.since is not None and plugin_minor < info.since <= framework_minor:
                found.append(f"{cls.__name__}.{name} ({info.c_function}, 0.{info.since})")
    return tuple(sorted(found))


def _window_start(framework: MinorDate, weeks: int) -> tuple[dt.date | None, dt.date | None]:
    """The earliest and latest date the window may open on (None: unbounded)."""
    delta = dt.timedelta(weeks=weeks)
    return (None if framework.earliest is None else framework.earliest - delta,
            None if framework.latest is None else framework.latest - delta)


def _oldest_in_window(policy: Policy, weeks: int) -> int:
    """The oldest minor certainly still current within ``weeks`` before the framework's date."""
    fw = policy.framework
    f_date = policy.minor_date(fw.minor)
    if f_date is None:
        return fw.minor
    _, start_latest = _window_start(f_date, weeks)
    for minor in range(history.OLDEST_KNOWN.minor, fw.minor):
        successor = policy.minor_date(minor + 1)
        if successor is not None and successor.earliest is not None and start_latest is not None \
                and successor.earliest > start_latest:
            return minor
    return fw.minor


def judge(plugin: ApiVersion, policy: Policy, *, kind: PluginKind = "python",
          min_framework: ApiVersion | None = None, name: str | None = None,
          distribution: str | None = None) -> Verdict:
    """Judge a plugin's API version against the framework's, under ``policy``."""
    fw = policy.framework
    who = f"plugin {name}" if name else "the plugin"
    dist = f"the {distribution} distribution" if distribution else who
    limit = min(plugin.minor, fw.minor)

    if plugin.major != fw.major:
        return Verdict(False, "major", (
            f"Mismatched PJRT plugin PJRT API major version ({plugin.major}) and framework PJRT API "
            f"major version {fw.major}). The {who.removeprefix('the ')} is at {plugin}, the framework at {fw}; major "
            f"versions must be equal in both directions. Install a release of {dist} built for "
            f"PJRT API {fw.major}.x, or a framework for {plugin.major}.x.",
        ))

    if policy.strict and plugin != fw:
        return Verdict(False, "strict", (
            f"Mismatched PJRT plugin PJRT API version ({plugin}) and framework PJRT API version "
            f"{fw}). Strict mode ({policy.strict_source}) requires an exact match: install a "
            f"release of {dist} built against PJRT API {fw}, act as framework {plugin} with "
            f"--framework-version {plugin}, or turn strict mode off.",
        ))

    if plugin == fw:
        return Verdict(True, "exact", (f"{who[0].upper()}{who[1:]} and the framework are both at PJRT API {fw}.",),
                       call_limit=limit)

    if plugin < fw:
        return _judge_older(plugin, policy, who, dist, limit)
    return _judge_newer(plugin, policy, kind, min_framework, who, dist, limit)


def _judge_older(plugin: ApiVersion, policy: Policy, who: str, dist: str, limit: int) -> Verdict:
    fw = policy.framework
    gated = gated_calls(plugin.minor, fw.minor)
    floor = ApiVersion(fw.major, min(policy.floor_minor, fw.minor))
    if plugin < floor:
        return Verdict(False, "floor", (
            f"Plugin PJRT API version {plugin} is older than the minimum supported version {floor} "
            f"(the floor minor of framework PJRT API version {fw}). Upgrade {dist} to a release "
            f"built against PJRT API >= {floor}.",
        ))

    f_date = policy.minor_date(fw.minor)
    nxt = policy.minor_date(plugin.minor + 1) if plugin.minor + 1 <= fw.minor else None
    weeks = policy.window_weeks
    subject = f"{who[0].upper()}{who[1:]}"
    start_earliest, start_latest = _window_start(f_date, weeks) if f_date is not None else (None, None)
    known = f_date is not None and nxt is not None and (
        (f_date.earliest is not None or f_date.latest is not None)
        and (nxt.earliest is not None or nxt.latest is not None))
    if not known:
        missing = [f"0.{m}" for m, d in ((fw.minor, f_date), (plugin.minor + 1, nxt))
                   if d is None or (d.earliest is None and d.latest is None)]
        return Verdict(True, "window-floor", (
            f"{subject} at PJRT API {plugin} is older than the framework ({fw}). No date is known for "
            f"{', '.join(missing)}, so the {weeks}-week window cannot be computed; the floor minor "
            f"{floor} applies instead, and {plugin} >= {floor}.",
            *_gated_note(gated, plugin),
        ), gated, limit)
    assert f_date is not None and nxt is not None
    superseded = f"{plugin} was superseded by 0.{nxt.minor} ({nxt.describe()})"
    framework_at = f"{fw}: {f_date.describe()}"
    if nxt.earliest is not None and start_latest is not None and nxt.earliest > start_latest:
        return Verdict(True, "window", (
            f"{subject} at PJRT API {plugin} is older than the framework ({fw}) but inside the {weeks}-week "
            f"forward-compatibility window: {superseded}, after the window opened on {start_latest} "
            f"({weeks} weeks before {fw}; {framework_at}).",
            *_gated_note(gated, plugin),
        ), gated, limit)
    if nxt.latest is not None and start_earliest is not None and nxt.latest <= start_earliest:
        oldest = _oldest_in_window(policy, weeks)
        # Certainly inside: the successor's earliest date after the window's latest opening.
        gap = (f_date.latest or start_earliest + dt.timedelta(weeks=weeks)) - (nxt.earliest or nxt.latest)
        needed_weeks = gap.days // 7 + 1
        return Verdict(False, "window", (
            f"Plugin PJRT API version {plugin} is outside the {weeks}-week forward-compatibility window "
            f"of framework PJRT API version {fw}: {superseded}, {weeks} weeks or more before {fw} "
            f"({framework_at}). Upgrade {dist} to a release built against PJRT API >= 0.{oldest}, "
            f"widen the window to {needed_weeks} weeks (--window-weeks {needed_weeks}), or act as the "
            f"framework it was built for (--framework-version {plugin}).",
        ))
    return Verdict(True, "window-bounded", (
        f"{subject} at PJRT API {plugin} is older than the framework ({fw}), and the dates known leave open "
        f"whether it is inside the {weeks}-week window: {superseded}; {framework_at}. It is accepted "
        f"under the floor minor {floor} ({plugin} >= {floor}); `pjrt-hub atlas refresh` may date "
        f"these minors exactly.",
        *_gated_note(gated, plugin),
    ), gated, limit)


def _judge_newer(plugin: ApiVersion, policy: Policy, kind: PluginKind, min_framework: ApiVersion | None,
                 who: str, dist: str, limit: int) -> Verdict:
    fw = policy.framework
    if kind == "c":
        return Verdict(True, "c-newer", (
            f"{who[0].upper()}{who[1:]} at PJRT API {plugin} is newer than the framework ({fw}). A C plugin "
            f"states no backward-compatibility policy; as upstream does, pjrt-hub accepts it, sizes "
            f"every Args struct for the plugin's minor and keeps every call to what {fw} knows.",
        ), call_limit=limit)
    if min_framework is None:
        return Verdict(False, "backward-policy", (
            f"Plugin PJRT API version {plugin} is newer than framework PJRT API version {fw}, and "
            f"{who} declares no backward-compatibility policy (min_framework_version), so "
            f"it supports no framework older than {plugin}. Upgrade the framework (pjrt-hub) to a "
            f"release with PJRT API >= {plugin}, or install an older release of {dist}.",
        ))
    if fw < min_framework:
        return Verdict(False, "backward-policy", (
            f"Plugin PJRT API version {plugin} is newer than framework PJRT API version {fw}, and "
            f"its backward-compatibility policy supports frameworks >= {min_framework} only. "
            f"Upgrade the framework (pjrt-hub) to a release with PJRT API >= {min_framework}, or "
            f"install an older release of {dist}.",
        ))
    return Verdict(True, "backward-policy", (
        f"{who[0].upper()}{who[1:]} at PJRT API {plugin} is newer than the framework ({fw}); its "
        f"backward-compatibility policy supports frameworks >= {min_framework}. Calls are kept "
        f"to what {fw} knows.",
    ), call_limit=limit)


def _gated_note(gated: tuple[str, ...], plugin: ApiVersion) -> tuple[str, ...]:
    if not gated:
        return ()
    return (f"{len(gated)} calls newer than {plugin} raise Unimplemented for this plugin.",)
