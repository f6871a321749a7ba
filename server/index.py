"""In-memory FAISS mirror of a store table, for fast filtered kNN.

Rebuilt from LanceDB at start, extended on every write and whenever another process adds
rows to the table. Each row gets a dense integer position; its metadata sits beside the
index in columnar form (ids as Arrow strings; env, label and split dictionary-coded as
numpy codes of the narrowest type; uris and content hashes as Arrow strings too, except
in a re-ranked index, which reads them with its candidates: hit_strings.py), so a
structured filter becomes a FAISS bitmap selector. The bitmap of a filter is kept and
extended only over rows added since, so a search never passes over every row to build
it. Flat (exact) L2 search below `ivf_threshold` rows; an IVF index above it (ann.py:
trained on a sample, calibrated, extended without retraining, retrained only after the
table has grown 4x), whose lists hold 8-bit codes instead of float32 vectors from
`compressed_threshold` rows, or, on a store with stable row ids (`stored`), 4-bit codes
whose candidates are re-ranked against the store's vectors (rerank.py). Rows added after
a training are encoded into the trained lists at once (found by the next search; no side
index). When written rows make a switch or a retraining due, it runs in a background
thread while searches go on with the current index and rows keep being added; the new
index takes every row in and replaces it under the lock. An index only moves to a larger
kind. The index can be saved next to the store and loaded at start
(index_files.py).

Evidence rules (`search`'s `exclude_labels` and `exclude_self`): rows whose label is
excluded are left out through the same bitmap; a query's own row (same id, or same
content sha256) is dropped from its results, the search widening until k others are
found.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import faiss
import numpy as np
import pyarrow as pa

from envad.errors import InvalidInput
from envad.records import Neighbor, RowFilter
from envad.server import ann
from envad.server.config import DEFAULT_COMPRESSED_THRESHOLD, DEFAULT_IVF_THRESHOLD
from envad.server.hit_strings import READ_COLUMNS, HeldStrings, HitStrings, ReadStrings
from envad.server.id_positions import GrowingArray, IdPositions
from envad.server.rerank import StoredVectors, candidate_positions, order_by_vectors
from envad.server.store import ROW_ID, vectors_of
from envad.server.threads import limit_faiss_in_this_thread

log = logging.getLogger(__name__)

#: filters whose bitmaps are kept (the bundle's fit filter and a few request filters)
MAX_CACHED_FILTERS = 32
#: (id, content sha256) of a query whose own stored row must not be returned
SelfKey = tuple[str, str]


def holds_strings(kind: str) -> bool:
    """Whether an index of `kind` holds its rows' uris and content hashes (a re-ranked
    one reads its hits' with their vectors)."""
    return kind != ann.RERANKED


def held_columns(kind: str) -> tuple[str, ...]:
    """The store columns an index of `kind` holds beside its vectors."""
    return ("id", "env", "label", "split") + (("uri", "sha256") if holds_strings(kind) else ())


#: the code types of a CodedColumn, narrowest first, each with the distinct values it holds
CODE_TYPES = ((np.uint8, 1 << 8), (np.uint16, 1 << 16), (np.int32, 1 << 31))


