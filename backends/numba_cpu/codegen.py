"""Lowering: StableHLO IR -> the Python source of one numba function.

How a function is lowered
-------------------------

Every value gets a *binding*: a materialized array, a scalar variable, a constant, or
:class:`Lazy` — "computed where it is read". Elementwise and indexing ops (``add``, ``exp``,
``broadcast_in_dim``, ``slice``, ``gather``...) are lazy: reading one at an index reads its
operands at the mapped indices and combines them, so a chain of them becomes one expression per
element inside whichever loop reads it, with no temporary array between the ops. Memoising reads
by (value, index) turns a DAG into straight-line code without recomputation.

A value is materialized (gets its own loop nest writing an array) when something needs an array
(``dot_general``, ``sort``, the function's results, a region reading it) or when recomputing it
for several consumers would repeat expensive work. Those loop nests are *kernels*; consecutive
kernels that share leading dimensions are fused into one *group* with a single outer loop
(over rows), each member adding its own inner loops: softmax becomes, per row, a max loop, an
exp-and-sum loop and a divide loop, with the exponentials kept in a row-sized buffer. Reductions
take part as members whose reduced dimensions are inner loops with a scalar accumulator. A
member's array is that of an operand nothing reads afterwards where it can be (the product under
a bias and an activation, :meth:`Lowering._donor`), else a fresh one.

Large groups run their outer loop with ``prange`` in chunks. Control flow (``while``, ``case``)
becomes Python control flow in the same function, so loops never return to Python.

The op rules live in :mod:`.rules`; this module is the machinery they use.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Literal, Protocol, Sequence

import numpy as np

from pjrt_hub.abi import CompileError, UnsupportedOpError
from pjrt_hub.backends.stablehlo import Block, Function, Op, TensorType, Value

from .source import ElementKind, Expr, Scope, deepest, element_kind

if TYPE_CHECKING:  # .planner imports this module
    from .planner import Reader

__all__ = ["Lowering", "LoweringOptions", "GeneratedFunction", "FusionGroup", "FusionMember", "LoopNest", "BlockScope",
           "unsupported_op"]

# -- bindings ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArrayBinding:
    """A materialized array (rank >= 1), or a global constant array."""

    name: str
    kind: ElementKind
    is_global: bool = False


@dataclass(frozen=True, slots=True)
class ScalarBinding:
    """A rank-0 value held in a scalar variable (or any scalar expression)."""

    expr: Expr


@dataclass(frozen=True, slots=True)
class Lazy:
    """A value computed where it is read: result ``index`` of ``op``, an elementwise or
    index-mapping op (:meth:`Lowering.compute`)."""

    op: Op
    index: int = 0


@dataclass(frozen=True, slots=True)
class RowBuffer:
    """A group-local buffer holding one row (the dims after the group's outer dims)."""

    name: str
    kind: ElementKind
    n_outer: int


@dataclass(frozen=True, slots=True)
class StreamedRow(RowBuffer):
    """A row buffer for an output streamed to memory (:data:`STREAM_MIN_BYTES`): the member
    computes each row of ``target`` here, then ``stream_row`` copies it with non-temporal stores
    to ``row_size`` elements of ``target`` at the row's flat offset."""

    target: str
    row_size: int
    outer_shape: tuple[int, ...]


Binding = ArrayBinding | ScalarBinding | Lazy | RowBuffer

#: What a fusion member's loop nest computes: materialized values of elementwise ops, or one reduce.
MemberKind = Literal["elementwise", "reduce"]


#: Arrays from this size on are advised to use transparent huge pages (numpy's threshold too).
_HUGEPAGE_MIN_BYTES = 4 << 20

#: A program output of at least this many bytes, written row by row by a loop nest and read by
#: nothing else in the program, is written with non-temporal stores (``stream_row``): a normal
#: store first reads each line it replaces, a third more memory traffic for an output written
#: once, and keeps the output in the caches at the expense of the inputs. That costs most where
#: another process shares the core and the caches no longer hold the working set between chunks
#: (``benchmarks/time_slicing.py``; figures: docs/measurements.md). Below this size an output
#: is likely read again soon, from the caches, by what consumes it; glibc's memcpy also only
#: streams copies larger than a share of the caches.
STREAM_MIN_BYTES = 16 << 20
#: ... and each row (the elements one iteration of the outer loops writes) at least this many.
STREAM_MIN_ROW_BYTES = 512


#: Chunks a parallel loop is cut into, per thread. On TBB (:func:`.threads.work_stealing`) a
#: thread that has finished its chunks takes those of a thread the scheduler is not running,
#: so a busy machine holds a loop up by one chunk at most rather than by a thread's share.
CHUNKS_PER_THREAD = 8
#: Elements of work (elements times fused ops) a chunk has at least, so that the tasks of a
#: loop on a many-core machine stay worth scheduling (~30 us on one core).
MIN_CHUNK_WORK = 1 << 15


@dataclass(frozen=True)
class LoweringOptions:
    #: Elements of work above which a kernel group runs its outer loop in parallel: ~0.2 ms on
    #: one core, so that waking the pool (tens of microseconds, more on a busy machine) pays.
    parallel_threshold: int = 1 << 19
    #: Threads to split parallel loops for (:data:`CHUNKS_PER_THREAD` chunks each).
    num_threads: int = 2
    #: Subtree cost (see ``Rule.cost``) above which a multiply-used value is materialized.
    recompute_limit: int = 6
    #: Outputs from this many bytes on are streamed to memory (:data:`STREAM_MIN_BYTES`).
    stream_min_bytes: int = STREAM_MIN_BYTES


@dataclass
class GeneratedFunction:
    source: str
    entry: str
    parallel: bool
    input_kinds: tuple[ElementKind, ...]
    output_kinds: tuple[ElementKind, ...]
    #: Module-level names (constants) the function reads: name -> Python expression.
    globals: dict[str, str]
    #: Parallel kernels split out of the entry function (their source, ``def`` included).
    kernels: list[str] = field(default_factory=list)
    #: The entry takes a last parameter, the runtime's cancel flag (:mod:`.cancel`): the
    #: function has a ``while`` loop, which reads it every iteration.
    cancellable: bool = False
    #: Other functions the entry calls (source with ``def``), compiled without ``parallel``.
    helpers: list[str] = field(default_factory=list)
    #: Deeply nested blocks split out of the entry function (not parallel).
    blocks: list[str] = field(default_factory=list)
    #: The function has parallel kernels or large BLAS products: the runtime sets its threads
    #: before each run (:func:`.threads.apply`).
    threaded: bool = False
    #: The threads its parallel loops and large products were cut for (``num_threads``).
    threads: int = 0


def index_expr(text: str, deps: Sequence[Expr]) -> Expr:
    """An index computed from ``deps`` (loop variables, other indices): valid in the innermost
    scope any of them belongs to."""
    return Expr(text, deepest(deps))


def _tuple(parts: Sequence[str]) -> str:
    parts = list(parts)
    if not parts:
        return "()"
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def load_text(name: str, parts: Sequence[str]) -> str:
    """Generated code reading ``name[parts]`` (see :func:`.intrinsics.ld`)."""
    return f"ld({name}, {_tuple(parts)})"


def store_text(name: str, parts: Sequence[str], value: str) -> str:
    """Generated statement ``name[parts] = value`` (see :func:`.intrinsics.st`)."""
    return f"st({name}, {_tuple(parts)}, {value})"


# -- op rules ---------------------------------------------------------------------------------


class ScalarContext(Protocol):
    """What an elementwise rule and a reduction step (:func:`.rules.reducer`) use of their
    context: :class:`Lowering` provides it, and so does the eager tier's formula builder
    (``eager._Text``), which writes its numpy formulas with the same rules."""

    def kind(self, v: Value) -> ElementKind: ...

    def const(self, value: object, kind: ElementKind) -> Expr: ...

    def lower_scalar_region(self, block: Block, args: Sequence[Expr]) -> list[Expr]: ...


#: ``(ctx, op, args) -> the result at one index``: a formula, or an expression as it is.
ElementwiseRule = Callable[[ScalarContext, Op, Sequence[Expr]], "str | Expr"]
#: ``(ctx, op, result_index, idx) -> the result at idx``.
IndexRule = Callable[["Lowering", Op, int, tuple[Expr, ...]], Expr]
#: ``(ctx, op) -> the results' bindings``, after emitting the op's code.
KernelRule = Callable[["Lowering", Op], Sequence[Binding]]


@dataclass(frozen=True)
class Rule:
    """How one op lowers. Exactly one of the three callables is set.

    * ``elementwise(ctx, op, args) -> str``: the result at one index from the operands at the
      same index (rank-0 operands of ``select``/``clamp`` broadcast).
    * ``index(ctx, op, result_index, idx) -> Expr``: read the result at ``idx``, reading the
      operands at other indices (broadcast, transpose, slice, gather...).
    * ``kernel(ctx, op) -> list[Binding]``: anything else; operands are materialized first
      (unless ``lazy_operands``), the rule emits code and returns the results' bindings.
    """

    elementwise: ElementwiseRule | None = None
    index: IndexRule | None = None
    kernel: KernelRule | None = None
    #: Relative cost of computing one element, to decide recomputation vs materialization.
    cost: int = 1
    #: Kernel rules that read their operands through ``ctx.read`` (fusing the producers).
    lazy_operands: bool = False


RULES: dict[str, Rule] = {}


#: Ops handled by the lowering itself rather than a rule: calls and composites are inlined,
#: terminators end blocks.
STRUCTURAL_OPS = ("func.call", "func.return", "stablehlo.return", "stablehlo.composite")


def supported_ops() -> list[str]:
    return sorted(set(RULES) | set(STRUCTURAL_OPS))


def unsupported_op(op: Op) -> UnsupportedOpError:
    """The error for an op this backend has no rule for (listing the ops it has)."""
    return UnsupportedOpError(op.name, location=op.where, supported=supported_ops(), backend="numba_cpu",
                              target=op.call_target)


# -- the lowering context -------------------------------------------------------------------------


@dataclass
class FusionMember:
    """One loop nest inside a :class:`FusionGroup`: the materialized values of elementwise
    ops computed at each index of ``shape``, or one ``reduce``. The planner builds them, the
    lowering emits them (:meth:`Lowering.emit_member`)."""

    kind: MemberKind
    #: The values this loop nest writes (a reduce member: the op's results).
    values: list[Value]
    #: The reduce op of a "reduce" member; None for an "elementwise" one.
    op: Op | None = None
    #: The loop nest's full index space (a reduce member: its operand's shape).
    shape: tuple[int, ...] = ()
    #: Reductions over all the inner dims folded into an "elementwise" member's loop nest (softmax's
    #: sum of exponentials accumulates while they are computed); their results are in values.
    reduces: list[Op] = field(default_factory=list)


@dataclass
class FusionGroup:
    """Consecutive kernels fused under shared outer loops: ``outer`` holds the sizes of the
    leading dimensions every member iterates over together (empty: no loop is shared), each
    member adding its own inner loops per outer index (:meth:`Lowering.emit_group`)."""

    outer: tuple[int, ...]
    members: list[FusionMember] = field(default_factory=list)


class _NameUse:
    """Which names each line of a generated function assigns and reads, for splitting blocks
    out of it. Generated names are unique temporaries, so "assigned outside the block and read
    in it" means "a parameter", and "assigned in it and read outside" means "a result"."""

    def __init__(self, root: Scope, params: Sequence[str]) -> None:
        from collections import Counter

        self._cache: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self.total_stored: Counter[str] = Counter(params)
        self.total_loaded: Counter[str] = Counter()
        for line in root.lines():
            stored, loaded = self.line(line)
            self.total_stored.update(stored)
            self.total_loaded.update(loaded)

    def line(self, line: str) -> tuple[frozenset[str], frozenset[str]]:
        hit = self._cache.get(line)
        if hit is not None:
            return hit
        import ast

        text = line.strip()
        if text.startswith("elif "):
            text = text[2:]
        if text.startswith("else"):
            text = "pass"
        if text.endswith(":"):
            text += " pass"
        stored: set[str] = set()
        loaded: set[str] = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name):
                (stored if isinstance(node.ctx, ast.Store) else loaded).add(node.id)
        result = (frozenset(stored), frozenset(loaded))
        self._cache[line] = result
        return result

    def _counts(self, scope: Scope, with_header: bool):
        from collections import Counter

        stored: Counter[str] = Counter()
        loaded: Counter[str] = Counter()
        lines = [scope.header] if with_header and scope.header is not None else []
        for line in [*lines, *scope.lines()]:
            s, lo = self.line(line)
            stored.update(s)
            loaded.update(lo)
        return stored, loaded

    def of(self, scope: Scope, with_header: bool) -> tuple[set[str], set[str]]:
        stored, loaded = self._counts(scope, with_header)
        return set(stored), set(loaded)

    def outside(self, scope: Scope, with_header: bool) -> tuple[set[str], set[str]]:
        stored, loaded = self._counts(scope, with_header)
        return ({n for n, c in self.total_stored.items() if c > stored.get(n, 0)},
                {n for n, c in self.total_loaded.items() if c > loaded.get(n, 0)})


