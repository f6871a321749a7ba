"""Coalesce concurrent embedding requests into one ONNX Runtime call.

Callers submit uint8 batches; a worker thread gathers what is queued (up to `max_batch`
images, waiting at most `max_wait_s` after the first arrives: `queue_drain.consume`),
runs the encoder once, and hands each caller its slice. One batcher per encoder; a model
switch creates a new batcher and closes the old one after its queue drains.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from envad.errors import Unavailable
from envad.server.queue_drain import CLOSE, consume

EmbedFn = Callable[[np.ndarray], np.ndarray]
BatchObserver = Callable[[int], None]


class MicroBatcher:
    """Thread-safe request coalescer in front of an embedding function."""

    def __init__(self, embed: EmbedFn, *, max_batch: int = 64, max_wait_s: float = 0.002,
                 on_batch: BatchObserver | None = None, name: str = "batcher"):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self._embed = embed
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._on_batch = on_batch
        self._queue: queue.Queue[tuple[np.ndarray, Future] | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, images: np.ndarray) -> Future:
        """Queue a batch; the future resolves to its embeddings (float32 [N, D])."""
        if self._closed:
            raise Unavailable("encoder is being replaced; retry")
        future: Future = Future()
        if len(images) == 0:
            future.set_result(self._embed(images))
            return future
        self._queue.put((images, future))
        return future

    def embed(self, images: np.ndarray) -> np.ndarray:
        """Blocking convenience wrapper around `submit`; large inputs are split."""
        parts = [self.submit(images[i:i + self.max_batch])
                 for i in range(0, max(len(images), 1), self.max_batch)]
        return np.concatenate([p.result() for p in parts]) if len(parts) > 1 else parts[0].result()

    def close(self) -> None:
        """Stop taking work; queued requests are still served."""
        self._closed = True
        self._queue.put(CLOSE)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        consume(self._queue, self._dispatch, max_size=self.max_batch,
                size=lambda item: len(item[0]), max_wait_s=self.max_wait_s)

    def _dispatch(self, pending: list[tuple[np.ndarray, Future]]) -> None:
        live = [(x, f) for x, f in pending if f.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            batch = np.concatenate([x for x, _ in live]) if len(live) > 1 else live[0][0]
            out = self._embed(batch)
            if self._on_batch:
                self._on_batch(len(batch))
        except BaseException as exc:  # hand the failure to every waiting caller
            for _, future in live:
                future.set_exception(exc)
            return
        start = 0
        for x, future in live:
            future.set_result(out[start:start + len(x)])
            start += len(x)
