"""A process of the job turned against it: it speaks only for its own rank, writes only its own
keys, cannot fill the store's memory, and the rest of the job goes on."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import sys
import tempfile
import time

import pytest

from pjrt_hub.abi import PermissionDenied, ResourceExhausted
from pjrt_hub.distributed import (
    FAILED_KEY, StoreClient, StoreServer, new_token, rank_credential,
)
from pjrt_hub.distributed._handoff import take_credential
from pjrt_hub.distributed import _launch
from pjrt_hub.distributed._launch import _write_credentials, mpiexec_path
from pjrt_hub.distributed._store import DEFAULT_MAX_TOTAL, DEFAULT_MAX_VALUE, ENTRY_COST

from . import run_job


@pytest.fixture
def server():
    s = StoreServer(new_token(), hello_timeout=0.5, max_value=1024, max_total=8192).start()
    yield s
    s.close()


def _client(server, rank):
    return StoreClient(server.address, server.credential(rank), rank)


def test_a_credential_admits_only_its_own_rank(server):
    assert rank_credential(server.secret, 1) == server.credential(1) != server.credential(0)
    with pytest.raises(PermissionDenied):
        StoreClient(server.address, server.credential(1), 0)
    with pytest.raises(PermissionDenied):
        StoreClient(server.address, server.secret, 0)  # the secret is no rank's credential
    assert server.refused == ["not the credential of rank 0"] * 2
    one = _client(server, 1)
    one.put("k", b"v")
    assert one.get("k", 1) == b"v"
    one.close()


@pytest.mark.parametrize("hello", [
    {"token": "x", "rank": 0},                      # the old hello: a job token, no credential
    {"rank": True, "credential": "x"},               # a bool is no rank
    {"rank": -1, "credential": "x"},
    {"rank": "0", "credential": "x"},
    {"rank": 0, "credential": 7},
], ids=["token", "bool-rank", "negative-rank", "text-rank", "number-credential"])
def test_a_malformed_hello_is_refused(server, hello):
    conn = socket.create_connection(("127.0.0.1", server.port))
    conn.sendall(json.dumps(hello).encode() + b"\n")
    assert conn.recv(100) == b""  # closed without an answer
    conn.close()
    assert server.refused == ["a hello without a rank and its credential"]


def test_no_client_writes_the_failure_key_and_the_job_goes_on(server):
    zero, one = _client(server, 0), _client(server, 1)
    with pytest.raises(PermissionDenied, match="pjrt_hub/job/failed"):
        one.put(FAILED_KEY, b"rank 0 left the job without saying goodbye (its process died?)")
    with pytest.raises(PermissionDenied):
        zero.put(FAILED_KEY, b"")  # not even about itself: the store alone says who left
    with pytest.raises(PermissionDenied):
        one.put("pjrt_hub/job/anything", b"x")
    assert zero.try_get(FAILED_KEY) is None and server.value(FAILED_KEY) is None
    one.put("still", b"here")  # the refusal left the connection usable
    assert zero.get("still", 1) == b"here"
    one.close()
    zero.close()
    assert server.value(FAILED_KEY) is None


@pytest.mark.parametrize("key", ["cpu:topology/0", "numba_cpu:topology/0", "topology/0",
                                 "cpu:local_topology/cpu/0", "cpu:global_topology/cpu"])
def test_a_rank_key_is_its_ranks_before_and_after_it_is_written(server, key):
    zero, one = _client(server, 0), _client(server, 1)
    with pytest.raises(PermissionDenied, match="rank 0's"):
        one.put(key, b'{"num_devices": 1000}')  # before rank 0 published
    assert server.value(key) is None
    zero.put(key, b'{"num_devices": 2}')
    with pytest.raises(PermissionDenied, match="rank 0's"):
        one.put(key, b'{"num_devices": 1000}')  # after
    zero.put(key, b'{"num_devices": 3}')  # its own key: rank 0 may write it again
    assert one.get(key, 1) == b'{"num_devices": 3}'
    one.put("cpu:topology/1", b'{"num_devices": 1}')
    zero.close()
    one.close()


def test_any_other_key_is_its_first_writers(server):
    zero, one = _client(server, 0), _client(server, 1)
    zero.put("address", b"10.0.0.1:1234")
    with pytest.raises(PermissionDenied, match="rank 0's"):
        one.put("address", b"10.6.6.6:1234")
    assert one.get("address", 1) == b"10.0.0.1:1234"
    zero.put("address", b"10.0.0.1:4321")
    assert one.get("address", 1) == b"10.0.0.1:4321"
    # A second connection of the same rank is the same owner.
    again = _client(server, 0)
    again.put("address", b"10.0.0.1:9999")
    for c in (zero, one, again):
        c.close()
    assert server.value(FAILED_KEY) is None


def test_a_value_over_the_cap_is_refused_and_the_store_serves_on(server):
    zero, one = _client(server, 0), _client(server, 1)
    zero.put("kept", b"k" * 1000)
    with pytest.raises(ResourceExhausted) as refused:
        one.put("big", b"x" * 1025)
    message = refused.value.message
    assert "'big'" in message and "1025 bytes" in message and "1024 bytes per value" in message
    with pytest.raises(ResourceExhausted):
        zero.put("kept", b"y" * 5000)  # over the cap as an overwrite too: the old value stays
    assert server.value("big") is None and one.get("kept", 1) == b"k" * 1000
    one.put("small", b"s" * 1024)  # the same connection, at the cap exactly
    assert zero.get("small", 1) == b"s" * 1024
    assert any("'big'" in why for why in server.refused_puts)
    zero.close()
    one.close()
    assert server.value(FAILED_KEY) is None


def test_a_put_past_the_total_cap_is_refused_and_nothing_stored_is_lost(server):
    zero, one, two = _client(server, 0), _client(server, 1), _client(server, 2)
    each = 1000 + len("v0".encode()) + ENTRY_COST
    stored = {}
    for i in range(8192 // each):
        key = f"v{i}"
        (zero if i % 2 else one).put(key, bytes([i]) * 1000)
        stored[key] = bytes([i]) * 1000
    with pytest.raises(ResourceExhausted) as refused:
        one.put("straw", b"z" * 1000)
    message = refused.value.message
    assert "'straw'" in message and "1000 bytes" in message and "8192 bytes in all" in message
    assert all(two.get(key, 1) == value for key, value in stored.items())
    assert two.try_get("straw") is None
    # An overwrite by its owner that frees what it replaces still fits.
    one.put("v0", b"n" * 1000)
    assert zero.get("v0", 1) == b"n" * 1000
    for c in (zero, one, two):
        c.close()


def test_a_flood_of_empty_values_meets_the_total_cap(server):
    flooder, other = _client(server, 1), _client(server, 0)
    with pytest.raises(ResourceExhausted):
        for i in range(8192):
            flooder.put(f"{i}", b"")
    assert len([k for k in range(8192) if server.value(f"{k}") is not None]) <= 8192 // ENTRY_COST
    assert other.try_get("0") == b""
    flooder.close()
    other.close()


def _wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


def test_values_still_arriving_hold_their_room_under_the_total_cap(server):
    """Puts whose values are on their way have their room promised: a put arriving meanwhile
    cannot take it, and a value that never arrives gives its room back."""
    each = 1000 + len("r0") + ENTRY_COST
    slow = []
    for rank in range(8192 // each):
        conn = socket.create_connection(("127.0.0.1", server.port))
        conn.sendall(json.dumps({"rank": rank, "credential": server.credential(rank)}).encode() + b"\n")
        assert conn.recv(100) == b'{"ok": true}\n'
        conn.sendall(json.dumps({"op": "put", "key": f"r{rank}", "size": 1000}).encode() + b"\n" + b"x" * 10)
        slow.append(conn)
    _wait_for(lambda: server._incoming == len(slow) * each)
    late = _client(server, 7)
    with pytest.raises(ResourceExhausted):
        late.put("r7", b"y" * 1000)
    for conn in slow[1:]:
        conn.sendall(b"x" * 990)
        assert conn.recv(100) == b'{"ok": true}\n'
    slow[0].close()  # its process died mid-value: nothing stored, its room given back
    _wait_for(lambda: server.value(FAILED_KEY) is not None)
    assert server.value("r0") is None and server.value("r1") == b"x" * 1000
    assert b"rank 0 left the job" in server.value(FAILED_KEY)
    _wait_for(lambda: server._incoming == 0)
    late.put("r7", b"y" * 1000)
    for conn in slow[1:]:
        conn.close()
    late.close()


def test_the_default_caps_bound_what_the_store_holds():
    s = StoreServer(new_token())
    try:
        assert (s.max_value, s.max_total) == (DEFAULT_MAX_VALUE, DEFAULT_MAX_TOTAL) == (64 << 20, 256 << 20)
    finally:
        s.close()


def test_a_credential_file_is_private_and_taken_once(tmp_path):
    s = StoreServer(new_token())
    try:
        _write_credentials(s, str(tmp_path), 2)
        assert stat.S_IMODE(os.stat(tmp_path / "rank-1").st_mode) == 0o600
        assert take_credential(str(tmp_path), 1) == s.credential(1)
        with pytest.raises(FileNotFoundError):
            take_credential(str(tmp_path), 1)
        assert sorted(os.listdir(tmp_path)) == ["rank-0"]
    finally:
        s.close()


#: Each rank publishes a value and reads the other's; then tries to speak for the other rank
#: (its hello, the failure key, the other's topology key), all of which must be refused, while
#: the job ends well.
EXCHANGE = """
import os, sys
from pjrt_hub.abi import PermissionDenied
from pjrt_hub.distributed import FAILED_KEY, StoreClient, initialize
job = initialize()
other = 1 - job.rank
job.store.put(f"greeting/{job.rank}", f"hello from {job.rank}".encode())
heard = job.store.get(f"greeting/{other}", 30).decode()
refused = []
try:
    StoreClient(os.environ["PJRT_HUB_STORE"], os.environ["PJRT_HUB_RANK_CREDENTIAL"], other)
