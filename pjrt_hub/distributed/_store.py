"""The job's key-value store: a small TCP server and its client, needing nothing beyond pjrt-hub.

The processes of a job find each other through PJRT's three key-value calls (``get`` with a
timeout, ``try_get``, ``put``: :class:`pjrt_hub.abi.KeyValueStore`). :class:`StoreServer` keeps
the values in memory and serves them; :class:`StoreClient` is what a process hands to
``client_create``. Nobody else joins a job, and no process speaks for another: the server
listens on loopback unless told otherwise, and holds the job's secret, which no process sees;
each rank gets only its own credential, derived from the secret and its rank
(:func:`rank_credential`), and every connection must first present a rank and that rank's
credential (a line of JSON ``{"rank": ..., "credential": ...}``) within a few seconds. A
connection with a credential that is not its rank's, one that sends garbage, or one that
connects and never speaks is dropped with a log line, and the job goes on. When a rank's
connection closes without its goodbye (the process died), the server records it under
:data:`FAILED_KEY`, which the ranks still running read to name it in their errors.

Who may write a key, so that a rank cannot make another one look dead or rewrite what it
published: keys under ``pjrt_hub/job/`` (:data:`FAILED_KEY`) are the store's own, written by
no client; a key whose name says which rank publishes it belongs to that rank from the start
(``<prefix>:topology/<r>``, the CPU runtime's device counts; ``<prefix>:local_topology/<platform>/<r>``,
XLA's; ``<prefix>:global_topology/<platform>``, which XLA's node 0 writes, is rank 0's); any
other key belongs to the first rank that writes it. Only its owner may write a key again. Two
caps bound what the job can make the store hold: one on a value (``max_value``) and one on all
the store holds (``max_total``, every key's name and value plus :data:`ENTRY_COST` bytes of
bookkeeping each). A refused put is an error the client raises (``PermissionDenied``,
``ResourceExhausted``), the connection stays usable and nothing stored is lost.

Wire format after the hello: a request is a JSON line ``{"op", "key", "size", "timeout"}``
followed by ``size`` bytes of value (for ``put``); the answer is a JSON line ``{"ok", "size"}``
followed by the value's bytes, or ``{"ok": false, "code", "error"}`` with the
``PJRT_Error_Code`` of the refusal (``NOT_FOUND`` for a key that is not there).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import socket
import threading
import time
from typing import Any

from pjrt_hub.abi import (
    DeadlineExceeded, ErrorCode, PermissionDenied, PjrtError, ResourceExhausted, Unavailable, error_for_code,
)

__all__ = ["DEFAULT_MAX_TOTAL", "DEFAULT_MAX_VALUE", "ENTRY_COST", "FAILED_KEY", "StoreClient", "StoreServer",
           "new_token", "rank_credential"]

_log = logging.getLogger("pjrt_hub.distributed")

#: Set by the server to a message naming the first rank that left the job without a goodbye.
FAILED_KEY = "pjrt_hub/job/failed"
#: Keys only the store itself writes.
_STORE_PREFIX = "pjrt_hub/job/"
_MAX_LINE = 1 << 16

#: What a job stores is small (addresses, device counts, a failure message): the caps leave room
#: for programs that publish more, and stop a process from filling the launcher's memory.
DEFAULT_MAX_VALUE = 64 << 20
DEFAULT_MAX_TOTAL = 256 << 20
#: Bytes each key counts against ``max_total`` beyond its name and value: Python's own objects
#: for an entry, so that a flood of empty values is bounded too.
ENTRY_COST = 256

_RANK = r"(0|[1-9][0-9]*)"
#: Keys that name the rank publishing them (a plugin prefixes its keys with ``<name>:``).
_RANK_KEYS = (re.compile(rf"(?:[^/]*:)?topology/{_RANK}"),
              re.compile(rf"(?:[^/]*:)?local_topology/[^/]+/{_RANK}"))
_RANK_ZERO_KEYS = re.compile(r"(?:[^/]*:)?global_topology/[^/]+")
#: The owner of the store's own keys.
_STORE = -1

#: Refusals logged one by one before the store only logs their count.
_LOGGED_REFUSALS = 10


def new_token() -> str:
    """A new job secret, from which each rank's credential is derived."""
    return secrets.token_hex(16)


def rank_credential(secret: str, rank: int) -> str:
    """The credential of ``rank`` in the job of ``secret``: all a process holds to join the job."""
    return hmac.new(secret.encode(), f"rank:{rank}".encode(), hashlib.sha256).hexdigest()


def _owner_by_name(key: str) -> int | None:
    """The owner a key's name gives it (a rank, or the store), or None: its first writer's."""
    if key.startswith(_STORE_PREFIX):
        return _STORE
    for pattern in _RANK_KEYS:
        match = pattern.fullmatch(key)
        if match:
            return int(match.group(1))
    return 0 if _RANK_ZERO_KEYS.fullmatch(key) else None


