"""SPMD programs whose partitioning is written in the text: split the arrays, run the body per
partition, put the results together.

``jax.jit(shard_map(f, mesh, in_specs, out_specs))`` lowers to a program that says exactly how
each array is split over the mesh and what runs on each partition, in one of two spellings:

* Shardy (``sdy`` dialect): ``sdy.mesh @mesh = <["x"=4]>`` and, in ``@main``, an
  ``sdy.manual_computation(%args) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[...]
  manual_axes={"x"} (%local: tensor<2x3xf32>) { body }``;
* the older GSPMD form: ``@Sharding`` custom calls with ``mhlo.sharding = "{devices=[4,1]<=[4]}"``
  feeding ``@SPMDFullToShardShape`` (the body then works on shards) and, on the way out,
  ``@SPMDShardToFullShape`` with the sharding of the result.

:func:`plan` reads either into a :class:`SpmdPlan`: the body as a program of its own (StableHLO
text with ``mhlo.num_partitions`` = the mesh size, whose collectives are already per
partition), and for every input and output the slice of the global array each partition holds.

A ``jax.jit`` over sharded arrays without ``shard_map`` is a global program whose arguments
carry shardings (Shardy's or GSPMD's) and which leaves the partitioning to the compiler. pjrt-hub does not
partition; such a program is run in the global view (as the JAX bridge runs it): once, on one
device, on the global arrays, its ``sdy.sharding_constraint`` ops the identities they are in
value. A ``shard_map`` manual over only some mesh axes gets Unimplemented naming what is missing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pjrt_hub.abi import InvalidArgument, Unimplemented

__all__ = ["SpmdPlan", "assemble", "is_spmd", "plan", "split"]

#: slices[partition][dim] = (start, stop) of the global array that partition holds.
Slices = tuple[tuple[tuple[int, int], ...], ...]


@dataclass(frozen=True)
class SpmdPlan:
    body: str
    num_partitions: int
    input_slices: tuple[Slices, ...]
    output_slices: tuple[Slices, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    #: Where the partitioning came from: ``sdy`` or ``gspmd``; ``global``: none, one run of the
    #: global program.
    form: str


def is_spmd(text: str) -> bool:
    """A program partitioned in its text: a ``shard_map``, or a global program with shardings
    (Shardy's or GSPMD's) over several partitions."""
    return ("sdy.manual_computation" in text or "SPMDFullToShardShape" in text
            or (("sdy.sharding" in text or "mhlo.sharding" in text) and _PARTITIONS.search(text) is not None))


#: ``mhlo.num_partitions`` above 1.
_PARTITIONS = re.compile(r"mhlo\.num_partitions\s*=\s*(?:[2-9]|[1-9]\d+)\s*:")


def split(global_array: np.ndarray, slices: Slices) -> list[np.ndarray]:
    return [np.ascontiguousarray(global_array[tuple(slice(a, b) for a, b in s)]) for s in slices]


def assemble(parts: Sequence[np.ndarray], slices: Slices, shape: tuple[int, ...]) -> np.ndarray:
    """The global array from the partitions' pieces; where several hold the same piece
    (replicated axes) the first partition's is taken."""
    out = np.empty(shape, parts[0].dtype) if parts else np.empty(shape)
    done: set[tuple] = set()
    for part, s in zip(parts, slices):
        if s in done:
            continue
        done.add(s)
        out[tuple(slice(a, b) for a, b in s)] = part
    return out


# -- meshes and shardings ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Mesh:
    axes: tuple[tuple[str, int], ...]

    @property
    def size(self) -> int:
        return math.prod(n for _, n in self.axes)

    def coords(self, position: int) -> dict[str, int]:
        out = {}
        for name, n in reversed(self.axes):
            out[name] = position % n
            position //= n
        return out


def _parse_mesh(text: str) -> _Mesh:
    axes = tuple((m.group(1), int(m.group(2))) for m in re.finditer(r'"([^"]+)"\s*=\s*(\d+)', text))
    if "device_ids" in text and not re.search(r"device_ids\s*=\s*\[\s*0\s*(,\s*\d+\s*)*\]", text):
        pass  # explicit device order: partition p is mesh position p either way
    return _Mesh(axes)


