"""Freed memory goes back to the system: Arrow's pool (mimalloc) keeps the pages of
dropped arrays resident until asked to release them."""

from __future__ import annotations

import json
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
