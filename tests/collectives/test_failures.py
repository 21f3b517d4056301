"""A collective that cannot complete is an error on every process, quickly, never a hang."""

from __future__ import annotations

import time

import numpy as np

from pjrt_hub.abi import Aborted, DeadlineExceeded, ExecutionError, Program
from pjrt_hub.backends.cpu_runtime import CpuApi, TensorSpec
from pjrt_hub.backends.cpu_runtime._collectives import current_participant, run_collective
from pjrt_hub.backends.stablehlo.collectives import Collective

SPEC = Collective(kind="all_reduce", key=0, groups=((0, 1, 2, 3),), channel_id=0, use_global_device_ids=False,
                  reduction="sum", operand_dtypes=(np.dtype(np.float32),), operand_shapes=((2,),),
                  result_shapes=((2,),), where="line 3")


class _Program:
    """Replica ``failing`` raises before the all_reduce; replica ``absent`` never reaches it."""

    name = "faulty"
    inputs = (TensorSpec((2,), np.dtype(np.float32)),)
    outputs = (TensorSpec((2,), np.dtype(np.float32)),)
    aliases: dict = {}
    fingerprint = "faulty"
    num_replicas = 4
    uses_collectives = True

    def __init__(self, failing: int | None, absent: int | None) -> None:
        self.failing, self.absent = failing, absent

    def run(self, args, out=None):
        me = current_participant().replica
        if me == self.failing:
            time.sleep(0.2)
            raise ValueError("replica exploded")
        if me == self.absent:
            return [args[0] * 1]
        return run_collective(SPEC, [args[0]])

    def cost_analysis(self):
        return {"flops": 1e9, "bytes accessed": 1e9}

    def serialize(self):
        return b""


class _Compiler:
    name = "faulty"

    def __init__(self, program):
        self.program = program

    def compile(self, code, options):
        return self.program

    def deserialize(self, data):
        return self.program


def _run(program, timeout: float):
    client = CpuApi(_Compiler(program)).client_create({"num_devices": 4, "collective_timeout": timeout})
    exe = client.compile(Program("faulty"))
    args = [[client.buffer_from_host_buffer(np.ones(2, np.float32), device=d).buffer] for d in client.devices()]
    start = time.monotonic()
    result = exe.execute(args)
    errors = []
    for event in result.device_complete_events:
        try:
            event.await_(30)
            errors.append(None)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    return errors, time.monotonic() - start


def test_a_failed_replica_fails_the_others_at_once():
    errors, elapsed = _run(_Program(failing=2, absent=None), timeout=60)
    assert isinstance(errors[2], ExecutionError) and "replica exploded" in str(errors[2])
    for r in (0, 1, 3):
        assert isinstance(errors[r], Aborted), errors[r]
        assert "replica 2 failed" in str(errors[r]) and "replica exploded" in str(errors[r])
    assert elapsed < 30  # far below the 60 s deadline: woken by the failure, not timed out


def test_a_replica_that_never_arrives_is_a_deadline_error_naming_it():
    errors, _ = _run(_Program(failing=None, absent=3), timeout=1.0)
    assert errors[3] is None
    for r in (0, 1, 2):
        assert isinstance(errors[r], (DeadlineExceeded, Aborted)), errors[r]
    assert any(isinstance(e, DeadlineExceeded) and "replica 3" in str(e) and "1 s" in str(e) for e in errors)
