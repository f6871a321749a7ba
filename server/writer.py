"""The store's single writer: one thread commits every write, batching queued rows.

Concurrent merge-inserts of the same new ids can insert duplicates, so all writes of a
server go through this queue (drained by `queue_drain.consume`). Rows queued together
are committed as one table version (fewer versions, fewer small fragments); every
`optimize_every` commits the table is compacted. A caller's future resolves only after
the commit returned: that is the point at which a row is acknowledged as durable. The
FAISS mirror is extended after each commit.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from envad.errors import ResourceExhausted, Unavailable
from envad.server.index import VectorIndex
from envad.server.queue_drain import CLOSE, consume
from envad.server.store import EmbeddingStore, Row

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriteResult:
    """Outcome of one caller's write: which ids are new, which were already stored."""

    inserted: tuple[str, ...]
    duplicates: tuple[str, ...]
    version: int


class StoreWriter:
    """Serialises writes to one store table and keeps its index in step."""

    def __init__(self, store: EmbeddingStore, index: VectorIndex, *, max_rows: int = 4096,
                 optimize_every: int = 100,
                 on_commit: Callable[[int, int], None] | None = None):
        self.store = store
        self.index = index
        self.max_rows = max_rows
        self.optimize_every = optimize_every
        self._on_commit = on_commit
        self._queue: queue.Queue[tuple[Sequence[Row], Future] | None] = queue.Queue()
        self._commits = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"writer-{store.model_id}",
                                        daemon=True)
        self._thread.start()

    def submit(self, rows: Sequence[Row]) -> Future:
        """Queue rows; the future resolves to a WriteResult once they are durable."""
        if self._closed:
            raise Unavailable("store writer is shutting down; retry")
        future: Future = Future()
        self._queue.put((list(rows), future))
        return future

    def write(self, rows: Sequence[Row]) -> WriteResult:
        return self.submit(rows).result()

    def close(self, timeout: float | None = None) -> None:
        """Finish queued writes, then stop."""
        self._closed = True
        self._queue.put(CLOSE)
        self._thread.join(timeout)

    def _run(self) -> None:
        consume(self._queue, self._commit, max_size=self.max_rows,
                size=lambda item: len(item[0]))

    def _commit(self, pending: list[tuple[Sequence[Row], Future]]) -> None:
        first_owner: dict[str, int] = {}
        unique: list[Row] = []
        for owner, (rows, _) in enumerate(pending):
            for row in rows:
                if row.id not in first_owner:
                    first_owner[row.id] = owner
                    unique.append(row)
        try:
            already = self.store.existing_ids([r.id for r in unique])
            new_rows = [r for r in unique if r.id not in already]
            result = self.store.insert(new_rows)
            if new_rows:
                self.index.add_table(self.store.to_arrow(new_rows))
        except OSError as exc:
            error = ResourceExhausted(f"store write failed, nothing was written: {exc}")
            for _, future in pending:
                future.set_exception(error)
            log.error("store write failed: %s", exc)
            return
        except Exception as exc:  # hand any other failure to the callers, keep serving
            for _, future in pending:
                future.set_exception(exc)
            log.exception("store write failed")
            return
        new_ids = {r.id for r in new_rows}
        for owner, (rows, future) in enumerate(pending):
            inserted: list[str] = []
            duplicates: list[str] = []
            for row in rows:
                fresh = row.id in new_ids and first_owner[row.id] == owner
                (inserted if fresh and row.id not in inserted else duplicates).append(row.id)
            future.set_result(WriteResult(tuple(inserted), tuple(duplicates), result.version))
        if self._on_commit:
            self._on_commit(len(new_rows), result.version)
        self._commits += 1
        if self.optimize_every and self._commits % self.optimize_every == 0:
            try:
                self.store.optimize()
            except Exception:  # compaction is housekeeping: never fail a write for it
                log.exception("store optimize failed")