def _dim_axes(text: str) -> list[tuple[str, ...]]:
    """``[{"x"}, {}, {"y", "z"}]`` -> per dimension, the mesh axes that split it (major first)."""
    dims = []
    for group in re.findall(r"\{([^{}]*)\}", text):
        if ":" in group:
            raise Unimplemented(f"sub-axis shardings ({{{group}}}) are not supported")
        dims.append(tuple(re.findall(r'"([^"]+)"', group)))
    return dims


def _sdy_shardings(text: str) -> list[tuple[str, list[tuple[str, ...]]]]:
    out = []
    for m in re.finditer(r"<\s*@([\w.$-]+)\s*,\s*(\[(?:[^\[\]]|\[[^\]]*\])*\])", text):
        out.append((m.group(1), _dim_axes(m.group(2))))
    return out


def _slices_from_axes(mesh: _Mesh, dims: list[tuple[str, ...]], shape: tuple[int, ...], what: str) -> Slices:
    if len(dims) != len(shape):
        raise InvalidArgument(f"{what}: the sharding names {len(dims)} dimensions, the array has {len(shape)}")
    sizes = dict(mesh.axes)
    out = []
    for position in range(mesh.size):
        coords = mesh.coords(position)
        per_dim = []
        for d, axes in enumerate(dims):
            count = math.prod(sizes[a] for a in axes)
            if shape[d] % count:
                raise InvalidArgument(f"{what}: dimension {d} of size {shape[d]} does not split into {count}")
            index = 0
            for a in axes:
                index = index * sizes[a] + coords[a]
            step = shape[d] // count
            per_dim.append((index * step, (index + 1) * step))
        out.append(tuple(per_dim))
    return tuple(out)


def _hlo_slices(sharding: str, shape: tuple[int, ...], partitions: int, what: str) -> Slices:
    """Slices of an HLO sharding string (``{devices=[4,1]<=[4]}``, ``{replicated}`` ...)."""
    text = sharding.strip()
    full = tuple((0, n) for n in shape)
    if text in ("{replicated}", "{manual}") or text.startswith("{maximal"):
        return tuple(full for _ in range(partitions))
    m = re.fullmatch(r"\{devices=\[([\d,]+)\]\s*(.*?)\s*(last_tile_dim_replicate)?\s*\}", text)
    if m is None:
        raise Unimplemented(f"{what}: the sharding {sharding} is not supported")
    tile = [int(x) for x in m.group(1).split(",")]
    spec = m.group(2).strip()
    total = math.prod(tile)
    iota = re.fullmatch(r"<=\[([\d,]+)\](?:T\(([\d,]+)\))?", spec)
    if iota:
        reshape = [int(x) for x in iota.group(1).split(",")]
        devices = np.arange(total).reshape(reshape)
        if iota.group(2):
            devices = devices.transpose([int(x) for x in iota.group(2).split(",")])
        devices = devices.reshape(-1)
    else:
        devices = np.array([int(x) for x in re.findall(r"\d+", spec)])
    if devices.size != total:
        raise InvalidArgument(f"{what}: the sharding {sharding} lists {devices.size} devices for {total} tiles")
    tiles = devices.reshape(tile)
    ranked = len(shape)
    if len(tile) != ranked + (1 if m.group(3) else 0):
        raise InvalidArgument(f"{what}: the sharding {sharding} does not fit rank {ranked}")
    out = []
    for p in range(partitions):
        where = np.argwhere(tiles == p)
        if where.size == 0:
            raise InvalidArgument(f"{what}: the sharding {sharding} leaves out partition {p}")
        position = where[0]
        per_dim = []
        for d in range(ranked):
            if shape[d] % tile[d]:
                raise InvalidArgument(f"{what}: dimension {d} of size {shape[d]} does not split into {tile[d]}")
            step = shape[d] // tile[d]
            per_dim.append((int(position[d]) * step, (int(position[d]) + 1) * step))
        out.append(tuple(per_dim))
    return tuple(out)


# -- the plan -------------------------------------------------------------------------------------


def plan(text: str) -> SpmdPlan:
    from pjrt_hub.backends.stablehlo import parse_module

    module = parse_module(text)
    main = module.main
    ops = main.body.ops
    if any(op.name == "sdy.manual_computation" for op in ops):
        return _plan_sdy(module)
    if any(op.name == "stablehlo.custom_call" and str(op.attr("call_target_name")) == "SPMDFullToShardShape"
           for op in main.walk()):
        return _plan_gspmd(module)
    return _plan_global(module)


