"""What JAX hands ``PJRT_Client_Compile``, read back into StableHLO text and sharding facts.

JAX sends a StableHLO portable artifact (VHLO bytecode); jaxlib's own MLIR bindings turn it back
into a module in the same process, with the stablehlo, chlo and sdy (Shardy) dialects registered.
The text pjrt-hub's backends parse is StableHLO; JAX adds Shardy around it: ``sdy.mesh`` symbols at
module level, ``#sdy.sharding`` on the arguments and results of ``@main``, and for ``shard_map``
and ``pmap`` an ``sdy.manual_computation`` whose body is the program one device runs. This module
takes the meshes out (recording them), reads the shardings into :class:`Sharding` values for the
partitioning in :mod:`._spmd`, and can rewrite a program that is one manual computation into the
per-device program (local shapes), which any backend runs as replicas.

Only the Shardy forms JAX emits for named shardings are read: dimensions sharded over whole mesh
axes, replicated or open dimensions. Sub-axes and other forms are refused with a message naming
the attribute, never guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence, TypeGuard

from pjrt_hub.abi import InvalidArgument, Unimplemented
from pjrt_hub.abi.compile_options import _int_field, _len_field, _varint

__all__ = ["Mesh", "ProgramInfo", "Sharding", "localize_manual_computation", "read_program", "set_counts"]

_MESH_AXES = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_DEVICE_IDS = re.compile(r"device_ids\s*=\s*\[([0-9,\s]*)\]")
_SHARDING = re.compile(r"^#sdy\.sharding<\s*(@[\w.$-]+|mesh<.*?>)\s*,\s*\[(.*)\](.*)>$", re.S)


@dataclass(frozen=True)
class Mesh:
    """An ``sdy.mesh``: named axes with sizes, and the logical device of each mesh position."""

    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...] | None = None

    @property
    def size(self) -> int:
        return math.prod(size for _, size in self.axes) if self.axes else 1

    def position(self, logical_device: int) -> dict[str, int]:
        """The index along every axis of the mesh position that holds ``logical_device``."""
        ids = self.device_ids or tuple(range(self.size))
        try:
            flat = ids.index(logical_device)
        except ValueError:
            raise InvalidArgument(f"device {logical_device} is not in the mesh {self}") from None
        out: dict[str, int] = {}
        for name, size in reversed(self.axes):
            out[name] = flat % size
            flat //= size
        return out

    @classmethod
    def parse(cls, text: str) -> "Mesh":
        """``<["x"=4, "y"=2], device_ids=[...]>`` (the ``mesh`` attribute of ``sdy.mesh``)."""
        head = text.split("device_ids", 1)[0]
        axes = tuple((name, int(size)) for name, size in _MESH_AXES.findall(head))
        ids = None
        found = _DEVICE_IDS.search(text)
        if found is not None:
            ids = tuple(int(v) for v in found.group(1).replace(" ", "").split(",") if v)
        return cls(axes, ids)


@dataclass(frozen=True)
class Sharding:
    """``#sdy.sharding<@mesh, [{"x"}, {}]>``: the mesh axes each dimension is split over."""

    mesh: Mesh
    dims: tuple[tuple[str, ...], ...]
    text: str = ""

    @property
    def replicated(self) -> bool:
        return not any(self.dims) or self.mesh.size == 1

    def slices(self, shape: tuple[int, ...], logical_device: int) -> tuple[slice, ...]:
        """The part of a global array of ``shape`` that ``logical_device`` holds."""
        if len(self.dims) not in (0, len(shape)):
            raise InvalidArgument(f"sharding {self.text} has {len(self.dims)} dimensions; the array has "
                                  f"{len(shape)}")
        position = self.mesh.position(logical_device) if any(self.dims) else {}
        sizes = dict(self.mesh.axes)
        out = []
        for k, extent in enumerate(shape):
            axes = self.dims[k] if self.dims else ()
            if not axes:
                out.append(slice(0, extent))
                continue
            count, index = 1, 0
            for axis in axes:
                index = index * sizes[axis] + position[axis]
                count *= sizes[axis]
            chunk = -(-extent // count)
            out.append(slice(min(index * chunk, extent), min((index + 1) * chunk, extent)))
        return tuple(out)

    def op_sharding(self, rank: int) -> bytes:
        """This sharding as a serialized ``xla.OpSharding`` over the mesh's logical devices (what
        the Shardings extension hands a framework): ``type`` REPLICATED (the empty message) or
        OTHER with the tile assignment, the last tile dimension replicating over unused axes."""
        if self.replicated:
            return b""
        sizes = dict(self.mesh.axes)
        dims = self.dims if self.dims else ((),) * rank
        used = {axis for axes in dims for axis in axes}
        unused = [name for name, size in self.mesh.axes if name not in used and size > 1]
        tile_dims = [math.prod(sizes[a] for a in axes) for axes in dims]
        replication = math.prod(sizes[a] for a in unused) if unused else 1
        shape = tile_dims + ([replication] if replication > 1 else [])
        devices = [0] * math.prod(shape)
        ids = self.mesh.device_ids or tuple(range(self.mesh.size))
        for logical in ids:
            position = self.mesh.position(logical)
            coords = []
            for axes in dims:
                index = 0
                for axis in axes:
                    index = index * sizes[axis] + position[axis]
                coords.append(index)
            if replication > 1:
                index = 0
                for axis in unused:
                    index = index * sizes[axis] + position[axis]
                coords.append(index)
            flat = 0
            for coord, extent in zip(coords, shape):
                flat = flat * extent + coord
            devices[flat] = logical
        out = _int_field(1, 3)  # OTHER
        out += _len_field(3, b"".join(_varint(d) for d in shape))
        out += _len_field(4, b"".join(_varint(d) for d in devices))
        if replication > 1:
            out += _int_field(6, 1)
        return out

    @classmethod
    def parse(cls, text: str, meshes: dict[str, Mesh]) -> "Sharding":
        match = _SHARDING.match(text.strip())
        if match is None:
            raise Unimplemented(f"pjrt-hub does not read the Shardy sharding {text!r}")
        mesh_ref, body, rest = match.groups()
        if mesh_ref.startswith("@"):
            mesh = meshes.get(mesh_ref[1:])
            if mesh is None:
                raise InvalidArgument(f"sharding {text!r} names the mesh {mesh_ref}, which the module does "
                                      "not define")
        else:
            mesh = Mesh.parse(mesh_ref)
        dims = []
        for group in re.findall(r"\{([^{}]*)\}", body):
            if ":" in group:
                raise Unimplemented(f"pjrt-hub does not partition over sub-axes ({text})")
            dims.append(tuple(re.findall(r'"([^"]+)"', group)))
        return cls(mesh, tuple(dims), text.strip())


@dataclass
class ProgramInfo:
    """A program JAX compiles: its StableHLO text and what Shardy says about it."""

    text: str
    meshes: dict[str, Mesh] = field(default_factory=dict)
    #: Per argument / result of ``@main``: its sharding, None when it has none.
    arg_shardings: list[Sharding | None] = field(default_factory=list)
    result_shardings: list[Sharding | None] = field(default_factory=list)
    #: ``@main`` is one ``sdy.manual_computation`` over all its arguments and results.
    single_manual_computation: bool = False
    #: Shardy ops left in the program other than the manual computation of the above.
    other_shardy_ops: tuple[str, ...] = ()
    #: Global shapes of the arguments and results of ``@main``.
    arg_shapes: list[tuple[int, ...]] = field(default_factory=list)
    result_shapes: list[tuple[int, ...]] = field(default_factory=list)
    num_partitions: int = 1
    num_replicas: int = 1
    #: The module and its MLIR context, kept for :func:`localize_manual_computation`.
    module: Any = None
    context: Any = None

    @property
    def partitioned(self) -> bool:
        return self.num_partitions * self.num_replicas > 1

    def release(self) -> None:
        """Drop the MLIR module and context. MLIR objects must not outlive the compile: one
        collected at interpreter exit, after jaxlib's MLIR has shut down, crashes the process."""
        self.module = None
        self.context = None


def _new_context() -> Any:
    """An MLIR context with the dialects JAX's artifacts use. One per program: compiles arrive on
    jaxlib's own threads, whose Python thread state (and anything thread-local) ends with each
    callback, and a context is not safe to share between threads."""
    try:
        # JAX's own context: every dialect its programs use, func included (needed to parse text).
        from jax._src.interpreters.mlir import make_ir_context

        return make_ir_context()
    except (ImportError, AttributeError):  # a JAX without it: enough for portable artifacts
        from jaxlib.mlir import ir
        from jaxlib.mlir.dialects import chlo, sdy, stablehlo

        ctx = ir.Context()
        stablehlo.register_dialect(ctx)
        chlo.register_dialect(ctx)
        sdy.register_dialect(ctx)
        return ctx


def is_bytecode(code: bytes | str) -> TypeGuard[bytes]:
    return isinstance(code, (bytes, bytearray, memoryview)) and bytes(code[:4]) == b"ML\xefR"


def parse_module(code: bytes | str, ctx: Any) -> Any:
    """A StableHLO portable artifact (or MLIR text) as an MLIR module of ``ctx``."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    if is_bytecode(code):
        try:
            return stablehlo.deserialize_portable_artifact(ctx, bytes(code))
        except Exception as exc:  # noqa: BLE001 - jaxlib's MLIR errors have no common type
            raise InvalidArgument(f"the program is not a StableHLO portable artifact jaxlib can read: {exc}") \
                from None
    text = code if isinstance(code, str) else bytes(code).decode("utf-8")
    with ctx:
        return ir.Module.parse(text)


def _attr_text(attrs: Any, name: str) -> str | None:
    if attrs is None:
        return None
    try:
        return str(attrs[name])
    except (KeyError, IndexError):
        return None


def _dict_list(attr: Any) -> list[Any]:
    return [] if attr is None else [attr[i] for i in range(len(attr))]


def _main(module: Any) -> Any:
    for op in module.body.operations:
        if op.operation.name == "func.func" and str(op.attributes["sym_name"]).strip('"') == "main":
            return op
    raise InvalidArgument("the program has no @main function")


def read_program(code: bytes | str) -> ProgramInfo:
    """Read a program as JAX sends it: StableHLO text without ``sdy.mesh``, and its shardings."""
    from jaxlib.mlir import ir

    ctx = _new_context()
    module = parse_module(code, ctx)
    with ctx:
        meshes: dict[str, Mesh] = {}
        for op in list(module.body.operations):
            if op.operation.name == "sdy.mesh":
                name = str(op.attributes["sym_name"]).strip('"')
                meshes[name] = Mesh.parse(str(op.attributes["mesh"]))
                op.operation.erase()
        main = _main(module)
        arg_attrs = _dict_list(main.attributes["arg_attrs"]) if "arg_attrs" in main.attributes else []
        res_attrs = _dict_list(main.attributes["res_attrs"]) if "res_attrs" in main.attributes else []
        info = ProgramInfo(text="", meshes=meshes, module=module, context=ctx)
        info.arg_shardings = [_sharding(_attr_text(a, "sdy.sharding"), meshes) for a in arg_attrs]
        info.result_shardings = _fill([_sharding(_attr_text(a, "sdy.sharding"), meshes) for a in res_attrs],
                                      _propagated(main, info.arg_shardings, meshes))
        attrs = module.operation.attributes
        info.num_partitions = int(str(attrs["mhlo.num_partitions"]).split(":")[0]) \
            if "mhlo.num_partitions" in attrs else 1
        info.num_replicas = int(str(attrs["mhlo.num_replicas"]).split(":")[0]) \
            if "mhlo.num_replicas" in attrs else 1
        info.arg_shapes = [_shape(a.type) for a in main.regions[0].blocks[0].arguments]
        function_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        info.result_shapes = [_shape(t) for t in function_type.results]
        shardy: list[str] = []
        main.operation.walk(lambda op: _collect_shardy(op, shardy))
        block = main.regions[0].blocks[0]
        ops = list(block.operations)
        info.single_manual_computation = (
            len(ops) == 2 and ops[0].operation.name == "sdy.manual_computation"
            and [o for o in ops[0].operands] == list(block.arguments)
            and list(ops[1].operands) == list(ops[0].results))
        info.other_shardy_ops = tuple(name for name in shardy if not (
            info.single_manual_computation and name in ("sdy.manual_computation", "sdy.return")))
        info.text = module.operation.get_asm(assume_verified=True)
    return info


def _shape(value_type: Any) -> tuple[int, ...]:
    from jaxlib.mlir import ir

    try:
        return tuple(ir.RankedTensorType(value_type).shape)
    except (ValueError, TypeError):
        return ()


def set_counts(info: ProgramInfo, *, partitions: int, replicas: int) -> str:
    """The program's text with ``mhlo.num_partitions`` and ``mhlo.num_replicas`` set."""
    from jaxlib.mlir import ir

    with info.context:
        i32 = ir.IntegerType.get_signless(32)
        attrs = info.module.operation.attributes
        attrs["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, partitions)
        attrs["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, replicas)
        return info.module.operation.get_asm(assume_verified=True)


def _collect_shardy(op: Any, found: list[str]) -> Any:
    from jaxlib.mlir import ir

    name = op.name
    if name.startswith("sdy."):
        found.append(name)
    return ir.WalkResult.ADVANCE


def _sharding(text: str | None, meshes: dict[str, Mesh]) -> Sharding | None:
    return None if text is None else Sharding.parse(text, meshes)


def localize_manual_computation(info: ProgramInfo) -> str:
    """The program one device runs when ``@main`` is a single ``sdy.manual_computation``: the
    body, with the local shapes, as ``@main`` of a module of one replica and as many partitions as
    the mesh has devices. The manual computation's in and out shardings become those of ``@main``
    where it had none (they are the shardings the arguments and results must have)."""
    from jaxlib.mlir import ir

    if not info.single_manual_computation:
        raise Unimplemented("only a program that is one sdy.manual_computation runs per device")
    module = info.module
    with info.context:
        main = _main(module)
        block = main.regions[0].blocks[0]
        manual, ret = list(block.operations)
        in_shardings = _per_value(str(manual.attributes["in_shardings"]), info.meshes)
        out_shardings = _per_value(str(manual.attributes["out_shardings"]), info.meshes)
        info.arg_shardings = _fill(info.arg_shardings, in_shardings)
        info.result_shardings = _fill(info.result_shardings, out_shardings)
        manual_axes = set(re.findall(r'"([^"]+)"', str(manual.attributes["manual_axes"])))
        meshes_used = {s.mesh for s in in_shardings if s is not None}
        for mesh in meshes_used:
            free = [name for name, size in mesh.axes if name not in manual_axes and size > 1]
            if free:
                raise Unimplemented(f"the manual computation leaves mesh axes {free} to the partitioner; "
                                    "pjrt-hub runs only fully manual computations per device")
        body = manual.regions[0].blocks[0]
        terminator = list(body.operations)[-1]
        for argument, local in zip(block.arguments, body.arguments):
            argument.set_type(local.type)
            local.replace_all_uses_with(argument)
        for op in list(body.operations)[:-1]:
            op.operation.move_before(manual.operation)
        for result, value in zip(manual.results, terminator.operands):
            result.replace_all_uses_with(value)
        terminator.operation.erase()
        manual.operation.erase()
        result_types = [v.type for v in ret.operands]
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], result_types))
        for key in ("arg_attrs", "res_attrs"):
            if key in main.attributes:
                del main.attributes[key]
        i32 = ir.IntegerType.get_signless(32)
        devices = max((m.size for m in meshes_used), default=info.num_partitions)
        # The body keeps the program's partitions: its collectives (channel handles, replica
        # groups of partition ids) mean what they meant in the partitioned program.
        module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, devices)
        module.operation.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
        text = module.operation.get_asm(assume_verified=True)
    return text


