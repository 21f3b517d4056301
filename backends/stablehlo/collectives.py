"""The collective ops of StableHLO as plain data: who talks to whom, and what moves.

A backend that runs replicas or partitions needs three things from a collective op: its kind,
how the StableHLO process grid splits into process groups (``replica_groups``,
``channel_handle`` and ``use_global_device_ids``, as the spec's "Parallel execution" section
defines them), and the op's dimensions. :func:`describe` reads them off an :class:`~.ir.Op`
into a :class:`Collective`, which the host runtime executes without knowing the IR.

Processes are numbered by their *flattened id*, ``replica_id * num_partitions +
partition_id``: the order of the device assignment's rows and columns, which is also the order
of a PJRT execution's argument lists. The four grouping strategies of the spec
(``cross_replica``, ``cross_partition``, ``cross_replica_and_partition``, ``flattened_ids``)
become groups of those ids in :meth:`Collective.process_groups`; an empty ``replica_groups``
means every process of the strategy, as XLA reads it.

:func:`reduction_kind` recognises the reduction regions every engine knows (a single ``add``,
``multiply``, ``maximum``, ``minimum``, ``and``, ``or`` or ``xor`` of the two arguments), so that
a runtime may use a fast path; any other region stays the backend's to evaluate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, NoReturn

import numpy as np

from .ir import Block, Module, Op, OpaqueAttr, TensorType

__all__ = [
    "COLLECTIVE_OPS",
    "Collective",
    "CollectiveError",
    "PROCESS_ID_OPS",
    "describe",
    "reduction_kind",
    "uses_collectives",
]

#: Ops that exchange data between processes.
COLLECTIVE_OPS = frozenset({
    "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.reduce_scatter",
    "stablehlo.all_to_all", "stablehlo.collective_permute", "stablehlo.collective_broadcast",
})
#: Ops that read which process runs them.
PROCESS_ID_OPS = frozenset({"stablehlo.replica_id", "stablehlo.partition_id"})

_CHANNEL = re.compile(r"handle\s*=\s*(-?\d+)")

#: Region ops a runtime can map to one reduction, by element class.
_REDUCTIONS = {
    "stablehlo.add": "sum", "stablehlo.multiply": "prod", "stablehlo.maximum": "max",
    "stablehlo.minimum": "min", "stablehlo.and": "and", "stablehlo.or": "or", "stablehlo.xor": "xor",
}


class CollectiveError(ValueError):
    """A collective's groups do not fit the process grid (raised with the reason)."""


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective op, as data. ``key`` identifies the op within its program (the backends
    number them), so that the processes running one program meet at the same op."""

    #: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
    #: ``collective_permute`` or ``collective_broadcast``.
    kind: str
    key: int
    #: ``replica_groups`` as written (rows of ids), or the source-target pairs of a permute.
    groups: tuple[tuple[int, ...], ...]
    channel_id: int
    use_global_device_ids: bool
    #: The gather, scatter, split or concat dimension (-1 where the op has none).
    dimension: int = -1
    concat_dimension: int = -1
    split_count: int = 0
    #: ``sum``, ``prod``, ``max``, ``min``, ``and``, ``or``, ``xor``, or None for another region.
    reduction: str | None = None
    #: Element dtypes and shapes of the operands and results.
    operand_dtypes: tuple[np.dtype, ...] = ()
    operand_shapes: tuple[tuple[int, ...], ...] = ()
    result_shapes: tuple[tuple[int, ...], ...] = ()
    #: Where the op is in the program text, for error messages.
    where: str = ""

    @property
    def strategy(self) -> str:
        """The spec's grouping strategy for this op."""
        if self.kind in ("all_to_all", "collective_permute", "collective_broadcast"):
            return "cross_partition" if self.channel_id > 0 else "cross_replica"
        if self.channel_id <= 0:
            return "cross_replica"
        return "flattened_ids" if self.use_global_device_ids else "cross_replica_and_partition"

    def describe(self) -> str:
        return f"stablehlo.{self.kind}{f' at {self.where}' if self.where else ''}"

    def process_groups(self, num_replicas: int, num_partitions: int) -> tuple[tuple[int, ...], ...]:
        """The process groups as flattened ids (for a permute: (source, target) pairs).

        Raises :class:`CollectiveError` when the groups do not fit the grid: ids out of range or
        repeated, or (for the ops whose groups must cover the grid) ids left out.
        """
        strategy = self.strategy
        size = {"cross_replica": num_replicas, "cross_partition": num_partitions,
                "cross_replica_and_partition": num_replicas,
                "flattened_ids": num_replicas * num_partitions}[strategy]
        rows = [row for row in self.groups if row]
        if self.kind == "collective_permute":
            return self._permute_pairs(rows, strategy, size, num_replicas, num_partitions)
        if not rows:
            rows = [tuple(range(size))]
        seen: set[int] = set()
        for row in rows:
            for i in row:
                if not 0 <= i < size:
                    raise CollectiveError(
                        f"{self.describe()}: id {i} in replica_groups is out of range for "
                        f"{strategy} over {size} (num_replicas={num_replicas}, num_partitions={num_partitions})")
                if i in seen:
                    raise CollectiveError(f"{self.describe()}: id {i} appears twice in replica_groups {list(map(list, rows))}")
                seen.add(i)
        if self.kind != "collective_broadcast" and len(seen) != size:
            missing = sorted(set(range(size)) - seen)
            raise CollectiveError(
                f"{self.describe()}: replica_groups {list(map(list, rows))} leave out {missing}; "
                f"the groups of {strategy} must cover all {size} ids")
        if len({len(row) for row in rows}) > 1:
            raise CollectiveError(f"{self.describe()}: replica_groups {list(map(list, rows))} have different sizes")
        P = num_partitions
        groups: list[tuple[int, ...]] = []
        if strategy == "cross_replica":
            for row in rows:
                for p in range(P):
                    groups.append(tuple(r * P + p for r in row))
        elif strategy == "cross_partition":
            for row in rows:
                for r in range(num_replicas):
                    groups.append(tuple(r * P + p for p in row))
        elif strategy == "cross_replica_and_partition":
            for row in rows:
                groups.append(tuple(r * P + p for p in range(P) for r in row))
        else:
            groups = [tuple(row) for row in rows]
        return tuple(groups)

    def _permute_pairs(self, rows, strategy: str, size: int, num_replicas: int,
                       num_partitions: int) -> tuple[tuple[int, ...], ...]:
        sources: set[int] = set()
        targets: set[int] = set()
        for row in rows:
            if len(row) != 2:
                raise CollectiveError(f"{self.describe()}: source_target_pairs rows must be pairs, got {list(row)}")
            s, t = row
            for i in (s, t):
                if not 0 <= i < size:
                    raise CollectiveError(f"{self.describe()}: id {i} in source_target_pairs is out of range "
                                          f"for {strategy} over {size}")
            if s in sources or t in targets:
                raise CollectiveError(f"{self.describe()}: source_target_pairs {list(map(list, rows))} repeat a "
                                      "source or a target")
            sources.add(s)
            targets.add(t)
        P = num_partitions
        pairs = []
        if strategy == "cross_replica":
            for p in range(P):
                pairs += [(s * P + p, t * P + p) for s, t in rows]
        else:
            for r in range(num_replicas):
                pairs += [(r * P + s, r * P + t) for s, t in rows]
        return tuple(pairs)


