"""prefetched: same items in order, errors where they happen, a closed stream stops."""

from __future__ import annotations

import threading

import pytest

from envad.server.prefetch import prefetched


def test_items_arrive_in_order_produced_in_another_thread():
    threads: set[str] = set()

    def items():
        for i in range(50):
            threads.add(threading.current_thread().name)
            yield i

    assert list(prefetched(items(), depth=3, name="ahead")) == list(range(50))
    assert threads == {"ahead"}


def test_an_error_reaches_the_consumer_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise ValueError("store went away")

    seen = []
    with pytest.raises(ValueError, match="store went away"):
        for item in prefetched(items()):
            seen.append(item)
    assert seen == [1, 2]


def test_closing_the_stream_stops_the_producer():
    produced = []

    def items():
        for i in range(1000):
            produced.append(i)
            yield i

    stream = prefetched(items(), depth=2)
    assert next(stream) == 0
    stream.close()                      # what gRPC does when the call is cancelled
    count = len(produced)
    assert count <= 4                   # the item handed out, `depth` queued, one offered
    assert not any(t.name == "prefetch" for t in threading.enumerate())
    assert len(produced) == count


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth"):
        next(prefetched(iter([1]), depth=0))
