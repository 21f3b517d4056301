"""Row programs: a float32 row segment of the eager tier run by one native call per thread.

A row segment (:class:`.eager._RowSegment`) computes each row of its values from the same rows
of its operands. With numpy it runs op after op on blocks of rows: every op a Python step, a
numpy call and a fresh block of memory, which on layernorm's 8192x1024 rows is most of its time.
Here the segment becomes a short program for the *row machine*, one native function (an
interpreter of a few opcodes, compiled by numba once per machine with the other
:mod:`.machine_kernels`) that runs the whole segment over a range of rows: for each block of
a few rows, each instruction is one loop over the block, in buffers that stay in the core's
first-level cache: a block is as many rows as fit :data:`BLOCK_BYTES` of all the buffers, and
temporaries whose lives do not overlap share a buffer (layernorm's 7 rows of 1024 elements
became 3, and its blocks one row where they were 4 rows, which made its eager run faster: see
docs/measurements.md). Two threads take half the rows each; no Python runs between blocks.

* **The same bits.** An elementwise opcode's loop body *is* the compiled tier's formula for that
  op on float32 (the rule's own text, from :mod:`.rules`); the file records each opcode's
  formula, and an op becomes an instruction only if its own formula is that one, word for word,
  and its operand and result types are the opcode's.
  Reductions use the compiled tier's lane code (:mod:`.lane_intrinsics`) in the order
  :mod:`.lanes` defines. Broadcasts copy elements. Each opcode is compared with numpy on special
  values before its first use in a process, as the machine kernels are.
* **What it takes.** Float32 values (and booleans between a compare and a select); the
  elementwise ops of :data:`ELEMENTWISE`, their operands of the result's shape or 0-d;
  ``broadcast_in_dim``; ``reduce`` of every dimension but the first with ``add``/``multiply``
  (rows of 33 elements or more: 64 lanes) or ``maximum``/``minimum``. Anything else leaves the
  segment to numpy.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from pjrt_hub.backends.stablehlo import Op, TensorType, Value

if TYPE_CHECKING:
    from .eager import Env, EagerProgram
    from .machine_kernels import Kernels

__all__ = ["ELEMENTWISE", "RowProgram", "formula_key", "may_run", "plan"]

_F, _B = "f32", "i1"
_FLOAT_COMPARE = "compare_type = #stablehlo<comparison_type FLOAT>, comparison_direction = #stablehlo<comparison_direction {}>"
#: Elementwise ops the row machine runs: an opcode each (their position), as ``(name, operand
#: types, result type, properties)``. Booleans (``i1``) live in the machine as float32 0 and 1:
#: compare makes them, select reads them, and none leaves a segment.
ELEMENTWISE: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    *((name, (_F, _F), _F, "") for name in ("stablehlo.add", "stablehlo.subtract", "stablehlo.multiply",
                                           "stablehlo.divide", "stablehlo.maximum", "stablehlo.minimum",
                                           "stablehlo.power")),
    *((name, (_F,), _F, "") for name in ("stablehlo.negate", "stablehlo.abs", "stablehlo.sqrt", "stablehlo.rsqrt",
                                         "stablehlo.exponential", "stablehlo.log", "stablehlo.tanh",
                                         "stablehlo.logistic")),
    ("stablehlo.clamp", (_F, _F, _F), _F, ""),
    *(("stablehlo.compare", (_F, _F), _B, _FLOAT_COMPARE.format(d)) for d in ("EQ", "NE", "GE", "GT", "LE", "LT")),
    ("stablehlo.select", (_B, _F, _F), _F, ""),
)
#: The other opcodes, after the elementwise ones.
GATHER = len(ELEMENTWISE)  # d[r, j] = a[r, map[j]]: broadcasts within a row
REDUCE = {"add": GATHER + 1, "mul": GATHER + 2, "max": GATHER + 3, "min": GATHER + 4}
OPCODES = GATHER + 5
#: Lanes of the row machine's reductions (:data:`.lanes.LANE_BYTES` of float32).
LANES = 64
#: Words of one instruction: opcode, destination slot, three operand slots, an extra word (the
#: index map's slot of a gather, the innermost width of a reduction).
WORDS = 6
#: Bytes of one block's rows of every buffer (inputs, outputs, temporaries, constants): they
#: stay in the core's first-level cache (48 KiB on recent x86) between instructions.
BLOCK_BYTES = 32 << 10

_F32 = np.dtype(np.float32)


# -- formulas ---------------------------------------------------------------------------------


def formula(op: Op) -> tuple[list[tuple[str, str]], str, dict[str, str]] | None:
    """The compiled tier's float32 formula of elementwise ``op`` over operands ``a0, a1, ...``:
    its statements, its result and the constants it names; None if it has none."""
    from .codegen import RULES
    from .eager import formula_text

    rule = RULES.get(op.name)
    if rule is None or rule.elementwise is None:
        return None
    try:
        t, _, result = formula_text(op)
    except Exception:  # noqa: BLE001 - a rule that does not take this op: not an instruction
        return None
    return list(t.stmts), result.text, dict(t.globals)


def formula_key(op: Op) -> str | None:
    """What identifies ``op``'s formula (see :func:`formula`), as the file records it."""
    f = formula(op)
    return None if f is None else repr((f[0], f[1], sorted(f[2].items())))


