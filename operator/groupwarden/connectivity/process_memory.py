"""Handing freed memory back to the system (a long-running operator, a CLI run that read a big log).

librdkafka's fetch buffers (tens of MiB on a big log) are freed when its consumer closes, and a
pass frees its listing, snapshot and plans, but glibc keeps the freed chunks in its arenas: each
pass's peak would start from the last one's. `malloc_trim` returns the free pages (measured:
docs/benchmarks.md, "The operator's memory at 100k groups"). Elsewhere than glibc: nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Return the process's free heap pages to the system (glibc's malloc_trim)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
