"""The key-value callbacks of ``PJRT_Client_Create``, both ways across the C API.

They are how the processes of a job meet (each puts its part of the topology, then reads the
others'), and a framework passes them to a client of one process too (JAX does whenever
``jax.distributed`` is initialized). The bridge hands a framework's
:class:`~pjrt_hub.abi.KeyValueStore` to a C plugin as callbacks (:func:`store_callbacks`); the
server hands a C caller's callbacks to a Python plugin as a KeyValueStore
(:class:`CallerKeyValueStore`). Either way the one who calls a callback lends it an error maker
(``callback_error``, a pointer to a ``PJRT_CallbackError`` function pointer) through which a
failed callback returns a ``PJRT_Error*`` of the caller's own, and a value handed back comes with
a deleter the receiver calls once it has copied it.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import weakref
from dataclasses import dataclass
from typing import Any

from pjrt_hub.abi import (
    DeadlineExceeded,
    ErrorCode,
    Internal,
    KeyValueStore,
    NotFound,
    PjrtError,
    error_for_code,
)

__all__ = ["CallerKeyValueStore", "StoreCallbacks", "forget_store", "store_callbacks"]

log = logging.getLogger("pjrt_hub.c_api")


class _GetArgs(ctypes.Structure):
    """``PJRT_KeyValueGetCallback_Args``."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("key", ctypes.c_void_p), ("key_size", ctypes.c_size_t), ("timeout_in_ms", ctypes.c_int),
                ("callback_error", ctypes.c_void_p), ("user_arg", ctypes.c_void_p), ("value", ctypes.c_void_p),
                ("value_size", ctypes.c_size_t), ("value_deleter_callback", ctypes.c_void_p)]


class _TryGetArgs(ctypes.Structure):
    """``PJRT_KeyValueTryGetCallback_Args`` (0.61): the get without a timeout."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("key", ctypes.c_void_p), ("key_size", ctypes.c_size_t), ("callback_error", ctypes.c_void_p),
                ("user_arg", ctypes.c_void_p), ("value", ctypes.c_void_p), ("value_size", ctypes.c_size_t),
                ("value_deleter_callback", ctypes.c_void_p)]


class _PutArgs(ctypes.Structure):
    """``PJRT_KeyValuePutCallback_Args``."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("key", ctypes.c_void_p), ("key_size", ctypes.c_size_t), ("value", ctypes.c_void_p),
                ("value_size", ctypes.c_size_t), ("callback_error", ctypes.c_void_p), ("user_arg", ctypes.c_void_p)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_ERROR_MAKER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
#: The largest ``timeout_in_ms`` a C int holds (about 24 days: "wait as long as it takes").
_MAX_TIMEOUT_MS = (1 << 31) - 1
_TOKENS = itertools.count(1)


def _text(address: int | None, size: int) -> str:
    return ctypes.string_at(address, size).decode("utf-8", "replace") if size and address else ""


# -- the bridge's side: a framework's store as C callbacks -------------------------------------


#: Stores whose callbacks a plugin may call, by the token that is their ``user_arg``.
_STORES: dict[int, KeyValueStore] = {}
#: Values handed to a plugin, by address, until it calls the deleter.
_VALUES: dict[int, ctypes.Array] = {}


def _plugin_error(callback_error: int | None, exc: BaseException) -> int | None:
    """The plugin's own ``PJRT_Error*`` for ``exc``, made with its ``callback_error``."""
    if isinstance(exc, PjrtError):
        code, message = int(exc.code), exc.message
    else:
        code, message = int(ErrorCode.INTERNAL), f"the key-value store raised {type(exc).__name__}: {exc}"
    maker = ctypes.c_void_p.from_address(callback_error).value if callback_error else None
    if not maker:
        # Nothing to make the error with: the plugin gets no value, and the log says why.
        log.error("a key-value callback failed and the plugin gave no callback_error: %s", message)
        return None
    data = message.encode("utf-8", "replace")
    return _ERROR_MAKER(maker)(code, data, len(data))


def _hand_value(args: _GetArgs | _TryGetArgs, value: bytes) -> None:
    buf = ctypes.create_string_buffer(bytes(value), max(1, len(value)))
    _VALUES[ctypes.addressof(buf)] = buf
    args.value = ctypes.addressof(buf)
    args.value_size = len(value)
    args.value_deleter_callback = _DELETE_VALUE_ADDRESS


def _delete_value(value: int | None) -> None:
    _VALUES.pop(value or 0, None)


def _store(user_arg: int | None) -> KeyValueStore:
    store = _STORES.get(user_arg or 0)
    if store is None:
        raise Internal("a key-value callback was called for a client that is gone")
    return store


def _get(address: int) -> int | None:
    args = _GetArgs.from_address(address)
    try:
        timeout = args.timeout_in_ms / 1000.0 if args.timeout_in_ms >= 0 else float(_MAX_TIMEOUT_MS) / 1000.0
        _hand_value(args, _store(args.user_arg).get(_text(args.key, args.key_size), timeout))
        return None
    except BaseException as exc:  # noqa: BLE001 - nothing may cross into C
        return _plugin_error(args.callback_error, exc)


def _try_get(address: int) -> int | None:
    args = _TryGetArgs.from_address(address)
    try:
        key = _text(args.key, args.key_size)
        value = _store(args.user_arg).try_get(key)
        if value is None:
            raise NotFound(f"key {key!r} has not been put")
        _hand_value(args, value)
        return None
    except BaseException as exc:  # noqa: BLE001 - nothing may cross into C
        return _plugin_error(args.callback_error, exc)