@functools.lru_cache(maxsize=1)
def _synthetic() -> list[Op]:
    """A float32 op of each elementwise opcode, parsed from text (one function for all)."""
    from .compiler import _front_end

    lines = []
    for i, (name, operand_types, result_type, properties) in enumerate(ELEMENTWISE):
        operands = ", ".join(f"%{t}{k}" for k, t in enumerate(operand_types))
        signature = ", ".join(f"tensor<4x{t}>" for t in operand_types)
        props = f" <{{{properties}}}>" if properties else ""
        lines.append(f"  %r{i} = \"{name}\"({operands}){props} : ({signature}) -> tensor<4x{result_type}>")
    results = ", ".join(f"%r{i}" for i in range(len(ELEMENTWISE)))
    types = ", ".join(f"tensor<4x{e[2]}>" for e in ELEMENTWISE)
    head = "func.func @main(" + ", ".join(f"%{t}{k}: tensor<4x{t}>" for t in (_F, _B) for k in range(3)) + ")"
    text = "\n".join([f"{head} -> ({types}) {{", *lines, f"  return {results} : {types}", "}"])
    _, fn = _front_end(text)
    made = {r: op for op in fn.body.ops for r in op.results}
    return [made[v] for v in fn.body.terminator.operands]  # the op of each result, in order


def table() -> list[str]:
    """The formula key of each elementwise opcode, as the row machine being built runs them."""
    keys = []
    for (name, *_), op in zip(ELEMENTWISE, _synthetic()):
        key = formula_key(op)
        if key is None:
            raise ValueError(f"no float32 formula for {name}")
        keys.append(key)
    return keys


# -- planning ---------------------------------------------------------------------------------


def _count(v: Value) -> int:
    """Elements of one row of ``v``."""
    return math.prod(v.tensor_type.shape[1:])


def _element(v: Value) -> str | None:
    t = v.type
    return t.element_type if isinstance(t, TensorType) else None


class _Slot:
    """A buffer of the row machine: ``count`` elements a row. ``kind`` is ``"in"`` (an operand's
    rows, read in place), ``"out"`` (a value kept whole, written in place), ``"tmp"`` (a
    thread's buffer of one block), ``"const"`` (one block, the same for every block) or
    ``"map"`` (int32 indices)."""

    __slots__ = ("kind", "count", "value", "make")

    def __init__(self, kind: str, count: int, value: Value | None = None, make: Any = None) -> None:
        self.kind, self.count, self.value, self.make = kind, count, value, make


