"""Durable embedding store: one LanceDB table per encoder, behind a handful of methods.

Embeddings of different encoders are not comparable, so each model id has its own table
`emb_<model id>`. The id column is the table's (unenforced) primary key; the server keeps
a single writer (see `writer.py`), which knows the stored ids and appends only new ones.
Filters are structured (`RowFilter`, at most `limits.MAX_FILTER_VALUES` values a field);
the SQL is built here with quoting, never taken from a caller. Rows wanted by id are
found by matching the id column in Arrow, never through SQL text, so a long id list
costs memory in proportion to the ids, not to a query string.

Tables are created with stable row ids (Lance's `_rowid` of a row stays the same through
relabels and compactions), so the neighbour index can keep 4-bit codes and re-rank its
candidates against the vectors read here by row id (`rows_by_row_id`). A table created
without them (by another tool) keeps the index's 8-bit codes (server/ann.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from envad.errors import EnvadError, FailedPrecondition, InvalidInput
from envad.records import RowFilter
from envad.server.id_positions import IdPositions
from envad.server.limits import MAX_NAME_CHARS, text_problem
from envad.server.remote_dir import RemoteDir
from envad.server.storage_uri import is_uri, redact
from envad.server.store_recovery import (
    Acknowledged,
    LocalRecord,
    Recovery,
    RemoteRecord,
    open_below_record,
    open_newest_readable,
    record_path,
)

PRIMARY_KEY_METADATA = {"lance-schema:unenforced-primary-key": "true"}
TIMESTAMP = pa.timestamp("us", tz="UTC")
METADATA_COLUMNS = ("id", "env", "label", "split", "timestamp", "uri", "sha256", "model_id",
                    "ingested_at", "event")
#: columns added to the schema after its first release, each with the SQL value its
#: existing rows get when a table without it is opened (`open_table`)
ADDED_COLUMNS = {"event": "''"}
#: Lance's row id column, read beside the others where the index needs it
ROW_ID = "_rowid"
#: what a new table is created with: row ids that never change (`ROW_ID`)
NEW_TABLE_OPTIONS = {"new_table_enable_stable_row_ids": "true"}
#: LanceDB's read consistency: None, so a read uses the version this process holds and
#: asks storage for nothing more. Newer versions are picked up where they are needed:
#: `refresh` (the server's refresh loop) and `synced_ids` (before the writer dedupes a
#: commit's ids). Checking on every read (an interval of 0) cost each re-ranked Search
#: two listings of the table's versions on object storage, and an idle server five per
#: refresh (`python -m benchmarks.store_requests`).
READ_CONSISTENCY: dt.timedelta | None = None


def table_name(model_id: str) -> str:
    """The LanceDB table holding `model_id`'s embeddings."""
    if not model_id:
        raise InvalidInput("model id must not be empty")
    return "emb_" + re.sub(r"[^A-Za-z0-9]", "_", model_id)


def make_schema(dim: int) -> pa.Schema:
    """Arrow schema of a store table for embeddings of dimension `dim`."""
    return pa.schema([
        pa.field("id", pa.string(), nullable=False, metadata=PRIMARY_KEY_METADATA),
        pa.field("env", pa.string()),
        pa.field("label", pa.string()),
        pa.field("split", pa.string()),
        pa.field("timestamp", TIMESTAMP),
        pa.field("uri", pa.string()),
        pa.field("sha256", pa.string()),
        pa.field("model_id", pa.string()),
        pa.field("ingested_at", TIMESTAMP),
        pa.field("vector", pa.list_(pa.float32(), dim)),
        # never null: a migrated table's column is filled with "" and not nullable
        pa.field("event", pa.string(), nullable=False),
    ])


def open_table(db, model_id: str, dim: int, db_dir: Path | None = None):
    """`model_id`'s table in a LanceDB connection, created with the store schema when it
    does not exist, and brought up to it when it lacks a column added since
    (ADDED_COLUMNS: one commit per column, its existing rows given the column's value).
    Refused when the table holds vectors of another dimension. With `db_dir` (the
    connection's folder), a table whose newest files are damaged opens at its newest
    readable version (store_recovery.py); `open_table_at_readable` returns how."""
    return open_table_at_readable(db, model_id, dim, db_dir)[0]


