"""Which images a training run decodes, and decoding them while `envad train` imports torch.

A run decodes its training images (in groups of `DECODE_CHUNK` positions, when they fit
in `DEFAULT_CACHE_BYTES`) and its validation images. `run_dataset`, `val_positions` and
`decode_groups` say which, without torch, so that `DecodeAhead` can decode them in a
child process while the parent spends its first seconds importing torch on one core
(a fresh `envad train` on PhotoDigits: about 1.7-2.8 s of imports against 0.5-0.7 s of
decoding its PNGs, 1.8-2.5 s for 640x480 JPEGs). The parent's
`MultiEnvDataset.images` then takes each group from the child instead of decoding it;
a group the child did not decode (it failed, stopped at `AHEAD_MAX_BYTES`, or the run
asks for other images) is decoded as before, so the run's images, the decoded-image
cache and every error message are the same with or without it.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Hashable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from envad.training.data import load_dataset
from envad.training.multienv import MultiEnvDataset

log = logging.getLogger(__name__)

#: training positions decoded per `MultiEnvDataset.images` call (one progress-bar step)
DECODE_CHUNK = 256
#: the training set is decoded once and kept when its pixels take at most this many bytes
DEFAULT_CACHE_BYTES = 4 * 1024**3
#: training images embedded for the k-NN validation metric at most (a seeded sample)
MAX_REFERENCE = 1000
#: validation images at most (a seeded sample of the val split's normal images)
MAX_VAL = 4000
#: what a child decodes ahead at most; the rest is decoded by the run as it goes
AHEAD_MAX_BYTES = 1024**3


def run_dataset(data: str, exclude_envs: Sequence[str] = (),
                exclude_labels: Sequence[str] = ()) -> MultiEnvDataset:
    """The dataset a run trains on: `data` without the held-out cameras and labels."""
    dataset = load_dataset(data)
    if exclude_envs or exclude_labels:
        dataset = dataset.without(exclude_envs, exclude_labels)
    return dataset


def train_positions(dataset: MultiEnvDataset) -> np.ndarray:
    """The training images: the train split's normal records."""
    return dataset.indices("train", normal_only=True)


def val_positions(dataset: MultiEnvDataset, train_labels: set[str], task: str,
                  rng: np.random.Generator) -> np.ndarray:
    """The validation images: the val split's normals (of a class seen in training with
    `task` "class"), a sample of `MAX_VAL` drawn with `rng` (the run's
    `validation_rng` after its reference rows) when there are more."""
    positions = dataset.indices("val", normal_only=True)
    if task == "class":
        positions = np.array([i for i in positions
                              if dataset.records[int(i)].label in train_labels], dtype=np.int64)
    if len(positions) > MAX_VAL:
        positions = np.sort(rng.choice(positions, MAX_VAL, replace=False))
    return positions


def validation_rng(seed: int) -> np.random.Generator:
    """The generator a run draws its validation samples from: first a permutation of its
    training images (the k-NN reference rows), then the val sample."""
    return np.random.default_rng([seed, 99])


