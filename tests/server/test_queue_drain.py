"""queue_drain: batches cut by size and wait window, CLOSE stops the loop only after
every queued item was handed over (the loop of the micro-batcher and the store writer)."""

from __future__ import annotations

import queue
import threading
import time

from envad.server.queue_drain import CLOSE, consume, gather


def filled(*items) -> queue.Queue:
    work: queue.Queue = queue.Queue()
    for item in items:
        work.put(item)
    return work


def test_gather_stops_at_the_size_cap_and_leaves_the_rest_queued() -> None:
    work = filled([1, 1], [1], [1, 1, 1], [1])
    batch, closed = gather(work, [1], max_size=4, size=len)
    assert batch == [[1], [1, 1], [1]] and not closed
    assert work.get_nowait() == [1, 1, 1]


def test_gather_reports_close_and_does_not_wait_without_a_window() -> None:
    batch, closed = gather(filled([2], CLOSE, [3]), [1], max_size=10, size=len)
    assert batch == [[1], [2]] and closed
    started = time.monotonic()
    batch, closed = gather(filled(), [1], max_size=10, size=len)
    assert batch == [[1]] and not closed and time.monotonic() - started < 0.05


def test_gather_waits_the_window_for_late_items() -> None:
    work: queue.Queue = queue.Queue()
    threading.Timer(0.05, work.put, args=([2],)).start()
    batch, closed = gather(work, [1], max_size=10, size=len, max_wait_s=2.0)
    assert batch == [[1], [2]] and not closed


def test_consume_batches_until_close_and_answers_items_queued_behind_close() -> None:
    handled: list[list] = []
    work = filled([1], [2, 2], [3], CLOSE, [4], CLOSE, [5])
    consume(work, handled.append, max_size=3, size=len)
    # the first two items fill the cap; [3] closes its batch at CLOSE; the items a racing
    # submit put behind CLOSE are still handed over, in batches, before returning
    assert handled == [[[1], [2, 2]], [[3]], [[4]], [[5]]]
    assert work.empty()


def test_consume_runs_on_a_thread_until_close() -> None:
    handled: list[list] = []
    work: queue.Queue = queue.Queue()
    thread = threading.Thread(target=consume, args=(work, handled.append),
                              kwargs={"max_size": 100, "size": len})
    thread.start()
    work.put([1])
    work.put([2])
    work.put(CLOSE)
    thread.join(5)
    assert not thread.is_alive()
    assert [item for batch in handled for item in batch] == [[1], [2]]
