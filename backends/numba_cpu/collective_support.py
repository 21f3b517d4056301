"""What a compiled program that meets other processes calls (from ``objmode`` blocks).

A generated module that uses collectives does ``from pjrt_hub.backends.numba_cpu.collective_support
import *``. These are plain Python functions: the host runtime does the meeting
(:mod:`pjrt_hub.backends.cpu_runtime._collectives`); they only flatten what goes back into the
compiled code.
"""

from __future__ import annotations

import json
from typing import Sequence

import numpy as np
from numba import objmode

from pjrt_hub.backends.cpu_runtime._collectives import (
    exchange_for_reduction,
    partition_id,
    replica_id,
    run_collective,
)
from pjrt_hub.backends.stablehlo.collectives import Collective

__all__ = ["collective_call", "collective_exchange", "collective_spec", "objmode", "partition_id", "replica_id"]


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


def collective_spec(text: str) -> Collective:
    """The :class:`Collective` a generated module describes as JSON."""
    d = json.loads(text)
    return Collective(
        kind=d["kind"], key=d["key"], groups=tuple(tuple(g) for g in d["groups"]),
        channel_id=d["channel_id"], use_global_device_ids=d["use_global_device_ids"],
        dimension=d["dimension"], concat_dimension=d["concat_dimension"], split_count=d["split_count"],
        reduction=d["reduction"], operand_dtypes=tuple(_dtype(x) for x in d["operand_dtypes"]),
        operand_shapes=tuple(tuple(s) for s in d["operand_shapes"]),
        result_shapes=tuple(tuple(s) for s in d["result_shapes"]), where=d["where"])


def _shaped(spec: Collective, operands: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(a).reshape(shape) for a, shape in zip(operands, spec.operand_shapes)]


def collective_call(spec: Collective, operands: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    results = run_collective(spec, _shaped(spec, operands))
    return tuple(np.ascontiguousarray(r).reshape(-1) for r in results)


def collective_exchange(spec: Collective, operands: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    stacked = exchange_for_reduction(spec, _shaped(spec, operands))
    return tuple(np.ascontiguousarray(s).reshape(-1) for s in stacked)
