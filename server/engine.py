"""The server's domain logic: score, embed, ingest, search, fit, export, models, info.

The gRPC servicer only translates messages and calls these methods. Per-item problems
(an undecodable image) become ItemError entries; request-level problems raise envad
errors, mapped to status codes in one table (errors.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Container, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from envad import __version__
from envad.errors import EnvadError, FailedPrecondition, InvalidInput, NotFound
from envad.records import (
    MIN_FIT_ROWS,
    ImageInput,
    IngestInput,
    ItemError,
    ModelList,
    Provenance,
    ServerInfo,
    sha256_hex,
)
from envad.server.batching import Ticket
from envad.server.config import ServerConfig
from envad.server.detectors.bundle import (
    MIN_SAMPLES,
    DetectorBundle,
    FitSpec,
    fit_bundle,
    fit_sample,
)
from envad.server.detectors.leave_out import fit_groups_of
from envad.server.detectors.persistence import BundleStore
from envad.server.domain import (
    Activation,
    CameraStatsReset,
    EmbedOutcome,
    ExportOptions,
    ExportOutcome,
    FitOptions,
    FitOutcome,
    ImageResult,
    IngestTotals,
    LabelOutcome,
    RejectedImage,
    ScoreOptions,
    ScoreOutcome,
    SearchOutcome,
    SearchQuery,
)
from envad.server.encoder import ModelRegistry
from envad.server.images import DecodeLimits, decode_image
from envad.server.index import SelfKey
from envad.server.limits import MAX_NAME_CHARS, check_text, shorten
from envad.server.remote_dir import RemoteDir
from envad.server.review import fit_rows
from envad.server.roles import reader_refusal, takes_writes
from envad.server.scoring import ScoredRows, ScoreJob
from envad.server.space import ModelSpace
from envad.server.store import Row, vectors_of
from envad.server.threads import ThreadBudget
from envad.server.writer import DataDirFull, DataDirReadOnly

log = logging.getLogger(__name__)
MAX_TOP_K = 100
MAX_SEARCH_K = 1000
MAX_EXPORT_BATCH = 65536


class Engine:
    """Owns the active model and one ModelSpace per encoder used so far; the registry is
    only the catalogue of model files."""

    def __init__(self, config: ServerConfig, metrics=None):
        self.config = config
        #: False on a reader: it refuses writes and follows the writer (server/roles.py)
        self.writes = takes_writes(config)
        self.metrics = metrics
        self.threads = ThreadBudget.from_config(config)
        self.threads.apply()
        self.registry = ModelRegistry(config.resolved_models_dir,
                                      intra_op_threads=self.threads.onnx_intra_op,
                                      accelerator=config.accelerator,
                                      spinning=self.threads.onnx_spinning)
        #: the data dir on object storage (None: a local folder): storage_uri.py
        self.remote = (RemoteDir(str(config.data_dir), config.storage_options)
                       if config.remote else None)
        #: the models dir on object storage, mirrored into resolved_models_dir (or None)
        self.remote_models = (RemoteDir(config.models_uri, config.storage_options)
                              if config.models_uri else None)
        self.bundles = BundleStore(config.bundles_dir,
                                   self.remote.child("bundles") if self.remote else None)
        self.limits = DecodeLimits(max_bytes=config.max_image_mb * 1024 * 1024,
                                   max_pixels=config.max_image_megapixels * 1_000_000)
        self._decoder = ThreadPoolExecutor(self.threads.decode,
                                           thread_name_prefix="decode")
        self._spaces: dict[str, ModelSpace] = {}
        self._active: ModelSpace | None = None   # the one owner of "which model serves"
        self._problem = ""                         # why the last activation failed
        self._refused: set[str] = set()            # sha256 of files start/refresh gave up on
        self._lock = threading.RLock()
        self._state_file = config.local_dir / "active_model"

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Scan models and activate the one last activated (or the first one found).

        A model that cannot be activated leaves the server not ready; `hint()` says why.
        """
        self.config.local_dir.mkdir(parents=True, exist_ok=True)
        self.config.resolved_models_dir.mkdir(parents=True, exist_ok=True)
        if self.remote is not None and not self.remote.pull_file("active_model",
                                                                 self._state_file):
            self._state_file.unlink(missing_ok=True)     # the remote has none: none
        self._pull_models()
        ids = [m.model_id for m in self.registry.scan()]
        wanted = self._state_file.read_text().strip() if self._state_file.exists() else ""
        if ids:
            self._try_activate(wanted if wanted in ids else ids[0])
        else:
            log.warning("no model yet: %s", self.hint())

    @property
    def ready(self) -> bool:
        return self._active is not None

    @property
    def writable(self) -> bool:
        """Whether the active store takes writes (not while a damaged table awaits a
        restore or an accepted loss: `hint` says which; not while its data directory is
        full or read-only: the writer's `disk_fault`)."""
        space = self._active
        return (self.writes and space is not None and space.store.writable
                and space.writer.disk_fault is None)

    def close(self) -> None:
        with self._lock:
            for space in self._spaces.values():
                space.close()
        self._decoder.shutdown(wait=True)

    def refresh(self) -> None:
        """Periodic: pick up new model files and rows written by other processes, and
        save each index that has grown enough since its last save.

        With nothing active, each model file not yet refused is tried once.
        """
        self._pull_models()
        models = self.registry.scan()
        if not self.writes:
            self._follow_active_model({m.model_id for m in models})
        if self._active is None:
            for meta in models:
                if meta.sha256 not in self._refused:
                    if self._try_activate(meta.model_id):
                        break
        space = self._active
        if space is not None:
            space.refresh()
            if not self.writes:
                space.follow_writer()
            elif not self.config.remote:
                space.writer.recheck_disk(Path(self.config.lancedb_dir))
        with self._lock:
            spaces = list(self._spaces.values())
        for each in spaces:
            each.save_index()
            if self.writes:
                each.push_statistics()

    def _follow_active_model(self, found: set[str]) -> None:
        """A reader: activate the model the writer activated (the `active_model` object
        under the data URI), once its file is among the models `found` in the models
        dir."""
        assert self.remote is not None     # a reader's store is on object storage
        wanted = self.remote.read_bytes("active_model")
        model_id = wanted.decode().strip() if wanted else ""
        active = self._active.model_id if self._active is not None else ""
        if not model_id or model_id == active:
            return
        if model_id not in found:
            log.warning("the writer activated model %s, whose file is not in %s yet",
                        model_id, self.config.resolved_models_dir)
            return
        log.info("following the writer: model %s", model_id)
        self._try_activate(model_id)

    def _pull_models(self) -> None:
        """For a models dir on object storage, download its new or changed `*.onnx`
        files into the local models folder before a scan; an unreachable store leaves
        the copies there as they are."""
        if self.remote_models is None:
            return
        try:
            pulled = self.remote_models.mirror(".onnx", self.config.resolved_models_dir)
        except FailedPrecondition as exc:
            log.warning("models not refreshed from object storage: %s", exc)
            return
        if pulled:
            log.info("downloaded %d model file(s) from %s: %s", len(pulled),
                     self.remote_models.uri, ", ".join(pulled))

    def hint(self) -> str:
        """What to do next, in one sentence (GetInfo's `hint`, FailedPrecondition's text)."""
        if self._active is None:
            if self._problem:
                return f"no encoder is active: {self._problem}"
            return (f"no encoder yet: copy an envad .onnx file into "
                    f"{self.config.resolved_models_dir} (see docs/model-format.md); the "
                    "server picks it up within seconds")
        if self._active.store.problem:      # a damaged table, or acknowledged rows missing
            return self._active.store.problem
        if self._active.bundle is None and self._active.bundle_problem:
            return (f"{self._active.bundle_problem}: fit again (`envad fit`) to replace it")
        if self._active.bundle is None:
            return ("no detectors fitted for the active encoder: ingest normal images "
                    "(`envad backfill`), then call Fit (`envad fit`)")
        return "ready"

    # ------------------------------------------------------------ models

    def list_models(self) -> ModelList:
        """The model files found now, the one whose weights serve marked active: a file
        replaced under the active id (other weights, not served) is listed as it is,
        not active, and the weights that serve are listed too."""
        space = self._active
        serving = space.encoder.meta if space else None
        found = self.registry.scan()
        models = [replace(m, active=serving is not None and m.model_id == serving.model_id
                          and m.sha256 == serving.sha256) for m in found]
        if serving is not None and not any(m.active for m in models):
            models.append(replace(serving, active=True))
        return ModelList(tuple(models), str(self.registry.models_dir))

    def activate(self, model_id: str) -> Activation:
        """Make `model_id` the active encoder; requests in flight finish on the old one.

        If its space cannot open (e.g. the stored table has another vector size), the
        previous model keeps serving and FailedPrecondition says why.
        """
        try:
            space = self._space_for(model_id)
        except FailedPrecondition as exc:
            current = self._active.model_id if self._active else None
            still = (f"model {shorten(current)} keeps serving" if current
                     else "no model is serving")
            self._problem = f"model {shorten(model_id)} was not activated: {exc}; {still}"
            log.warning("%s", self._problem)
            raise FailedPrecondition(self._problem) from exc
        with self._lock:
            self._active = space
            self._problem = ""
            self._state_file.write_text(model_id)
            if self.remote is not None and self.writes:
                self.remote.push_file(self._state_file, "active_model")
        log.info("active model: %s (%s)", model_id, space.encoder.meta.file)
        return Activation(replace(space.encoder.meta, active=True), self.provenance(space))

    def _try_activate(self, model_id: str) -> bool:
        """`activate` for start and refresh: a refusal is remembered and logged, not raised."""
        try:
            self.activate(model_id)
            return True
        except FailedPrecondition:
            self._refused.add(self.registry.get(model_id).meta.sha256)
            return False

    def _space_for(self, model_id: str) -> ModelSpace:
        """The one get-or-create of a model's space (re-created when its file changed).

        NotFound for an unknown id; FailedPrecondition when the space cannot open.
        """
        encoder = self.registry.get(model_id)
        with self._lock:
            space = self._spaces.get(model_id)
            if space is None or space.encoder is not encoder:
                try:
                    space = ModelSpace(encoder, self.config, self.bundles, self.metrics,
                                       remote=self.remote,
                                       writes=self.writes)
                except EnvadError as exc:
                    raise FailedPrecondition(str(exc)) from exc
                self._spaces[model_id] = space
            return space

    def require_space(self, model_id: str = "") -> ModelSpace:
        """The named model's space, or the active one; FailedPrecondition with the hint
        when nothing is active."""
        if model_id:
            return self._space_for(model_id)
        space = self._active
        if space is None:
            raise FailedPrecondition(self.hint())
        return space

    def provenance(self, space: ModelSpace | None) -> Provenance:
        if space is None:
            return Provenance(server_version=__version__)
        bundle = space.bundle
        return Provenance(model_id=space.model_id, model_sha256=space.encoder.meta.sha256,
                          bundle_id=bundle.bundle_id if bundle else "",
                          table_version=space.table_version, server_version=__version__,
                          space=bundle.space.describe() if bundle else "",
                          score_adaptation=bundle.score_adaptation.describe() if bundle else "")

    # ------------------------------------------------------------ embedding

    def _decode_all(self, images: Sequence[ImageInput], size: int,
                    skip: Container[int] = ()
                    ) -> tuple[list[int], np.ndarray, list[ItemError]]:
        """Decode every image except the indices in `skip` (left out of the result); a
        lone image is decoded in the calling thread (the pool pays only for several)."""
        wanted = [index for index, img in enumerate(images)
                  if not isinstance(img, RejectedImage) and index not in skip]
        submit = self._decoder.submit if len(wanted) > 1 else _call_now
        futures = {index: submit(decode_image, images[index].data, size, self.limits)
                   for index in wanted}
        good, arrays, failures = [], [], []
        for index, img in enumerate(images):
            if index in skip:
                continue
            if isinstance(img, RejectedImage):   # refused at the request: only it fails
                failures.append(ItemError(index, img.resolved_id(), InvalidInput.code,
                                          img.problem))
                continue
            try:
                arrays.append(futures[index].result())
                good.append(index)
            except EnvadError as exc:
                label = img.id or img.uri or f"#{index}"
                failures.append(ItemError(index, img.resolved_id(), exc.code,
                                            f"image {label}: {exc}"))
        batch = (np.stack(arrays) if arrays
                 else np.zeros((0, size, size, 3), dtype=np.uint8))
        return good, batch, failures

    def _embed_images(self, space: ModelSpace, images: Sequence[ImageInput]
                      ) -> tuple[list[int], np.ndarray, list[ItemError]]:
        with space.batcher.coming() as ticket:
            good, batch, failures = self._decode_all(images, space.encoder.input_size)
            vectors = (space.batcher.embed(batch, ticket) if len(good)
                       else np.zeros((0, space.encoder.dim), np.float32))
        return good, vectors, failures

    def embed(self, images: Sequence[ImageInput], model_id: str = "") -> EmbedOutcome:
        space = self.require_space(model_id)
        good, vectors, failures = self._embed_images(space, images)
        per_item: list = [None] * len(images)
        for row, index in enumerate(good):
            per_item[index] = vectors[row]
        return EmbedOutcome(per_item, failures, [i.resolved_id() for i in images],
                            space.encoder.dim, self.provenance(space))

    # ------------------------------------------------------------ scoring

    def score(self, images: Sequence[ImageInput], options: ScoreOptions,
              *, all_bad_is_error: bool = True) -> ScoreOutcome:
        """Score images: decode, embed, score with the active bundle, search their
        neighbours, store them (with `options.store`). Embedding, scoring and the
        neighbour search run once per micro-batch for every request in it (the batcher
        embeds, then runs its stage, scoring.BatchScorer: `_embed_and_score`); images
        stored with the same content (`reuse_stored`) skip decoding and embedding and
        join the stage with their stored embeddings."""
        space, bundle, threshold = self._score_target(images, options)
        reused = self._stored_vectors(space, images) if options.reuse_stored else {}
        with space.batcher.coming() as ticket:
            good, batch, failures = self._decode_all(images, space.encoder.input_size,
                                                     skip=reused)
            parts = [(good, self._embed_and_score(space, bundle, images, good, batch,
                                                  options, ticket, embedded=False))]
        if all_bad_is_error and not good and not reused:
            raise InvalidInput("; ".join(f.message for f in failures))
        if reused:
            order = sorted(reused)
            stored = np.stack([reused[i] for i in order])
            parts.append((order, self._embed_and_score(space, bundle, images, order, stored,
                                                       options, None, embedded=True)))
        results = [ImageResult(i, img.resolved_id(), img.env) for i, img in enumerate(images)]
        for failure in failures:
            results[failure.index].error = failure
        for indices, rows in parts:
            if rows is not None:
                _fill_results(results, indices, rows, threshold)
                if options.store:
                    self._store_scored(space, images, indices, rows, options, results)
        return ScoreOutcome(results, self.provenance(space))

    def _score_target(self, images: Sequence[ImageInput], options: ScoreOptions
                      ) -> tuple[ModelSpace, DetectorBundle, float]:
        """The active space and bundle a Score request is scored with, and its threshold
        (the request checked first)."""
        if not images:
            raise InvalidInput("no images in the request")
        if options.store and not self.writes:
            raise FailedPrecondition(f"Score with store is a write: {reader_refusal(self.config)}")
        space = self.require_space()
        bundle = space.bundle
        if bundle is None:
            raise FailedPrecondition(self.hint())
        threshold = bundle.threshold if options.threshold is None else options.threshold
        if not 0.0 < threshold <= 1.0:
            raise InvalidInput(f"threshold must be in (0, 1], got {threshold}")
        top_k = options.top_k
        if not 1 <= top_k <= MAX_TOP_K:
            raise InvalidInput(f"top_k must be in 1..{MAX_TOP_K}, got {top_k}")
        if options.store:
            space.store.require_writable()
        return space, bundle, threshold

    @staticmethod
    def _store_scored(space: ModelSpace, images: Sequence[ImageInput], indices: list[int],
                      rows: ScoredRows, options: ScoreOptions,
                      results: list[ImageResult]) -> None:
        """Store the scored images (row r = image indices[r]); a full or read-only data
        dir leaves them unstored, their scores stand."""
        written = [_row(images[i], rows.vectors[r], options.label, options.split)
                   for r, i in enumerate(indices)]
        try:
            not_written = {row_id for row_id, _ in space.writer.write(written).failed}
        except (DataDirFull, DataDirReadOnly) as exc:
            log.warning("Score: %s", exc)
            not_written = {row.id for row in written}
        for index in indices:
            results[index].stored = results[index].id not in not_written

    @staticmethod
    def _stored_vectors(space: ModelSpace, images: Sequence[ImageInput]
                        ) -> dict[int, np.ndarray]:
        """Image index -> stored embedding, for the images stored under their id with
        the same content (sha256); the others are not in the result."""
        wanted = {index: (img.resolved_id(), img.sha256)
                  for index, img in enumerate(images) if not isinstance(img, RejectedImage)}
        if not wanted:
            return {}
        table = space.store.read_ids(sorted({row_id for row_id, _ in wanted.values()}),
                                     columns=("id", "sha256"))
        vectors = vectors_of(table)
        stored = {key: vectors[r] for r, key in enumerate(zip(
            table.column("id").to_pylist(), table.column("sha256").to_pylist(), strict=True))}
        return {index: stored[key] for index, key in wanted.items() if key in stored}

    @staticmethod
    def _embed_and_score(space: ModelSpace, bundle: DetectorBundle,
                         images: Sequence[ImageInput], indices: list[int], batch: np.ndarray,
                         options: ScoreOptions, ticket: Ticket | None, *, embedded: bool
                         ) -> ScoredRows | None:
        """`images[indices]` (decoded `batch`, or their stored embeddings when `embedded`)
        through the micro-batcher: embedded, then scored and their neighbours searched
        by its stage (scoring.BatchScorer), split into micro-batches of at most
        `max_batch` images; None when there are none."""
        if not indices:
            return None
        job = _score_job(bundle, images, indices, options)
        step = space.batcher.max_batch
        if len(indices) <= step:    # one micro-batch: run inline when the batcher is idle
            return space.batcher.run(batch, job, ticket, embedded=embedded)
        futures = [space.batcher.submit(batch[s:s + step], job.rows(s, s + step),
                                        ticket if s == 0 else None, embedded=embedded)
                   for s in range(0, len(indices), step)]
        return ScoredRows.concat([f.result() for f in futures])

    # ------------------------------------------------------------ ingest

    def ingest(self, chunks: Iterable[Sequence[IngestInput]]) -> IngestTotals:
        """Embed and store every chunk; returns once every written row is durable."""
        space = self.require_space()
        space.store.require_writable()
        totals = IngestTotals()
        pending: list[tuple[Future, list[tuple[int, str]]]] = []
        offset = 0
        for chunk in chunks:
            totals.received += len(chunk)
            good, vectors, failures = self._embed_images(space, [item.image for item in chunk])
            totals.failures.extend(
                ItemError(f.index + offset, f.id, f.code, f.message) for f in failures)
            rows = [_row(chunk[i].image, vectors[r], chunk[i].label, chunk[i].split)
                    for r, i in enumerate(good)]
            if rows:
                pending.append((space.writer.submit(rows),
                                [(offset + i, rows[r].id) for r, i in enumerate(good)]))
            offset += len(chunk)
            pending = self._collect_done(pending, totals)
        for future, items in pending:
            self._collect(future, items, totals)
        totals.provenance = self.provenance(space)
        return totals

    def _collect_done(self, pending, totals):
        still = []
        for future, items in pending:
            if future.done():
                self._collect(future, items, totals)
            else:
                still.append((future, items))
        return still

    @staticmethod
    def _collect(future: Future, items: list[tuple[int, str]], totals: IngestTotals) -> None:
        try:
            result = future.result()
        except (DataDirFull, DataDirReadOnly):
            raise      # the call fails once: no row of it can be stored now
        except EnvadError as exc:
            totals.failures.extend(ItemError(i, row_id, exc.code, str(exc))
                                   for i, row_id in items)
            return
        except Exception:  # a store failure: report, never acknowledge (details: the log)
            log.exception("store write failed")
            totals.failures.extend(ItemError(i, row_id, "INTERNAL",
                                             "store write failed (details in the server log)")
                                   for i, row_id in items)
            return
        totals.inserted += len(result.inserted)
        totals.duplicates += len(result.duplicates)
        failed = dict(result.failed)
        totals.failures.extend(ItemError(i, row_id, "INTERNAL", failed[row_id])
                               for i, row_id in items if row_id in failed)

    # ------------------------------------------------------------ search

    def search(self, query: SearchQuery) -> SearchOutcome:
        space = self.require_space()
        if not 1 <= query.k <= MAX_SEARCH_K:
            raise InvalidInput(f"k must be in 1..{MAX_SEARCH_K}, got {query.k}")
        own: SelfKey | None = None
        if query.image is not None:
            good, vectors, failures = self._embed_images(space, [ImageInput(query.image)])
            if failures:
                raise InvalidInput(failures[0].message)
            vector = vectors
            digest = sha256_hex(query.image)
            own = (digest, digest)
        elif query.vector is not None:
            vector = np.asarray(query.vector, dtype=np.float32).reshape(1, -1)
        elif query.row_id:
            table = space.store.read_ids([query.row_id])
            if table.num_rows == 0:
                raise NotFound(f"no stored row with id {shorten(query.row_id)}")
            vector = vectors_of(table)[:1]
            own = (query.row_id, str(table.column("sha256")[0].as_py() or ""))
        else:
            raise InvalidInput("search needs an image, a vector or an id")
        exclude = [own] if (query.exclude_self and own is not None) else None
        hits = space.index.search(vector, query.k, query.row_filter,
                                  exclude_labels=query.exclude_labels, exclude_self=exclude)
        return SearchOutcome(hits[0], self.provenance(space))

    # ------------------------------------------------------------ fit

    def fit(self, options: FitOptions) -> FitOutcome:
        space = self.require_space()
        space.store.require_writable()
        table = fit_rows(space.store, options.row_filter,
                         columns=("id", "env", "label", "timestamp", "event"),
                         anomaly_labels=self.config.anomaly_label_set, with_vectors=False)
        # by id, so the bundle's fit/calibration split never follows arrival order
        table = table.sort_by("id")
        if table.num_rows == 0:
            raise FailedPrecondition(
                f"no stored rows match {options.row_filter.as_dict()} for model "
                f"{space.model_id}: ingest normal images first (`envad backfill`)")
        if table.num_rows < MIN_FIT_ROWS and not options.allow_few_rows:
            raise FailedPrecondition(
                f"only {table.num_rows} stored rows match {options.row_filter.as_dict()} "
                f"for model {space.model_id}; Fit needs at least {MIN_FIT_ROWS} (calibrated "
                "scores would rest on a handful of held-out rows and covariance-based "
                "detectors degenerate): store more normal images, or allow fewer rows "
                "(FitRequest.allow_few_rows; --allow-few-rows on the command line)")
        all_rows = table
        if options.max_samples >= MIN_SAMPLES:
            # only the sampled rows' vectors are read: memory and time stay flat in the
            # store's size (the sample is the one fit_bundle would draw from all rows)
            table = table.take(fit_sample(table.num_rows, options.max_samples, options.seed))
        fit_ids = table.column("id").to_numpy(zero_copy_only=False)
        groups = fit_groups_of(
            all_rows.column("id").to_numpy(zero_copy_only=False),
            all_rows.column("env").to_numpy(zero_copy_only=False),
            all_rows.column("timestamp").to_numpy(zero_copy_only=False),
            fit_ids, options.event_gap_s,
            all_rows.column("event").to_numpy(zero_copy_only=False))
        vectors = space.store.vectors_for(table.column("id"))
        envs = np.asarray(table.column("env").to_pylist(), dtype=object)
        labels = np.asarray([v or "" for v in table.column("label").to_pylist()], dtype=object)
        spec = FitSpec(
            detectors=tuple(options.detectors), seed=options.seed,
            contamination=options.contamination, max_samples=options.max_samples,
            stylist_drop_fraction=options.stylist_drop_fraction, space=options.space,
            min_camera_rows=options.min_camera_rows,
            score_adaptation=options.score_adaptation, model_id=space.model_id,
            fit_filter=options.row_filter.as_dict())
        # the sampled rows: fit_bundle's own sample of them is all of them
        bundle = fit_bundle(vectors, spec, envs=envs, labels=labels, ids=fit_ids,
                            groups=groups)
        self.bundles.save(bundle)
        # served as every replica loads it: its arrays mapped from the saved files, so the
        # cross-fit folds (scored only for fit rows) hold no memory until one is scored
        bundle = self.bundles.load(bundle.bundle_id)
        if options.activate:
            space.prepare(bundle)      # its score statistics, from the stored rows
            self.bundles.activate(bundle.bundle_id)
            space.bundle, space.bundle_problem = bundle, ""
        if self.metrics:
            self.metrics.observe_fit(bundle)
        return FitOutcome(bundle.info(), options.activate, self.provenance(space))

    def set_label(self, ids: Sequence[str], label: str) -> LabelOutcome:
        """Relabel stored rows of the active encoder (the review loop, server/review.py)."""
        space = self.require_space()
        if not label:
            raise InvalidInput("label must be a non-empty name")
        # the rule of Ingest's labels: a label set here can always be filtered on
        check_text("label", label, MAX_NAME_CHARS)
        if not ids:
            raise InvalidInput("SetLabel needs at least one id")
        updated = space.store.set_label(list(ids), label)
        space.index.relabel(updated, label)
        done = set(updated)
        return LabelOutcome(tuple(updated), tuple(i for i in dict.fromkeys(ids)
                                                  if i not in done), self.provenance(space))

    def reset_camera_stats(self, envs: Sequence[str]) -> CameraStatsReset:
        """Forget the running statistics of `envs` (every camera when empty)."""
        space = self.require_space()
        return CameraStatsReset(tuple(space.reset_camera_stats(list(envs) or None)),
                                self.provenance(space))

    # ------------------------------------------------------------ export

    def export(self, options: ExportOptions) -> ExportOutcome:
        """Stored rows matching the filter, read lazily in record batches."""
        space = self.require_space()
        if not 0 < options.batch_size <= MAX_EXPORT_BATCH:
            raise InvalidInput(f"batch_size must be in 1..{MAX_EXPORT_BATCH}, got "
                               f"{options.batch_size}")
        batches = space.store.iter_batches(options.row_filter, options.batch_size,
                                           with_vectors=options.with_vectors)
        return ExportOutcome(batches, self.provenance(space))

    # ------------------------------------------------------------ info

    def info(self) -> ServerInfo:
        space = self._active
        counts = space.store.env_counts() if space else {}
        return ServerInfo(
            server_version=__version__,
            active_model=replace(space.encoder.meta, active=True) if space else None,
            bundle=space.bundle.info() if space and space.bundle else None,
            env_counts=counts, total_rows=sum(counts.values()),
            table_version=space.store.version if space else 0,
            data_dir=(str(self.config.data_dir) if self.config.remote
                      else str(self.config.local_dir.resolve())), hint=self.hint(),
            index_rows=len(space.index) if space else 0,
        )