def open_table_at_readable(db, model_id: str, dim: int, db_dir: Path | None = None,
                           record: RemoteRecord | None = None
                           ) -> tuple[Any, Recovery | None]:
    """`open_table`, and the Recovery of a table served below its newest version or
    below its acknowledged record (None when it opened as it is). A table on object
    storage is checked against its acknowledged `record` only."""
    name = table_name(model_id)
    recovery = None
    try:
        if db_dir is not None:
            table, recovery = open_newest_readable(db, db_dir, name)
        elif record is not None:
            table, recovery = open_below_record(db, name, record)
        else:
            table = db.open_table(name)
    except ValueError:  # not created yet
        table = db.create_table(name, schema=make_schema(dim), exist_ok=True,
                                storage_options=NEW_TABLE_OPTIONS)
    stored = table.schema.field("vector").type.list_size
    if stored != dim:
        raise FailedPrecondition(
            f"store table {name} holds {stored}-d vectors but model {model_id!r} embeds "
            f"{dim}-d ones: give a retrained encoder its own model id"
        )
    if recovery is not None and not recovery.writable:
        return table, recovery          # pinned read-only: no commit (columns come later)
    return upgrade_table(table), recovery


def upgrade_table(table):
    """Add the columns of ADDED_COLUMNS that `table` lacks, one commit each; a column
    another process added first (its commit won) is taken as added."""
    for column, value in ADDED_COLUMNS.items():
        if column in table.schema.names:
            continue
        try:
            table.add_columns({column: value})
        except Exception:  # lance refuses the commit when a concurrent one added it
            table.checkout_latest()
            if column not in table.schema.names:
                raise
    return table


def where_clause(row_filter: RowFilter) -> str | None:
    """A LanceDB `where` clause for `row_filter` with every value quoted; None when empty."""
    clauses = []
    for column, values in (("env", row_filter.envs), ("split", row_filter.splits),
                           ("label", row_filter.labels)):
        if values:
            clauses.append(f"{column} IN ({', '.join(_quote(v) for v in values)})")
    return " AND ".join(clauses) or None


def _quote(value: str) -> str:
    problem = (text_problem("filter value", value, MAX_NAME_CHARS)
               if isinstance(value, str) else f"filter value {value!r} is not a string")
    if problem:
        raise InvalidInput(problem)
    return "'" + value.replace("'", "''") + "'"


@dataclass
class Row:
    """One image's stored record (vector excluded from repr)."""

    id: str
    vector: np.ndarray = field(repr=False)
    env: str = ""
    label: str = ""
    split: str = ""
    timestamp: dt.datetime | None = None
    uri: str = ""
    sha256: str = ""
    event: str = ""


@dataclass(frozen=True)
class InsertResult:
    inserted: int
    version: int


def rows_table(rows: Sequence[Row], model_id: str, dim: int) -> pa.Table:
    """Rows as an Arrow table of the store schema for `dim`, stamped with `model_id` and
    the time of the call: what every writer of a store table appends (the server's
    writer and the Ray backfill's fragment writers alike)."""
    now = dt.datetime.now(dt.timezone.utc)
    vectors = np.stack([np.asarray(r.vector, dtype=np.float32) for r in rows])
    if vectors.shape[1] != dim:
        raise InvalidInput(f"vectors have {vectors.shape[1]} dims, store expects {dim}")
    columns = {
        "id": [r.id for r in rows],
        "env": [r.env for r in rows],
        "label": [r.label for r in rows],
        "split": [r.split for r in rows],
        "timestamp": pa.array([r.timestamp for r in rows], TIMESTAMP),
        "uri": [r.uri for r in rows],
        "sha256": [r.sha256 for r in rows],
        "model_id": pa.repeat(pa.scalar(model_id, pa.string()), len(rows)),
        "ingested_at": pa.repeat(pa.scalar(now, TIMESTAMP), len(rows)),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
        "event": [r.event for r in rows],
    }
    return pa.table(columns, schema=make_schema(dim))


