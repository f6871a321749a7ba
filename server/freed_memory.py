"""Memory that big operations freed, handed back to the system, and the heaps that keep it.

Two allocators keep freed memory for reuse instead of returning it: glibc's heap
(`malloc_trim` returns it) and Arrow's memory pool, mimalloc by default, which keeps
the pages of the Arrow arrays a read built and dropped (`release_unused` returns them).
At a million rows, opening the index left about 0.23 GB resident in Arrow's pool after
glibc's heap had been trimmed (docs/benchmarks.md).

glibc also gives threads heaps of their own (arenas, up to eight per core), each keeping
what its threads freed. A server runs many threads (gRPC handlers, ONNX Runtime, LanceDB's
runtime, decoders); `limit_malloc_arenas` makes them share a few heaps (the setting
`malloc_arenas`): a 100,000-row server on the 2-core host held 0.92 GiB instead of 0.97
(docs/scaling.md)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

import pyarrow as pa

_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform == "linux" else None
_TRIM = getattr(_LIBC, "malloc_trim", None)
_MALLOPT = getattr(_LIBC, "mallopt", None)
#: glibc's mallopt parameter for the most heaps (arenas) the threads share
M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int) -> bool:
    """Let the threads started from now on share at most `arenas` glibc heaps (0: glibc's
    own limit). glibc's `MALLOC_ARENA_MAX`, when set in the environment, wins: it was read
    at the process's start. True when the limit was set."""
    if arenas <= 0 or _MALLOPT is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(_MALLOPT(M_ARENA_MAX, arenas))


def return_freed_memory() -> None:
    """Trim glibc's heap and release Arrow's unused pool memory (each a no-op where the
    platform has nothing to release)."""
    if _TRIM is not None:
        _TRIM(0)
    pa.default_memory_pool().release_unused()
