"""How training starts its worker processes (data-parallel workers, the pools of `envad
sweep --jobs` and `envad select --jobs`).

Where the platform has it (Linux, macOS), a worker is forked from multiprocessing's fork
server, a process that imported torch, torchvision and the training code once when the
first worker was asked for; elsewhere it is spawned, and imports them itself. Neither
forks the calling process, so no CUDA context, thread or held lock of it is copied. The
fork server lives as long as the calling process, so a process that starts workers more
than once (a sweep, then a data-parallel run; a library user's loop) imports once.

A fork server keeps the environment variables of the moment it started: set what the
workers should see (OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES) before the first worker.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import ForkServerContext, SpawnContext

#: what the fork server imports before it forks a worker: torch, torchvision and the
#: algorithms (almost all of a worker's imports; a worker imports the rest itself). Not
#: ONNX Runtime, which starts a thread when imported: the fork server forks from one
#: thread (with one-thread OpenMP/BLAS pools; theirs handle a fork otherwise)
PRELOAD = ("envad.training.algorithms",)


def worker_context() -> ForkServerContext | SpawnContext:
    """The multiprocessing context that training's workers start from."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context