class RowProgram:
    """A row segment as a program for the row machine (see :func:`plan`)."""

    def __init__(self, n: int, block: int, slots: list[_Slot], code: list[list[int]], opcodes: dict[int, Op | None],
                 outputs: list[tuple[Value, int]]) -> None:
        #: The opcodes the program uses, each with an op of the program it stands for (None
        #: for those of no elementwise op), to check it with (see :func:`check`).
        self.opcodes = opcodes
        self.n, self.block, self.slots = n, block, slots
        self.code = np.array(code, np.int64).reshape(-1)
        self.ninstr = len(code)
        self.outputs = outputs
        self.count = np.array([s.count for s in slots], np.int64)
        self.advance = np.array([1 if s.kind in ("in", "out") else 0 for s in slots], np.int64)

    def run(self, env: "Env", kernels: "Kernels", helper: Any) -> bool:
        """Run the program on ``env``'s values, storing its outputs there: False (nothing
        stored) if the machine failed."""
        arrays: dict[int, np.ndarray] = {}  # every slot's array but the threads' own buffers
        base = np.zeros(len(self.slots), np.int64)
        tmp_elements = 0
        for i, slot in enumerate(self.slots):
            if slot.kind == "tmp":
                base[i] = tmp_elements  # an offset into each thread's buffer, for now
                tmp_elements += self.block * slot.count
                continue
            if slot.kind == "in":
                assert slot.value is not None
                x = env[slot.value]
                if x.dtype != _F32 or not x.flags.c_contiguous:
                    x = np.ascontiguousarray(x, _F32)
            elif slot.kind == "out":
                assert slot.value is not None
                x = np.empty(tuple(slot.value.tensor_type.shape), _F32)
            else:
                x = slot.make(env)
            arrays[i] = x
            base[i] = x.ctypes.data

        def part(r0: int, r1: int) -> int:
            scratch = np.empty(max(tmp_elements, 1), _F32)
            mine = base.copy()
            for i, slot in enumerate(self.slots):
                if slot.kind == "tmp":
                    mine[i] = scratch.ctypes.data + 4 * int(base[i])
            pointers = np.empty(len(self.slots), np.int64)
            lanes = np.empty(LANES, _F32)
            return kernels.row_machine(self.code, self.ninstr, mine, self.count, self.advance, len(self.slots),
                                       pointers, r0, r1, self.block, lanes)

        if any(status != 0 for status in helper.split(part, self.n, (self.n // 2 // self.block) * self.block)):
            return False
        for value, index in self.outputs:
            env[value] = arrays[index]  # of the value's shape: made so above
        return True


def _row_index_map(op: Op) -> np.ndarray:
    """Which element of its operand's row each element of a row of ``broadcast_in_dim`` op's
    result is (its operand read by rows: dimension 0 to dimension 0), as :func:`.eager`'s step
    places them: the operand's dimensions in the order of ``broadcast_dimensions``, each where
    that says, the others repeated."""
    from .eager import broadcast_layout

    (x,), r = op.operands, op.result
    shape, out = tuple(x.tensor_type.shape), tuple(r.tensor_type.shape)
    view, order = broadcast_layout(op)
    rows = np.arange(math.prod(shape[1:]), dtype=np.int64).reshape((1,) + shape[1:])
    if order is not None:
        rows = np.transpose(rows, order)
    return np.ascontiguousarray(np.broadcast_to(rows.reshape([1] + view[1:]), (1,) + out[1:]), np.int32).reshape(-1)


def may_run(ops: Sequence[Op]) -> bool:
    """Whether the row machine may run segment ``ops``: every value float32 or boolean (what
    :func:`plan` checks first; it may still refuse an op)."""
    return all(_element(v) in (_F, _B) for op in ops for v in (*op.operands, *op.results))


def plan(program: "EagerProgram", ops: Sequence[Op], outputs: Sequence[Value], table_keys: Sequence[str]
         ) -> RowProgram | None:
    """The row program of segment ``ops`` (its values read after it: ``outputs``), for a row
    machine whose elementwise opcodes have the formula keys ``table_keys``; None where an op or
    a value is not one it runs (the segment then runs on numpy)."""
    from . import lanes as _lanes
    from .eager import Env, _row_reads
    from .rules import simple_reducer

    n = ops[0].results[0].tensor_type.shape[0]
    inside = {r for op in ops for r in op.results}
    if not may_run(ops):
        return None
    if any(_element(v) != _F for v in outputs):
        return None  # booleans live in the machine as floats
    block = 1  # rows of a block: set once the slots are known (the closures below read it then)
    slots: list[_Slot] = []
    where: dict[Value, int] = {}
    code: list[list[int]] = []
    opcodes: dict[int, Op | None] = {}
    keys = {key: i for i, key in enumerate(table_keys)}
    kept = set(outputs)

    def new(kind: str, count: int, value: Value | None = None, make: Any = None) -> int:
        slots.append(_Slot(kind, count, value, make))
        return len(slots) - 1

    def operand(v: Value, count: int) -> int | None:
        """The slot of operand ``v`` of an instruction on rows of ``count`` elements."""
        if v in where:
            return where[v]
        if v in inside:
            return None
        shape = tuple(v.tensor_type.shape)
        if not shape:  # 0-d, taken whole: one block of it
            return new("const", count, v, lambda env, v=v, c=count: np.full(block * c, env[v], _F32))
        if shape[0] == n and _count(v) == count:
            where[v] = new("in", count, v)
            return where[v]
        return None

    def result(v: Value) -> int:
        where[v] = new("out" if v in kept else "tmp", _count(v), v)
        return where[v]

    for op in ops:
        reads = _row_reads(op)
        if reads is None:
            return None
        if op.name == "stablehlo.broadcast_in_dim":
            (x,), r = op.operands, op.result
            step = program._step(op)
            if reads == ["whole"]:
                # The same for every row: one block of it, made by the op's own numpy step.
                def make(env: "Env", x: Value = x, r: Value = r, step: Any = step) -> np.ndarray:
                    local = Env(None, None, rows=block)
                    local[x] = env[x]
                    step(local)
                    return np.ascontiguousarray(local[r], _F32).reshape(-1)

                if r in kept:
                    return None
                where[r] = new("const", _count(r), r, make)
                continue
            a = operand(x, _count(x))
            if a is None:
                return None
            index = _row_index_map(op)
            if index.size == _count(x) and np.array_equal(index, np.arange(index.size)) and r not in kept:
                where[r] = a  # the same elements: the operand's buffer
                continue
            m = new("map", 0, make=lambda env, index=index: index)
            d = result(r)
            code.append([GATHER, d, a, a, a, m])
            opcodes[GATHER] = None
            continue
        if op.name == "stablehlo.reduce":
            if len(op.results) != 1:
                return None
            x, init = op.operands
            r = op.result
            if _element(x) != _F:
                return None
            shape = tuple(x.tensor_type.shape)
            dims = sorted(int(d) for d in op.attr("dimensions"))
            if not dims or dims != list(range(1, len(shape))) or _count(x) == 0:
                return None  # (no dimensions: a copy, whose rows are not the reduced rows)
            simple = simple_reducer(op.regions[0], 1)
            if simple in ("add", "mul"):
                lane_plan = _lanes.lane_reduction(op)
                if lane_plan is None or lane_plan.k != LANES:
                    return None
            elif simple not in ("max", "min"):
                return None
            a = operand(x, _count(x))
            i = operand(init, 1)
            if a is None or i is None:
                return None
            d = result(r)
            code.append([REDUCE[simple], d, a, i, i, shape[-1]])
            opcodes[REDUCE[simple]] = None
            continue
        key = formula_key(op)
        opcode = keys.get(key) if key is not None else None
        if opcode is None or opcode >= len(ELEMENTWISE):
            return None
        _, operand_types, result_type, _ = ELEMENTWISE[opcode]
        if tuple(_element(v) for v in op.operands) != operand_types or _element(op.result) != result_type:
            return None  # the same formula text on other types (an f64 add)
        count = _count(op.result)
        args = [operand(v, count) for v in op.operands]
        if any(a is None for a in args):
            return None
        d = result(op.result)
        args += [args[0]] * (3 - len(args))
        code.append([opcode, d, *args, 0])  # type: ignore[list-item]
        opcodes.setdefault(opcode, op)
    outs = []
    for v in outputs:
        s = where.get(v)
        if s is None or slots[s].kind != "out":
            return None  # kept whole but not computed here (an operand's alias): numpy's
        outs.append((v, s))
    if not code:
        return None
    slots, code, outs = _share_buffers(slots, code, outs)
    row_bytes = 4 * sum(s.count for s in slots if s.kind != "map")
    block = max(1, BLOCK_BYTES // max(row_bytes, 1))
    return RowProgram(n, block, slots, code, opcodes, outs)


def _share_buffers(slots: list[_Slot], code: list[list[int]], outs: list[tuple[Value, int]]
                   ) -> tuple[list[_Slot], list[list[int]], list[tuple[Value, int]]]:
    """The program with its temporaries in as few buffers as their lifetimes allow: a value
    takes the buffer of one of the same width that no later instruction reads, never one of
    its own instruction's operands (a loop whose destination is its operand would not be
    vectorised)."""
    last: dict[int, int] = {}
    for q, (opcode, _, *operands, extra) in enumerate(code):
        for s in operands + ([extra] if opcode == GATHER else []):
            last[s] = q
    kept = [i for i, s in enumerate(slots) if s.kind != "tmp"]
    new_slots = [slots[i] for i in kept]
    renamed = {old: new for new, old in enumerate(kept)}
    free: dict[int, list[int]] = {}  # width -> buffers no later instruction reads
    new_code = []
    for q, (opcode, d, *operands, extra) in enumerate(code):
        if slots[d].kind == "tmp":
            spare = free.get(slots[d].count)
            if spare:
                renamed[d] = spare.pop()
            else:
                new_slots.append(slots[d])
                renamed[d] = len(new_slots) - 1
        read = operands + ([extra] if opcode == GATHER else [])
        new_code.append([opcode, renamed[d], *(renamed[s] for s in operands),
                         renamed[extra] if opcode == GATHER else extra])
        for s in {d, *read}:
            if slots[s].kind == "tmp" and last.get(s, -1) <= q:
                free.setdefault(slots[s].count, []).append(renamed[s])
    return new_slots, new_code, [(v, renamed[s]) for v, s in outs]


# -- the machine itself (numba, when it is built) ---------------------------------------------


def source(keys: Sequence[str]) -> str:
    """The row machine's Python source: ``machine(code, ninstr, base, count, advance, nslots,
    pointers, r_start, r_stop, block, lanes)`` runs the program ``code`` on rows
    ``[r_start, r_stop)``, ``block`` rows at a time."""
    import re

    lines = [
        "def machine(code, ninstr, base, count, advance, nslots, pointers, r_start, r_stop, block, lanes):",
        "    wide_vectors()",
        "    r0 = r_start",
        "    while r0 < r_stop:",
        "        nr = min(block, r_stop - r0)",
        "        for s in range(nslots):",
        "            pointers[s] = base[s] + advance[s] * r0 * count[s] * 4",
        "        for q in range(ninstr):",
        f"            w = q * {WORDS}",
        "            opcode = code[w]",
        "            ds = code[w + 1]",
        "            d = f32_at(pointers[ds])",
        "            xa = f32_at(pointers[code[w + 2]])",
        "            xb = f32_at(pointers[code[w + 3]])",
        "            xc = f32_at(pointers[code[w + 4]])",
        "            extra = code[w + 5]",
        "            size = nr * count[ds]",
    ]
    glob: dict[str, str] = {}
    for opcode, ((name, operand_types, _, _), key) in enumerate(zip(ELEMENTWISE, keys)):
        arity = len(operand_types)
        stmts, result, constants = eval(key, {})  # (stmts, result, sorted constants)
        rename = {c: f"{c}_{opcode}" for c, _ in constants}
        rename.update({s: f"{s}_{opcode}" for s, _ in stmts})

        def renamed(text: str, rename: dict[str, str] = rename) -> str:
            return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: rename.get(m.group(0), m.group(0)), text)

        for c, text in constants:
            glob[rename[c]] = text
        lines += [f"            {'if' if opcode == 0 else 'elif'} opcode == {opcode}:  # {name}",
                  "                for i in range(size):"]
        lines += [f"                    a{k} = {('xa', 'xb', 'xc')[k]}[i]" for k in range(arity)]
        lines += [f"                    {renamed(s)} = {renamed(t)}" for s, t in stmts]
        lines += [f"                    d[i] = {renamed(result)}"]
    lines += [
        f"            elif opcode == {GATHER}:",
        "                cin = count[code[w + 2]]",
        "                cout = count[ds]",
        "                if cin == 1:  # one value a row, repeated: a fill that vectorises",
        "                    for r in range(nr):",
        "                        v = xa[r]",
        "                        for j in range(cout):",
        "                            d[r * cout + j] = v",
        "                else:",
        "                    index = i32_at(pointers[extra])",
        "                    for r in range(nr):",
        "                        for j in range(cout):",
        "                            d[r * cout + j] = xa[r * cin + index[j]]",
    ]
    steps = {"add": "init + total", "mul": "init * total", "max": "fmaximum(init, total)",
             "min": "fminimum(init, total)"}
    for op, opcode in REDUCE.items():
        lines += [
            f"            elif opcode == {opcode}:",
            "                cin = count[code[w + 2]]",
            "                init = xb[0]",
            "                for r in range(nr):",
            f"                    lanes_reset(lanes, {op!r}, {LANES})",
            "                    for s0 in range(r * cin, (r + 1) * cin, extra):",
            f"                        lanes_add(lanes, xa, s0, extra, {op!r}, {LANES})",
            f"                    total = lanes_total(lanes, {op!r}, {LANES})",
            f"                    d[r] = {steps[op]}",
        ]
    lines += ["        r0 += nr"]
    head = [f"{name} = {text}" for name, text in sorted(glob.items())]
    return "\n".join(head + [""] + lines) + "\n"


def compile_machine() -> tuple[str, bytes, dict[str, Any]]:
    """numba's object code for the row machine, its symbol, and what its file entry records
    (the formula key of each elementwise opcode)."""
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    from . import support
    from .machine_kernels import ROW_MACHINE, _object_code

    @intrinsic
    def f32_at(typingctx, address):
        sig = types.CPointer(types.float32)(types.int64)

        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], ir.PointerType(ir.FloatType()))

        return sig, codegen

    @intrinsic
    def i32_at(typingctx, address):
        sig = types.CPointer(types.int32)(types.int64)

        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], ir.PointerType(ir.IntType(32)))

        return sig, codegen

    keys = table()
    scope: dict[str, Any] = {name: getattr(support, name) for name in support.__all__}
    scope.update({"f32_at": f32_at, "i32_at": i32_at})
    exec(compile(source(keys), "<row machine>", "exec"), scope)
    i64, p64 = types.int64, types.CPointer(types.int64)
    signature = types.void(p64, i64, p64, p64, p64, i64, p64, i64, i64, i64, types.CPointer(types.float32))
    symbol, obj = _object_code(ROW_MACHINE, scope["machine"], signature)
    return symbol, obj, {"table": keys}