#: Ops whose result element i depends on their operands' elements i only: a result keeps the
#: sharding of its operands of its own shape, as XLA's propagation gives it.
_ELEMENTWISE = frozenset(f"stablehlo.{name}" for name in (
    "abs", "add", "and", "atan2", "bitcast_convert", "cbrt", "ceil", "clamp", "compare", "complex", "convert",
    "cosine", "count_leading_zeros", "divide", "exponential", "exponential_minus_one", "floor", "imag",
    "is_finite", "log", "log_plus_one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or",
    "popcnt", "power", "real", "reduce_precision", "remainder", "round_nearest_afz", "round_nearest_even",
    "rsqrt", "select", "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign", "sine", "sqrt",
    "subtract", "tan", "tanh", "xor"))


def _propagated(main: Any, arg_shardings: list[Sharding | None], meshes: dict[str, Mesh]) -> list[Sharding | None]:
    """The shardings of ``@main``'s results where the program leaves them to the compiler, as
    XLA's propagation gives them for the common ops, in program order: an elementwise op keeps
    its operands' sharding (the first operand's where they disagree; operands without one, a
    broadcast scalar or a replicated array, take any), a ``sdy.sharding_constraint`` sets its
    own, transpose, broadcast_in_dim, reduce and dot_general carry each dimension's axes to the
    dimension it becomes. Past any other op, a value is replicated: always right in value."""
    block = main.regions[0].blocks[0]
    known: dict[Any, Sharding] = {}
    for value, sharding in zip(block.arguments, arg_shardings):
        if sharding is not None and not sharding.replicated:
            known[value] = sharding
    for op in block.operations:
        name = op.operation.name
        if name == "func.return":
            return [known.get(v) for v in op.operands]
        if len(op.results) != 1:
            continue
        result = op.results[0]
        try:
            found = _propagate(op, name, [known.get(v) for v in op.operands], meshes)
        except (KeyError, ValueError, IndexError, InvalidArgument, Unimplemented):
            found = None  # an attribute read otherwise than expected: no sharding, replicated
        axes = [a for dim in found.dims for a in dim] if found is not None else []
        if found is not None and len(set(axes)) == len(axes) and len(found.dims) == len(_shape(result.type)) \
                and not found.replicated:
            known[result] = found
    return []