def _entry_size(key: str, value: bytes) -> int:
    return len(key.encode()) + len(value) + ENTRY_COST


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


def _skip(sock: socket.socket, buffer: bytearray, size: int) -> None:
    """Read and drop ``size`` bytes (a refused value), holding at most one chunk of them."""
    taken = min(size, len(buffer))
    del buffer[:taken]
    size -= taken
    while size > 0:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed")
        size -= len(chunk)


class StoreServer:
    """The store of one job. ``StoreServer(secret).start()`` serves it; :meth:`credential` gives
    each rank the credential to hand to its :class:`StoreClient`."""

    def __init__(self, secret: str, host: str = "127.0.0.1", port: int = 0, *, hello_timeout: float = 5.0,
                 max_value: int = DEFAULT_MAX_VALUE, max_total: int = DEFAULT_MAX_TOTAL) -> None:
        self.secret = secret
        self.host = host
        self.hello_timeout = hello_timeout
        self.max_value = max_value
        self.max_total = max_total
        self._values: dict[str, bytes] = {}
        #: The rank that owns each key written by a client (see the module's rule).
        self._owners: dict[str, int] = {}
        #: Bytes held (see ``_entry_size``) and bytes promised to puts whose values are arriving.
        self._held = 0
        self._incoming = 0
        self._cond = threading.Condition()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._closed = False
        #: Connections refused, with why (for tests and the launcher's summary).
        self.refused: list[str] = []
        #: Puts refused, with why (for tests and the launcher's summary).
        self.refused_puts: list[str] = []
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def credential(self, rank: int) -> str:
        return rank_credential(self.secret, rank)

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
        """Store ``value`` as the store itself: no owner, no cap (what the launcher writes)."""
        with self._cond:
            self._store(key, bytes(value))
            self._cond.notify_all()

    def _store(self, key: str, value: bytes) -> None:
        old = self._values.get(key)
        if old is not None:
            self._held -= _entry_size(key, old)
        self._values[key] = value
        self._held += _entry_size(key, value)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, peer = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _log_refusal(self, refusals: list[str], what: str, message: str) -> None:
        # A stranger knocking in a loop must not flood the job's log: every refusal is counted,
        # the first few are logged, then one line at each power of ten.
        count = len(refusals)
        if count <= _LOGGED_REFUSALS:
            _log.warning("pjrt-hub store: %s", message)
        elif str(count).rstrip("0") == "1":
            _log.warning("pjrt-hub store: %d %s refused so far; the last: %s", count, what, message)

    def _refuse(self, conn: socket.socket, peer: Any, why: str) -> None:
        self.refused.append(why)
        self._log_refusal(self.refused, "connections", f"refused a connection from {peer[0]}:{peer[1]}: {why}")
        try:
            conn.close()
        except OSError:
            pass

    def _admit(self, rank: int, key: str, size: int) -> int:
        """Check that ``rank`` may put ``size`` bytes under ``key``, and promise them room: the
        bytes promised (give them back with :meth:`_commit` or :meth:`_give_back`)."""
        self._check_owner(rank, key)
        if size > self.max_value:
            raise ResourceExhausted(f"the job's store refused {key!r}: its value of {size} bytes is over the "
                                    f"store's cap of {self.max_value} bytes per value")
        with self._cond:
            old = self._values.get(key)
            freed = _entry_size(key, old) if old is not None else 0
            promised = max(0, _entry_size(key, b"") + size - freed)
            if self._held + self._incoming + promised > self.max_total:
                raise ResourceExhausted(
                    f"the job's store refused {key!r}: its value of {size} bytes would take the store to "
                    f"{self._held + self._incoming + promised} bytes, over its cap of {self.max_total} bytes "
                    "in all")
            self._incoming += promised
        return promised

    def _check_owner(self, rank: int, key: str) -> None:
        owner = _owner_by_name(key)
        with self._cond:
            owner = self._owners.get(key) if owner is None else owner
        if owner == _STORE:
            raise PermissionDenied(f"the job's store refused {key!r} from rank {rank}: keys under "
                                   f"{_STORE_PREFIX!r} are written by the store itself")
        if owner is not None and owner != rank:
            raise PermissionDenied(f"the job's store refused {key!r} from rank {rank}: the key is rank {owner}'s")

    def _give_back(self, promised: int) -> None:
        with self._cond:
            self._incoming -= promised

    def _commit(self, rank: int, key: str, value: bytes, promised: int) -> None:
        with self._cond:
            self._incoming -= promised
            # Another rank may have become the key's first writer while this value arrived.
            self._check_owner(rank, key)
            self._owners.setdefault(key, rank)
            self._store(key, value)
            self._cond.notify_all()

    def _hello(self, conn: socket.socket, buffer: bytearray) -> int | str:
        """The rank the connection proves it is, or why it is refused."""
        try:
            hello = json.loads(_read_line(conn, buffer, time.monotonic() + self.hello_timeout))
            if not isinstance(hello, dict):
                raise ValueError("not an object")
        except socket.timeout:
            return f"no hello within {self.hello_timeout:g} s"
        except (ValueError, RecursionError, UnicodeDecodeError, ConnectionError, OSError):
            # RecursionError: json nests as deep as the text does ('[' x 60000).
            return "not a pjrt-hub store client (garbage or closed before its hello)"
        rank, credential = hello.get("rank"), hello.get("credential")
        if type(rank) is not int or rank < 0 or not isinstance(credential, str):
            return "a hello without a rank and its credential"
        if not hmac.compare_digest(credential.encode(), self.credential(rank).encode()):
            return f"not the credential of rank {rank}"
        return rank

    def _serve(self, conn: socket.socket, peer: Any) -> None:
        buffer = bytearray()
        rank = self._hello(conn, buffer)
        if isinstance(rank, str):
            return self._refuse(conn, peer, rank)
        conn.settimeout(None)
        said_bye = False
        try:
            conn.sendall(b'{"ok": true}\n')
            while True:
                request = json.loads(_read_line(conn, buffer))
                if not isinstance(request, dict) or not isinstance(request.get("key", ""), str):
                    raise ValueError("not a request")
                op, key = request.get("op"), request.get("key", "")
                if op == "bye":
                    said_bye = True
                    conn.sendall(b'{"ok": true}\n')
                    return
                if op == "put":
                    size = request.get("size", 0)
                    if type(size) is not int or size < 0:
                        raise ValueError(f"value size {size!r}")
                    self._put(conn, buffer, rank, key, size)
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
                        conn.sendall(json.dumps({"ok": False, "code": int(ErrorCode.NOT_FOUND),
                                                 "error": f"no {key!r}"}).encode() + b"\n")
                    else:
                        conn.sendall(json.dumps({"ok": True, "size": len(value)}).encode() + b"\n" + value)
                else:
                    raise ValueError(f"unknown op {op!r}")
        except (ConnectionError, OSError, ValueError, TypeError, RecursionError) as exc:
            if not said_bye and not self._closed:
                why = f"rank {rank} left the job without saying goodbye (its process died?)"
                _log.warning("pjrt-hub store: %s (%s)", why, exc)
                with self._cond:
                    if FAILED_KEY not in self._values:
                        self._store(FAILED_KEY, why.encode())
                    self._cond.notify_all()
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _put(self, conn: socket.socket, buffer: bytearray, rank: int, key: str, size: int) -> None:
        """Take the value of a put of ``rank`` and answer it; a refused value is read and dropped,
        so that the connection goes on."""
        try:
            promised = self._admit(rank, key, size)
        except PjrtError as refusal:
            _skip(conn, buffer, size)
            return self._answer_refusal(conn, refusal)
        try:
            value = _read_exact(conn, buffer, size)
        except BaseException:
            self._give_back(promised)
            raise
        try:
            self._commit(rank, key, value, promised)
        except PjrtError as refusal:
            return self._answer_refusal(conn, refusal)
        conn.sendall(b'{"ok": true}\n')

    def _answer_refusal(self, conn: socket.socket, refusal: PjrtError) -> None:
        self.refused_puts.append(refusal.message)
        self._log_refusal(self.refused_puts, "puts", refusal.message)
        conn.sendall(json.dumps({"ok": False, "code": int(refusal.code), "error": refusal.message}).encode() + b"\n")


