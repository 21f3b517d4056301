"""The eager tier: a program run op by op with numpy, giving the compiled code's results bit
for bit, with no compilation at all.

numba needs seconds to compile a program (and half a second to import), XLA:CPU tens of
milliseconds; :mod:`.tiers` answers a program's first executions with this tier while numba
compiles it in the background, then switches. For the switch to be invisible, every op here
computes exactly what the compiled kernels compute:

* Elementwise ops are not reimplemented: the lowering rule of the op (:mod:`.rules`) writes the
  formula as text, exactly as for the compiled kernel, and it is evaluated on whole arrays (or
  blocks of their rows, see :class:`_RowSegment`) with each helper bound to its numpy twin
  (:mod:`.eager_math`; on large float32 arrays, vecmath's functions run as
  :mod:`.machine_kernels`, compiled once per machine), ``x if c else y`` turned into
  ``np.where``. The same holds for reduction steps and the scalar regions of ``map``, ``sort``,
  ``scatter``, ``reduce_window`` and ``select_and_scatter``.
* Reductions follow the order :mod:`.lanes` defines (fixed lanes, or sequential), never
  numpy's pairwise sums. ``dot_general`` calls the very BLAS function the compiled code calls
  (scipy's ``sgemm``/``dgemm``) with the same arguments, row block by row block, on as many of
  OpenBLAS's threads; the loops of integer and 16-bit dots, convolutions and windows accumulate
  in the same order.
* Values are held in the compiled code's computation types: 16-bit floats as float32 values
  rounded after every op, as the kernels hold them.

A program with an op (or a variant of one) this tier does not cover is declined at compile
time with :class:`EagerUnsupported`, and the program waits for numba as before; an input this
tier cannot reproduce exactly (a sort whose comparator is not a strict weak order on a row too
long to replay the merge sort) raises :class:`NeedsCompiled` at run time, and that execution
waits for the compiled code. The tests run both tiers on the corpus and on generated programs
and compare the bits.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import math
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from pjrt_hub.abi import Cancelled, CompileError
from pjrt_hub.backends.stablehlo import Block, Function, Op, TensorType, Value

from . import kernels as _kernels_module  # registers the kernel rules
from . import lanes as _lanes
from . import row_programs
from . import machine_kernels
from pjrt_hub.backends.cpu_runtime.helper_thread import HelperThread
from . import rules as _rules_module  # noqa: F401  (registers the op rules)
from .eager_math import NAMESPACE
from .source import ElementKind, Expr, element_kind

__all__ = ["EagerProgram", "EagerUnsupported", "NeedsCompiled", "Overtaken", "estimate_cost"]


class EagerUnsupported(Exception):
    """The eager tier does not cover this program; it runs compiled only."""


class NeedsCompiled(Exception):
    """This execution's inputs need the compiled program (the eager tier cannot reproduce it)."""


class Overtaken(Exception):
    """The compiled program became ready during an eager run, which stops to let it run."""


#: Longest sequential loop (steps of a reduction, window, scatter rank...) run from Python
#: before an execution is handed to the compiled program instead.
MAX_STEPS = 1 << 16
#: Sorts compare all pairs of a row at once while rows * n * n stays below this.
PAIRWISE_LIMIT = 1 << 22


class Env(dict[Value, np.ndarray]):
    """The values of one run (each op's results, by SSA value), with the run's cancel flag
    (the runtime's, asked in while loops) and ``overtaken()`` check (asked between steps).

    ``rows`` is set where a :class:`_RowSegment` runs its steps on a block of rows: their
    values then have ``rows`` where the program's have its leading dimension."""

    def __init__(self, cancel: np.ndarray | None, overtaken: Callable[[], bool] | None,
                 rows: int | None = None) -> None:
        super().__init__()
        self.cancel = cancel
        self.overtaken = overtaken
        self.rows = rows

    def shape(self, static: tuple[int, ...]) -> tuple[int, ...]:
        """A result's shape in this environment (``static``, or its rows in a row block)."""
        return static if self.rows is None else (self.rows,) + static[1:]


#: One op's work in a run: reads its operands from the environment, stores its results there.
Step = Callable[[Env], None]
#: A formula on whole arrays (see :meth:`_Text.function`): its results are numpy arrays or
#: scalars, as the numpy twins return them.
Formula = Callable[..., list[Any]]
#: One step of a reduction region: ``combine(accumulators, values) -> new accumulators``.
Combine = Callable[[list[np.ndarray], list[np.ndarray]], list[np.ndarray]]


# -- elementwise text ------------------------------------------------------------------------------


class _Rewrite(ast.NodeTransformer):
    """Generated scalar text -> numpy array text."""

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        return ast.Call(ast.Name("_where", ast.Load()), [node.test, node.body, node.orelse], [])

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        op: ast.operator = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        out: ast.expr = node.values[0]
        for v in node.values[1:]:
            out = ast.BinOp(out, op, v)
        return out

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.Call(ast.Attribute(ast.Name("np", ast.Load()), "logical_not", ast.Load()), [node.operand], [])
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(ast.Compare(left, [op], [right]))
            left = right
        out: ast.expr = parts[0]
        for p in parts[1:]:
            out = ast.BinOp(out, ast.BitAnd(), p)
        return out


@functools.lru_cache(maxsize=4096)
def _array_expression(text: str) -> tuple[ast.expr, frozenset[str]]:
    """Scalar formula ``text`` as numpy array text (a parsed expression), and the names it reads."""
    tree = ast.fix_missing_locations(_Rewrite().visit(ast.parse(text, mode="eval")))
    return tree.body, frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))


class _Text:
    """The lowering context the rules see when they write a scalar formula for this tier: it
    collects the statements (``name = text``) and the constants they need."""

    def __init__(self) -> None:
        self.globals: dict[str, str] = {}
        self._global_keys: dict[tuple, str] = {}
        self.stmts: list[tuple[str, str]] = []
        self.env: dict[Value, Expr] = {}
        self._n = 0

    def fresh(self, prefix: str = "t") -> str:
        self._n += 1
        return f"_{prefix}{self._n}"

    def kind(self, v: Value) -> ElementKind:
        return element_kind(v.tensor_type, where=v.name)

    def const(self, value: object, kind: ElementKind) -> Expr:
        from .codegen import Lowering

        # The lowering's own method, so that constants are written exactly as in compiled code;
        # it reads only ``globals`` and ``_global_keys``, which this class has too.
        return Lowering.const(self, value, kind)  # type: ignore[arg-type]  # a duck-typed self

    def temp(self, text: str, deps: Iterable[Expr] = (), prefix: str = "t") -> Expr:
        name = self.fresh(prefix)
        self.stmts.append((name, text))
        return Expr(name)

    def read(self, v: Value, idx: Sequence[Expr] = ()) -> Expr:
        e = self.env.get(v)
        if e is None:
            raise EagerUnsupported(f"{v.name} read in a scalar formula before it is defined")
        return e

    def lower_scalar_region(self, block: Block, args: Sequence[Expr]) -> list[Expr]:
        from .codegen import RULES

        for a, e in zip(block.args, args):
            self.env[a] = e
        for op in block.ops[:-1]:
            rule = RULES.get(op.name)
            if rule is None or any(isinstance(r.type, TensorType) and r.type.rank for r in op.results):
                raise EagerUnsupported(f"{op.name} inside a scalar region")
            if rule.elementwise is not None:
                out = rule.elementwise(self, op, [self.read(o) for o in op.operands])
                self.env[op.result] = out if isinstance(out, Expr) else self.temp(out)
            elif op.name == "stablehlo.constant":
                self.env[op.result] = self.const(np.asarray(op.attr("value")).reshape(-1)[0], self.kind(op.result))
            elif op.name in _SCALAR_IDENTITY:
                self.env[op.result] = self.read(op.operands[0])
            else:
                raise EagerUnsupported(f"{op.name} inside a scalar region")
        return [self.read(v) for v in block.terminator.operands]

    def function(self, params: Sequence[str], results: Sequence[Expr]) -> Formula:
        """The collected statements as ``f(*arrays) -> [result arrays]``: one Python function
        (its temporaries are locals), made once per distinct text (a program's ops share a few)."""
        return _formula(tuple(params), tuple(self.stmts), tuple(e.text for e in results),
                        tuple(sorted(self.globals.items())))


@functools.lru_cache(maxsize=1024)
def _formula(params: tuple[str, ...], statements: tuple[tuple[str, str], ...], results: tuple[str, ...],
             constants: tuple[tuple[str, str], ...]) -> Formula:
    g = dict(NAMESPACE)
    for name, text in constants:
        g[name] = eval(text, {"np": np})
    stmts = [(name, *_array_expression(text)) for name, text in statements]
    outs = [_array_expression(text) for text in results]
    # Every name the text reads must have a twin: a helper without one (an element type or op
    # variant this tier does not know) declines the program now, not at run time.
    known = set(g) | set(params) | {name for name, _, _ in stmts} | set(dir(__builtins__))
    for names in [n for _, _, n in stmts] + [n for _, n in outs]:
        missing = [n for n in names if n not in known]
        if missing:
            raise EagerUnsupported(f"no numpy twin for {', '.join(sorted(set(missing)))}")
    module = ast.parse(f"def formula({', '.join(params)}):\n    pass\n")
    body: list[ast.stmt] = [ast.Assign([ast.Name(name, ast.Store())], expr) for name, expr, _ in stmts]
    body.append(ast.Return(ast.List([expr for expr, _ in outs], ast.Load())))
    module.body[0].body = body  # type: ignore[attr-defined]
    exec(compile(ast.fix_missing_locations(module), "<numba_cpu eager>", "exec"), g)
    formula: Formula = g["formula"]
    return formula


_SCALAR_IDENTITY = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.transpose",
                              "stablehlo.reverse", "stablehlo.broadcast", "stablehlo.optimization_barrier",
                              "sdy.sharding_constraint"})


def _compute_dtype(kind: ElementKind) -> np.dtype:
    return kind.compute_dtype if kind.cls == "f" else kind.storage


def _as(x: npt.ArrayLike, kind: ElementKind, shape: Sequence[int]) -> np.ndarray:
    """A result in the computation type of ``kind`` and of ``shape``."""
    return _as_dtype(x, _compute_dtype(kind), tuple(shape))


