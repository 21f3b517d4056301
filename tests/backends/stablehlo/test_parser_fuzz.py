"""``parse_module`` on any text: a module, or a ParseError with line and column, nothing else.

Deterministic (fixed seeds, bounded counts): truncations of real programs at every position,
token-level mutations of the corpus, random bytes, and the shapes of text that used to escape
as ValueError, OverflowError, TypeError, RecursionError or MemoryError. A ParseError that
carries a ``__cause__`` is the parser's safety net catching a bug of its own (every deliberate
ParseError is raised ``from None``), so it fails these tests as well.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from pjrt_hub.abi import ParseError
from pjrt_hub.backends.stablehlo import parse_module
from pjrt_hub.backends.stablehlo.parser import MAX_ALIAS_CHAIN, MAX_NESTING

CORPUS = Path(__file__).resolve().parents[3] / "pjrt_hub" / "data" / "corpus" / "public"


def check(text: str | bytes) -> ParseError | None:
    """Parse; return the ParseError (asserting it is a deliberate one with a place) or None."""
    try:
        parse_module(text)
    except ParseError as exc:
        assert exc.__cause__ is None, f"the parser failed inside: {exc!r} <- {exc.__cause__!r}"
        assert exc.line is not None and exc.line >= 1 and exc.column is not None and exc.column >= 1, exc
        return exc
    return None


def _read(name: str) -> str:
    return (CORPUS / name).read_text()


@pytest.mark.parametrize("name, step", [("conv2d.mlir", 1), ("batched_matmul.generic.mlir", 1), ("cond.mlir", 4)])
def test_every_truncation_of_a_real_program(name, step):
    text = _read(name)
    assert check(text) is None
    for end in range(0, len(text), step):
        check(text[:end])


_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[%@#!^]?[A-Za-z0-9_.$\-]+|->|\S')
_ODD = ["99999999999999999999999", "0x" + "F" * 30, "-0x1", "1e999", "nan", "inf", "-inf", "(", ")", "<", ">",
        "{", "}", "[", "]", "tensor<", "dense<", "array<i64:", "tuple<", "complex<", ":", ",", "=", "loc(",
        "#loc1", "!t", "?", "*", "0", "-1", "true", "false", '"0x0"', "f8E9M9", "i0", "ui99999", "\x00", "\ufeff"]


def test_token_mutations_of_the_corpus():
    programs = [_read(p.name) for p in sorted(CORPUS.glob("*.mlir")) if p.stat().st_size < 6000]
    tokens = [_TOKEN.findall(t) for t in programs]
    vocabulary = sorted({t for ts in tokens for t in ts if len(t) < 60}) + _ODD
    rng = random.Random(20260611)
    for _ in range(400):
        text = list(rng.choice(tokens))
        for _ in range(rng.choice([1, 1, 2, 3, 8])):
            at = rng.randrange(len(text) + 1)
            kind = rng.randrange(5)
            if kind == 0:
                text.insert(at, rng.choice(vocabulary))
            elif kind == 1 and text:
                del text[min(at, len(text) - 1)]
            elif kind == 2 and text:
                text[min(at, len(text) - 1)] = rng.choice(vocabulary)
            elif kind == 3:
                other = rng.choice(tokens)
                start = rng.randrange(len(other))
                text[at:at] = other[start:start + rng.randrange(1, 30)]
            else:
                text = text[:at]
        check(" ".join(text))


def test_random_bytes_and_text():
    rng = random.Random(7)
    for _ in range(150):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
        check(raw)
        check(raw.decode("latin-1"))
    assert check(b"func.func @main() {\n  return \xff\n}").line == 2


SCALAR = "func.func @main() -> tensor<{t}> {{\n  %0 = stablehlo.constant dense<{v}> : tensor<{t}>\n  return %0 : tensor<{t}>\n}}"


@pytest.mark.parametrize("text", [
    # numbers too big for their type, or for anything
    SCALAR.format(t="i32", v="99999999999999999999999999"),
    SCALAR.format(t="f32", v="0xFFFFFFFFFFFFFFFFFFFF"),
    SCALAR.format(t="2xbf16", v="[0x7FC0, 0xFFFFFF]"),
    SCALAR.format(t="ui8", v="-1"),
    SCALAR.format(t="i1", v="nan"),
    SCALAR.format(t="f32", v="(1.0, 2.0)"),
    "func.func @main() attributes {a = 0xFFFFFFFFFFFFFFFFFFFF : f32} { return }",
    "func.func @main() attributes {a = array<i64: 999999999999999999999999, 1>} { return }",
    # shapes that claim more memory than there is
    SCALAR.format(t="100000000000xf32", v="1.0"),
    SCALAR.format(t="1000000000000xf32", v='"0x00000000"'),
    SCALAR.format(t="99999999999999999999x99999999999999999999xf32", v="1.0"),
    # unknown or impossible types
    "func.func @main(%a: tensor<4xfoo>) -> tensor<4xfoo> { return %a : tensor<4xfoo> }",
    "func.func @main(%a: tensor<4xi0>) { return }",
    "func.func @main(%a: tensor<4xf8E9M9>) { return }",
    "func.func @main(%a: tensor<4xcomplex<f99>>) { return }",
    "func.func @main(%a: !foo.bar) { return }",
    # malformed generic functions and resources
    '"func.func"() <{function_type = () -> (), sym_name = "main", arg_attrs = 5}> ({\n}) : () -> ()',
    '"func.func"() <{function_type = () -> (), sym_name = "main", res_attrs = [5]}> ({\n}) : () -> ()',
    'func.func @main() { return }\n{-#\n dialect_resources: { builtin: { b: "0x040000000" } }\n#-}',
    # aliases that refer to themselves
    "#a = #b\n#b = #a\nfunc.func @main() attributes {x = #a} { return }",
    "!a = !b\n!b = !a\nfunc.func @main(%x: !a) { return }",
], ids=lambda t: t[:50])
def test_text_that_used_to_escape_as_another_exception(text):
    assert check(text) is not None


def test_nan_and_inf_literals_are_values_not_errors():
    for value in ("nan", "inf", "-inf", "0x7FC00000", "1e999"):
        assert check(SCALAR.format(t="f32", v=value)) is None


_NESTED = {
    "parentheses": lambda n: "func.func @main() -> " + "(" * n + ")" * n,
    "tuple types": lambda n: "func.func @main(%a: " + "tuple<" * n + "tensor<f32>" + ">" * n + ")",
    "attribute lists": lambda n: "module attributes {a = " + "[" * n + "]" * n + "} {}",
    "dictionaries": lambda n: "module attributes {a = " + "{b = " * n + "1" + "}" * n + "} {}",
    "dense literals": lambda n: "func.func @main() { %0 = stablehlo.constant dense<" + "[" * n + "1" + "]" * n
                                + "> : tensor<f32>\n return }",
    "regions": lambda n: "func.func @main() { " + '"stablehlo.foo"() ({ ' * (n // 2) + "}) : () -> ()\n" * (n // 2)
                         + "return }",
    "locations": lambda n: "func.func @main() { return } loc(" + "callsite(" * n + '"a"' + ' at "b")' * n + ")",
}


@pytest.mark.parametrize("kind", list(_NESTED))
def test_nesting_is_read_to_the_documented_depth_and_refused_past_it(kind):
    make = _NESTED[kind]

    def deep_in_the_stack(frames: int, text: str) -> ParseError | None:
        # A caller that is itself 150 frames deep (pytest is about 60) still gets the
        # documented limit's message, not Python's recursion limit.
        return deep_in_the_stack(frames - 1, text) if frames else check(text)

    at_limit = deep_in_the_stack(150, make(MAX_NESTING - 4))
    assert at_limit is None or "nest" not in str(at_limit), at_limit
    error = deep_in_the_stack(150, make(MAX_NESTING * 50))
    assert error is not None and f"nest deeper than {MAX_NESTING} levels" in str(error)


@pytest.mark.parametrize("sigil, make", [
    ("#", lambda n: "".join(f"#a{i} = #a{i + 1}\n" for i in range(n)) + f"#a{n} = 1\n"
                    "func.func @main() attributes {a = #a0} { return }"),
    ("#", lambda n: "func.func @main() { return } loc(#loc0)\n"
                    + "".join(f"#loc{i} = loc(#loc{i + 1})\n" for i in range(n)) + f'#loc{n} = loc("x":1:1)\n'),
    ("!", lambda n: "".join(f"!a{i} = !a{i + 1}\n" for i in range(n)) + f"!a{n} = tensor<f32>\n"
                    "func.func @main(%x: !a0) { return }"),
])
def test_alias_chains_are_read_to_the_documented_length(sigil, make):
    assert check(make(MAX_ALIAS_CHAIN - 2)) is None
    error = check(make(MAX_ALIAS_CHAIN * 20))
    assert error is not None and f"more than {MAX_ALIAS_CHAIN} aliases" in str(error)
