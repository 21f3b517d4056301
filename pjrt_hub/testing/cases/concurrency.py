"""concurrency: one loaded executable, executed from several threads at once.

PJRT objects are thread-safe: frameworks run the same executable from many Python threads (data
loaders, ``jax.jit`` called from a thread pool). Each caller must get its own results, computed
from its own arguments, in buffers of its own: the case checks every result as soon as its
caller has it, and once more when every thread is done (a later execution must not have
overwritten an earlier one's outputs).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._case import case, check, fail
from .._context import CALL_TIMEOUT, PluginUnderTest, describe
from .._programs import two_outputs

#: Threads that execute at once, and executions each.
THREADS = 4
ROUNDS = 6


@case("concurrency", timeout=120.0)
def same_executable_from_threads(ctx: PluginUnderTest) -> None:
    """The same loaded executable, executed from several threads at once, gives each caller the
    results of its own arguments, in outputs that stay as they were."""
    executable = ctx.compile(two_outputs())
    client, device = ctx.client, ctx.device
    barrier = threading.Barrier(THREADS)
    kept: list[tuple[str, np.ndarray, np.ndarray, list[Any]]] = []
    problems: list[str] = []
    lock = threading.Lock()
    limit = ctx.seconds(CALL_TIMEOUT)

    def put(array: np.ndarray) -> Any:
        transfer = client.buffer_from_host_buffer(array, device=device)
        transfer.done_with_host_buffer.await_(limit)
        return transfer.buffer

    def fetch(buffer: Any) -> np.ndarray:
        copy = buffer.to_host_buffer()
        copy.event.await_(limit)
        return np.asarray(copy.array)

    def worker(thread: int) -> None:
        try:
            barrier.wait(limit)
            for step in range(ROUNDS):
                x = np.arange(6, dtype=np.float32).reshape(2, 3) + np.float32(100 * thread + step)
                y = np.full((2, 3), np.float32(thread + 1) + np.float32(step) / 8, np.float32)
                result = executable.execute([[put(x), put(y)]])
                for event in result.device_complete_events:
                    event.await_(limit)
                outputs = result.outputs[0]
                label = f"thread {thread}, execution {step}"
                got = [fetch(b) for b in outputs]
                with lock:
                    kept.append((label, x, y, outputs))
                    if not (np.array_equal(got[0], x + y) and np.array_equal(got[1], x * y)):
                        problems.append(f"{label} got (x + y, x * y) = ({got[0].tolist()}, {got[1].tolist()}) for "
                                        f"x = {x.tolist()}, y = {y.tolist()}")
        except Exception as exc:  # noqa: BLE001 - reported with the thread that saw it
            with lock:
                problems.append(f"thread {thread}: {describe(exc)}")

    threads = [threading.Thread(target=worker, args=(t,), name=f"pjrt-conformance caller {t}", daemon=True)
               for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(ctx.seconds(100.0))
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        fail(f"{len(alive)} of {THREADS} threads executing the same executable did not finish: a deadlock between "
             f"concurrent PJRT_LoadedExecutable_Execute calls ({'; '.join(problems[:2]) or 'no error seen'})")
    check(not problems, lambda: f"{len(problems)} of {THREADS * ROUNDS} concurrent executions went wrong: "
                                f"{'; '.join(problems[:3])}. PJRT objects are thread-safe: each caller gets the "
                                "results of its own arguments")
    for label, x, y, outputs in kept:
        got = [ctx.fetch(b) for b in outputs]
        check(np.array_equal(got[0], x + y) and np.array_equal(got[1], x * y),
              f"the outputs of {label} changed after the other threads' executions: now "
              f"({got[0].tolist()}, {got[1].tolist()}); every execution's outputs are buffers of their own")
