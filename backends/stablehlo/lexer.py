"""A cursor over MLIR text: the lexical layer of the StableHLO parser.

MLIR's grammar cannot be cut into tokens ahead of parsing (``2x3xf32`` inside ``tensor<...>`` is
one dimension list, ``x`` elsewhere is an identifier; ``->`` contains a ``>`` that closes nothing),
so the parser asks the cursor for the next token of the kind it expects at the current position.
The cursor skips blanks and ``//`` comments, knows line and column of every offset, and builds
:class:`~pjrt_hub.abi.ParseError` s that say where and what was expected.
"""

from __future__ import annotations

import bisect
import re

from pjrt_hub.abi import ParseError

__all__ = ["Cursor"]

_BLANK = re.compile(r"(?:\s+|//[^\n]*)+")
_BARE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")
_SUFFIX_ID = r"(?:[0-9]+|[A-Za-z_$.\-][A-Za-z0-9_$.\-]*)"
_VALUE_ID = re.compile(r"%(" + _SUFFIX_ID + r")")
_CARET_ID = re.compile(r"\^(" + _SUFFIX_ID + r")")
_SYMBOL = re.compile(r"@(?:(" + _SUFFIX_ID + r")|\"((?:[^\"\\\n]|\\.)*)\")")
_HASH_ID = re.compile(r"#(" + _SUFFIX_ID + r")")
_BANG_ID = re.compile(r"!(" + _SUFFIX_ID + r")")
_INTEGER = re.compile(r"[-+]?(?:0x[0-9A-Fa-f]+|[0-9]+)(?![.\w])")
_NUMBER = re.compile(r"[-+]?(?:0x[0-9A-Fa-f]+|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)(?![\w.])")
_ESCAPE = re.compile(r"\\(?:([0-9A-Fa-f]{2})|(.))")


def unescape(body: str) -> str:
    """Decode an MLIR string literal body (``\\"``, ``\\\\``, ``\\n``, ``\\t``, ``\\XX`` hex)."""
    if "\\" not in body:
        return body
    raw = bytearray()
    pos = 0
    for m in _ESCAPE.finditer(body):
        raw += body[pos:m.start()].encode()
        if m.group(1):
            raw.append(int(m.group(1), 16))
        else:
            raw += {"n": "\n", "t": "\t"}.get(m.group(2), m.group(2)).encode()
        pos = m.end()
    raw += body[pos:].encode()
    return raw.decode("utf-8", errors="replace")


