"""The execute fast path, written out for an executable's number of arguments.

Most executions are the common case: one device, every argument a ready buffer of this client
with the declared layout, nothing donated, a program cheap enough to run on the caller's thread.
For a tiny program that case is all bookkeeping (the add of two 4-element vectors computes in
well under a microsecond), and a loop over the arguments, a list of their arrays and an index
are a sixth of it. So the fast path is Python source made once per arity, the way ``dataclasses``
and ``namedtuple`` write their methods: straight-line code over local names ``b0, b1, ...``
(the buffers), ``l0, ...`` (the declared layouts) and ``a0, ...`` (the arrays), up to
:data:`UNROLL_MAX` arguments (loops beyond: there the program's own work dominates). What is not
per argument (running the program when it has no direct entry, results to check, an error,
outputs that are not fresh) is the executable's own methods, in :mod:`._executables`.

The function made for ``n`` arguments is ``execute_fast(executable, args)``: an
:class:`ExecuteResult`, or None having changed nothing when the call is not the common case
(the general path then checks it and raises the right error). Under the client's lock it checks
the arguments and, once the program has a direct entry (its compiled code), runs it and makes
the outputs without letting go of the lock: no other thread can delete or donate an argument
meanwhile, and the run is short (only a program within :class:`~._executables.InlinePolicy`'s
limits and without unbounded loops is given its entry; a synchronous client runs longer ones
inline too, through ``run``). Before that (the program's first tier), or when
the entry refuses the arrays, it takes a hold (``_uses``) on every argument instead, runs the
program without the lock, then gives the holds back and makes the outputs under the lock again,
and runs the release hooks that came due (zero-copy arguments whose owner dropped them
meanwhile) after it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pjrt_hub.abi import ExecuteResult

from ._buffers import CpuBuffer
from ._events import READY

if TYPE_CHECKING:
    from ._executables import CpuLoadedExecutable

__all__ = ["fast_execute"]

FastExecute = Callable[["CpuLoadedExecutable", Sequence[Any]], "ExecuteResult | None"]

_TEMPLATE = """\
def execute_fast(self, args):
    client = self._client
    if self._deleted or client._destroyed or len(args) != {n}:
        return None
    {unpack_buffers}
    {unpack_layouts}
    device = self._devices[0]
    lock = client._lock
    lock.acquire()  # not ``with``: half the cost on an RLock
    try:
        # A set _array means live and ready; the identical layout object means the same shape
        # and dtype (layouts are interned). Nothing is taken until all of them are checked.
{checks}
        entry = self._entry
        if entry is None and self._direct_entry is not None:
            entry = self._entry = self._direct_entry()  # None until the program has one
        if entry is not None:
            # The compiled program, cheap enough to run inline: run it holding the lock, so
            # that no other thread can delete or donate an argument meanwhile, instead of
            # taking a hold on each and locking again to give them back.
            try:
                results = entry({direct})
            except TypeError:  # arrays the entry does not take as they are: run() coerces them
                pass
            except Exception as exc:  # an execution error goes onto the event and the outputs
                outputs, event = self._made_outputs(None, None, self._execution_error(exc))
                return new_result(ExecuteResult, ([outputs], [event]))
            else:
                outputs = fresh_outputs(device._memories[0], self._outputs, results, self._fast_outputs)
                return new_result(ExecuteResult, ([outputs], [READY]))
{takes}
    finally:
        lock.release()
    # No direct entry yet (the program still runs on its first tier), or one that refused the
    # arrays: run() without the lock, the arguments held.
    results, reusable, error = self._run_fast([{arrays}])
    del {arrays_del}
    hooks = None
    lock.acquire()
    try:
{gives}
        if {any_release}:
            hooks = _release_hooks(({buffers}))
        outputs, event = self._made_outputs(results, reusable, error)
    finally:
        lock.release()
    if hooks:
        for hook in hooks:
            hook()
    return new_result(ExecuteResult, ([outputs], [event]))
"""


def _release_hooks(buffers: Sequence[CpuBuffer]) -> list[Callable[[], None]]:
    """The release hooks now due among ``buffers`` (the holds have been given back)."""
    hooks = []
    for buffer in buffers:
        if buffer._release is not None:
            hook = buffer._take_release_hook()
            if hook is not None:
                hooks.append(hook)
    return hooks


#: Up to this many arguments the per-argument work is written out; beyond, it is loops (a
#: program of thousands of parameters would otherwise take a second to make its fast path).
UNROLL_MAX = 16


@lru_cache(maxsize=None)
def fast_execute(n: int) -> FastExecute:
    """The fast path of executables with ``n`` arguments (made once per process and arity)."""
    if n > UNROLL_MAX:
        parts = {
            "unpack_buffers": "pass",
            "unpack_layouts": "layouts = self._inputs",
            "checks": ("        for b, l in zip(args, layouts):\n"
                       "            if type(b) is not CpuBuffer or b._device is not device or b._layout is not l or b._array is None:\n"
                       "                return None"),
            "takes": "        arrays = [b._array for b in args]\n        for b in args:\n            b._uses += 1",
            "arrays": "*arrays",
            "direct": "*[b._array for b in args]",
            "arrays_del": "arrays",
            "gives": "        for b in args:\n            b._uses -= 1",
            "any_release": "any(b._release is not None for b in args)",
            "buffers": "args",
        }
    elif n:
        parts = {
            "unpack_buffers": f"{', '.join(f'b{i}' for i in range(n))}, = args",
            "unpack_layouts": f"{', '.join(f'l{i}' for i in range(n))}, = self._inputs",
            "checks": "\n".join(
                f"        if (type(b{i}) is not CpuBuffer or b{i}._device is not device or b{i}._layout is not l{i}\n"
                f"                or b{i}._array is None):\n"
                f"            return None" for i in range(n)),
            "takes": "\n".join(f"        a{i} = b{i}._array\n        b{i}._uses += 1" for i in range(n)),
            "arrays": ", ".join(f"a{i}" for i in range(n)),
            "direct": ", ".join(f"b{i}._array" for i in range(n)),
            "arrays_del": ", ".join(f"a{i}" for i in range(n)),
            "gives": "\n".join(f"        b{i}._uses -= 1" for i in range(n)),
            "any_release": " or ".join(f"b{i}._release is not None" for i in range(n)),
            "buffers": "".join(f"b{i}, " for i in range(n)),
        }
    else:
        parts = {"unpack_buffers": "pass", "unpack_layouts": "pass", "checks": "        pass", "takes": "",
                 "arrays": "", "direct": "", "arrays_del": "args", "gives": "        pass", "any_release": "False",
                 "buffers": ""}
    source = _TEMPLATE.format(n=n, **parts)
    namespace: dict[str, Any] = {
        "CpuBuffer": CpuBuffer, "READY": READY, "ExecuteResult": ExecuteResult,
        "fresh_outputs": CpuBuffer._fresh_outputs, "_release_hooks": _release_hooks,
        # ExecuteResult(...) without the named tuple's Python-level __new__.
        "new_result": tuple.__new__,
    }
    exec(compile(source, f"<pjrt-hub fast execute, {n} arguments>", "exec"), namespace)  # noqa: S102
    function: FastExecute = namespace["execute_fast"]
    return function
