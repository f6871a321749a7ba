"""Coalesce concurrent requests into one ONNX Runtime call, and score them together.

Callers submit uint8 batches; a worker thread gathers what is queued (up to `max_batch`
images, waiting at most `max_wait_s` after the first arrives: `queue_drain.consume`),
runs the encoder once, and hands each caller its slice. A caller that also passes a
`request` gets, instead of its embeddings, what the batcher's `stage` made of them: the
stage sees every request of the micro-batch at once, so the Score path runs its
detectors and neighbour search once per micro-batch too (server/scoring.py), not once
per caller. The window is only waited for when it can pay: a caller announces its
submit before it decodes its images (`coming()`), and a micro-batch whose queue is empty
leaves at once unless another submit is announced. A caller that waits for its result
(`run`, `embed`) while the batcher is idle, nothing is queued and no other submit is
announced runs its batch in its own thread: a lone request pays no hand-over to the
worker and back (two thread wake-ups), and the worker and such callers never run the
encoder at the same time. One batcher per encoder; a model switch creates a new batcher
and closes the old one after its queue drains.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import numpy as np

from envad.errors import Unavailable
from envad.server.queue_drain import CLOSE, consume

EmbedFn = Callable[[np.ndarray], np.ndarray]
BatchObserver = Callable[[int], None]
#: (embeddings of a caller, its request) for every caller of a micro-batch that passed a
#: request -> one result per caller, in the same order
StageFn = Callable[[Sequence[tuple[np.ndarray, Any]]], Sequence[Any]]


class _Job:
    __slots__ = ("images", "request", "future", "embedded")

    def __init__(self, images: np.ndarray, request: Any, future: Future,
                 embedded: bool = False):
        self.images, self.request, self.future = images, request, future
        self.embedded = embedded     # `images` already are embeddings: the stage only


class Ticket:
    """An announced submit (see `MicroBatcher.coming`)."""

    __slots__ = ("open",)

    def __init__(self) -> None:
        self.open = True


class MicroBatcher:
    """Thread-safe request coalescer in front of an embedding function (and a stage)."""

    def __init__(self, embed: EmbedFn, *, max_batch: int = 64, max_wait_s: float = 0.002,
                 on_batch: BatchObserver | None = None, name: str = "batcher",
                 stage: StageFn | None = None):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self._embed = embed
        self._stage = stage
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._on_batch = on_batch
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._closed = False
        self._announced = 0
        self._announce_lock = threading.Lock()
        self._running = threading.Lock()     # held while a batch runs (worker or caller)
        self._in_worker = 0                  # jobs queued for the worker and not yet answered
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @contextmanager
    def coming(self) -> Iterator[Ticket]:
        """Announce a submit that follows (e.g. after decoding): a micro-batch being
        gathered waits for it, up to `max_wait_s`, instead of leaving at once. Pass the
        ticket to `submit`; leaving the block without submitting withdraws it."""
        ticket = Ticket()
        with self._announce_lock:
            self._announced += 1
        try:
            yield ticket
        finally:
            self._withdraw(ticket)

    def _withdraw(self, ticket: Ticket | None) -> None:
        if ticket is not None and ticket.open:
            with self._announce_lock:
                if ticket.open:
                    ticket.open = False
                    self._announced -= 1

    def _more_coming(self) -> bool:
        return self._announced > 0

    def _alone(self) -> bool:
        """Nothing announced, and the worker holds no job (queued or being gathered)."""
        return self._announced == 0 and self._in_worker == 0

    def submit(self, images: np.ndarray, request: Any = None, ticket: Ticket | None = None,
               *, embedded: bool = False) -> Future:
        """Queue a batch; the future resolves to its embeddings (float32 [N, D]) or, with a
        `request`, to the stage's result for it. A `ticket` from `coming()` is used up.
        `embedded`: `images` already are embeddings (stored ones), which only the stage
        sees, with the micro-batch they join."""
        self._withdraw(ticket)
        if self._closed:
            raise Unavailable("encoder is being replaced; retry")
        if request is not None and self._stage is None:
            raise ValueError("this batcher has no stage for requests")
        job = _Job(images, request, Future(), embedded)
        if len(images) == 0:        # nothing to encode: answered at once, unlocked
            job.future.set_running_or_notify_cancel()
            self._run_batch([job])
        else:
            with self._announce_lock:
                self._in_worker += 1
            self._queue.put(job)
        return job.future

    def run(self, images: np.ndarray, request: Any = None, ticket: Ticket | None = None,
            *, embedded: bool = False) -> Any:
        """`submit(...).result()`, run in the calling thread when the batcher is idle
        and no other caller is queued or announced (a lone request), else queued."""
        self._withdraw(ticket)
        if (0 < len(images) <= self.max_batch and not self._closed and self._alone()
                and self._running.acquire(blocking=False)):
            try:
                if self._alone():
                    if request is not None and self._stage is None:
                        raise ValueError("this batcher has no stage for requests")
                    job = _Job(images, request, Future(), embedded)
                    job.future.set_running_or_notify_cancel()
                    self._run_batch([job])
                    return job.future.result()
            finally:
                self._running.release()
        return self.submit(images, request, embedded=embedded).result()

    def embed(self, images: np.ndarray, ticket: Ticket | None = None) -> np.ndarray:
        """Blocking embeddings of `images`; large inputs are split into `max_batch` parts."""
        if len(images) <= self.max_batch:
            return self.run(images, ticket=ticket)
        self._withdraw(ticket)
        parts = [self.submit(images[i:i + self.max_batch])
                 for i in range(0, len(images), self.max_batch)]
        return np.concatenate([p.result() for p in parts])

    def close(self) -> None:
        """Stop taking work; queued requests are still served."""
        self._closed = True
        self._queue.put(CLOSE)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        consume(self._queue, self._dispatch, max_size=self.max_batch,
                size=lambda job: len(job.images), max_wait_s=self.max_wait_s,
                more_coming=self._more_coming)

    def _dispatch(self, pending: list[_Job]) -> None:
        try:
            live = [job for job in pending if job.future.set_running_or_notify_cancel()]
            if live:
                with self._running:
                    self._run_batch(live)
        finally:
            with self._announce_lock:
                self._in_worker -= len(pending)

    def _run_batch(self, live: list[_Job]) -> None:
        """Encode the jobs' images in one call, then answer each (through the stage for
        those with a request); every failure reaches the callers it concerns."""
        images = [job.images for job in live if not job.embedded]
        try:
            if images:
                batch = np.concatenate(images) if len(images) > 1 else images[0]
                out = self._embed(batch)
                if self._on_batch and len(batch):
                    self._on_batch(len(batch))
        except BaseException as exc:  # hand the failure to every waiting caller
            for job in live:
                job.future.set_exception(exc)
            return
        staged: list[tuple[_Job, np.ndarray]] = []
        start = 0
        for job in live:
            if job.embedded:
                vectors = job.images
            else:
                vectors = out[start:start + len(job.images)]
                start += len(job.images)
            if job.request is None:
                job.future.set_result(vectors)
            else:
                staged.append((job, vectors))
        if staged:
            self._run_stage(staged)

    def _run_stage(self, staged: list[tuple[_Job, np.ndarray]]) -> None:
        assert self._stage is not None
        try:
            results = self._stage([(vectors, job.request) for job, vectors in staged])
        except BaseException as exc:
            for job, _ in staged:
                job.future.set_exception(exc)
            return
        for (job, _), result in zip(staged, results, strict=True):
            job.future.set_result(result)
