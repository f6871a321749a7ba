"""The gRPC handlers' thread pool: `concurrent.futures.ThreadPoolExecutor`, which goes on
serving when the system refuses it a new thread.

ThreadPoolExecutor queues each call and then starts a thread for it when none is idle,
up to `max_workers`. When the system refuses that thread (RuntimeError "can't start new
thread": out of threads or memory), the plain pool raises from `submit`, and gRPC's
server, which submits from its polling thread, would stop serving every call.
`HandlerPool` leaves the queued call to the threads already running instead; with none
running, `submit` still fails and the call is taken back off the queue.

The server starts every thread at once (`start_threads`): its thread count is then the
same from start to stop, so a thread that a call kept would show.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


class HandlerPool(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose calls wait for a running thread when the system refuses
    a new one."""

    @property
    def threads(self) -> int:
        """How many threads the pool has started (they live until shutdown)."""
        return len(self._threads)

    def start_threads(self) -> None:
        """Start every thread now rather than as calls come (as many as the system
        gives: the rest start with the calls that need them)."""
        with self._shutdown_lock:
            for _ in range(self._max_workers - len(self._threads)):
                try:
                    super()._adjust_thread_count()
                except RuntimeError:
                    break

    def _adjust_thread_count(self) -> None:
        # runs in `submit`, under the pool's lock, after the task was queued
        try:
            super()._adjust_thread_count()
        except RuntimeError:
            if self._threads:
                return                       # a running thread takes the queued task
            self._work_queue.get_nowait()    # no thread would ever run it: take it back
            raise
