"""The store's single writer: one thread commits every write, batching queued rows.

Concurrent merge-inserts of the same new ids can insert duplicates, so all writes of a
server go through this queue (drained by `queue_drain.consume`). Rows queued together
are committed as one table version (fewer versions, fewer small fragments); every
`optimize_every` commits the table is compacted. A caller's future resolves only after
the commit returned: that is the point at which a row is acknowledged as durable. The
FAISS mirror is extended after each commit, in the index's own thread while the writer
goes on with the next commit; every read of the index waits for the rows acknowledged
before it (`VectorIndex.add_table_soon`).

Lean path: the writer owns the stored ids (read once at start, and again only when
another process committed to the table; held as Arrow and numpy, id_positions.py), so a
commit is a hash lookup, one Arrow
conversion shared by the store append and the index, and a plain append — no query of
the table per commit. A commit that fails is retried in halves down to single rows, so
one bad row fails alone and every other caller's rows are stored.

A data directory that is full or read-only fails the whole commit at once
(`storage_fault`): each caller gets one RESOURCE_EXHAUSTED ("data directory full") or
FAILED_PRECONDITION ("read-only") without the server's paths, no row is retried on its
own, the log gets one line, and the next commit tries again (writes resume by
themselves when space returns). Meanwhile `disk_fault` holds the fault (health reports
the service's writes NOT_SERVING, reads SERVING) until a commit succeeds or the data
directory takes a probe write again (`recheck_disk`, at each refresh).
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

from envad.errors import EnvadError, FailedPrecondition, ResourceExhausted, Unavailable
from envad.server.index import VectorIndex
from envad.server.queue_drain import CLOSE, consume
from envad.server.store import EmbeddingStore, Row, StoredIds

log = logging.getLogger(__name__)
#: what a full or read-only disk says, through the OS or through the store's own errors
_FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = ("no space left on device", "os error 28", "disk quota exceeded",
              "os error 122")
_READ_ONLY_TEXT = ("read-only file system", "os error 30")
#: what a data directory must take again before writes are reported possible (bytes)
PROBE_BYTES = 1 << 20


_PATH = re.compile(r"(?:[A-Za-z]:)?[/\\][^\s'\",;:)]+")


def without_paths(text: str) -> str:
    """`text` with file paths replaced by <path> (a client never learns the server's
    layout), at most 200 characters."""
    text = _PATH.sub("<path>", text)
    return text if len(text) <= 200 else text[:197] + "..."


class DataDirFull(ResourceExhausted):
    """The data directory has no space left: the write stored nothing."""


class DataDirReadOnly(FailedPrecondition):
    """The data directory is read-only: the write stored nothing."""


def storage_fault(error: BaseException) -> EnvadError | None:
    """The client-facing error of a full or read-only data directory (no paths in it),
    or None when `error` is something else."""
    code = getattr(error, "errno", None)
    text = str(error).lower()
    if code in _FULL or any(t in text for t in _FULL_TEXT):
        return DataDirFull("data directory full: nothing of this write was stored; "
                                 "free space on the server's data disk and send it again")
    if code == errno.EROFS or any(t in text for t in _READ_ONLY_TEXT):
        return DataDirReadOnly("data directory is read-only: nothing of this write was "
                                  "stored; the server answers reads meanwhile")
    return None


def disk_takes_writes(folder: Path) -> bool:
    """Whether `folder` takes a write of PROBE_BYTES now (written, fsynced, deleted): how
    a full or read-only data directory is seen to take writes again before the next
    one comes."""
    probe = folder / ".envad-write-probe"
    try:
        with open(probe, "wb") as handle:
            handle.write(bytes(PROBE_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        return True
    except OSError:
        return False
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:     # a read-only file system refuses even this
            pass


@dataclass(frozen=True)
class WriteResult:
    """Outcome of one caller's write: which ids are new, which were already stored, and
    which could not be written (id, reason) while the rest were."""

    inserted: tuple[str, ...]
    duplicates: tuple[str, ...]
    version: int
    failed: tuple[tuple[str, str], ...] = ()


class StoreWriter:
    """Serialises writes to one store table and keeps its index in step."""

    def __init__(self, store: EmbeddingStore, index: VectorIndex, *, max_rows: int = 4096,
                 optimize_every: int = 100,
                 on_commit: Callable[[list[Row], int], None] | None = None,
                 stored_ids: StoredIds | None = None):
        self.store = store
        self.index = index
        self.max_rows = max_rows
        self.optimize_every = optimize_every
        self._on_commit = on_commit
        self._queue: queue.Queue[tuple[Sequence[Row], Future] | None] = queue.Queue()
        self._commits = 0
        self._closed = False
        #: the last commit's disk fault (full, read-only: no server path in it), until a
        #: commit succeeds or `recheck_disk` sees the disk take a write again
        self.disk_fault: EnvadError | None = None
        # the stored ids, read here unless the caller read them already (opening the index)
        #: every stored id, as of the table version this writer last saw
        self._stored: StoredIds = stored_ids or store.stored_ids()
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
        self.index.flush()

    def recheck_disk(self, folder: Path) -> None:
        """While a disk fault stands, clear it once `folder` (the store's local folder)
        takes a write again, so that health reports writes before the next one comes."""
        if self.disk_fault is not None and disk_takes_writes(folder):
            self._disk_recovered()

    def _disk_recovered(self) -> None:
        log.info("the data directory takes writes again")
        self.disk_fault = None

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
            self._sync_ids()
            stored = self._stored.ids.positions([r.id for r in unique]) >= 0
            new_rows = [r for r, known in zip(unique, stored, strict=True) if not known]
            failed = self._append(new_rows)
        except Exception as exc:
            self._fail(pending, exc, len(unique))
            return
        if self.disk_fault is not None and new_rows:     # the disk took this commit
            self._disk_recovered()
        version = self._stored.version
        new_ids = {r.id for r in new_rows} - failed.keys()
        if self._on_commit:     # before the callers hear of it: they read their writes
            try:
                self._on_commit([r for r in new_rows if r.id in new_ids], version)
            except Exception:  # what follows a commit never undoes it or fails a write
                log.exception("after-commit step failed")
        for owner, (rows, future) in enumerate(pending):
            inserted: list[str] = []
            duplicates: list[str] = []
            errors: list[tuple[str, str]] = []
            counted: set[str] = set()    # an id sent twice by one caller: inserted once
            for row in rows:
                if row.id in failed and first_owner[row.id] == owner:
                    errors.append((row.id, failed[row.id]))
                    continue
                fresh = (row.id in new_ids and first_owner[row.id] == owner
                         and row.id not in counted)
                counted.add(row.id)
                (inserted if fresh else duplicates).append(row.id)
            future.set_result(WriteResult(tuple(inserted), tuple(duplicates), version,
                                          tuple(errors)))
        self._commits += 1
        if self.optimize_every and self._commits % self.optimize_every == 0:
            try:
                self.store.optimize()
                self._stored = replace(self._stored, version=self.store.version)
            except Exception:  # compaction is housekeeping: never fail a write for it
                log.exception("store optimize failed")

    def _fail(self, pending: list[tuple[Sequence[Row], Future]], exc: Exception,
              rows: int) -> None:
        """Fail every caller of a commit; a fault of the disk (full, read-only, refused)
        fails them with one error without a server path, and stands in `disk_fault`."""
        fault = storage_fault(exc)
        error: BaseException = exc
        if fault is not None or isinstance(exc, OSError):
            # the disk, not a row: nothing of this group is written
            self.disk_fault = error = fault or ResourceExhausted(
                "store write failed, nothing was written: the server's disk refused "
                "it (details in the server log)")
            log.error("store write of %d rows failed: %s", rows, exc)
        else:  # hand any other failure to the callers, keep serving
            log.exception("store write failed")
        for _, future in pending:
            future.set_exception(error)

    def _sync_ids(self) -> None:
        """Read the ids another process committed since our last commit (only the
        fragments the table gained since; the table's newest version is looked up)."""
        self._stored = self.store.synced_ids(self._stored)

    def _append(self, rows: list[Row]) -> dict[str, str]:
        """Append rows (ids known to be new); a failing group is split in halves until
        the failing rows stand alone. Returns {id: reason} of rows not written."""
        if not rows:
            return {}
        try:
            table = self.store.to_arrow(rows)     # the one conversion: store and index
            version = self.store.append(table)
        except Exception as exc:
            if isinstance(exc, OSError) or storage_fault(exc) is not None:
                raise   # the disk, not a row: the whole group fails (`_commit`)
            if len(rows) == 1:
                log.warning("row %.64r not written: %s", rows[0].id, exc)
                return {rows[0].id: f"store write failed: {without_paths(str(exc))}"}
            middle = len(rows) // 2
            return self._append(rows[:middle]) | self._append(rows[middle:])
        self._stored.ids.append(table.column("id"))
        self._stored = replace(self._stored, version=version)
        self.index.add_table_soon(table)    # overlaps the next commit; reads wait for it
        return {}
