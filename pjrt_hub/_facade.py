"""The client facade: every call into a plugin passes the version gate.

A plugin at an older minor than the framework has no idea of the calls added since; a plugin at a
newer minor may offer calls the framework must not use. :func:`gate` wraps a plugin's binding
object so that a call newer than ``call_limit`` raises :class:`~pjrt_hub.abi.VersionGateRefusal`
(an Unimplemented, recognised by its type) naming the method, the minor that added it and the
plugin's minor, instead of reaching the plugin (where it would be an AttributeError for a Python
plugin or a read past the function table for a C one). Objects the plugin returns are wrapped the
same way, and wrapped objects passed back in are unwrapped.

The gate sits on the hot path (a tiny execute costs a few microseconds), so it is decided once
per plugin class, not per call: for each class of plugin object a proxy class is built with one
real method per API method, either forwarding or refusing. A gate whose limit reaches the newest
function the API history knows can refuse nothing, whatever class a plugin returns; it is then no
gate at all, and the plugin's own objects are handed out (a proxy there cost a tiny execute a
third of its time). Both kinds of object have ``unwrapped``, the plugin's own object.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, TypeVar

from pjrt_hub.abi import ApiMethod, ApiVersion, ExecuteResult, PjrtObject, VersionGateRefusal, api_methods
from pjrt_hub.abi.history import newest_addition

__all__ = ["Gated", "gate", "unwrap"]


class _Gate:
    """One plugin's gate: who it is and the minor its calls are kept to."""

    __slots__ = ("call_limit", "plugin", "plugin_version", "proxies", "last_event")

    def __init__(self, plugin: str, plugin_version: ApiVersion, call_limit: int) -> None:
        self.plugin = plugin
        self.plugin_version = plugin_version
        self.call_limit = call_limit
        #: plugin class -> its proxy class under this gate
        self.proxies: dict[type, type[Gated]] = {}
        #: The proxy of the event wrapped last: runtimes hand out one shared ready event for
        #: work done inline, and a proxy holds nothing but its target, so it can be handed out
        #: again rather than made for every execution.
        self.last_event: Gated | None = None

    def proxy_class(self, cls: type) -> "type[Gated]":
        proxy = self.proxies.get(cls)
        if proxy is None:
            methods = {name: self._method(cls, info) for name, info in api_methods(cls).items()}
            proxy = type(f"Gated{cls.__name__}", (Gated,), {"__slots__": (), "_gate": self, **methods})
            self.proxies[cls] = proxy
        return proxy

    def _method(self, cls: type, info: ApiMethod) -> Callable[..., Any]:
        name = info.name
        if info.since is not None and info.since > self.call_limit:
            newer_than = "the plugin's" if self.plugin_version.minor < info.since else "the framework's"
            message = (
                f"{cls.__name__}.{name} ({info.c_function}) was added in PJRT API 0.{info.since}, "
                f"but plugin {self.plugin} implements {self.plugin_version}; calls are limited "
                f"to 0.{self.call_limit} ({newer_than} version)."
            )
            plugin, method, since, limit = self.plugin, f"{cls.__name__}.{name}", info.since, self.call_limit

            def refused(self: Gated, *args: Any, **kwargs: Any) -> Any:
                raise VersionGateRefusal(message, plugin=plugin, method=method, since=since, call_limit=limit)

            refused.__name__ = name
            return refused

        gate_ = self

        def forward(self: Gated, *args: Any, **kwargs: Any) -> Any:
            if kwargs:
                kwargs = {k: unwrap(v) for k, v in kwargs.items()}
                result = getattr(self._target, name)(*[unwrap(a) for a in args], **kwargs)
            elif args:
                result = getattr(self._target, name)(*[unwrap(a) for a in args])
            else:
                result = getattr(self._target, name)()
            return result if result is None else _wrap(result, gate_)

        def execute(self: Gated, argument_lists: Any, *rest: Any, **kwargs: Any) -> Any:
            # The hot path of every execution: a list of lists of buffers unwrapped inline (what
            # :func:`unwrap` does, without its calls), the result wrapped straight away. Anything
            # else takes the general walk, so the plugin sees what it always saw.
            if type(argument_lists) is list:
                if len(argument_lists) == 1 and type(argument_lists[0]) is list:  # one device
                    lists = [[b._target if isinstance(b, Gated) else unwrap(b) for b in argument_lists[0]]]
                else:
                    lists = [[b._target if isinstance(b, Gated) else unwrap(b) for b in row]
                             if type(row) is list else unwrap(row) for row in argument_lists]
            else:
                lists = unwrap(argument_lists)
            target: Any = self._target  # a LoadedExecutable: this method stands for its execute
            if rest or kwargs:
                result = target.execute(lists, *[unwrap(a) for a in rest],
                                        **{k: unwrap(v) for k, v in kwargs.items()})
            else:
                result = target.execute(lists)
            if type(result) is ExecuteResult:
                return _wrap_execute_result(result, gate_)
            return result if result is None else _wrap(result, gate_)

        function = getattr(cls, name)

        def forward_bare(self: Gated, *args: Any, **kwargs: Any) -> Any:
            # A method without parameters (destroy, is_ready, dimensions...): the plugin's own
            # function, called with no unwrapping to do (what forward does, one step shorter).
            if args or kwargs:
                return forward(self, *args, **kwargs)
            result = function(self._target)
            return result if result is None else _wrap(result, gate_)

        if name == "execute":
            chosen = execute
        elif _takes_nothing(function):
            chosen = forward_bare
        else:
            chosen = forward
        chosen.__name__ = name
        chosen.__doc__ = getattr(cls, name).__doc__
        return chosen