def reduction_kind(block: Block) -> str | None:
    """The reduction a two-argument region computes, if it is one every engine knows."""
    if len(block.args) != 2 or len(block.ops) != 2:
        return None
    op, ret = block.ops
    if ret.operands != op.results or op.name not in _REDUCTIONS:
        return None
    if {v.id for v in op.operands} != {a.id for a in block.args} or len(set(op.operands)) != 2:
        return None
    ty = block.args[0].type
    if not isinstance(ty, TensorType) or ty.is_complex and op.name in ("stablehlo.maximum", "stablehlo.minimum"):
        return None
    kind = _REDUCTIONS[op.name]
    if kind in ("and", "or", "xor") and not (ty.is_bool or ty.is_integer):
        return None
    return kind


def _int(value, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, np.ndarray):
        return int(value.reshape(-1)[0])
    return int(value)


def _rows(value) -> tuple[tuple[int, ...], ...]:
    if value is None:
        return ()
    array = np.asarray(value)
    if array.size == 0:
        return ()
    if array.ndim == 1:
        array = array.reshape(1, -1)
    return tuple(tuple(int(x) for x in row) for row in array)


def channel_id(op: Op) -> int:
    handle = op.attr("channel_handle")
    if handle is None:
        return _int(op.attr("channel_id"), 0)
    text = handle.text if isinstance(handle, OpaqueAttr) else str(handle)
    m = _CHANNEL.search(text)
    return int(m.group(1)) if m else 0