class StoreClient:
    """A connection to the job's store as ``rank``, proved by the rank's ``credential``: the
    :class:`~pjrt_hub.abi.KeyValueStore` of a process."""

    def __init__(self, address: str, credential: str, rank: int, *, connect_timeout: float = 60.0) -> None:
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
        self._sock.sendall(json.dumps({"rank": rank, "credential": credential}).encode() + b"\n")
        try:
            answer = json.loads(_read_line(self._sock, self._buffer))
        except (ConnectionError, ValueError):
            raise PermissionDenied(f"the job's store at {address} refused rank {rank} (not that rank's "
                                   "credential?)") from None
        if not answer.get("ok"):
            raise PermissionDenied(f"the job's store at {address} refused rank {rank}")

    def _request(self, header: dict, value: bytes = b"") -> bytes | None:
        """The answer's value; None for a key the store does not have; a refusal raised."""
        with self._lock:
            try:
                self._sock.sendall(json.dumps(header).encode() + b"\n" + value)
                answer = json.loads(_read_line(self._sock, self._buffer))
                if not answer.get("ok"):
                    code = answer.get("code")
                    if code == ErrorCode.NOT_FOUND:
                        return None
                    raise error_for_code(code if isinstance(code, int) else ErrorCode.UNKNOWN,
                                         str(answer.get("error", "the job's store refused the request")))
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
