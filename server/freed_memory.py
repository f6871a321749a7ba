"""Memory that big operations freed, handed back to the system.

Two allocators keep freed memory for reuse instead of returning it: glibc's heap
(`malloc_trim` returns it) and Arrow's memory pool, mimalloc by default, which keeps
the pages of the Arrow arrays a read built and dropped (`release_unused` returns them).
At a million rows, opening the index left about 0.23 GB resident in Arrow's pool after
glibc's heap had been trimmed (docs/benchmarks.md)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pyarrow as pa

_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform == "linux" else None
_TRIM = getattr(_LIBC, "malloc_trim", None)


def return_freed_memory() -> None:
    """Trim glibc's heap and release Arrow's unused pool memory (each a no-op where the
    platform has nothing to release)."""
    if _TRIM is not None:
        _TRIM(0)
    pa.default_memory_pool().release_unused()