class LoopNest:
    """``with ctx.loops(shape) as idx:``: one ``for`` loop per dimension, innermost last;
    ``idx`` holds the loop variables. Closed in reverse on exit."""

    def __init__(self, ctx: "Lowering", shape: Sequence[int]) -> None:
        self.ctx = ctx
        self.shape = tuple(shape)
        self.opened: list[tuple[Scope, Scope]] = []

    def __enter__(self) -> tuple[Expr, ...]:
        ctx = self.ctx
        idx = []
        for d in self.shape:
            var = ctx.fresh("i")
            parent = ctx.scope
            child = parent.open(f"for {var} in range({d}):")
            self.opened.append((parent, child))
            ctx.scope = child
            idx.append(Expr(var, child, var))
        return tuple(idx)

    def __exit__(self, *exc: object) -> None:
        for parent, child in reversed(self.opened):
            parent.close(child)
            self.ctx.scope = parent


class BlockScope:
    """``with ctx.block_scope(header) as scope:``: statements go into a child block (a branch,
    a loop body) under ``header``, which is also the outermost scope temporaries are hoisted to
    (never out of a branch, or out of a loop whose variables change)."""

    def __init__(self, ctx: "Lowering", header: str) -> None:
        self.ctx = ctx
        self.header = header
        #: While open: the enclosing scope, the block, and the base to restore on exit.
        self._open: tuple[Scope, Scope, Scope] | None = None

    def __enter__(self) -> Scope:
        ctx = self.ctx
        child = ctx.scope.open(self.header)
        self._open = (ctx.scope, child, ctx._base)
        ctx.scope = child
        ctx._base = child
        return child

    def __exit__(self, *exc: object) -> None:
        assert self._open is not None  # entered first
        parent, child, base = self._open
        parent.close(child)
        self.ctx.scope = parent
        self.ctx._base = base
        self._open = None


def round_accumulators(ctx: "Lowering", op: Op, names: Sequence[str]) -> None:
    """Round reduction accumulators of narrow float type once, after the reduction loop: they
    accumulate in float32, as XLA:CPU reduces bf16 and f16."""
    for v, a in zip(op.results, names):
        kind = ctx.kind(v)
        if kind.narrow and kind.cls == "f":
            ctx.scope.emit(f"{a} = {kind.rounded(a)}")


