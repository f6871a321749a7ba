"""MicroBatcher coalesces concurrent requests and returns each caller its own rows."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from envad.server.batching import MicroBatcher


def test_concurrent_requests_are_coalesced_and_routed_back():
    calls = []
    gate = threading.Event()

    def embed(batch):
        gate.wait(5)
        calls.append(len(batch))
        return batch.reshape(len(batch), -1)[:, :1].astype(np.float32)

    batcher = MicroBatcher(embed, max_batch=64, max_wait_s=0.05)
    inputs = [np.full((2, 1, 1, 1), i, np.uint8) for i in range(10)]
    futures = [batcher.submit(x) for x in inputs]
    gate.set()
    results = [f.result(5) for f in futures]
    for i, out in enumerate(results):
        assert out.shape == (2, 1) and (out == i).all()
    assert sum(calls) == 20 and len(calls) < 10
    batcher.close()
    batcher.join(5)


def test_max_batch_is_respected_and_large_inputs_split():
    sizes = []
    batcher = MicroBatcher(lambda b: (sizes.append(len(b)), b[:, 0, 0, :1].astype(np.float32))[1],
                           max_batch=4, max_wait_s=0.0)
    out = batcher.embed(np.arange(10, dtype=np.uint8).reshape(10, 1, 1, 1))
    assert out[:, 0].tolist() == list(range(10)) and max(sizes) <= 4


def test_errors_reach_every_caller_and_batcher_keeps_working():
    state = {"fail": True}

    def embed(batch):
        if state["fail"]:
            raise RuntimeError("boom")
        return np.zeros((len(batch), 1), np.float32)

    batcher = MicroBatcher(embed, max_batch=8, max_wait_s=0.0)
    with pytest.raises(RuntimeError, match="boom"):
        batcher.submit(np.zeros((1, 1, 1, 1), np.uint8)).result(5)
    state["fail"] = False
    assert batcher.submit(np.zeros((3, 1, 1, 1), np.uint8)).result(5).shape == (3, 1)


def test_close_serves_queued_work():
    batcher = MicroBatcher(lambda b: np.ones((len(b), 1), np.float32), max_wait_s=0.0)
    futures = [batcher.submit(np.zeros((1, 1, 1, 1), np.uint8)) for _ in range(5)]
    batcher.close()
    assert all(f.result(5).shape == (1, 1) for f in futures)
