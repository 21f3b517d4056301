"""Output arrays that reuse the memory the last run freed, instead of faulting in fresh pages.

Each run of a program allocates its outputs (numba's ``np.empty``, through ``malloc``), and a
caller that drops the results of one run frees them before the next. glibc serves a request of
more than ``M_MMAP_THRESHOLD`` bytes with a fresh ``mmap`` and gives it back to the kernel when
it is freed, and trims the top of its heap once more than ``M_TRIM_THRESHOLD`` bytes there are
free; both thresholds move with what the process did before (up to 32 MiB and 64 MiB). Either
way the next run's output is memory the kernel must map and zero again, page by page, which for
a program with a large output (layernorm's is 32 MiB) is a large part of each run, where memory
that stays in the heap is reused without a fault (figures: docs/measurements.md). The MLP and
the elementwise chain fault little already.

:func:`keep_freed_memory` fixes both thresholds (``mallopt``), once per process, when the first
numba_cpu compiler is made: requests up to :data:`MMAP_THRESHOLD` come from the heap (twice
glibc's own largest dynamic value, which layernorm's 32 MiB output just reaches; an older glibc
that refuses it gets 32 MiB), and up to :data:`TRIM_THRESHOLD` of free memory at its
top is kept for the next run rather than given back. The cost is memory the process holds after
freeing it: that much at the top of each arena, and, as with any block glibc serves from the
heap, freed blocks below a live allocation, which no threshold gives back. A user who tunes
glibc's malloc (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``,
``MALLOC_MMAP_MAX_``, ``glibc.malloc`` tunables) keeps their settings; other systems and C
libraries are left alone.

Memory that is new to the process costs more where numpy asks for huge pages. numpy advises
``MADV_HUGEPAGE`` on every array of 4 MiB or more; where the kernel's transparent huge pages
``defrag`` setting is ``madvise`` or ``defer+madvise`` (Ubuntu's and the kernel's default), a
page fault in such memory stops to compact memory until a free 2 MiB page turns up, which takes
long when the page cache has filled memory, as on any machine up for a while. A program's first
run, whose outputs and their host copies are all new memory, then waits for those compactions
(figures: docs/measurements.md); runs after the first reuse their memory (above).

:func:`fault_without_compaction` turns numpy's advice off, once per process, when the first
numba_cpu compiler is made, where that setting stalls such faults. Where ``enabled`` is
``always``, the kernel still gives huge pages it has free, and khugepaged merges pages later;
where it is ``madvise``, large numpy arrays then live in 4 KiB pages, which costs a program that
sweeps them some TLB misses (numba's compiled code never had the advice: its outputs come from
``malloc``). A user who set ``NUMPY_MADVISE_HUGEPAGE`` keeps their choice; other settings and
systems are left alone.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "fault_without_compaction", "keep_freed_memory"]

#: Allocations smaller than this come from the heap, where freed memory is reused.
MMAP_THRESHOLD = 64 << 20
#: What older glibc (before 2.35 or so) accepts at most, tried when it refuses the above.
_MMAP_THRESHOLD_OLD_MAX = 32 << 20
#: Free memory kept at the top of the heap rather than given back to the kernel.
TRIM_THRESHOLD = 256 << 20

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: The user's own malloc tuning, which is kept.
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_lock = threading.Lock()
_done: bool | None = None


def _user_tuned(environ: "os._Environ[str] | dict[str, str]") -> bool:
    tunables = environ.get("GLIBC_TUNABLES", "")
    return any(name in environ for name in _USER_SETTINGS) or "glibc.malloc." in tunables


def keep_freed_memory(environ: "os._Environ[str] | dict[str, str] | None" = None) -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring), once per process.

    Returns whether they are set, by this call or an earlier one."""
    global _done
    with _lock:
        if _done is not None:
            return _done
        _done = False
        if _user_tuned(os.environ if environ is None else environ):
            return False
        if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
            return False
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError, TypeError):
            return False
        mallopt.restype = ctypes.c_int
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        # mallopt returns 1 on success. The mmap threshold first: setting it stops glibc moving
        # both thresholds by itself. Each is worth having without the other.
        mmap_set = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) or bool(
            mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_OLD_MAX))
        trim_set = bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        _done = mmap_set and trim_set
        return _done


#: Where Linux says when a fault in memory advised for huge pages compacts memory.
THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
#: Its settings under which such a fault waits for compaction when no huge page is free.
_STALLING = ("madvise", "defer+madvise")

_advice_done: bool | None = None


def _thp_defrag(path: str) -> str | None:
    """The selected ``defrag`` setting (``always defer [madvise] never`` gives ``madvise``)."""
    try:
        with open(path) as fh:
            words = fh.read().split()
    except OSError:
        return None
    chosen = [w[1:-1] for w in words if w.startswith("[") and w.endswith("]")]
    return chosen[0] if len(chosen) == 1 else None


def fault_without_compaction(environ: "os._Environ[str] | dict[str, str] | None" = None,
                             defrag_path: str = THP_DEFRAG) -> bool:
    """Turn numpy's ``MADV_HUGEPAGE`` advice off where it makes a fault wait for compaction (see
    the module docstring), once per process. Returns whether it is off by this call or an
    earlier one."""
    global _advice_done
    with _lock:
        if _advice_done is not None:
            return _advice_done
        _advice_done = False
        if "NUMPY_MADVISE_HUGEPAGE" in (os.environ if environ is None else environ):
            return False
        if not sys.platform.startswith("linux") or _thp_defrag(defrag_path) not in _STALLING:
            return False
        try:
            from numpy._core import multiarray
        except ImportError:  # numpy 1.x
            from numpy.core import multiarray  # type: ignore[no-redef]
        advise = getattr(multiarray, "_set_madvise_hugepage", None)
        if advise is None:
            return False
        advise(False)
        _advice_done = True
        return True