class Lowering:
    """Lowers one (call-free) function to the source of a numba function."""

    def __init__(self, fn: Function, options: LoweringOptions | None = None) -> None:
        self.fn = fn
        self.options = options or LoweringOptions()
        self.env: dict[Value, Binding] = {}
        self.memo: dict[tuple[int, tuple[str, ...]], Expr] = {}
        self.globals: dict[str, str] = {}
        self._global_keys: dict[tuple, str] = {}
        self._names = itertools.count()
        #: Where statements are emitted now.
        self.scope = Scope()
        #: The outermost scope temporaries may be hoisted to: the current kernel group's or
        #: control-flow block's (:meth:`temp`).
        self._base: Scope = self.scope
        self.parallel = False
        #: During a fusion check (:meth:`try_member`), the values whose reads are logged.
        self._watch: set[Value] | None = None
        self._watch_log: list[tuple[Value, tuple[Expr, ...]]] = []
        #: Reshaped views of arrays, by (value id, shape), and the scope each was made in.
        self._views: dict[tuple[int, tuple[int, ...]], str] = {}
        self._view_scopes: dict[tuple[int, tuple[int, ...]], Scope] = {}
        self._cancellable = False
        #: Names of the entry's array parameters.
        self._arg_names: set[str] = set()
        #: Variables that may hold an argument array at run time (a loop-carried value or a
        #: branch result initialised from one): results copy them, never hand out an input.
        self._maybe_arg: set[str] = set()
        #: Control-flow result variables (branch results, loop-carried values) that may share
        #: their array with another live value: a branch can return an outer value, two results
        #: can be one array. Nothing updates them in place, and results copy them.
        self._shared: set[str] = set()
        #: Functions of the module besides the entry (rules add them: collective calls).
        self.helpers: list[str] = []
        #: Lane reductions (see :mod:`.lanes`): op id -> (lanes buffer, scratch row), each None
        #: where the reduction has no use for it, allocated once per chunk of the group that
        #: computes them.
        self._lane_bufs: dict[int, tuple[str | None, str | None]] = {}
        #: Set by rules that emit multi-threaded library calls (large dot products).
        self.threaded = False
        #: The plans (planner.BlockPlan) of the blocks lowered so far, merged: each value's
        #: readers and each lazy value's loop nests. A nested block is planned when its op is
        #: lowered, and its entries replace those of the outer values it reads.
        self.readers: dict[Value, tuple[Reader, ...]] = {}
        self.roots: dict[Value, frozenset[Op | Value]] = {}
        #: The defining op of every lazy value planned so far (kept when a value is
        #: materialized, so that the op can still be evaluated at an index).
        self.lazy_definitions: dict[Value, Lazy] = {}
        #: Collective ops lowered so far (:meth:`number_collective`).
        self._collectives = 0
        #: The function's results (candidates for :data:`STREAM_MIN_BYTES`).
        self._results = frozenset(fn.body.terminator.operands)

    # ---- names and globals ----

    def fresh(self, prefix: str = "t") -> str:
        return f"{prefix}{next(self._names)}"

    def const(self, value: object, kind: ElementKind) -> Expr:
        """A module-level scalar constant of the kind's computation type."""
        v = np.asarray(value).reshape(())
        key: tuple[object, ...]
        if kind.cls == "f":
            dt = np.float64 if kind.bits == 64 else np.float32
            # bf16/f16 constants are exact in float32, the type they are computed in.
            bits = int(v.astype(dt).view(np.uint64 if dt == np.float64 else np.uint32))
            key = ("f", dt.__name__, bits)
            ubits = "uint64" if dt == np.float64 else "uint32"
            text = f"np.{ubits}({bits}).view(np.{np.dtype(dt).name})"
        elif kind.cls == "b":
            key = ("b", bool(v))
            text = f"np.bool_({bool(v)})"
        elif kind.cls == "c":
            c = complex(v.astype(kind.storage))
            key = ("c", kind.storage.name, c.real.hex(), c.imag.hex())
            text = (f"np.{kind.storage.name}(complex(float.fromhex({c.real.hex()!r}), "
                    f"float.fromhex({c.imag.hex()!r})))")
        else:
            iv = int(v)
            dtype_name = kind.compute_dtype.name
            key = ("i", dtype_name, iv)
            text = f"np.{dtype_name}({iv})"
        name = self._global_keys.get(key)
        if name is None:
            name = f"K{len(self._global_keys)}"
            self._global_keys[key] = name
            self.globals[name] = text
        return Expr(name)

    def global_value(self, text: str) -> str:
        """A module-level name bound to the expression ``text`` (once per distinct text): for
        what numba wants as a global, such as ``objmode``'s result types."""
        key = ("v", text)
        name = self._global_keys.get(key)
        if name is None:
            name = f"V{len(self._global_keys)}"
            self._global_keys[key] = name
            self.globals[name] = text
        return name

    def global_array(self, array: np.ndarray, kind: ElementKind) -> str:
        data = np.array(array, order="C")
        if kind.narrow:
            data = data.view(kind.storage)
        else:
            data = data.astype(kind.storage, copy=False)
        key = ("a", data.dtype.str, data.shape, data.tobytes())
        name = self._global_keys.get(key)
        if name is None:
            name = f"G{len(self._global_keys)}"
            self._global_keys[key] = name
            # np.bool_, not the dtype's name "bool": numpy < 2 has no np.bool, and the generated
            # text must not depend on the numpy that wrote it.
            dtype_name = "bool_" if data.dtype == np.bool_ else data.dtype.name
            self.globals[name] = (
                f"np.frombuffer(bytes.fromhex({data.tobytes().hex()!r}), np.{dtype_name})"
                f".reshape({tuple(data.shape)!r})")
        return name

    # ---- temporaries ----

    def temp(self, text: str, deps: Iterable[Expr], prefix: str = "t") -> Expr:
        """Assign ``text`` to a fresh variable in the outermost scope where its deps exist."""
        deps = list(deps)
        target = deepest(deps, None)
        if target is None or target.depth < self._base.depth:
            # Never above the current group base (whose loops follow) or control-flow block:
            # statements cannot be hoisted out of a branch or a loop with mutable variables.
            target = self._base
        elif not target.encloses(self.scope):
            # An operand of a block the current code does not run in: the temporary would be
            # assigned where its reader cannot see it (numba then reports an undefined name).
            raise CompileError(f"internal: {text} would be assigned out of sight of its reader")
        name = self.fresh(prefix)
        target.emit(f"{name} = {text}")
        return Expr(name, target)

    # ---- reading values ----

    def kind(self, v: Value) -> ElementKind:
        return element_kind(v.type, where=v.name)

    def _memo_get(self, key) -> Expr | None:
        e = self.memo.get(key)
        if e is None:
            return None
        if e.scope is not None and not e.scope.encloses(self.scope):
            return None
        return e

    def read(self, v: Value, idx: Sequence[Expr]) -> Expr:
        """The element of ``v`` at ``idx`` as a scalar expression of its computation type."""
        idx = tuple(idx)
        key = (v.id, tuple(i.text for i in idx))
        hit = self._memo_get(key)
        if hit is not None:
            return hit
        b = self.env.get(v)
        if b is None:
            if self._watch is None:
                raise CompileError(f"internal: value {v.name} read before it was defined")
            # Fusion probe during planning: kernels before the group are not emitted yet.
            b = ArrayBinding(f"_probe{v.id}", self.kind(v)) if v.tensor_type.rank else ScalarBinding(Expr(f"_probe{v.id}"))
        if isinstance(b, ScalarBinding):
            e = b.expr
        elif isinstance(b, (ArrayBinding, RowBuffer)):
            if self._watch is not None and v in self._watch:
                self._watch_log.append((v, idx))
            if isinstance(b, RowBuffer):
                inner = idx[b.n_outer:]
                parts = [i.text for i in inner] or ["0"]
                # The row's outer index too: the buffer holds another row at each outer index, so
                # a load at constant inner indices (a slice of one column) stays in the row loop.
                e = self.temp(b.kind.load(load_text(b.name, parts)), idx)
            else:
                e = self.temp(b.kind.load(load_text(b.name, [i.text for i in idx])), idx)
        else:
            e = self.compute(v, idx, b)
        self.memo[key] = e
        return e

    def compute(self, v: Value, idx: tuple[Expr, ...], b: Lazy | None = None) -> Expr:
        """Evaluate a lazy value's defining op at ``idx`` (ignoring any materialized copy)."""
        b = b or self._lazy_of(v)
        op = b.op
        rule = RULES.get(op.name)
        if rule is None:
            raise unsupported_op(op)
        if rule.elementwise is not None:
            args = []
            for o in op.operands:
                rank = len(o.tensor_type.shape)
                args.append(self.read(o, idx if rank else ()))
            text = rule.elementwise(self, op, args)
            if isinstance(text, Expr):
                return text
            return self.temp(text, args)
        if rule.index is not None:
            return rule.index(self, op, b.index, idx)
        raise CompileError(f"internal: {op.name} is not lazy")

    def _lazy_of(self, v: Value) -> Lazy:
        b = self.env.get(v)
        if isinstance(b, Lazy):
            return b
        lazy = self.lazy_definitions.get(v)
        if lazy is None:
            raise CompileError(f"internal: {v.name} has no lazy definition")
        return lazy

    # ---- materialization ----

    def array(self, v: Value) -> str:
        """The name of an array holding ``v`` (rank >= 1), materializing it if it is lazy."""
        b = self.env[v]
        if isinstance(b, ArrayBinding):
            return b.name
        if len(v.tensor_type.shape) == 0:
            raise CompileError(f"internal: array() of rank-0 value {v.name}")
        name = self.fresh("a")
        kind = self.kind(v)
        self.alloc(name, v.tensor_type.shape, kind)
        self.fill(name, kind, v.tensor_type.shape, lambda idx: self.read(v, idx))
        self.env[v] = ArrayBinding(name, kind)
        return name

    def owns(self, b: ArrayBinding) -> bool:
        """True when the array is this function's to overwrite (not an input or a constant)."""
        return (not b.is_global and b.name not in self._arg_names and b.name not in self._maybe_arg
                and b.name not in self._shared)

    def share(self, names: Sequence[str]) -> None:
        """Mark control-flow result variables as possibly sharing their arrays (see :attr:`_shared`)."""
        self._shared.update(names)

    @contextlib.contextmanager
    def sharing(self, names: Sequence[str]) -> Iterator[None]:
        """Within the block, treat ``names`` as shared (:attr:`_shared`): nothing updates them
        in place. A while loop's condition reads the carried arrays its body updates in place,
        and is itself each one's only reader, as its own plan counts them."""
        added = [n for n in names if n not in self._shared]
        self._shared.update(added)
        try:
            yield
        finally:
            self._shared.difference_update(added)

    def sole_user(self, v: Value, op: Op) -> bool:
        users = self.readers.get(v, ())
        return len(users) == 1 and users[0] is op

    def number_collective(self) -> int:
        """A number for the next collective op of this function (its spec's name and key)."""
        number = self._collectives
        self._collectives += 1
        return number

    def define_lazy(self, v: Value, lazy: Lazy) -> None:
        """Bind ``v`` to its lazy definition (the planner does, for every lazy value)."""
        self.env[v] = lazy
        self.lazy_definitions[v] = lazy

    def note_assignment(self, targets: Sequence[str], texts: Sequence[str]) -> None:
        """Record ``targets = texts`` for :attr:`_maybe_arg` (control-flow result variables)."""
        for t, x in zip(targets, texts):
            if x in self._arg_names or x in self._maybe_arg:
                self._maybe_arg.add(t)

    def alloc(self, name: str, shape: Sequence[int], kind: ElementKind, scope: Scope | None = None) -> None:
        """Emit ``name = np.empty(shape)``; large arrays get transparent huge pages."""
        scope = scope or self.scope
        shape = tuple(shape)
        scope.emit(f"{name} = np.empty({shape!r}, {kind.np_name})")
        if math.prod(shape) * kind.storage.itemsize >= _HUGEPAGE_MIN_BYTES:
            scope.emit(f"advise_hugepages({name})")

    def reshape_view(self, v: Value, b: ArrayBinding, shape: tuple[int, ...]) -> str:
        """A reshaped view of a materialized (C-contiguous) array, made once."""
        key = (v.id, shape)
        name = self._views.get(key)
        if name is None or not self._view_scopes[key].encloses(self.scope):
            name = self.fresh("r")
            self._base.emit(f"{name} = {b.name}.reshape({shape!r})")
            self._views[key] = name
            self._view_scopes[key] = self._base
        return name

    def owned_array(self, v: Value) -> str:
        """Like :meth:`array`, but never a global constant or a function argument (whose type
        or ownership differ from fresh arrays: loop-carried values and results need that)."""
        name = self.array(v)
        b = self.env[v]
        assert isinstance(b, ArrayBinding)  # array() made it one
        if not self.owns(b):
            copy = self.fresh("a")
            self.scope.emit(f"{copy} = {name}.copy()")
            return copy
        return name

    def scalar(self, v: Value) -> Expr:
        """A rank-0 value as a scalar expression usable in the current scope."""
        return self.read(v, ())

    def fill(self, name: str, kind: ElementKind, shape: Sequence[int], value_at: Callable[[tuple[Expr, ...]], Expr],
             offsets: Sequence[str] | None = None) -> None:
        """Emit loops writing ``value_at(idx)`` into ``name[idx (+ offsets)]``."""
        with self.loops(shape) as idx:
            val = value_at(idx)
            if offsets:
                parts = [f"{i.text} + {o}" if o != "0" else i.text for i, o in zip(idx, offsets)]
            else:
                parts = [i.text for i in idx]
            self.scope.emit(store_text(name, parts, kind.store(val.text)))

    def loops(self, shape: Sequence[int]) -> LoopNest:
        """``with ctx.loops(shape) as idx:`` opens one loop per dimension."""
        return LoopNest(self, shape)

    def emit_cancel_check(self) -> None:
        """Stop here if the runtime asks: the top of every loop that may never end."""
        from .cancel import cancel_check

        self._cancellable = True
        self.scope.emit(cancel_check())

    def block_scope(self, header: str) -> BlockScope:
        """``with ctx.block_scope("if c:"):`` emits the body into a child block."""
        return BlockScope(self, header)

    # ---- entry point ----

    def lower(self) -> GeneratedFunction:
        fn = self.fn
        in_kinds = []
        params = []
        for i, a in enumerate(fn.args):
            if not isinstance(a.type, TensorType):
                raise CompileError(f"@{fn.name} argument {a.name}: type {a.type} is not supported by numba_cpu")
            kind = self.kind(a)
            in_kinds.append(kind)
            name = f"arg{i}"
            params.append(name)
            self._arg_names.add(name)
            if a.tensor_type.rank == 0:
                self.env[a] = ScalarBinding(self.temp(kind.load(f"{name}[()]"), [], prefix="s"))
            else:
                self.env[a] = ArrayBinding(name, kind)
        results = self.lower_block(fn.body)
        out_kinds = []
        outs = []
        seen: set[str] = set()
        for v, _b in zip(fn.body.terminator.operands, results):
            kind = self.kind(v)
            out_kinds.append(kind)
            if v.tensor_type.rank == 0:
                name = self.fresh("o")
                self.scope.emit(f"{name} = np.empty((), {kind.np_name})")
                self.scope.emit(f"{name}[()] = {kind.store(self.read(v, ()).text)}")
            else:
                name = self.owned_array(v)
                if name in seen:
                    copy = self.fresh("o")
                    self.scope.emit(f"{copy} = {name}.copy()")
                    name = copy
            seen.add(name)
            outs.append(name)
        self.scope.emit(f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
        if self._cancellable:
            from .cancel import CANCEL_FLAG

            # Before the blocks are split out: a nested while reads the flag from its block's
            # parameters, like any name the entry defines.
            params.append(CANCEL_FLAG)
        kernels: list[str] = []
        blocks: list[str] = []
        names = _NameUse(self.scope, params)
        body = self.scope.render(1, hook=lambda s: self._extract_kernel(s, kernels),
                                 deep=lambda s, form: self._extract_block(s, form, names, kernels, blocks))
        entry = "entry"
        src = [f"def {entry}({', '.join(params)}):", *body]
        return GeneratedFunction("\n".join(src), entry, self.parallel, tuple(in_kinds), tuple(out_kinds),
                                 dict(self.globals), kernels, self._cancellable, list(self.helpers), blocks,
                                 threaded=self.threaded or self.parallel, threads=self.options.num_threads)

    def _extract_block(self, scope: Scope, form: str, names: "_NameUse", kernels: list[str],
                       blocks: list[str]) -> str:
        """Move a deeply nested loop statement or branch body into a function of its own (see
        :meth:`Scope.render`): its parameters are the names it reads that code outside it
        defines, its results the names it assigns that code outside it reads."""
        inside_stored, inside_loaded = names.of(scope, with_header=form == "statement")
        outside_stored, outside_loaded = names.outside(scope, with_header=form == "statement")
        params = sorted(n for n in inside_loaded if n in outside_stored)
        outs = sorted(n for n in inside_stored if n in outside_loaded)
        index = len(blocks)
        blocks.append("")  # the slot is this block's: blocks nested in it are numbered after it
        name = f"block{index}"
        hook = lambda s: self._extract_kernel(s, kernels)  # noqa: E731
        deep = lambda s, f: self._extract_block(s, f, names, kernels, blocks)  # noqa: E731
        if form == "statement":
            wrapper = Scope()
            wrapper.items.append(scope)
            body = wrapper.render(1, hook, deep, 0, 0)
        else:
            body = scope.render(1, hook, deep, 0, 0) or ["    pass"]
        ret = f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})" if outs else "    return"
        blocks[index] = "\n".join([f"def {name}({', '.join(params)}):", *body, ret])
        call = f"{name}({', '.join(params)})"
        if not outs:
            return call
        return f"{', '.join(outs)}{',' if len(outs) == 1 else ''} = {call}"

    def _extract_kernel(self, scope: Scope, kernels: list[str]) -> str:
        """Move a parallel loop nest into a function of its own and return the call.

        numba's parfor passes are super-linear in function size: compiling a whole program with
        ``parallel=True`` can take minutes, so only these small kernels get it. Parameters are
        the names the block reads but does not assign (arrays and scalars of the caller)."""
        import ast
        import builtins

        from . import support

        assert scope.header is not None  # a loop statement
        lines = [scope.header, *scope.render(1)]
        tree = ast.parse("\n".join(lines))
        stored, loaded = set(), []
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Store):
                    stored.add(node.id)
                elif node.id not in loaded:
                    loaded.append(node.id)
        module_level = set(self.globals) | set(support.__all__) | set(dir(builtins)) | {"prange", "njit"}
        params = sorted(n for n in loaded if n not in stored and n not in module_level)
        name = f"kernel{len(kernels)}"
        body = "\n".join("    " + ln for ln in lines)
        kernels.append(f"def {name}({', '.join(params)}):\n{body}")
        return f"{name}({', '.join(params)})"

    # ---- blocks ----

    def lower_block(self, block: Block) -> list[Binding]:
        """Lower the ops of ``block`` (its arguments already bound) into the current scope; the
        bindings of the terminator's operands are returned (materialized as arrays/scalars)."""
        from .planner import plan_block

        plan = plan_block(self, block)
        # A nested block (a branch, a loop body) sees only its own readers of an outer value;
        # the enclosing block's entry, already here, counts every reader and must stay, or an
        # op in one branch would take the value as its own and update it in place.
        for value, readers in plan.readers.items():
            self.readers.setdefault(value, readers)
        self.roots.update(plan.roots)
        for item in plan.items:
            if isinstance(item, FusionGroup):
                self.emit_group(item)
            else:
                self.emit_kernel(item)
        out: list[Binding] = []
        for v in block.terminator.operands:
            if not isinstance(v.type, TensorType):
                raise CompileError(f"{block.terminator.describe()}: {v.type} values are not supported by numba_cpu")
            if v.tensor_type.rank == 0:
                out.append(ScalarBinding(self.read(v, ())))
            else:
                self.array(v)
                out.append(self.env[v])
        return out

    def emit_kernel(self, op: Op) -> None:
        rule = RULES.get(op.name)
        if rule is None or rule.kernel is None:
            raise unsupported_op(op)
        if not rule.lazy_operands:
            for o in op.operands:
                if isinstance(o.type, TensorType) and o.type.rank > 0:
                    self.array(o)
        bindings = rule.kernel(self, op)
        for r, b in zip(op.results, bindings):
            self.env[r] = b

    def lower_scalar_region(self, block: Block, args: Sequence[Expr]) -> list[Expr]:
        """Inline a region whose values are all rank-0 (reduce bodies, sort comparators)."""
        for a, e in zip(block.args, args):
            self.env[a] = ScalarBinding(e)
        inner = [r for op in block.ops for r in op.results]
        for r in inner:
            self.memo.pop((r.id, ()), None)
        for op in block.ops[:-1]:
            rule = RULES.get(op.name)
            if rule is None:
                raise unsupported_op(op)
            if any(isinstance(r.type, TensorType) and r.type.rank for r in op.results) or (
                rule.elementwise is None and rule.index is None):
                raise UnsupportedOpError(
                    f"{op.name} inside a scalar region", location=op.where, supported=supported_ops(),
                    backend="numba_cpu")
            for i, r in enumerate(op.results):
                self.env[r] = Lazy(op, i)
        return [self.read(v, ()) for v in block.terminator.operands]

    # ---- kernel groups ----

    def emit_group(self, group: FusionGroup) -> None:
        from .planner import group_local_values

        outer = group.outer
        base = self.scope
        local = group_local_values(group, self.readers, self.roots)
        work = max((math.prod(m.shape) for m in group.members), default=1)
        parallel = bool(outer) and outer[0] >= 2 and work * len(group.members) >= self.options.parallel_threshold
        # Arrays that outlive the group: fresh ones, or a dead operand's (see _donor).
        members = {v for m in group.members for v in m.values}
        for m in group.members:
            for v in m.values:
                if v.tensor_type.rank and v not in local:
                    kind = self.kind(v)
                    donor = self._donor(v, members) if m.kind == "elementwise" else None
                    if donor is not None:
                        self.env[v] = ArrayBinding(donor.name, kind)
                        continue
                    name = self.fresh("a")
                    self.alloc(name, v.tensor_type.shape, kind, base)
                    self.env[v] = ArrayBinding(name, kind)
        opened: list[tuple[Scope, Scope]] = []

        def open_(header: str) -> Scope:
            child = self.scope.open(header)
            opened.append((self.scope, child))
            self.scope = child
            return child

        outer_idx: list[Expr] = []
        skew = self._skews(group)
        bounds = ("0", "0")
        pairs: list[tuple[Value, str, str]] = []
        if outer:
            # Split the first dim that is not 1 among the threads (leading unit dims are loops
            # of one iteration, a (1, n) array still runs on every core).
            split = next((d for d, n in enumerate(outer) if n != 1), 0)
            parallel = parallel or (work * len(group.members) >= self.options.parallel_threshold
                                    and outer[split] >= 2 and split > 0)
            chunk_scope = base
            for d, n in enumerate(outer):
                var = self.fresh("i")
                if d == split and parallel:
                    self.parallel = True
                    threads = max(1, self.options.num_threads)
                    # As many chunks as idle threads can share, none below MIN_CHUNK_WORK.
                    chunks = min(n, max(threads, min(threads * CHUNKS_PER_THREAD,
                                                     work * len(group.members) // MIN_CHUNK_WORK)))
                    chunk = self.fresh("c")
                    open_(f"for {chunk} in prange({chunks}):").extract = True
                    lo, hi = self.fresh("lo"), self.fresh("hi")
                    # max(0, .): lets LLVM see the index is non-negative and drop numba's
                    # negative-index fix-up, which would keep the loop from vectorising.
                    self.scope.emit(f"{lo} = max(0, ({chunk} * {n}) // {chunks})")
                    self.scope.emit(f"{hi} = (({chunk} + 1) * {n}) // {chunks}")
                    chunk_scope = self.scope
                    bounds = (lo, hi)
                    if not skew:
                        open_(f"for {var} in range({lo}, {hi}):")
                else:
                    bounds = ("0", str(n))
                    if not skew:
                        open_(f"for {var} in range({n}):")
                if not skew:
                    outer_idx.append(Expr(var, self.scope, var))
            # Row buffers for group-local values: one per chunk (each chunk is a task of its own),
            # two where the rows are skewed (the row being made and the one before it).
            for m in group.members:
                for v in m.values:
                    if v in local and v.tensor_type.rank:
                        kind = self.kind(v)
                        inner = v.tensor_type.shape[len(outer):]
                        empty = f"np.empty({tuple(inner) or (1,)!r}, {kind.np_name})"
                        name = self.fresh("row")
                        chunk_scope.emit(f"{name} = {empty}")
                        self.env[v] = RowBuffer(name, kind, len(outer))
                        if skew:
                            previous = self.fresh("row")
                            chunk_scope.emit(f"{previous} = {empty}")
                            pairs.append((v, name, previous))
            streamed = self._stream_outputs(group, local, chunk_scope, split if parallel else -1)
            self._alloc_lane_buffers(group, chunk_scope)
        else:
            streamed = {}
            self._alloc_lane_buffers(group, base)
        old_base = self._base
        self._base = base
        try:
            if skew:
                self._emit_skewed(group, bounds, pairs)
            else:
                for m in group.members:
                    self.emit_member(m, tuple(outer_idx))
        finally:
            for parent, child in reversed(opened):
                parent.close(child)
                self.scope = parent
                if streamed and child is opened[-1][1]:
                    # Rows that are the innermost outer loop: copied once that loop is done.
                    for v in streamed:
                        b = self.env[v]
                        assert isinstance(b, StreamedRow)
                        if b.n_outer < len(outer_idx):
                            self._emit_stream_row(b, outer_idx[: b.n_outer])
            self._base = old_base
        if streamed:
            # The streamed stores are weakly ordered: fence them before the chunk is reported
            # done, so that whichever thread reads the output next sees them.
            chunk_scope.emit("stream_fence()")
            self.env.update(streamed)

    def _donor(self, v: Value, members: set[Value]) -> ArrayBinding | None:
        """An array ``v`` can be written into in place, instead of a fresh one: that of a value
        ``u`` of the same shape and element type that this function owns (not an argument, a
        constant or a control-flow variable that may share its array) and that nothing reads
        after ``v`` is computed: ``v`` depends on ``u`` through elementwise ops alone, each the
        only reader of its operand on the way (so every element of ``u`` is read at ``v``'s
        index, just before ``v``'s element there is stored, and never again).

        A bias-and-activation after a matrix product is the case it is for: written into the
        product's array, the pass reads and writes the same lines, where a fresh array costs
        its lines' first reads as well."""
        lazy = self.env.get(v)
        if not isinstance(lazy, Lazy):
            return None
        kind, shape = self.kind(v), tuple(v.tensor_type.shape)
        stack = [lazy.op]
        while stack:
            op = stack.pop()
            rule = RULES.get(op.name)
            if rule is None or rule.elementwise is None:
                continue
            for o in op.operands:
                if (not isinstance(o.type, TensorType) or tuple(o.tensor_type.shape) != shape or o in members
                        or not self.sole_user(o, op)):
                    continue
                b = self.env.get(o)
                if isinstance(b, ArrayBinding):
                    if self.owns(b) and self.kind(o) == kind and o not in self._results:
                        return b
                elif isinstance(b, Lazy):
                    stack.append(b.op)
        return None

    def _stream_outputs(self, group: FusionGroup, local: set[Value], chunk_scope: Scope,
                        split: int) -> dict[Value, ArrayBinding]:
        """Give the group's large row-written outputs (:data:`STREAM_MIN_BYTES`) a row buffer
        each, in ``chunk_scope``; returns their array bindings, to restore after the group.

        A row is what one iteration of the outer loops writes (the member's own inner loops),
        or, for a value the outer loops cover entirely, its last dimension: the innermost outer
        loop, unless that is the loop the threads split (``split``), whose chunks cut rows."""
        outer = group.outer
        streamed: dict[Value, ArrayBinding] = {}
        for m in group.members:
            if m.kind != "elementwise":
                continue
            reduced = {r for op in m.reduces for r in op.results}
            for v in m.values:
                b = self.env.get(v)
                shape = tuple(v.tensor_type.shape)
                if (v in local or v in reduced or v not in self._results or not isinstance(b, ArrayBinding)
                        or shape != tuple(m.shape) or any(u != "term" for u in self.readers.get(v, ()))):
                    continue
                n_outer = len(outer)
                if len(shape) == len(outer):
                    n_outer -= 1  # the innermost outer loop is the row
                    if n_outer < 1 or split >= n_outer:
                        continue
                elif len(shape) < len(outer):
                    continue
                row = math.prod(shape[n_outer:])
                itemsize = b.kind.storage.itemsize
                if (math.prod(shape) * itemsize < self.options.stream_min_bytes
                        or row * itemsize < STREAM_MIN_ROW_BYTES):
                    continue
                name = self.fresh("row")
                chunk_scope.emit(f"{name} = np.empty({shape[n_outer:]!r}, {b.kind.np_name})")
                self.env[v] = StreamedRow(name, b.kind, n_outer, b.name, row, tuple(outer[:n_outer]))
                streamed[v] = b
        return streamed

    def _emit_stream_row(self, b: StreamedRow, outer_idx: Sequence[Expr]) -> None:
        """Copy a streamed row to its place in the output (the row at ``outer_idx``)."""
        offset = ""
        for i, n in zip(outer_idx, b.outer_shape):
            offset = f"({offset}) * {n} + {i.text}" if offset else i.text
        self.scope.emit(f"stream_row({b.target}, ({offset}) * {b.row_size}, {b.name})")

    def emit_member(self, m: FusionMember, outer_idx: tuple[Expr, ...],
                    fused: Callable[[tuple[Expr, ...]], None] | None = None) -> None:
        """Emit member ``m``'s loop nest at ``outer_idx``; ``fused(full)`` (an elementwise member
        only) emits more work into its innermost loop, at each full index."""
        if m.kind == "elementwise":
            from .lanes import lane_reduction
            from .rules import reducer

            inner = m.shape[len(outer_idx):]
            reduced = {r for op in m.reduces for r in op.results}
            accs = []
            lanes = []
            for op in m.reduces:
                plan = lane_reduction(op) if inner else None
                if plan is not None:
                    lanes.append((op, plan, self.read(op.operands[1], ())))
                    continue
                n = len(op.results)
                names = [self.fresh("acc") for _ in range(n)]
                init = [self.read(v, ()) for v in op.operands[n:]]
                self.scope.emit(f"{', '.join(names)} = {', '.join(e.text for e in init)}")
                accs.append((op, names, reducer(self, op)))

            def body(full: tuple[Expr, ...]) -> None:
                self._store_values([v for v in m.values if v not in reduced], full)
                for op, names, combine in accs:
                    xs = [self.read(v, full) for v in op.operands[: len(names)]]
                    new = combine([Expr(a, self.scope) for a in names], xs)
                    self.scope.emit(f"{', '.join(names)} = {', '.join(new)}")
                if fused is not None:
                    fused(full)

            lane_results: list[Expr] = []
            if lanes:
                lane_results = self.lane_rows(inner, outer_idx, lanes, body)
            else:
                with self.loops(inner) as idx:
                    body(outer_idx + idx)
            for v in m.values:
                b = self.env.get(v)
                if isinstance(b, StreamedRow) and b.n_outer == len(outer_idx):
                    self._emit_stream_row(b, outer_idx)
            key = tuple(i.text for i in outer_idx)
            for (op, _, _), e in zip(lanes, lane_results):
                self.memo[(op.result.id, key)] = e
                self.store(op.result, outer_idx, e)
            for op, names, _ in accs:
                round_accumulators(self, op, names)
            for op, names, _ in accs:
                for v, a in zip(op.results, names):
                    e = Expr(a, self.scope)
                    self.memo[(v.id, key)] = e
                    self.store(v, outer_idx, e)
        else:
            from .rules import emit_reduce_member

            assert m.op is not None and fused is None  # a reduce member carries its op
            emit_reduce_member(self, m.op, outer_idx)

    # ---- skewed rows ----

    #: Elementwise ops that run on the divider, whose instructions overlap other arithmetic only
    #: when there is other arithmetic in the same loop.
    _DIVIDER_OPS = frozenset({"stablehlo.divide", "stablehlo.sqrt", "stablehlo.rsqrt"})

    def _skews(self, group: FusionGroup) -> bool:
        """Whether the group's rows are skewed (:meth:`_emit_skewed`): one outer loop of two or
        more rows; a last member that is elementwise, reduces nothing, has the same loop nest as
        the member before it (elementwise, computing values of its own) and divides or takes
        a square root of floats, whose latency the other member's arithmetic would hide.

        Softmax is the case: each row's exponentials, then their sum, then each divided by it.
        The division cannot start before the sum, so in one row the divider and the arithmetic
        take turns; skewed, row i's exponentials and row i-1's divisions share a loop."""
        outer = group.outer
        if len(outer) != 1 or outer[0] < 2 or len(group.members) < 2:
            return False
        before, tail = group.members[-2], group.members[-1]
        if (tail.kind != "elementwise" or before.kind != "elementwise" or tail.reduces
                or tuple(tail.shape) != tuple(before.shape) or len(tail.shape) < 2):
            return False
        reduced = {r for op in before.reduces for r in op.results}
        if all(v in reduced for v in before.values):
            return False  # the member before has no loop of its own to share
        members = {v for m in group.members for v in m.values}
        seen: set[int] = set()
        stack = list(tail.values)
        while stack:
            v = stack.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            b = self.env.get(v)
            lazy = b if isinstance(b, Lazy) else (self.lazy_definitions.get(v) if v in tail.values else None)
            if lazy is None:
                continue
            op = lazy.op
            if op.name in self._DIVIDER_OPS and self.kind(v).is_float:
                return True
            rule = RULES.get(op.name)
            if rule is not None and (rule.elementwise is not None or rule.index is not None):
                stack.extend(o for o in op.operands if isinstance(o.type, TensorType)
                             and (o not in members or o in tail.values))
        return False

    def _arrays_read(self, group: FusionGroup) -> list[str]:
        """The arrays in memory (arguments, values materialized before the group) of the
        group's full shape that its members read at their own index: reached from the members'
        ops through elementwise ops only, since an index map (transpose, reverse) reads another
        row than the loop's. Sorted by name."""
        shape = tuple(group.members[-1].shape)
        own = {v.id for m in group.members for v in m.values}
        names: set[str] = set()
        seen: set[int] = set()
        stack: list[Value] = []
        for m in group.members:
            for op in ([m.op] if m.op is not None else []) + m.reduces:
                stack.extend(op.operands)
            for v in m.values:
                lazy = self.lazy_definitions.get(v)
                if lazy is not None:
                    stack.extend(lazy.op.operands)
        while stack:
            v = stack.pop()
            if v.id in seen or v.id in own or not isinstance(v.type, TensorType):
                continue
            seen.add(v.id)
            b = self.env.get(v)
            if isinstance(b, ArrayBinding):
                if tuple(v.tensor_type.shape) == shape:
                    names.add(b.name)
                continue
            lazy = b if isinstance(b, Lazy) else self.lazy_definitions.get(v)
            rule = RULES.get(lazy.op.name) if lazy is not None else None
            if lazy is not None and rule is not None and rule.elementwise is not None:
                stack.extend(lazy.op.operands)
        return sorted(names)

    def _emit_skewed(self, group: FusionGroup, bounds: tuple[str, str],
                     pairs: Sequence[tuple[Value, str, str]]) -> None:
        """The rows ``lo..hi-1`` of a group :meth:`_skews` chose, skewed by one: the members but
        the last for row ``lo``; then for each next row ``i``, those members with the last
        member's work for row ``i - 1`` in the innermost loop of the member before it; then the
        last member for row ``hi - 1``. The rows the last member reads (``pairs``: each
        group-local value's buffer, and another for the row before) change places after each
        row. Every element is computed as it would be in row order: rows only read their own."""
        lo, hi = bounds
        *head, tail = group.members
        scope = self.scope

        def swap() -> None:
            for _, name, previous in pairs:
                self.scope.emit(f"{name}, {previous} = {previous}, {name}")

        first = self.fresh("i")
        scope.emit(f"{first} = {lo}")
        for m in head:
            self.emit_member(m, (Expr(first, scope, first),))
        swap()
        var, before = self.fresh("i"), self.fresh("i")
        loop = scope.open(f"for {var} in range({lo} + 1, {hi}):")
        self.scope = loop
        try:
            loop.emit(f"{before} = {var} - 1")
            now, then = (Expr(var, loop, var),), (Expr(before, loop, before),)

            def tail_work(full: tuple[Expr, ...]) -> None:
                with self._previous_rows(pairs):
                    self._store_values(tail.values, then + full[1:])

            for m in head[:-1]:
                self.emit_member(m, now)
            # The next row of the arrays the members read from memory, asked for now: the
            # shared loop below is long arithmetic (the members' and the divisions), which
            # hides the lines' arrival, where the next row's first pass would wait for them
            # (a layernorm's cheap passes got slower with it, so only skewed rows do this).
            row = math.prod(tail.shape[1:])
            for name in self._arrays_read(group) if row else ():
                loop.emit(f"prefetch_span({name}, ({var} + 1) * {row}, {row})")
            self.emit_member(head[-1], now, fused=tail_work)
            for v in tail.values:
                b = self.env.get(v)
                if isinstance(b, StreamedRow):
                    self._emit_stream_row(b, then)
            swap()
        finally:
            scope.close(loop)
            self.scope = scope
        last = self.fresh("i")
        scope.emit(f"{last} = {hi} - 1")
        with self._previous_rows(pairs):
            self.emit_member(tail, (Expr(last, scope, last),))

    @contextlib.contextmanager
    def _previous_rows(self, pairs: Sequence[tuple[Value, str, str]]) -> Iterator[None]:
        """Group-local values read from the buffers of the row before, for the skewed last member."""
        saved = {v: self.env[v] for v, _, _ in pairs}
        try:
            for v, _, previous in pairs:
                b = saved[v]
                assert isinstance(b, RowBuffer)
                self.env[v] = RowBuffer(previous, b.kind, b.n_outer)
            yield
        finally:
            self.env.update(saved)

    def _store_values(self, values: Iterable[Value], idx: tuple[Expr, ...]) -> None:
        """Compute each of ``values`` at ``idx``, remember it there and store it."""
        key = tuple(i.text for i in idx)
        for v in values:
            e = self.compute(v, idx)
            self.memo[(v.id, key)] = e
            self.store(v, idx, e)

    def store(self, v: Value, idx: tuple[Expr, ...], e: Expr) -> None:
        b = self.env.get(v)
        if v.tensor_type.rank == 0:
            name = self.fresh("s")
            self.scope.emit(f"{name} = {e.text}")
            self.env[v] = ScalarBinding(Expr(name, self.scope))
            return
        if isinstance(b, RowBuffer):
            inner = idx[b.n_outer:]
            self.scope.emit(store_text(b.name, [i.text for i in inner] or ["0"], b.kind.store(e.text)))
        elif isinstance(b, ArrayBinding):
            self.scope.emit(store_text(b.name, [i.text for i in idx], b.kind.store(e.text)))
        else:
            raise CompileError(f"internal: no storage for {v.name}")

    # ---- lane reductions (see .lanes) ----

    def _alloc_lane_buffers(self, group: FusionGroup, scope: Scope) -> None:
        """Lanes (and, for values not in memory, a scratch row) for each lane reduction of the
        group, in ``scope``: once per chunk, so that every thread has its own. A reduction of one
        row at a time that fits a block keeps its lanes in registers (see :meth:`lane_rows`) and
        gets no lanes buffer: in a loop body, an unused one would be allocated every iteration."""
        from .lanes import BLOCK, lane_reduction

        for m in group.members:
            ops = list(m.reduces)
            if m.kind == "reduce":
                assert m.op is not None  # a reduce member carries its op
                ops = [m.op]
            for op in ops:
                plan = lane_reduction(op)
                if plan is None:
                    continue
                np_name = "np.float32" if plan.dtype == np.float32 else "np.float64"
                lanes = None
                if plan.ndims > 1 or plan.width > BLOCK:
                    lanes = self.fresh("lanes")
                    scope.emit(f"{lanes} = np.empty({plan.k}, {np_name})")
                scratch = None
                if not isinstance(self.env.get(op.operands[0]), (ArrayBinding, RowBuffer)):
                    scratch = self.fresh("scratch")
                    scope.emit(f"{scratch} = np.empty({max(1, min(plan.width, BLOCK))}, {np_name})")
                self._lane_bufs[id(op)] = (lanes, scratch)

    def lane_buffers(self, op: Op) -> tuple[str | None, str | None]:
        """The lanes and scratch row of a lane reduction (names of probes while planning)."""
        bufs = self._lane_bufs.get(id(op))
        if bufs is None:
            return f"_probeL{id(op)}", f"_probeS{id(op)}"
        return bufs

    def _lanes_of(self, op: Op) -> str:
        lanes = self.lane_buffers(op)[0]
        assert lanes is not None, "a lane reduction over several rows or blocks has a lanes buffer"
        return lanes

    def lane_rows(self, inner: Sequence[int], outer_idx: tuple[Expr, ...], items, body) -> list[Expr]:
        """Lane reductions over ``inner`` (the reduced dims, after ``outer_idx``): emits loops
        over ``inner`` calling ``body(idx)`` (if not None) at each element, feeds each lane
        reduction of ``items`` (``(op, plan, init)``) its operand one innermost row (or block
        of a long row) at a time, straight from the operand's array when it is in memory, else
        through the scratch row, and returns each reduction's result (``init (op) lanes``)."""
        from .lanes import BLOCK

        width = inner[-1]
        direct = [isinstance(self.env.get(op.operands[0]), (ArrayBinding, RowBuffer)) for op, _, _ in items]
        blocked = not all(direct) and width > BLOCK
        # One row, one call: the lanes stay in registers.
        in_registers = len(inner) == 1 and not blocked
        combine = {"add": "({} + {})", "mul": "({} * {})", "max": "rmax({}, {})", "min": "rmin({}, {})"}
        results: list[Expr] = []
        if not in_registers:
            for op, plan, _ in items:
                self.scope.emit(f"lanes_reset({self._lanes_of(op)}, '{plan.op}', {plan.k})")
        with self.loops(inner[:-1]) as mid:
            prefix = outer_idx + mid
            opened: list[tuple[Scope, Scope]] = []

            def open_(header: str) -> Scope:
                child = self.scope.open(header)
                opened.append((self.scope, child))
                self.scope = child
                return child

            if blocked:
                wb, lo, cnt = self.fresh("wb"), self.fresh("lo"), self.fresh("n")
                open_(f"for {wb} in range({-(-width // BLOCK)}):")
                self.scope.emit(f"{lo} = {wb} * {BLOCK}")
                self.scope.emit(f"{cnt} = min({BLOCK}, {width} - {lo})")
                span = f"{lo}, {lo} + {cnt}"
            else:
                lo, cnt, span = "0", str(width), str(width)
            if body is not None or not all(direct):
                var = self.fresh("i")
                child = open_(f"for {var} in range({span}):")
                full = prefix + (Expr(var, child, var),)
                if body is not None:
                    body(full)
                for (op, _plan, _), is_direct in zip(items, direct):
                    # A row in memory is read after this loop has written all of it, within
                    # the current row by construction: no fusion check to log.
                    if not is_direct:
                        x = self.read(op.operands[0], full)
                        offset = f"({var} - {lo})" if blocked else var
                        scratch = self.lane_buffers(op)[1]
                        assert scratch is not None  # allocated for every operand not in memory
                        self.scope.emit(store_text(scratch, [offset], x.text))
                parent, child = opened.pop()
                parent.close(child)
                self.scope = parent
            for (op, plan, init), is_direct in zip(items, direct):
                scratch = self.lane_buffers(op)[1]
                src, start = self._flat_row(op.operands[0], prefix, lo) if is_direct else (scratch, "0")
                if in_registers:
                    acc = self.fresh("acc")
                    row = f"lanes_row({src}, {start}, {cnt}, '{plan.op}', {plan.k})"
                    self.scope.emit(f"{acc} = {combine[plan.op].format(init.text, row)}")
                    results.append(Expr(acc, self.scope))
                else:
                    self.scope.emit(f"lanes_add({self._lanes_of(op)}, {src}, {start}, {cnt}, '{plan.op}', {plan.k})")
            for parent, child in reversed(opened):
                parent.close(child)
                self.scope = parent
        if not in_registers:
            for op, plan, init in items:
                acc = self.fresh("acc")
                total = f"lanes_total({self._lanes_of(op)}, '{plan.op}', {plan.k})"
                self.scope.emit(f"{acc} = {combine[plan.op].format(init.text, total)}")
                results.append(Expr(acc, self.scope))
        return results

    def _flat_row(self, v: Value, prefix: tuple[Expr, ...], lo: str) -> tuple[str, str]:
        """The array holding ``v`` and the flat offset of element ``prefix + (lo,)`` in it."""
        b = self.env[v]
        assert isinstance(b, (ArrayBinding, RowBuffer))  # read from memory only when it is there
        shape = tuple(v.tensor_type.shape)
        if isinstance(b, RowBuffer):
            prefix, shape = prefix[b.n_outer:], shape[b.n_outer:]
        flat = ""
        for x, n in zip(prefix, shape[:-1]):
            flat = x.text if not flat else f"({flat}) * {n} + {x.text}"
        width = shape[-1]
        start = lo if not flat else (f"({flat}) * {width}" if lo == "0" else f"({flat}) * {width} + {lo}")
        return b.name, start

    # ---- fusion checks (used by the planner) ----

    def try_member(self, group: FusionGroup, member: FusionMember, produced: set[Value], same_member: set[Value],
                   new: Iterable[Value] = ()) -> bool:
        """Generate ``member`` into a scratch scope as if it joined ``group`` and check that it
        reads values produced earlier in the group only within the current row (and values of
        its own loop nest only at the very index it computes).

        The scratch scope hangs below the current scope without being one of its statements:
        :meth:`temp` puts a temporary in the deepest scope of its operands, and an operand of
        the real code (a loop-carried scalar, a dynamic_slice start in a while body) must not
        draw a trial temporary out of the scratch into the function, where nothing defines the
        trial's other operands."""
        saved = (self.scope, self._base, dict(self.memo), dict(self.env), self._watch, self._watch_log,
                 dict(self._views), dict(self._view_scopes))
        scratch = Scope(self.scope)
        self.scope = scratch
        self._base = scratch
        self._watch = set(produced) | set(same_member)
        self._watch_log = []
        try:
            outer_idx = []
            for d in group.outer:
                var = self.fresh("i")
                child = self.scope.open(f"for {var} in range({d}):")
                self.scope = child
                outer_idx.append(Expr(var, child, var))
            for v in produced | same_member | set(new):
                b = self.env.get(v)
                if isinstance(b, Lazy) or b is None:
                    kind = self.kind(v)
                    self.env[v] = ArrayBinding(f"_probe{v.id}", kind) if v.tensor_type.rank else ScalarBinding(Expr(f"_probe{v.id}", scratch))
            if member.kind == "elementwise":
                self.emit_member(member, tuple(outer_idx))
            else:
                from .rules import emit_reduce_member

                assert member.op is not None  # a reduce member carries its op
                emit_reduce_member(self, member.op, tuple(outer_idx))
            for v, idx in self._watch_log:
                if v in same_member:
                    return False
                if len(idx) < len(outer_idx) or any(i.var != o.var for i, o in zip(idx, outer_idx)):
                    return False
            return True
        finally:
            (self.scope, self._base, self.memo, self.env, self._watch, self._watch_log,
             self._views, self._view_scopes) = saved
