"""Everything the server holds for one encoder: store table, index, writer, batcher, bundle.

The batcher embeds every request of a micro-batch in one call, and scores the Score
requests among them together (scoring.BatchScorer).

A request takes the active space once and uses it to the end, so activating another
encoder never disturbs requests in flight. Spaces stay open until the server stops.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

from envad.errors import FailedPrecondition
from envad.server.batching import MicroBatcher
from envad.server.config import ServerConfig
from envad.server.detectors.bundle import DetectorBundle
from envad.server.detectors.persistence import MANIFEST, BundleStore, file_name_for
from envad.server.detectors.registry import unchecked_estimators
from envad.server.encoder import OnnxEncoder
from envad.server.env_stats import JOURNAL_SUFFIX, EnvStatistics
from envad.server.index_files import due_for_saving, open_index, save_index
from envad.server.remote_dir import RemoteDir
from envad.server.scoring import BatchScorer
from envad.server.shared_index import download_saved_index, upload_saved_index
from envad.server.store import EmbeddingStore, Row, vectors_of
from envad.server.writer import StoreWriter, without_paths

log = logging.getLogger(__name__)
#: a new bundle's score statistics start from at most this many stored rows a camera
SEED_ROWS_PER_CAMERA = 4096
SEED_BATCH_ROWS = 4096


def bind_weights(data_dir: Path, model_id: str, sha256: str,
                 remote: RemoteDir | None = None, *, writes: bool = True) -> None:
    """Bind `model_id`'s store table and detector bundles to the encoder file's sha256.

    Embeddings (and detectors fitted on them) of other weights are not comparable, so a
    file that changed under the same id is refused (FailedPrecondition naming both
    hashes) instead of being served with the old table and bundle. The first file seen
    for an id binds it.
    """
    binding = Path(data_dir) / "weights" / f"{file_name_for(model_id)}.sha256"
    remote_name = f"weights/{binding.name}"
    if remote is not None and not remote.pull_file(remote_name, binding):
        binding.unlink(missing_ok=True)     # the remote holds the binding, the cache follows
    if binding.is_file():
        bound = binding.read_text().strip()
        if bound and bound != sha256:
            raise FailedPrecondition(
                f"model {model_id!r} now has weights sha256 {sha256[:12]}, but its store "
                f"table and detectors were built with {bound[:12]}: give the new weights "
                "their own model id (envad export --model-id), or restore the old file")
        return
    binding.parent.mkdir(parents=True, exist_ok=True)
    staging = binding.with_suffix(".tmp")
    staging.write_text(sha256)
    staging.replace(binding)
    if remote is not None and writes:
        remote.push_file(binding, remote_name)


def _active_bundle(bundles: BundleStore, model_id: str) -> tuple[DetectorBundle | None, str]:
    """The encoder's active bundle, or (None, why) when its files cannot be loaded: the
    store and every other RPC keep working, and a Fit replaces the bundle."""
    try:
        return bundles.active(model_id), ""
    except Exception as exc:     # a damaged manifest, pointer or detector file
        damaged = _damaged_bundle_file(bundles, model_id, exc)
        problem = (f"the active detector bundle of {model_id!r} cannot be loaded "
                   f"({damaged}: {without_paths(str(exc))})")
        log.error("%s; the store serves on, Fit replaces the bundle (files in %s)",
                  problem, bundles.root)
        return None, problem


def _damaged_bundle_file(bundles: BundleStore, model_id: str, exc: Exception) -> str:
    """The bundle file `exc` came from, relative to the data dir (a client may read it):
    the manifest or the active pointer when it does not parse, else the bundle's folder
    (the error names the file in it)."""
    pointer = f"bundles/active/{file_name_for(model_id)}.json"
    try:
        bundle_id = bundles.active_id(model_id)
    except Exception:   # the active pointer itself does not read
        return pointer
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError, KeyError)):
        return f"bundles/{bundle_id}/{MANIFEST}"
    return f"bundles/{bundle_id}/"


class ModelSpace:
    """Store, FAISS mirror, single writer, micro-batcher and detector bundle of an encoder."""

    def __init__(self, encoder: OnnxEncoder, config: ServerConfig, bundles: BundleStore,
                 metrics=None, *, remote: RemoteDir | None = None, writes: bool = True):
        self.encoder = encoder
        #: False on a reader: it uploads nothing and follows the writer (follow_writer)
        self.writes = writes
        self._bundles = bundles
        self.model_id = encoder.meta.model_id
        self.store = EmbeddingStore(config.lancedb_dir, self.model_id, encoder.dim,
                                    config.storage_options)
        bind_weights(config.local_dir, self.model_id, encoder.meta.sha256, remote,
                     writes=writes)
        self.index_dir = config.index_dir / file_name_for(self.model_id)
        #: the saved index on object storage (None: local only): shared_index.py
        self._remote_index = (remote.child("index", file_name_for(self.model_id))
                              if remote is not None else None)
        self._download_index()
        # before the index reads the table: a fragment committed in between is read
        # again at the first refresh, whose add skips the rows already indexed
        self._fragments = self.store.fragment_ids()
        opened = open_index(self.index_dir, self.store, ivf_threshold=config.ivf_threshold,
                            compressed_threshold=config.compressed_threshold)
        self.index, self._saved_rows = opened.index, opened.saved_rows
        self._metrics = metrics
        self.writer = StoreWriter(self.store, self.index, optimize_every=config.optimize_every,
                                  on_commit=self._committed, stored_ids=opened.stored_ids)
        self.bundle, self.bundle_problem = _active_bundle(bundles, self.model_id)
        #: a reader's table version whose rows and labels the index holds (refresh)
        self._indexed_version = self.store.seen_version
        self._stats_stem = f"{file_name_for(self.model_id)}-{encoder.meta.sha256[:12]}"
        self._stats_dir = config.camera_stats_dir
        #: snapshots of the statistics on object storage (None: local files only)
        self._remote_stats = remote.child("camera_stats") if remote is not None else None
        self._pushed: dict[str, int] = {}   # statistics file -> its `changes` last uploaded
        self._followed: dict[str, str] = {}  # a reader's statistics file -> upload token
        self._pulled: set[str] = set()           # statistics files downloaded at open
        self.camera_stats = self._opened(EnvStatistics(
            self._cached_stats(f"{self._stats_stem}.npz"), encoder.dim))
        self._score_stats: dict[str, EnvStatistics] = {}
        self._score_stats_lock = threading.Lock()
        # the Score stage: the batcher runs it once per micro-batch, on the embeddings of
        # every Score request in it (stored ones, for Score with reuse_stored, included)
        self.scorer = BatchScorer(self.index, self.camera_stats, self.score_statistics)
        self.batcher = MicroBatcher(encoder.embed, max_batch=config.max_batch,
                                    max_wait_s=config.max_wait_ms / 1000.0,
                                    on_batch=self._batched, name=f"batcher-{self.model_id}",
                                    stage=self.scorer)
        self._refresh_lock = threading.Lock()
        self._upload_index()
        log.info("model space %s ready: %d rows indexed, bundle %s", self.model_id,
                 len(self.index), getattr(self.bundle, "bundle_id", None))

    def score_statistics(self, bundle: DetectorBundle) -> EnvStatistics | None:
        """The per-camera score statistics of `bundle` (kept durable next to the camera
        statistics, one file per bundle: its scores' scale), or None when it does not
        adapt scores to cameras. A bundle met for the first time starts from the
        cameras' stored rows (`_seed_score_statistics`)."""
        if not bundle.score_adaptation.enabled:
            return None
        with self._score_stats_lock:
            stats = self._score_stats.get(bundle.bundle_id)
            if stats is None:
                path = self._cached_stats(
                    f"{self._stats_stem}-scores-{bundle.bundle_id}.npz")
                fresh = not path.is_file()
                stats = self._opened(bundle.new_score_statistics(path))
                if fresh:
                    self._seed_score_statistics(bundle, stats)
                # each keeps its journal open: only the newest bundle's stays open (an
                # older bundle's reopens its file if a late batch still scores with it)
                for older in self._score_stats.values():
                    older.close()
                self._score_stats[bundle.bundle_id] = stats
            return stats

    def _seed_score_statistics(self, bundle: DetectorBundle, stats: EnvStatistics) -> None:
        """A new bundle's score statistics from each camera's stored rows, in table order
        (at most SEED_ROWS_PER_CAMERA a camera), scored as Score scores them (fit rows
        without their own group); written as one snapshot."""
        per_camera = min(SEED_ROWS_PER_CAMERA,
                         bundle.score_adaptation.rows_per_camera or SEED_ROWS_PER_CAMERA)
        wanted = {env: per_camera for env in self.store.env_counts() if env}
        if not wanted:
            stats.snapshot()
            return
        started, seen = time.monotonic(), 0
        for batch in self.store.iter_batches(batch_size=SEED_BATCH_ROWS):
            envs = np.asarray(batch.column("env").to_pylist(), dtype=object).astype(str)
            take = np.zeros(len(envs), dtype=bool)
            for env in np.unique(envs):
                left = wanted.get(str(env), 0)
                if left > 0:
                    rows = np.flatnonzero(envs == env)[:left]
                    take[rows] = True
                    wanted[str(env)] = left - len(rows)
            if take.any():
                ids = np.asarray(batch.column("id").to_pylist(), dtype=object)[take]
                vectors = vectors_of(batch)[take]
                bundle.observe(vectors, envs[take], self.camera_stats.get, stats, ids)
                seen += int(take.sum())
            if not any(left > 0 for left in wanted.values()):
                break
        stats.snapshot()
        log.info("score statistics of bundle %s started from %d stored rows, %.1f s",
                 bundle.bundle_id, seen, time.monotonic() - started)

    def _cached_stats(self, name: str) -> Path:
        """The local file of statistics `name`; on object storage, its snapshot there is
        downloaded first when the cache holds neither the file nor its journal."""
        path = self._stats_dir / name
        journal = path.with_name(path.name + JOURNAL_SUFFIX)
        if self._remote_stats is not None and not path.is_file() and not journal.is_file():
            if self._remote_stats.pull_file(name, path):
                self._pulled.add(name)
        return path

    def _opened(self, stats: EnvStatistics) -> EnvStatistics:
        """`stats` as opened. Downloaded just now, or empty, they hold nothing to upload
        until they change (an empty cache never overwrites the uploaded snapshot); read
        from the cache, the next refresh uploads them (updates a crash left unsent)."""
        if stats.path is not None and (stats.path.name in self._pulled or stats.seq == 0):
            self._pushed[stats.path.name] = 0
        return stats

    def push_statistics(self) -> None:
        """On object storage, snapshot the camera and score statistics that changed since
        they were last uploaded (or downloaded) and upload them: at each refresh (a
        kill -9 loses at most one refresh interval of them) and at shutdown."""
        if self._remote_stats is None or not self.writes:
            return
        with self._score_stats_lock:
            held = [self.camera_stats, *self._score_stats.values()]
        pushed = []
        for stats in held:
            if stats.path is None:
                continue
            changes = stats.changes
            if self._pushed.get(stats.path.name) == changes:
                continue
            stats.snapshot()
            self._remote_stats.push_file(stats.path, stats.path.name)
            self._pushed[stats.path.name] = changes
            pushed.append(stats.path.name)
        if pushed:     # after the files: a reader that sees a new token finds its file
            tokens = self._upload_tokens()
            tokens.update({name: uuid.uuid4().hex for name in pushed})
            self._remote_stats.write_bytes(self._tokens_name, json.dumps(tokens).encode())

    @property
    def _tokens_name(self) -> str:
        """The object naming an upload token per statistics file of this encoder: a
        reader downloads a file again when its token changed."""
        return f"{self._stats_stem}.uploads.json"

    def _upload_tokens(self) -> dict[str, str]:
        assert self._remote_stats is not None
        data = self._remote_stats.read_bytes(self._tokens_name)
        try:
            tokens = json.loads(data) if data else {}
        except ValueError:
            tokens = {}
        return tokens if isinstance(tokens, dict) else {}

    def follow_writer(self) -> None:
        """A reader, at each refresh: take the bundle the writer activated, and the
        camera and score statistics it uploaded since the last refresh. A new bundle is
        built (its statistics included) before it replaces the old one: a Score in
        flight finishes on the one it took."""
        if self.writes or self._remote_stats is None:
            return
        wanted = self._bundles.active_id(self.model_id)
        if wanted is not None and wanted != getattr(self.bundle, "bundle_id", None):
            bundle, problem = _active_bundle(self._bundles, self.model_id)
            if bundle is not None:
                self.prepare(bundle)
                self.bundle, self.bundle_problem = bundle, ""
                log.info("following the writer: bundle %s of %s", bundle.bundle_id,
                         self.model_id)
            elif self.bundle is None:
                self.bundle_problem = problem
        with self._score_stats_lock:
            held = {s.path.name: s for s in [self.camera_stats, *self._score_stats.values()]
                    if s.path is not None}
        for name, token in self._upload_tokens().items():
            stats = held.get(name)
            if stats is None or self._followed.get(name) == token:
                continue
            assert stats.path is not None
            if self._remote_stats.pull_file(name, stats.path):
                stats.reload()
                self._followed[name] = token

    def prepare(self, bundle: DetectorBundle) -> None:
        """Build what `bundle` scores with (its score statistics) before it is activated,
        so that no Score call waits for it."""
        self.score_statistics(bundle)

    def observe_stored(self, rows: list[Row]) -> None:
        """Rows just made durable join their cameras' statistics: the active bundle's
        score statistics, then the embedding statistics. The only way either changes:
        Score reads them and never writes (score_adaptation.py)."""
        rows = [r for r in rows if r.env]
        if not rows:
            return
        X = np.stack([np.asarray(r.vector, dtype=np.float32) for r in rows])
        envs = np.array([r.env for r in rows], dtype=object).astype(str)
        bundle = self.bundle
        if bundle is not None:
            stats = self.score_statistics(bundle)
            if stats is not None:
                with unchecked_estimators():
                    bundle.observe(X, envs, self.camera_stats.get, stats,
                                   np.array([r.id for r in rows], dtype=object))
        self.camera_stats.update(envs, X)

    def reset_camera_stats(self, envs: list[str] | None) -> list[str]:
        """Forget the cameras' running embedding and score statistics (every camera when
        None); returns the cameras that were known to either."""
        known = set(self.camera_stats.reset(envs))
        if self.bundle is not None:
            stats = self.score_statistics(self.bundle)
            if stats is not None:
                known.update(stats.reset(envs))
        return sorted(known)

    def _batched(self, size: int) -> None:
        if self._metrics:
            self._metrics.batch_size.observe(size)

    def _committed(self, rows: list[Row], version: int) -> None:
        self.store.record_acknowledged(version)   # durable before the callers hear of it
        if self._metrics:
            self._metrics.rows_written.labels(self.model_id).inc(len(rows))
        self.observe_stored(rows)

    def refresh(self) -> int:
        """Index rows other processes wrote to the table; returns how many were added.

        Only the data fragments that appeared since the last refresh are read: appended
        rows land in new fragments, and so do rows another process relabelled (an
        update rewrites them) or compacted; of those rows the index adds the ones it
        lacks and, on a reader, takes the labels of the others (the writer's SetLabel)."""
        with self._refresh_lock:
            # (whether the version moved is not enough: a read such as GetInfo's may
            # have seen the new version first)
            self.store.refresh()
            current = self.store.fragment_ids()
            fresh, self._fragments = current - self._fragments, current
            added = 0
            if fresh and self.writes and self.store.count() == len(self.index):
                fresh = frozenset()     # only its own commits, indexed as they were made
            if fresh:
                rows = self.store.read_fragments(
                    fresh, with_row_ids=self.index.stored is not None)
                added = self.index.add_table(rows)
                if added:
                    log.info("picked up %d rows written by another process to %s", added,
                             self.model_id)
                if not self.writes:
                    self._follow_labels(rows)
            self._indexed_version = self.store.seen_version
            return added

    def _follow_labels(self, rows: pa.Table) -> None:
        """Give indexed rows the labels the table now has for them (a reader's index
        follows the writer's SetLabel)."""
        labels = rows.column("label").to_pylist()
        by_label: dict[str, list[str]] = {}
        for row_id, label in zip(rows.column("id").to_pylist(), labels, strict=True):
            by_label.setdefault(label or "", []).append(row_id)
        for label, ids in by_label.items():
            self.index.relabel(ids, label)

    @property
    def table_version(self) -> int:
        """The store version a response reports (provenance): the newest this process
        wrote or read; on a reader, the newest whose rows and labels the index holds."""
        return self.store.seen_version if self.writes else self._indexed_version

    def save_index(self, *, force: bool = False) -> bool:
        """Save the index next to the store when enough rows were added since the last
        save (index_files.due_for_saving), or whenever rows were added with `force`."""
        rows = len(self.index)
        if not (due_for_saving(rows, self._saved_rows)
                or (force and rows != self._saved_rows)):
            return False
        started = time.monotonic()
        self._saved_rows = save_index(self.index_dir, self.index, model_id=self.model_id,
                                      table_version=self.store.version)
        log.info("index of %s saved: %d rows, %.1f s", self.model_id, self._saved_rows,
                 time.monotonic() - started)
        self._upload_index()
        return True

    def _download_index(self) -> None:
        """On object storage, fetch the saved index the writer uploaded when it covers
        more rows than the cache's; an unreachable store leaves the cache as it is."""
        if self._remote_index is None:
            return
        try:
            download_saved_index(self._remote_index, self.index_dir)
        except FailedPrecondition as exc:
            log.warning("saved index not downloaded (%s): the cache's or a rebuild serves", exc)

    def _upload_index(self) -> None:
        """The writer: upload the index save the remote does not hold yet."""
        if self._remote_index is not None and self.writes:
            if upload_saved_index(self.index_dir, self._remote_index):
                log.info("index of %s uploaded to %s", self.model_id, self._remote_index.uri)

    def close(self) -> None:
        self.batcher.close()
        self.writer.close()
        try:
            self.push_statistics()
        except Exception:  # the cache keeps them; the next start on it replays them
            log.exception("uploading the statistics of %s at shutdown failed", self.model_id)
        self.camera_stats.close()
        with self._score_stats_lock:
            for stats in self._score_stats.values():
                stats.close()
        try:
            self.save_index(force=True)
        except Exception:  # the next start rebuilds or adds what was not saved
            log.exception("saving the index of %s at shutdown failed", self.model_id)