def _propagate(op: Any, name: str, operands: list[Sharding | None], meshes: dict[str, Mesh]) -> Sharding | None:
    """The sharding of ``op``'s one result, from its operands' (None: replicated)."""
    if name == "sdy.sharding_constraint":
        return _sharding(str(op.attributes["sharding"]), meshes)
    if name in _ELEMENTWISE:
        shape = _shape(op.results[0].type)
        return next((s for s, v in zip(operands, op.operands) if s is not None and _shape(v.type) == shape), None)
    if name == "stablehlo.dot_general":
        return _dot_general(op, operands)
    source = operands[0] if operands else None
    if source is None:
        return None
    if name == "stablehlo.transpose":
        return _dims(source, [source.dims[d] for d in _ints(op, "permutation")])
    if name == "stablehlo.broadcast_in_dim":
        operand_shape, shape = _shape(op.operands[0].type), _shape(op.results[0].type)
        dims: list[tuple[str, ...]] = [()] * len(shape)
        for k, d in enumerate(_ints(op, "broadcast_dimensions")):
            if operand_shape[k] == shape[d]:
                dims[d] = source.dims[k]
        return _dims(source, dims)
    if name == "stablehlo.reduce" and len(op.operands) == 2:
        reduced = set(_ints(op, "dimensions"))
        return _dims(source, [axes for k, axes in enumerate(source.dims) if k not in reduced])
    return None


