"""Deciding what to materialize and which loop nests to fuse, for one block.

Correctness does not depend on this module: a lazy value read where no array exists is simply
recomputed. The plan decides where arrays pay off (a value needed as an array, or expensive and
read by several loop nests) and groups consecutive loop nests that can share an outer loop,
checking each candidate by generating it (``Lowering.try_member``), so the check is exactly
what will be emitted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

from pjrt_hub.backends.stablehlo import Block, Op, TensorType, Value

from .codegen import RULES, Lazy, Lowering, FusionGroup, FusionMember, unsupported_op

__all__ = ["BlockPlan", "Reader", "plan_block", "group_local_values", "natural_outer", "reduce_member"]

#: Who reads a value: an op of the block, the block's terminator, or an op in a region nested
#: in one of the block's ops.
Reader = Op | Literal["term", "region"]


@dataclass(frozen=True)
class BlockPlan:
    """What :func:`plan_block` decided for one block."""

    #: The block's kernels in program order: fusion groups, and ops lowered by their own rule.
    items: tuple[FusionGroup | Op, ...]
    #: Each value read in the block (its own values and outer ones) -> its readers there.
    readers: Mapping[Value, tuple[Reader, ...]]
    #: Each lazy value of the block -> the loop nests that read it: the ops (not lazy
    #: themselves) that read it through a chain of lazy ops, or the value itself when it is
    #: materialized.
    roots: Mapping[Value, frozenset[Op | Value]]

#: Longest chain of lazy ops read through before one is materialized.
_MAX_CHAIN = 60


def _is_lazy(op: Op) -> bool:
    rule = RULES.get(op.name)
    return rule is not None and (rule.elementwise is not None or rule.index is not None)


def _rank(v: Value) -> int:
    return len(v.type.shape) if isinstance(v.type, TensorType) else 0


def _defined_in(region: Block) -> set[Value]:
    """The values a region defines: its arguments, its ops' results, and theirs in nested regions."""
    inside = set(region.args)
    for op in region.walk():
        inside.update(op.results)
        for nested in op.regions:
            inside.update(nested.args)
    return inside


def plan_block(ctx: Lowering, block: Block) -> BlockPlan:
    """Plan ``block``: its lazy values are bound in ``ctx`` (fusion checks read them)."""
    ops = block.ops[:-1]
    term = block.terminator
    users: dict[Value, list[Reader]] = defaultdict(list)
    for op in ops:
        rule = RULES.get(op.name)
        if rule is None:
            raise unsupported_op(op)
        for o in op.operands:
            users[o].append(op)
        for region in op.regions:
            # Outer values read inside: values the region defines get their readers when it
            # is planned itself.
            inside = _defined_in(region)
            for inner in region.walk():
                for o in inner.operands:
                    if o not in inside:
                        users[o].append("region")
        if _is_lazy(op):
            for i, r in enumerate(op.results):
                ctx.define_lazy(r, Lazy(op, i))
    for o in term.operands:
        users[o].append("term")

    # Values that must become arrays in this block.
    materialize: set[Value] = set()
    for op in ops:
        if not _is_lazy(op):
            continue
        for r in op.results:
            for u in users[r]:
                if isinstance(u, str):  # the terminator, or a nested region
                    materialize.add(r)
                elif not _is_lazy(u) and u.name != "stablehlo.reduce" and not RULES[u.name].lazy_operands:
                    if _rank(r) > 0:
                        materialize.add(r)

    # Per-element cost of recomputing each lazy value where it is read, and the depth of its
    # expression tree: reading a value recurses through its lazy operands, so a very long chain
    # is cut by materializing a link (Python's recursion limit, and numba's compile time for
    # giant expressions).
    cost: dict[Value, int] = {}
    depth: dict[Value, int] = {}
    for op in ops:
        if _is_lazy(op):
            lazy_operands = [o for o in op.operands if o not in materialize]
            op_cost = RULES[op.name].cost + sum(cost.get(o, 0) for o in lazy_operands)
            op_depth = 1 + max((depth.get(o, 0) for o in lazy_operands), default=0)
            for r in op.results:
                if op_depth > _MAX_CHAIN:
                    materialize.add(r)
                    cost[r], depth[r] = 0, 0
                else:
                    cost[r], depth[r] = op_cost, op_depth

    # Which loop nests (roots) read each lazy value; expensive values read by several are
    # materialized once instead.
    roots: dict[Value, frozenset[Op | Value]] = {}
    limit = ctx.options.recompute_limit
    for op in reversed(ops):
        if not _is_lazy(op):
            continue
        for r in op.results:
            if r in materialize:
                roots[r] = frozenset([r])
                continue
            nests: set[Op | Value] = set()
            for u in users[r]:
                if isinstance(u, Op) and _is_lazy(u):
                    for ur in u.results:
                        nests |= roots.get(ur, frozenset())
                elif isinstance(u, Op):
                    nests.add(u)
            if len(nests) >= 2 and cost[r] >= limit and _rank(r) > 0:
                materialize.add(r)
                roots[r] = frozenset([r])
            else:
                roots[r] = frozenset(nests)
    # Kernels in program order, fused into groups where the outer loops can be shared.
    items: list[FusionGroup | Op] = []
    group: FusionGroup | None = None
    for op in ops:
        if _is_lazy(op):
            members = [FusionMember("elementwise", [r], shape=tuple(r.tensor_type.shape)) for r in op.results if r in materialize]
        elif op.name == "stablehlo.reduce":
            members = [reduce_member(op)]
        else:
            if group is not None:
                items.append(group)
                group = None
            items.append(op)
            continue
        for m in members:
            group = _add_member(ctx, items, group, m)
    if group is not None:
        items.append(group)
    return BlockPlan(tuple(items), {v: tuple(us) for v, us in users.items()}, roots)