def _row(image: ImageInput, vector: np.ndarray, label: str, split: str) -> Row:
    """The store row of an embedded image."""
    return Row(id=image.resolved_id(), vector=vector, env=image.env, label=label,
               split=split, timestamp=image.timestamp, uri=image.uri,
               sha256=image.sha256, event=image.event)


def _score_job(bundle: DetectorBundle, images: Sequence[ImageInput], indices: Sequence[int],
               options: ScoreOptions) -> ScoreJob:
    """What the Score stage does with the embeddings of `images[indices]`."""
    return ScoreJob(
        bundle, tuple(images[i].env for i in indices), options.top_k,
        options.neighbor_filter or bundle.info().filter,
        ids=tuple(images[i].resolved_id() for i in indices),
        exclude_labels=options.exclude_labels,
        self_keys=None if options.include_self else tuple(
            (images[i].resolved_id(), images[i].sha256) for i in indices))


def _fill_results(results: list[ImageResult], indices: Sequence[int], rows: ScoredRows,
                  threshold: float) -> None:
    """Copy the scores of `rows` (row r = image indices[r]) into their results."""
    scores = rows.scores
    for row, index in enumerate(indices):
        result = results[index]
        result.raw = {name: float(v[row]) for name, v in scores.raw.items()}
        result.calibrated = {name: float(v[row]) for name, v in scores.calibrated.items()}
        result.ensemble = float(scores.ensemble[row])
        result.threshold = threshold
        result.is_anomaly = result.ensemble >= threshold
        result.neighbors = rows.neighbors[row]
        result.adaptation = scores.adaptation[row]
        result.adapted = {name: float(v[row]) for name, v in scores.adapted.items()}
        result.camera_weight = float(scores.camera_weight[row])


def _call_now(fn, *args) -> Future:
    """`fn(*args)` run in this thread, as a settled Future (what a pool's submit gives)."""
    future: Future = Future()
    try:
        future.set_result(fn(*args))
    except Exception as exc:
        future.set_exception(exc)
    return future
