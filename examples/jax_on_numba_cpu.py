"""Train the corpus MLP with plain JAX on pjrt-hub's numba_cpu backend, next to XLA:CPU.

    pip install 'pjrt-hub[jax]'
    python examples/jax_on_numba_cpu.py [--steps 50] [--plugin numba_cpu]

The model and its data are the corpus program ``mlp_train_step`` (a 32-64-64-10 ReLU MLP, softmax
cross-entropy, SGD with learning rate 0.1, a batch of 16): the same JAX code runs on a numba_cpu
device and on JAX's own CPU device, and the losses are printed side by side. Nothing in the
training code knows about pjrt-hub: registering the plugin is the only line that does.
"""

from __future__ import annotations

import argparse
import time
from importlib import resources

import numpy as np

import pjrt_hub.jax


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="SGD steps (default 50)")
    parser.add_argument("--plugin", default="numba_cpu", help="the pjrt-hub plugin to train on")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")

    pjrt_hub.jax.register(args.plugin)  # before JAX makes its backends

    import jax
    import jax.numpy as jnp

    data = np.load(resources.files("pjrt_hub") / "data" / "corpus" / "public" / "mlp_train_step.npz")
    arrays = [data[f"in{i}"] for i in range(8)]
    params = dict(zip(["b1", "b2", "b3", "w1", "w2", "w3"], arrays[:6]))
    x, labels = arrays[6], arrays[7]

    def loss_fn(p, x, labels):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        logp = jax.nn.log_softmax(h @ p["w3"] + p["b3"])
        return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, 10) * logp, axis=-1))

    @jax.jit
    def step(p, x, labels):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, labels)
        return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads), loss

    runs = {}
    for name, device in ((args.plugin, jax.devices(args.plugin)[0]), ("XLA:CPU", jax.devices("cpu")[0])):
        p, xs, ys = jax.device_put((params, x, labels), device)
        losses = []
        t0 = time.perf_counter()
        p, loss = step(p, xs, ys)
        losses.append(float(loss))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(args.steps - 1):
            p, loss = step(p, xs, ys)
            losses.append(float(loss))
        rest = (time.perf_counter() - t0) / max(1, args.steps - 1)
        runs[name] = (losses, first, rest, {d.platform for d in loss.devices()})

    names = list(runs)
    print(f"{'step':>5}  {names[0] + ' loss':>16}  {names[1] + ' loss':>16}  {'|difference|':>12}")
    shown = sorted({0, 1, 2, args.steps // 4, args.steps // 2, 3 * args.steps // 4, args.steps - 1})
    for i in shown:
        a, b = runs[names[0]][0][i], runs[names[1]][0][i]
        print(f"{i + 1:>5}  {a:>16.6f}  {b:>16.6f}  {abs(a - b):>12.2e}")
    for name in names:
        losses, first, rest, platforms = runs[name]
        print(f"{name}: ran on {', '.join(sorted(platforms))}; first step {first * 1e3:.0f} ms "
              f"(trace, compile, run), then {rest * 1e3:.2f} ms a step")
    final = [runs[n][0][-1] for n in names]
    print(f"final loss {final[0]:.6f} on {names[0]}, {final[1]:.6f} on {names[1]}; "
          f"relative difference {abs(final[0] - final[1]) / abs(final[1]):.1e}")


if __name__ == "__main__":
    main()
