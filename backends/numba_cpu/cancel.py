"""How a compiled ``while`` loop notices that the runtime wants it to stop.

A ``while`` loop may never end, and compiled code cannot be interrupted from outside (it holds
no GIL), so a program with such a loop takes one more argument, ``cancel_flag``: the runtime's
one-element int32 array (``pjrt_hub.backends.cpu_runtime._cancel``). Each iteration reads it
with :func:`cancel_requested` and raises :class:`~pjrt_hub.abi.Cancelled` once it is non-zero;
the runtime then reports its own reason (DeadlineExceeded for a time limit).

The read is an atomic (monotonic) load: a plain load of memory the loop never writes may be
hoisted out of the loop by LLVM, and the loop would then never see the flag change. On x86-64
and AArch64 it is an ordinary load instruction, so an iteration pays one load and one
predictable branch. Loops other than ``while`` have trip counts fixed by the static shapes, so
they end by themselves and read nothing.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from pjrt_hub.abi import Cancelled

__all__ = ["CANCEL_FLAG", "CANCEL_FLAG_TYPE", "Cancelled", "cancel_check", "cancel_requested"]

#: The name of the flag parameter of a generated entry function.
CANCEL_FLAG = "cancel_flag"
#: Its numba type, in the entry's explicit signature.
CANCEL_FLAG_TYPE = "types.Array(types.int32, 1, 'C')"


@intrinsic
def cancel_requested(typingctx, flag):
    """``flag[0] != 0``, read with an atomic load that stays inside the loop."""
    if not (isinstance(flag, types.Array) and flag.dtype == types.int32 and flag.ndim == 1):
        return None

    def codegen(context, builder, sig, args):
        array = context.make_array(sig.args[0])(context, builder, args[0])
        value = builder.load_atomic(array.data, "monotonic", 4)
        return builder.icmp_signed("!=", value, ir.Constant(value.type, 0))

    return types.boolean(flag), codegen


def cancel_check() -> str:
    """The statement a generated loop runs at the top of each iteration."""
    return f"if cancel_requested({CANCEL_FLAG}): raise Cancelled('numba_cpu: the run was stopped in a while loop')"
