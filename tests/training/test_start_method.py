"""training/start_method.py: workers start from a fork server that imported the training
code once. This module imports no torch itself, so a worker that holds torch got it from
the fork server, not from unpickling what it runs."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys

from envad.training.start_method import PRELOAD, worker_context


def held_modules() -> list[str]:
    """In a worker, before it imports anything: which of torch, PRELOAD and ONNX Runtime
    it holds."""
    return [name for name in ("torch", *PRELOAD, "onnxruntime") if name in sys.modules]


def test_a_worker_holds_torch_and_the_training_code_before_it_runs():
    """... and not ONNX Runtime, whose import starts a thread in the fork server."""
    context = worker_context()
    assert context.get_start_method() == "forkserver"         # Linux has one
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        assert pool.submit(held_modules).result() == ["torch", *PRELOAD]


def test_a_spawned_worker_would_import_them_itself():
    """The comparison the test above stands on: the same call, spawned."""
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        assert pool.submit(held_modules).result() == []


def test_workers_are_not_forks_of_the_caller():
    """Each worker is a child of the fork server, not of this process (whose threads,
    locks or CUDA context a fork would copy)."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=worker_context()) as pool:
        assert pool.submit(os.getppid).result() != os.getpid()