def describe(op: Op, key: int) -> Collective:
    """The :class:`Collective` of a collective op (one of :data:`COLLECTIVE_OPS`)."""
    kind = op.name.split(".", 1)[1]
    groups = _rows(op.attr("source_target_pairs") if kind == "collective_permute" else op.attr("replica_groups"))
    dimension = {"all_gather": "all_gather_dim", "reduce_scatter": "scatter_dimension",
                 "all_to_all": "split_dimension"}.get(kind)
    n = len(op.results)
    reduction = None
    if kind in ("all_reduce", "reduce_scatter") and op.regions:
        reduction = reduction_kind(op.regions[0])
    operands = op.operands[:n] if kind != "collective_broadcast" else op.operands[:n]
    return Collective(
        kind=kind, key=key, groups=groups, channel_id=channel_id(op),
        use_global_device_ids=bool(op.attr("use_global_device_ids", False)),
        dimension=_int(op.attr(dimension), -1) if dimension else -1,
        concat_dimension=_int(op.attr("concat_dimension"), -1),
        split_count=_int(op.attr("split_count"), 0),
        reduction=reduction,
        operand_dtypes=tuple(v.tensor_type.dtype for v in operands),
        operand_shapes=tuple(tuple(v.tensor_type.shape) for v in operands),
        result_shapes=tuple(tuple(v.tensor_type.shape) for v in op.results),
        where=op.where or "",
    )


def uses_collectives(module: Module) -> bool:
    """True when the module exchanges data between processes or reads its process id."""
    return any(op.name in COLLECTIVE_OPS or op.name in PROCESS_ID_OPS for op in module.walk())


# -- static checks, used by the verifier -----------------------------------------------------------


def _fail(message: str) -> NoReturn:
    raise _Invalid(message)


class _Invalid(Exception):
    pass


def _tensors(op: Op) -> None:
    for v in (*op.operands, *op.results):
        if not isinstance(v.type, TensorType):
            _fail(f"{v.name} must be a tensor, got {v.type}")


def _check_all_reduce(op: Op) -> None:
    _tensors(op)
    if len(op.operands) != len(op.results) or not op.operands:
        _fail(f"expects as many results as operands (at least one), got {len(op.operands)} and {len(op.results)}")
    for v, r in zip(op.operands, op.results):
        if v.tensor_type.shape != r.tensor_type.shape:
            _fail(f"result {r.name} has shape {list(r.tensor_type.shape)}, the operand {list(v.tensor_type.shape)}")
    _check_region(op)