except PermissionDenied:
    refused.append("hello")
for key in (FAILED_KEY, f"cpu:topology/{other}"):
    try:
        job.store.put(key, b"rank %d left the job" % other)
    except PermissionDenied:
        refused.append(key)
assert job.store.try_get(FAILED_KEY) is None
print(f"rank {job.rank} heard {heard!r}; refused {refused}", flush=True)
job.close()
"""


@pytest.mark.parametrize("mpi", [False, True], ids=["subprocesses", "mpiexec"])
def test_a_launched_job_works_and_its_ranks_cannot_speak_for_each_other(tmp_path, mpi):
    if mpi and mpiexec_path() is None:
        pytest.skip("needs the [distributed] extra (mpi4py and MPICH)")
    script = tmp_path / "exchange.py"
    script.write_text(EXCHANGE)
    cmd = [sys.executable, "-m", "pjrt_hub.cli", "launch", "-n", "2", "--kv-timeout", "30",
           *([] if mpi else ["--no-mpi"]), "--", sys.executable, str(script)]
    done = run_job(cmd, 120)
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        assert (f"rank {rank} heard 'hello from {1 - rank}'; refused ['hello', 'pjrt_hub/job/failed', "
                f"'cpu:topology/{1 - rank}']") in done.stdout, done.stdout + done.stderr
    assert done.stderr.count("the store refused a stranger: not the credential of rank") == 2, done.stderr
    assert "left the job" not in done.stderr, done.stderr


#: Each rank writes out its whole environment.
ENVIRONMENT = """
import json, os, sys
rank = os.environ["PJRT_HUB_RANK"]
with open(os.path.join(sys.argv[1], f"env-{rank}.json"), "w") as f:
    json.dump(dict(os.environ), f)
