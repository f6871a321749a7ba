"""Freed memory goes back to the system: Arrow's pool (mimalloc) keeps the pages of
dropped arrays resident until asked to release them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json
import numpy as np, pyarrow as pa, pyarrow.compute as pc
from envad.server.freed_memory import return_freed_memory

def resident_mb():
    line = next(l for l in open("/proc/self/status") if l.startswith("RssAnon"))
    return int(line.split()[1]) / 1024

numbers = pa.array(np.arange(32_768, dtype=np.int64))       # numpy's memory, not Arrow's
before = pa.total_allocated_bytes()
arrays = [pc.add(numbers, i) for i in range(600)]            # 150 MB from Arrow's pool
held = (pa.total_allocated_bytes() - before) / 2**20
del arrays
dropped = resident_mb()
return_freed_memory()
print(json.dumps({"held": held, "dropped": dropped, "released": resident_mb()}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_dropped_arrow_arrays_leave_the_resident_set(tmp_path):
    """In a fresh interpreter (the test process's pool holds other tests' arrays): 150 MB
    of Arrow arrays built and dropped stay resident until `return_freed_memory`, which
    gives at least two thirds of them back."""
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    memory = json.loads(out)
    assert memory["dropped"] - memory["released"] >= 2 / 3 * memory["held"], memory


ARENAS_SCRIPT = """
import ctypes, ctypes.util, json, os, sys, tempfile, threading
from envad.server.freed_memory import limit_malloc_arenas

limited = limit_malloc_arenas(int(sys.argv[1]))
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = libc.fopen.restype = ctypes.c_void_p
done, ready = threading.Event(), threading.Barrier(7)

def allocate():
    held = [libc.malloc(1000) for _ in range(1000)]   # noqa: F841 (held until done)
    ready.wait()
    done.wait()

threads = [threading.Thread(target=allocate) for _ in range(6)]
for thread in threads:
    thread.start()
ready.wait()
path = tempfile.mktemp()
stream = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(stream))
libc.fclose(ctypes.c_void_p(stream))
done.set()
for thread in threads:
    thread.join()
print(json.dumps({"limited": limited, "heaps": open(path).read().count("<heap nr=")}))
os.unlink(path)
"""


def heaps_of_six_threads(arenas: int, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", ARENAS_SCRIPT, str(arenas)],
                         capture_output=True, text=True, check=True, timeout=60,
                         env={**environment, **env}).stdout
    return json.loads(out)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's arenas")
def test_threads_share_the_heaps_malloc_arenas_allows():
    """Six threads allocating at once get heaps of their own by glibc's default; limited
    to two, they share two. MALLOC_ARENA_MAX in the environment is left to glibc."""
    unlimited = heaps_of_six_threads(0)
    assert not unlimited["limited"] and unlimited["heaps"] >= 7
    assert heaps_of_six_threads(2) == {"limited": True, "heaps": 2}
    assert heaps_of_six_threads(2, MALLOC_ARENA_MAX="3") == {"limited": False, "heaps": 3}