# -- checks -------------------------------------------------------------------------------------


def check(kernels: "Kernels", opcode: int, rng: np.random.Generator | None = None, random: int = 0,
          example: Op | None = None) -> bool:
    """Whether ``opcode`` of the loaded row machine gives numpy's bits (the eager tier's own
    formulas) on special values, every pair or triple of them, and ``random`` random patterns.
    An elementwise opcode is compared with the formula of ``example`` (an op of a program that
    has that opcode's formula), else with that of an op parsed for the purpose."""
    from .machine_kernels import _specials

    s = _specials()
    if opcode < GATHER:
        operand_types = ELEMENTWISE[opcode][1]
        arity = len(operand_types)
        grid = np.meshgrid(*([s] * arity), indexing="ij") if arity < 3 else np.meshgrid(s[::3], s[1::3], s[2::3],
                                                                                        indexing="ij")
        operands = [g.reshape(-1) for g in grid]
        if rng is not None and random:
            extra = [rng.integers(0, 1 << 32, random, dtype=np.uint64).astype(np.uint32).view(np.float32)
                     for _ in range(arity)]
            operands = [np.concatenate([o, e]) for o, e in zip(operands, extra)]
        # Booleans: the signs of the values (numpy bool for the formula, 0 and 1 for the machine).
        operands = [o > 0 if t == _B else o for o, t in zip(operands, operand_types)]
        return _check_elementwise(kernels, opcode, example or _synthetic()[opcode], operands)
    if opcode == GATHER:
        return _check_gather(kernels)
    op = next(o for o, c in REDUCE.items() if c == opcode)
    return _check_reduce(kernels, op, s, rng, random)


