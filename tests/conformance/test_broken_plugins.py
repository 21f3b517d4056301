"""The suite fails on defective plugins: the specific case fails, with a message naming the defect.

Each broken plugin is the toy with one defect, installed as a distribution. The toy itself runs
through the same cases as the control: they pass there, so it is the defect that fails them.
"""

from __future__ import annotations

import pytest

from ..fixtures import install_plugin, install_toy
from ..fixtures.broken import BROKEN


@pytest.mark.parametrize("defect", sorted(BROKEN))
def test_the_suite_catches_a_broken_plugin(fake_dist, run_cases, defect):
    broken = BROKEN[defect]
    install_plugin(fake_dist, defect, broken.source)
    install_toy(fake_dist, "control")
    # The never-firing event hangs every wait on it: a short bound keeps the test quick, and
    # shows that a hang ends in a failure, not in a hung run.
    results = run_cases(defect, broken.cases, timeout_scale=0.2)
    control = run_cases("control", broken.cases, timeout_scale=0.2)
    for case_id, words in broken.catches.items():
        outcome, message = results[case_id]
        assert outcome == "failed", (case_id, outcome, message)
        assert words in message, (case_id, message)
        assert control[case_id][0] == "passed", (case_id, control[case_id])


def test_a_plugin_that_reports_another_version_cannot_be_used_at_all(fake_dist, run_cases):
    install_plugin(fake_dist, "liar", BROKEN["reports_another_version"].source)
    results = run_cases("liar", ("version/*", "client/platform_name"))
    assert results["version/loaded"][0] == "passed"  # the declaration alone looks fine
    outcome, message = results["version/api_version"]  # the first case to ask for its Api
    assert outcome == "failed"
    assert "PluginValidationError" in message and "declared PJRT API 0.117 but its Api reports 0.81" in message
    # Every later case is skipped with the reason, rather than failing again on it.
    outcome, message = results["client/platform_name"]
    assert outcome == "skipped"
    assert "cannot be used (failed: declared PJRT API 0.117 but its Api reports 0.81" in message
    assert "the first case that asked for its Api failed" in message


_GET_API_RAISES = '''
from pjrt_hub.abi import PluginDeclaration, hookimpl


class Plugin:
    @hookimpl
    def pjrt_hub_declare(self):
        return PluginDeclaration(api_version="0.117", platform_name="acme")

    @hookimpl
    def pjrt_hub_get_api(self):
        raise ImportError("the acme runtime needs libacme.so, which is not installed")


plugin = Plugin()
'''


def test_a_plugin_whose_api_cannot_be_made_fails_one_case_and_skips_the_rest(fake_dist, run_cases):
    # Not a failure per case repeating the same cause: the first case that asks for the Api
    # fails with it, and the registry records the plugin as failed, so the rest are skipped.
    install_plugin(fake_dist, "acme", _GET_API_RAISES)
    results = run_cases("acme", ("*",))
    failed = {k: v[1] for k, v in results.items() if v[0] == "failed"}
    assert list(failed) == ["version/api_version"], failed
    assert "pjrt_hub_get_api raised ImportError" in failed["version/api_version"]
    assert "libacme.so" in failed["version/api_version"]
    ran = [k for k, v in results.items() if v[0] == "passed"]
    assert ran == ["version/loaded"], ran
    skipped = [v[1] for k, v in results.items() if v[0] == "skipped" and not k.startswith(("abi/", "jax/"))]
    assert len(skipped) > 100
    assert all("cannot be used (failed: hook pjrt_hub_get_api raised ImportError)" in m for m in skipped)


def _client_create(body: str) -> str:
    from ..fixtures.broken import _plugin

    return _plugin("import threading\n", api=f"def client_create(self, *args, **kwargs):\n        {body}")


@pytest.mark.parametrize(("defect", "body", "first_failure", "later_skip"), [
    ("raises", 'raise RuntimeError("the acme card is not plugged in")',
     ("creating a client failed: RuntimeError: the acme card is not plugged in",),
     "creating a client failed (first met in {first}): RuntimeError: the acme card is not plugged in"),
    ("hangs", "threading.Event().wait()",
     ("did not finish within", "creating a client"),  # the case's bound or the creation's, first
     "creating a client has not returned: {first} waited for it and failed; not waited for again"),
])
def test_a_client_that_cannot_be_created_fails_one_case_and_skips_the_rest(fake_dist, run_cases, defect,
                                                                          body, first_failure, later_skip):
    # One defect, one failure: the cases that need the shared client after the first one that
    # met the defect are skipped with its cause, and a creation that hangs is not waited for
    # again by each of them (with this scale, 230 waits of 1.2 s each).
    install_plugin(fake_dist, f"noclient_{defect}", _client_create(body))
    results = run_cases(f"noclient_{defect}", ("version/*", "client/*", "devices/*", "buffers/*", "execute/*"),
                        timeout_scale=0.02)
    failed = [k for k, v in results.items() if v[0] == "failed"]
    assert len(failed) == 1, failed
    first = failed[0]
    assert all(words in results[first][1] for words in first_failure), results[first]
    skipped = [v[1] for k, v in results.items() if v[0] == "skipped" and k != first]
    assert len(skipped) > 20
    assert all(later_skip.format(first=first) in message for message in skipped), skipped[:3]


_GET_API_HANGS = _GET_API_RAISES.replace(
    'raise ImportError("the acme runtime needs libacme.so, which is not installed")',
    "import threading\n        threading.Event().wait()")


def test_a_plugin_whose_get_api_hangs_fails_one_case_and_the_run_goes_on(fake_dist, run_cases):
    # The registry holds its lock while pjrt_hub_get_api runs; the cases read the plugin's record
    # without it, so the next case does not wait on the hung call.
    install_plugin(fake_dist, "stuck_api", _GET_API_HANGS)
    results = run_cases("stuck_api", ("version/*", "client/*"), timeout_scale=0.02)
    failed = [k for k, v in results.items() if v[0] == "failed"]
    assert failed == ["version/api_version"], failed
    assert "did not finish within" in results["version/api_version"][1]
    skipped = [v[1] for k, v in results.items() if v[0] == "skipped"]
    assert skipped and all("getting the plugin's Api has not returned: version/api_version waited for it" in m
                           for m in skipped), skipped[:3]