"""


@pytest.mark.parametrize("mpi", [False, True], ids=["subprocesses", "mpiexec"])
def test_a_launched_process_holds_its_own_credential_and_nothing_else(tmp_path, monkeypatch, mpi):
    if mpi and mpiexec_path() is None:
        pytest.skip("needs the [distributed] extra (mpi4py and MPICH)")
    secret = new_token()
    monkeypatch.setattr(_launch, "new_token", lambda: secret)
    # What an enclosing job gave this process must not reach the new job's.
    monkeypatch.setenv("PJRT_HUB_RANK_CREDENTIAL", rank_credential(secret, 1))
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def recorded(*args, **kwargs):
        made.append(mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_launch.tempfile, "mkdtemp", recorded)
    script = tmp_path / "environment.py"
    script.write_text(ENVIRONMENT)
    out = io.StringIO()
    code = _launch.launch([sys.executable, str(script), str(tmp_path)], 2, timeout=30, use_mpi=mpi, out=out)
    assert code == 0, out.getvalue()
    for rank in (0, 1):
        env = json.loads((tmp_path / f"env-{rank}.json").read_text())
        assert env["PJRT_HUB_RANK"] == str(rank)
        assert env["PJRT_HUB_RANK_CREDENTIAL"] == rank_credential(secret, rank)
        values = "\n".join(f"{k}={v}" for k, v in env.items())
        assert secret not in values and rank_credential(secret, 1 - rank) not in values
    assert len(made) == int(mpi) and not any(os.path.exists(d) for d in made)  # the credential files are gone
