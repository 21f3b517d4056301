"""The state every part of the parser shares, and what is read from the whole text first.

:class:`Reader` holds the cursor and the tables that uses may precede: alias definitions
(``#loc3 = loc(...)``, ``!t = tensor<...>``, found by one scan of the text and parsed on first
use) and resource blobs (``{-# dialect_resources: ... #-}``, for ``dense_resource``). Before
the recursive descent starts it refuses text whose brackets nest deeper than
:data:`MAX_NESTING` in one linear scan, and it bounds alias chains by :data:`MAX_ALIAS_CHAIN`,
so that no text drives the parser into unbounded recursion. The readers of types, attributes,
locations, op forms and structure build on it (each in its own module); the methods one of
them needs from a later one are declared here or there as abstract.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any

from ..lexer import Cursor
from ..nesting import MAX_NESTING as MAX_PROGRAM_NESTING

__all__ = ["MAX_ALIAS_CHAIN", "MAX_NESTING", "Reader"]


#: Brackets may nest this deep: a few per level of program nesting (a region is a ``({`` pair,
#: types nest inside), for the :data:`~..nesting.MAX_NESTING` levels pjrt-hub compiles and runs.
#: JAX's programs nest about 10. Deeper text is refused where it crosses the limit, in one linear
#: scan before the recursive descent starts.
MAX_NESTING = 3 * MAX_PROGRAM_NESTING
#: An alias may refer to an alias, this many times in a row (JAX's ``#loc`` chains follow the
#: call stack of the traced function, a few dozen at most).
MAX_ALIAS_CHAIN = 100

_NESTING_TOKEN = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"?|//[^\n]*|->|[(\[{<]|[)\]}>]')


def _check_nesting(cur: Cursor) -> None:
    """Refuse text whose brackets nest deeper than :data:`MAX_NESTING` (one linear scan)."""
    depth = 0
    for m in _NESTING_TOKEN.finditer(cur.text):
        token = m.group()
        if token in "([{<":
            depth += 1
            if depth > MAX_NESTING:
                raise cur.error(f"brackets nest deeper than {MAX_NESTING} levels; pjrt-hub reads "
                                f"programs nested up to {MAX_PROGRAM_NESTING} levels (JAX's nest about 10)",
                                m.start())
        elif token in ")]}>" and depth:
            depth -= 1


_ALIAS_DEF = re.compile(r"^[ \t]*([#!])([A-Za-z_$.\-][A-Za-z0-9_$.\-]*)[ \t]*=", re.M)
_RESOURCE_SECTION = re.compile(r"\{-#(.*?)#-\}", re.S)
_RESOURCE_ENTRY = re.compile(r"([A-Za-z_$.\-][A-Za-z0-9_$.\-]*|\"(?:[^\"\\]|\\.)*\")\s*:\s*\"0x([0-9A-Fa-f]*)\"")


class Reader(ABC):
    """The cursor over the text, the aliases and the resource blobs."""

    def __init__(self, text: str) -> None:
        self.cur = Cursor(text)
        self.text = text
        self._alias_pos: dict[str, int] = {}
        self._type_alias_pos: dict[str, int] = {}
        self._alias_cache: dict[str, Any] = {}
        self._alias_busy: set[str] = set()
        self._resources: dict[str, bytes] = {}
        #: Tensor types read so far, by spelling (see ``TypeReader._plain_tensor``).
        self._plain_tensors: dict[str, Any] = {}
        _check_nesting(self.cur)
        self._prescan()

    # Defined by the readers of types, attributes and locations.

    @abstractmethod
    def parse_type(self) -> Any: ...

    @abstractmethod
    def parse_attribute(self, typed: bool = True) -> Any: ...

    @abstractmethod
    def _parse_loc_specifier(self) -> Any: ...

    # -- aliases and resources ------------------------------------------------------------------

    def _prescan(self) -> None:
        """Find alias definitions and resource blobs first: uses may precede definitions."""
        for m in _ALIAS_DEF.finditer(self.text):
            table = self._alias_pos if m.group(1) == "#" else self._type_alias_pos
            table.setdefault(m.group(2), m.end())
        for section in _RESOURCE_SECTION.finditer(self.text):
            for m in _RESOURCE_ENTRY.finditer(section.group(1)):
                key = m.group(1).strip('"')
                if len(m.group(2)) % 2:
                    raise self.cur.error(f"resource blob {key!r} has an odd number of hex digits",
                                         section.start(1) + m.start(2))
                self._resources[key] = bytes.fromhex(m.group(2))

    def _skip_alias_value(self, sigil: str, name: str) -> None:
        # The value was (or will be) parsed on demand from the prescan; parse it here only to
        # move past it, and keep the first definition (a redefinition is an error in MLIR).
        if sigil == "#":
            self._alias_cache.setdefault(name, self._parse_alias_rhs())
        else:
            self._alias_cache.setdefault("!" + name, self.parse_type())

    def _parse_alias_rhs(self) -> Any:
        if self.cur.peek_keyword("loc"):
            return self._parse_loc_specifier()
        return self.parse_attribute()

    def _resolve_alias(self, sigil: str, name: str, at: int) -> Any:
        key = name if sigil == "#" else "!" + name
        if key in self._alias_cache:
            return self._alias_cache[key]
        table = self._alias_pos if sigil == "#" else self._type_alias_pos
        if name not in table:
            raise self.cur.error(f"undefined alias '{sigil}{name}'", at)
        if key in self._alias_busy:
            raise self.cur.error(f"alias '{sigil}{name}' refers to itself", at)
        if len(self._alias_busy) >= MAX_ALIAS_CHAIN:
            raise self.cur.error(f"alias '{sigil}{name}' ends a chain of more than {MAX_ALIAS_CHAIN} "
                                 "aliases that refer to aliases", at)
        self._alias_busy.add(key)
        saved = self.cur
        self.cur = saved.fork(table[name])
        try:
            value = self._parse_alias_rhs() if sigil == "#" else self.parse_type()
        finally:
            self.cur = saved
            self._alias_busy.discard(key)
        self._alias_cache[key] = value
        return value
