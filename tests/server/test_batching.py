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


def test_requests_go_through_the_stage_together_and_plain_embeds_do_not():
    seen: list[list[str]] = []
    gate = threading.Event()

    def embed(batch):
        gate.wait(5)
        return batch.reshape(len(batch), -1)[:, :1].astype(np.float32)

    def stage(jobs):
        seen.append([request for _, request in jobs])
        return [(request, vectors[:, 0].tolist()) for vectors, request in jobs]

    batcher = MicroBatcher(embed, max_batch=64, max_wait_s=30.0, stage=stage)
    with batcher.coming() as last:       # one more caller announced: the batch waits for it
        staged = [batcher.submit(np.full((2, 1, 1, 1), i, np.uint8), f"req-{i}")
                  for i in range(3)]
        plain = batcher.submit(np.full((1, 1, 1, 1), 9, np.uint8), ticket=last)
    gate.set()
    assert [f.result(5) for f in staged] == [(f"req-{i}", [i, i]) for i in range(3)]
    assert plain.result(5).tolist() == [[9.0]]
    assert seen == [["req-0", "req-1", "req-2"]]      # one stage call for the batch
    batcher.close()


def test_stored_embeddings_join_the_micro_batch_at_the_stage_without_the_encoder():
    """A job of embeddings (`embedded`, Score's reuse_stored) skips the encoder and goes
    through the stage with the decoded requests of its micro-batch, in the same call."""
    seen: list[list[str]] = []
    encoded: list[int] = []
    gate = threading.Event()

    def embed(batch):
        gate.wait(5)
        encoded.append(len(batch))
        return batch.reshape(len(batch), -1)[:, :1].astype(np.float32)

    def stage(jobs):
        seen.append([request for _, request in jobs])
        return [vectors[:, 0].tolist() for vectors, _ in jobs]

    batcher = MicroBatcher(embed, max_batch=64, max_wait_s=30.0, stage=stage)
    with batcher.coming() as last:
        decoded = batcher.submit(np.full((2, 1, 1, 1), 3, np.uint8), "decoded")
        stored = batcher.submit(np.full((3, 1), 7.5, np.float32), "stored", last,
                                embedded=True)
    gate.set()
    assert decoded.result(5) == [3.0, 3.0] and stored.result(5) == [7.5, 7.5, 7.5]
    assert seen == [["decoded", "stored"]] and encoded == [2]
    assert batcher.run(np.full((1, 1), 2.0, np.float32), "alone", embedded=True) == [2.0]
    assert encoded == [2]
    batcher.close()


def test_a_stage_failure_reaches_its_callers_only():
    def stage(jobs):
        raise RuntimeError("stage broke")

    batcher = MicroBatcher(lambda b: np.zeros((len(b), 1), np.float32), max_wait_s=0.2,
                           stage=stage)
    staged = batcher.submit(np.zeros((1, 1, 1, 1), np.uint8), "req")
    plain = batcher.submit(np.zeros((2, 1, 1, 1), np.uint8))
    with pytest.raises(RuntimeError, match="stage broke"):
        staged.result(5)
    assert plain.result(5).shape == (2, 1)
    with pytest.raises(ValueError, match="no stage"):
        MicroBatcher(lambda b: b).submit(np.zeros((1, 1, 1, 1), np.uint8), "req")


def test_an_unannounced_lone_request_does_not_wait_for_the_window():
    sizes: list[int] = []
    batcher = MicroBatcher(lambda b: np.zeros((len(b), 1), np.float32), max_wait_s=30.0,
                           on_batch=sizes.append)
    # with nothing else announced, the micro-batch leaves at once (not after 30 s)
    assert batcher.submit(np.zeros((1, 1, 1, 1), np.uint8)).result(10).shape == (1, 1)
    assert sizes == [1]
    batcher.close()


def test_an_announced_submit_joins_the_micro_batch_being_gathered():
    sizes: list[int] = []
    batcher = MicroBatcher(lambda b: np.zeros((len(b), 1), np.float32), max_wait_s=30.0,
                           on_batch=sizes.append)
    with batcher.coming() as ticket:           # a caller still decoding its images
        first = batcher.submit(np.zeros((1, 1, 1, 1), np.uint8))
        threading.Event().wait(0.2)
        second = batcher.submit(np.zeros((2, 1, 1, 1), np.uint8), ticket=ticket)
    assert first.result(10).shape == (1, 1) and second.result(10).shape == (2, 1)
    assert sizes == [3]
    with batcher.coming():                      # announced, then withdrawn (decode failed)
        pass
    assert batcher.submit(np.zeros((1, 1, 1, 1), np.uint8)).result(10).shape == (1, 1)
    assert sizes == [3, 1]
    batcher.close()


def test_a_lone_caller_runs_its_batch_in_its_own_thread():
    threads: list[str] = []

    def embed(batch):
        threads.append(threading.current_thread().name)
        return np.ones((len(batch), 1), np.float32)

    def stage(jobs):
        threads.append(threading.current_thread().name)
        return [request for _, request in jobs]

    batcher = MicroBatcher(embed, max_wait_s=30.0, stage=stage, name="worker")
    with batcher.coming() as ticket:        # its own announcement does not hold it back
        assert batcher.run(np.zeros((2, 1, 1, 1), np.uint8), "req", ticket) == "req"
    assert batcher.embed(np.zeros((1, 1, 1, 1), np.uint8)).shape == (1, 1)
    assert threads == [threading.current_thread().name] * 3
    batcher.close()


def test_a_caller_with_company_goes_through_the_worker_and_joins_its_micro_batch():
    threads: list[str] = []
    sizes: list[int] = []

    def embed(batch):
        threads.append(threading.current_thread().name)
        return np.zeros((len(batch), 1), np.float32)

    batcher = MicroBatcher(embed, max_wait_s=30.0, on_batch=sizes.append, name="worker")
    with batcher.coming() as ticket:        # another caller still decoding
        first = threading.Thread(target=batcher.run, args=(np.zeros((1, 1, 1, 1), np.uint8),))
        first.start()
        threading.Event().wait(0.2)
        assert batcher.run(np.zeros((2, 1, 1, 1), np.uint8), ticket=ticket).shape == (2, 1)
    first.join(10)
    assert sizes == [3] and threads == ["worker"]
    batcher.close()


def test_callers_and_the_worker_never_run_the_encoder_at_once():
    running = {"now": 0, "most": 0}
    lock = threading.Lock()

    def embed(batch):
        with lock:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
        threading.Event().wait(0.002)
        with lock:
            running["now"] -= 1
        return np.zeros((len(batch), 1), np.float32)

    batcher = MicroBatcher(embed, max_wait_s=0.0)

    def caller(i):
        for _ in range(20):
            if i % 2:
                batcher.run(np.zeros((1, 1, 1, 1), np.uint8))
            else:
                batcher.submit(np.zeros((1, 1, 1, 1), np.uint8)).result(10)

    callers = [threading.Thread(target=caller, args=(i,)) for i in range(6)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(30)
    assert running["most"] == 1
    batcher.close()
