"""Launching a data-parallel run: this process is worker 0, started processes the rest.

`run_workers(target, args, workers, device)` starts workers 1..N-1 (`start_method`:
from a fork server that imported torch once), waits until each has reached the group
(failing at once, with its exit code, if one dies before), joins them in one
torch.distributed process group (gloo on the CPU, NCCL on CUDA, one GPU per worker)
and calls `target(rank, *args)` in every worker. Worker 0 runs in the calling process,
so its progress bars, return value and exceptions are the caller's; when another worker
fails, worker 0's error names it and its message. The group meets through a file store
in a temporary directory (one machine; nothing listens on a port).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from envad.training.start_method import worker_context

#: how long the started workers may take to import torch and reach the group
JOIN_TIMEOUT_S = 600.0


def backend_for(device: str) -> str:
    """NCCL for CUDA devices, gloo for the CPU."""
    return "nccl" if device.startswith("cuda") else "gloo"


def worker_device(device: str, rank: int, workers: int) -> str:
    """The device of worker `rank`: with several workers on CUDA, GPU `rank`."""
    if workers > 1 and device == "cuda":
        return f"cuda:{rank}"
    return device


def worker_threads(workers: int, cores: int | None = None) -> int:
    """CPU threads per worker: the cores shared out, at least one each."""
    return max(1, (cores or os.cpu_count() or 1) // workers)


def run_workers(target: Callable[..., Any], args: tuple, workers: int, device: str,
                **local: Any) -> Any:
    """`target(rank, *args)` on `workers` processes in one process group; worker 0 (this
    process) also gets the keyword arguments `local` (objects that stay in this
    process). Returns worker 0's result."""
    folder = tempfile.mkdtemp(prefix="envad-workers-")
    store_path = os.path.join(folder, "store")
    backend = backend_for(device)
    context = worker_context()
    children = [context.Process(target=_child, name=f"envad-worker-{rank}",
                                args=(rank, workers, store_path, backend, target, args))
                for rank in range(1, workers)]
    threads = torch.get_num_threads()
    try:
        for child in children:
            child.start()
        store = dist.FileStore(store_path, workers)
        _wait_until_ready(store, children)
        torch.set_num_threads(worker_threads(workers))
        dist.init_process_group(backend, store=store, rank=0, world_size=workers)
        result = _run_first(target, args, local, store, children)
        _join_children(children, store)
        return result
    finally:
        torch.set_num_threads(threads)
        if dist.is_initialized():
            dist.destroy_process_group()
        for child in children:      # only when something failed: the rest are done
            if child.pid is None:
                continue            # never started
            if child.is_alive():
                child.terminate()
            child.join()
        shutil.rmtree(folder, ignore_errors=True)


def _run_first(target: Callable[..., Any], args: tuple, local: dict, store: dist.Store,
               children: list) -> Any:
    """Worker 0's call; when it fails because another worker did, say which and why."""
    try:
        return target(0, *args, **local)
    except RuntimeError as exc:
        failure = _child_failure(store, children)
        if failure:
            raise RuntimeError(failure) from exc
        raise


def _child(rank: int, workers: int, store_path: str, backend: str,
           target: Callable[..., Any], args: tuple) -> None:
    """A started worker: join the group, run, leave; an error is left in the store for
    worker 0 to report."""
    store = dist.FileStore(store_path, workers)
    torch.set_num_threads(worker_threads(workers))
    try:
        store.set(f"ready/{rank}", "1")
        dist.init_process_group(backend, store=store, rank=rank, world_size=workers)
        target(rank, *args)
    except BaseException as exc:
        store.set(f"error/{rank}", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _wait_until_ready(store: dist.Store, children: list) -> None:
    """Wait until every started worker has imported torch and reached the group."""
    keys = [f"ready/{rank}" for rank in range(1, len(children) + 1)]
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        try:
            store.wait(keys, timedelta(seconds=0.5))
            return
        except RuntimeError:        # not all there yet (DistStoreError)
            pass
        for rank, child in enumerate(children, start=1):
            if not child.is_alive():
                raise RuntimeError(f"training worker {rank} exited with code "
                                   f"{child.exitcode} before joining the others")
        if time.monotonic() > deadline:
            raise RuntimeError(f"training workers did not start within {JOIN_TIMEOUT_S:.0f} s")


def _child_failure(store: dist.Store, children: list, wait_s: float = 5.0) -> str:
    """What a failed started worker reported ("" when none failed)."""
    for rank, child in enumerate(children, start=1):
        child.join(wait_s if child.is_alive() else 0)
        key = f"error/{rank}"
        if store.check([key]):
            return f"training worker {rank} failed: {store.get(key).decode()}"
        if child.exitcode not in (None, 0):
            return f"training worker {rank} exited with code {child.exitcode}"
    return ""


def _join_children(children: list, store: dist.Store) -> None:
    """Wait for the started workers after worker 0's part; any failure is an error."""
    for child in children:
        child.join()
    failure = _child_failure(store, children, wait_s=0)
    if failure:
        raise RuntimeError(failure)
