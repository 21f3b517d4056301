"""Debug locations: ``loc(...)`` after ops, arguments, functions and modules, as readable text.

A location is read as a small tree (file, name, call site, fused) and rendered the way a person
looks for it: ``model.py:12:8 (dot_general)``, ``model.py:12:8``, ``p['w1']``, or None for
``loc(unknown)``. ``#locN`` aliases are resolved, including those defined after their use (the
usual layout of JAX's output), through :class:`~.reader.Reader`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .attributes import AttributeReader

__all__ = ["LocationReader", "render_location"]


@dataclass(frozen=True)
class _Loc:
    """A parsed location before rendering: ``kind`` is file/name/callsite/fused."""

    kind: str
    parts: tuple


def _loc_position(loc: _Loc | None) -> str | None:
    if loc is None:
        return None
    if loc.kind == "file":
        file, line, col = loc.parts
        return f"{file}:{line}:{col}"
    if loc.kind == "name":
        return _loc_position(loc.parts[1])
    if loc.kind == "callsite":
        return _loc_position(loc.parts[0]) or _loc_position(loc.parts[1])
    for child in loc.parts:
        pos = _loc_position(child)
        if pos:
            return pos
    return None


def _loc_name(loc: _Loc | None) -> str | None:
    if loc is None or loc.kind == "file":
        return None
    if loc.kind == "name":
        return loc.parts[0]
    if loc.kind == "callsite":
        return _loc_name(loc.parts[0])
    for child in loc.parts:
        name = _loc_name(child)
        if name:
            return name
    return None


def render_location(loc: _Loc | None) -> str | None:
    """``file:line:col (name)``, ``file:line:col``, ``name`` or None."""
    pos, name = _loc_position(loc), _loc_name(loc)
    if pos and name:
        return f"{pos} ({name})"
    return pos or name


class LocationReader(AttributeReader):
    """Reads locations (see the module docstring)."""

    def _optional_location(self) -> str | None:
        if self.cur.peek_keyword("loc"):
            return render_location(self._parse_loc_specifier())
        return None

    def _parse_loc_specifier(self) -> _Loc | None:
        cur = self.cur
        cur.expect_keyword("loc")
        cur.expect("(", "'(' after 'loc'")
        loc = self._parse_loc_body()
        cur.expect(")", "')' to close the location")
        return loc

    def _parse_loc_body(self) -> _Loc | None:
        cur = self.cur
        cur.skip()
        start = cur.pos
        if cur.accept_keyword("unknown"):
            return None
        if cur.peek("#"):
            name = cur.hash_id()
            if name is None:
                raise cur.expected("an alias name after '#'")
            value = self._resolve_alias("#", name, start)
            if value is not None and not isinstance(value, _Loc):
                raise cur.error(f"alias #{name} is not a location", start)
            return value
        if cur.accept_keyword("callsite"):
            cur.expect("(")
            callee = self._parse_loc_body()
            cur.expect_keyword("at")
            caller = self._parse_loc_body()
            cur.expect(")")
            return _Loc("callsite", (callee, caller))
        if cur.accept_keyword("fused"):
            if cur.peek("<"):
                cur.balanced("<", ">")
            cur.expect("[")
            children = []
            if not cur.accept("]"):
                while True:
                    children.append(self._parse_loc_body())
                    if cur.accept("]"):
                        break
                    cur.expect(",")
            return _Loc("fused", tuple(children))
        text = cur.string()
        if text is None:
            raise cur.expected("a location ('unknown', a string, 'callsite(...)', 'fused[...]')")
        if cur.accept(":"):
            line = cur.expect_integer("a line number")
            cur.expect(":")
            col = cur.expect_integer("a column number")
            if cur.accept_keyword("to"):
                # A source range: `to :col` or `to line:col`; the start is what we report.
                if not cur.accept(":"):
                    cur.expect_integer("a line number")
                    cur.expect(":")
                cur.expect_integer("a column number")
            return _Loc("file", (text, line, col))
        child = None
        if cur.accept("("):
            child = self._parse_loc_body()
            cur.expect(")")
        return _Loc("name", (text, child))
