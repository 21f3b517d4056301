"""The job's key-value store: a small TCP server and its client, needing nothing beyond pjrt-hub.

The processes of a job find each other through PJRT's three key-value calls (``get`` with a
timeout, ``try_get``, ``put``: :class:`pjrt_hub.abi.KeyValueStore`). :class:`StoreServer` keeps
the values in memory and serves them; :class:`StoreClient` is what a process hands to
``client_create``. Nobody else joins a job: the server listens on loopback unless told
otherwise, and every connection must first present the job's random token (a line of JSON
``{"token": ..., "rank": ...}``) within a few seconds. A client with the wrong token, one that
sends garbage, or one that connects and never speaks is dropped with a log line, and the job goes
on. When a rank's connection closes without its goodbye (the process died), the server records
it under :data:`FAILED_KEY`, which the ranks still running read to name it in their errors.

Wire format after the hello: a request is a JSON line ``{"op", "key", "size", "timeout"}``
followed by ``size`` bytes of value (for ``put``); the answer is a JSON line ``{"ok", "size",
"error"}`` followed by the value's bytes.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import socket
import threading
import time
from typing import Any

from pjrt_hub.abi import DeadlineExceeded, PermissionDenied, Unavailable

__all__ = ["FAILED_KEY", "StoreClient", "StoreServer", "new_token"]

_log = logging.getLogger("pjrt_hub.distributed")

#: Set by the server to a message naming the first rank that left the job without a goodbye.
FAILED_KEY = "pjrt_hub/job/failed"
_MAX_LINE = 1 << 16
_MAX_VALUE = 1 << 30


#: Refusals logged one by one before the store only logs their count.
_LOGGED_REFUSALS = 10


def new_token() -> str:
    return secrets.token_hex(16)


def _read_line(sock: socket.socket, buffer: bytearray, deadline: float | None = None) -> bytes:
    """The next line; with ``deadline`` (time.monotonic()), socket.timeout once it passes, however
    the bytes trickle in (a socket's own timeout bounds each read, not the line)."""
    while True:
        end = buffer.find(b"\n")
        if end >= 0:
            line = bytes(buffer[:end])
            del buffer[:end + 1]
            return line
        if len(buffer) > _MAX_LINE:
            raise ValueError("line too long")
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("the line did not arrive in time")
            sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        buffer += chunk


def _read_exact(sock: socket.socket, buffer: bytearray, size: int) -> bytes:
    while len(buffer) < size:
        chunk = sock.recv(max(65536, size - len(buffer)))
        if not chunk:
            raise ConnectionError("connection closed")
        buffer += chunk
    data = bytes(buffer[:size])
    del buffer[:size]
    return data


class StoreServer:
    """The store of one job. ``StoreServer(token).start()`` returns (host, port)."""

    def __init__(self, token: str, host: str = "127.0.0.1", port: int = 0, *, hello_timeout: float = 5.0) -> None:
        self.token = token
        self.host = host
        self.hello_timeout = hello_timeout
        self._values: dict[str, bytes] = {}
        self._cond = threading.Condition()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._closed = False
        #: Connections refused, with why (for tests and the launcher's summary).
        self.refused: list[str] = []
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "StoreServer":
        self._thread = threading.Thread(target=self._accept, name="pjrt-hub store", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass

    def value(self, key: str) -> bytes | None:
        with self._cond:
            return self._values.get(key)

    def set(self, key: str, value: bytes) -> None:
        with self._cond:
            self._values[key] = bytes(value)
            self._cond.notify_all()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, peer = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _refuse(self, conn: socket.socket, peer: Any, why: str) -> None:
        message = f"refused a connection from {peer[0]}:{peer[1]}: {why}"
        self.refused.append(why)
        # A stranger knocking in a loop must not flood the job's log: every refusal is counted,
        # the first few are logged, then one line at each power of ten.
        count = len(self.refused)
        if count <= _LOGGED_REFUSALS:
            _log.warning("pjrt-hub store: %s", message)
        elif str(count).rstrip("0") == "1":
            _log.warning("pjrt-hub store: %d connections refused so far; the last: %s", count, message)
        try:
            conn.close()
        except OSError:
            pass

    def _serve(self, conn: socket.socket, peer: Any) -> None:
        buffer = bytearray()
        try:
            hello = json.loads(_read_line(conn, buffer, time.monotonic() + self.hello_timeout))
            if not isinstance(hello, dict):
                raise ValueError("not an object")
        except socket.timeout:
            return self._refuse(conn, peer, f"no hello within {self.hello_timeout:g} s")
        except (ValueError, RecursionError, UnicodeDecodeError, ConnectionError, OSError):
            # RecursionError: json nests as deep as the text does ('[' x 60000).
            return self._refuse(conn, peer, "not a pjrt-hub store client (garbage or closed before its hello)")
        token = hello.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.token.encode()):
            return self._refuse(conn, peer, "wrong job token")
        rank = hello.get("rank")
        conn.settimeout(None)
        said_bye = False
        try:
            conn.sendall(b'{"ok": true}\n')
            while True:
                request = json.loads(_read_line(conn, buffer))
                op, key = request.get("op"), str(request.get("key", ""))
                if op == "bye":
                    said_bye = True
                    conn.sendall(b'{"ok": true}\n')
                    return
                if op == "put":
                    size = int(request.get("size", 0))
                    if not 0 <= size <= _MAX_VALUE:
                        raise ValueError(f"value size {size}")
                    self.set(key, _read_exact(conn, buffer, size))
                    conn.sendall(b'{"ok": true}\n')
                elif op in ("get", "try_get"):
                    deadline = time.monotonic() + float(request.get("timeout", 0) or 0)
                    with self._cond:
                        value = self._values.get(key)
                        while value is None and op == "get" and not self._closed:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                break
                            self._cond.wait(min(left, 1.0))
                            value = self._values.get(key)
                    if value is None:
                        conn.sendall(b'{"ok": false, "error": "not found"}\n')
                    else:
                        conn.sendall(json.dumps({"ok": True, "size": len(value)}).encode() + b"\n" + value)
                else:
                    raise ValueError(f"unknown op {op!r}")
        except (ConnectionError, OSError, ValueError, RecursionError) as exc:
            if not said_bye and rank is not None and not self._closed:
                why = f"rank {rank} left the job without saying goodbye (its process died?)"
                _log.warning("pjrt-hub store: %s (%s)", why, exc)
                with self._cond:
                    self._values.setdefault(FAILED_KEY, why.encode())
                    self._cond.notify_all()
        finally:
            try:
                conn.close()
            except OSError:
                pass


class StoreClient:
    """A connection to the job's store: the :class:`~pjrt_hub.abi.KeyValueStore` of a process."""

    def __init__(self, address: str, token: str, rank: int, *, connect_timeout: float = 60.0) -> None:
        host, _, port = address.rpartition(":")
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                self._sock = socket.create_connection((host, int(port)), timeout=5)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise Unavailable(f"cannot reach the job's store at {address}: {exc}") from None
                time.sleep(0.05)
        self._sock.settimeout(None)
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self.rank = rank
        self._sock.sendall(json.dumps({"token": token, "rank": rank}).encode() + b"\n")
        try:
            answer = json.loads(_read_line(self._sock, self._buffer))
        except (ConnectionError, ValueError):
            raise PermissionDenied(f"the job's store at {address} refused rank {rank} (wrong job token?)") from None
        if not answer.get("ok"):
            raise PermissionDenied(f"the job's store at {address} refused rank {rank}")

    def _request(self, header: dict, value: bytes = b"") -> bytes | None:
        with self._lock:
            try:
                self._sock.sendall(json.dumps(header).encode() + b"\n" + value)
                answer = json.loads(_read_line(self._sock, self._buffer))
                if not answer.get("ok"):
                    return None
                return _read_exact(self._sock, self._buffer, int(answer.get("size", 0)))
            except (ConnectionError, OSError) as exc:
                raise Unavailable(f"lost the connection to the job's store: {exc}") from None

    def put(self, key: str, value: bytes) -> None:
        value = bytes(value)
        self._request({"op": "put", "key": key, "size": len(value)}, value)

    def try_get(self, key: str) -> bytes | None:
        return self._request({"op": "try_get", "key": key})

    def get(self, key: str, timeout: float) -> bytes:
        value = self._request({"op": "get", "key": key, "timeout": float(timeout)})
        if value is None:
            raise DeadlineExceeded(f"the job's store has no {key!r} after {timeout:g} s")
        return value

    def close(self) -> None:
        try:
            self._request({"op": "bye"})
        except Exception:  # noqa: BLE001 - closing a dead connection is fine
            pass
        try:
            self._sock.close()
        except OSError:
            pass
