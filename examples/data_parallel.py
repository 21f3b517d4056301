"""Data-parallel training of the collectives corpus's MLP with the step ``jax.pmap`` emits.

``dp_mlp_step.mlir`` is one SGD step of a 2-layer MLP on 4 replicas: each computes gradients on
its batch, an ``all_reduce`` averages them, each updates its copy of the parameters. This script
runs it for 50 steps with the parameters donated to the step (their buffers become the new
parameters), printing the loss. Run it on one process with 4 devices, or as a job:

    python examples/data_parallel.py                         # 1 process x 4 devices
    pjrt-hub launch -n 2 --devices-per-process 2 -- python examples/data_parallel.py

Both print the same losses (within float tolerance: the sums meet in another order), and two
runs of one configuration agree bit for bit. ``--losses FILE`` writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from importlib import resources

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--plugin", default="numba_cpu")
    parser.add_argument("--losses", default=None, help="write the losses to this JSON file (rank 0)")
    parser.add_argument("--die-at-step", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--die-rank", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    from pjrt_hub.abi import Program, PjrtError

    corpus = resources.files("pjrt_hub.data.corpus.collectives")
    text = corpus.joinpath("dp_mlp_step.mlir").read_text()
    # Donate the four parameters to the step, as jax.pmap(step, donate_argnums=(0, 1, 2, 3)) does.
    for i in range(4):
        text = text.replace(f"%arg{i}: tensor<", f"%arg{i}: TENSOR{i}<", 1)
        head, _, rest = text.partition(f"%arg{i}: TENSOR{i}<")
        ty, _, tail = rest.partition(">")
        text = f"{head}%arg{i}: tensor<{ty}> {{tf.aliasing_output = {i} : i32}}{tail}"
    with corpus.joinpath("dp_mlp_step.npz").open("rb") as f, np.load(f) as z:
        data = {k: z[k] for k in z.files}

    if "PJRT_HUB_STORE" in os.environ:
        import pjrt_hub.distributed as dist

        job = dist.initialize()
        client = job.create_client(args.plugin)
        rank = job.rank
    else:
        from pjrt_hub._registry import PluginRegistry, RegistrySettings

        job = None
        client = PluginRegistry(RegistrySettings.from_environment()).create_client(args.plugin, {"cpu_device_count": 4})
        rank = 0
    executable = client.compile(Program(text))
    devices = executable.addressable_devices()
    replicas = [d.id for d in devices]

    def put(array, device):
        transfer = client.buffer_from_host_buffer(np.ascontiguousarray(array), device=device)
        transfer.done_with_host_buffer.await_()
        return transfer.buffer

    params = [[put(data[f"r{r}_in{i}"], d) for i in range(4)] for r, d in zip(replicas, devices)]
    batches = [[put(data[f"r{r}_in{i}"], d) for i in (4, 5)] for r, d in zip(replicas, devices)]
    losses = []
    try:
        for step in range(args.steps):
            if args.die_at_step == step and rank == args.die_rank:
                os.kill(os.getpid(), signal.SIGKILL)
            result = executable.execute([p + b for p, b in zip(params, batches)])
            for event in result.device_complete_events:
                event.await_()
            params = [row[:4] for row in result.outputs]
            host = result.outputs[0][4].to_host_buffer()
            host.event.await_()
            loss = float(host.array)
            losses.append(loss)
            if rank == 0:
                print(f"step {step:3d}  loss {loss:.6f}", flush=True)
    except PjrtError as exc:
        print(f"rank {rank}: training stopped at step {len(losses)}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if job is not None:
            job.close()
    if rank == 0 and args.losses:
        with open(args.losses, "w") as f:
            json.dump(losses, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