def _takes_nothing(function: Any) -> bool:
    """Whether a plugin method is a plain function of ``self`` alone (no other parameters)."""
    if not inspect.isfunction(function):
        return False
    try:
        return list(inspect.signature(function).parameters) == ["self"]
    except (TypeError, ValueError):
        return False


class Gated:
    """A plugin object seen through the version gate. Other attribute access is forwarded."""

    __slots__ = ("_target", "__weakref__")
    _target: PjrtObject
    _gate: _Gate

    def __getattr__(self, name: str) -> Any:
        # Not a PJRT call (``__dlpack__``, plugin-specific helpers): no gate, so that plain
        # attributes stay live.
        return getattr(self._target, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self._target).__name__} seen through the version gate is read-only")

    # DLPack is no API method: a buffer of a plugin that supports it has these, others do not.
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        target: Any = self._target
        return target.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        target: Any = self._target
        return target.__dlpack_device__()

    def __eq__(self, other: object) -> bool:
        return self._target == unwrap(other)

    def __hash__(self) -> int:
        return hash(self._target)

    def __repr__(self) -> str:
        return f"<{self._target!r} via version gate {self._gate.plugin}@0.{self._gate.call_limit}>"

    @property
    def unwrapped(self) -> PjrtObject:
        """The plugin's own object, without the gate."""
        return self._target


#: The slot's own setter (Gated.__setattr__ refuses every attribute); from the class dict, where
#: the slot descriptor is, since the type checker reads Gated._target as a PjrtObject.
_set_target: Callable[[Gated, PjrtObject], None] = Gated.__dict__["_target"].__set__


def _proxy(value: PjrtObject, g: _Gate) -> Gated:
    proxy = object.__new__(g.proxies.get(type(value)) or g.proxy_class(type(value)))
    _set_target(proxy, value)
    return proxy


def _event_proxy(event: PjrtObject, g: _Gate) -> Gated:
    last = g.last_event
    if last is not None and last._target is event:
        return last
    proxy = g.last_event = _proxy(event, g)
    return proxy


def _wrap_execute_result(value: ExecuteResult, g: _Gate) -> ExecuteResult:
    rows, events = value
    # A proxy stands in for the Buffer or Event it wraps: it has the same API methods.
    if len(events) == 1 and len(rows) == 1:  # one device, the common case: _proxy, inline
        row: list[Any] = []
        classes = g.proxies
        for buffer in rows[0]:
            proxy = object.__new__(classes.get(type(buffer)) or g.proxy_class(type(buffer)))
            _set_target(proxy, buffer)
            row.append(proxy)
        outputs: list[list[Any]] = [row]
        last = g.last_event  # _event_proxy, inline
        proxies: list[Any] = [last if last is not None and last._target is events[0] else _event_proxy(events[0], g)]
    else:
        outputs = [[_proxy(b, g) for b in row] for row in rows]
        proxies = [_proxy(e, g) for e in events]
    # ExecuteResult(outputs, proxies), without the named tuple's Python-level __new__.
    return tuple.__new__(ExecuteResult, (outputs, proxies))


def _wrap(value: Any, g: _Gate) -> Any:
    if isinstance(value, PjrtObject):
        return _proxy(value, g)
    if type(value) is ExecuteResult:  # the hot path of every execute
        return _wrap_execute_result(value, g)
    if isinstance(value, list):
        return [_wrap(v, g) for v in value]
    if isinstance(value, tuple):
        items = [_wrap(v, g) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def unwrap(value: Any) -> Any:
    """The plugin's own objects inside ``value`` (lists and tuples are walked)."""
    if isinstance(value, Gated):
        return value._target
    if isinstance(value, list):
        return [v._target if isinstance(v, Gated) else unwrap(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple([unwrap(v) for v in value])
    return value


_P = TypeVar("_P", bound=PjrtObject)


def gate(obj: _P, *, plugin: str, plugin_version: ApiVersion, call_limit: int) -> Gated | _P:
    """Wrap ``obj`` so that calls newer than ``call_limit`` raise VersionGateRefusal (an
    Unimplemented); ``obj`` itself when no call is newer than the limit."""
    if call_limit >= newest_addition():
        return obj
    return _proxy(obj, _Gate(plugin, plugin_version, call_limit))
