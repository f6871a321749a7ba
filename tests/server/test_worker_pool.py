"""RecentFirstPool: the most recently idle thread takes the next task, threads only as the
load needs them, tasks beyond `max_workers` wait in order, and it serves a real gRPC
server."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from envad.server.worker_pool import RecentFirstPool


def _burst(pool, n: int) -> set[int]:
    """Run `n` tasks that all wait for each other (so each needs a thread of its own);
    returns the threads that ran them."""
    arrived = threading.Barrier(n, timeout=10)
    futures = [pool.submit(lambda: (arrived.wait(), threading.get_ident())[1])
               for _ in range(n)]
    return {f.result(10) for f in futures}


def _all_idle(pool) -> None:
    """Wait until every started thread is back among the idle ones (a task's result
    reaches its caller a moment before its thread returns to the pool)."""
    deadline = time.monotonic() + 10
    while pool.idle_threads < pool.threads:
        assert time.monotonic() < deadline, "the pool's threads never went idle"
        time.sleep(0.001)


def _threads_of_sequential_calls(pool, calls: int) -> set[int]:
    threads = set()
    for _ in range(calls):
        if isinstance(pool, RecentFirstPool):
            _all_idle(pool)
        threads.add(pool.submit(threading.get_ident).result(10))
    return threads


def test_a_lone_caller_after_a_burst_keeps_one_thread():
    pool = RecentFirstPool(16, thread_name_prefix="t")
    try:
        assert len(_burst(pool, 8)) == 8 and pool.threads == 8
        assert len(_threads_of_sequential_calls(pool, 40)) == 1
        assert pool.threads == 8            # no thread started while one was idle
    finally:
        pool.shutdown()


def test_the_standard_pool_rotates_which_is_what_this_pool_avoids():
    # the behaviour the pool exists for: ThreadPoolExecutor hands each sequential task to
    # the thread that has waited longest, so after a burst a lone caller's tasks go round
    # all of them (if this ever stops holding, the pool's reason to exist is gone)
    pool = ThreadPoolExecutor(16)
    try:
        _burst(pool, 8)
        assert len(_threads_of_sequential_calls(pool, 40)) > 1
    finally:
        pool.shutdown()


def test_the_thread_that_finished_last_runs_the_next_task():
    pool = RecentFirstPool(4)
    try:
        _burst(pool, 3)
        release = [threading.Event() for _ in range(3)]
        started = threading.Barrier(4, timeout=10)

        def hold(i):
            started.wait()
            release[i].wait(10)
            return threading.get_ident()

        held = [pool.submit(hold, i) for i in range(3)]
        started.wait()
        finish_order = []
        for i in (2, 0, 1):                 # finish in this order
            release[i].set()
            finish_order.append(held[i].result(10))
        _all_idle(pool)
        assert pool.submit(threading.get_ident).result(10) == finish_order[-1]
    finally:
        pool.shutdown()


def test_results_exceptions_and_arguments_reach_the_caller():
    with RecentFirstPool(2) as pool:
        assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(10) == 5
        with pytest.raises(ZeroDivisionError):
            pool.submit(lambda: 1 / 0).result(10)
        assert list(pool.map(lambda x: x * x, range(5))) == [0, 1, 4, 9, 16]


def test_tasks_beyond_max_workers_wait_and_run_in_arrival_order():
    pool = RecentFirstPool(2)
    gate = threading.Event()
    order = []
    lock = threading.Lock()

    def task(i):
        with lock:
            order.append(i)                 # the order tasks start in
        gate.wait(10)
        return threading.get_ident()

    try:
        futures = [pool.submit(task, i) for i in range(6)]
        assert pool.threads == 2
        gate.set()
        threads = {f.result(10) for f in futures}
        assert len(threads) == 2 and pool.threads == 2
        assert sorted(order[:2]) == [0, 1] and order[2:] == [2, 3, 4, 5]
    finally:
        pool.shutdown()


def test_shutdown_waits_refuses_new_tasks_and_can_cancel_the_queued():
    pool = RecentFirstPool(1)
    gate = threading.Event()
    running = pool.submit(lambda: gate.wait(10))
    queued = pool.submit(lambda: "ran")
    stopper = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()               # waits for the running task
    gate.set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert running.result(0) is True and queued.cancelled()
    with pytest.raises(RuntimeError, match="shutdown"):
        pool.submit(lambda: None)


def test_queued_tasks_still_run_after_a_plain_shutdown():
    pool = RecentFirstPool(1)
    gate = threading.Event()
    pool.submit(lambda: gate.wait(10))
    queued = pool.submit(lambda: "ran")
    threading.Timer(0.1, gate.set).start()
    pool.shutdown(wait=True)
    assert queued.result(0) == "ran"
    assert not any(w.thread.is_alive() for w in pool._workers)


def test_a_task_cancelled_before_it_runs_is_skipped():
    pool = RecentFirstPool(1)
    gate = threading.Event()
    ran = []
    try:
        pool.submit(lambda: gate.wait(10))
        queued = pool.submit(lambda: ran.append(1))
        assert queued.cancel()
        gate.set()
        pool.submit(lambda: None).result(10)
        assert ran == [] and queued.cancelled()
    finally:
        pool.shutdown()


def test_max_workers_must_be_positive():
    with pytest.raises(ValueError, match="max_workers"):
        RecentFirstPool(0)


def _identity_server(pool):
    """A real gRPC server on loopback whose one method answers with the handler's thread."""
    arrived = {"barrier": None}

    def handle(request, context):
        if request == b"burst":
            arrived["barrier"].wait()
        return str(threading.get_ident()).encode()

    handler = grpc.method_handlers_generic_handler(
        "t.Pool", {"Who": grpc.unary_unary_rpc_method_handler(handle)})
    server = grpc.server(pool, handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port, arrived


def test_a_real_grpc_server_on_the_pool_serves_a_lone_client_from_one_thread():
    pool = RecentFirstPool(8, thread_name_prefix="rpc")
    server, port, arrived = _identity_server(pool)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            who = channel.unary_unary("/t.Pool/Who")
            arrived["barrier"] = threading.Barrier(6, timeout=10)
            with ThreadPoolExecutor(6) as clients:
                burst = set(clients.map(lambda _: who(b"burst", timeout=10), range(6)))
            assert len(burst) == 6 and pool.threads == 6
            lone = set()
            for _ in range(30):
                _all_idle(pool)
                lone.add(who(b"one", timeout=10))
            assert len(lone) == 1
    finally:
        server.stop(None).wait()
        pool.shutdown()


def test_a_thread_the_system_refuses_leaves_the_task_to_the_running_threads(monkeypatch):
    pool = RecentFirstPool(4)
    gate = threading.Event()
    try:
        first = pool.submit(lambda: gate.wait(10))
        assert pool.threads == 1

        def refuse(self):
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading.Thread, "start", refuse)
        second = pool.submit(lambda: "ran on the running thread")
        assert pool.threads == 1
        monkeypatch.undo()
        gate.set()
        assert first.result(10) is True
        assert second.result(10) == "ran on the running thread"
    finally:
        pool.shutdown()


def test_submit_fails_when_the_system_refuses_the_first_thread(monkeypatch):
    pool = RecentFirstPool(2)

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with pytest.raises(RuntimeError, match="new thread"):
        pool.submit(lambda: None)
    monkeypatch.undo()
    assert pool.threads == 0
    assert pool.submit(lambda: "later").result(10) == "later"
    pool.shutdown()