def _as_dtype(x: npt.ArrayLike, dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` as an array of type ``dt`` and of ``shape`` (broadcast to it, read-only)."""
    a = x if type(x) is np.ndarray else np.asarray(x)
    if a.dtype != dt:
        a = a.astype(dt)
    if a.shape != shape:
        a = _broadcast_view(a, shape)
    return a


def _broadcast_view(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``np.broadcast_to(x, shape)``, made directly (a fifth of its time) where ``x`` is a
    C-contiguous array of the same rank: the row segments' steps make one per op and block."""
    if x.ndim != len(shape) or not x.flags.c_contiguous or not x.size or any(
            n != m and n != 1 for n, m in zip(x.shape, shape)):
        return np.broadcast_to(x, shape)
    strides = tuple(0 if n != m else s for n, m, s in zip(x.shape, shape, x.strides))
    view = np.ndarray(shape, x.dtype, x, 0, strides)
    view.flags.writeable = False
    return view


def _round_narrow(x: np.ndarray, kind: ElementKind) -> np.ndarray:
    """A 16-bit float's float32 value rounded to its type, as the compiled code rounds a
    reduction's float32 accumulator once, when it stores the result."""
    if kind.cls != "f" or not kind.narrow:
        return x
    return NAMESPACE["round_bf16" if kind.narrow == "bf16" else "round_f16"](x)


def _no_narrow_accumulators(op: Op) -> None:
    """Decline an op whose compiled code rounds 16-bit float accumulators at places this tier
    does not follow (windows, scatters: the compiled kernels differ in where they store)."""
    for r in op.results:
        kind = _kind(r)
        if kind.cls == "f" and kind.narrow:
            raise EagerUnsupported(f"{op.name} with {kind.element} results")


def formula_text(op: Op) -> tuple[_Text, list[str], Expr]:
    """Elementwise ``op``'s scalar formula over operands ``a0, a1, ...``, as its rule writes it
    for the compiled kernel: the text context (statements, constants), the operand names and
    the result. Raises what the rule raises for an op it does not take."""
    from .codegen import RULES

    formula = RULES[op.name].elementwise
    assert formula is not None, "only ops with an elementwise rule have a formula"
    t = _Text()
    names = [f"a{i}" for i in range(len(op.operands))]
    for o, n in zip(op.operands, names):
        t.env[o] = Expr(n)
    out = formula(t, op, [Expr(n) for n in names])
    return t, names, out if isinstance(out, Expr) else Expr(t.temp(out).text)


def formula_function(op: Op) -> Formula:
    """Elementwise ``op``'s formula on numpy arrays: ``f(*operands) -> [result]``."""
    t, names, result = formula_text(op)
    return t.function(names, [result])


def _elementwise(op: Op) -> Step:
    fn = formula_function(op)
    kind = _kind(op.result)
    shape = tuple(op.result.tensor_type.shape)
    operands, res = op.operands, op.result
    # One element of zeros through the formula now: a helper that does not take these types
    # (numba would refuse to compile it) declines the program here rather than at run time.
    try:
        with np.errstate(all="ignore"):
            fn(*[np.zeros((), _compute_dtype(_kind(o))) for o in operands])
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise EagerUnsupported(f"{op.name}: {exc}") from None

    dt = _compute_dtype(kind)

    def step(env: Env) -> None:
        (value,) = fn(*[env[o] for o in operands])
        env[res] = _as_dtype(value, dt, shape if env.rows is None else (env.rows,) + shape[1:])

    return step


def _step_function(op: Op, region_index: int = 0) -> Combine:
    """``combine(accs, xs) -> new accs``: one step of the op's reduction region, as text from
    the same ``reducer`` the compiled code uses (so a sum step is ``acc + x``, rounded for
    16-bit floats)."""
    from .rules import reducer

    block = op.regions[region_index]
    n = len(block.args) // 2
    t = _Text()
    accs = [Expr(f"acc{i}") for i in range(n)]
    xs = [Expr(f"x{i}") for i in range(n)]
    combine = reducer(t, op, region_index)
    texts = combine(accs, xs)
    results = [Expr(x) if isinstance(x, str) else x for x in texts]
    fn = t.function([e.text for e in accs + xs], results)
    kinds = [element_kind(a.tensor_type) for a in block.args[:n]]

    def step(acc_values: list[np.ndarray], x_values: list[np.ndarray]) -> list[np.ndarray]:
        out = fn(*acc_values, *x_values)
        return [np.asarray(o).astype(_compute_dtype(k), copy=False) for o, k in zip(out, kinds)]

    return step


def _region_function(block: Block) -> Formula:
    """A scalar region (sort comparator, select of select_and_scatter...) on whole arrays."""
    t = _Text()
    params = [f"r{i}" for i in range(len(block.args))]
    results = t.lower_scalar_region(block, [Expr(p) for p in params])
    return t.function(params, results)


# -- how long the eager tier takes ---------------------------------------------------------------------

#: Elementwise ops whose twin goes through Python's math module element by element.
_PER_ELEMENT = frozenset({
    "stablehlo.sine", "stablehlo.cosine", "stablehlo.tan", "stablehlo.cbrt", "stablehlo.atan2", "chlo.erf",
    "chlo.erfc", "chlo.erf_inv", "chlo.tan", "chlo.sinh", "chlo.cosh", "chlo.asin", "chlo.acos", "chlo.atan",
    "chlo.asinh", "chlo.acosh", "chlo.atanh", "chlo.lgamma", "chlo.digamma", "chlo.bessel_i1e", "chlo.polygamma",
    "chlo.zeta",
})
#: float32 formulas transcribed from .vecmath: tens of numpy passes each.
_VECMATH = frozenset({
    "stablehlo.exponential", "stablehlo.exponential_minus_one", "stablehlo.log", "stablehlo.log_plus_one",
    "stablehlo.tanh", "stablehlo.logistic",
})


#: Ops whose float32 formula a machine kernel computes (:mod:`.machine_kernels`), when loaded.
_MACHINE = _VECMATH | (_PER_ELEMENT - {"chlo.erf_inv", "chlo.lgamma", "chlo.digamma", "chlo.bessel_i1e",
                                       "chlo.polygamma", "chlo.zeta"}) | {"stablehlo.power"}


def estimate_cost(fn: Function, kernels: bool = False) -> float:
    """A rough count of the element operations the eager tier performs for one run of ``fn``
    (a numpy pass over n elements is n; a transcendental formula some tens of passes, or a few
    with machine ``kernels`` (:mod:`.machine_kernels`); a value through Python's math module some hundreds), to tell
    programs it answers in milliseconds from those a background compile will overtake."""
    from pjrt_hub.backends.stablehlo.loops import _definitions, trip_count

    defs = _definitions(fn.walk())

    def size(v: Value) -> int:
        return math.prod(v.type.shape) if isinstance(v.type, TensorType) else 1

    def block(b: Block) -> float:
        return sum(one(op) for op in b.ops[:-1])

    def one(op: Op) -> float:
        n = sum(size(r) for r in op.results)
        name = op.name
        if name == "stablehlo.while":
            trips = trip_count(op, defs)
            return (16 if trips is None else max(trips, 1)) * (block(op.regions[0]) + block(op.regions[1]) + 10)
        if name in ("stablehlo.case", "stablehlo.if"):
            return max((block(r) for r in op.regions), default=0.0) + 10
        if op.regions and name in ("stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter",
                                   "stablehlo.select_and_scatter", "stablehlo.sort"):
            inner = 4.0 + len(op.regions[0].ops)
        else:
            inner = 1.0
        if kernels and name in _MACHINE and all(
                getattr(r.type, "element_type", "") == "f32" for r in op.results):
            return 3.0 * n
        if name in _PER_ELEMENT or any(getattr(r.type, "element_type", "") == "f64" for r in op.results) and (
                name in _VECMATH or name == "stablehlo.power"):
            return 150.0 * n
        if name in _VECMATH:
            return 30.0 * n
        if name == "stablehlo.power":
            return 60.0 * n
        if name in ("stablehlo.dot_general", "stablehlo.dot"):
            lhs = op.operands[0].tensor_type.shape
            if name == "stablehlo.dot":
                k = lhs[-1] if lhs else 1
            else:
                k = math.prod(lhs[d] for d in op.attr("dot_dimension_numbers").lhs_contracting_dimensions)
            blas = getattr(op.results[0].type, "element_type", "") in ("f32", "f64")
            # BLAS runs at tens of flops per numpy element op; the loops of other types are
            # one numpy pass per contraction step.
            return n * k * (0.05 if blas else 3.0) + size(op.operands[0]) + size(op.operands[1])
        if name == "stablehlo.convolution":
            dn = op.attr("dimension_numbers")
            kshape = op.operands[1].tensor_type.shape
            window = math.prod(kshape[d] for d in dn.kernel_spatial_dimensions) * kshape[dn.kernel_input_feature_dimension]
            return 6.0 * n * window
        if name in ("stablehlo.reduce", "stablehlo.scatter"):
            return inner * sum(size(v) for v in op.operands)
        if name in ("stablehlo.reduce_window", "stablehlo.select_and_scatter"):
            window = math.prod(op.attr("window_dimensions") or (1,))
            return inner * window * max(n, size(op.operands[0]))
        if name == "stablehlo.sort":
            shape = op.operands[0].tensor_type.shape
            dim = int(op.attr("dimension")) % max(1, len(shape))
            return inner * size(op.operands[0]) * (shape[dim] if shape else 1)
        return inner * n

    return block(fn.body)


# -- the program -------------------------------------------------------------------------------------


def _kind(v: Value) -> ElementKind:
    if not isinstance(v.type, TensorType):
        raise EagerUnsupported(f"{v.name}: {v.type} values")
    try:
        kind = element_kind(v.type, where=v.name)
    except CompileError as exc:
        raise EagerUnsupported(str(exc)) from None
    if kind.cls not in "fiub" or kind.bits not in ((16, 32, 64) if kind.cls == "f" else (1, 8, 16, 32, 64)):
        raise EagerUnsupported(f"{v.name}: element type {kind.element}")
    return kind


class _Plan:
    """Steps of one block, built once; running a block runs its steps on an environment.

    The function body (``top``) is planned further:

    * Runs of consecutive ops that each compute rows from the same rows of their operands
      (elementwise ops, broadcasts along the rows, reductions within rows: see
      :func:`_row_reads`) become one :class:`_RowSegment`, which runs them block of rows after
      block of rows, on two threads, so that their intermediate arrays never exist whole.
    * After each step, the values no later step reads (nor the block's results) leave the
      environment, and their memory goes back to the heap for the next step's arrays, instead
      of every intermediate array of a run staying alive, in fresh pages, until its end (the
      2048x2048 elementwise chain held 27 arrays of 16 MiB).

    Nested blocks are not (they also read the values of the blocks around them)."""

    def __init__(self, program: "EagerProgram", block: Block, top: bool = False) -> None:
        self.block = block
        self.results = block.terminator.operands
        ops = list(block.ops[:-1])
        for op in ops:
            for v in op.results:
                _kind(v)
        units = _row_segments(ops) if top else [[op] for op in ops]
        # The last unit that reads each value this block defines (the values nested regions
        # read count as read by the op that holds them): a segment keeps what a later unit
        # reads, and a value leaves the environment after its last unit. By unit, not by op:
        # an op moved before a segment runs before ops that come before it in the text.
        last: dict[Value, int] = {}
        if top:
            unit_of = {id(op): u for u, unit in enumerate(units) for op in unit}
            for op in ops:
                u = unit_of[id(op)]
                for v in op.results:
                    last[v] = u
                for inner in op.walk():
                    for v in inner.operands:
                        if v in last:
                            last[v] = max(last[v], u)
        keep = set(self.results)
        self.steps: list[Step] = []
        for u, unit in enumerate(units):
            if len(unit) == 1:
                self.steps.append(program._step(unit[0]))
            else:
                kept = [r for op in unit for r in op.results if r in keep or last[r] > u]
                self.steps.append(_RowSegment(program, unit, kept))
        dead: list[list[Value]] = [[] for _ in self.steps]
        for v, u in last.items():
            if v not in keep:
                dead[u].append(v)
        self.dead = [tuple(d) for d in dead]

    def run(self, env: Env, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        for a, x in zip(self.block.args, args):
            env[a] = x
        overtaken = env.overtaken
        for step, dead in zip(self.steps, self.dead):
            if overtaken is not None and overtaken():
                raise Overtaken()
            step(env)
            for v in dead:
                env.pop(v, None)  # a row segment's inner values never were there
        return [env[v] for v in self.results]


# -- row segments ----------------------------------------------------------------------------------

#: Elements of one value in a row block: with a dozen values of a block alive, they stay in a
#: core's cache.
ROW_BLOCK_ELEMENTS = 1 << 17
#: Row segments computing fewer elements than this run op by op, on whole arrays.
ROW_SEGMENT_MIN = 1 << 18


def _leading(v: Value) -> int | None:
    t = v.type
    return t.shape[0] if isinstance(t, TensorType) and t.shape else None


def _row_reads(op: Op) -> list[str] | None:
    """How ``op`` reads each operand if it computes the rows of its results (first dimension,
    all of the same size) from the same rows of its operands: ``"rows"`` (the operand's rows,
    in step) or ``"whole"`` (the whole operand, for every row); None if it does not."""
    from .codegen import RULES

    n = _leading(op.results[0]) if op.results else None
    if n is None or any(_leading(r) != n for r in op.results):
        return None
    if op.name == "stablehlo.broadcast_in_dim":
        dims = [int(d) for d in op.attr("broadcast_dimensions")]
        shape = op.operands[0].tensor_type.shape
        if 0 not in dims or shape[dims.index(0)] == 1:
            return ["whole"]
        return ["rows"] if dims[0] == 0 and shape[0] == n else None
    if op.name == "stablehlo.reduce":
        k = len(op.results)
        dims = [int(d) for d in op.attr("dimensions")]
        if 0 in dims or any(_leading(v) != n for v in op.operands[:k]):
            return None
        return ["rows"] * k + ["whole"] * k
    if op.name in _KERNELS or op.regions:
        return None
    rule = RULES.get(op.name)
    if rule is None or rule.elementwise is None:
        return None
    shape = op.results[0].tensor_type.shape
    reads = []
    for v in op.operands:
        t = v.type
        if not isinstance(t, TensorType):
            return None
        if tuple(t.shape) == tuple(shape):
            reads.append("rows")
        elif not t.shape:
            reads.append("whole")
        else:
            return None
    return reads


def _row_segments(ops: Sequence[Op]) -> list[list[Op]]:
    """``ops`` cut into units: runs of row ops (a segment, when it is worth one) and single
    ops. An op met inside a run that reads nothing the run computes (a constant, the reshape of
    a bias) is moved before it."""
    units: list[list[Op]] = []
    run: list[Op] = []
    moved: list[Op] = []
    reads: dict[Value, str] = {}
    inside: set[Value] = set()
    order = {id(op): i for i, op in enumerate(ops)}

    def close() -> None:
        nonlocal run, moved, reads, inside
        if _worth_a_segment(run):
            units.extend([op] for op in moved)
            units.append(run)
        else:
            units.extend([op] for op in sorted(run + moved, key=lambda o: order[id(o)]))
        run, moved, reads, inside = [], [], {}, set()

    for op in ops:
        how = _row_reads(op)
        if how is not None and run and _leading(op.results[0]) == _leading(run[0].results[0]):
            new: dict[Value, str] = {}
            fits = True
            for v, h in zip(op.operands, how):
                if v in inside:
                    fits = fits and h == "rows"
                elif reads.get(v, new.setdefault(v, h)) != h:
                    fits = False  # read as rows by one op and whole by another
            if fits:
                run.append(op)
                inside.update(op.results)
                reads.update(new)
                continue
        if run and not op.regions and not any(v in inside for inner in op.walk() for v in inner.operands):
            moved.append(op)  # reads nothing the run computes: it can run before it
            continue
        if run:
            close()
        if how is not None:
            run = [op]
            inside = set(op.results)
            reads = {v: h for v, h in zip(op.operands, how)}
        else:
            units.append([op])
    if run:
        close()
    return units


def _block_rows(run: Sequence[Op]) -> int:
    """Rows of one block of a segment of ``run``: :data:`ROW_BLOCK_ELEMENTS` of its widest value."""
    row = max(math.prod(r.tensor_type.shape[1:]) for op in run for r in op.results)
    return max(1, ROW_BLOCK_ELEMENTS // max(row, 1))


def _worth_a_segment(run: Sequence[Op]) -> bool:
    """At least two ops, two blocks, and :data:`ROW_SEGMENT_MIN` elements computed."""
    if len(run) < 2:
        return False
    n = _leading(run[0].results[0]) or 0
    return n >= 2 * _block_rows(run) and sum(r.tensor_type.size for op in run for r in op.results) >= ROW_SEGMENT_MIN


class _RowSegment:
    """Row ops (see :func:`_row_reads`) run block of rows after block of rows: the operands
    from outside are sliced to the block's rows (or taken whole), the ops' own steps run on
    them (with ``Env.rows`` set), and only the values read after the segment are kept, written
    into whole arrays block by block. The blocks are shared by this thread and a helper thread
    (numpy lets go of the GIL in its loops, the machine kernels in theirs). Every row is
    computed by the same operations as on whole arrays, so the bits are the same. A float32
    segment runs on the row machine instead, where it is loaded and takes every op of it
    (:mod:`.row_programs`).

    Where the row machine is loaded when the program is planned, the segment is planned for
    it then, and a segment it runs gets no numpy steps unless it needs them after all
    (:attr:`steps`: an opcode found to disagree with numpy at its first use): building their
    formulas was a large share of the eager tier's compile, for steps the row machine never
    runs. Every other segment gets its
    steps when planned, so that an op the eager tier cannot run is found at compile time (and
    the program compiled instead); a step that could still prove unsupported at run time sends
    that run to the compiled code (:class:`NeedsCompiled`)."""

    def __init__(self, program: "EagerProgram", ops: Sequence[Op], outputs: Sequence[Value]) -> None:
        self.program, self.ops = program, list(ops)
        #: The segment as a row program (:mod:`.row_programs`), once planned; False if the row
        #: machine does not run it.
        self.machine: row_programs.RowProgram | bool | None = None
        inside = {r for op in ops for r in op.results}
        self.n = _leading(ops[0].results[0]) or 0
        self.rows = _block_rows(ops)
        self.sliced: list[Value] = []
        self.whole: list[Value] = []
        for op in ops:
            for v, how in zip(op.operands, _row_reads(op) or []):
                if v not in inside and v not in self.sliced and v not in self.whole:
                    (self.sliced if how == "rows" else self.whole).append(v)
        #: The values read after the segment (or returned): the only ones kept whole.
        self.outputs = list(outputs)
        table = machine_kernels.row_machine_table() if row_programs.may_run(self.ops) else None
        if table is not None:
            self.machine = row_programs.plan(program, self.ops, self.outputs, table) or False
        self._steps: list[Step] | None = None
        if not isinstance(self.machine, row_programs.RowProgram):
            self._steps = [program._step(op) for op in ops]

    def _row_program(self) -> tuple[row_programs.RowProgram, machine_kernels.Kernels] | None:
        """The segment's row program and the kernels to run it with, where the row machine is
        loaded and runs every op of it."""
        if self.machine is None:
            table = machine_kernels.row_machine_table(wait=True)
            if table is None:
                return None
            self.machine = row_programs.plan(self.program, self.ops, self.outputs, table) or False
        if self.machine is False:
            return None
        assert isinstance(self.machine, row_programs.RowProgram)
        kernels = machine_kernels.row_machine(self.machine.opcodes)
        return None if kernels is None else (self.machine, kernels)

    @property
    def steps(self) -> list[Step]:
        """The ops' numpy steps, made on first use (see the class docstring)."""
        if self._steps is None:
            try:
                self._steps = [self.program._step(op) for op in self.ops]
            except EagerUnsupported as exc:
                raise NeedsCompiled(str(exc)) from None
        return self._steps

    def __call__(self, env: Env) -> None:
        machine = self._row_program()
        if machine is not None and machine[0].run(env, machine[1], _ROWS_HELPER):
            return
        n, size, steps = self.n, self.rows, self.steps
        blocks = [(r0, min(r0 + size, n)) for r0 in range(0, n, size)]
        outs: dict[Value, np.ndarray] = {}
        lock = threading.Lock()

        def run(part: Sequence[tuple[int, int]]) -> None:
            for r0, r1 in part:
                local = Env(env.cancel, None, rows=r1 - r0)
                for v in self.sliced:
                    local[v] = env[v][r0:r1]
                for v in self.whole:
                    local[v] = env[v]
                with np.errstate(all="ignore"):  # per thread: the run's own is this thread's
                    for step in steps:
                        step(local)
                for v in self.outputs:
                    x = local[v]
                    out = outs.get(v)
                    if out is None:
                        with lock:
                            out = outs.get(v)
                            if out is None:
                                out = outs[v] = np.empty((n,) + x.shape[1:], x.dtype)
                    out[r0:r1] = x

        _ROWS_HELPER.split(lambda start, stop: run(blocks[start:stop]), len(blocks), len(blocks) // 2)
        for v in self.outputs:
            env[v] = outs[v]


_ROWS_HELPER = HelperThread("pjrt-hub-eager-rows")


class EagerProgram:
    """A call-free function (see :func:`.inline.inline_calls`) planned for the eager tier."""

    def __init__(self, fn: Function, threads: int = 1) -> None:
        self.fn = fn
        #: The threads the compiled tier was cut for: large products are cut into the row
        #: blocks the compiled tier runs (:func:`.kernels.dot_row_blocks`), and a product that
        #: is not cut runs on as many of OpenBLAS's threads as the compiled one.
        self.threads = threads
        self._in_kinds = [_kind(a) for a in fn.args]
        self._out_kinds = [_kind(v) for v in fn.body.terminator.operands]
        #: The ``dynamic_update_slice`` ops (by id) that update a loop's own array in place
        #: (see :func:`~pjrt_hub.backends.stablehlo.loops.updated_in_place`).
        self.in_place: set[int] = set()
        self._body = _Plan(self, fn.body, top=True)
        #: Element operations of one run (see :func:`estimate_cost`).
        self.cost = estimate_cost(fn, machine_kernels.available())

    # -- running --

    def run(self, args: Sequence[np.ndarray], cancel: np.ndarray | None = None,
            overtaken: Callable[[], bool] | None = None) -> list[np.ndarray]:
        """The outputs, as the compiled entry returns them (16-bit floats as their uint16
        bits). ``overtaken()``, asked between steps, stops the run with :class:`Overtaken`
        when it turns true (the compiled program is ready and will answer instead)."""
        env = Env(cancel, overtaken)
        inputs = []
        for x, kind in zip(args, self._in_kinds):
            x = np.asarray(x)
            if kind.narrow:
                bits = x.view(np.uint16)
                x = NAMESPACE["bf16_value"](bits) if kind.narrow == "bf16" else NAMESPACE["f16_value"](bits)
            inputs.append(x)
        with np.errstate(all="ignore"):
            outs = self._body.run(env, inputs)
            return self._results(args, outs)

    def _results(self, args: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> list[np.ndarray]:
        results = []
        seen = {id(a) for a in args}
        for v, x, kind in zip(self.fn.body.terminator.operands, outs, self._out_kinds):
            x = np.asarray(x)
            if kind.narrow:
                fn = NAMESPACE["bf16_bits"] if kind.narrow == "bf16" else NAMESPACE["f16_bits"]
                x = np.asarray(fn(x), np.uint16).reshape(v.tensor_type.shape)
            else:
                x = x.astype(kind.storage, copy=False)
            # Fresh, C-contiguous arrays the caller may keep: never a view of an input, a
            # constant of the plan or another output.
            if (id(x) in seen or not x.flags.owndata or not x.flags.writeable
                    or not x.flags.c_contiguous):
                x = np.array(x, order="C", copy=True)
            seen.add(id(x))
            results.append(x)
        return results

    # -- planning --

    def _step(self, op: Op) -> Step:
        from .codegen import RULES

        impl = _KERNELS.get(op.name)
        if impl is not None:
            return impl(self, op)
        rule = RULES.get(op.name)
        if rule is not None and rule.elementwise is not None:
            try:
                return _elementwise(op)
            except EagerUnsupported:
                raise
            except (CompileError, KeyError, NameError, SyntaxError, TypeError, ValueError) as exc:
                raise EagerUnsupported(f"{op.name}: {exc}") from None
        raise EagerUnsupported(f"{op.name} is not covered by the eager tier")

    def plan_block(self, block: Block) -> _Plan:
        return _Plan(self, block)


#: Plans an op: its step, or EagerUnsupported.
Kernel = Callable[[EagerProgram, Op], Step]

_KERNELS: dict[str, Kernel] = {}


def _kernel(*names: str) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for n in names:
            _KERNELS[n] = fn
        return fn

    return register


def _single(op: Op, fn: Callable[..., np.ndarray]) -> Step:
    kind = _kind(op.result)
    shape = tuple(op.result.tensor_type.shape)
    operands, res = op.operands, op.result

    def step(env: Env) -> None:
        env[res] = _as(fn(*[env[o] for o in operands]), kind, shape)

    return step


# -- index ops -----------------------------------------------------------------------------------


@_kernel("stablehlo.constant")
def _constant(program: EagerProgram, op: Op) -> Step:
    kind = _kind(op.result)
    value = np.asarray(op.attr("value"))
    # 16-bit float constants become exact float32 values, as the kernels hold them.
    data = value.astype(_compute_dtype(kind))
    shape = tuple(op.result.tensor_type.shape)
    if data.size == 1 and math.prod(shape) != 1:
        data = np.broadcast_to(data.reshape(()), shape)
    else:
        data = data.reshape(shape)
        data.setflags(write=False)
    res = op.result

    def step(env: Env) -> None:
        env[res] = data

    return step


@_kernel("stablehlo.iota")
def _iota(program: EagerProgram, op: Op) -> Step:
    kind = _kind(op.result)
    shape = tuple(op.result.tensor_type.shape)
    d = int(op.attr("iota_dimension"))
    idx = np.arange(shape[d], dtype=np.int64)
    if kind.cls == "f":
        line = idx.astype(np.float32 if kind.bits != 64 else np.float64)
        if kind.narrow:
            line = NAMESPACE["round_bf16" if kind.narrow == "bf16" else "round_f16"](line)
    else:
        line = idx.astype(kind.storage)
    view = [1] * len(shape)
    view[d] = shape[d]
    data = np.broadcast_to(line.reshape(view), shape)
    res = op.result

    def step(env: Env) -> None:
        env[res] = data

    return step


@_kernel("stablehlo.get_dimension_size")
def _get_dimension_size(program: EagerProgram, op: Op) -> Step:
    kind = _kind(op.result)
    value = np.asarray(op.operands[0].tensor_type.shape[int(op.attr("dimension"))]).astype(kind.storage)
    res = op.result

    def step(env: Env) -> None:
        env[res] = value

    return step


def broadcast_layout(op: Op) -> tuple[list[int], np.ndarray | None]:
    """Where ``broadcast_in_dim`` puts its operand: the operand's shape placed in the result's
    rank (1 where it repeats), and the transposition that first puts the operand's dimensions in
    the result's order (None if they are in it)."""
    dims = [int(d) for d in op.attr("broadcast_dimensions")]
    view = [1] * len(op.result.tensor_type.shape)
    for k, d in enumerate(dims):
        view[d] = op.operands[0].tensor_type.shape[k]
    order = np.argsort(dims) if dims else np.array([], int)
    return view, (order if list(order) != sorted(order) else None)


@_kernel("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(program: EagerProgram, op: Op) -> Step:
    dims = tuple(op.attr("broadcast_dimensions"))
    out_shape = tuple(op.result.tensor_type.shape)
    view, order = broadcast_layout(op)
    dt = _compute_dtype(_kind(op.result))
    operand, res = op.operands[0], op.result
    # In a row block, the operand's rows are the block's if its first dimension is the
    # result's first (see _row_reads), else it is whole and repeated along them.
    rows_from_operand = bool(dims) and dims[0] == 0 and view[0] != 1

    def step(env: Env) -> None:
        x = env[operand]
        if order is not None:
            x = np.transpose(x, order)
        shape, v = env.shape(out_shape), view
        if env.rows is not None and rows_from_operand:
            v = [env.rows] + view[1:]
        env[res] = _as_dtype(x.reshape(v), dt, shape)

    return step


@_kernel("stablehlo.broadcast")
def _broadcast(program: EagerProgram, op: Op) -> Step:
    out_shape = tuple(op.result.tensor_type.shape)
    return _single(op, lambda x: np.broadcast_to(x, out_shape))


@_kernel("stablehlo.reshape")
def _reshape(program: EagerProgram, op: Op) -> Step:
    shape = tuple(op.result.tensor_type.shape)
    return _single(op, lambda x: np.reshape(x, shape))


@_kernel("stablehlo.transpose")
def _transpose(program: EagerProgram, op: Op) -> Step:
    perm = tuple(op.attr("permutation"))
    return _single(op, lambda x: np.transpose(x, perm))


@_kernel("stablehlo.reverse")
def _reverse(program: EagerProgram, op: Op) -> Step:
    dims = tuple(op.attr("dimensions"))
    return _single(op, lambda x: np.flip(x, dims) if dims else x)


@_kernel("stablehlo.slice")
def _slice(program: EagerProgram, op: Op) -> Step:
    start = tuple(op.attr("start_indices"))
    limit = tuple(op.attr("limit_indices"))
    strides = tuple(op.attr("strides") or (1,) * len(start))
    sl = tuple(slice(a, b, s) for a, b, s in zip(start, limit, strides))
    return _single(op, lambda x: x[sl])


@_kernel("stablehlo.pad")
def _pad(program: EagerProgram, op: Op) -> Step:
    lows = tuple(op.attr("edge_padding_low"))
    interiors = tuple(op.attr("interior_padding"))
    shape = tuple(op.operands[0].tensor_type.shape)
    out_shape = tuple(op.result.tensor_type.shape)
    srcs, valids = [], []
    for x, lo, it, n in zip(out_shape, lows, interiors, shape):
        q = np.arange(x) - lo
        step = it + 1
        if n == 0:
            valids.append(np.zeros(x, bool))
            srcs.append(np.zeros(x, np.int64))
            continue
        valid = (q >= 0) & (q <= (n - 1) * step)
        if step > 1:
            valid &= q % step == 0
        valids.append(valid)
        srcs.append(np.clip(q, 0, (n - 1) * step) // step)
    empty = any(n == 0 for n in shape)

    def fn(x: np.ndarray, pad: np.ndarray) -> np.ndarray:
        if empty:
            return np.broadcast_to(pad, out_shape)
        data = x[np.ix_(*srcs)] if srcs else x
        mask = functools.reduce(np.logical_and.outer, valids) if len(valids) > 1 else (valids[0] if valids else True)
        return np.where(mask, data, pad)

    return _single(op, fn)


def _clamp_starts(values: Sequence[np.ndarray], limits: Sequence[int]) -> list[int]:
    return [min(max(int(np.int64(np.asarray(v))), 0), hi) for v, hi in zip(values, limits)]


@_kernel("stablehlo.dynamic_slice")
def _dynamic_slice(program: EagerProgram, op: Op) -> Step:
    sizes = tuple(op.attr("slice_sizes"))
    shape = op.operands[0].tensor_type.shape
    limits = [n - s for n, s in zip(shape, sizes)]

    def fn(x: np.ndarray, *starts: np.ndarray) -> np.ndarray:
        st = _clamp_starts(starts, limits)
        return x[tuple(slice(a, a + s) for a, s in zip(st, sizes))]

    return _single(op, fn)


@_kernel("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(program: EagerProgram, op: Op) -> Step:
    operand, update = op.operands[:2]
    limits = [n - u for n, u in zip(operand.tensor_type.shape, update.tensor_type.shape)]
    ushape = update.tensor_type.shape
    # A scan's update of its own carried array writes the slice alone (the loop copied the
    # array once, before its first step); any other copies the operand first.
    in_place = id(op) in program.in_place

    def fn(x: np.ndarray, u: np.ndarray, *starts: np.ndarray) -> np.ndarray:
        st = _clamp_starts(starts, limits)
        out = x if in_place else np.array(x, copy=True)
        out[tuple(slice(a, a + s) for a, s in zip(st, ushape))] = u
        return out

    return _single(op, fn)


@_kernel("stablehlo.concatenate")
def _concatenate(program: EagerProgram, op: Op) -> Step:
    dim = int(op.attr("dimension"))
    return _single(op, lambda *xs: np.concatenate(xs, axis=dim))


@_kernel("stablehlo.gather")
def _gather(program: EagerProgram, op: Op) -> Step:
    operand, indices = op.operands
    dn = op.attr("dimension_numbers")
    sizes = tuple(op.attr("slice_sizes"))
    out_shape = tuple(op.result.tensor_type.shape)
    out_rank = len(out_shape)
    offset_dims = tuple(dn.offset_dims)
    batch_dims = [d for d in range(out_rank) if d not in offset_dims]
    ivd = dn.index_vector_dim
    ind_rank = len(indices.tensor_type.shape)
    op_shape = operand.tensor_type.shape
    op_rank = len(op_shape)
    grid = np.indices(out_shape, sparse=True) if out_shape else []
    batch_idx = [grid[d] for d in batch_dims]
    offset_operand_dims = [d for d in range(op_rank)
                           if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    offsets = {d: grid[od] for d, od in zip(offset_operand_dims, offset_dims)}

    def fn(x: np.ndarray, ind: np.ndarray) -> np.ndarray:
        full: list[Any] = [None] * op_rank
        for k, d in enumerate(dn.start_index_map):
            pos: list[np.ndarray | int] = list(batch_idx)
            if ivd < ind_rank:
                pos.insert(ivd, k)
            sv = ind[tuple(pos)] if pos else ind
            full[d] = np.minimum(np.maximum(np.asarray(sv).astype(np.int64), 0), op_shape[d] - sizes[d])
        for ob, sb in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            batch = sb if sb < ivd else sb - 1
            full[ob] = batch_idx[batch]
        src = []
        for d in range(op_rank):
            start, off = full[d], offsets.get(d)
            if start is None:
                src.append(off if off is not None else 0)
            elif off is None:
                src.append(start)
            else:
                src.append(start + off)
        return np.broadcast_to(x[tuple(src)], out_shape) if src else x

    return _single(op, fn)


@_kernel("stablehlo.optimization_barrier", "sdy.sharding_constraint")
def _optimization_barrier(program: EagerProgram, op: Op) -> Step:
    pairs = list(zip(op.operands, op.results))

    def step(env: Env) -> None:
        for a, r in pairs:
            env[r] = env[a]

    return step


# -- reductions -------------------------------------------------------------------------------------


def _exact_in_any_order(op: Op) -> bool:
    """A one-op reducer whose result does not depend on the order of its steps: integer and
    boolean ops (wrapping arithmetic is associative), and float max/min."""
    from .rules import simple_reducer

    simple = simple_reducer(op.regions[0], len(op.results))
    if simple is None:
        return False
    kind = element_kind(op.regions[0].args[0].tensor_type)
    return simple in ("max", "min") or kind.cls in "iub"


def _sequential(step: Combine, accs: list[np.ndarray], xs: list[np.ndarray]) -> list[np.ndarray]:
    """Fold the last axis of ``xs`` into ``accs`` one element at a time, in order."""
    n = xs[0].shape[-1]
    if n > MAX_STEPS:
        raise NeedsCompiled(f"a sequential reduction of {n} steps")
    for i in range(n):
        accs = step(accs, [x[..., i] for x in xs])
    return accs


def _row_kernel(x: np.ndarray, op: str, width: int) -> np.ndarray | None:
    """The machine kernel's reduction of the last axis of ``x`` (f32 or f64, its rows made of
    innermost rows of ``width`` elements): add and mul in :mod:`.lanes`' order, max and min in
    any; None where numpy must answer (see :func:`.machine_kernels.reduce_rows`)."""
    element = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}.get(x.dtype)
    name = f"lanes_{op}_{element}"
    if name not in machine_kernels.REDUCTIONS or x.ndim == 0 or x.size == 0:
        return None
    rows = x.reshape(-1, x.shape[-1])
    # Lanes in the order :mod:`.lanes` defines for add and mul; max and min take any.
    k = _lanes.lane_count(width, x.dtype.itemsize) if op in ("add", "mul") else machine_kernels.rows_lanes(name)
    folded = machine_kernels.reduce_rows(name, rows, width, k, _lanes.row_twin(op))
    return None if folded is None else folded.reshape(x.shape[:-1])


def _lane_reduce(x: np.ndarray, ndims: int, op: str, init: np.ndarray) -> np.ndarray:
    """:func:`.lanes.reduce_lanes` of C-contiguous ``x``, by a machine kernel where there is one."""
    kept = x.shape[:x.ndim - ndims]
    folded = _row_kernel(x.reshape(math.prod(kept), -1), op, x.shape[-1]) if x.size else None
    if folded is None:
        return _lanes.reduce_lanes(x, ndims, op, init)
    fn = np.add if op == "add" else np.multiply
    return fn(np.asarray(init, x.dtype), folded.reshape(kept))


def _tree(step: Combine, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Fold the last axis pairwise (only for exact, order-free steps)."""
    while xs[0].shape[-1] > 1:
        n = xs[0].shape[-1]
        half = n // 2
        lo = [x[..., :half] for x in xs]
        hi = [x[..., half:2 * half] for x in xs]
        folded = step(lo, hi)
        if n % 2:
            folded = [np.concatenate([f, x[..., 2 * half:]], axis=-1) for f, x in zip(folded, xs)]
        xs = folded
    return [x[..., 0] for x in xs]


@_kernel("stablehlo.reduce")
def _reduce(program: EagerProgram, op: Op) -> Step:
    n = len(op.results)
    inputs, inits = op.operands[:n], op.operands[n:]
    dims = sorted(int(d) for d in op.attr("dimensions"))
    rank = len(inputs[0].tensor_type.shape)
    kept = [d for d in range(rank) if d not in dims]
    perm = kept + dims
    kept_shape = tuple(inputs[0].tensor_type.shape[d] for d in kept)
    steps = math.prod(inputs[0].tensor_type.shape[d] for d in dims)
    plan = _lanes.lane_reduction(op)
    if plan is not None and not plan.ordered:
        plan = None  # max/min: exact in any order, so the eager tier keeps its own (faster) one
    step = _step_function(op)
    exact = _exact_in_any_order(op)
    kinds = [_kind(r) for r in op.results]
    sums = None
    from .rules import simple_reducer

    simple = simple_reducer(op.regions[0], n)
    if simple in ("add", "mul") and kinds[0].cls == "f" and not kinds[0].narrow and n == 1:
        sums = np.add if simple == "add" else np.multiply
    float_extreme = simple if simple in ("max", "min") and kinds[0].cls == "f" else None
    results = op.results

    static_kept = kept_shape

    def run(env: Env) -> None:
        kept_shape = env.shape(static_kept) if static_kept else static_kept
        xs = [np.transpose(env[v], perm).reshape(kept_shape + (steps,)) for v in inputs]
        init = [np.asarray(env[v]) for v in inits]
        if plan is not None:
            x = np.transpose(env[inputs[0]], perm) if dims else env[inputs[0]]
            out = [_lane_reduce(np.ascontiguousarray(x), len(dims), plan.op, init[0])]
        elif xs[0].shape[-1] == 0:
            out = [np.broadcast_to(i, kept_shape) for i in init]
        elif float_extreme is not None:
            extreme = _row_kernel(xs[0], float_extreme, xs[0].shape[-1])
            if extreme is None:
                extreme = _lanes.float_extreme(xs[0], float_extreme)
            out = step([np.broadcast_to(i, kept_shape) for i in init], [extreme])
        elif exact:
            folded = _tree(step, xs)
            out = step([np.broadcast_to(i, kept_shape) for i in init], folded)
        elif sums is not None:
            # Sequential from init: accumulate is sequential by definition.
            full = np.concatenate([np.broadcast_to(init[0], kept_shape)[..., None], xs[0]], axis=-1)
            out = [sums.accumulate(full, axis=-1)[..., -1]]
        else:
            out = _sequential(step, [np.broadcast_to(i, kept_shape) for i in init], xs)
        for r, k, o in zip(results, kinds, out):
            env[r] = _round_narrow(_as(o, k, kept_shape), k)

    return run


# -- dot_general ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _blas() -> ctypes.CDLL | None:
    """scipy's BLAS, the one numba's ``np.dot`` calls (through scipy.linalg.cython_blas), found
    without importing scipy.linalg (a quarter of a second)."""
    import importlib.util

    spec = importlib.util.find_spec("scipy")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]).parent
    for libs in (root / "scipy.libs", root / "scipy" / ".libs"):
        if libs.is_dir():
            for path in sorted(libs.iterdir()):
                if "openblas" in path.name and path.suffix == ".so" or ".so." in path.name and "openblas" in path.name:
                    try:
                        return ctypes.CDLL(str(path))
                    except OSError:
                        continue
    return None


def _blas_function(name: str, restype: type | None = None) -> Any:
    """BLAS's ``name`` as a ctypes foreign function returning ``restype``, or None. (Any: the
    callers pass ctypes pointers and by-reference scalars, which ctypes checks only at the call.)"""
    lib = _blas()
    if lib is None:
        return None
    for symbol in (f"scipy_{name}_", f"{name}_"):
        fn = getattr(lib, symbol, None)
        if fn is not None:
            fn.restype = restype
            return fn
    return None


@functools.lru_cache(maxsize=1)
def _blas_threads() -> Any:
    """OpenBLAS's ``openblas_set_num_threads_local`` (the process's count in scipy's build;
    returns the previous one), the function the compiled code's ``blas_threads`` calls, or None
    for another BLAS."""
    lib = _blas()
    fn = getattr(lib, "openblas_set_num_threads_local", None) if lib is not None else None
    if fn is not None:
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int]
    return fn


_DOT_HELPER = HelperThread("pjrt-hub-eager-dot")


class _Blas:
    """The three BLAS calls numba's ``np.dot(x, y, out)`` makes for 2-D arrays (numba's
    ``dot_3_mm``): ``dot`` for a (1, k) by (k, 1) product, ``gemv`` when either side is a
    single row or column, ``gemm`` otherwise; with the very arguments numba passes."""

    def __init__(self, dtype: np.dtype) -> None:
        p = "s" if dtype == np.float32 else "d"
        self.ctype = ctypes.c_float if dtype == np.float32 else ctypes.c_double
        self.gemm = _blas_function(f"{p}gemm")
        self.gemv = _blas_function(f"{p}gemv")
        self.dot = _blas_function(f"{p}dot", self.ctype)
        self.ok = None not in (self.gemm, self.gemv, self.dot)

    def __call__(self, x: np.ndarray, x_trans: bool, y: np.ndarray, y_trans: bool, out: np.ndarray) -> None:
        """x is (m, k), C-contiguous or (``x_trans``) the transposed view of a C-contiguous
        array (numba's layout 'F'); likewise y (k, n); out (m, n) is C-contiguous."""
        m, k = x.shape
        n = y.shape[1]
        ci, ct = ctypes.c_int, self.ctype
        ref = ctypes.byref
        one, zero, inc = ct(1.0), ct(0.0), ci(1)
        xp, yp, op = (ctypes.c_void_p(a.ctypes.data) for a in (x, y, out))
        if n == 1:
            if m == 1:
                out[0, 0] = self.dot(ref(ci(k)), xp, ref(inc), yp, ref(inc))
                return
            # numba: M * V, transposed when x has the output's (C) layout.
            trans = b"n" if x_trans else b"t"
            mm, nn, lda = (m, k, m) if x_trans else (k, m, k)
            self.gemv(ctypes.c_char_p(trans), ref(ci(mm)), ref(ci(nn)), ref(one), xp, ref(ci(lda)), yp, ref(inc),
                      ref(zero), op, ref(inc))
            return
        if m == 1:
            # numba: V * M, transposed when y does not have the output's layout.
            trans = b"t" if y_trans else b"n"
            mm, nn, lda = (k, n, k) if y_trans else (n, k, n)
            self.gemv(ctypes.c_char_p(trans), ref(ci(mm)), ref(ci(nn)), ref(one), yp, ref(ci(lda)), xp, ref(inc),
                      ref(zero), op, ref(inc))
            return
        # numba's call_xxgemm: A = y, B = x (out^T = y^T x^T in column-major terms).
        transa, lda = (b"t", y.shape[0]) if y_trans else (b"n", y.shape[1])
        transb, ldb = (b"t", x.shape[0]) if x_trans else (b"n", x.shape[1])
        self.gemm(ctypes.c_char_p(transa), ctypes.c_char_p(transb), ref(ci(n)), ref(ci(m)), ref(ci(k)), ref(one),
                  yp, ref(ci(lda)), xp, ref(ci(ldb)), ref(zero), op, ref(ci(n)))


@functools.lru_cache(maxsize=None)
def _blas_for(dtype: np.dtype) -> _Blas:
    return _Blas(dtype)


def _arrange(x: np.ndarray, batch: tuple[int, ...], first: tuple[int, ...], second: tuple[int, ...],
             shape3: tuple[int, int, int]) -> tuple[np.ndarray, bool]:
    """As the lowering's ``_arrange``: (B, first, second) as a view when the dims are in that
    order, (B, second, first) flagged as transposed, else a permuted copy."""
    rank = x.ndim
    b3, f3, s3 = shape3
    x = np.ascontiguousarray(x)
    if tuple(batch + first + second) == tuple(range(rank)):
        return x.reshape((b3, f3, s3)), False
    if tuple(batch + second + first) == tuple(range(rank)):
        return x.reshape((b3, s3, f3)), True
    order = tuple(batch + first + second)
    return np.ascontiguousarray(np.transpose(x, order)).reshape((b3, f3, s3)), False


@_kernel("stablehlo.dot_general", "stablehlo.dot")
def _dot_general(program: EagerProgram, op: Op) -> Step:
    from .rules import convert_text

    lhs, rhs = op.operands
    lrank, rrank = len(lhs.tensor_type.shape), len(rhs.tensor_type.shape)
    lb: tuple[int, ...]  # batching and contracting dimensions of each side
    rb: tuple[int, ...]
    lc: tuple[int, ...]
    rc: tuple[int, ...]
    if op.name == "stablehlo.dot":
        lb, rb, lc, rc = (), (), (lrank - 1,), (0,)
    else:
        dn = op.attr("dot_dimension_numbers")
        lb, rb = tuple(dn.lhs_batching_dimensions), tuple(dn.rhs_batching_dimensions)
        lc, rc = tuple(dn.lhs_contracting_dimensions), tuple(dn.rhs_contracting_dimensions)
    lf = tuple(d for d in range(lrank) if d not in lb + lc)
    rf = tuple(d for d in range(rrank) if d not in rb + rc)
    res = op.result
    rk, lk, rkk = _kind(res), _kind(lhs), _kind(rhs)
    ls, rs = lhs.tensor_type.shape, rhs.tensor_type.shape
    B = math.prod(ls[d] for d in lb)
    M = math.prod(ls[d] for d in lf)
    K = math.prod(ls[d] for d in lc)
    N = math.prod(rs[d] for d in rf)
    out_shape = tuple(res.tensor_type.shape)
    blas = rk.cls == "f" and not rk.narrow and lk == rk and rkk == rk and lrank and rrank
    if blas:
        dtype = np.dtype(np.float32 if rk.bits == 32 else np.float64)
        blas_call = _blas_for(dtype)
        if not blas_call.ok:
            raise EagerUnsupported("scipy's BLAS was not found")

        def run_blas(env: Env) -> None:
            out = np.empty(out_shape, dtype)
            if M * N and K:
                l3, lt = _arrange(env[lhs], lb, lf, lc, (B, M, K))
                r3, rt = _arrange(env[rhs], rb, rc, rf, (B, K, N))
                o3 = out.reshape((B, M, N))
                # In blocks only where the left side is not transposed (dot_row_blocks): BLAS
                # would get a row range of a transposed view with the range's leading dimension.
                blocks = _kernels_module.dot_row_blocks(M, N, K, B, program.threads, lt)
                starts = [_kernels_module.dot_block_start(c, M, blocks) for c in range(blocks + 1)]

                def rows(first: int, last: int) -> None:
                    for b in range(B):
                        x, y = l3[b].T if lt else l3[b], r3[b].T if rt else r3[b]
                        for c in range(first, last):
                            lo, hi = starts[c], starts[c + 1]
                            blas_call(x[lo:hi], lt, y, rt, o3[b][lo:hi])

                # OpenBLAS's threads as in the compiled code: one for a block or a small
                # product, else the program's; they change the bits (.kernels.dot_row_blocks).
                # The blocks run on two threads here, as the compiled code's on its threads.
                set_threads = _blas_threads()
                if set_threads is None:
                    rows(0, blocks)
                else:
                    small = B * M * N * K < _kernels_module.SMALL_DOT_MACS
                    before = set_threads(1 if blocks > 1 or small else program.threads)
                    try:
                        if blocks > 1:
                            _DOT_HELPER.split(rows, blocks, blocks // 2)
                        else:
                            rows(0, 1)
                    finally:
                        set_threads(before)
            elif M * N:
                out.fill(0)
            env[res] = out

        return run_blas
    # Loops in the compiled code: acc = acc + a * c in the contraction dims' row-major order.
    t = _Text()
    a = convert_text(Expr("a"), lk, rk)
    c = convert_text(Expr("c"), rkk, rk)
    a = a.text if isinstance(a, Expr) else a
    c = c.text if isinstance(c, Expr) else c
    if rk.cls == "f":
        text = f"acc + {a} * {c}"
    elif rk.cls == "b":
        text = f"acc | ({a} & {c})"
    else:
        text = f"iadd(acc, imul({a}, {c}))"
    fn = t.function(["acc", "a", "c"], [Expr(text)])
    zero = t.function([], [t.const(0, rk)])()[0]
    finish = t.function(["acc"], [Expr(rk.rounded("acc"))])
    dt = _compute_dtype(rk)

    def run(env: Env) -> None:
        if K > MAX_STEPS:
            raise NeedsCompiled(f"a dot of {K} sequential steps")
        lx = np.transpose(env[lhs], lb + lf + lc).reshape((B, M, K))
        rx = np.transpose(env[rhs], rb + rf + rc).reshape((B, N, K))
        acc = np.full((B, M, N), zero, dt)
        for k in range(K):
            acc = np.asarray(fn(acc, lx[:, :, None, k], rx[:, None, :, k])[0]).astype(dt, copy=False)
        # (B, M, N) to the result's shape first: ``_as`` broadcasts, it does not reshape.
        env[res] = _as(np.asarray(finish(acc)[0]).reshape(out_shape), rk, out_shape)

    return run


# -- control flow ------------------------------------------------------------------------------------


def _check_cancel(env: Env) -> None:
    flag = env.cancel
    if flag is not None and flag[0]:
        raise Cancelled("numba_cpu: the run was stopped in a while loop")


@_kernel("stablehlo.while")
def _while(program: EagerProgram, op: Op) -> Step:
    from pjrt_hub.backends.stablehlo.loops import updated_in_place

    updates = updated_in_place(op)
    program.in_place.update(id(update) for update in updates.values())
    cond, body = program.plan_block(op.regions[0]), program.plan_block(op.regions[1])
    results = op.results
    operands = op.operands
    own = sorted(updates)

    def run(env: Env) -> None:
        values = [env[v] for v in operands]
        for k in own:  # the arrays the body updates in place start as copies of their own
            values[k] = np.array(values[k], order="C", copy=True)
        while True:
            _check_cancel(env)
            (c,) = cond.run(env, values)
            if not bool(np.asarray(c)):
                break
            values = body.run(env, values)
        for r, v in zip(results, values):
            env[r] = v

    return run


@_kernel("stablehlo.case")
def _case(program: EagerProgram, op: Op) -> Step:
    branches = [program.plan_block(r) for r in op.regions]
    results = op.results
    index = op.operands[0]

    def run(env: Env) -> None:
        i = int(np.asarray(env[index]))
        chosen = branches[i] if 0 <= i < len(branches) - 1 else branches[-1]
        for r, v in zip(results, chosen.run(env, [])):
            env[r] = v

    return run


@_kernel("stablehlo.if")
def _if(program: EagerProgram, op: Op) -> Step:
    then, other = program.plan_block(op.regions[0]), program.plan_block(op.regions[1])
    results = op.results
    pred = op.operands[0]

    def run(env: Env) -> None:
        chosen = then if bool(np.asarray(env[pred])) else other
        for r, v in zip(results, chosen.run(env, [])):
            env[r] = v

    return run


# -- sorting ----------------------------------------------------------------------------------------


def _merge_sort_order(less: np.ndarray) -> np.ndarray:
    """The permutation the compiled bottom-up merge sort produces, per row, given the
    comparator's results on every pair (``less[r, i, j]``: element i before element j)."""
    rows, n, _ = less.shape
    pa = np.broadcast_to(np.arange(n), (rows, n)).copy()
    pb = np.empty_like(pa)
    r = np.arange(rows)
    w = 1
    while w < n:
        lo = 0
        while lo < n:
            mid, hi = min(lo + w, n), min(lo + 2 * w, n)
            a = np.full(rows, lo)
            b = np.full(rows, mid)
            for k in range(lo, hi):
                ta = a < mid
                both = ta & (b < hi)
                ia = pa[r, np.minimum(a, n - 1)]
                ib = pa[r, np.minimum(b, n - 1)]
                ta = np.where(both, ~less[r, ib, ia], ta)
                pb[:, k] = np.where(ta, ia, ib)
                a = a + ta
                b = b + ~ta
            lo += 2 * w
        pa, pb = pb, pa
        w *= 2
    return pa


def _sort_order(less: np.ndarray) -> np.ndarray:
    """The merge sort's permutation: when ``less`` is a strict weak order (the relation of
    comparing some key), any stable sort gives it, so a stable argsort of each element's rank
    (how many elements precede it) does; otherwise the merge sort itself is replayed."""
    rank = less.sum(axis=1)  # rank[r, j] = #i with less[i, j]
    induced = rank[:, :, None] < rank[:, None, :]
    if np.array_equal(induced, less):
        return np.argsort(rank, axis=1, kind="stable")
    n = less.shape[1]
    if n * max(1, n.bit_length()) > MAX_STEPS // 4:
        raise NeedsCompiled("a long sort whose comparator is not a strict weak order")
    return _merge_sort_order(less)


@_kernel("stablehlo.sort")
def _sort(program: EagerProgram, op: Op) -> Step:
    dim = int(op.attr("dimension"))
    rank = len(op.operands[0].tensor_type.shape)
    if dim < 0:
        dim += rank
    comparator = _region_function(op.regions[0])
    operands, results = op.operands, op.results
    kinds = [_kind(r) for r in results]
    n = op.operands[0].tensor_type.shape[dim]

    def run(env: Env) -> None:
        xs = [np.moveaxis(env[v], dim, -1) for v in operands]
        lead = xs[0].shape[:-1]
        rows = math.prod(lead)
        if rows * n * n > PAIRWISE_LIMIT:
            raise NeedsCompiled(f"a sort of {rows} rows of {n}")
        flat = [x.reshape(rows, n) for x in xs]
        args = []
        for x in flat:
            # less[r, i, j] = comparator(x_i, x_j): element i goes before element j.
            args += [x[:, :, None], x[:, None, :]]
        (less,) = comparator(*args)
        less = np.broadcast_to(np.asarray(less, bool), (rows, n, n))
        order = _sort_order(less) if n else np.zeros((rows, 0), np.int64)
        for r, x, k in zip(results, flat, kinds):
            sorted_ = np.take_along_axis(x, order, axis=1).reshape(lead + (n,))
            env[r] = _as(np.moveaxis(sorted_, -1, dim), k, r.tensor_type.shape)

    return run


@_kernel("chlo.top_k")
def _top_k(program: EagerProgram, op: Op) -> Step:
    (x,) = op.operands
    k = int(op.attr("k"))
    kind = _kind(x)
    values, indices = op.results
    vkind, ikind = _kind(values), _kind(indices)

    def run(env: Env) -> None:
        a = np.asarray(env[x])
        if kind.cls == "f":
            word = a.dtype.itemsize == 4
            signed: type[np.signedinteger[Any]] = np.int32 if word else np.int64
            unsigned: type[np.unsignedinteger[Any]] = np.uint32 if word else np.uint64
            bits = a.view(signed)
            mask = ((bits >> (a.dtype.itemsize * 8 - 1)).view(unsigned) >> 1).view(bits.dtype)
            key = bits ^ mask
        else:
            key = a
        # Descending and stable: ~key reverses any integer order without overflow.
        order = np.argsort(~key, axis=-1, kind="stable")[..., :k]
        env[values] = _as(np.take_along_axis(a, order, axis=-1), vkind, values.tensor_type.shape)
        env[indices] = _as(order, ikind, indices.tensor_type.shape)

    return run


# -- scatter and windows -----------------------------------------------------------------------------


def _scatter_sequential(step: Combine, outs: list[np.ndarray], dest: np.ndarray, updates: list[np.ndarray]) -> None:
    """outs[dest[i]] = step(outs[dest[i]], updates[i]) for i in order (flat destinations;
    repeated destinations are combined in order)."""
    if dest.size == 0:
        return
    order = np.argsort(dest, kind="stable")
    sd = dest[order]
    starts = np.r_[0, np.flatnonzero(sd[1:] != sd[:-1]) + 1]
    counts = np.diff(np.r_[starts, sd.size])
    rank_in_group = np.arange(sd.size) - np.repeat(starts, counts)
    levels = int(counts.max())
    if levels > MAX_STEPS:
        raise NeedsCompiled(f"{levels} updates of one element")
    flats = [o.reshape(-1) for o in outs]
    ups = [u.reshape(-1) for u in updates]
    for level in range(levels):
        sel = order[rank_in_group == level]
        d = dest[sel]
        new = step([f[d] for f in flats], [u[sel] for u in ups])
        for f, v in zip(flats, new):
            f[d] = v


@_kernel("stablehlo.scatter")
def _scatter(program: EagerProgram, op: Op) -> Step:
    _no_narrow_accumulators(op)
    n = len(op.results)
    inputs = op.operands[:n]
    indices = op.operands[n]
    updates = op.operands[n + 1:]
    dn = op.attr("scatter_dimension_numbers")
    step = _step_function(op)
    ushape = tuple(updates[0].tensor_type.shape)
    shape = tuple(inputs[0].tensor_type.shape)
    rank = len(shape)
    uwd = tuple(dn.update_window_dims)
    scatter_dims = [d for d in range(len(ushape)) if d not in uwd]
    ivd = dn.index_vector_dim
    ind_rank = len(indices.tensor_type.shape)
    kinds = [_kind(r) for r in op.results]
    grid = [g.reshape(-1) for g in np.indices(ushape)] if ushape else []
    usi = [grid[d] for d in scatter_dims]
    window_dims = [d for d in range(rank) if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
    results = op.results

    def run(env: Env) -> None:
        # C order, as _scatter_sequential writes through flat views of them.
        outs = [np.array(env[v], dtype=_compute_dtype(k), order="C", copy=True) for v, k in zip(inputs, kinds)]
        ind = np.asarray(env[indices])
        count = math.prod(ushape)
        parts = [np.zeros(count, np.int64) for _ in range(rank)]
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            pos = list(usi)
            if ivd < ind_rank:
                pos.insert(ivd, np.full(count, k))
            sv = ind[tuple(pos)] if pos else np.broadcast_to(ind, (count,))
            parts[d] = parts[d] + np.asarray(sv).astype(np.int64)
        for ib, sb in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
            pos = sb if sb < ivd else sb - 1
            parts[ib] = parts[ib] + usi[pos]
        for d, ud in zip(window_dims, uwd):
            parts[d] = parts[d] + grid[ud]
        valid = np.ones(count, bool)
        for d in range(rank):
            valid &= (parts[d] >= 0) & (parts[d] < shape[d])
        flat = np.ravel_multi_index(tuple(np.where(valid, p, 0) for p in parts), shape) if rank else np.zeros(count, np.int64)
        ups = [np.asarray(env[u]).reshape(-1)[valid] for u in updates]
        _scatter_sequential(step, outs, flat[valid], ups)
        for r, o, kind in zip(results, outs, kinds):
            env[r] = _as(o, kind, shape)

    return run


def _window_padding(op: Op, rank: int) -> list[tuple[int, int]]:
    pad = op.attr("padding")
    if pad is None:
        return [(0, 0)] * rank
    arr = np.asarray(pad).reshape(-1, 2)
    return [(int(a), int(b)) for a, b in arr]


@_kernel("stablehlo.reduce_window")
def _reduce_window(program: EagerProgram, op: Op) -> Step:
    _no_narrow_accumulators(op)
    n = len(op.results)
    inputs, inits = op.operands[:n], op.operands[n:]
    rank = len(inputs[0].tensor_type.shape)
    wdims = tuple(op.attr("window_dimensions"))
    strides = tuple(op.attr("window_strides") or (1,) * rank)
    bdil = tuple(op.attr("base_dilations") or (1,) * rank)
    wdil = tuple(op.attr("window_dilations") or (1,) * rank)
    pads = _window_padding(op, rank)
    in_shape = inputs[0].tensor_type.shape
    out_shape = tuple(op.results[0].tensor_type.shape)
    step = _step_function(op)
    kinds = [_kind(r) for r in op.results]
    positions = list(np.ndindex(*wdims)) if wdims else [()]
    grid = np.indices(out_shape, sparse=True) if out_shape else []
    results = op.results

    def run(env: Env) -> None:
        if len(positions) > MAX_STEPS:
            raise NeedsCompiled(f"a window of {len(positions)} elements")
        xs = [env[v] for v in inputs]
        init = [np.asarray(env[v]) for v in inits]
        accs = [np.broadcast_to(i, out_shape) for i in init]
        for w in positions:
            src, valid = [], np.ones(out_shape, bool)
            for d in range(rank):
                p = grid[d] * strides[d] + w[d] * wdil[d] - pads[d][0]
                extent = (in_shape[d] - 1) * bdil[d]
                ok = (p >= 0) & (p <= extent)
                if bdil[d] > 1:
                    ok &= p % bdil[d] == 0
                    q = np.clip(p, 0, extent) // bdil[d]
                else:
                    q = np.clip(p, 0, max(in_shape[d] - 1, 0))
                valid = valid & ok
                src.append(q)
            # An empty input is all padding, and has no element to index.
            vals = [np.where(valid, x[tuple(src)] if src else x, i) if x.size else np.broadcast_to(i, out_shape)
                    for x, i in zip(xs, init)]
            accs = step(accs, vals)
        for r, a, k in zip(results, accs, kinds):
            env[r] = _as(a, k, out_shape)

    return run


@_kernel("stablehlo.convolution")
def _convolution(program: EagerProgram, op: Op) -> Step:
    from .rules import convert_text

    lhs, rhs = op.operands
    dn = op.attr("dimension_numbers")
    nsp = len(dn.input_spatial_dimensions)
    strides = tuple(op.attr("window_strides") or (1,) * nsp)
    pads = _window_padding(op, nsp)
    ldil = tuple(op.attr("lhs_dilation") or (1,) * nsp)
    rdil = tuple(op.attr("rhs_dilation") or (1,) * nsp)
    rev = tuple(op.attr("window_reversal") or (False,) * nsp)
    fgc = int(op.attr("feature_group_count") or 1)
    bgc = int(op.attr("batch_group_count") or 1)
    rk, lk, kk = _kind(op.result), _kind(lhs), _kind(rhs)
    ls, ks = lhs.tensor_type.shape, rhs.tensor_type.shape
    out_shape = tuple(op.result.tensor_type.shape)
    out_f = out_shape[dn.output_feature_dimension]
    kin = ks[dn.kernel_input_feature_dimension]
    in_batch = ls[dn.input_batch_dimension]
    ksp = [ks[d] for d in dn.kernel_spatial_dimensions]
    t = _Text()
    a = convert_text(Expr("a"), lk, rk)
    b = convert_text(Expr("b"), kk, rk)
    a = a.text if isinstance(a, Expr) else a
    b = b.text if isinstance(b, Expr) else b
    text = f"acc + {a} * {b}" if rk.cls == "f" else f"iadd(acc, imul({a}, {b}))"
    fn = t.function(["acc", "a", "b"], [Expr(text)])
    zero = t.function([], [t.const(0, rk)])()[0]
    finish = t.function(["acc"], [Expr(rk.rounded("acc"))])
    dt = _compute_dtype(rk)
    grid = np.indices(out_shape, sparse=True) if out_shape else []
    positions = list(np.ndindex(*ksp, kin))
    res = op.result

    def run(env: Env) -> None:
        if len(positions) > MAX_STEPS:
            raise NeedsCompiled(f"a convolution window of {len(positions)} elements")
        x, w = env[lhs], env[rhs]
        ob = grid[dn.output_batch_dimension]
        of = grid[dn.output_feature_dimension]
        fbase = (of // (out_f // fgc)) * kin if fgc > 1 else 0
        bsrc = (of // (out_f // bgc)) * (in_batch // bgc) + ob if bgc > 1 else ob
        acc = np.full(out_shape, zero, dt)
        for pos in positions:
            wsp, ci = pos[:nsp], pos[nsp]
            lidx: list[Any] = [None] * len(ls)
            kidx: list[Any] = [None] * len(ks)
            valid = np.ones(out_shape, bool)
            for s in range(nsp):
                osd = grid[dn.output_spatial_dimensions[s]]
                p = osd * strides[s] + wsp[s] * rdil[s] - pads[s][0]
                n_in = ls[dn.input_spatial_dimensions[s]]
                extent = (n_in - 1) * ldil[s]
                ok = (p >= 0) & (p <= extent)
                if ldil[s] > 1:
                    ok &= p % ldil[s] == 0
                    q = np.clip(p, 0, extent) // ldil[s]
                else:
                    q = np.clip(p, 0, max(n_in - 1, 0))
                valid = valid & ok
                lidx[dn.input_spatial_dimensions[s]] = q
                kidx[dn.kernel_spatial_dimensions[s]] = (ksp[s] - 1 - wsp[s]) if rev[s] else wsp[s]
            lidx[dn.input_batch_dimension] = bsrc
            lidx[dn.input_feature_dimension] = fbase + ci
            kidx[dn.kernel_input_feature_dimension] = ci
            kidx[dn.kernel_output_feature_dimension] = of
            # Padding and dilation holes are zeros of the input, multiplied like any other
            # element (the spec pads the input; 0 * inf is NaN, as on XLA:CPU). An empty input
            # is all padding, and has no element to index.
            av = np.where(valid, x[tuple(lidx)], np.zeros((), x.dtype)) if x.size else np.zeros(out_shape, x.dtype)
            bv = w[tuple(np.broadcast_to(i, out_shape) if isinstance(i, np.ndarray) else i for i in kidx)]
            acc = np.asarray(fn(acc, av, bv)[0]).astype(dt, copy=False)
        env[res] = _as(finish(acc)[0], rk, out_shape)

    return run


@_kernel("stablehlo.select_and_scatter")
def _select_and_scatter(program: EagerProgram, op: Op) -> Step:
    _no_narrow_accumulators(op)
    operand, source, init = op.operands
    rank = len(operand.tensor_type.shape)
    wdims = tuple(op.attr("window_dimensions") or (1,) * rank)
    strides = tuple(op.attr("window_strides") or (1,) * rank)
    pads = _window_padding(op, rank)
    shape = tuple(operand.tensor_type.shape)
    select = _region_function(op.regions[0])
    t = _Text()
    scatter = t.lower_scalar_region(op.regions[1], [Expr("cur"), Expr("src")])
    scatter_fn = t.function(["cur", "src"], scatter)
    kind = _kind(op.result)
    dt = _compute_dtype(kind)
    sshape = tuple(source.tensor_type.shape)
    grid = [g.reshape(-1) for g in np.indices(sshape)] if sshape else []
    positions = list(np.ndindex(*wdims)) if wdims else [()]
    res = op.result

    def run(env: Env) -> None:
        x, src, iv = env[operand], np.asarray(env[source]).reshape(-1), np.asarray(env[init])
        count = math.prod(sshape)
        best = np.broadcast_to(iv, (count,)).astype(dt)
        have = np.zeros(count, bool)
        pos = [np.zeros(count, np.int64) for _ in range(rank)]
        for w in positions:
            cand_pos = [grid[d] * strides[d] + w[d] - pads[d][0] for d in range(rank)]
            inside = np.ones(count, bool)
            for d in range(rank):
                inside &= (cand_pos[d] >= 0) & (cand_pos[d] < shape[d])
            cand = x[tuple(np.clip(p, 0, max(n - 1, 0)) for p, n in zip(cand_pos, shape))] if rank else x
            (keep,) = select(best, cand)
            take = inside & (~have | ~np.asarray(keep, bool))
            best = np.where(take, cand, best)
            have = have | take
            pos = [np.where(take, c, p) for c, p in zip(cand_pos, pos)]
        out = np.broadcast_to(iv, shape).astype(dt).copy()
        flat = np.ravel_multi_index(tuple(pos), shape) if rank else np.zeros(count, np.int64)

        def step(curs: list[np.ndarray], srcs: list[np.ndarray]) -> list[np.ndarray]:
            return [np.asarray(scatter_fn(curs[0], srcs[0])[0]).astype(dt, copy=False)]

        _scatter_sequential(step, [out], flat[have], [src[have]])
        env[res] = _as(out, kind, shape)

    return run


# -- rng_bit_generator ------------------------------------------------------------------------------


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _threefry(state: np.ndarray, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    key = state[0]
    k0 = np.uint32(key & np.uint64(0xFFFFFFFF))
    k1 = np.uint32(key >> np.uint64(32))
    k2 = np.uint32(0x1BD11BDA) ^ k0 ^ k1
    ks = (k0, k1, k2)
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    ctr = state[1] + np.arange(n_blocks, dtype=np.uint64)
    x0 = (ctr & np.uint64(0xFFFFFFFF)).astype(np.uint32) + ks[0]
    x1 = (ctr >> np.uint64(32)).astype(np.uint32) + ks[1]
    for block in range(5):
        rs = rot[block % 2]
        for j in range(4):
            x0 = x0 + x1
            x1 = _rotl32(x1, rs[j]) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + np.uint32(block + 1)
    words = np.empty(2 * n_blocks, np.uint32)
    words[0::2], words[1::2] = x0, x1
    new = state.copy()
    new[1] = state[1] + np.uint64(n_blocks)
    return new, words


def _philox(state: np.ndarray, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    key = state[0]
    hi_start = state[2] if state.size > 2 else np.uint64(0)
    mask = np.uint64(0xFFFFFFFF)
    low = state[1] + np.arange(n_blocks, dtype=np.uint64)
    high = hi_start + (low < state[1]).astype(np.uint64)
    c0 = (low & mask).astype(np.uint32)
    c1 = (low >> np.uint64(32)).astype(np.uint32)
    c2 = (high & mask).astype(np.uint32)
    c3 = (high >> np.uint64(32)).astype(np.uint32)
    k0 = np.uint32(key & mask)
    k1 = np.uint32(key >> np.uint64(32))
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(10):
        p0 = m0 * c0.astype(np.uint64)
        p1 = m1 * c2.astype(np.uint64)
        hi0 = (p0 >> np.uint64(32)).astype(np.uint32)
        lo0 = (p0 & mask).astype(np.uint32)
        hi1 = (p1 >> np.uint64(32)).astype(np.uint32)
        lo1 = (p1 & mask).astype(np.uint32)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = np.uint32(k0 + np.uint32(0x9E3779B9))
        k1 = np.uint32(k1 + np.uint32(0xBB67AE85))
    words = np.empty(4 * n_blocks, np.uint32)
    words[0::4], words[1::4], words[2::4], words[3::4] = c0, c1, c2, c3
    new = state.copy()
    end = state[1] + np.uint64(n_blocks)
    new[1] = end
    if state.size > 2:
        new[2] = state[2] + (np.uint64(1) if end < state[1] else np.uint64(0))
    return new, words


@_kernel("stablehlo.triangular_solve", "stablehlo.cholesky")
def _linalg(program: EagerProgram, op: Op) -> Step:
    from .kernels import linalg_flags, linalg_variant
    from .linalg import cholesky, triangular_solve

    kind = _kind(op.result)
    batch, m = linalg_variant(op, kind)
    shapes = [(batch, *v.tensor_type.shape[-2:]) for v in op.operands]
    out_shape = tuple(op.result.tensor_type.shape)
    operands, result = op.operands, op.result
    compute = cholesky if op.name == "stablehlo.cholesky" else triangular_solve
    flags = linalg_flags(op)

    def step(env: Env) -> None:
        arrays = [np.ascontiguousarray(env[v], kind.storage).reshape(s) for v, s in zip(operands, shapes)]
        env[result] = compute(*arrays, *flags).reshape(out_shape)

    return step


@_kernel("stablehlo.rng_bit_generator")
def _rng_bit_generator(program: EagerProgram, op: Op) -> Step:
    from pjrt_hub.backends.stablehlo import RngAlgorithm

    (state,) = op.operands
    new_state, values = op.results
    skind, vkind = _kind(state), _kind(values)
    if skind.storage != np.uint64 or vkind.narrow:
        raise EagerUnsupported(f"rng_bit_generator of {skind.element} state / {vkind.element} values")
    algorithm = str(op.attr("rng_algorithm") or "DEFAULT")
    count = math.prod(values.tensor_type.shape)
    itemsize = vkind.storage.itemsize
    words = -(-count * itemsize // 4)
    threefry = algorithm == str(RngAlgorithm.THREE_FRY)
    vshape = tuple(values.tensor_type.shape)

    def run(env: Env) -> None:
        s = np.asarray(env[state], np.uint64)
        if threefry:
            st, w = _threefry(s, -(-words // 2))
        else:
            st, w = _philox(s, -(-words // 4))
        env[new_state] = st
        env[values] = w.view(np.uint8)[:count * itemsize].copy().view(vkind.storage).reshape(vshape)

    return run


def supported(name: str) -> bool:
    """Whether the eager tier has a step for an op name (elementwise ops go through their rule)."""
    from .codegen import RULES

    rule = RULES.get(name)
    return name in _KERNELS or (rule is not None and rule.elementwise is not None)

