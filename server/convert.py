"""All conversions between envad.v1 protobuf messages and the server's domain types.

Named like the client's (`envad.client.convert`): `X_from_pb` for requests, `X_to_pb`
for responses.

The only server module besides service.py that imports the generated `_pb2` code.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from envad.defaults import DEFAULT_CONTAMINATION, DEFAULT_EVENT_GAP_S, DEFAULT_MIN_CAMERA_ROWS
from envad.errors import EnvadError, InvalidInput
from envad.pipeline import DEFAULT_PIPELINE
from envad.records import (
    INGEST_SPLIT,
    BundleInfo,
    DetectorFitStats,
    ImageInput,
    IngestInput,
    ItemError,
    ModelInfo,
    ModelList,
    Neighbor,
    Provenance,
    RowFilter,
    ServerInfo,
)
from envad.server.config import ServerConfig
from envad.server.detectors import registry, stylist
from envad.server.domain import (
    DEFAULT_EXPORT_BATCH_SIZE,
    DEFAULT_FIT_FILTER,
    DEFAULT_SEARCH_K,
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
from envad.server.limits import (
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_RESET_ENVS,
    MAX_URI_CHARS,
    check_filter,
    check_names,
    check_text,
    check_vector,
    clip_message,
    text_problem,
)
from envad.server.row_encoding import arrow_chunk_bytes, rows_chunk_bytes
from envad.v1 import envad_pb2 as pb

# ------------------------------------------------------------------ requests -> domain
# Every default of a request ("0: the server default" in envad.proto) is resolved here,
# once, from the server config and the constants of the modules that own them.


def image_from_pb(msg: pb.Image, *extra_problems: str | None) -> ImageInput:
    """The image of a request item. Fields that break a limit (server/limits.py), an
    out-of-range timestamp or any of `extra_problems` make it a RejectedImage: that item
    fails with its reason, the rest of the request goes on."""
    problems = [text_problem("id", msg.id, MAX_ID_CHARS),
                text_problem("env", msg.env, MAX_NAME_CHARS),
                text_problem("uri", msg.uri, MAX_URI_CHARS),
                text_problem("event", msg.event, MAX_NAME_CHARS), *extra_problems]
    timestamp = None
    if msg.HasField("timestamp"):
        try:
            timestamp = msg.timestamp.ToDatetime(tzinfo=dt.timezone.utc)
        except (ValueError, OverflowError):
            problems.append(f"timestamp {msg.timestamp.seconds} s is outside "
                            "0001-01-01..9999-12-31")
    problem = next((p for p in problems if p), None)
    if problem:
        return RejectedImage(data=msg.data, id=msg.id[:MAX_ID_CHARS],
                             env=msg.env[:MAX_NAME_CHARS], problem=problem)
    return ImageInput(data=msg.data, id=msg.id, env=msg.env, timestamp=timestamp, uri=msg.uri,
                      event=msg.event)


def images_from_pb(msgs: Iterable[pb.Image]) -> list[ImageInput]:
    return [image_from_pb(m) for m in msgs]


def filter_from_pb(msg: pb.Filter, what: str = "filter") -> RowFilter:
    """A structured filter, refused (InvalidInput) beyond MAX_FILTER_VALUES per field or
    with a value no row could hold."""
    return check_filter(RowFilter(envs=tuple(msg.envs), splits=tuple(msg.splits),
                                  labels=tuple(msg.labels)), what)


def score_options_from_pb(msg: pb.ScoreRequest, config: ServerConfig) -> ScoreOptions:
    neighbor_filter = filter_from_pb(msg.neighbor_filter, "neighbor_filter")
    return ScoreOptions(
        top_k=msg.top_k or config.default_top_k,
        split=check_text("split", msg.split, MAX_NAME_CHARS) or INGEST_SPLIT,
        threshold=msg.threshold if msg.HasField("threshold") else None,
        neighbor_filter=None if neighbor_filter.is_empty() else neighbor_filter,
        store=msg.store, label=check_text("label", msg.label, MAX_NAME_CHARS),
        include_self=msg.include_self,
        exclude_labels=() if msg.include_known_anomalies else config.anomaly_label_set,
        reuse_stored=msg.reuse_stored,
    )


def ingest_chunk_from_pb(msg: pb.IngestRequest) -> list[IngestInput]:
    """One Ingest message's items; an item breaking a limit fails alone (RejectedImage)."""
    return [IngestInput(image_from_pb(item.image,
                                      text_problem("label", item.label, MAX_NAME_CHARS),
                                      text_problem("split", item.split, MAX_NAME_CHARS)),
                        label=item.label, split=item.split or INGEST_SPLIT)
            for item in msg.items]


def search_query_from_pb(msg: pb.SearchRequest, config: ServerConfig) -> SearchQuery:
    which = msg.WhichOneof("query")
    return SearchQuery(k=msg.k or DEFAULT_SEARCH_K, row_filter=filter_from_pb(msg.filter),
                       image=msg.image if which == "image" else None,
                       vector=(tuple(check_vector(msg.vector.values).tolist())
                               if which == "vector" else None),
                       row_id=check_text("id", msg.id, MAX_ID_CHARS) if which == "id" else None,
                       exclude_self=msg.exclude_self,
                       exclude_labels=(config.anomaly_label_set if msg.exclude_known_anomalies
                                       else ()))


