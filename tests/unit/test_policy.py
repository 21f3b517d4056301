"""The version policy over a table of version pairs, including the window's edges."""

import pytest

from pjrt_hub import Policy, judge, strict_from_environment
from pjrt_hub.abi import ApiVersion
from pjrt_hub.atlas import MinorDates, date_minors

V = ApiVersion.parse
#: The changelog's dates alone (no release atlas): the table does not move when the atlas does.
CHANGELOG = date_minors(())

# framework, plugin, kind, min_framework, window_weeks, accepted, rule
TABLE = [
    # equal versions
    ("0.105", "0.105", "python", None, 6, True, "exact"),
    ("0.81", "0.81", "c", None, 6, True, "exact"),
    # major differs, both directions
    ("0.105", "1.105", "python", None, 6, False, "major"),
    ("1.3", "0.105", "python", None, 6, False, "major"),
    ("0.105", "1.0", "c", None, 6, False, "major"),
    # older plugin, dated history: 0.50 is 2024-04-26; 6 weeks before is 2024-03-15
    ("0.50", "0.49", "python", None, 6, True, "window"),
    ("0.50", "0.46", "python", None, 6, True, "window"),   # superseded 2024-03-29 (0.47)
    ("0.50", "0.45", "python", None, 6, False, "window"),  # superseded 2024-02-29 (0.46)
    ("0.50", "0.45", "python", None, 9, True, "window"),   # wider window reaches it
    # the edge: 0.46 was superseded on 2024-03-29, exactly 4 weeks before 0.50
    ("0.50", "0.46", "python", None, 4, False, "window"),
    ("0.50", "0.46", "python", None, 5, True, "window"),
    ("0.40", "0.29", "c", None, 6, False, "window"),
    ("0.40", "0.39", "c", None, 6, True, "window"),
    # older plugin, minors the changelog does not date: bounded after 0.56 (2024-11-11), so
    # whether 0.82 came within 6 weeks of 0.117 is open; 0.30 (2023-09-14) certainly did not
    ("0.117", "0.81", "c", None, 6, True, "window-bounded"),
    ("0.105", "0.29", "python", None, 6, False, "window"),
    ("0.105", "0.28", "python", None, 6, False, "floor"),
    ("0.81", "0.5", "c", None, 6, False, "floor"),
    # newer plugin: Python plugins state a backward policy, C plugins are accepted
    ("0.81", "0.95", "python", "0.80", 6, True, "backward-policy"),
    ("0.81", "0.95", "python", "0.81", 6, True, "backward-policy"),
    ("0.81", "0.95", "python", "0.82", 6, False, "backward-policy"),
    ("0.81", "0.95", "python", None, 6, False, "backward-policy"),
    ("0.81", "0.115", "c", None, 6, True, "c-newer"),
]


@pytest.mark.parametrize("framework, plugin, kind, min_fw, weeks, accepted, rule", TABLE)
def test_policy_table(framework, plugin, kind, min_fw, weeks, accepted, rule):
    verdict = judge(V(plugin), Policy(framework=V(framework), window_weeks=weeks, dates=CHANGELOG), kind=kind,
                    min_framework=None if min_fw is None else V(min_fw), name="p")
    assert (verdict.accepted, verdict.rule) == (accepted, rule), verdict.reasons


@pytest.mark.parametrize("framework, plugin, kind, min_fw, weeks, accepted, rule",
                         [row for row in TABLE if not row[5]])
def test_every_refusal_names_both_versions_and_what_to_do(framework, plugin, kind, min_fw, weeks,
                                                          accepted, rule):
    verdict = judge(V(plugin), Policy(framework=V(framework), window_weeks=weeks, dates=CHANGELOG), kind=kind,
                    min_framework=None if min_fw is None else V(min_fw), name="p", distribution="acme-pjrt")
    message = verdict.reasons[0]
    assert plugin in message and framework in message
    assert any(word in message for word in ("Upgrade", "Install", "install", "upgrade"))


def test_window_refusal_says_how_wide_the_window_must_be():
    verdict = judge(V("0.45"), Policy(framework=V("0.50"), dates=CHANGELOG), distribution="acme-pjrt")
    assert "--window-weeks 9" in verdict.reasons[0]
    assert "acme-pjrt" in verdict.reasons[0]
    assert "0.46" in verdict.reasons[0]  # the oldest minor inside the window


def test_floor_is_stated_when_dates_are_missing():
    verdict = judge(V("0.81"), Policy(framework=V("0.117"), dates=MinorDates({})), kind="c")
    assert (verdict.accepted, verdict.rule) == (True, "window-floor")
    assert "floor minor 0.29" in verdict.reasons[0]
    assert "No date is known for 0.117, 0.82" in verdict.reasons[0]


def test_floor_minor_can_be_raised():
    verdict = judge(V("0.81"), Policy(framework=V("0.117"), floor_minor=90))
    assert not verdict.accepted and verdict.rule == "floor"


def test_strict_mode_requires_exact_match_and_says_where_it_came_from():
    policy = Policy(framework=V("0.105"), strict=True, strict_source="PJRT_HUB_STRICT=1")
    assert judge(V("0.105"), policy).accepted
    verdict = judge(V("0.104"), policy)
    assert not verdict.accepted and verdict.rule == "strict"
    assert verdict.reasons[0].startswith(
        "Mismatched PJRT plugin PJRT API version (0.104) and framework PJRT API version 0.105).")
    assert "PJRT_HUB_STRICT=1" in verdict.reasons[0]
    assert not judge(V("0.115"), policy, kind="c").accepted


def test_major_message_reuses_upstream_wording():
    verdict = judge(V("1.2"), Policy(framework=V("0.105")))
    assert verdict.reasons[0].startswith(
        "Mismatched PJRT plugin PJRT API major version (1) and framework PJRT API major version 0).")


def test_older_plugin_lists_gated_calls_and_call_limit():
    verdict = judge(V("0.32"), Policy(framework=V("0.50"), window_weeks=52), kind="c")
    assert verdict.accepted
    assert verdict.call_limit == 32
    assert any(c.startswith("Client.create_view_of_device_buffer") for c in verdict.gated_calls)
    assert any("PJRT_Memory_Kind_Id, 0.48" in c for c in verdict.gated_calls)
    assert not any("0.51" in c for c in verdict.gated_calls)


def test_newer_plugin_calls_are_kept_to_the_framework():
    verdict = judge(V("0.115"), Policy(framework=V("0.81")), kind="c")
    assert verdict.call_limit == 81
    assert "keeps every call to what 0.81 knows" in verdict.reasons[0]


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"PJRT_HUB_STRICT": "1"}, "PJRT_HUB_STRICT=1"),
    ({"PJRT_HUB_STRICT": "0"}, None),
    ({"ENABLE_PJRT_COMPATIBILITY": "false"}, "ENABLE_PJRT_COMPATIBILITY=false"),
    ({"ENABLE_PJRT_COMPATIBILITY": "true"}, None),
])
def test_strict_from_environment(env, expected):
    assert strict_from_environment(env) == expected


def test_policy_rejects_negative_settings():
    with pytest.raises(ValueError):
        Policy(window_weeks=-1)
    with pytest.raises(ValueError):
        Policy(floor_minor=-1)