def _plan_global(module) -> SpmdPlan:
    """A global program over several partitions: run once, on one device, on the global arrays."""
    from pjrt_hub.backends.stablehlo.collectives import COLLECTIVE_OPS, PROCESS_ID_OPS

    main = module.main
    for op in main.walk():
        # The partitions of a program with these would have to meet: one run of it on one
        # device would not do what they say.
        if op.name in COLLECTIVE_OPS or op.name in PROCESS_ID_OPS:
            raise Unimplemented(f"{op.describe()} in a program without shard_map: its partitions would have to "
                                "be made by sharding propagation, which pjrt-hub does not do")
    returned = main.body.ops[-1].operands
    body = _body_text(module, main.args, main.body.ops[:-1], returned, 1)
    return SpmdPlan(body, 1, tuple(_whole(a.type.shape) for a in main.args),
                    tuple(_whole(v.type.shape) for v in returned),
                    tuple(tuple(a.type.shape) for a in main.args),
                    tuple(tuple(v.type.shape) for v in returned), "global")


def _whole(shape: Sequence[int]) -> Slices:
    """One partition that holds all of an array of ``shape``."""
    return (tuple((0, n) for n in shape),)


def _body_text(module, args, ops, results, partitions: int) -> str:
    from pjrt_hub.backends.stablehlo import Block, Function, Module, Op, format_module, frozen_mapping

    ret = Op("func.return", tuple(results), ())
    body = Block(tuple(args), tuple(ops) + (ret,))
    fn = Function("main", "public", tuple(args), tuple(frozen_mapping() for _ in args),
                  tuple(v.type for v in results), tuple(frozen_mapping() for _ in results), body)
    functions = {"main": fn, **{n: f for n, f in module.functions.items() if n != module.main.name}}
    attrs = {"mhlo.num_partitions": np.int32(partitions), "mhlo.num_replicas": np.int32(1)}
    new = Module(module.name or "spmd_body", frozen_mapping(functions), frozen_mapping(
        {k: int(v) for k, v in attrs.items()}))
    return format_module(new)


def _plan_sdy(module) -> SpmdPlan:
    main = module.main
    ops = main.body.ops
    manual = [op for op in ops if op.name == "sdy.manual_computation"]
    others = [op for op in ops[:-1] if op.name != "sdy.manual_computation"]
    if len(manual) != 1 or others:
        what = others[0].describe() if others else f"{len(manual)} manual computations"
        raise Unimplemented(f"only programs whose @main is one sdy.manual_computation are split over the "
                            f"mesh; this one also has {what}, which needs sharding propagation")
    mc = manual[0]
    meshes = dict(module.attributes.get("sdy.meshes", {}))
    ins = _sdy_shardings(mc.attr("in_shardings"))
    outs = _sdy_shardings(mc.attr("out_shardings"))
    mesh_names = {name for name, _ in ins + outs}
    if len(mesh_names) > 1:
        raise Unimplemented(f"shardings over several meshes ({', '.join(sorted(mesh_names))})")
    mesh_name = next(iter(mesh_names), next(iter(meshes), None))
    if mesh_name not in meshes:
        raise InvalidArgument(f"the program uses mesh @{mesh_name} but defines no such sdy.mesh")
    mesh = _parse_mesh(meshes[mesh_name])
    manual_axes = set(re.findall(r'"([^"]+)"', mc.attr("manual_axes")))
    free = [a for a, _ in mesh.axes if a not in manual_axes]
    if free:
        raise Unimplemented(f"the manual computation is manual over {sorted(manual_axes)} only; mesh axes "
                            f"{free} would need sharding propagation")
    arg_index = {v.id: i for i, v in enumerate(main.args)}
    input_slices: list[Slices] = [()] * len(main.args)
    for j, v in enumerate(mc.operands):
        if v.id not in arg_index:
            raise Unimplemented(f"{mc.describe()}: operand {j} is computed outside the manual computation")
        input_slices[arg_index[v.id]] = _slices_from_axes(mesh, ins[j][1], v.type.shape, f"input {arg_index[v.id]}")
    used = {v.id for v in mc.operands}
    unused = [i for i, a in enumerate(main.args) if a.id not in used]
    # A body argument for every main argument, in order (unused ones are replicated and ignored).
    region = mc.regions[0]
    body_args = []
    for i, a in enumerate(main.args):
        if a.id in used:
            body_args.append(region.args[[v.id for v in mc.operands].index(a.id)])
        else:
            body_args.append(a)
            input_slices[i] = tuple(tuple((0, n) for n in a.type.shape) for _ in range(mesh.size))
    del unused
    terminator = region.ops[-1]
    returned = main.body.ops[-1].operands
    result_index = {v.id: k for k, v in enumerate(mc.results)}
    local_results, output_slices = [], []
    for j, v in enumerate(returned):
        k = result_index.get(v.id)
        if k is None:
            raise Unimplemented(f"@main result {j} does not come from the manual computation")
        local_results.append(terminator.operands[k])
        output_slices.append(_slices_from_axes(mesh, outs[k][1], v.type.shape, f"output {j}"))
    body = _body_text(module, body_args, region.ops[:-1], local_results, mesh.size)
    return SpmdPlan(body, mesh.size, tuple(input_slices), tuple(output_slices),
                    tuple(tuple(a.type.shape) for a in main.args),
                    tuple(tuple(v.type.shape) for v in returned), "sdy")