def fit_options_from_pb(msg: pb.FitRequest, config: ServerConfig) -> FitOptions:
    row_filter = filter_from_pb(msg.filter)
    drop_fraction = msg.stylist.drop_fraction or stylist.DEFAULT_DROP_FRACTION
    return FitOptions(
        row_filter=DEFAULT_FIT_FILTER if row_filter.is_empty() else row_filter,
        detectors=tuple(msg.detectors) or registry.default_fit_detectors(),
        max_samples=msg.max_samples or config.fit_max_samples,
        contamination=msg.contamination or DEFAULT_CONTAMINATION,
        stylist_drop_fraction=drop_fraction if msg.stylist.enabled else None,
        space=msg.space or DEFAULT_PIPELINE.space,
        min_camera_rows=msg.min_camera_rows or DEFAULT_MIN_CAMERA_ROWS,
        score_adaptation=msg.score_adaptation or DEFAULT_PIPELINE.score_adaptation,
        seed=msg.seed, activate=not msg.no_activate, allow_few_rows=msg.allow_few_rows,
        event_gap_s=event_gap_from_pb(msg.event_gap_s),
    )


def event_gap_from_pb(value: float) -> float:
    """FitRequest.event_gap_s as Fit uses it: 0 is the default gap, a negative value
    makes every row its own event (0), anything not finite is refused."""
    if not math.isfinite(value):
        raise InvalidInput(f"event_gap_s must be a finite number of seconds, got {value}")
    if value == 0:
        return DEFAULT_EVENT_GAP_S
    return max(value, 0.0)


def reset_envs_from_pb(msg: pb.ResetCameraStatsRequest) -> list[str]:
    """The cameras to reset, refused beyond MAX_RESET_ENVS or with an invalid name."""
    check_names("envs", msg.envs, MAX_RESET_ENVS)
    return list(msg.envs)


def export_options_from_pb(msg: pb.ExportRequest) -> ExportOptions:
    return ExportOptions(row_filter=filter_from_pb(msg.filter),
                         batch_size=msg.batch_size or DEFAULT_EXPORT_BATCH_SIZE,
                         with_vectors=not msg.without_vectors)


# ------------------------------------------------------------------ domain -> responses


def provenance_to_pb(p: Provenance) -> pb.Provenance:
    return pb.Provenance(model_id=p.model_id, model_sha256=p.model_sha256,
                         bundle_id=p.bundle_id, table_version=p.table_version,
                         server_version=p.server_version, space=p.space,
                         score_adaptation=p.score_adaptation)


def item_error_to_pb(f: ItemError) -> pb.ItemError:
    return pb.ItemError(index=f.index, id=f.id, code=f.code, message=f.message)


def neighbor_to_pb(h: Neighbor) -> pb.Neighbor:
    return pb.Neighbor(id=h.id, env=h.env, label=h.label, split=h.split, uri=h.uri,
                       distance=h.distance)


def image_score_to_pb(r: ImageResult) -> pb.ImageScore:
    msg = pb.ImageScore(index=r.index, id=r.id, env=r.env)
    if r.error is not None:
        msg.error.CopyFrom(item_error_to_pb(r.error))
        return msg
    msg.detectors.extend(pb.DetectorScore(detector=name, raw=r.raw[name],
                                          calibrated=r.calibrated[name],
                                          adapted=r.adapted.get(name, r.raw[name]))
                         for name in r.raw)
    msg.ensemble = r.ensemble
    msg.is_anomaly = r.is_anomaly
    msg.threshold = r.threshold
    msg.neighbors.extend(neighbor_to_pb(h) for h in r.neighbors)
    msg.stored = r.stored
    msg.adaptation = r.adaptation
    msg.camera_weight = r.camera_weight
    return msg


def score_to_pb(outcome: ScoreOutcome) -> pb.ScoreResponse:
    return pb.ScoreResponse(results=[image_score_to_pb(r) for r in outcome.results],
                            provenance=provenance_to_pb(outcome.provenance))


def stream_error_to_pb(position: int, error: EnvadError) -> pb.ScoreResponse:
    """The answer of a ScoreStream request that was refused: its error, no results."""
    return pb.ScoreResponse(error=pb.ItemError(index=position, code=error.code,
                                               message=clip_message(str(error))))


def embed_to_pb(outcome: EmbedOutcome) -> pb.EmbedResponse:
    failures = {f.index: f for f in outcome.failures}
    embeddings = []
    for index, (row_id, vector) in enumerate(zip(outcome.ids, outcome.vectors, strict=True)):
        msg = pb.Embedding(index=index, id=row_id)
        if index in failures:
            msg.error.CopyFrom(item_error_to_pb(failures[index]))
        else:
            msg.vector.extend(np.asarray(vector, dtype=np.float32).tolist())
        embeddings.append(msg)
    return pb.EmbedResponse(embeddings=embeddings, dim=outcome.dim,
                            provenance=provenance_to_pb(outcome.provenance))


