"""A C plugin that crashes fails the case it crashed in, and the run goes on: the cases of C plugins
run in a worker process that is replaced after a crash."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pjrt_hub.testing import Case, CaseFailure, CaseSkipped, run_conformance
from pjrt_hub.testing._worker import MAX_CONSECUTIVE_CRASHES, CaseWorker

# PJRT API 0.81 with 118 slots: initialize and attributes work, PJRT_Client_Create makes a client
# (or aborts, with CREATE_ABORTS), PJRT_Client_PlatformName writes through a NULL pointer, every
# other function aborts.
CRASHING = r"""
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { size_t struct_size; void* extension_start; void* attributes; size_t num; } AttrArgs;
typedef struct { size_t struct_size; void* extension_start; void* options; size_t num_options;
                 void* kv[4]; void* client; } CreateArgs;
typedef struct {
  size_t struct_size; void* extension_start;
  struct { size_t struct_size; void* extension_start; int major_version; int minor_version; } version;
  void* slots[118];
} Api;

static int client_storage;
static Api api;
static void* no_op(void* args) { (void)args; return NULL; }
static void* attributes(AttrArgs* args) { args->attributes = NULL; args->num = 0; return NULL; }
static void* create(CreateArgs* args) {
#ifdef CREATE_ABORTS
  fprintf(stderr, "F0000 fake.cc:1] Check failed: no devices\n");
  abort();
#endif
  args->client = &client_storage;
  return NULL;
}
static void* platform_name(void* args) {
  (void)args;
  fprintf(stderr, "about to write through NULL\n");
  fflush(stderr);
  *(volatile int*)0 = 1;
  return NULL;
}

const Api* GetPjrtApi(void) {
  api.struct_size = 40 + 8 * 118;
  api.version.struct_size = 24;
  api.version.minor_version = 81;
  for (int i = 0; i < 118; ++i) api.slots[i] = (void*)abort;
  api.slots[3] = (void*)no_op;           /* PJRT_Plugin_Initialize */
  api.slots[4] = (void*)attributes;      /* PJRT_Plugin_Attributes */
  api.slots[10] = (void*)create;         /* PJRT_Client_Create */
  api.slots[11] = (void*)no_op;          /* PJRT_Client_Destroy */
  api.slots[12] = (void*)platform_name;  /* PJRT_Client_PlatformName */
  return &api;
}
"""


@pytest.fixture
def crashing(tmp_path: Path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a fake plugin")

    def build(*defines: str) -> str:
        source = tmp_path / "crashing.c"
        source.write_text(CRASHING)
        library = tmp_path / "libcrashing_pjrt.so"
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(library), str(source),
                        *[f"-D{d}" for d in defines]], check=True, capture_output=True, text=True)
        return str(library)

    return build


def by_id(report) -> dict[str, tuple[str, str | None]]:
    (plugin,) = report.plugins
    return {c.id: (c.outcome.value, c.message) for c in plugin.cases}


def test_a_segfault_fails_its_case_and_the_next_cases_run(crashing):
    report = run_conformance([crashing()], cases=["version/loaded", "client/platform_name",
                                                  "abi/api_version_struct_size"], framework="0.81")
    found = by_id(report)
    assert found["version/loaded"] == ("passed", None)
    outcome, message = found["client/platform_name"]
    assert outcome == "failed"
    assert message.startswith("the plugin crashed the conformance worker (SIGSEGV) during client/platform_name")
    assert "about to write through NULL" in message  # the plugin's last words
    # A fresh worker runs the case after the crash.
    assert found["abi/api_version_struct_size"] == ("passed", None)
    assert not report.ok


def test_a_plugin_that_crashes_every_time_is_given_up_on(crashing):
    report = run_conformance([crashing("CREATE_ABORTS")], cases=["client/*"], framework="0.81")
    (plugin,) = report.plugins
    messages = [c.message for c in plugin.cases if c.outcome.value == "failed"]
    assert len(messages) == len(plugin.cases) > MAX_CONSECUTIVE_CRASHES
    for message in messages[:MAX_CONSECUTIVE_CRASHES]:
        assert "crashed the conformance worker (SIGABRT)" in message and "Check failed: no devices" in message
    for message in messages[MAX_CONSECUTIVE_CRASHES:]:
        assert message.startswith(f"not run: the plugin crashed the conformance worker {MAX_CONSECUTIVE_CRASHES} "
                                  "times in a row (last: SIGABRT during client/")


def mapped(library: str) -> bool:
    return library in Path("/proc/self/maps").read_text()


def test_the_run_never_loads_a_c_plugin_here_unless_asked(crashing):
    library = crashing()
    report = run_conformance([library], cases=["plugin/attributes"], framework="0.81")
    assert by_id(report)["plugin/attributes"][0] in ("passed", "failed")  # it ran: the Api was loaded
    assert not mapped(library)
    run_conformance([library], cases=["plugin/attributes"], framework="0.81", extra_args=["--pjrt-in-process"])
    assert mapped(library)


# -- the worker protocol, with stand-in workers --------------------------------------------------


class StandIn(CaseWorker):
    """A worker running ``script`` instead of the suite's worker."""

    def __init__(self, script: str) -> None:
        super().__init__("unused", timeout_scale=1.0, policy={})
        self.script = script

    def command(self, protocol_fd: int) -> list[str]:
        return [sys.executable, "-c", self.script, str(protocol_fd)]


