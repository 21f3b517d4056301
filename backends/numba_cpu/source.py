"""The pieces generated source is built from: scopes (loop bodies), expressions, element types.

The lowering emits Python text for one numba function. A :class:`Scope` is one indented block
(the function body, a loop body, a branch); every scalar the lowering computes becomes a
temporary assigned in the *outermost* scope where everything it depends on is defined, so
loop-invariant work lands outside the loops without relying on LLVM to hoist it (a row
statistic of layernorm is computed once per row, not once per element). To make that possible a
scope accepts statements "before the child scope that is currently open", next to the normal
append.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from pjrt_hub.abi import CompileError
from pjrt_hub.backends.stablehlo import Type

__all__ = ["Expr", "Scope", "ElementKind", "element_kind"]


#: Nesting kept within one generated function (Python's limits: 20 nested loops, 100 levels).
MAX_LOOPS = 12
MAX_LEVELS = 48


class Scope:
    """An indented block of generated code."""

    __slots__ = ("parent", "header", "items", "depth", "_insert_at", "extract")

    def __init__(self, parent: "Scope | None" = None, header: str | None = None) -> None:
        self.parent = parent
        self.header = header
        self.items: list[str | Scope] = []
        self.depth: int = 0 if parent is None else parent.depth + 1
        self._insert_at: int | None = None
        #: Render this block as a call to a function of its own (see ``render``'s ``hook``).
        self.extract = False

    def _place(self, item: "str | Scope") -> None:
        if self._insert_at is None:
            self.items.append(item)
        else:
            self.items.insert(self._insert_at, item)
            self._insert_at += 1

    def emit(self, line: str) -> None:
        self._place(line)

    def open(self, header: str) -> "Scope":
        """A child block (``for ...:``, ``if ...:``); until :meth:`close` is called on it,
        statements emitted into this scope go before it."""
        child = Scope(self, header)
        self._place(child)
        self._insert_at = self.items.index(child) if self._insert_at is None else self._insert_at - 1
        return child

    def close(self, child: "Scope") -> None:
        assert child.parent is self
        self._insert_at = None

    def encloses(self, other: "Scope") -> bool:
        """True when code in ``other`` can see variables assigned in this scope."""
        s: Scope | None = other
        while s is not None:
            if s is self:
                return True
            s = s.parent
        return False

    def render(self, indent: int = 0, hook=None, deep=None, loops: int = 0, levels: int = 0) -> list[str]:
        """Source lines; ``hook(scope) -> str`` replaces each ``extract`` block by one line.

        Python refuses code nested deeper than 20 loops or 100 indentation levels, and deeply
        nested control flow (``while`` in ``while``..., ``case`` in ``case``...) gets there. Past
        :data:`MAX_LOOPS` / :data:`MAX_LEVELS`, ``deep(scope, form) -> str`` moves a loop
        statement (``form="statement"``) or a branch's body (``form="body"``) into a function of
        its own and returns the line calling it, so nesting is limited by memory, not syntax."""
        pad = "    " * indent
        out: list[str] = []
        for item in self.items:
            if isinstance(item, Scope):
                if item.extract and hook is not None:
                    out.append(pad + hook(item))
                    continue
                assert item.header is not None  # only a root scope has none, and it is no one's item
                is_loop = item.header.startswith(("for ", "while "))
                inner_loops, inner_levels = loops + is_loop, levels + 1
                if deep is not None and (inner_loops > MAX_LOOPS or inner_levels > MAX_LEVELS):
                    if is_loop:
                        out.append(pad + deep(item, "statement"))
                    else:
                        out.append(pad + item.header)
                        out.append(pad + "    " + deep(item, "body"))
                    continue
                out.append(pad + item.header)
                body = item.render(indent + 1, hook, deep, inner_loops, inner_levels)
                out.extend(body if body else [pad + "    pass"])
            else:
                out.append(pad + item)
        return out

    def lines(self) -> "Iterator[str]":
        """Every statement and header of this block and the blocks in it."""
        for item in self.items:
            if isinstance(item, Scope):
                assert item.header is not None  # only a root scope has none, and it is no one's item
                yield item.header
                yield from item.lines()
            else:
                yield item


@dataclass(frozen=True, slots=True)
class Expr:
    """A scalar (or index) in generated code: its text and the scope it is valid in.

    ``scope`` is ``None`` for constants and other names valid everywhere. ``var`` is the loop
    variable when the expression is exactly one, which is how row fusion checks that a read
    stays within the current row.
    """

    text: str
    scope: Scope | None = None
    var: str | None = None

    def __str__(self) -> str:
        return self.text


def deepest(exprs, default: Scope | None = None) -> Scope | None:
    best = default
    for e in exprs:
        s = e.scope
        if s is not None and (best is None or s.depth > best.depth):
            best = s
    return best


@dataclass(frozen=True, slots=True)
class ElementKind:
    """How one MLIR element type lives in generated code."""

    element: str
    #: numba type of a scalar in computations (``types.float32``); narrow floats compute in float32.
    nb: str
    #: numpy dtype of array storage (narrow floats and sub-byte integers are stored as their bits).
    storage: np.dtype
    #: ``"f"`` float, ``"c"`` complex, ``"i"`` signed, ``"u"`` unsigned, ``"b"`` bool.
    cls: str
    bits: int
    #: ``"bf16"`` / ``"f16"`` / an f8 or f4 type (``"f8E4M3FN"``) when stored as bits and rounded
    #: after each op, ``"int"`` for the sub-byte integers (wrapped after each op), else ``None``.
    narrow: str | None = None

    @property
    def np_name(self) -> str:
        return "np." + ("bool_" if self.storage == np.bool_ else self.storage.name)

    @property
    def is_float(self) -> bool:
        return self.cls == "f"

    @property
    def compute_dtype(self) -> np.dtype:
        if self.narrow == "int":
            return np.dtype(np.int8 if self.cls == "i" else np.uint8)
        return np.dtype(np.float32) if self.narrow else self.storage

    @property
    def real(self) -> "ElementKind":
        """The kind of the real and imaginary parts of a complex kind."""
        return _KINDS["f64" if self.bits == 128 else "f32"]

    def _small(self, suffix: str) -> str:
        return f"SF_{self.narrow}_{suffix}"

    def load(self, text: str) -> str:
        """Expression turning a stored element into a computation scalar."""
        if self.narrow == "bf16":
            return f"bf16_value({text})"
        if self.narrow == "f16":
            return f"f16_value({text})"
        if self.narrow == "int":
            return self.rounded(f"i2i({text}, {self.nb})")
        if self.narrow:
            return f"sf_value({text}, {self._small('V')})"
        return text

    def store(self, text: str) -> str:
        if self.narrow == "bf16":
            return f"bf16_bits({text})"
        if self.narrow == "f16":
            return f"f16_bits({text})"
        if self.narrow == "int":
            return f"iand(i2i({text}, types.uint8), np.uint8({(1 << self.bits) - 1}))"
        if self.narrow:
            s = self._small
            return f"sf_bits({text}, {s('BP')}, {s('CP')}, {s('BN')}, {s('CN')}, {s('NAN')})"
        return text

    def rounded(self, text: str) -> str:
        """A computed result rounded (or wrapped) to the narrow type (identity for the others)."""
        if self.narrow == "bf16":
            return f"round_bf16({text})"
        if self.narrow == "f16":
            return f"round_f16({text})"
        if self.narrow == "int":
            if self.cls == "i":
                return f"wrap_signed({text}, np.int8({8 - self.bits}))"
            return f"wrap_unsigned({text}, np.uint8({(1 << self.bits) - 1}))"
        if self.narrow:
            return self.load(self.store(text))
        return text


_KINDS: dict[str, ElementKind] = {}


def _kind(element, nb, storage, cls, bits, narrow=None):
    _KINDS[element] = ElementKind(element, nb, np.dtype(storage), cls, bits, narrow)


_kind("f32", "types.float32", np.float32, "f", 32)
_kind("f64", "types.float64", np.float64, "f", 64)
_kind("f16", "types.float32", np.uint16, "f", 16, "f16")
_kind("bf16", "types.float32", np.uint16, "f", 16, "bf16")
for _small in ("f8E5M2", "f8E4M3FN", "f8E4M3", "f8E3M4", "f8E4M3FNUZ", "f8E5M2FNUZ", "f8E4M3B11FNUZ",
               "f8E8M0FNU"):
    _kind(_small, "types.float32", np.uint8, "f", 8, _small)
_kind("f4E2M1FN", "types.float32", np.uint8, "f", 4, "f4E2M1FN")
_kind("complex<f32>", "types.complex64", np.complex64, "c", 64)
_kind("complex<f64>", "types.complex128", np.complex128, "c", 128)
_kind("i1", "types.boolean", np.bool_, "b", 1)
for _w in (8, 16, 32, 64):
    _kind(f"i{_w}", f"types.int{_w}", f"int{_w}", "i", _w)
    _kind(f"si{_w}", f"types.int{_w}", f"int{_w}", "i", _w)
    _kind(f"ui{_w}", f"types.uint{_w}", f"uint{_w}", "u", _w)
for _w in (2, 4):
    _kind(f"i{_w}", "types.int8", np.uint8, "i", _w, "int")
    _kind(f"si{_w}", "types.int8", np.uint8, "i", _w, "int")
    _kind(f"ui{_w}", "types.uint8", np.uint8, "u", _w, "int")


def element_kind(ty: Type | str, *, where: str = "") -> ElementKind:
    """The element kind of a tensor type or element type name; CompileError for any other
    type (a tuple, a token) or an element type this backend does not support."""
    element = ty if isinstance(ty, str) else getattr(ty, "element_type", None)
    kind = _KINDS.get(element) if element is not None else None
    if kind is None:
        raise CompileError(
            f"{where + ': ' if where else ''}element type {element or ty} is not supported by numba_cpu "
            f"(supported: {', '.join(sorted(_KINDS))})")
    return kind
