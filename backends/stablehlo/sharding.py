"""Which programs a backend can run partitioned as they are, and which need a partitioner.

A module with ``mhlo.num_partitions = N`` is run by starting the same program on N devices. That
is right for a program already partitioned by hand (every op works on its partition's data and
collectives exchange the rest: what ``shard_map`` bodies are), and wrong for one whose arrays
still carry shardings for an SPMD partitioner to propagate (``jax.jit`` over sharded arrays):
such a program needs sharding propagation, which pjrt-hub's backends do not do.
``pjrt-hub run`` takes the manual computations out of ``shard_map`` programs itself
(:mod:`pjrt_hub._spmd`).
"""

from __future__ import annotations

from pjrt_hub.abi import Unimplemented

from .ir import Module

__all__ = ["check_partitionable", "sharding_to_propagate"]

_SPMD_CALLS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")


def _is_trivial(text: str) -> bool:
    text = str(text).strip()
    return text in ("{replicated}", "{manual}", "{maximal device=0}") or text.startswith("{manual")


def sharding_to_propagate(module: Module) -> str | None:
    """What in ``module`` asks for sharding propagation, described for a message, or None."""
    if "sdy.meshes" in module.attributes or any(k.startswith("sdy.") for k in module.attributes):
        return "sdy (Shardy) sharding annotations"
    main = module.main
    for i, attrs in enumerate(main.arg_attrs):
        for key in ("mhlo.sharding", "sdy.sharding"):
            if key in attrs and not _is_trivial(attrs[key]):
                return f"@{main.name} argument {i} has {key} = {attrs[key]}"
    for i, attrs in enumerate(main.result_attrs):
        for key in ("mhlo.sharding", "sdy.sharding"):
            if key in attrs and not _is_trivial(attrs[key]):
                return f"@{main.name} result {i} has {key} = {attrs[key]}"
    for op in module.walk():
        if op.name.startswith("sdy."):
            return f"{op.describe()} (a Shardy op)"
        if op.name == "stablehlo.custom_call" and str(op.attr("call_target_name")) in _SPMD_CALLS:
            return f"{op.describe()} calls @{op.attr('call_target_name')}"
    return None


def check_partitionable(module: Module, num_partitions: int, backend: str) -> None:
    """Raise Unimplemented when ``module`` is run over several partitions but still needs
    sharding propagation."""
    if num_partitions <= 1:
        return
    what = sharding_to_propagate(module)
    if what is not None:
        raise Unimplemented(
            f"{backend} runs a program over {num_partitions} partitions only when it is already "
            f"partitioned (every partition runs it as it is); this one needs sharding propagation "
            f"(an SPMD partitioner), which pjrt-hub does not do: {what}. shard_map programs run "
            "through `pjrt-hub run`, which splits them over the mesh")