def _dot_general(op: Any, operands: list[Sharding | None]) -> Sharding | None:
    """A product's result dimensions: the batch dimensions, then the left side's free ones,
    then the right side's, each with the axes of the dimension it comes from (an axis the left
    side already uses is dropped from the right: it would split the result twice)."""
    numbers = str(op.attributes["dot_dimension_numbers"])
    field = {key: [int(v) for v in re.findall(r"\d+", values)]
             for key, values in re.findall(r"(\w+_dimensions)\s*=\s*\[([^\]]*)\]", numbers)}
    lhs, rhs = operands
    base = lhs if lhs is not None else rhs
    if base is None:
        return None
    lb, rb = field.get("lhs_batching_dimensions", []), field.get("rhs_batching_dimensions", [])
    lc, rc = field.get("lhs_contracting_dimensions", []), field.get("rhs_contracting_dimensions", [])
    lrank, rrank = len(_shape(op.operands[0].type)), len(_shape(op.operands[1].type))
    lhs_dims = lhs.dims if lhs is not None else ((),) * lrank
    rhs_dims = rhs.dims if rhs is not None else ((),) * rrank
    dims = [lhs_dims[i] or rhs_dims[j] for i, j in zip(lb, rb)]
    dims += [lhs_dims[i] for i in range(lrank) if i not in lb and i not in lc]
    used = {a for axes in dims for a in axes}
    dims += [() if used & set(rhs_dims[j]) else rhs_dims[j] for j in range(rrank) if j not in rb and j not in rc]
    return _dims(base, dims)