def ingest_summary_to_pb(totals: IngestTotals) -> pb.IngestSummary:
    return pb.IngestSummary(received=totals.received, inserted=totals.inserted,
                            duplicates=totals.duplicates, failed=len(totals.failures),
                            failures=[item_error_to_pb(f) for f in totals.failures],
                            provenance=provenance_to_pb(totals.provenance))


def search_to_pb(outcome: SearchOutcome) -> pb.SearchResponse:
    return pb.SearchResponse(neighbors=[neighbor_to_pb(h) for h in outcome.neighbors],
                             provenance=provenance_to_pb(outcome.provenance))


def _fit_stats_to_pb(stats: Sequence[DetectorFitStats]) -> list[pb.DetectorFitStats]:
    return [pb.DetectorFitStats(detector=s.detector, fit_seconds=s.fit_seconds,
                                n_samples=s.n_samples) for s in stats]


def filter_to_pb(f: RowFilter) -> pb.Filter:
    return pb.Filter(envs=list(f.envs), splits=list(f.splits), labels=list(f.labels))


def bundle_info_to_pb(b: BundleInfo) -> pb.BundleInfo:
    return pb.BundleInfo(bundle_id=b.bundle_id, model_id=b.model_id, detectors=list(b.detectors),
                         n_samples=b.n_samples, n_features=b.n_features, threshold=b.threshold,
                         created=b.created, filter=filter_to_pb(b.filter),
                         stats=_fit_stats_to_pb(b.stats), space=b.space,
                         score_adaptation=b.score_adaptation, calibration=b.calibration,
                         fit_groups=b.fit_groups)


def fit_to_pb(outcome: FitOutcome) -> pb.FitResponse:
    b = outcome.bundle
    return pb.FitResponse(bundle_id=b.bundle_id, stats=_fit_stats_to_pb(b.stats),
                          n_samples=b.n_samples, n_features=b.n_features,
                          threshold=b.threshold, activated=outcome.activated, space=b.space,
                          score_adaptation=b.score_adaptation, fit_groups=b.fit_groups,
                          provenance=provenance_to_pb(outcome.provenance))


def model_info_to_pb(m: ModelInfo) -> pb.ModelInfo:
    return pb.ModelInfo(model_id=m.model_id, file=m.file, sha256=m.sha256,
                        input_size=m.input_size, embedding_dim=m.embedding_dim,
                        algorithm=m.algorithm, training_envs=list(m.training_envs),
                        dataset=m.dataset, created=m.created, active=m.active,
                        metadata=m.metadata)


def model_list_to_pb(listing: ModelList) -> pb.ListModelsResponse:
    return pb.ListModelsResponse(models=[model_info_to_pb(m) for m in listing.models],
                                 models_dir=listing.models_dir)


def activation_to_pb(activation: Activation) -> pb.ActivateModelResponse:
    return pb.ActivateModelResponse(model=model_info_to_pb(activation.model),
                                    provenance=provenance_to_pb(activation.provenance))


def camera_stats_reset_to_pb(reset: CameraStatsReset) -> pb.ResetCameraStatsResponse:
    return pb.ResetCameraStatsResponse(reset=list(reset.envs),
                                       provenance=provenance_to_pb(reset.provenance))


def label_to_pb(outcome: LabelOutcome) -> pb.SetLabelResponse:
    return pb.SetLabelResponse(updated=list(outcome.updated), missing=list(outcome.missing),
                               provenance=provenance_to_pb(outcome.provenance))


def server_info_to_pb(info: ServerInfo) -> pb.GetInfoResponse:
    msg = pb.GetInfoResponse(server_version=info.server_version, total_rows=info.total_rows,
                             table_version=info.table_version, data_dir=info.data_dir,
                             hint=info.hint, index_rows=info.index_rows,
                             env_counts=[pb.EnvCount(env=e, rows=n)
                                         for e, n in sorted(info.env_counts.items())])
    if info.active_model is not None:
        msg.active_model.CopyFrom(model_info_to_pb(info.active_model))
    if info.bundle is not None:
        msg.bundle.CopyFrom(bundle_info_to_pb(info.bundle))
    return msg


def arrow_ipc_to_pb(batch: pa.RecordBatch) -> bytes:
    """An Arrow record batch as a self-contained IPC stream (schema + batch)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def export_chunks_to_wire(outcome: ExportOutcome, export_format: int) -> Iterator[bytes]:
    """One serialized ExportChunk per record batch, as rows or Arrow IPC (`export_format`),
    encoded from the Arrow columns straight to bytes (Export's handler sends bytes as
    they are: `interceptors.PreSerializedResponses`)."""
    provenance = provenance_to_pb(outcome.provenance).SerializeToString()
    for batch in outcome.batches:
        if export_format == pb.EXPORT_FORMAT_ROWS:
            yield rows_chunk_bytes(batch, provenance)
        else:
            yield arrow_chunk_bytes(arrow_ipc_to_pb(batch), provenance)