class Cursor:
    """Position in the text plus the primitive reads the parser is built from."""

    def __init__(self, text: str, pos: int = 0, _line_starts: list[int] | None = None) -> None:
        self.text = text
        self.pos = pos
        if _line_starts is None:
            _line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._line_starts = _line_starts

    def fork(self, pos: int) -> "Cursor":
        """Another cursor over the same text (to read an alias defined elsewhere)."""
        return Cursor(self.text, pos, self._line_starts)

    # -- positions and errors ----------------------------------------------------------------

    def line_col(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        line = bisect.bisect_right(self._line_starts, pos)
        return line, pos - self._line_starts[line - 1] + 1

    def error(self, message: str, pos: int | None = None) -> ParseError:
        line, col = self.line_col(pos)
        return ParseError(message, line=line, column=col)

    def describe_next(self) -> str:
        """What stands at the cursor, for 'expected X, got Y' messages."""
        self.skip()
        if self.pos >= len(self.text):
            return "end of input"
        rest = self.text[self.pos:self.pos + 40].split("\n", 1)[0]
        m = re.match(r"\S+", rest)
        token = m.group(0) if m else rest
        return repr(token[:30])

    def expected(self, what: str) -> ParseError:
        return self.error(f"expected {what}, got {self.describe_next()}")

    # -- reading -----------------------------------------------------------------------------

    def skip(self) -> None:
        self._at_token()

    def _at_token(self) -> int:
        """Skip blanks and comments; the position of the next token."""
        text, pos = self.text, self.pos
        # Most calls stand on a token already: one character says so, without the regex.
        if pos < len(text) and not text[pos].isspace() and text[pos] != "/":
            return pos
        m = _BLANK.match(text, pos)
        if m:
            self.pos = pos = m.end()
        return pos

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.text)

    def peek(self, literal: str) -> bool:
        return self.text.startswith(literal, self._at_token())

    def peek_char(self) -> str:
        self.skip()
        return self.text[self.pos:self.pos + 1]

    def accept(self, literal: str) -> bool:
        """Consume punctuation ``literal`` if it is next."""
        pos = self._at_token()
        if self.text.startswith(literal, pos):
            # '->' is one token: a lone '-' must not eat the start of an arrow.
            if literal == "-" and self.text.startswith("->", pos):
                return False
            self.pos = pos + len(literal)
            return True
        return False

    def expect(self, literal: str, what: str | None = None) -> None:
        if not self.accept(literal):
            raise self.expected(what or repr(literal))

    def peek_keyword(self, word: str) -> bool:
        self.skip()
        m = _BARE_ID.match(self.text, self.pos)
        return m is not None and m.group(0) == word

    def accept_keyword(self, word: str) -> bool:
        if self.peek_keyword(word):
            self.pos += len(word)
            return True
        return False

    def expect_keyword(self, word: str) -> None:
        if not self.accept_keyword(word):
            raise self.expected(f"'{word}'")

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        m = pattern.match(self.text, self._at_token())
        if m:
            self.pos = m.end()
        return m

    def bare_id(self, what: str = "an identifier") -> str:
        m = self.match(_BARE_ID)
        if not m:
            raise self.expected(what)
        return m.group(0)

    def optional_bare_id(self) -> str | None:
        m = self.match(_BARE_ID)
        return m.group(0) if m else None

    def value_id(self) -> str | None:
        """``%name`` (without any ``#N`` suffix) or None."""
        m = self.match(_VALUE_ID)
        return "%" + m.group(1) if m else None

    def caret_id(self) -> str | None:
        m = self.match(_CARET_ID)
        return "^" + m.group(1) if m else None

    def symbol(self) -> str | None:
        m = self.match(_SYMBOL)
        if not m:
            return None
        return m.group(1) if m.group(1) is not None else unescape(m.group(2))

    def hash_id(self) -> str | None:
        m = self.match(_HASH_ID)
        return m.group(1) if m else None

    def bang_id(self) -> str | None:
        m = self.match(_BANG_ID)
        return m.group(1) if m else None

    def string(self) -> str | None:
        self.skip()
        end = _string_end(self.text, self.pos)
        if end is None:
            return None
        body = self.text[self.pos + 1:end - 1]
        self.pos = end
        return unescape(body)

    def expect_string(self, what: str = "a string literal") -> str:
        s = self.string()
        if s is None:
            raise self.expected(what)
        return s

    def integer(self) -> int | None:
        m = self.match(_INTEGER)
        if not m:
            return None
        text = m.group(0)
        return _hex_int(text) if "x" in text else int(text)

    def expect_integer(self, what: str = "an integer") -> int:
        value = self.integer()
        if value is None:
            raise self.expected(what)
        return value

    def number(self) -> str | None:
        """An integer or float literal, as written (the caller knows the element type)."""
        m = self.match(_NUMBER)
        return m.group(0) if m else None

    def balanced(self, open_char: str, close_char: str) -> str:
        """The text from an opening bracket (at the cursor) to its match, both included.
        Strings are skipped whole and ``->`` is not a closing ``>``."""
        self.skip()
        start = self.pos
        if not self.text.startswith(open_char, start):
            raise self.expected(repr(open_char))
        pairs = {"<": ">", "(": ")", "[": "]", "{": "}"}
        stack: list[str] = []
        i = start
        text = self.text
        while i < len(text):
            c = text[i]
            if c == '"':
                end = _string_end(text, i)
                if end is None:
                    raise self.error("unterminated string literal", i)
                i = end
                continue
            if c == "-" and text.startswith("->", i):
                i += 2
                continue
            if c in pairs:
                stack.append(pairs[c])
            elif stack and c == stack[-1]:
                stack.pop()
                if not stack:
                    self.pos = i + 1
                    return text[start:i + 1]
            i += 1
        raise self.error(f"unbalanced {open_char!r}: no matching {close_char!r}", start)


def _string_end(text: str, pos: int) -> int | None:
    """Offset just past the string literal starting at ``pos`` (a '"'), or None. A plain scan
    rather than a regex: hex blobs of constants can be megabytes long."""
    if not text.startswith('"', pos):
        return None
    i = pos + 1
    while True:
        j = text.find('"', i)
        if j < 0:
            return None
        newline = text.find("\n", i, j)
        if newline >= 0:
            return None
        backslashes = 0
        k = j - 1
        while k > pos and text[k] == "\\":
            backslashes += 1
            k -= 1
        if backslashes % 2 == 0:
            return j + 1
        i = j + 1


def _hex_int(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    return sign * int(text.lstrip("+-"), 16)