def validation_draws(dataset: MultiEnvDataset, n_train: int, train_labels: set[str],
                     task: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A run's seeded validation samples, drawn in the run's order: the k-NN reference
    rows (sorted, of its `n_train` training images) and the val positions."""
    rng = validation_rng(seed)
    rows = np.sort(rng.permutation(n_train)[:MAX_REFERENCE])
    return rows, val_positions(dataset, train_labels, task, rng)


def decode_groups(dataset: MultiEnvDataset, size: int, seed: int, task: str,
                  cache_bytes: int = DEFAULT_CACHE_BYTES) -> list[np.ndarray]:
    """The position groups a run decodes, in order: its training images in
    `DECODE_CHUNK`s when they fit in `cache_bytes`, then its validation images."""
    train = train_positions(dataset)
    groups = []
    if len(train) * size * size * 3 <= cache_bytes:
        groups = [train[k:k + DECODE_CHUNK] for k in range(0, len(train), DECODE_CHUNK)]
    labels = {dataset.records[int(i)].label for i in train}
    _, val = validation_draws(dataset, len(train), labels, task, seed)
    return [*groups, val]


def _decode_in_child(data: str, exclude_envs: list[str], exclude_labels: list[str], size: int,
                     seed: int, task: str, max_bytes: int, out: Connection) -> None:
    """The child: decode the run's groups in order, each sent as (key, pixels) as soon as
    it is ready, until `max_bytes`; then None. Any failure ends it early (the run then
    decodes the rest itself and reports the error, if it is one, as it would anyway).
    A thread sends, so decoding goes on while the parent is not yet reading. Ctrl-C is
    the parent's to handle (it stops the child), so the child ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    outbox: queue.SimpleQueue = queue.SimpleQueue()
    sender = threading.Thread(target=_send_all, args=(outbox, out), name="send")
    sender.start()
    try:
        dataset = run_dataset(data, exclude_envs, exclude_labels)
        sent = 0
        for positions in decode_groups(dataset, size, seed, task):
            sent += len(positions) * size * size * 3
            if sent > max_bytes:
                break
            outbox.put((dataset.group_key(positions, size), dataset.images(positions, size)))
    except Exception:  # noqa: BLE001 - the parent decodes what is missing and reports errors
        pass
    finally:
        outbox.put(None)
        sender.join()
        out.close()


def _send_all(outbox: queue.SimpleQueue, out: Connection) -> None:
    while True:
        item = outbox.get()
        try:
            out.send(item)
        except OSError:                 # the parent has stopped listening
            return
        if item is None:
            return


class DecodeAhead:
    """A child process decoding a run's images while this process goes on (imports
    torch); `take` hands over one group. A context manager: leaving it stops the child.

        with DecodeAhead(data, size=32, seed=0, task="bucket") as ahead:
            import torch  ...
            dataset.decoded_ahead = ahead
    """

    def __init__(self, data: str, *, size: int, seed: int, task: str,
                 exclude_envs: Sequence[str] = (), exclude_labels: Sequence[str] = (),
                 max_bytes: int = AHEAD_MAX_BYTES, start_method: str | None = None):
        if start_method is None:
            # fork is cheapest; it is safe only while this process runs a single thread
            fork = "fork" in multiprocessing.get_all_start_methods()
            start_method = "fork" if fork and threading.active_count() == 1 else "spawn"
        context: Any = multiprocessing.get_context(start_method)   # its Process and Pipe
        self._inbox, child_end = context.Pipe(duplex=False)
        self._ready: dict[Hashable, np.ndarray] = {}
        self._done = False          # nothing more will come
        self._finished = False      # the child said it was done
        self.taken = 0
        self._process = context.Process(
            target=_decode_in_child, name="envad-decode-ahead", daemon=True,
            args=(data, list(exclude_envs), list(exclude_labels), size, seed, task,
                  max_bytes, child_end))
        with _sigint_ignored():                  # inherited from the first instruction
            self._process.start()
        child_end.close()       # only the child writes: its exit ends the stream here

    def take(self, key: Hashable) -> np.ndarray | None:
        """The group `key` if the child decodes it (waiting for it), else None."""
        while key not in self._ready and not self._done:
            try:
                item = self._inbox.recv()
            except (EOFError, OSError):     # the child ended without saying so (killed)
                self._done = True
                break
            if item is None:                # the child has sent all it will
                self._done = self._finished = True
            else:
                self._ready[item[0]] = item[1]
        found = self._ready.pop(key, None)
        self.taken += found is not None
        return found

    def close(self) -> None:
        """Stop the child (if still decoding) and drop what was not taken."""
        if self._inbox.closed:
            return
        self._ready.clear()
        try:    # what the child has sent, or sends within a moment (its closing None)
            while not self._done and self._inbox.poll(0.1):
                if self._inbox.recv() is None:
                    self._done = self._finished = True
        except (EOFError, OSError):
            pass
        self._done = True
        if self._finished:
            self._process.join(timeout=5)    # it is closing its end and exiting
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._inbox.close()
        log.debug("images decoded ahead: %d groups taken (the child's exit code %s)",
                  self.taken, self._process.exitcode)

    def __enter__(self) -> DecodeAhead:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@contextlib.contextmanager
def _sigint_ignored():
    """Ignore Ctrl-C while a child starts, so it starts ignoring it (the parent stops the
    child when it handles Ctrl-C itself). Only the main thread may change handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ahead_enabled() -> bool:
    """`$ENVAD_DECODE_AHEAD` 0 turns decoding ahead off (default on)."""
    return os.environ.get("ENVAD_DECODE_AHEAD", "1").strip() != "0"