QUICK = Case("client", "stand_in", "a case for stand-in workers", run=lambda ctx: None, timeout=0.5)

ANSWERS = """
import json, os, sys
out = os.fdopen(int(sys.argv[1]), "w", buffering=1)
sys.stdin.readline()
for line in sys.stdin:
    out.write(json.dumps({"case": json.loads(line)["case"], "outcome": "skipped", "message": "no device"}) + "\\n")
"""
SILENT = "import sys, time\nsys.stdin.readline(); sys.stdin.readline(); time.sleep(60)\n"
ABORTS = "import os, sys\nsys.stdin.readline(); sys.stdin.readline(); print('F0000 dying', file=sys.stderr); os.abort()\n"


# Forks a child that keeps the protocol pipe open and sleeps, then dies: the parent must see the
# worker gone without waiting for the pipe to close, and the child must not outlive it.
FORKS_AND_DIES = """
import os, sys, time
sys.stdin.readline(); sys.stdin.readline()
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(f"helper {child}", file=sys.stderr, flush=True)
os.abort()
"""


def test_a_worker_that_dies_while_its_child_holds_the_pipe_is_seen_dead_and_its_child_goes_too():
    import re

    worker = StandIn(FORKS_AND_DIES)
    worker.grace = 30.0  # a worker taken for silent would be reported as killed after this
    with pytest.raises(CaseFailure, match=r"(?s)crashed the conformance worker \(SIGABRT\) during client/stand_in"
                       ) as failure:
        worker.run(QUICK)
    (helper,) = re.findall(r"helper (\d+)", str(failure.value))
    for _ in range(100):  # killed with the worker's group; reaped by init
        if not Path(f"/proc/{helper}").exists() or "State:\tZ" in Path(f"/proc/{helper}/status").read_text():
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the worker's child {helper} outlived it")


def test_a_worker_that_cannot_load_the_plugin_says_so_and_is_given_up_on():
    worker = CaseWorker("no_such_plugin", timeout_scale=1.0, policy={})
    try:
        for _ in range(MAX_CONSECUTIVE_CRASHES):
            with pytest.raises(CaseFailure, match=r"client/stand_in: the conformance worker could not load plugin "
                                                  r"'no_such_plugin', which this process loaded: NotFound: .*no plugin "
                                                  r"named 'no_such_plugin'"):
                worker.run(QUICK)
        with pytest.raises(CaseFailure, match=r"not run: .* times in a row \(last: the worker could not load "
                                              r"no_such_plugin\)"):
            worker.run(QUICK)
    finally:
        worker.close()


def test_a_worker_answer_becomes_the_case_outcome():
    worker = StandIn(ANSWERS)
    try:
        for _ in range(2):  # one worker serves several cases
            with pytest.raises(CaseSkipped, match="no device"):
                worker.run(QUICK)
        assert worker._proc is not None and worker.crashes_in_a_row == 0
    finally:
        worker.close()


def test_a_silent_worker_is_killed_and_a_dead_one_reported():
    silent = StandIn(SILENT)
    silent.grace = 0.5
    with pytest.raises(CaseFailure, match=r"client/stand_in: the conformance worker gave no answer within 1 s "
                                          r"and was killed"):
        silent.run(QUICK)
    assert silent._proc is None and silent.crashes_in_a_row == 1
    dying = StandIn(ABORTS)
    with pytest.raises(CaseFailure, match=r"(?s)crashed the conformance worker \(SIGABRT\) during client/stand_in; "
                                          r"its last lines:\nF0000 dying"):
        dying.run(QUICK)