def _put(address: int) -> int | None:
    args = _PutArgs.from_address(address)
    try:
        _store(args.user_arg).put(_text(args.key, args.key_size), ctypes.string_at(args.value, args.value_size))
        return None
    except BaseException as exc:  # noqa: BLE001 - nothing may cross into C
        return _plugin_error(args.callback_error, exc)


_KEEP = [_CALLBACK(_get), _CALLBACK(_try_get), _CALLBACK(_put), _DELETER(_delete_value)]
_GET_ADDRESS, _TRY_GET_ADDRESS, _PUT_ADDRESS, _DELETE_VALUE_ADDRESS = (
    ctypes.cast(f, ctypes.c_void_p).value for f in _KEEP)


@dataclass(frozen=True)
class StoreCallbacks:
    """What ``PJRT_Client_Create_Args`` takes for a store: the three callbacks and their user_arg."""

    get: int
    try_get: int
    put: int
    user_arg: int

    def release_with(self, owner: Any) -> None:
        """Forget the store when ``owner`` (the client's handle owner) is gone."""
        weakref.finalize(owner, _STORES.pop, self.user_arg, None)


def store_callbacks(store: KeyValueStore) -> StoreCallbacks:
    """C callbacks over ``store`` for ``PJRT_Client_Create``; they stay callable until
    :meth:`StoreCallbacks.release_with`'s owner goes."""
    token = next(_TOKENS)
    _STORES[token] = store
    return StoreCallbacks(_GET_ADDRESS or 0, _TRY_GET_ADDRESS or 0, _PUT_ADDRESS or 0, token)


def forget_store(callbacks: StoreCallbacks) -> None:
    """The client was never made: its store is not needed."""
    _STORES.pop(callbacks.user_arg, None)


# -- the server's side: a C caller's callbacks as a store --------------------------------------


#: Errors the caller's callbacks made with our error maker, by the handle they returned.
_CALLER_ERRORS: dict[int, PjrtError] = {}


def _make_caller_error(code: int, message: int | None, size: int) -> int:
    token = next(_TOKENS)
    _CALLER_ERRORS[token] = error_for_code(code, _text(message, size))
    return token


_MAKER = _ERROR_MAKER(_make_caller_error)
#: ``callback_error`` is a pointer to the function pointer: this is what it points at.
_MAKER_SLOT = ctypes.c_void_p(ctypes.cast(_MAKER, ctypes.c_void_p).value)


class CallerKeyValueStore:
    """A C caller's key-value callbacks as a :class:`~pjrt_hub.abi.KeyValueStore`.

    ``try_get`` calls the caller's ``kv_try_get_callback`` where it gave one (0.61); without it,
    a get that does not wait stands in (a key not yet put is None either way)."""

    def __init__(self, plugin: str, get: int, get_arg: int | None, put: int, put_arg: int | None,
                 try_get: int | None = None, try_get_arg: int | None = None) -> None:
        self._plugin = plugin
        self._get = _CALLBACK(get)
        self._get_arg = get_arg
        self._put = _CALLBACK(put)
        self._put_arg = put_arg
        self._try_get = _CALLBACK(try_get) if try_get else None
        self._try_get_arg = try_get_arg

    def _check(self, err: int | None, what: str) -> None:
        if not err:
            return
        error = _CALLER_ERRORS.pop(err, None)
        if error is None:
            raise Internal(f"the caller's {what} returned an error that was not made with the callback_error "
                           f"pjrt-hub gave it", plugin=self._plugin)
        raise error

    @staticmethod
    def _value(args: _GetArgs | _TryGetArgs) -> bytes:
        value = ctypes.string_at(args.value, args.value_size) if args.value_size else b""
        if args.value_deleter_callback and args.value:
            _DELETER(args.value_deleter_callback)(args.value)
        return value

    def get(self, key: str, timeout: float) -> bytes:
        data = key.encode()
        timeout_ms = _MAX_TIMEOUT_MS if timeout * 1000 >= _MAX_TIMEOUT_MS else max(0, int(timeout * 1000))
        args = _GetArgs(struct_size=ctypes.sizeof(_GetArgs), key=ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p),
                        key_size=len(data), timeout_in_ms=timeout_ms,
                        callback_error=ctypes.addressof(_MAKER_SLOT), user_arg=self._get_arg)
        self._check(self._get(ctypes.addressof(args)), "kv_get_callback")
        return self._value(args)

    def try_get(self, key: str) -> bytes | None:
        if self._try_get is None:
            try:
                return self.get(key, 0.0)
            except (NotFound, DeadlineExceeded):
                return None
        data = key.encode()
        args = _TryGetArgs(struct_size=ctypes.sizeof(_TryGetArgs),
                           key=ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p), key_size=len(data),
                           callback_error=ctypes.addressof(_MAKER_SLOT), user_arg=self._try_get_arg)
        try:
            self._check(self._try_get(ctypes.addressof(args)), "kv_try_get_callback")
        except NotFound:
            return None
        return self._value(args)

    def put(self, key: str, value: bytes) -> None:
        data, payload = key.encode(), bytes(value)
        args = _PutArgs(struct_size=ctypes.sizeof(_PutArgs), key=ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p),
                        key_size=len(data), value=ctypes.cast(ctypes.c_char_p(payload), ctypes.c_void_p),
                        value_size=len(payload), callback_error=ctypes.addressof(_MAKER_SLOT), user_arg=self._put_arg)
        self._check(self._put(ctypes.addressof(args)), "kv_put_callback")
