"""The lowering rules: one table entry per StableHLO/CHLO op.

``@elementwise("stablehlo.add")`` registers how one element of the result is computed from the
operands' elements; ``@index_map`` registers ops that read their operand elsewhere
(broadcast, slice, gather...); ``@kernel`` registers everything that needs its own loops or
calls (dot_general through BLAS, sort, scatter, while, case...). Adding an op is one function
here and one test case.

Elementwise semantics follow XLA, as JAX programs expect: integer ops wrap around, ``divide``
and ``remainder`` by zero and shifts past the width are defined (see :mod:`.intrinsics`),
``maximum``/``minimum`` propagate NaN, float to integer conversion truncates and saturates.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from pjrt_hub.abi import CompileError, UnsupportedOpError
from pjrt_hub.backends.stablehlo import Block, Op, Value
from pjrt_hub.backends.stablehlo.ops import add_rule

from .codegen import (
    RULES,
    ArrayBinding,
    Binding,
    ElementwiseRule,
    FusionGroup,
    IndexRule,
    KernelRule,
    Lowering,
    RowBuffer,
    Rule,
    ScalarContext,
    index_expr,
    load_text,
    round_accumulators,
    store_text,
    supported_ops,
)
from .lanes import lane_reduction
from .source import ElementKind, Expr, element_kind

__all__ = ["elementwise", "index_map", "kernel", "emit_reduce_member", "reducer", "simple_reducer", "convert_text",
           "unsupported_variant"]


# An op registered twice, by any of the three, raises DuplicateOpError: one op has one rule
# (see pjrt_hub.backends.stablehlo.ops).


def elementwise(*names: str, cost: int = 1) -> Callable[[ElementwiseRule], ElementwiseRule]:
    def register(fn: ElementwiseRule) -> ElementwiseRule:
        for name in names:
            add_rule(RULES, name, Rule(elementwise=fn, cost=cost), table="numba_cpu")
        return fn

    return register


def index_map(*names: str, cost: int = 0) -> Callable[[IndexRule], IndexRule]:
    def register(fn: IndexRule) -> IndexRule:
        for name in names:
            add_rule(RULES, name, Rule(index=fn, cost=cost), table="numba_cpu")
        return fn

    return register


def kernel(*names: str, lazy_operands: bool = False) -> Callable[[KernelRule], KernelRule]:
    def register(fn: KernelRule) -> KernelRule:
        for name in names:
            add_rule(RULES, name, Rule(kernel=fn, lazy_operands=lazy_operands), table="numba_cpu")
        return fn

    return register


def unsupported_variant(op: Op, what: str) -> UnsupportedOpError:
    """The error for an op this backend has a rule for, but not for this variant of it
    (``what``: the operand types, an attribute...)."""
    return UnsupportedOpError(f"{op.name} ({what})", location=op.where, supported=supported_ops(),
                              backend="numba_cpu")


def _const_text(ctx: ScalarContext, value: object, kind: ElementKind) -> str:
    """The name of a module-level constant of ``kind`` (see :meth:`Lowering.const`)."""
    return ctx.const(value, kind).text


# -- arithmetic -------------------------------------------------------------------------------


def _float_or_int(op_text: Callable[[str, str], str], int_fn: str, bool_text: str | None = None,
                  complex_text: Callable[[str, str], str] | None = None) -> ElementwiseRule:
    """A binary rule: ``op_text`` for floats, ``int_fn`` for integers (wrapped to a sub-byte
    width), ``bool_text`` for booleans, ``complex_text`` for complex (None: refused)."""

    def rule(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
        kind = ctx.kind(op.result)
        a, b = args[0].text, args[1].text
        if kind.cls == "f":
            return kind.rounded(op_text(a, b))
        if kind.cls == "c":
            if complex_text is None:
                raise unsupported_variant(op, f"{kind.element} operands")
            return complex_text(a, b)
        if kind.cls == "b":
            if bool_text is None:
                raise unsupported_variant(op, "boolean operands")
            return bool_text.format(a=a, b=b)
        return kind.rounded(f"{int_fn}({a}, {b})")

    return rule


def _plain(symbol: str) -> Callable[[str, str], str]:
    return lambda a, b: f"({a} {symbol} {b})"


elementwise("stablehlo.add")(_float_or_int(_plain("+"), "iadd", "({a} | {b})", _plain("+")))
elementwise("stablehlo.subtract")(_float_or_int(_plain("-"), "isub", "({a} ^ {b})", _plain("-")))
elementwise("stablehlo.multiply")(_float_or_int(_plain("*"), "imul", "({a} & {b})", _plain("*")))
_float_divide = _float_or_int(_plain("/"), "idiv")


@elementwise("stablehlo.divide", cost=4)
def _divide(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str | Expr:
    # Always a division, correctly rounded as the spec and XLA:CPU have it: multiplying by a
    # loop-invariant divisor's reciprocal was off by one ulp for some quotients, and depended
    # on how the divide was fused, which the eager tier (.eager) could not reproduce.
    kind = ctx.kind(op.result)
    if kind.cls == "c":  # numba's own complex division raises ZeroDivisionError
        return f"{kind.nb.replace('types.', 'np.')}(cdiv({args[0].text}, {args[1].text}))"
    return _float_divide(ctx, op, args)
elementwise("stablehlo.maximum")(_float_or_int(lambda a, b: f"fmaximum({a}, {b})", "imax", "({a} | {b})"))
elementwise("stablehlo.minimum")(_float_or_int(lambda a, b: f"fminimum({a}, {b})", "imin", "({a} & {b})"))


@elementwise("stablehlo.remainder", cost=8)
def _remainder(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    a, b = args[0].text, args[1].text
    if kind.cls == "f":
        if kind.bits == 64:
            return f"np.float64(frem({a}, {b}))"
        return kind.rounded(f"fmod_f32({a}, {b})")
    if kind.cls in "bc":
        raise unsupported_variant(op, f"{kind.element} operands")
    return kind.rounded(f"irem({a}, {b})")


@elementwise("stablehlo.power", cost=20)
def _power(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    a, b = args[0].text, args[1].text
    if kind.cls == "f":
        if kind.bits == 64:
            return f"fpow64({a}, {b})"
        return kind.rounded(f"pow_f32({a}, {b})")
    if kind.cls == "c":
        return f"{kind.nb.replace('types.', 'np.')}(cpow({a}, {b}))"
    if kind.cls == "b":
        raise unsupported_variant(op, "boolean operands")
    return kind.rounded(f"ipow({a}, {b}, {_const_text(ctx, 0, kind)}, {_const_text(ctx, 1, kind)})")


def _bitwise(int_fn: str, bool_op: str) -> ElementwiseRule:
    def rule(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
        kind = ctx.kind(op.result)
        a, b = args[0].text, args[1].text
        if kind.cls == "b":
            return f"({a} {bool_op} {b})"
        if kind.cls in "fc":
            raise unsupported_variant(op, f"{kind.element} operands")
        return f"{int_fn}({a}, {b})"

    return rule


elementwise("stablehlo.and")(_bitwise("iand", "&"))
elementwise("stablehlo.or")(_bitwise("ior", "|"))
elementwise("stablehlo.xor")(_bitwise("ixor", "^"))


@elementwise("stablehlo.not")
def _not(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    if kind.cls in "fc":
        raise unsupported_variant(op, f"{kind.element} operand")
    return kind.rounded(f"inot({args[0].text})")


def _shift(fn: str) -> ElementwiseRule:
    def rule(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
        kind = ctx.kind(op.result)
        if kind.cls not in "iu":
            raise unsupported_variant(op, f"{kind.element} operands")
        a, b = args[0].text, args[1].text
        if kind.narrow and kind.cls == "i" and fn == "shr_logical":
            # A logical shift of a sub-byte value shifts its own bits in zeros, not the int8's.
            a, b = _sub_byte_bits(kind, a), f"i2i({b}, types.uint8)"
            return kind.rounded(f"i2i({fn}({a}, {b}), types.int8)")
        if kind.narrow and kind.cls == "u" and fn == "shr_arith":
            # An arithmetic shift fills with the top bit of the sub-byte pattern.
            signed = f"wrap_signed(i2i({a}, types.int8), np.int8({8 - kind.bits}))"
            return kind.rounded(f"i2i({fn}({signed}, i2i({b}, types.int8)), types.uint8)")
        return kind.rounded(f"{fn}({a}, {b})")

    return rule


elementwise("stablehlo.shift_left")(_shift("shl"))
elementwise("stablehlo.shift_right_logical")(_shift("shr_logical"))
elementwise("stablehlo.shift_right_arithmetic")(_shift("shr_arith"))


def _sub_byte_bits(kind: ElementKind, a: str) -> str:
    """The bit pattern of a sub-byte integer (computed as a sign-extended int8) as a uint8."""
    return f"iand(i2i({a}, types.uint8), np.uint8({(1 << kind.bits) - 1}))"


def _int_only(op: Op, kind: ElementKind) -> None:
    if kind.cls not in "iu":
        raise unsupported_variant(op, f"{kind.element} operand")


@elementwise("stablehlo.popcnt")
def _popcnt(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    _int_only(op, kind)
    if kind.narrow:
        return f"i2i(ctpop({_sub_byte_bits(kind, args[0].text)}), {kind.nb})"
    return f"ctpop({args[0].text})"


@elementwise("stablehlo.count_leading_zeros")
def _clz(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    _int_only(op, kind)
    if kind.narrow:
        return f"i2i(isub(ctlz({_sub_byte_bits(kind, args[0].text)}), np.uint8({8 - kind.bits})), {kind.nb})"
    return f"ctlz({args[0].text})"


@elementwise("stablehlo.negate")
def _negate(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    a = args[0].text
    if kind.cls in "fc":
        return f"(-{a})"
    if kind.cls == "b":
        return a
    return kind.rounded(f"isub({_const_text(ctx, 0, kind)}, {a})")


@elementwise("stablehlo.abs")
def _abs(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(_operand0(op))
    a = args[0].text
    if kind.cls == "f":
        return f"fabs({a})"
    if kind.cls == "c":
        return f"np.{kind.real.storage.name}(abs({a}))"
    if kind.cls == "u" or kind.cls == "b":
        return a
    return kind.rounded(f"iabs({a}, {_const_text(ctx, 0, kind)})")


def _operand0(op: Op) -> Value:
    return op.operands[0]


@elementwise("stablehlo.sign")
def _sign(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    a = args[0].text
    if kind.cls == "f":
        return f"fsign({a}, {_const_text(ctx, 1, kind)})"
    if kind.cls == "c":
        return f"csign({a})"
    if kind.cls == "u":
        return f"({_const_text(ctx, 1, kind)} if {a} != {_const_text(ctx, 0, kind)} else {_const_text(ctx, 0, kind)})"
    if kind.cls == "b":
        return a
    return f"isign({a}, {_const_text(ctx, 0, kind)}, {_const_text(ctx, 1, kind)})"


def _float_unary(f32: str, f64: str, *, via64: bool = False, complex_fn: str | None = None) -> ElementwiseRule:
    """``f32``/``f64`` are function names; ``via64`` functions return float64 for any input;
    ``complex_fn`` computes a complex operand (None: refused)."""

    def rule(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
        kind = ctx.kind(op.result)
        a = args[0].text
        if kind.cls == "c" and complex_fn is not None:
            return f"{kind.nb.replace('types.', 'np.')}({complex_fn}({a}))"
        if kind.cls != "f":
            raise unsupported_variant(op, f"{kind.element} operand")
        if kind.bits == 64:
            return f"{f64}({a})"
        if via64:
            return kind.rounded(f"np.float32({f32}({a}))")
        return kind.rounded(f"{f32}({a})")

    return rule


elementwise("stablehlo.exponential", cost=8)(_float_unary("exp_f32", "exp_f64", complex_fn="cexp"))
elementwise("stablehlo.exponential_minus_one", cost=8)(_float_unary("expm1_f32", "expm1_f64", complex_fn="cexpm1"))
elementwise("stablehlo.log", cost=8)(_float_unary("log_f32", "log_f64", complex_fn="clog"))
elementwise("stablehlo.log_plus_one", cost=8)(_float_unary("log1p_f32", "log1p_f64", complex_fn="clog1p"))
elementwise("stablehlo.tanh", cost=10)(_float_unary("tanh_f32", "tanh_f64", complex_fn="ctanh"))
elementwise("stablehlo.logistic", cost=10)(_float_unary("logistic_f32", "logistic_f64", complex_fn="clogistic"))
elementwise("stablehlo.sine", cost=20)(_float_unary("sin_f32", "sin_f", complex_fn="csin"))
elementwise("stablehlo.cosine", cost=20)(_float_unary("cos_f32", "cos_f", complex_fn="ccos"))
elementwise("stablehlo.tan", cost=20)(_float_unary("tan_f32", "tan_f", complex_fn="ctan"))
elementwise("stablehlo.cbrt", cost=20)(_float_unary("cbrt_f32", "cbrt_f"))
elementwise("chlo.erf", cost=20)(_float_unary("erf_f32", "erf_f"))
elementwise("chlo.erfc", cost=20)(_float_unary("erfc_f32", "erfc_f"))
elementwise("chlo.erf_inv", cost=40)(_float_unary("erf_inv_f", "erf_inv_f", via64=True))
elementwise("chlo.tan", cost=20)(_float_unary("tan_f32", "tan_f", complex_fn="ctan"))
elementwise("chlo.sinh", cost=20)(_float_unary("sinh_f32", "sinh_f"))
elementwise("chlo.cosh", cost=20)(_float_unary("cosh_f32", "cosh_f"))
elementwise("chlo.asin", cost=20)(_float_unary("asin_f32", "asin_f"))
elementwise("chlo.acos", cost=20)(_float_unary("acos_f32", "acos_f"))
elementwise("chlo.atan", cost=20)(_float_unary("atan_f32", "atan_f"))
elementwise("chlo.asinh", cost=20)(_float_unary("asinh_f32", "asinh_f"))
elementwise("chlo.acosh", cost=20)(_float_unary("acosh_f32", "acosh_f"))
elementwise("chlo.atanh", cost=20)(_float_unary("atanh_f32", "atanh_f"))
elementwise("chlo.lgamma", cost=20)(_float_unary("lgamma_f", "lgamma_f", via64=True))
elementwise("stablehlo.floor")(_float_unary("ffloor", "ffloor"))
elementwise("stablehlo.ceil")(_float_unary("fceil", "fceil"))
elementwise("stablehlo.round_nearest_even")(_float_unary("fround_even", "fround_even"))
elementwise("stablehlo.round_nearest_afz")(_float_unary("fround_afz", "fround_afz"))
elementwise("stablehlo.sqrt", cost=4)(_float_unary("fsqrt", "fsqrt", complex_fn="csqrt"))


@elementwise("stablehlo.rsqrt", cost=5)
def _rsqrt(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    if kind.cls == "c":
        return f"{kind.nb.replace('types.', 'np.')}(crsqrt({args[0].text}))"
    if kind.cls != "f":
        raise unsupported_variant(op, f"{kind.element} operand")
    one = _const_text(ctx, 1, kind)
    return kind.rounded(f"({one} / fsqrt({args[0].text}))")


@elementwise("chlo.square")
def _square(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    a = args[0].text
    if kind.cls == "f":
        return kind.rounded(f"({a} * {a})")
    if kind.cls == "c":
        return f"({a} * {a})"
    if kind.cls == "b":
        return a
    return kind.rounded(f"imul({a}, {a})")


@elementwise("stablehlo.atan2", cost=20)
def _atan2(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    if kind.cls != "f":
        raise unsupported_variant(op, f"{kind.element} operands")
    if kind.bits == 64:
        return f"atan2_f({args[0].text}, {args[1].text})"
    return kind.rounded(f"atan2_f32({args[0].text}, {args[1].text})")


_FLOAT64_SPECIAL = {"chlo.digamma": "digamma_f", "chlo.bessel_i1e": "i1e_f", "chlo.polygamma": "polygamma_f",
                    "chlo.zeta": "zeta_f"}


@elementwise(*_FLOAT64_SPECIAL, cost=80)
def _float64_special(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    """Computed in float64 whatever the type (.special: one compiled function for both tiers),
    rounded once to the result type."""
    kind = ctx.kind(op.result)
    if kind.cls != "f":
        raise unsupported_variant(op, f"{kind.element} operands")
    text = f"{_FLOAT64_SPECIAL[op.name]}({', '.join(f'np.float64({a.text})' for a in args)})"
    return text if kind.bits == 64 else kind.rounded(f"np.float32({text})")


def _float_operand(op: Op, kind: ElementKind) -> None:
    if kind.cls != "f":
        raise unsupported_variant(op, f"{kind.element} operand")


@elementwise("chlo.is_inf")
def _is_inf(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    return f"(fabs({args[0].text}) == np.inf)"


@elementwise("chlo.is_pos_inf")
def _is_pos_inf(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    return f"({args[0].text} == np.inf)"


@elementwise("chlo.is_neg_inf")
def _is_neg_inf(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    return f"({args[0].text} == -np.inf)"


@elementwise("stablehlo.is_finite")
def _is_finite(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    _float_operand(op, ctx.kind(op.operands[0]))
    return f"isfinite_f({args[0].text})"


@elementwise("stablehlo.select")
def _select(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    return f"({args[1].text} if {args[0].text} else {args[2].text})"


@elementwise("stablehlo.clamp")
def _clamp(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    lo, x, hi = (a.text for a in args)
    if kind.cls == "c":
        raise unsupported_variant(op, f"{kind.element} operands")
    if kind.cls == "f":
        return f"fminimum(fmaximum({x}, {lo}), {hi})"
    if kind.cls == "b":
        return f"(({x} | {lo}) & {hi})"
    return f"imin(imax({x}, {lo}), {hi})"


_CMP_SYMBOL = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


@elementwise("stablehlo.compare")
def _compare(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    direction = str(op.attr("comparison_direction"))
    ctype = str(op.attr("compare_type") or "")
    kind = ctx.kind(op.operands[0])
    a, b = args[0].text, args[1].text
    if kind.cls == "c":
        if direction not in ("EQ", "NE"):
            raise unsupported_variant(op, f"{direction} on {kind.element} operands")
        return f"({a} {_CMP_SYMBOL[direction]} {b})"
    if kind.cls == "f":
        if ctype == "TOTALORDER":
            # A narrow float's float32 value has the same sign, NaN-ness and order.
            return f"fcmp_total({a}, {b}, {direction!r})"
        return f"({a} {_CMP_SYMBOL[direction]} {b})"
    return f"icmp({a}, {b}, {direction!r})"


@elementwise("stablehlo.convert")
def _convert(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str | Expr:
    src = ctx.kind(op.operands[0])
    dst = ctx.kind(op.result)
    return convert_text(args[0], src, dst)


def convert_text(a: Expr, src: ElementKind, dst: ElementKind) -> str | Expr:
    x = a.text
    if src == dst:
        return a
    if src.cls == "c":
        if dst.cls == "c":
            return f"{dst.nb.replace('types.', 'np.')}({x})"
        if dst.cls == "b":
            return f"({x} != 0)"
        # complex -> real: the real part (XLA's rule), then as from a float.
        return convert_text(Expr(f"{x}.real"), src.real, dst)
    if dst.cls == "c":
        if src.cls == "f":
            value = f"np.float64({x})" if dst.bits == 128 else f"np.float32({x})"
        else:
            value = f"i2f({x}, {'types.float64' if dst.bits == 128 else 'types.float32'})"
        return f"{dst.nb.replace('types.', 'np.')}({value})"
    if dst.cls == "f":
        if src.cls == "f":
            if dst.narrow:
                return dst.rounded(f"np.float32({x})")
            return f"np.{dst.storage.name}({x})"
        value = f"i2f({x}, {'types.float64' if dst.bits == 64 else 'types.float32'})"
        return dst.rounded(value)
    target = dst.nb
    if src.cls == "f":
        if dst.narrow == "int":
            # Saturate at the sub-byte type's own range (f2i saturates at int8's).
            lo, hi = (-(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1) if dst.cls == "i" else (0, (1 << dst.bits) - 1)
            fl = f"np.{src.compute_dtype.name}"
            return f"f2i(fminimum(fmaximum({x}, {fl}({lo})), {fl}({hi})), {target})"
        return f"f2i({x}, {target})"
    return dst.rounded(f"i2i({x}, {target})")


@elementwise("stablehlo.bitcast_convert")
def _bitcast_convert(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    src = ctx.kind(op.operands[0])
    dst = ctx.kind(op.result)
    if src.bits != dst.bits or src.cls in "bc" or dst.cls in "bc":
        raise unsupported_variant(op, f"{src.element} -> {dst.element}")
    x = args[0].text
    width = src.bits
    # To the raw unsigned bits, then to the target (a type narrower than a byte, as the byte
    # that stores its pattern, see ElementKind.store).
    if src.narrow:
        bits = src.store(x)
    else:
        bits = f"bitcast({x}, types.uint{width})"
    if dst.narrow:
        return dst.load(bits)
    return f"bitcast({bits}, {dst.nb})"


@elementwise("stablehlo.reduce_precision")
def _reduce_precision(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    e, m = int(op.attr("exponent_bits")), int(op.attr("mantissa_bits"))
    if kind.cls != "f" or kind.bits < 16:
        raise unsupported_variant(op, f"{kind.element} operand")
    wide = 64 if kind.bits == 64 else 32
    src_mant, src_exp = (52, 11) if wide == 64 else (23, 8)
    uk = element_kind(f"ui{wide}")
    drop = max(src_mant - m, 0)
    src_bias = (1 << (src_exp - 1)) - 1
    dst_bias = (1 << (e - 1)) - 1 if e > 0 else 0
    c = lambda v: _const_text(ctx, v, uk)  # noqa: E731
    text = (f"reduce_precision{wide}({args[0].text}, {c(drop)}, {c(1 << drop)}, "
            f"{c(((src_bias + dst_bias) << src_mant) % (1 << wide))}, {c(max(src_bias - dst_bias, 0) << src_mant)}, "
            f"{e < src_exp}, {m > 0})")
    # Narrow storage types then round to their own precision, as a store would.
    return kind.rounded(text)


@elementwise("chlo.next_after", cost=4)
def _next_after(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    if kind.cls != "f" or (kind.narrow and kind.narrow not in ("bf16", "f16")):
        raise unsupported_variant(op, f"{kind.element} operands")
    x, y = args[0].text, args[1].text
    width = kind.bits
    u = f"np.uint{width}"
    nan = {16: 0x7FC0 if kind.narrow == "bf16" else 0x7E00, 32: 0x7FC00000, 64: 0x7FF8000000000000}[width]
    consts = f"{u}(1), {u}({1 << (width - 1)}), {u}({nan})"
    if kind.narrow:  # computed in float32, exact in the narrow format: step its bits
        return kind.load(f"next_after_bits({kind.store(x)}, {kind.store(y)}, {x}, {y}, {consts})")
    return (f"bitcast(next_after_bits(bitcast({x}, types.uint{width}), bitcast({y}, types.uint{width}), "
            f"{x}, {y}, {consts}), {kind.nb})")


@elementwise("stablehlo.map", cost=10)
def _map(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str | Expr:
    (result,) = ctx.lower_scalar_region(op.regions[0], list(args))
    return result


@elementwise("stablehlo.real")
def _real(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str | Expr:
    kind = ctx.kind(op.operands[0])
    if kind.cls == "c":
        return f"{args[0].text}.real"
    _float_operand(op, kind)
    return args[0]


@elementwise("stablehlo.imag")
def _imag(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str | Expr:
    kind = ctx.kind(op.operands[0])
    if kind.cls == "c":
        return f"{args[0].text}.imag"
    _float_operand(op, kind)
    return ctx.const(0, ctx.kind(op.result))


@elementwise("stablehlo.complex")
def _complex(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str:
    kind = ctx.kind(op.result)
    if kind.cls != "c":
        raise unsupported_variant(op, f"{kind.element} result")
    return f"{kind.nb.replace('types.', 'np.')}(complex({args[0].text}, {args[1].text}))"


@elementwise("chlo.conj")
def _conj(ctx: ScalarContext, op: Op, args: Sequence[Expr]) -> str | Expr:
    kind = ctx.kind(op.result)
    if kind.cls == "c":
        return f"{args[0].text}.conjugate()"
    _float_operand(op, kind)
    return args[0]


# -- index maps -----------------------------------------------------------------------------------

_ZERO = Expr("0")


@index_map("stablehlo.get_dimension_size")
def _get_dimension_size(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    d = int(op.attr("dimension"))
    return ctx.const(op.operands[0].tensor_type.shape[d], ctx.kind(op.result))


@index_map("stablehlo.constant")
def _constant(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    value = np.asarray(op.attr("value"))
    kind = ctx.kind(op.result)
    flat = value.reshape(-1)
    if flat.size == 0:
        return ctx.const(0, kind)
    first = flat[0]
    if value.dtype.kind == "f":
        same = bool(np.all(flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8).reshape(1, -1)))
    else:
        same = bool(np.all(flat == first))
    if same:
        return ctx.const(first, kind)
    name = ctx.global_array(value, kind)
    return ctx.temp(kind.load(load_text(name, [x.text for x in idx])), idx)


@index_map("stablehlo.iota")
def _iota(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    kind = ctx.kind(op.result)
    d = int(op.attr("iota_dimension"))
    x = idx[d]
    if kind.cls == "f":
        return ctx.temp(kind.rounded(f"np.{kind.compute_dtype.name}({x.text})"), [x])
    if kind.cls == "c":
        return ctx.temp(f"{kind.nb.replace('types.', 'np.')}(np.float64({x.text}))", [x])
    if kind.cls == "b":
        return ctx.temp(f"({x.text} != 0)", [x])
    return ctx.temp(kind.rounded(f"i2i(np.int64({x.text}), {kind.nb})"), [x])


@index_map("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    operand = op.operands[0]
    dims = op.attr("broadcast_dimensions")
    src = []
    for k, d in enumerate(dims):
        if operand.tensor_type.shape[k] == 1 and op.result.tensor_type.shape[d] != 1:
            src.append(_ZERO)
        else:
            src.append(idx[d])
    return ctx.read(operand, src)


@index_map("stablehlo.broadcast")
def _broadcast(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    operand = op.operands[0]
    extra = len(op.result.tensor_type.shape) - len(operand.tensor_type.shape)
    return ctx.read(operand, idx[extra:])


@index_map("stablehlo.transpose")
def _transpose(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    perm = op.attr("permutation")
    src = [_ZERO] * len(perm)  # every entry is set: perm is a permutation
    for d, p in enumerate(perm):
        src[p] = idx[d]
    return ctx.read(op.operands[0], src)


@index_map("stablehlo.reverse")
def _reverse(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    dims = set(op.attr("dimensions"))
    shape = op.result.tensor_type.shape
    src = [(index_expr(f"({shape[d] - 1} - {x.text})", [x]) if d in dims else x) for d, x in enumerate(idx)]
    return ctx.read(op.operands[0], src)


@index_map("stablehlo.slice")
def _slice(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    start = op.attr("start_indices")
    strides = op.attr("strides") or (1,) * len(start)
    src = []
    for x, s, st in zip(idx, start, strides):
        if s == 0 and st == 1:
            src.append(x)
        else:
            text = x.text if st == 1 else f"{x.text} * {st}"
            src.append(index_expr(f"({text} + {s})" if s else f"({text})", [x]))
    return ctx.read(op.operands[0], src)


@index_map("stablehlo.reshape")
def _reshape(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    operand = op.operands[0]
    src_shape = tuple(operand.tensor_type.shape)
    dst_shape = tuple(op.result.tensor_type.shape)
    if not math.prod(src_shape):
        return ctx.const(0, ctx.kind(op.result))  # nothing is ever read from a zero-size value
    # Only unit dimensions added or removed: the other indices carry over.
    if [d for d in src_shape if d != 1] == [d for d in dst_shape if d != 1]:
        carried = [x for x, d in zip(idx, dst_shape) if d != 1]
        it = iter(carried)
        src = [_ZERO if d == 1 else next(it) for d in src_shape]
        return ctx.read(operand, src)
    b = ctx.env.get(operand)
    if isinstance(b, ArrayBinding):
        view = ctx.reshape_view(operand, b, dst_shape)
        return ctx.temp(b.kind.load(load_text(view, [x.text for x in idx])), idx)
    # General case: through the flat index.
    terms = []
    stride = 1
    for x, d in reversed(list(zip(idx, dst_shape))):
        if d != 1:
            terms.append(x.text if stride == 1 else f"{x.text} * {stride}")
        stride *= d
    flat = ctx.temp(" + ".join(reversed(terms)) or "0", idx, prefix="f")
    src = []
    stride = math.prod(src_shape)
    for d in src_shape:
        stride //= d
        if d == 1:
            src.append(_ZERO)
        else:
            src.append(index_expr(f"(({flat.text} // {stride}) % {d})" if stride > 1 else f"({flat.text} % {d})", [flat]))
    return ctx.read(operand, src)


@index_map("stablehlo.pad")
def _pad(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    operand, padding = op.operands
    lows = op.attr("edge_padding_low")
    interiors = op.attr("interior_padding")
    shape = operand.tensor_type.shape
    conds = []
    src = []
    for x, lo, it, n in zip(idx, lows, interiors, shape):
        q = f"({x.text} - {lo})" if lo else x.text
        step = it + 1
        if n == 0:
            conds.append("False")
            src.append(_ZERO)
            continue
        c = f"({q} >= 0) & ({q} <= {(n - 1) * step})"
        if step > 1:
            c += f" & ({q} % {step} == 0)"
            pos = f"min(max({q}, 0), {(n - 1) * step}) // {step}"
        else:
            pos = f"min(max({q}, 0), {n - 1})"
        conds.append(f"({c})")
        src.append(index_expr(pos, [x]))
    cond = ctx.temp(" & ".join(conds) or "True", idx, prefix="m")
    if any(n == 0 for n in shape):
        return ctx.read(padding, ())
    value = ctx.read(operand, src)
    pad = ctx.read(padding, ())
    return ctx.temp(f"({value.text} if {cond.text} else {pad.text})", [value, pad, cond])


@index_map("stablehlo.dynamic_slice")
def _dynamic_slice(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    operand = op.operands[0]
    starts = op.operands[1:]
    sizes = op.attr("slice_sizes")
    src = []
    for x, s, size, n in zip(idx, starts, sizes, operand.tensor_type.shape):
        sv = ctx.read(s, ())
        start = ctx.temp(f"clamp_index({sv.text}, {n - size})", [sv], prefix="d")
        src.append(index_expr(f"({start.text} + {x.text})", [start, x]))
    return ctx.read(operand, src)


@index_map("stablehlo.gather", cost=2)
def _gather(ctx: Lowering, op: Op, i: int, idx: tuple[Expr, ...]) -> Expr:
    operand, indices = op.operands
    dn = op.attr("dimension_numbers")
    sizes = op.attr("slice_sizes")
    out_rank = len(op.result.tensor_type.shape)
    offset_dims = tuple(dn.offset_dims)
    batch_dims = [d for d in range(out_rank) if d not in offset_dims]
    ivd = dn.index_vector_dim
    ind_rank = len(indices.tensor_type.shape)
    batch_idx = [idx[d] for d in batch_dims]

    def index_at(k: int | None) -> list[Expr]:
        pos = list(batch_idx)
        if ivd < ind_rank:
            pos.insert(ivd, Expr(str(k)) if k is not None else _ZERO)
        return pos

    op_rank = len(operand.tensor_type.shape)
    full: list[Expr | None] = [None] * op_rank
    for k, d in enumerate(dn.start_index_map):
        sv = ctx.read(indices, index_at(k))
        full[d] = ctx.temp(f"clamp_index({sv.text}, {operand.tensor_type.shape[d] - sizes[d]})", [sv], prefix="g")
    for ob, sb in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        pos = sb if sb < ivd else sb - 1
        full[ob] = index_expr(f"np.int64({batch_idx[pos].text})", [batch_idx[pos]])
    offset_operand_dims = [d for d in range(op_rank)
                           if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    offsets = {d: idx[od] for d, od in zip(offset_operand_dims, offset_dims)}
    src = []
    for d in range(op_rank):
        start = full[d]
        off = offsets.get(d)
        if start is None:
            src.append(off if off is not None else _ZERO)
        elif off is None:
            src.append(start)
        else:
            src.append(index_expr(f"({start.text} + {off.text})", [start, off]))
    return ctx.read(operand, src)


# -- reductions -------------------------------------------------------------------------------------

_ASSOCIATIVE = {"stablehlo.add": "add", "stablehlo.multiply": "mul", "stablehlo.maximum": "max",
          "stablehlo.minimum": "min", "stablehlo.and": "and", "stablehlo.or": "or", "stablehlo.xor": "xor"}


def simple_reducer(block: Block, n: int) -> str | None:
    """The associative op of a single-op body ``return op(acc, x)``, if that is what it is:
    ``"add"``, ``"mul"``, ``"max"``... (``n``: the reduction's number of inputs, which must be
    one). The lane reductions (:mod:`.lanes`) and the eager tier read it too."""
    if n != 1 or len(block.ops) != 2:
        return None
    body, ret = block.ops
    kind = _ASSOCIATIVE.get(body.name)
    if kind is None or ret.operands != (body.result,):
        return None
    if set(body.operands) != set(block.args) or len(block.args) != 2:
        return None
    return kind


def _combine_text(kind_name: str, element: ElementKind, acc: str, x: str) -> str:
    if element.cls == "f":
        # Float sums and products outside lane reductions are sequential (see .lanes): a plain
        # step, which LLVM may not reorder. max/min are exact in any order.
        fn = {"add": "({acc} + {x})", "mul": "({acc} * {x})", "max": "rmax({acc}, {x})",
              "min": "rmin({acc}, {x})"}.get(kind_name)
        if fn is None:
            raise CompileError(f"bitwise reduction over {element.element}")
        # Narrow floats accumulate in float32 and are rounded once, when the result is stored
        # (as XLA:CPU reduces bf16/f16: a sum of 1000 bf16 ones is 1000, not 256).
        return fn.format(acc=acc, x=x)
    if element.cls == "c":
        if kind_name not in ("add", "mul"):
            raise CompileError(f"{kind_name} reduction over {element.element} is not supported by numba_cpu")
        return f"({acc} {'+' if kind_name == 'add' else '*'} {x})"
    if element.cls == "b":
        return {"add": f"({acc} | {x})", "or": f"({acc} | {x})", "max": f"({acc} | {x})",
                "mul": f"({acc} & {x})", "and": f"({acc} & {x})", "min": f"({acc} & {x})",
                "xor": f"({acc} ^ {x})"}[kind_name]
    return element.rounded({"add": f"iadd({acc}, {x})", "mul": f"imul({acc}, {x})", "max": f"imax({acc}, {x})",
                       "min": f"imin({acc}, {x})", "and": f"iand({acc}, {x})", "or": f"ior({acc}, {x})",
                       "xor": f"ixor({acc}, {x})"}[kind_name])


#: ``combine(accs, xs) -> new accs``: one reduction step, as formulas of the accumulators and
#: the elements combined into them.
Combine = Callable[[Sequence[Expr], Sequence[Expr]], list[str]]


def reducer(ctx: ScalarContext, op: Op, region_index: int = 0) -> Combine:
    """``combine(accs, xs) -> list[str]``: one reduction step for an op's body region."""
    block = op.regions[region_index]
    n = len(block.args) // 2
    simple = simple_reducer(block, n)
    if simple is not None:
        element = element_kind(block.args[0].type)

        def combine_simple(accs: Sequence[Expr], xs: Sequence[Expr]) -> list[str]:
            return [_combine_text(simple, element, accs[0].text, xs[0].text)]

        return combine_simple

    def combine_region(accs: Sequence[Expr], xs: Sequence[Expr]) -> list[str]:
        return [e.text for e in ctx.lower_scalar_region(block, list(accs) + list(xs))]

    return combine_region