# -- Python plugins of other distributions ----------------------------------------------------------

# The toy plugin, but its client's platform_version reads address 0 (native code a Python plugin
# calls, gone wrong), and its process_index ends the process.
_NATIVE_CRASH = '''
import ctypes, os, sys
from pjrt_hub.testing.toy import ToyApi, ToyClient, ToyPlugin

class AcmeClient(ToyClient):
    def platform_version(self):
        print("acme: reading the version register", file=sys.stderr, flush=True)
        return ctypes.string_at(0).decode()

    def process_index(self):
        os._exit(3)

class AcmeApi(ToyApi):
    client_class = AcmeClient

class AcmePlugin(ToyPlugin):
    api_class = AcmeApi

plugin = AcmePlugin()
'''


def test_a_python_plugin_of_another_distribution_that_crashes_fails_the_case_and_the_run_goes_on(fake_dist):
    from pjrt_hub.testing import ConformanceReport

    from ..fixtures import install_plugin

    install_plugin(fake_dist, "acme", _NATIVE_CRASH)
    cases = ["client/platform_name", "client/platform_version", "client/process_index", "client/devices"]
    # Were the cases run in the command's process, the crash would end it.
    done = _conformance_in_a_child("--plugin", "acme", *[arg for case in cases for arg in ("--case", case)])
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    found = by_id(ConformanceReport.model_validate_json(done.stdout))
    assert found["client/platform_name"] == ("passed", None)
    outcome, message = found["client/platform_version"]
    assert outcome == "failed" and message.startswith(
        "the plugin crashed the conformance worker (SIGSEGV) during client/platform_version")
    assert "acme: reading the version register" in message
    outcome, message = found["client/process_index"]
    assert outcome == "failed" and message.startswith(
        "the plugin crashed the conformance worker (exit status 3) during client/process_index")
    # A fresh worker after each crash.
    assert found["client/devices"] == ("passed", None)
    # Where a debugger is wanted, the cases run in this process: here only a harmless one.
    here = run_conformance(["acme"], cases=["client/platform_name"], extra_args=["--pjrt-in-process"])
    assert by_id(here)["client/platform_name"] == ("passed", None)


_CREATION_EXITS = '''
import os
from pjrt_hub.testing.toy import ToyApi, ToyPlugin

class QuitterApi(ToyApi):
    def client_create(self, options=None, **kwargs):
        os._exit(17)

class QuitterPlugin(ToyPlugin):
    api_class = QuitterApi

plugin = QuitterPlugin()
'''


def _conformance_in_a_child(*args: str) -> subprocess.CompletedProcess[str]:
    """``pjrt-hub conformance ARGS --json`` in a process of its own (a crash there ends only it)."""
    from pjrt_hub._registry import child_environment

    return subprocess.run([sys.executable, "-c", "import sys; from pjrt_hub.cli import main; sys.exit(main())",
                           "conformance", "--json", *args],
                          capture_output=True, text=True, env=child_environment(), timeout=300)


def test_a_python_plugin_whose_client_creation_ends_the_process_fails_version_loaded(fake_dist):
    from pjrt_hub.testing import ConformanceReport

    from ..fixtures import install_plugin

    install_plugin(fake_dist, "quitter", _CREATION_EXITS)
    done = _conformance_in_a_child("--plugin", "quitter", "--case", "version/loaded", "--case", "client/devices")
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    found = by_id(ConformanceReport.model_validate_json(done.stdout))
    outcome, message = found["version/loaded"]
    assert outcome == "failed" and "creating a client ended the process" in message and "exit status 17" in message
    outcome, message = found["client/devices"]
    assert outcome == "skipped" and "plugin quitter cannot be used" in message


def test_pjrt_hubs_own_plugins_run_in_the_suites_process(monkeypatch):
    from pjrt_hub.testing import _worker

    started = []
    monkeypatch.setattr(_worker.CaseWorker, "_start", lambda self: started.append(self.config["asked"]))
    report = run_conformance(["reference"], cases=["client/platform_name"])
    assert by_id(report)["client/platform_name"] == ("passed", None) and started == []
