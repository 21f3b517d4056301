"""Deep nesting: programs whose calls or regions nest deeper than Python's stack allows.

The front end, the inliner and the reference interpreter walk nested calls and regions
recursively, which is natural and fast for what JAX emits (a handful of levels). A generated or
machine-built program can nest thousands deep (a 2,000-deep call chain hit RecursionError).
:func:`run_deep` runs such work again in a thread with a large stack and a recursion allowance to
match, so nesting is limited by memory up to :data:`MAX_NESTING` levels; :func:`call_depth`
refuses recursion (which StableHLO programs from JAX never use) and deeper call chains with a
clear message before any walk starts.
"""

from __future__ import annotations

import sys
import threading
from typing import Callable, TypeVar

from pjrt_hub.abi import CompileError

from .ir import Module

__all__ = ["MAX_NESTING", "call_depth", "run_deep"]

#: The deepest nesting of calls (and of regions) pjrt-hub compiles and runs. JAX programs nest
#: a few levels (jit in custom_jvp in remat in scan...); this is far above that.
MAX_NESTING = 10_000

#: Stack of the thread deep work runs in (address space only: pages are touched as used).
_DEEP_STACK = 1 << 30
#: Python frames per nesting level the deepest walker uses, with room to spare.
_FRAMES_PER_LEVEL = 12
_lock = threading.Lock()
_DEEP_THREAD = "pjrt-hub-deep"

T = TypeVar("T")


def _from_recursion(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 64:
        if isinstance(exc, RecursionError):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def run_deep(fn: Callable[..., T], *args, **kwargs) -> T:
    """``fn(*args, **kwargs)``; if it ran out of stack, again in a thread with a 1 GiB stack and
    room for :data:`MAX_NESTING` levels. ``fn`` must not have side effects it cannot repeat."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - re-raised unless it was the stack running out
        if not _from_recursion(exc) or threading.current_thread().name == _DEEP_THREAD:
            raise  # already on the deep stack: there is no deeper one to try
    # What the thread gives back: its result, or the exception it raised.
    results: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            results.append(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            errors.append(exc)

    with _lock:
        old_limit = sys.getrecursionlimit()
        old_stack = threading.stack_size()
        sys.setrecursionlimit(max(old_limit, MAX_NESTING * _FRAMES_PER_LEVEL))
        try:
            threading.stack_size(_DEEP_STACK)
            thread = threading.Thread(target=target, name=_DEEP_THREAD)
            thread.start()
        finally:
            threading.stack_size(old_stack)
        thread.join()
        sys.setrecursionlimit(old_limit)
    if errors:
        error = errors[0]
        if _from_recursion(error):
            raise CompileError(f"the program nests deeper than pjrt-hub's limit of {MAX_NESTING} levels "
                               "(calls or regions inside one another)") from None
        raise error
    return results[0]


def call_depth(module: Module) -> int:
    """How deep ``@main``'s calls nest (0: no calls). CompileError for recursion, and for chains
    deeper than :data:`MAX_NESTING`. Iterative, so any depth can be measured."""
    depth: dict[str, int] = {}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    main = module.main.name
    stack: list[tuple[str, list[str]]] = [(main, _callees(module, main))]
    state[main] = 1
    path = [main]
    while stack:
        name, pending = stack[-1]
        if pending:
            callee = pending.pop()
            if callee not in module.functions:
                continue  # the verifier names undefined callees
            if state.get(callee) == 1:
                cycle = path[path.index(callee):] + [callee]
                raise CompileError("recursive calls are not supported (StableHLO programs from JAX never "
                                   "recurse): " + " -> ".join(f"@{n}" for n in cycle))
            if state.get(callee) != 2:
                state[callee] = 1
                path.append(callee)
                stack.append((callee, _callees(module, callee)))
            continue
        stack.pop()
        path.pop()
        state[name] = 2
        depth[name] = 1 + max((depth[c] for c in set(_callees(module, name)) if c in depth), default=-1)
        if depth[name] > MAX_NESTING:
            raise CompileError(f"calls nest {depth[name]} deep from @{name}; pjrt-hub's limit is {MAX_NESTING}")
    return depth[main]


def _callees(module: Module, name: str) -> list[str]:
    out = []
    for op in module.functions[name].walk():
        if op.name in ("func.call", "stablehlo.composite"):
            ref = op.attr("callee") if op.name == "func.call" else op.attr("decomposition")
            out.append(getattr(ref, "name", str(ref)))
    return out