def _custom(op, target: str) -> bool:
    return op.name == "stablehlo.custom_call" and str(op.attr("call_target_name")) == target


def _sharding_attr(op) -> str:
    value = op.attr("mhlo.sharding")
    return str(getattr(value, "text", value))


def _plan_gspmd(module) -> SpmdPlan:
    main = module.main
    ops = list(main.body.ops[:-1])
    producer = {r.id: op for op in ops for r in op.results}
    partitions = module.num_partitions
    arg_index = {v.id: i for i, v in enumerate(main.args)}
    input_slices: list[Slices | None] = [None] * len(main.args)
    body_args: list = [None] * len(main.args)
    skip: set[int] = set()
    for op in ops:
        if not _custom(op, "SPMDFullToShardShape"):
            continue
        source = producer.get(op.operands[0].id)
        if source is None or not _custom(source, "Sharding") or source.operands[0].id not in arg_index:
            raise Unimplemented(f"{op.describe()}: only @main arguments split by an @Sharding call are supported")
        i = arg_index[source.operands[0].id]
        input_slices[i] = _hlo_slices(_sharding_attr(source), main.args[i].type.shape, partitions, f"input {i}")
        body_args[i] = op.results[0]
        skip.update({id(op), id(source)})
    entered: list[Slices] = []
    for i, slices in enumerate(input_slices):
        if slices is None:  # set with body_args[i], where the argument enters a manual computation
            raise Unimplemented(f"@main argument {i} does not enter a manual computation; it would need "
                                "sharding propagation")
        entered.append(slices)
    returned = main.body.ops[-1].operands
    local_results, output_slices = [], []
    for j, v in enumerate(returned):
        op = producer.get(v.id)
        if op is None or not _custom(op, "SPMDShardToFullShape"):
            raise Unimplemented(f"@main result {j} does not leave a manual computation through "
                                "@SPMDShardToFullShape")
        inner = producer.get(op.operands[0].id)
        local = op.operands[0]
        if inner is not None and _custom(inner, "Sharding"):
            local = inner.operands[0]
            skip.add(id(inner))
        skip.add(id(op))
        local_results.append(local)
        output_slices.append(_hlo_slices(_sharding_attr(op), v.type.shape, partitions, f"output {j}"))
    body_ops = [op for op in ops if id(op) not in skip]
    for op in body_ops:
        if op.name == "stablehlo.custom_call" and str(op.attr("call_target_name")) in (
                "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"):
            raise Unimplemented(f"{op.describe()}: a sharding change inside the program needs the partitioner")
        for v in op.operands:
            if v.id in arg_index:
                raise Unimplemented(f"{op.describe()} reads @main argument {arg_index[v.id]} outside the "
                                    "manual computation")
    body = _body_text(module, body_args, body_ops, local_results, partitions)
    return SpmdPlan(body, partitions, tuple(entered), tuple(output_slices),
                    tuple(tuple(a.type.shape) for a in main.args),
                    tuple(tuple(v.type.shape) for v in returned), "gspmd")