def emit_reduce_member(ctx: Lowering, op: Op, outer_idx: tuple[Expr, ...]) -> None:
    """One ``reduce`` as a member of a group whose outer loops (``outer_idx``) are open."""
    n = len(op.results)
    inputs, inits = op.operands[:n], op.operands[n:]
    dims = set(op.attr("dimensions"))
    shape = tuple(inputs[0].tensor_type.shape)
    rank = len(shape)
    r = len(outer_idx)
    kept = [d for d in range(r, rank) if d not in dims]
    red = [d for d in range(r, rank) if d in dims]
    combine = reducer(ctx, op)
    init = [ctx.read(v, ()) for v in inits]
    # Narrow floats accumulate in float32 scalars, so they always take the scalar-accumulator
    # loop order (the other order accumulates in the result arrays, rounding at every step).
    narrow = any(ctx.kind(v).narrow and ctx.kind(v).cls == "f" for v in op.results)
    suffix = not kept or not red or min(red) > max(kept) or narrow
    plan = lane_reduction(op)
    if plan is not None:
        # Reduced dims are the operand's last ones (so a suffix here too): by lanes.
        with ctx.loops([shape[d] for d in kept]) as kidx:
            (e,) = ctx.lane_rows([shape[d] for d in red], outer_idx + kidx, [(op, plan, init[0])], None)
            res_idx = outer_idx + kidx
            ctx.memo[(op.result.id, tuple(x.text for x in res_idx))] = e
            ctx.store(op.result, res_idx, e)
        return
    if suffix:
        with ctx.loops([shape[d] for d in kept]) as kidx:
            accs = [ctx.fresh("acc") for _ in range(n)]
            ctx.scope.emit(f"{', '.join(accs)} = {', '.join(e.text for e in init)}")
            with ctx.loops([shape[d] for d in red]) as ridx:
                # Every dim after the outer ones is kept or reduced: all entries are set.
                full = list(outer_idx) + [_ZERO] * (rank - r)
                for d, x in [*zip(kept, kidx), *zip(red, ridx)]:
                    full[d] = x
                xs = [ctx.read(v, full) for v in inputs]
                in_loop = [Expr(a, ctx.scope) for a in accs]
                new = combine(in_loop, xs)
                ctx.scope.emit(f"{', '.join(accs)} = {', '.join(new)}")
            round_accumulators(ctx, op, accs)
            res_idx = outer_idx + kidx
            for v, a in zip(op.results, accs):
                e = Expr(a, ctx.scope)
                ctx.memo[(v.id, tuple(x.text for x in res_idx))] = e
                ctx.store(v, res_idx, e)
        return
    # Reduced dims interleaved with kept ones: accumulate in the result arrays.
    names = []
    for v in op.results:
        b = ctx.env.get(v)
        if not isinstance(b, (ArrayBinding, RowBuffer)):
            raise CompileError(f"internal: reduce result {v.name} has no array")
        names.append(b)
    with ctx.loops([shape[d] for d in kept]) as kidx:
        res_idx = outer_idx + kidx
        for v, e in zip(op.results, init):
            ctx.store(v, res_idx, e)
    with ctx.loops([shape[d] for d in range(r, rank)]) as iidx:
        element_idx = outer_idx + iidx
        kpos = [iidx[d - r] for d in kept]
        res_idx = outer_idx + tuple(kpos)
        current = []
        for _v, b in zip(op.results, names):
            current.append(ctx.temp(b.kind.load(load_text(b.name, _parts(b, res_idx))), list(element_idx)))
        xs = [ctx.read(v, element_idx) for v in inputs]
        new = combine(current, xs)
        for _v, b, t in zip(op.results, names, new):
            ctx.scope.emit(store_text(b.name, _parts(b, res_idx), b.kind.store(t)))


def _parts(b: ArrayBinding | RowBuffer, idx: Sequence[Expr]) -> list[str]:
    """Index of a result element in its array (all dims) or row buffer (dims after the outer ones)."""
    n_outer = b.n_outer if isinstance(b, RowBuffer) else 0
    inner = [x.text for x in idx[n_outer:]]
    return inner or (["0"] if n_outer else [])


@kernel("stablehlo.reduce", lazy_operands=True)
def _reduce_kernel(ctx: Lowering, op: Op) -> Sequence[Binding]:
    """A reduce on its own (the planner normally fuses it into a group with its neighbours)."""
    from .planner import natural_outer, reduce_member

    member = reduce_member(op)
    ctx.emit_group(FusionGroup(natural_outer(member), [member]))
    return [ctx.env[r] for r in op.results]
