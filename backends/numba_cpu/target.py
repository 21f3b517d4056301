"""Whether exp's compiled code uses fused multiply-adds and AVX-512's ``vscalef``, decided once
per process tree, without importing numba or llvmlite: the eager tier (.eager_math) must not pay
for that import, and it must take the same path as the compiled code (.vecmath), which reads the
same flags.

Either path gives the same bits on both tiers: ``llvm.fma`` and ``llvm.ldexp`` round as the
eager tier's emulation does, whether they become one instruction or a libm call. What the flags
decide is speed: with FMA, exp's polynomial is a chain of fused multiply-adds (half the
instructions); with AVX-512, its scaling by ``2**n`` is one ``vscalef``. A target without them
would run those as scalar libm calls, so there the compiled code keeps separate multiplies and
adds, and the eager tier computes those.

The flags follow what numba compiles for, read as numba reads it: ``NUMBA_CPU_FEATURES`` when
set (``+`` and ``-`` entries in order; empty, or ``NUMBA_CPU_NAME=generic`` without it, means
none), else the CPU's flags from ``/proc/cpuinfo`` (none elsewhere), without the ``avx`` ones
under ``NUMBA_ENABLE_AVX=0``. numba's own default of no AVX on some CPU names (VMs reporting
``nocona``) is not known here: there ``vscalef`` becomes a libm call, correct but slower.

The first process to decide writes its decision to ``PJRT_HUB_NUMBA_VECMATH`` (``fma``,
``scalef``, comma-separated, or empty), and a process that finds it there takes it as it is: the
background compile process, which inherits the environment, then compiles what its parent's
eager tier computes, even where the parent changed numba's settings after deciding. The decision
is part of every cache key (.compiler.backend_digest), so a cache shared by machines, or by
settings, that decide differently never serves one path's code to the other.
"""

from __future__ import annotations

import os

__all__ = ["DECISION_VARIABLE", "HAS_FMA", "HAS_SCALEF", "TAG", "WIDE_VECTORS", "numba_features"]

#: Where the decision is passed on to child processes.
DECISION_VARIABLE = "PJRT_HUB_NUMBA_VECMATH"


def _parse(text: str) -> set[str]:
    on: set[str] = set()
    for item in text.split(","):
        item = item.strip()
        if item.startswith("+"):
            on.add(item[1:])
        elif item.startswith("-"):
            on.discard(item[1:])
    return on


def _cpuinfo_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def _avx_enabled() -> bool:
    text = os.environ.get("NUMBA_ENABLE_AVX", "").strip()
    try:
        return int(text) != 0 if text else True
    except ValueError:
        return True


def numba_features() -> frozenset[str]:
    """The CPU features numba compiles for, in LLVM's names (``fma``, ``avx512f``; the kernel's
    are the same), as far as this module can know them (see the module docstring)."""
    text = os.environ.get("NUMBA_CPU_FEATURES")
    if text is None and os.environ.get("NUMBA_CPU_NAME", "").strip().lower() == "generic":
        text = ""
    if text is not None:  # numba takes these as they are, NUMBA_ENABLE_AVX or not
        features = _parse(text)
    else:
        features = _cpuinfo_flags()
        if not _avx_enabled():
            features = {f for f in features if not f.startswith("avx")}
    if "avx512f" in features:  # implies FMA, as in LLVM
        features.add("fma")
    return frozenset(features)


def _decide() -> tuple[bool, bool]:
    told = os.environ.get(DECISION_VARIABLE)
    if told is not None:
        parts = {p.strip() for p in told.split(",")}
        return "fma" in parts, "scalef" in parts
    features = numba_features()
    fma, scalef = "fma" in features, "avx512f" in features
    os.environ[DECISION_VARIABLE] = ",".join(name for name, on in (("fma", fma), ("scalef", scalef)) if on)
    return fma, scalef


#: Fused multiply-add (x86's FMA3): exp's polynomial as ``llvm.fma`` on both tiers.
#: AVX-512, whose ``vscalef`` scales by a power of two in one instruction (``llvm.ldexp``).
HAS_FMA, HAS_SCALEF = _decide()
#: Where AVX-512 is used, the generated functions are vectorised with 512-bit registers: LLVM's
#: default for these CPUs is 256 bits (the wider instructions once cost clock speed, which is
#: still its choice for code in general), but a fused loop is long arithmetic on data in cache,
#: where twice the lanes per instruction pays: softmax, layernorm and the elementwise chain of
#: the perf programs run faster (docs/two-tiers.md). Only the generated
#: functions ask for it (.intrinsics wide_vectors), not the rest of the process's numba code.
#: The bits do not change: each lane computes what it did, and no reduction is reordered
#: (numba does not allow LLVM to).
WIDE_VECTORS = HAS_SCALEF
#: The decision, for cache keys.
TAG = f"fma={int(HAS_FMA)} scalef={int(HAS_SCALEF)} wide={int(WIDE_VECTORS)}"
