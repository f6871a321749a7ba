"""A handler pool whose most recently idle thread takes the next call: the comparator
of benchmarks.rpc_pool against the server's `ThreadPoolExecutor` (server/worker_pool.py).

`concurrent.futures.ThreadPoolExecutor` hands each call to the thread that has waited
longest, so once a burst has grown it to its full size a lone client's calls go round
every thread. `RecentFirstPool` keeps its idle threads on a stack: a call goes to the
thread that finished most recently. It creates threads only when every existing one is
busy, up to `max_workers`; calls beyond that wait in arrival order.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

_Task = tuple[Future, Callable[..., Any], tuple, dict]


class _Worker:
    """One thread of the pool; sleeps on its own lock until the pool hands it a task."""

    __slots__ = ("wake", "task", "thread")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()                  # held: the worker sleeps until released
        self.task: _Task | None = None
        self.thread: threading.Thread | None = None


class RecentFirstPool(Executor):
    """A `concurrent.futures.Executor` whose most recently idle thread runs the next task."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "pool"):
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self.max_workers = max_workers
        self._prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []       # a stack: the last one pushed runs next
        self._waiting: deque[_Task] = deque()  # tasks for which no thread was free
        self._workers: list[_Worker] = []
        self._shut = False

    @property
    def threads(self) -> int:
        """How many threads the pool has started (they live until shutdown)."""
        return len(self._workers)

    @property
    def idle_threads(self) -> int:
        """How many of them wait for a task now."""
        return len(self._idle)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        task = (future, fn, args, kwargs)
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._idle:
                worker = self._idle.pop()
                worker.task = task
                worker.wake.release()
            elif len(self._workers) < self.max_workers:
                self._start_worker(task)
            else:
                self._waiting.append(task)
        return future

    def _start_worker(self, task: _Task) -> None:
        """A new thread for `task` (under the lock). If the system refuses a thread, the
        task waits for one of the running threads; with none running, submit fails."""
        worker = _Worker()
        worker.task = task
        worker.thread = threading.Thread(target=self._serve, args=(worker,), daemon=True,
                                         name=f"{self._prefix}_{len(self._workers)}")
        try:
            worker.thread.start()
        except RuntimeError:            # "can't start new thread": out of threads or memory
            if not self._workers:
                raise
            self._waiting.append(task)
            return
        self._workers.append(worker)

    def _serve(self, worker: _Worker) -> None:
        task = worker.task
        while task is not None:
            _run(task)
            with self._lock:
                if self._waiting:
                    task = self._waiting.popleft()
                    continue
                if self._shut:
                    return
                worker.task = None
                self._idle.append(worker)
            worker.wake.acquire()
            task = worker.task

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no new tasks; queued ones still run unless `cancel_futures`."""
        with self._lock:
            self._shut = True
            if cancel_futures:
                while self._waiting:
                    self._waiting.popleft()[0].cancel()
            idle, self._idle = self._idle, []
            workers = list(self._workers)
        for worker in idle:                  # task None: the thread returns
            worker.wake.release()
        if wait:
            for worker in workers:
                if worker.thread is not None and worker.thread is not threading.current_thread():
                    worker.thread.join()


def _run(task: _Task) -> None:
    future, fn, args, kwargs = task
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)
