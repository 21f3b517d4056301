"""What the CPU that numba compiles for can do, found without importing numba or llvmlite: the
eager tier (.eager_math) must not pay for that import, and it must make the same choice as the
compiled code (.vecmath), which reads these flags too.

Either choice gives the same bits on both tiers: ``llvm.fma`` and ``llvm.ldexp`` round as the
eager tier's emulation does whether they become one instruction or a libm call. What the flags
decide is speed: with FMA, exp's polynomial is a chain of fused multiply-adds (half the
instructions); with AVX-512, its scaling by ``2**n`` is one ``vscalef``. A target without them
would run those as scalar libm calls, so there the compiled code keeps separate multiplies and
adds, and the eager tier computes those.

The flags come from ``NUMBA_CPU_FEATURES`` when it is set (numba then compiles for exactly
those), else from the kernel's list of the CPU's flags (``/proc/cpuinfo``); none elsewhere.
"""

from __future__ import annotations

import os

__all__ = ["HAS_FMA", "HAS_SCALEF", "cpu_features"]


def cpu_features() -> frozenset[str]:
    """The features numba compiles for, as far as FMA and AVX-512 go: LLVM's names (``fma``,
    ``avx512f``), which are also the kernel's."""
    text = os.environ.get("NUMBA_CPU_FEATURES")
    if text:
        return frozenset(f[1:] for f in text.split(",") if f.startswith("+"))
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


_FEATURES = cpu_features()
#: Fused multiply-add (x86's FMA3).
HAS_FMA = "fma" in _FEATURES
#: AVX-512, whose ``vscalef`` scales by a power of two in one instruction.
HAS_SCALEF = "avx512f" in _FEATURES and os.environ.get("NUMBA_ENABLE_AVX", "1") != "0"
