"""The index mirror saved next to the store, so a restart loads it instead of building it.

`<data_dir>/index/<model>/` holds three files:

- `manifest.json`: format, model id, dim, kind (flat, ivf, ivf-sq8 or ivf-sq4: ann.KINDS), rows
  covered, rows the IVF lists were trained on, nprobe, the store table version at save,
  and the name, size and CRC-32 of each data file;
- `index-<n>.faiss`: the FAISS index (`faiss.write_index`);
- `ids-<n>.arrow`: the store id at each index position (Arrow IPC).

Saving writes the data files under fresh names, then replaces the manifest atomically
(temp file, fsync, rename), then deletes the files of the previous save: a kill at any
point leaves the old save or the new one, complete (files of a save that did not finish
are deleted by the next load or save). Loading trusts nothing: a missing,
foreign (other model or dim), truncated or corrupt file, a saved id the store no longer
holds, or a saved vector that differs from the store's is a rebuild from the store, with
one log line saying why; it never stops the server. A saved index that covers fewer rows
than the store is loaded and only the rows stored after it are read and added (and saved
again at once only when they are many: `due_for_saving`).

Kinds: a saved index of a smaller kind than the thresholds call for at the store's row
count (the store crossed `compressed_threshold` since, or the setting was lowered) is
loaded and switched at once (flat and IVF hold the exact vectors), then saved. A saved
compressed index where the thresholds call for a smaller kind is rebuilt from the store,
since its codes cannot give back the vectors. A coded index's saved rows are
compared with the store's vectors as the index encodes them (`ann.encoded`), within
`ann.COMPRESSED_TOLERANCE`: a row outside the range the codes were trained on decodes far
from its vector, but as far as its own encoding does. The row ids a re-ranking index
(`ivf-sq4`) reads the store by are not saved: they are read with the store's metadata at
load, and the spot checks read the same rows by row id too.

Loading at a million rows reads 2 GB of saved index and a million rows of store metadata:
the files are checked and read in a thread of their own while the metadata is read
(checksums and FAISS's reader run outside the GIL), and FAISS reads a file only after
its check passed. The saved ids are usually the store's first rows in the store's order
(rows are appended; a relabel moves a row to the table's end), which a single
comparison confirms; otherwise each is looked up by id. The store's ids read on the way
go to the writer (`Opened.stored_ids`), which would otherwise read them again; when the
index holds every one of them (the usual case) the writer gets a copy of the index's
hashed ids, so that each id is hashed once at a start.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from envad.server import ann
from envad.server.config import DEFAULT_COMPRESSED_THRESHOLD, DEFAULT_IVF_THRESHOLD
from envad.server.durable import fsync_path
from envad.server.freed_memory import return_freed_memory
from envad.server.id_positions import IdPositions
from envad.server.index import Snapshot, VectorIndex, held_columns
from envad.server.store import EmbeddingStore, StoredIds, vectors_of
from envad.server.threads import every_core_for_bulk_work

log = logging.getLogger(__name__)

FORMAT = 1
MANIFEST = "manifest.json"
#: saved rows read back from the store and compared with the index at load
SPOT_CHECKS = 16
#: save again once the rows added since the last save reach this share of it ...
SAVE_GROWTH = 0.25
#: ... and at least this many rows
SAVE_MIN_ROWS = 10_000
_CHUNK = 1 << 24
#: rows read from the store at a time when the index is built from it
BUILD_BATCH_ROWS = 65_536
_SAVING = threading.Lock()


class StaleIndex(Exception):
    """A saved index that must not be used (the message says why)."""

    def __init__(self, reason: str, *, nothing_saved: bool = False):
        super().__init__(reason)
        self.nothing_saved = nothing_saved     # no index was ever saved: not a fault


@dataclass(frozen=True)
class Opened:
    """An index opened for a store: how it was obtained, for the log and the tests."""

    index: VectorIndex
    loaded: bool            # True: read from the saved files; False: built from the store
    added: int              # rows read from the store and added to it
    saved_rows: int         # rows the saved index covers now
    reason: str = ""        # why a saved index was not used ("" when it was)
    stored_ids: StoredIds | None = None   # the store's ids read on the way (the writer's)


def save_index(directory: Path, index: VectorIndex, *, model_id: str,
               table_version: int) -> int:
    """Write the index atomically into `directory`; returns the rows saved. Saves of one
    process run one at a time (one save must not delete the files of another)."""
    with _SAVING:
        return _save(directory, index, model_id, table_version)


def _save(directory: Path, index: VectorIndex, model_id: str, table_version: int) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    generation = time.time_ns()
    index_file, ids_file = f"index-{generation}.faiss", f"ids-{generation}.arrow"
    with index.snapshot() as snap:
        faiss.write_index(snap.faiss_index, str(directory / index_file))
        nprobe = int(getattr(snap.faiss_index, "nprobe", 0))
        rows = int(snap.faiss_index.ntotal)
        dim = int(snap.faiss_index.d)
        ids = snap.ids
        kind, trained_rows = snap.kind, snap.trained_rows
    with pa.OSFile(str(directory / ids_file), "wb") as sink, \
            pa.ipc.new_file(sink, pa.schema([("id", pa.string())])) as writer:
        writer.write_table(pa.table({"id": ids}))
    manifest = {"format": FORMAT, "model_id": model_id, "dim": dim, "kind": kind,
                "rows": rows, "trained_rows": trained_rows, "nprobe": nprobe,
                "table_version": table_version,
                "files": {name: _describe(directory / name) for name in (index_file, ids_file)},
                "index_file": index_file, "ids_file": ids_file}
    for name in (index_file, ids_file):
        fsync_path(directory / name)
    staging = directory / f"{MANIFEST}.tmp"
    staging.write_text(json.dumps(manifest, indent=1))
    fsync_path(staging)
    staging.replace(directory / MANIFEST)
    fsync_path(directory)
    _remove_unlisted(directory, {index_file, ids_file, MANIFEST})
    return rows


def open_index(directory: Path, store: EmbeddingStore, *,
               ivf_threshold: int = DEFAULT_IVF_THRESHOLD,
               compressed_threshold: int = DEFAULT_COMPRESSED_THRESHOLD,
               rerank: bool = True) -> Opened:
    """The index of `store`: the saved one plus the rows stored since, or, when there is
    no usable saved index, one built from the whole table (saved right away). The
    compressed kind re-ranks against the store when its row ids are stable (`rerank`
    False: 8-bit codes whatever the store, for the benchmarks' comparison)."""
    started = time.monotonic()
    empty = VectorIndex(store.dim, ivf_threshold=ivf_threshold,
                        compressed_threshold=compressed_threshold,
                        stored=store if rerank and store.has_stable_row_ids else None)
    row_ids = empty.stored is not None
    try:
        index, added, stored_ids, switched = _load(directory, store, empty)
    except StaleIndex as exc:
        reason = str(exc)
        log.log(logging.INFO if exc.nothing_saved else logging.WARNING,
                "index of %s not loaded, building it from the store: %s", store.model_id,
                reason)
        index = empty
        with every_core_for_bulk_work():      # k-means and list assignment of every row
            added = index.rebuild(store.iter_batches(batch_size=BUILD_BATCH_ROWS,
                                                     with_row_ids=row_ids),
                                  store.count(), store.vectors_at)
        saved = _save_quietly(directory, index, store)
        return_freed_memory()
        log.info("index of %s built from the store: %d rows (%s), %.1f s", store.model_id,
                 len(index), index.kind, time.monotonic() - started)
        return Opened(index, loaded=False, added=added, saved_rows=saved, reason=reason)
    saved = len(index) - added
    if switched or due_for_saving(len(index), saved):
        saved = _save_quietly(directory, index, store) or saved
    return_freed_memory()
    log.info("index of %s loaded: %d rows (%s), %d added from the store, %.1f s",
             store.model_id, len(index), index.kind, added, time.monotonic() - started)
    return Opened(index, loaded=True, added=added, saved_rows=saved, stored_ids=stored_ids)


def due_for_saving(rows: int, saved_rows: int) -> bool:
    """True once the rows added since the last save are worth writing again."""
    unsaved = rows - saved_rows
    return unsaved > 0 and unsaved >= max(SAVE_MIN_ROWS, SAVE_GROWTH * saved_rows)


def _save_quietly(directory: Path, index: VectorIndex, store: EmbeddingStore) -> int:
    """Save, logging instead of raising (a save that fails costs only a later rebuild);
    returns the rows saved, 0 when the save failed."""
    try:
        return save_index(directory, index, model_id=store.model_id,
                          table_version=store.version)
    except Exception:
        log.exception("saving the index of %s to %s failed", store.model_id, directory)
        return 0


def _load(directory: Path, store: EmbeddingStore, settings: VectorIndex
          ) -> tuple[VectorIndex, int, StoredIds, bool]:
    """The saved index plus the rows stored since, the rows added, the store's ids, and
    whether its kind changed on the way (`settings`: an empty index with the thresholds)."""
    manifest = _manifest(directory, store)
    row_ids = settings.stored is not None       # the index reads the store by row id
    _remove_unlisted(directory, {manifest["index_file"], manifest["ids_file"], MANIFEST})
    # the saved files are checked and read (zlib and FAISS, outside the GIL) while the
    # store's metadata is read: at a million rows each takes seconds
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-load") as pool:
        reading = pool.submit(_read_saved, directory, manifest)
        # the version first: a commit between the two makes the writer read the ids again
        version = store.version
        metadata = store.read(with_vectors=False, columns=held_columns(manifest["kind"]),
                              with_row_ids=row_ids)
        faiss_index, ids = reading.result()
    rows = manifest["rows"]
    if faiss_index.ntotal != rows or len(ids) != rows or faiss_index.d != store.dim:
        raise StaleIndex(f"saved index holds {faiss_index.ntotal} rows of {faiss_index.d} "
                         f"dims and {len(ids)} ids; the manifest says {rows} of {store.dim}")
    if manifest["kind"] != ann.FLAT:
        faiss_index.nprobe = manifest["nprobe"]  # type: ignore[attr-defined]
    stored_ids = metadata.column("id").combine_chunks()
    _check_kind(manifest["kind"], settings.wanted_kind(len(stored_ids)),
                reranked=row_ids)
    where, missing = _match_saved_rows(ids, stored_ids)
    saved = Snapshot(faiss_index, ids, manifest["kind"], manifest["trained_rows"])
    in_index = metadata.slice(0, len(ids)) if where is None else metadata.take(where)
    index = VectorIndex.restored(saved, in_index, ivf_threshold=settings.ivf_threshold,
                                 compressed_threshold=settings.compressed_threshold,
                                 stored=settings.stored)
    _spot_check(index, ids, store)
    added = (index.add_table(store.read_ids(missing.to_pylist(),
                                            with_row_ids=row_ids))
             if len(missing) else 0)
    index.settle()              # thresholds lowered since the save: the kind they call for
    # the index holds distinct store ids of this version: as many means the same ones
    held = index.id_positions() if len(index) == len(stored_ids) else IdPositions(stored_ids)
    return index, added, StoredIds(held, version), index.kind != manifest["kind"]


def _check_kind(saved: str, wanted: str, *, reranked: bool) -> None:
    """A saved coded index cannot become a smaller kind (its codes are not the
    vectors): the thresholds calling for one mean a rebuild, as does a re-ranking one
    for a store whose row ids are not stable (`reranked` False)."""
    if saved == ann.RERANKED and not reranked:
        raise StaleIndex(f"saved index is {saved}, which reads the store by stable row "
                         "ids, and the store table has none: rebuilt")
    if saved in ann.CODED and ann.KINDS.index(wanted) < ann.KINDS.index(ann.COMPRESSED):
        raise StaleIndex(f"saved index is {saved} but the thresholds call for {wanted} at "
                         "the store's rows (compressed_threshold raised): rebuilt to hold "
                         "the vectors")


def _read_saved(directory: Path, manifest: dict) -> tuple[faiss.Index, pa.Array]:
    """The saved FAISS index and ids, each file checked against the manifest first."""
    for name in (manifest["index_file"], manifest["ids_file"]):
        _check_file(directory / name, manifest["files"].get(name, {}))
    try:
        faiss_index = faiss.read_index(str(directory / manifest["index_file"]))
        with pa.OSFile(str(directory / manifest["ids_file"]), "rb") as source:
            ids = pa.ipc.open_file(source).read_all().column("id").combine_chunks()
    except Exception as exc:   # faiss raises RuntimeError, Arrow ArrowInvalid
        raise StaleIndex(f"saved index unreadable: {exc}") from exc
    return faiss_index, ids


def _match_saved_rows(ids: pa.Array, stored_ids: pa.Array) -> tuple[pa.Array | None, pa.Array]:
    """The store row of each saved id (None: rows 0..n-1, the usual case, as the index
    was saved from the store in its order and rows are appended), and the stored ids
    the saved index lacks."""
    if len(ids) <= len(stored_ids) and ids.equals(stored_ids.slice(0, len(ids))):
        return None, stored_ids.slice(len(ids))
    where = pc.index_in(ids, value_set=stored_ids)
    if where.null_count:
        raise StaleIndex(f"{where.null_count} saved rows are not in the store table "
                         "(another store, or the table was replaced)")
    lacking = np.ones(len(stored_ids), dtype=bool)
    lacking[where.to_numpy()] = False
    return where, stored_ids.filter(pa.array(lacking))


def _manifest(directory: Path, store: EmbeddingStore) -> dict:
    path = directory / MANIFEST
    if not path.is_file():
        raise StaleIndex(f"no saved index in {directory}", nothing_saved=True)
    try:
        manifest = json.loads(path.read_text())
        checks = (manifest["format"] == FORMAT, manifest["kind"] in ann.KINDS,
                  isinstance(manifest["files"], dict), int(manifest["rows"]) >= 0)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StaleIndex(f"unreadable manifest {path}: {exc}") from exc
    if not all(checks):
        raise StaleIndex(f"manifest {path} is not a format-{FORMAT} index manifest")
    if manifest["model_id"] != store.model_id or manifest["dim"] != store.dim:
        raise StaleIndex(f"saved index is for model {manifest['model_id']!r} "
                         f"({manifest['dim']} dims), not {store.model_id!r} ({store.dim})")
    return manifest


def _check_file(path: Path, expected: dict) -> None:
    if not path.is_file():
        raise StaleIndex(f"{path.name} is missing")
    described = _describe(path)
    if described["bytes"] != expected.get("bytes"):
        raise StaleIndex(f"{path.name} has {described['bytes']} bytes, the manifest says "
                         f"{expected.get('bytes')} (truncated or replaced)")
    if described["crc32"] != expected.get("crc32"):
        raise StaleIndex(f"{path.name} does not match its checksum (corrupt)")


def _spot_check(index: VectorIndex, ids: pa.Array, store: EmbeddingStore) -> None:
    """Compare a few saved vectors with the store's rows of the same ids."""
    rows = len(ids)
    if not rows:
        return
    positions = np.unique(np.linspace(0, rows - 1, num=min(SPOT_CHECKS, rows)).astype(np.int64))
    wanted = ids.take(pa.array(positions)).to_pylist()
    stored = store.read_ids(wanted, columns=("id",))
    by_id = dict(zip(stored.column("id").to_pylist(), vectors_of(stored), strict=True))
    saved = index.vectors_at(positions)
    vectors = np.stack([by_id[row_id] for row_id in wanted])
    if index.stored is not None and not np.array_equal(
            index.stored.vectors_by_row_id(index.row_ids_at(positions)), vectors):
        raise StaleIndex("the store's row ids no longer name the saved rows")
    expected = index.encoded(vectors)
    decoded = index.kind in ann.CODED
    for row_id, vector, own, norm in zip(wanted, saved, expected,
                                         np.linalg.norm(vectors, axis=1), strict=True):
        if decoded:
            same = np.linalg.norm(own - vector) <= ann.COMPRESSED_TOLERANCE * norm
        else:
            same = np.array_equal(own, vector)
        if not same:
            raise StaleIndex(f"saved vector of row {row_id!r} differs from the store's")


def _describe(path: Path) -> dict:
    crc = 0
    chunk = bytearray(_CHUNK)               # one buffer read into again and again
    with open(path, "rb", buffering=0) as source:
        while size := source.readinto(chunk):
            crc = zlib.crc32(memoryview(chunk)[:size], crc)
    return {"bytes": path.stat().st_size, "crc32": crc}


def _remove_unlisted(directory: Path, keep: set[str]) -> None:
    """Delete data files of earlier saves (and temp files of interrupted ones)."""
    for path in directory.iterdir():
        if path.name not in keep and path.is_file():
            try:
                path.unlink()
            except OSError:
                log.warning("cannot remove old index file %s", path)
