"""Conversions between the client's typed values and envad.v1 protobuf messages.

The only client module (with the library's call sites) that touches `_pb2`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from google.protobuf.timestamp_pb2 import Timestamp

from envad.client import results as r
from envad.v1 import envad_pb2 as pb


def timestamp_to_pb(value: datetime | None) -> Timestamp | None:
    """A datetime as a protobuf Timestamp; naive datetimes are taken as UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    ts = Timestamp()
    ts.FromDatetime(value.astimezone(timezone.utc))
    return ts


def timestamp_from_pb(ts: Timestamp, present: bool) -> datetime | None:
    return ts.ToDatetime(tzinfo=timezone.utc) if present else None


def image_to_pb(image: r.ImageInput) -> pb.Image:
    msg = pb.Image(data=image.data, id=image.id, env=image.env, uri=image.uri,
                   event=image.event)
    ts = timestamp_to_pb(image.timestamp)
    if ts is not None:
        msg.timestamp.CopyFrom(ts)
    return msg


def ingest_item_to_pb(item: r.IngestInput) -> pb.IngestItem:
    return pb.IngestItem(image=image_to_pb(item.image), label=item.label, split=item.split)


def ingest_requests(
    items: Sequence[r.IngestInput], max_message_bytes: int
) -> Iterator[pb.IngestRequest]:
    """Pack items into IngestRequest messages of at most ~max_message_bytes of image data.

    An item larger than the limit travels alone (the server decides whether it fits).
    """
    batch: list[pb.IngestItem] = []
    size = 0
    for item in items:
        n = len(item.image.data) + 256
        if batch and size + n > max_message_bytes:
            yield pb.IngestRequest(items=batch)
            batch, size = [], 0
        batch.append(ingest_item_to_pb(item))
        size += n
    if batch:
        yield pb.IngestRequest(items=batch)


def filter_to_pb(row_filter: r.RowFilter | None) -> pb.Filter:
    if row_filter is None:
        return pb.Filter()
    return pb.Filter(
        envs=list(row_filter.envs), splits=list(row_filter.splits), labels=list(row_filter.labels)
    )


def filter_from_pb(msg: pb.Filter) -> r.RowFilter:
    return r.RowFilter(envs=tuple(msg.envs), splits=tuple(msg.splits), labels=tuple(msg.labels))


def search_request_to_pb(
    *, image: bytes | None, vector: Sequence[float] | None, id: str | None, k: int,
    row_filter: r.RowFilter | None,
) -> pb.SearchRequest:
    """A SearchRequest for whichever one of image, vector and id is given."""
    request = pb.SearchRequest(k=k, filter=filter_to_pb(row_filter))
    if image is not None:
        request.image = image
    elif vector is not None:
        request.vector.values.extend(float(v) for v in vector)
    elif id is not None:
        request.id = id
    return request


def item_error_from_pb(msg: pb.ItemError) -> r.ItemError:
    return r.ItemError(index=msg.index, id=msg.id, code=msg.code, message=msg.message)


def _optional_error(parent, msg: pb.ItemError) -> r.ItemError | None:
    return item_error_from_pb(msg) if parent.HasField("error") else None


def provenance_from_pb(msg: pb.Provenance) -> r.Provenance:
    return r.Provenance(
        model_id=msg.model_id,
        model_sha256=msg.model_sha256,
        bundle_id=msg.bundle_id,
        table_version=msg.table_version,
        server_version=msg.server_version,
        space=msg.space,
        score_adaptation=msg.score_adaptation,
    )


def neighbor_from_pb(msg: pb.Neighbor) -> r.Neighbor:
    return r.Neighbor(
        id=msg.id, env=msg.env, label=msg.label, split=msg.split, uri=msg.uri,
        distance=msg.distance,
    )


def search_result_from_pb(msg: pb.SearchResponse) -> r.SearchResult:
    return r.SearchResult(
        neighbors=tuple(neighbor_from_pb(n) for n in msg.neighbors),
        provenance=provenance_from_pb(msg.provenance),
    )


def image_score_from_pb(msg: pb.ImageScore) -> r.ImageScore:
    return r.ImageScore(
        index=msg.index,
        id=msg.id,
        env=msg.env,
        error=_optional_error(msg, msg.error),
        detectors=tuple(
            r.DetectorScore(detector=d.detector, raw=d.raw, calibrated=d.calibrated,
                            adapted=d.adapted)
            for d in msg.detectors
        ),
        ensemble=msg.ensemble,
        is_anomaly=msg.is_anomaly,
        threshold=msg.threshold,
        neighbors=tuple(neighbor_from_pb(n) for n in msg.neighbors),
        stored=msg.stored,
        adaptation=msg.adaptation,
        camera_weight=msg.camera_weight,
    )


def score_result_from_pb(msg: pb.ScoreResponse) -> r.ScoreResult:
    return r.ScoreResult(
        results=tuple(image_score_from_pb(s) for s in msg.results),
        provenance=provenance_from_pb(msg.provenance),
    )


