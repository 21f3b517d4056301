"""Output arrays that reuse the memory the last run freed, instead of faulting in fresh pages.

Each run of a program allocates its outputs (numba's ``np.empty``, through ``malloc``), and a
caller that drops the results of one run frees them before the next. glibc serves a request of
more than ``M_MMAP_THRESHOLD`` bytes with a fresh ``mmap`` and gives it back to the kernel when
it is freed, and trims the top of its heap once more than ``M_TRIM_THRESHOLD`` bytes there are
free; both thresholds move with what the process did before (up to 32 MiB and 64 MiB). Either
way the next run's output is memory the kernel must map and zero again, page by page: layernorm
(a 32 MiB output) took 529 page faults a run and 4.8-5.8 ms, against 1 fault and 2.0-2.2 ms when
freed memory stays in the heap. The MLP and the elementwise chain fault little already.

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
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

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
