"""Running one generated program on several clients and checking every output against the rules."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from pjrt_hub.abi import CompileOptions, Program

from .compare import bad_elements, mismatch
from .programs import Output


class Compiled:
    """A program compiled on every client once; executed on many argument lists."""

    def __init__(self, clients: dict[str, Any], text: str) -> None:
        self.text = text
        self.executables = {name: c.compile(Program(text, "mlir"), CompileOptions()) for name, c in clients.items()}
        self.clients = clients

    def run(self, name: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        from pjrt_hub._run import host_array

        client = self.clients[name]
        device = client.addressable_devices()[0]
        buffers = []
        for a in args:
            transfer = client.buffer_from_host_buffer(host_array(a), device=device)
            transfer.done_with_host_buffer.await_(60)
            buffers.append(transfer.buffer)
        result = self.executables[name].execute([buffers])
        for event in result.device_complete_events:
            event.await_(60)
        outs = []
        for buffer in result.outputs[0]:
            host = buffer.to_host_buffer()
            host.event.await_(60)
            outs.append(host.array)
            buffer.destroy()
        for buffer in buffers:
            buffer.destroy()
        return outs

    def close(self) -> None:
        for executable in self.executables.values():
            executable.destroy()


def check(compiled: Compiled, args: Sequence[np.ndarray], expected: Callable[[list[np.ndarray]], list[Output]],
          plugins: Sequence[str] | None = None) -> list[str]:
    """Every output of every plugin that differs from the rules, as lines naming plugin and op."""
    want = expected(list(args))
    problems = []
    for name in plugins or compiled.executables:
        got = compiled.run(name, args)
        for g, o in zip(got, want):
            m = mismatch(g, o)
            if m:
                problems.append(f"{name}: {m}")
    return problems


def describe(text: str, args: Sequence[np.ndarray], problems: list[str]) -> str:
    shown = "\n".join(f"  arg{i} = np.array({a.tolist()!r}, {a.dtype.name!r})" for i, a in enumerate(args))
    return "\n".join(problems) + f"\nprogram:\n{text}arguments:\n{shown}"


def check_where_xla_agrees(compiled: Compiled, args: Sequence[np.ndarray],
                           expected: Callable[[list[np.ndarray]], list[Output]], xla: str = "xla") -> list[str]:
    """Where XLA's result and the rules agree, our plugins must agree too: the elements of our
    outputs that differ from the rules where XLA's do not. (Where XLA differs from the rules,
    e.g. it flushes subnormals to zero, our plugins keep to the rules, checked elsewhere.)"""
    want = expected(list(args))
    xla_out = compiled.run(xla, args)
    agree = [~bad_elements(g, o) for g, o in zip(xla_out, want)]
    problems = []
    for name in compiled.executables:
        if name == xla:
            continue
        for g, o, ok in zip(compiled.run(name, args), want, agree):
            m = mismatch(g, o, where=ok)
            if m:
                problems.append(f"{name} (XLA agrees with the rules here): {m}")
    return problems