def _check_region(op: Op) -> None:
    if len(op.regions) != 1:
        _fail("needs one reduction region")
    region = op.regions[0]
    for r in op.results:
        scalar = TensorType((), r.tensor_type.element_type)
        args = tuple(a.type for a in region.args)
        if args != (scalar, scalar) * (len(args) // 2) or len(args) != 2:
            _fail(f"the reduction region takes ({', '.join(map(str, args))}), expected ({scalar}, {scalar})")


def _check_reduce_scatter(op: Op) -> None:
    _tensors(op)
    if len(op.operands) != 1 or len(op.results) != 1:
        _fail("expects one operand and one result")
    _check_region(op)
    dim = _int(op.attr("scatter_dimension"), -1)
    (x,), (r,) = op.operands, op.results
    if not 0 <= dim < x.tensor_type.rank:
        _fail(f"scatter_dimension {dim} out of range for rank {x.tensor_type.rank}")
    _same_but(x.tensor_type.shape, r.tensor_type.shape, dim, "scatter_dimension", divides=True)


def _same_but(operand: tuple[int, ...], result: tuple[int, ...], dim: int, what: str, divides: bool) -> None:
    if len(operand) != len(result) or any(a != b for i, (a, b) in enumerate(zip(operand, result)) if i != dim):
        _fail(f"result shape {list(result)} must equal the operand's {list(operand)} except along {what} {dim}")
    small, big = (result[dim], operand[dim]) if divides else (operand[dim], result[dim])
    if small == 0 and big != 0 or small and big % small:
        _fail(f"along {what} {dim} the result has {result[dim]}, the operand {operand[dim]}: not a whole number of parts")


def _check_all_gather(op: Op) -> None:
    _tensors(op)
    if len(op.operands) != len(op.results) or not op.operands:
        _fail("expects as many results as operands (at least one)")
    dim = _int(op.attr("all_gather_dim"), -1)
    for x, r in zip(op.operands, op.results):
        if not 0 <= dim < x.tensor_type.rank:
            _fail(f"all_gather_dim {dim} out of range for rank {x.tensor_type.rank}")
        _same_but(x.tensor_type.shape, r.tensor_type.shape, dim, "all_gather_dim", divides=False)
        if x.tensor_type.element_type != r.tensor_type.element_type:
            _fail("results must have the operands' element types")


def _check_all_to_all(op: Op) -> None:
    _tensors(op)
    if len(op.operands) != len(op.results) or not op.operands:
        _fail("expects as many results as operands (at least one)")
    split, concat = _int(op.attr("split_dimension"), -1), _int(op.attr("concat_dimension"), -1)
    count = _int(op.attr("split_count"), 0)
    if count <= 0:
        _fail(f"split_count must be positive, got {count}")
    for x, r in zip(op.operands, op.results):
        rank = x.tensor_type.rank
        if not (0 <= split < rank and 0 <= concat < rank):
            _fail(f"split_dimension {split} / concat_dimension {concat} out of range for rank {rank}")
        if x.tensor_type.shape[split] % count:
            _fail(f"dimension {split} of size {x.tensor_type.shape[split]} does not split into {count} parts")
        expected = list(x.tensor_type.shape)
        expected[split] //= count
        expected[concat] *= count
        if list(r.tensor_type.shape) != expected:
            _fail(f"result shape {list(r.tensor_type.shape)}, expected {expected}")


def _check_same_type(op: Op) -> None:
    _tensors(op)
    n = len(op.results)
    if n == 0 or any(op.operands[i].type != op.results[i].type for i in range(n)):
        _fail("results must have the operands' types")


def _check_process_id(op: Op) -> None:
    if op.operands or len(op.results) != 1:
        _fail("takes no operands and has one result")
    ty = op.results[0].type
    if not isinstance(ty, TensorType) or ty.shape != () or ty.element_type != "ui32":
        _fail(f"result must be tensor<ui32>, got {ty}")


#: The verifier's rules for collectives, by the name an op definition gives
#: (:attr:`.ops.OpDef.verifier`).
CHECKS: dict[str, Callable[[Op], None]] = {
    "all_reduce": _check_all_reduce,
    "reduce_scatter": _check_reduce_scatter,
    "all_gather": _check_all_gather,
    "all_to_all": _check_all_to_all,
    "collective_same_type": _check_same_type,
    "process_id": _check_process_id,
}
