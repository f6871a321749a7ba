"""HandlerPool: the standard library's ThreadPoolExecutor as the server's handler pool,
going on serving when the system refuses it a thread; the server built with it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.server.config import ServerConfig
from envad.server.worker_pool import HandlerPool


def _refuse(self):
    raise RuntimeError("can't start new thread")


def _identity_server(pool):
    """A real gRPC server on loopback whose one method answers with the handler's thread
    name; a "burst" request waits for the others of its burst."""
    arrived = {"barrier": None}

    def handle(request, context):
        if request == b"burst":
            arrived["barrier"].wait()
        return threading.current_thread().name.encode()

    handler = grpc.method_handlers_generic_handler(
        "t.Pool", {"Who": grpc.unary_unary_rpc_method_handler(handle)})
    server = grpc.server(pool, handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port, arrived


def test_the_server_runs_its_handlers_on_a_handler_pool_of_its_workers(envad_server):
    pool = envad_server.running.pool
    assert isinstance(pool, HandlerPool) and isinstance(pool, ThreadPoolExecutor)
    assert pool._max_workers == ServerConfig().workers == 16
    with grpc.insecure_channel(envad_server.address) as channel:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert pool.threads == 16        # started at once: the count never changes after


def test_a_real_grpc_server_on_the_pool_runs_a_burst_on_as_many_named_threads():
    pool = HandlerPool(8, thread_name_prefix="rpc")
    server, port, arrived = _identity_server(pool)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            who = channel.unary_unary("/t.Pool/Who")
            arrived["barrier"] = threading.Barrier(6, timeout=10)
            with ThreadPoolExecutor(6) as clients:
                burst = set(clients.map(lambda _: who(b"burst", timeout=10), range(6)))
            assert len(burst) == 6 and all(name.startswith(b"rpc_") for name in burst)
            assert pool.threads == 6
            for _ in range(10):                 # a lone client after it starts none
                who(b"one", timeout=10)
            assert pool.threads == 6
    finally:
        server.stop(None).wait()
        pool.shutdown()


def test_started_threads_take_every_call_and_none_is_added():
    """start_threads starts them all; a burst of calls then runs on them, and a pool whose
    threads the system refuses still takes calls on the threads it got."""
    with HandlerPool(4) as pool:
        pool.start_threads()
        assert pool.threads == 4
        barrier = threading.Barrier(4, timeout=10)
        names = {f.result(10) for f in [pool.submit(lambda: (barrier.wait(),
                                                              threading.get_ident())[1])
                                        for _ in range(4)]}
        assert len(names) == 4 and pool.threads == 4


def test_start_threads_stops_where_the_system_refuses(monkeypatch):
    pool = HandlerPool(4)
    started = {"n": 0}
    real = ThreadPoolExecutor._adjust_thread_count

    def two_then_refuse(self):
        if started["n"] == 2:
            raise RuntimeError("can't start new thread")
        started["n"] += 1
        real(self)

    monkeypatch.setattr(ThreadPoolExecutor, "_adjust_thread_count", two_then_refuse)
    pool.start_threads()
    assert pool.threads == 2
    assert pool.submit(lambda: 7).result(10) == 7
    pool.shutdown()


def test_sequential_tasks_start_one_thread():
    with HandlerPool(8) as pool:
        for _ in range(20):
            pool.submit(threading.get_ident).result(10)
        assert pool.threads == 1


def test_results_exceptions_and_arguments_reach_the_caller():
    with HandlerPool(2) as pool:
        assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(10) == 5
        with pytest.raises(ZeroDivisionError):
            pool.submit(lambda: 1 / 0).result(10)
        assert list(pool.map(lambda x: x * x, range(5))) == [0, 1, 4, 9, 16]


def test_tasks_beyond_max_workers_wait_and_run_in_arrival_order():
    pool = HandlerPool(2)
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
    pool = HandlerPool(1)
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
    pool = HandlerPool(1)
    gate = threading.Event()
    pool.submit(lambda: gate.wait(10))
    queued = pool.submit(lambda: "ran")
    threading.Timer(0.1, gate.set).start()
    pool.shutdown(wait=True)
    assert queued.result(0) == "ran"
    assert not any(thread.is_alive() for thread in pool._threads)


def test_a_task_cancelled_before_it_runs_is_skipped():
    pool = HandlerPool(1)
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
        HandlerPool(0)


def test_a_thread_the_system_refuses_leaves_the_task_to_the_running_threads(monkeypatch):
    pool = HandlerPool(4)
    gate = threading.Event()
    try:
        first = pool.submit(lambda: gate.wait(10))
        assert pool.threads == 1
        monkeypatch.setattr(threading.Thread, "start", _refuse)
        second = pool.submit(lambda: "ran on the running thread")
        assert pool.threads == 1
        monkeypatch.undo()
        gate.set()
        assert first.result(10) is True
        assert second.result(10) == "ran on the running thread"
    finally:
        pool.shutdown()


def test_the_standard_pool_alone_raises_where_this_one_queues(monkeypatch):
    # what HandlerPool adds: ThreadPoolExecutor's submit raises when a thread is refused,
    # although a running thread could take the task (gRPC's server submits from its
    # polling thread, which the error would end)
    pool = ThreadPoolExecutor(4)
    gate = threading.Event()
    try:
        pool.submit(lambda: gate.wait(10))
        monkeypatch.setattr(threading.Thread, "start", _refuse)
        with pytest.raises(RuntimeError, match="new thread"):
            pool.submit(lambda: None)
    finally:
        monkeypatch.undo()
        gate.set()
        pool.shutdown()


def test_submit_fails_when_the_system_refuses_the_first_thread_and_drops_the_task(
        monkeypatch):
    pool = HandlerPool(2)
    ran = []
    monkeypatch.setattr(threading.Thread, "start", _refuse)
    with pytest.raises(RuntimeError, match="new thread"):
        pool.submit(lambda: ran.append("refused"))
    monkeypatch.undo()
    assert pool.threads == 0
    assert pool.submit(lambda: "later").result(10) == "later"
    pool.shutdown()
    assert ran == []                        # the refused task never ran