class CodedColumn:
    """A string column as codes into a list of distinct values (amortised growth). The
    codes take the narrowest type that holds every value seen (one byte a row for up to
    256 cameras, labels or splits), widened when a value beyond it comes."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._lookup: dict[str, int] = {}
        self._codes = GrowingArray(CODE_TYPES[0][0])

    def extend(self, column: pa.Array | pa.ChunkedArray) -> None:
        """Append a string column (nulls read as "")."""
        encoded = pa.chunked_array([column]) if isinstance(column, pa.Array) else column
        encoded = encoded.cast(pa.string()).fill_null("").combine_chunks().dictionary_encode()
        mapping = np.asarray([self._code(v) for v in encoded.dictionary.to_pylist()],
                             dtype=np.int64)
        codes = (mapping[encoded.indices.to_numpy(zero_copy_only=False)] if len(mapping)
                 else np.zeros(0, dtype=np.int64))
        self._codes.extend(codes)

    def _code(self, value: str) -> int:
        code = self._lookup.get(value)
        if code is None:
            code = self._lookup[value] = len(self.values)
            self.values.append(value)
            self._widen_for(len(self.values))
        return code

    def _widen_for(self, distinct: int) -> None:
        """Move the codes to the narrowest type that holds `distinct` values."""
        wanted = next(kind for kind, holds in CODE_TYPES if distinct <= holds)
        if wanted != self._codes.view().dtype:
            wider = GrowingArray(wanted)
            wider.extend(self._codes.view())
            self._codes = wider

    def assign(self, positions: np.ndarray, value: str) -> None:
        """Give the rows at `positions` the value `value`."""
        code = self._code(value)
        self._codes.view()[positions] = code

    def codes(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self._codes.view()[start:stop]

    def isin(self, wanted: Sequence[str], start: int, stop: int) -> np.ndarray:
        """Mask of rows start..stop whose value is one of `wanted`."""
        known = [self._lookup[v] for v in wanted if v in self._lookup]
        return np.isin(self.codes(start, stop), np.asarray(known, dtype=np.int32))

    def at(self, positions: np.ndarray) -> list[str]:
        values = self.values
        return [values[c] for c in self._codes.view()[positions]]


class _Bitmap:
    """The rows one filter allows, as FAISS's little-endian bitmap: a bit a row (a mask
    of bools would take eight times the memory, for every filter kept)."""

    def __init__(self) -> None:
        self.rows = 0                                   # rows the bitmap covers
        self.packed = np.zeros(0, dtype=np.uint8)
        self.count = 0                                  # rows allowed

    def extend(self, keep: np.ndarray) -> None:
        """Cover the next rows, `keep` telling which are allowed: only the last, partial
        byte is unpacked again. The bytes are a new array, so a search still running
        on the previous one reads it unchanged."""
        whole = self.rows // 8
        tail = np.unpackbits(self.packed[whole:], count=self.rows - 8 * whole,
                             bitorder="little").astype(bool)
        self.packed = np.concatenate([self.packed[:whole], np.packbits(
            np.concatenate([tail, keep]), bitorder="little")])
        self.rows += len(keep)
        self.count += int(keep.sum())

    def selector(self) -> faiss.IDSelectorBitmap:
        """FAISS's selector over these bytes (rows past them are not allowed: a row
        added since the bitmap was extended is left out, never read past its end)."""
        return faiss.IDSelectorBitmap(len(self.packed), faiss.swig_ptr(self.packed))


@dataclass(frozen=True)
class Snapshot:
    """What a saved index holds: the FAISS index, the store id at each of its positions,
    its kind, and the rows its IVF lists were trained on (0 for flat)."""

    faiss_index: faiss.Index
    ids: pa.Array
    kind: str
    trained_rows: int


class VectorIndex:
    """FAISS index + metadata columns; thread-safe add and search."""

    def __init__(self, dim: int, *, ivf_threshold: int = DEFAULT_IVF_THRESHOLD,
                 compressed_threshold: int = DEFAULT_COMPRESSED_THRESHOLD,
                 stored: StoredVectors | None = None):
        """`stored`: the store's vectors by stable row id, when it has them (then the
        compressed kind is `ann.RERANKED`, and the rows added must be stored)."""
        self.dim = dim
        self.stored = stored
        #: the store row id at each position (a RERANKED search reads the store by them)
        self._row_ids = GrowingArray(np.int64) if stored is not None else None
        self.ivf_threshold = ivf_threshold
        self.compressed_threshold = compressed_threshold
        self._lock = threading.RLock()         # searches, adds, relabels
        self._growing = threading.Lock()       # adds and saves: rows held still, searches go on
        self._index: faiss.Index = faiss.IndexFlatL2(dim)
        self._ids = IdPositions()              # the store id at each position, and back
        #: uris and content hashes by position (None: read with a search's candidates)
        self._strings: HeldStrings | None = HeldStrings.empty()
        self._coded = {name: CodedColumn() for name in ("env", "label", "split")}
        self._bitmaps: dict[tuple, _Bitmap] = {}
        self.kind = ann.FLAT            # ann.KINDS
        self.trained_rows = 0           # rows the IVF index was trained on (0: flat)
        self._pending = 0               # tables handed to `add_table_soon`, not yet added
        self._caught_up = threading.Condition()
        self._adder: ThreadPoolExecutor | None = None
        self._training: threading.Thread | None = None   # IVF trained beside the writes

    def __len__(self) -> int:
        self.flush()
        return len(self._ids)

    def __contains__(self, row_id: str) -> bool:
        self.flush()
        with self._lock:
            return row_id in self._ids

    def ids(self) -> set[str]:
        self.flush()
        with self._lock:
            return set(self._ids.array().to_pylist())

    def id_positions(self) -> IdPositions:
        """A copy of the indexed ids for a holder that appends its own (the store writer
        after a load), so that no id is hashed twice."""
        self.flush()
        with self._lock:
            return self._ids.copy()

    def add_table_soon(self, table: pa.Table) -> None:
        """`add_table` in the index's own thread, so that the caller (the store writer)
        goes on with its next commit meanwhile. Every read of the index that starts after
        this call waits until the rows are in: a row acknowledged to a client is found."""
        with self._caught_up:
            self._pending += 1
            if self._adder is None:
                self._adder = ThreadPoolExecutor(1, thread_name_prefix="index-add")
        self._adder.submit(self._add_pending, table)

    def _add_pending(self, table: pa.Table) -> None:
        try:
            self._add(table, background=True)
        except Exception:  # the rows are stored: a refresh adds what the index lacks
            log.exception("index add failed; the rows are stored and a refresh adds them")
        finally:
            with self._caught_up:
                self._pending -= 1
                self._caught_up.notify_all()

    def flush(self) -> None:
        """Wait until every table handed to `add_table_soon` is in the index."""
        with self._caught_up:
            while self._pending:
                self._caught_up.wait()

    def add_table(self, table: pa.Table) -> int:
        """Add the rows of an Arrow table (store schema) not yet indexed; returns the count."""
        self.flush()
        return self._add(table)

    def add_batches(self, batches: Iterable[pa.Table | pa.RecordBatch]) -> int:
        """Add a whole table read in batches (a rebuild from the store): memory holds one
        batch besides the index, and the switch to IVF, when the rows reach
        `ivf_threshold`, happens once at the end, trained for the final row count."""
        self.flush()
        added = 0
        for batch in batches:
            table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
            added += self._add(table, switch=False)
        self.settle()
        return added

    def rebuild(self, batches: Iterable[pa.Table | pa.RecordBatch], rows: int,
                sample_of: Callable[[np.ndarray], np.ndarray]) -> int:
        """`add_batches` of a whole table of `rows` rows into this empty index. When the
        thresholds call for an IVF kind at `rows`, its lists are trained first, on the
        vectors `sample_of` reads at the seeded positions `ann.sample_positions(rows)`,
        and every batch goes straight into them: memory holds the index it ends with and
        one batch, never a flat index of every row first (for the compressed kinds, four
        or eight times the memory they end with)."""
        kind = self.wanted_kind(rows)
        if kind == ann.FLAT or len(self) or self.kind != ann.FLAT:
            return self.add_batches(batches)
        started = time.monotonic()
        positions = ann.sample_positions(rows)
        trained = ann.trained_kind(kind, sample_of(positions), ann.nlist_for(rows))
        with self._growing, self._lock:
            self._take(trained, kind, rows)
        added = self.add_batches(batches)
        with self._growing, self._lock:       # `trained` is still the index: no switch
            trained.nprobe = ann.calibrate_nprobe(trained, exact_rows=self._exact_rows(kind))
            nlist, nprobe = trained.nlist, trained.nprobe
        log.info("%s index trained on %d sampled rows, then the table's %d rows read into "
                 "it: %d lists, nprobe %d, %.1f s", kind, len(positions), added, nlist,
                 nprobe, time.monotonic() - started)
        return added

    def wanted_kind(self, rows: int | None = None) -> str:
        """The kind the thresholds call for at `rows` rows (default: the rows held)."""
        held = len(self._ids) if rows is None else rows
        return ann.kind_for(held, self.ivf_threshold, self.compressed_threshold,
                            reranked=self.stored is not None)

    def settle(self) -> None:
        """Switch to the kind the rows held call for, or retrain, here and now when due
        (after a rebuild, or a load under other thresholds than the save's)."""
        self.flush()
        with self._growing, self._lock:
            self._grow(len(self._ids), np.zeros((0, self.dim), np.float32))

    def _add(self, table: pa.Table, *, switch: bool = True, background: bool = False) -> int:
        """Add the new rows of `table`; `switch` False: a flat index stays flat (the caller
        switches once it has added everything); `background`: a due switch or retraining
        runs in a thread of its own (`_train_and_swap`) while rows keep coming in."""
        if table.num_rows == 0:
            return 0
        limit_faiss_in_this_thread()
        table = self._with_row_ids(table)
        ids = table.column("id").to_pylist()
        with self._growing, self._lock:
            known = self._ids.positions(ids) >= 0
            if len(set(ids)) == len(ids) and not known.any():
                subset = table                      # the writer's case: every id new, once
            else:
                fresh: list[int] = []
                seen: set[str] = set()
                for i, row_id in enumerate(ids):   # first occurrence of each new id
                    if not known[i] and row_id not in seen:
                        seen.add(row_id)
                        fresh.append(i)
                if not fresh:
                    return 0
                subset = table.take(pa.array(fresh)) if len(fresh) < table.num_rows else table
            vectors = vectors_of(subset)
            total = len(self._ids) + subset.num_rows
            if background:
                self._index.add(vectors)
                # a running training catches up with these rows before it swaps
                if switch and not self._training_running() and self._training_due(total):
                    self._train_in_background()
            elif not (switch and self._grow(total, vectors)):
                self._index.add(vectors)
            self._append_metadata(subset)
            return subset.num_rows

    def _take(self, faiss_index: faiss.Index, kind: str, trained_rows: int) -> None:
        """Make `faiss_index` of `kind` this index's (under both locks, or while no other
        thread holds it yet). A re-ranked one reads its hits' uris and content hashes
        with their vectors, so the ones held until now are let go."""
        self._index, self.kind, self.trained_rows = faiss_index, kind, trained_rows
        if not holds_strings(kind):
            self._strings = None

    def _append_metadata(self, rows: pa.Table) -> None:
        """Give the rows just added to the FAISS index their positions and metadata."""
        self._ids.append(rows.column("id"))
        if self._strings is not None:
            self._strings.extend(rows)
        for name, column in self._coded.items():
            column.extend(rows.column(name))
        if self._row_ids is not None:
            self._row_ids.extend(rows.column(ROW_ID).to_numpy().astype(np.int64))

    def _with_row_ids(self, table: pa.Table) -> pa.Table:
        """`table` with its rows' store row ids when this index keeps them: as read, or
        looked up in the store (the writer's just-appended rows), before any lock."""
        if self.stored is None or ROW_ID in table.column_names:
            return table
        return table.append_column(ROW_ID, pa.array(self.stored.row_ids_of(table.column("id")),
                                                     pa.int64()))

    @classmethod
    def restored(cls, saved: Snapshot, metadata: pa.Table, *,
                 ivf_threshold: int = DEFAULT_IVF_THRESHOLD,
                 compressed_threshold: int = DEFAULT_COMPRESSED_THRESHOLD,
                 stored: StoredVectors | None = None) -> VectorIndex:
        """An index around a saved FAISS index; `metadata` holds the store's metadata
        columns of its rows, row i for position i (labels may have changed since), and
        their row ids with `stored`."""
        if metadata.num_rows != saved.faiss_index.ntotal:
            raise ValueError(f"{metadata.num_rows} metadata rows for an index of "
                             f"{saved.faiss_index.ntotal}")
        index = cls(saved.faiss_index.d, ivf_threshold=ivf_threshold,
                    compressed_threshold=compressed_threshold, stored=stored)
        index._take(saved.faiss_index, saved.kind, saved.trained_rows)
        index._append_metadata(metadata)
        return index

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """The FAISS index and the id at each position, held still until the block ends
        (rows to add wait; searches go on, since neither changes the index): for saving."""
        self.flush()
        with self._growing:
            with self._lock:
                ids = self._ids.array()
            yield Snapshot(self._index, ids, self.kind, self.trained_rows)

    def vectors_at(self, positions: np.ndarray) -> np.ndarray:
        """The indexed vectors at `positions` (as FAISS holds them: decoded from the
        codes in a compressed index)."""
        self.flush()
        with self._lock:
            return ann.rows_of(self._index, positions)

    def row_ids_at(self, positions: np.ndarray) -> np.ndarray:
        """The store row ids at `positions` (an index with `stored` only)."""
        self.flush()
        with self._lock:
            assert self._row_ids is not None
            return self._row_ids.view()[positions]

    def _rows(self, positions: np.ndarray) -> np.ndarray:
        """The exact vectors at `positions`, for (re)training: from the store by row id
        when the index holds codes and the store can be read so (read outside the
        lock), else from the index itself."""
        with self._lock:
            if self._row_ids is None or self.kind not in ann.CODED:
                return ann.rows_of(self._index, positions)
            row_ids = self._row_ids.view()[positions]
        assert self.stored is not None
        return self.stored.vectors_by_row_id(row_ids)

    def _exact_rows(self, kind: str) -> ann.RowReader | None:
        """What calibrates an index of `kind` that holds this index's rows: the exact
        vectors by position for a RERANKED one (its searches re-rank by them)."""
        return self._rows if kind == ann.RERANKED else None

    def encoded(self, vectors: np.ndarray) -> np.ndarray:
        """`vectors` as this index holds them once added (ann.encoded)."""
        with self._lock:
            return ann.encoded(self._index, vectors)

    def _kind_after(self, total: int) -> str:
        """The kind the index takes at `total` rows: the thresholds' kind, or its own
        when that is larger (an index never moves back to a kind it has left)."""
        wanted = self.wanted_kind(total)
        return max(wanted, self.kind, key=ann.KINDS.index)

    def _training_due(self, total: int) -> bool:
        """True (and logged) when `total` rows call for a larger kind or a retraining."""
        kind = self._kind_after(total)
        if kind != self.kind:
            log.info("index reaches %d rows (ivf_threshold %d, compressed_threshold %d): "
                     "switching from %s to %s", total, self.ivf_threshold,
                     self.compressed_threshold, self.kind, kind)
        elif kind != ann.FLAT and ann.needs_retraining(total, self.trained_rows):
            log.info("index grew from %d rows at training to %d (%dx): retraining IVF",
                     self.trained_rows, total, ann.RETRAIN_GROWTH)
        else:
            return False
        return True

    def _grow(self, total: int, new_vectors: np.ndarray) -> bool:
        """Switch to a larger kind once the table calls for it, and retrain an IVF index
        once it has grown `ann.RETRAIN_GROWTH` times, here and now; True when
        `new_vectors` went in with it."""
        if not self._training_due(total):
            return False
        kind = self._kind_after(total)
        self._take(ann.build_ivf(self._index, new_vectors, kind=kind, rows=self._rows),
                   kind, total)
        return True

    def _training_running(self) -> bool:
        return self._training is not None and self._training.is_alive()

    def _train_in_background(self) -> None:
        """Start `_train_and_swap` in a thread of its own (none is running: `_add`
        checks under the lock)."""
        self._training = threading.Thread(target=self._train_and_swap, daemon=True,
                                          name="index-train")
        self._training.start()

    def wait_for_training(self, timeout: float | None = None) -> None:
        """Wait until a background switch to a larger kind (or retraining) has finished."""
        if self._training is not None:
            self._training.join(timeout)

    def _train_and_swap(self) -> None:
        """Train an IVF index for the rows held now and move every row into it while
        searches go on with the current index and rows keep being added to it: k-means
        and the copying run without the locks (the copying takes the lock per chunk read);
        only the rows added since and the swap itself hold them. Rows that came in
        meanwhile may call for a larger kind still: it is trained next, in this thread."""
        limit_faiss_in_this_thread()
        started = time.monotonic()
        try:
            with self._lock:
                rows = self._index.ntotal
                kind = self._kind_after(rows)
            sample = ann.training_sample(rows, self._rows, np.zeros((0, self.dim), np.float32))
            ivf = ann.trained_kind(kind, sample, ann.nlist_for(rows))
            copied = 0
            while True:
                with self._lock:
                    end = min(copied + ann.COPY_CHUNK, self._index.ntotal)
                if copied >= end:
                    break
                ivf.add(self._rows(np.arange(copied, end)))
                copied = end
            ivf.nprobe = ann.calibrate_nprobe(ivf, exact_rows=self._exact_rows(kind))
            with self._growing, self._lock:
                end = self._index.ntotal
                if copied < end:
                    ivf.add(self._rows(np.arange(copied, end)))
                self._take(ivf, kind, end)
                larger_due = self._kind_after(end) != kind
            log.info("%s index trained beside the writes on %d of %d rows: %d lists, "
                     "nprobe %d, %.1f s", kind, len(sample), end, ivf.nlist, ivf.nprobe,
                     time.monotonic() - started)
        except Exception:
            log.exception("training the IVF index failed; the index stays %s", self.kind)
            return
        if larger_due:
            self._train_and_swap()

    def _bitmap(self, row_filter: RowFilter, exclude_labels: tuple[str, ...]) -> _Bitmap:
        """The filter's bitmap, extended over the rows added since it was last used."""
        key = (row_filter.envs, row_filter.splits, row_filter.labels, exclude_labels)
        bitmap = self._bitmaps.get(key)
        if bitmap is None:
            if len(self._bitmaps) >= MAX_CACHED_FILTERS:
                self._bitmaps.clear()
            bitmap = self._bitmaps[key] = _Bitmap()
        start, stop = bitmap.rows, len(self._ids)
        if start < stop:
            keep = np.ones(stop - start, dtype=bool)
            for values, name in ((row_filter.envs, "env"), (row_filter.splits, "split"),
                                 (row_filter.labels, "label")):
                if values:
                    keep &= self._coded[name].isin(values, start, stop)
            if exclude_labels:
                keep &= ~self._coded["label"].isin(exclude_labels, start, stop)
            bitmap.extend(keep)
        return bitmap

    def search(self, queries: np.ndarray, k: int, row_filter: RowFilter = RowFilter(), *,
               exclude_labels: Sequence[str] = (),
               exclude_self: Sequence[SelfKey] | None = None) -> list[list[Neighbor]]:
        """The k nearest indexed rows (matching the filter) to each query vector.

        Rows labelled one of `exclude_labels` are never returned; with `exclude_self`
        (one (id, sha256) per query), neither is a row with the query's id or content.
        """
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InvalidInput(f"query vectors must have shape [n, {self.dim}], got "
                               f"{list(queries.shape)}")
        if not np.isfinite(queries).all():
            raise InvalidInput("query vectors contain NaN or infinity")
        if exclude_self is not None and len(exclude_self) != len(queries):
            raise ValueError("exclude_self needs one (id, sha256) per query")
        self.flush()
        limit_faiss_in_this_thread()
        with self._lock:
            if not len(self._ids) or k <= 0:
                return [[] for _ in range(len(queries))]
            params, allowed, _bits = self._search_params(row_filter, exclude_labels)
        if allowed == 0:
            return [[] for _ in range(len(queries))]
        wanted = min(k, allowed)
        fetch = wanted + (1 if exclude_self is not None else 0)
        while True:      # `_bits` keeps the selector's bitmap alive until the searches end
            distances, positions, strings = self._candidates(queries, min(fetch, allowed),
                                                             allowed, params)
            with self._lock:
                kept = self._drop_self(positions, exclude_self, strings)
                if fetch >= allowed or all(len(row) >= wanted for row in kept):
                    return self._neighbors(distances, positions, kept, wanted, strings)
            fetch = min(2 * fetch, allowed)

    def _search_params(self, row_filter: RowFilter, exclude_labels: Sequence[str]
                       ) -> tuple[faiss.SearchParameters | None, int, np.ndarray | None]:
        """The search parameters of a filter (None: every row allowed), the rows it
        allows, and the packed bitmap its selector points into (held by the caller)."""
        labels = tuple(sorted(set(exclude_labels)))
        if row_filter.is_empty() and not labels:
            return None, len(self._ids), None
        bitmap = self._bitmap(row_filter, labels)
        if bitmap.count == 0 or bitmap.count == len(self._ids):
            # a filter that leaves every row in (no stored anomalies) needs no selector
            return None, bitmap.count, None
        packed = bitmap.packed
        selector = bitmap.selector()
        # faiss's SWIG stubs know neither the keyword constructors nor IVF's nprobe
        if self.kind == ann.FLAT:
            return faiss.SearchParameters(sel=selector), bitmap.count, packed  # type: ignore[call-arg]
        probes = ann.probes_for(self._index, bitmap.count)  # type: ignore[arg-type]
        return (faiss.SearchParametersIVF(sel=selector, nprobe=probes),  # type: ignore[call-arg]
                bitmap.count, packed)

    def _candidates(self, queries: np.ndarray, n: int, allowed: int,
                    params: faiss.SearchParameters | None
                    ) -> tuple[np.ndarray, np.ndarray, HitStrings]:
        """Squared distances and positions of each query's n nearest allowed rows, and
        their uris and hashes; a RERANKED index ranks `ann.RERANK_FACTOR` times as many
        by their codes, then by the stored vectors, read with their uris and hashes
        (without the lock, so other searches go on)."""
        with self._lock:
            if self.kind != ann.RERANKED:
                assert self._strings is not None
                return (*self._index.search(queries, n, params=params), self._strings)
            count = min(n * ann.RERANK_FACTOR, allowed)
            _, positions = self._index.search(queries, count, params=params)
            assert self._row_ids is not None and self.stored is not None
            # rows are only appended: these positions' row ids stay as they are in this
            # view, whatever is added meanwhile
            row_ids, stored = self._row_ids.view(), self.stored
        distinct = candidate_positions(positions)
        rows = stored.rows_by_row_id(row_ids[distinct], READ_COLUMNS)
        distances, positions = order_by_vectors(queries, positions, distinct,
                                                vectors_of(rows))
        return distances, positions, ReadStrings.of(distinct, rows)

    def relabel(self, ids: Sequence[str], label: str) -> None:
        """Set the label of indexed rows (after the store's; unknown ids are ignored).
        Filter bitmaps are dropped, since a label decides which rows a filter allows."""
        self.flush()
        with self._lock:
            positions = self._ids.positions(list(ids))
            positions = positions[positions >= 0]
            if len(positions):
                self._coded["label"].assign(positions, label)
                self._bitmaps.clear()

    def _drop_self(self, positions: np.ndarray, exclude_self: Sequence[SelfKey] | None,
                   strings: HitStrings) -> list[list[int]]:
        """Per query, the result columns to keep (found, and not the query itself)."""
        if exclude_self is None:
            return [[j for j, p in enumerate(row) if p >= 0] for row in positions]
        flat = positions.ravel()
        valid = flat[flat >= 0]
        ids = dict(zip(valid.tolist(), self._ids.at(valid), strict=True))
        hashes = dict(zip(valid.tolist(), strings.hashes_at(valid), strict=True))
        kept = []
        for row, (own_id, own_hash) in zip(positions.tolist(), exclude_self, strict=True):
            kept.append([j for j, p in enumerate(row) if p >= 0 and ids[p] != own_id
                         and not (own_hash and hashes[p] == own_hash)])
        return kept

    def _neighbors(self, distances: np.ndarray, positions: np.ndarray,
                   kept: list[list[int]], k: int, strings: HitStrings) -> list[list[Neighbor]]:
        chosen = [[positions[q, j] for j in cols[:k]] for q, cols in enumerate(kept)]
        flat = np.asarray([p for row in chosen for p in row], dtype=np.int64)
        ids, uris = self._ids.at(flat), strings.uris_at(flat)
        env, label, split = (self._coded[n].at(flat) for n in ("env", "label", "split"))
        out, i = [], 0
        for q, cols in enumerate(kept):
            row = []
            for j in cols[:k]:
                row.append(Neighbor(id=ids[i], env=env[i], label=label[i], split=split[i],
                                    uri=uris[i],
                                    distance=float(np.sqrt(max(distances[q, j], 0.0)))))
                i += 1
            out.append(row)
        return out