def _single(opcode: int, counts: Sequence[int], kinds: Sequence[str], extra: int, rows: int,
            arrays: Sequence[np.ndarray], kernels: "Kernels", block: int = 3) -> np.ndarray | None:
    """Run one instruction (destination slot 0, operands 1...) over ``rows`` rows."""
    code = np.array([opcode, 0, *(list(range(1, len(arrays))) + [1, 1])[:3], extra], np.int64)
    if opcode == GATHER:
        code[5] = len(arrays) - 1
    base = np.array([a.ctypes.data for a in arrays], np.int64)
    count = np.array(counts, np.int64)
    advance = np.array([1 if k == "row" else 0 for k in kinds], np.int64)
    ok = kernels.row_machine(code, 1, base, count, advance, len(arrays), np.empty(len(arrays), np.int64), 0,
                             rows, block, np.empty(LANES, _F32))
    return arrays[0] if ok == 0 else None


def _check_elementwise(kernels: "Kernels", opcode: int, op: Op, operands: list[np.ndarray]) -> bool:
    from .eager import formula_function
    from .machine_kernels import _bits

    size, arity = operands[0].size, len(operands)
    out = np.empty(size, _F32)
    got = _single(opcode, [1] * (arity + 1), ["row"] * (arity + 1), 0, size,
                  [out, *[np.ascontiguousarray(o, _F32) for o in operands]], kernels, block=37)
    if got is None:
        return False
    with np.errstate(all="ignore"):
        (want,) = formula_function(op)(*operands)
    return bool(np.array_equal(_bits(got), _bits(np.asarray(want, _F32))))