@dataclass(frozen=True)
class StoredIds:
    """Every id the store held at table `version` or later (read after it), ready for
    lookups: a holder that sees the version move past `version` brings them up to date
    (`EmbeddingStore.synced_ids`)."""

    ids: IdPositions
    version: int


class EmbeddingStore:
    """The store table of one encoder: insert (idempotent by id), read, count, optimize."""

    def __init__(self, db_dir: Path | str, model_id: str, dim: int,
                 storage_options: Mapping[str, str] | None = None):
        self.model_id = model_id
        self.dim = dim
        self._env_counts: tuple[int, dict[str, int]] | None = None
        #: where the acknowledged record lives (store_recovery.py): a local file, or an
        #: object beside the LanceDB folder on object storage
        self._record: LocalRecord | RemoteRecord
        if is_uri(db_dir):
            options = dict(storage_options or {})
            self._record = _remote_record(str(db_dir), model_id, options)
            self._table, self.recovery = _open_remote(str(db_dir), model_id, dim, options,
                                                      self._record)
        else:
            self._db = lancedb.connect(str(db_dir),
                                       read_consistency_interval=READ_CONSISTENCY)
            #: how a damaged table is served (None: it opened as it is): store_recovery.py
            self._table, self.recovery = open_table_at_readable(self._db, model_id, dim,
                                                                Path(db_dir))
            self._record = LocalRecord(record_path(Path(db_dir), table_name(model_id)))
        self._record_lock = threading.Lock()
        self._acknowledged: Acknowledged | None = None
        self._read_version()

    @property
    def problem(self) -> str:
        """What a client is told of a table opened damaged or below its acknowledged
        record ("" when it opened as it is)."""
        return self.recovery.problem if self.recovery is not None else ""

    @property
    def writable(self) -> bool:
        return self.recovery is None or self.recovery.writable

    def require_writable(self) -> None:
        """FailedPrecondition (what is missing, how to restore) while acknowledged rows
        are missing: the table is served read-only until an operator acts."""
        if not self.writable:
            raise FailedPrecondition(self.problem)

    def record_acknowledged(self, version: int) -> None:
        """Make `version` (just committed, about to be acknowledged) and the table's
        rows the durable acknowledged record (store_recovery.py); an older version than
        the one recorded is left."""
        with self._record_lock:
            if self._acknowledged is None:
                self._acknowledged = self._record.read()
            if self._acknowledged is not None and version <= self._acknowledged.version:
                return
            acknowledged = Acknowledged(int(version), self.count())
            self._record.write(acknowledged)
            self._acknowledged = acknowledged

    @property
    def version(self) -> int:
        """The table version this process reads: the newest it wrote, or found at its
        last `refresh` (READ_CONSISTENCY)."""
        return self._read_version()

    def _read_version(self) -> int:
        self._seen_version = int(self._table.version)
        return self._seen_version

    @property
    def seen_version(self) -> int:
        """The newest version this process has read or written, without a lookup: what
        a response's provenance reports (other processes' commits join it at the next
        refresh, as their rows join the index)."""
        return self._seen_version

    def count(self, row_filter: RowFilter = RowFilter()) -> int:
        return int(self._table.count_rows(where_clause(row_filter)))

    def insert(self, rows: Sequence[Row]) -> InsertResult:
        """Insert rows whose id is not stored yet; one table version per call (for writers
        that do not know the stored ids; the server's writer uses `append`)."""
        if not rows:
            return InsertResult(0, self.version)
        result = (self._table.merge_insert("id").when_not_matched_insert_all()
                  .execute(self.to_arrow(rows)))
        self._seen_version = int(result.version)
        return InsertResult(int(result.num_inserted_rows), self._seen_version)

    def append(self, table: pa.Table) -> int:
        """Append rows of the store schema whose ids the caller knows are new; returns
        the table version that holds them."""
        self._table.add(table)
        return self.version

    def to_arrow(self, rows: Sequence[Row]) -> pa.Table:
        """Rows as an Arrow table of this store's schema."""
        return rows_table(rows, self.model_id, self.dim)

    def ids(self) -> set[str]:
        """Every stored id (one read of the id column)."""
        return set(self.id_column().to_pylist())

    def id_column(self) -> pa.ChunkedArray:
        """Every stored id, as Arrow (no Python string per row)."""
        return self._table.search().select(["id"]).limit(None).to_arrow().column("id")

    def stored_ids(self) -> StoredIds:
        """Every stored id with the table version read just before them."""
        version = self.version
        return StoredIds(IdPositions(self.id_column()), version)

    def synced_ids(self, held: StoredIds) -> StoredIds:
        """`held` brought up to the table's latest version: the ids of the fragments the
        table has now and did not have at `held.version` are read and the new ones
        appended (rows committed since by any process; rows a compaction or a relabel
        rewrote are held already), so a holder never reads every id again as the table
        grows. Every id is read again only when `held.version` can no longer be read
        (its manifest cleaned up by a compaction's version clean-up)."""
        if self.writable:     # a pinned table stays at the version it reads
            self._table.checkout_latest()
        dataset = self._table.to_lance()
        if int(dataset.version) == held.version:
            return held
        try:
            before = {f.fragment_id for f in
                      dataset.checkout_version(held.version).get_fragments()}
        except OSError:                       # Lance: that version's manifest is gone
            return self.stored_ids()
        for fragment in dataset.get_fragments():
            if fragment.fragment_id not in before:
                held.ids.append_new(fragment.to_table(columns=["id"]).column("id"))
        self._seen_version = int(dataset.version)
        return StoredIds(held.ids, self._seen_version)

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        """The subset of `ids` already stored."""
        return set(self.read_ids(ids, with_vectors=False, columns=("id",)).column("id")
                   .to_pylist())

    def read(self, row_filter: RowFilter = RowFilter(), *, with_vectors: bool = True,
             columns: Sequence[str] | None = None, with_row_ids: bool = False) -> pa.Table:
        """Rows matching the filter as one Arrow table (`with_row_ids`: and `ROW_ID`)."""
        wanted = list(columns or METADATA_COLUMNS) + (["vector"] if with_vectors else [])
        query = self._table.search().select(wanted).with_row_id(with_row_ids).limit(None)
        where = where_clause(row_filter)
        if where:
            query = query.where(where)
        return query.to_arrow()

    def fragment_ids(self) -> frozenset[int]:
        """The data fragments of the table's newest version this process has read: rows
        appended, and rows rewritten by an update (a relabel) or a compaction, land in
        fragments that were not there before."""
        return frozenset(f.fragment_id for f in self._table.to_lance().get_fragments())

    def read_fragments(self, fragment_ids: Iterable[int], *,
                       with_row_ids: bool = False) -> pa.Table:
        """The rows of those fragments as they are now (deleted rows left out), with
        every column of the store schema (`with_row_ids`: and `ROW_ID`)."""
        wanted = set(fragment_ids)
        columns = [*METADATA_COLUMNS, "vector"]
        tables = [fragment.to_table(columns=columns, with_row_id=with_row_ids)
                  for fragment in self._table.to_lance().get_fragments()
                  if fragment.fragment_id in wanted]
        if not tables:
            empty = make_schema(self.dim).empty_table().select(columns)
            return (empty.append_column(ROW_ID, pa.array([], pa.uint64())) if with_row_ids
                    else empty)
        return pa.concat_tables(tables)

    def iter_batches(self, row_filter: RowFilter = RowFilter(), batch_size: int = 4096, *,
                     with_vectors: bool = True, with_row_ids: bool = False
                     ) -> Iterator[pa.RecordBatch]:
        """Stream matching rows in record batches of exactly `batch_size` rows (the last
        one shorter), read lazily: memory holds about one batch, not the result."""
        wanted = list(METADATA_COLUMNS) + (["vector"] if with_vectors else [])
        query = self._table.search().select(wanted).with_row_id(with_row_ids).limit(None)
        where = where_clause(row_filter)
        if where:
            query = query.where(where)
        pending: list[pa.RecordBatch] = []
        held = 0
        for batch in query.to_batches(batch_size):
            pending.append(batch)
            held += batch.num_rows
            while held >= batch_size:
                table = pa.Table.from_batches(pending)
                yield table.slice(0, batch_size).combine_chunks().to_batches()[0]
                rest = table.slice(batch_size)
                pending, held = rest.to_batches(), rest.num_rows
        if held:
            yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]

    def vectors_at(self, positions: np.ndarray) -> np.ndarray:
        """The vectors of the rows at `positions` of the table (0 to `count() - 1`, in the
        order `iter_batches` reads them)."""
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) == 0:
            return np.zeros((0, self.dim), np.float32)
        return vectors_of(self._table.to_lance().take(positions, columns=["vector"]))

    def read_ids(self, ids: Sequence[str], *, with_vectors: bool = True,
                 columns: Sequence[str] | None = None, with_row_ids: bool = False
                 ) -> pa.Table:
        """Rows with the given ids (any order), matched in Arrow against the id column:
        no SQL text, whatever the number of ids (`with_row_ids`: and `ROW_ID`)."""
        wanted = list(columns or METADATA_COLUMNS) + (["vector"] if with_vectors else [])
        if not ids:
            empty = make_schema(self.dim).empty_table().select(wanted)
            return (empty.append_column(ROW_ID, pa.array([], pa.uint64())) if with_row_ids
                    else empty)
        if with_row_ids:
            wanted.append(ROW_ID)
        dataset = self._table.to_lance()
        stored = dataset.to_table(columns=["id"]).column("id")
        positions = pa.compute.indices_nonzero(
            pa.compute.is_in(stored, value_set=pa.array(list(ids), pa.string())))
        return dataset.take(positions.to_numpy(), columns=wanted)

    def vectors_for(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The stored vectors of `ids` (each stored), in the order of `ids`."""
        table = self.read_ids(ids.to_pylist(), columns=("id",))
        where = pa.compute.index_in(ids, value_set=table.column("id").combine_chunks())
        if where.null_count:
            raise KeyError(f"{where.null_count} of {len(ids)} ids are not stored")
        return vectors_of(table.take(where))

    @functools.cached_property
    def has_stable_row_ids(self) -> bool:
        """True when the table's row ids never change (set when it was created)."""
        return bool(getattr(self._table.to_lance(), "has_stable_row_ids", False))

    def vectors_by_row_id(self, row_ids: np.ndarray) -> np.ndarray:
        """The stored vectors of the rows with these (stable) row ids, in their order;
        a row id may repeat. KeyError when one is not in the table."""
        return vectors_of(self.rows_by_row_id(row_ids, ("vector",)))

    def rows_by_row_id(self, row_ids: np.ndarray, columns: Sequence[str]) -> pa.Table:
        """`columns` of the rows with these (stable) row ids, in their order; a row id
        may repeat. KeyError when one is not in the table."""
        row_ids = np.asarray(row_ids, dtype=np.int64)
        wanted = np.unique(row_ids)
        if len(wanted) == 0:
            return self._table.schema.empty_table().select(list(columns))
        table = (self._table.take_row_ids(wanted.tolist()).select(list(columns))
                 .with_row_id().to_arrow())
        found = table.column(ROW_ID).to_numpy().astype(np.int64)
        if len(found) < len(wanted):
            raise KeyError(f"{len(wanted) - len(found)} of {len(wanted)} row ids are not "
                           "in the table")
        order = np.argsort(found)
        where = np.searchsorted(found, row_ids, sorter=order).clip(0, len(found) - 1)
        at = order[where]
        if not np.array_equal(found[at], row_ids):
            raise KeyError("row ids that are not in the table")
        return table.select(list(columns)).take(pa.array(at))

    def row_ids_of(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The row id of each of `ids` (each stored), newest fragments searched first:
        the rows a writer has just appended are found in the first one or two."""
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        out = np.full(len(ids), -1, dtype=np.int64)
        for fragment in reversed(self._table.to_lance().get_fragments()):
            part = fragment.to_table(columns=["id"], with_row_id=True)
            where = pa.compute.index_in(ids, value_set=part.column("id").combine_chunks())
            hit = where.is_valid().to_numpy(zero_copy_only=False)
            if hit.any():
                row_ids = part.column(ROW_ID).to_numpy().astype(np.int64)
                out[hit] = row_ids[where.drop_null().to_numpy()]
            if (out >= 0).all():
                return out
        raise KeyError(f"{int((out < 0).sum())} of {len(ids)} ids are not stored")

    def env_counts(self) -> dict[str, int]:
        """Rows per environment (recounted only when the table version changed)."""
        version = self.version
        if self._env_counts is None or self._env_counts[0] != version:
            envs = self._table.search().select(["env"]).limit(None).to_arrow().column("env")
            counts = pa.compute.value_counts(envs).to_pylist()
            self._env_counts = (version, {str(c["values"] or ""): int(c["counts"])
                                          for c in counts})
        return dict(self._env_counts[1])

    def refresh(self) -> bool:
        """Pick up versions committed by other writers; True when the version is newer
        than the one this process saw last."""
        before = self._seen_version
        if not self.writable:       # pinned at the readable version until an operator acts
            return False
        self._table.checkout_latest()
        return self._read_version() != before

    def set_label(self, ids: Sequence[str], label: str) -> list[str]:
        """Set the label of the stored rows among `ids`; returns the ids updated."""
        self.require_writable()
        stored = self.existing_ids(ids)
        wanted = sorted(stored)
        for start in range(0, len(wanted), 1000):
            where = "id IN (" + ", ".join(_quote(i) for i in wanted[start:start + 1000]) + ")"
            self._table.update(where=where, values={"label": label})
        version = self._read_version()
        # a relabel is acknowledged too
        if wanted and (self._acknowledged is not None or self._record.exists()):
            self.record_acknowledged(version)
        return [i for i in dict.fromkeys(ids) if i in stored]

    def optimize(self, keep_versions_for: dt.timedelta = dt.timedelta(hours=1)) -> None:
        """Compact small fragments and drop versions older than `keep_versions_for`."""
        self._table.optimize(cleanup_older_than=keep_versions_for)
        self._read_version()


def _remote_record(uri: str, model_id: str, options: dict[str, str]) -> RemoteRecord:
    """The acknowledged record of `model_id`'s table in the LanceDB folder `uri`: an
    object in the folder above it (`<data dir>/lancedb.acknowledged/<table>.json`)."""
    parent, _, _ = uri.rstrip("/").rpartition("/")
    return RemoteRecord(RemoteDir(parent, options), table_name(model_id))


def _open_remote(uri: str, model_id: str, dim: int, options: dict[str, str],
                 record: RemoteRecord) -> tuple[Any, Recovery | None]:
    """`model_id`'s table in the LanceDB folder `uri` on object storage, checked against
    its acknowledged `record`; an unreachable endpoint, refused credentials or a missing
    bucket is one FailedPrecondition whose text holds no secret."""
    try:
        db = lancedb.connect(uri, storage_options=options,
                             read_consistency_interval=READ_CONSISTENCY)
        return open_table_at_readable(db, model_id, dim, record=record)
    except EnvadError:
        raise
    except Exception as exc:  # lance reports storage failures as OSError, ValueError, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FailedPrecondition(redact(f"cannot open the store at {uri}: {first}",
                                        options)) from None


def vectors_of(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    """The vector column of an Arrow table or record batch as a float32 [n, d] array."""
    column = table.column("vector")
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if len(column) == 0:
        return np.zeros((0, column.type.list_size), dtype=np.float32)
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.reshape(len(column), column.type.list_size),
                                dtype=np.float32)