def reduce_member(op: Op) -> FusionMember:
    """The loop nest of one ``reduce``, over its operand's shape."""
    shape = tuple(op.operands[0].tensor_type.shape)
    return FusionMember("reduce", list(op.results), op=op, shape=shape)


def natural_outer(m: FusionMember) -> tuple[int, ...]:
    """The outer loops a member could share with others: all of an elementwise member's dims,
    a reduce's dims before the first reduced one."""
    if m.kind == "elementwise":
        return m.shape
    assert m.op is not None  # a reduce member carries its op
    dims = set(m.op.attr("dimensions") or ())
    out = []
    for d, size in enumerate(m.shape):
        if d in dims:
            break
        out.append(size)
    return tuple(out)


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for x, y in zip(a, b):
        if x != y:
            break
        out.append(x)
    return tuple(out)


def _add_member(ctx: Lowering, items: list[FusionGroup | Op], group: FusionGroup | None, m: FusionMember) -> FusionGroup:
    """Fuse ``m`` into ``group`` if a generated trial passes the fusion check (into the last
    member's loop nest, else under shared outer loops); otherwise close ``group`` (appended to
    ``items``) and start a new one. Returns the group now open."""
    natural = natural_outer(m)
    if group is None:
        return FusionGroup(natural, [m])
    produced = {v for mm in group.members for v in mm.values}
    last = group.members[-1]
    # Same loop nest as the previous elementwise member: shares loads and temporaries.
    if m.kind == "elementwise" and last.kind == "elementwise" and last.shape == m.shape and m.shape and not last.reduces:
        merged = FusionMember("elementwise", last.values + m.values, shape=m.shape)
        trial = FusionGroup(group.outer, group.members[:-1])
        earlier = produced - set(last.values)
        if ctx.try_member(trial, merged, earlier, set(last.values), new=set(m.values)):
            group.members[-1] = merged
            return group
    # A reduction over every inner dim of the previous elementwise loop nest: accumulate in it.
    if (m.kind == "reduce" and m.op is not None and last.kind == "elementwise" and last.shape == m.shape and group.outer
            and natural == group.outer and m.op.attr("dimensions")
            and set(m.op.attr("dimensions")) == set(range(len(natural), len(m.shape)))):
        merged = FusionMember("elementwise", last.values + m.values, shape=last.shape, reduces=last.reduces + [m.op])
        trial = FusionGroup(group.outer, group.members[:-1])
        earlier = produced - set(last.values)
        if ctx.try_member(trial, merged, earlier, set(last.values), new=set(m.values)):
            group.members[-1] = merged
            return group
    outer = _common_prefix(group.outer, natural)
    if outer and ctx.try_member(FusionGroup(outer, group.members), m, produced, set(), new=set(m.values)):
        group.outer = outer
        group.members.append(m)
        return group
    items.append(group)
    return FusionGroup(natural, [m])


def group_local_values(group: FusionGroup, readers: Mapping[Value, Sequence[Reader]],
                       roots: Mapping[Value, frozenset[Op | Value]]) -> set[Value]:
    """Member values nothing outside the group reads: they get row buffers, not arrays.

    ``readers`` and ``roots`` are those of the plans of the block of the group and of the blocks
    it is nested in (:attr:`Lowering.readers`)."""
    if not group.outer:
        return set()
    members = {v for m in group.members for v in m.values}
    reduce_ops = {m.op for m in group.members if m.kind == "reduce" and m.op is not None}
    reduce_ops |= {op for m in group.members for op in m.reduces}
    inside: set[Op | Value] = {*members, *reduce_ops}
    local = set()
    for v in members:
        ok = True
        for u in readers.get(v, ()):
            if isinstance(u, str):  # the terminator, or a nested region
                ok = False
            elif u in reduce_ops:
                continue
            elif _is_lazy(u):
                for r in u.results:
                    if not roots.get(r, frozenset()) <= inside:
                        ok = False
            else:
                ok = False
            if not ok:
                break
        if ok and len(v.tensor_type.shape) >= len(group.outer):
            local.add(v)
    return local