def _check_gather(kernels: "Kernels") -> bool:
    rows, cout = 7, 12
    for cin, index in ((5, np.array([4, 0, 0, 3, 1, 2, 2, 2, 4, 1, 0, 3], np.int32)), (1, np.zeros(12, np.int32))):
        x = np.arange(rows * cin, dtype=_F32) - 3.5
        out = np.empty(rows * cout, _F32)
        got = _single(GATHER, [cout, cin, 0], ["row", "row", "map"], 0, rows, [out, x, index], kernels)
        if got is None or not np.array_equal(got.reshape(rows, cout), x.reshape(rows, cin)[:, index]):
            return False
    return True


def _check_reduce(kernels: "Kernels", op: str, s: np.ndarray, rng: np.random.Generator | None, random: int) -> bool:
    from .lanes import float_extreme, reduce_lanes
    from .machine_kernels import _bits

    for width, per in ((40, 40), (100, 300)):
        # Specials in every lane and order (a fixed shuffle: numpy.random is slow to import),
        # and rows of finite values whose sums the order changes.
        picks = ((np.arange(s.size * per) * 7919 + width) % s.size).reshape(s.size, per)
        x = s[picks]
        wave = np.sin(np.arange(16 * per, dtype=np.float64) * 0.7).reshape(16, per) * 10.0 ** np.arange(-8, 8)[:, None]
        finite = (wave * 1e-10 + 1 if op == "mul" else wave).astype(_F32)
        x = np.ascontiguousarray(np.concatenate([x, finite]), _F32)
        if rng is not None and random:
            bits = rng.integers(0, 1 << 32, (max(1, random // per), per), dtype=np.uint64).astype(np.uint32)
            x = np.ascontiguousarray(np.concatenate([x, bits.view(np.float32)]))
        init = np.array([-0.0 if op == "add" else 1.5], _F32)
        out = np.empty(x.shape[0], _F32)
        got = _single(REDUCE[op], [1, per, 0], ["row", "row", "const"], width, x.shape[0], [out, x, init], kernels)
        if got is None:
            return False
        with np.errstate(all="ignore"):
            if op in ("add", "mul"):
                want = reduce_lanes(x.reshape(x.shape[0], per // width, width), 2, op, init[0])
            else:  # init is not a zero: numpy's maximum has no tie of signed zeros to break
                want = (np.maximum if op == "max" else np.minimum)(init[0], float_extreme(x, op))
        if not np.array_equal(_bits(got), _bits(want)):
            return False
    return True
