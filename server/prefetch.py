"""Produce a stream's next items in a thread while the consumer handles the current one.

Export encodes a chunk (Arrow compute and NumPy, which release the GIL) while gRPC sends
the previous one: on two or more cores the encoding then overlaps the transfer instead
of adding to it. At most `depth` items wait produced ahead; a consumer that stops early
(a cancelled call closes the generator) stops the producer, and a producer's exception
reaches the consumer at the item where it happened.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()
_POLL_S = 0.1


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


def prefetched(items: Iterator[T], depth: int = 1, name: str = "prefetch") -> Iterator[T]:
    """`items`, produced by a thread of their own up to `depth` items ahead."""
    if depth < 1:
        raise ValueError("depth must be >= 1")
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            offer(_Failure(exc))
            return
        offer(_DONE)

    producer = threading.Thread(target=produce, name=name, daemon=True)
    producer.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        producer.join()
