"""StableHLO text -> :mod:`..ir`: the parser of the MLIR JAX emits.

Both printed forms are read: the pretty form ``jax.jit(f).lower(...).as_text()`` gives (custom
assembly of the stablehlo, chlo and func ops, with region ops such as ``sort`` or ``scatter``
in generic form in the middle of it) and the generic form (``"stablehlo.add"(%a, %b) : (...) ->
...``). Debug locations are resolved, including ``#locN`` aliases defined after their use.
Attributes the text leaves out get the StableHLO spec's defaults (``jax.export`` omits every
default), so consumers see the same IR whichever way the program was printed.

The parser knows MLIR's general syntax and the custom assembly of the ops JAX emits. A
``stablehlo.*`` or ``chlo.*`` op it does not know is read with the common
``operands attr-dict : types`` form, so that an unsupported op fails later, with the list of
supported ops, rather than as a syntax error. Every syntax error is a
:class:`~pjrt_hub.abi.ParseError` with line, column and what was expected.

Layout: one module per part of the syntax, each a layer of the parser built on the previous
one: :mod:`.reader` (cursor, limits, aliases and resources), :mod:`.type_syntax` (types),
:mod:`.attributes` (attribute values, with :mod:`.literals` for numbers and dense literals),
:mod:`.locations` (debug locations), :mod:`.forms` (the custom forms of ops, as the op
definitions of :mod:`..ops` name them) and :mod:`.structure` (module, functions, regions,
values, operations: the complete :class:`~.structure.Parser`). This module is the entry
point and keeps the contract: a module or a ParseError, whatever the text.
"""

from __future__ import annotations

from pjrt_hub.abi import CompileError, ParseError

from ..ir import Module
from ..nesting import MAX_NESTING as MAX_PROGRAM_NESTING, run_deep
from .locations import render_location
from .reader import MAX_ALIAS_CHAIN, MAX_NESTING
from .structure import Parser

__all__ = ["MAX_ALIAS_CHAIN", "MAX_NESTING", "parse_module", "render_location"]


def parse_module(text: str | bytes) -> Module:
    """Parse StableHLO MLIR text (pretty or generic form) into a :class:`~..ir.Module`.

    Raises :class:`~pjrt_hub.abi.ParseError` (with line and column) for malformed text, and for
    nothing else raises anything: whatever the text, the caller gets a ParseError or a module.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        if raw.startswith(b"ML\xefR"):
            raise ParseError("this is MLIR bytecode, not text; pass the module as text", line=1, column=1)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line_start = raw.rfind(b"\n", 0, exc.start) + 1
            raise ParseError(
                f"program text is not UTF-8 (byte {exc.start} is 0x{raw[exc.start]:02x}); a serialized "
                "(bytecode) StableHLO module cannot be read, print it as text",
                line=raw.count(b"\n", 0, exc.start) + 1, column=exc.start - line_start + 1) from None
    if text.startswith("ML\xefR") or text.startswith("MLïR"):
        raise ParseError("this is MLIR bytecode, not text; pass the module as text", line=1, column=1)
    try:
        # Deeply nested text (regions in regions, thousands deep) is read again on a thread with
        # a deep stack when the recursive descent runs out of this one (see .nesting).
        return run_deep(_parse, text)
    except ParseError:
        raise
    except (CompileError, RecursionError):
        raise ParseError(f"the program nests too deeply to be read (pjrt-hub reads programs nested up to "
                         f"{MAX_PROGRAM_NESTING} levels)", line=1, column=1) from None


def _parse(text: str) -> Module:
    """The parse itself: a module, a ParseError, or RecursionError for :func:`run_deep` to see."""
    parser: Parser | None = None
    try:
        parser = Parser(text)
        return parser.parse()
    except (ParseError, RecursionError):
        raise
    except MemoryError:
        raise _error_at(parser, "reading the program needs more memory than there is") from None
    except Exception as exc:  # noqa: BLE001 - a parser bug must still honour the contract
        # The cause is kept (and names the bug); every deliberate ParseError has none.
        raise _error_at(parser, f"internal parser error ({type(exc).__name__}: {exc}); please "
                                "report it with the program text") from exc


def _error_at(parser: "Parser | None", message: str) -> ParseError:
    if parser is None:
        return ParseError(message, line=1, column=1)
    return parser.cur.error(message)
