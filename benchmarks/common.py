"""Helpers shared by the benchmarks: timing, JSON lines, the machine's GEMM rate."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable

import numpy as np


def cpu_model() -> str | None:
    """The CPU's model name (Linux: /proc/cpuinfo), None where it cannot be read: hosts
    with the same core count differ (vector width, cache) and so do their numbers."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine() -> dict:
    """A short description of where the numbers came from, with the 1-minute load average
    when the record was written (above the core count: other work shared the machine)."""
    return {"cpu_count": os.cpu_count(), "machine": platform.machine(), "cpu": cpu_model(),
            "python": platform.python_version(), "load_1min": round(os.getloadavg()[0], 1),
            "date": time.strftime("%Y-%m-%d", time.gmtime())}


def emit(record: dict) -> None:
    """Print one benchmark result as a JSON line on stdout."""
    print(json.dumps({**record, "machine": machine()}, default=float), flush=True)


def best_time(fn: Callable[[], object], *, repeats: int = 5, min_seconds: float = 0.2) -> float:
    """Best-of-`repeats` seconds per call, each repeat running for at least `min_seconds`."""
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        best = min(best, elapsed / calls)
    return best


def gemm_gflops(n: int = 1024, repeats: int = 5) -> float:
    """Sustained float32 GEMM rate of this machine (NumPy's BLAS), in GFLOP/s."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    seconds = best_time(lambda: a @ b, repeats=repeats)
    return 2.0 * n ** 3 / seconds / 1e9


def process_memory(pid: int) -> dict[str, int]:
    """A Linux process's memory from /proc/PID/status, in bytes: VmRSS (resident), VmHWM
    (its peak), RssAnon (heap and other anonymous pages) and RssFile (pages of mapped
    files: libraries and memory-mapped data, which the kernel can drop and read again)."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000.0, q))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
