"""plugin: what ``PJRT_Plugin_Attributes`` says (upstream's ``PluginAttributes`` test)."""

from __future__ import annotations

from typing import Any

from .._case import case, check, fail
from .._context import PluginUnderTest

#: What every XLA-built C plugin reports (upstream's test demands them).
XLA_ATTRIBUTES = ("xla_version", "stablehlo_current_version", "stablehlo_minimum_version")


def _is_named_value(value: Any) -> bool:
    """A ``PJRT_NamedValue`` value: string, int64, float, bool or a list of int64."""
    if isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _version_triple(attrs: dict[str, Any], key: str) -> tuple[int, ...]:
    value = attrs[key]
    check(isinstance(value, (list, tuple)) and len(value) == 3
          and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value),
          f"plugin attribute {key} must be three non-negative integers (major, minor, patch), got {value!r}")
    return tuple(value)


@case("plugin")
def attributes(ctx: PluginUnderTest) -> None:
    """PJRT_Plugin_Attributes returns uniquely named values of PJRT's value types; a C plugin reports
    xla_version, stablehlo_current_version and stablehlo_minimum_version, each version three
    non-negative ints (major, minor, patch), minimum <= current."""
    attrs = ctx.api.plugin_attributes()
    check(isinstance(attrs, dict), f"PJRT_Plugin_Attributes returned {type(attrs).__name__}, expected named values")
    for key, value in attrs.items():
        check(isinstance(key, str) and key, f"plugin attribute name {key!r} is not a non-empty string")
        check(_is_named_value(value), f"plugin attribute {key} has a value of type {type(value).__name__} "
                                      f"({value!r}); named values are str, int, float, bool or a list of int")
    if ctx.kind == "c":
        missing = [k for k in XLA_ATTRIBUTES if k not in attrs]
        if missing:
            fail(f"PJRT_Plugin_Attributes lacks {', '.join(missing)} (has: {', '.join(sorted(attrs)) or 'none'})")
    if "stablehlo_current_version" in attrs and "stablehlo_minimum_version" in attrs:
        current = _version_triple(attrs, "stablehlo_current_version")
        minimum = _version_triple(attrs, "stablehlo_minimum_version")
        check(minimum <= current, f"stablehlo_minimum_version {minimum} is newer than stablehlo_current_version {current}")


@case("plugin", kind="python")
def declared_platform(ctx: PluginUnderTest) -> None:
    """The platform name the plugin declared is the one its client reports."""
    declared = ctx.record.platform_name
    reported = ctx.client.platform_name()
    check(declared == reported, f"plugin {ctx.name} declared platform {declared!r}, its client reports {reported!r}")
