"""The consumer loop of a work queue served by one thread, in batches.

Two server parts queue work for a single thread that handles it in batches: the
micro-batcher (images for one ONNX Runtime call) and the store writer (rows for one
table commit). Both take the first item, gather what is queued behind it up to a size
cap (optionally waiting a short window for more), hand the batch over, and stop at a
close sentinel (`CLOSE`) without leaving any caller unanswered. That loop lives here.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Put on the queue to stop the consumer (after what is already queued is handled).
CLOSE = None


def gather(work: queue.Queue, first: T, max_size: int, size: Callable[[T], int],
           max_wait_s: float = 0.0, more_coming: Callable[[], bool] | None = None
           ) -> tuple[list[T], bool]:
    """`first` and the items queued behind it, until their total `size` reaches
    `max_size`, the queue stays empty for `max_wait_s` after `first` (or, with
    `more_coming`, as soon as it is empty and nothing more is announced), or `CLOSE` is
    taken; returns the batch and whether `CLOSE` was taken."""
    batch = [first]
    total = size(first)
    deadline = time.monotonic() + max_wait_s
    while total < max_size:
        remaining = deadline - time.monotonic()
        if more_coming is not None and remaining > 0 and work.empty() and not more_coming():
            remaining = 0.0
        try:
            item = work.get(timeout=remaining) if remaining > 0 else work.get_nowait()
        except queue.Empty:
            return batch, False
        if item is CLOSE:
            return batch, True
        batch.append(item)
        total += size(item)
    return batch, False


def consume(work: queue.Queue, handle: Callable[[list[T]], None], *, max_size: int,
            size: Callable[[T], int], max_wait_s: float = 0.0,
            more_coming: Callable[[], bool] | None = None) -> None:
    """Hand `work`'s items to `handle` in batches (see `gather`) until `CLOSE`.

    After `CLOSE`, items still queued (a submit that raced with close) are handled too,
    in batches and without waiting, so that every queued caller gets an answer; then
    return. `handle` is expected to answer its callers itself, failures included.
    """
    closed = False
    while not closed:
        first = work.get()
        if first is CLOSE:
            break
        batch, closed = gather(work, first, max_size, size, max_wait_s, more_coming)
        handle(batch)
    while True:
        try:
            first = work.get_nowait()
        except queue.Empty:
            return
        if first is not CLOSE:
            handle(gather(work, first, max_size, size)[0])