def embed_result_from_pb(msg: pb.EmbedResponse) -> r.EmbedResult:
    return r.EmbedResult(
        embeddings=tuple(
            r.Embedding(
                index=e.index, id=e.id, error=_optional_error(e, e.error), vector=tuple(e.vector)
            )
            for e in msg.embeddings
        ),
        dim=msg.dim,
        provenance=provenance_from_pb(msg.provenance),
    )


def ingest_summary_from_pb(msg: pb.IngestSummary) -> r.IngestSummary:
    return r.IngestSummary(
        received=msg.received,
        inserted=msg.inserted,
        duplicates=msg.duplicates,
        failed=msg.failed,
        failures=tuple(item_error_from_pb(f) for f in msg.failures),
        provenance=provenance_from_pb(msg.provenance),
    )


def fit_stats_from_pb(items: Iterable[pb.DetectorFitStats]) -> tuple[r.DetectorFitStats, ...]:
    return tuple(
        r.DetectorFitStats(detector=s.detector, fit_seconds=s.fit_seconds, n_samples=s.n_samples)
        for s in items
    )


def fit_result_from_pb(msg: pb.FitResponse) -> r.FitResult:
    return r.FitResult(
        bundle_id=msg.bundle_id,
        stats=fit_stats_from_pb(msg.stats),
        n_samples=msg.n_samples,
        n_features=msg.n_features,
        threshold=msg.threshold,
        activated=msg.activated,
        provenance=provenance_from_pb(msg.provenance),
        space=msg.space,
        score_adaptation=msg.score_adaptation,
        fit_groups=msg.fit_groups,
    )


def model_info_from_pb(msg: pb.ModelInfo) -> r.ModelInfo:
    return r.ModelInfo(
        model_id=msg.model_id,
        file=msg.file,
        sha256=msg.sha256,
        input_size=msg.input_size,
        embedding_dim=msg.embedding_dim,
        algorithm=msg.algorithm,
        training_envs=tuple(msg.training_envs),
        dataset=msg.dataset,
        created=msg.created,
        active=msg.active,
        metadata=dict(msg.metadata),
    )


def model_list_from_pb(msg: pb.ListModelsResponse) -> r.ModelList:
    return r.ModelList(
        models=tuple(model_info_from_pb(m) for m in msg.models), models_dir=msg.models_dir
    )


def camera_stats_reset_from_pb(msg: pb.ResetCameraStatsResponse) -> tuple[str, ...]:
    return tuple(msg.reset)


def label_result_from_pb(msg: pb.SetLabelResponse) -> r.LabelResult:
    return r.LabelResult(updated=tuple(msg.updated), missing=tuple(msg.missing),
                         provenance=provenance_from_pb(msg.provenance))


def bundle_info_from_pb(msg: pb.BundleInfo) -> r.BundleInfo:
    return r.BundleInfo(
        bundle_id=msg.bundle_id,
        model_id=msg.model_id,
        detectors=tuple(msg.detectors),
        n_samples=msg.n_samples,
        n_features=msg.n_features,
        threshold=msg.threshold,
        created=msg.created,
        filter=filter_from_pb(msg.filter),
        stats=fit_stats_from_pb(msg.stats),
        space=msg.space,
        score_adaptation=msg.score_adaptation,
        calibration=msg.calibration,
        fit_groups=msg.fit_groups,
    )


def server_info_from_pb(msg: pb.GetInfoResponse) -> r.ServerInfo:
    return r.ServerInfo(
        server_version=msg.server_version,
        active_model=model_info_from_pb(msg.active_model) if msg.HasField("active_model") else None,
        bundle=bundle_info_from_pb(msg.bundle) if msg.HasField("bundle") else None,
        env_counts={c.env: c.rows for c in msg.env_counts},
        total_rows=msg.total_rows,
        table_version=msg.table_version,
        data_dir=msg.data_dir,
        hint=msg.hint,
        index_rows=msg.index_rows,
    )


def row_to_dict(row: pb.Row, with_vector: bool) -> dict:
    """An exported Row message as a plain dict with the store's column names."""
    out: dict[str, Any] = {
        "id": row.id,
        "env": row.env,
        "label": row.label,
        "split": row.split,
        "timestamp": timestamp_from_pb(row.timestamp, row.HasField("timestamp")),
        "uri": row.uri,
        "sha256": row.sha256,
        "model_id": row.model_id,
        "ingested_at": timestamp_from_pb(row.ingested_at, row.HasField("ingested_at")),
        "event": row.event,
    }
    if with_vector:
        out["vector"] = list(row.vector)
    return out


def export_chunk_from_pb(chunk: pb.ExportChunk, with_vectors: bool) -> list:
    """The pyarrow RecordBatches of one ExportChunk (Arrow IPC or Row messages).

    pyarrow is imported here, not at the top: only exports need it.
    """
    payload = chunk.WhichOneof("payload")
    if payload == "arrow_ipc":
        return pa.ipc.open_stream(chunk.arrow_ipc).read_all().to_batches()
    if payload == "rows" and chunk.rows.rows:
        return [pa.RecordBatch.from_pylist([row_to_dict(row, with_vectors)
                                            for row in chunk.rows.rows])]
    return []
