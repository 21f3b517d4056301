"""The job store (credentials, strangers refused while the job goes on) and the topology exchange."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from pjrt_hub.abi import DeadlineExceeded, PermissionDenied
from pjrt_hub.backends.cpu_runtime import CpuApi
from pjrt_hub.backends.reference import ReferenceCompiler
from pjrt_hub.distributed import FAILED_KEY, StoreClient, StoreServer, new_token


@pytest.fixture
def server():
    s = StoreServer(new_token(), hello_timeout=0.5).start()
    yield s
    s.close()


def test_get_try_get_put_and_timeouts(server):
    a = StoreClient(server.address, server.credential(0), 0)
    b = StoreClient(server.address, server.credential(1), 1)
    assert a.try_get("k") is None
    threading.Timer(0.2, lambda: b.put("k", b"\x00v")).start()
    assert a.get("k", 5) == b"\x00v"
    with pytest.raises(DeadlineExceeded, match="'missing' after 0.2 s"):
        a.get("missing", 0.2)
    a.close()
    b.close()
    assert server.value(FAILED_KEY) is None  # goodbyes said: nobody failed


def test_strangers_are_refused_with_a_log_line_while_the_job_goes_on(server, caplog):
    caplog.set_level(logging.WARNING, logger="pjrt_hub.distributed")
    member = StoreClient(server.address, server.credential(0), 0)
    with pytest.raises(PermissionDenied):
        StoreClient(server.address, "0" * 64, 1)
    garbage = socket.create_connection(("127.0.0.1", server.port))
    garbage.sendall(b"\xff\xfe GET / HTTP/1.0\r\n\r\n")
    silent = socket.create_connection(("127.0.0.1", server.port))
    deadline = time.monotonic() + 10
    while len(server.refused) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(server.refused) == sorted(["not the credential of rank 1", "no hello within 0.5 s",
                                             "not a pjrt-hub store client (garbage or closed before its hello)"])
    assert sum("refused a connection" in r.getMessage() for r in caplog.records) == 3
    member.put("still", b"here")
    assert member.get("still", 1) == b"here"
    garbage.close()
    silent.close()
    member.close()


def _wait_refused(server, count):
    deadline = time.monotonic() + 20
    while len(server.refused) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_hello_that_trickles_in_or_nests_deep_is_refused_and_the_job_goes_on(server):
    member = StoreClient(server.address, server.credential(0), 0)
    trickle = socket.create_connection(("127.0.0.1", server.port))
    start = time.monotonic()
    for byte in b'{"credential": "':  # one byte every 0.1 s: each read is quick, the hello never ends
        try:
            trickle.sendall(bytes([byte]))
        except OSError:
            break
        time.sleep(0.1)
        if server.refused:
            break
    _wait_refused(server, 1)
    assert server.refused == ["no hello within 0.5 s"] and time.monotonic() - start < 2
    deep = socket.create_connection(("127.0.0.1", server.port))
    deep.sendall(b"[" * 60000 + b"\n")
    _wait_refused(server, 2)
    assert server.refused[1] == "not a pjrt-hub store client (garbage or closed before its hello)"
    member.put("still", b"here")
    assert member.get("still", 1) == b"here"
    for s in (trickle, deep, member):
        s.close()


def test_many_strangers_make_a_few_log_lines_and_are_all_counted(server, caplog):
    caplog.set_level(logging.WARNING, logger="pjrt_hub.distributed")
    for _ in range(30):
        stranger = socket.create_connection(("127.0.0.1", server.port))
        stranger.sendall(b"GET / HTTP/1.0\r\n\r\n")
        stranger.close()
    _wait_refused(server, 30)
    assert len(server.refused) == 30
    assert sum("refused a connection" in r.getMessage() for r in caplog.records) == 10


def test_a_rank_that_disappears_is_named(server):
    doomed = StoreClient(server.address, server.credential(3), 3)
    doomed._sock.close()  # the process died: no goodbye
    deadline = time.monotonic() + 5
    while server.value(FAILED_KEY) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert b"rank 3 left the job" in server.value(FAILED_KEY)


def test_the_store_listens_on_loopback_only(server):
    assert server.host == "127.0.0.1"


def test_processes_exchange_topologies(server):
    api = CpuApi(ReferenceCompiler())
    clients = {}

    def make(node, devices):
        store = StoreClient(server.address, server.credential(node), node)
        clients[node] = api.client_create({"node_id": node, "num_nodes": 2, "cpu_device_count": devices},
                                          kv_store=store)

    threads = [threading.Thread(target=make, args=(n, d)) for n, d in ((0, 2), (1, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    zero, one = clients[0], clients[1]
    assert [d.id for d in zero.devices()] == [0, 1, 2, 3, 4] == [d.id for d in one.devices()]
    assert [d.id for d in zero.addressable_devices()] == [0, 1]
    assert [d.id for d in one.addressable_devices()] == [2, 3, 4]
    assert [d.get_description().process_index() for d in one.devices()] == [0, 0, 1, 1, 1]
    assert (zero.process_index(), one.process_index()) == (0, 1)
    assert not zero.devices()[3].is_addressable()


def test_a_job_client_needs_the_store():
    with pytest.raises(Exception, match="needs the job's key-value store"):
        CpuApi(ReferenceCompiler()).client_create({"node_id": 0, "num_nodes": 2})


class _FakeJaxClient:
    """The methods of jaxlib's DistributedRuntimeClient that the adapter uses."""

    def __init__(self):
        self.values = {}

    def key_value_set_bytes(self, key, value):
        self.values[key] = value

    def key_value_try_get_bytes(self, key):
        if key not in self.values:
            raise RuntimeError(f"NOT_FOUND: Config key {key} not found")
        return self.values[key]

    def blocking_key_value_get_bytes(self, key, timeout_ms):
        if key not in self.values:
            raise RuntimeError(f"DEADLINE_EXCEEDED: GetKeyValue() timed out with key: {key}")
        return self.values[key]


def test_jax_distributed_client_as_the_store():
    from pjrt_hub.distributed import JaxKeyValueStore

    fake = _FakeJaxClient()
    store = JaxKeyValueStore(fake, prefix="cpu:")
    assert store.try_get("k") is None
    store.put("k", b"v")
    assert fake.values == {"cpu:k": b"v"}
    assert store.get("k", 1.0) == b"v" and store.try_get("k") == b"v"
    with pytest.raises(DeadlineExceeded):
        store.get("other", 0.1)