def _dims(like: Sharding, dims: Sequence[tuple[str, ...]]) -> Sharding:
    return Sharding(like.mesh, tuple(dims))


def _ints(op: Any, name: str) -> list[int]:
    """An integer-array attribute (``array<i64: 1, 0>`` or ``dense<[1, 0]>``) as a list."""
    inner = str(op.attributes[name]).split("<", 1)[1].split(">", 1)[0]
    return [int(v) for v in re.findall(r"-?\d+", inner.split(":", 1)[-1])]


def _fill(given: list[Sharding | None], implied: list[Sharding | None]) -> list[Sharding | None]:
    count = max(len(given), len(implied))
    given = list(given) + [None] * (count - len(given))
    implied = list(implied) + [None] * (count - len(implied))
    return [g if g is not None else i for g, i in zip(given, implied)]


def _per_value(text: str, meshes: dict[str, Mesh]) -> list[Sharding | None]:
    """``#sdy.sharding_per_value<[<@mesh, [...]>, ...]>`` as one Sharding per value."""
    inner = text.strip()
    start, end = inner.find("[<"), inner.rfind(">]")
    if start < 0 or end < 0:
        return []
    items, depth, current = [], 0, ""
    for ch in inner[start + 1:end + 1]:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        current += ch
        if depth == 0 and current.strip():
            if current.strip() not in (",",):
                items.append(current.strip().lstrip(",").strip())
            current = ""
    return [Sharding.parse("#sdy.sharding" + item, meshes) for item in items if item]
