"""The client facade: every call into a plugin passes the version gate.

A plugin at an older minor than the framework has no idea of the calls added since; a plugin at a
newer minor may offer calls the framework must not use. :func:`gate` wraps a plugin's binding
object so that a call newer than ``call_limit`` raises Unimplemented naming the method, the minor
that added it and the plugin's minor, instead of reaching the plugin (where it would be an
AttributeError for a Python plugin or a read past the function table for a C one). Objects the
plugin returns are wrapped the same way, and wrapped objects passed back in are unwrapped.
"""

from __future__ import annotations

from typing import Any

from pjrt_hub.abi import ApiVersion, PjrtObject, Unimplemented, api_methods

__all__ = ["Gated", "gate", "unwrap"]


class _Gate:
    __slots__ = ("call_limit", "plugin", "plugin_version")

    def __init__(self, plugin: str, plugin_version: ApiVersion, call_limit: int) -> None:
        self.plugin = plugin
        self.plugin_version = plugin_version
        self.call_limit = call_limit


class Gated:
    """A plugin object seen through the version gate. Attribute access is forwarded."""

    __slots__ = ("_target", "_gate", "_cache", "__weakref__")

    def __init__(self, target: PjrtObject, gate_: _Gate) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_gate", gate_)
        object.__setattr__(self, "_cache", {})

    def __getattr__(self, name: str) -> Any:
        cache = self._cache
        try:
            return cache[name]
        except KeyError:
            pass
        target = self._target
        info = api_methods(type(target)).get(name)
        if info is None:
            # Not a PJRT call (``__dlpack__``, plugin-specific helpers): no gate, no caching, so
            # that plain attributes stay live.
            return getattr(target, name)
        g = self._gate
        if info.since is not None and info.since > g.call_limit:
            newer_than = "the plugin's" if g.plugin_version.minor < info.since else "the framework's"
            message = (
                f"{type(target).__name__}.{name} ({info.c_function}) was added in PJRT API "
                f"0.{info.since}, but plugin {g.plugin} implements {g.plugin_version}; calls are "
                f"limited to 0.{g.call_limit} ({newer_than} version)."
            )

            def refused(*args: Any, **kwargs: Any) -> Any:
                raise Unimplemented(message, plugin=g.plugin)

            refused.__name__ = name
            cache[name] = refused
            return refused
        method = getattr(target, name)

        def forward(*args: Any, **kwargs: Any) -> Any:
            if args:
                args = tuple(unwrap(a) for a in args)
            if kwargs:
                kwargs = {k: unwrap(v) for k, v in kwargs.items()}
            return _wrap(method(*args, **kwargs), g)

        forward.__name__ = name
        forward.__doc__ = method.__doc__
        cache[name] = forward
        return forward

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self._target).__name__} seen through the version gate is read-only")

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target.__dlpack__(*args, **kwargs)  # type: ignore[attr-defined]

    def __dlpack_device__(self) -> Any:
        return self._target.__dlpack_device__()  # type: ignore[attr-defined]

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


def _wrap(value: Any, g: _Gate) -> Any:
    if isinstance(value, PjrtObject):
        return Gated(value, g)
    if isinstance(value, list):
        return [_wrap(v, g) for v in value]
    if isinstance(value, tuple):
        items = [_wrap(v, g) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def unwrap(value: Any) -> Any:
    """The plugin's own objects inside ``value`` (lists and tuples are walked)."""
    if isinstance(value, Gated):
        return value.unwrapped
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(unwrap(v) for v in value)
    return value


def gate(obj: PjrtObject, *, plugin: str, plugin_version: ApiVersion, call_limit: int) -> Gated:
    """Wrap ``obj`` so that calls newer than ``call_limit`` raise Unimplemented."""
    return Gated(obj, _Gate(plugin, plugin_version, call_limit))
