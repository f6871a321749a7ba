"""All conversions between envad.v1 protobuf messages and the server's domain types.

The only server module besides service.py that imports the generated `_pb2` code.
"""

from __future__ import annotations

import datetime as dt
from typing import Sequence

import numpy as np
import pyarrow as pa

from envad.pipeline import DEFAULT_PIPELINE
from envad.server.detectors.geometry import DEFAULT_MIN_CAMERA_ROWS
from envad.server.domain import (
    EmbedOutcome, FitOptions, FitOutcome, ImageInput, ImageResult, IngestTotals, ItemError,
    Provenance, ScoreOptions, ScoreOutcome, ServerInfo,
)
from envad.server.encoder import ModelMeta
from envad.server.index import Hit
from envad.server.store import RowFilter
from envad.v1 import envad_pb2 as pb

# ------------------------------------------------------------------ requests -> domain


def image_in(msg: pb.Image, *, label: str = "", split: str = "") -> ImageInput:
    timestamp = msg.timestamp.ToDatetime(tzinfo=dt.timezone.utc) \
        if msg.HasField("timestamp") else None
    return ImageInput(data=msg.data, id=msg.id, env=msg.env, timestamp=timestamp, uri=msg.uri,
                      label=label, split=split)


def filter_in(msg: pb.Filter) -> RowFilter:
    return RowFilter(envs=tuple(msg.envs), splits=tuple(msg.splits), labels=tuple(msg.labels))


def score_options_in(msg: pb.ScoreRequest) -> ScoreOptions:
    neighbor_filter = filter_in(msg.neighbor_filter)
    return ScoreOptions(
        threshold=msg.threshold if msg.HasField("threshold") else None,
        top_k=msg.top_k, neighbor_filter=None if neighbor_filter.is_empty() else neighbor_filter,
        store=msg.store, split=msg.split, label=msg.label,
    )


def ingest_chunk_in(msg: pb.IngestRequest) -> list[ImageInput]:
    return [image_in(item.image, label=item.label, split=item.split) for item in msg.items]


def fit_options_in(msg: pb.FitRequest) -> FitOptions:
    row_filter = filter_in(msg.filter)
    return FitOptions(
        space=msg.space or DEFAULT_PIPELINE.space,
        min_camera_rows=msg.min_camera_rows or DEFAULT_MIN_CAMERA_ROWS,
        row_filter=RowFilter(splits=("train",)) if row_filter.is_empty() else row_filter,
        detectors=tuple(msg.detectors), max_samples=msg.max_samples,
        contamination=msg.contamination, stylist=msg.stylist.enabled,
        stylist_drop_fraction=msg.stylist.drop_fraction, seed=msg.seed,
        activate=not msg.no_activate,
    )


# ------------------------------------------------------------------ domain -> responses


def provenance_out(p: Provenance) -> pb.Provenance:
    return pb.Provenance(model_id=p.model_id, model_sha256=p.model_sha256,
                         bundle_id=p.bundle_id, table_version=p.table_version,
                         server_version=p.server_version, space=p.space)


def failure_out(f: ItemError) -> pb.ItemError:
    return pb.ItemError(index=f.index, id=f.id, code=f.code, message=f.message)


def neighbor_out(h: Hit) -> pb.Neighbor:
    return pb.Neighbor(id=h.id, env=h.env, label=h.label, split=h.split, uri=h.uri,
                       distance=h.distance)


def image_score_out(r: ImageResult) -> pb.ImageScore:
    msg = pb.ImageScore(index=r.index, id=r.id, env=r.env)
    if r.error is not None:
        msg.error.CopyFrom(failure_out(r.error))
        return msg
    msg.detectors.extend(pb.DetectorScore(detector=name, raw=r.raw[name],
                                          calibrated=r.calibrated[name]) for name in r.raw)
    msg.ensemble = r.ensemble
    msg.is_anomaly = r.is_anomaly
    msg.threshold = r.threshold
    msg.neighbors.extend(neighbor_out(h) for h in r.neighbors)
    msg.stored = r.stored
    msg.adaptation = r.adaptation
    return msg


def score_out(outcome: ScoreOutcome) -> pb.ScoreResponse:
    return pb.ScoreResponse(results=[image_score_out(r) for r in outcome.results],
                            provenance=provenance_out(outcome.provenance))


def embed_out(outcome: EmbedOutcome) -> pb.EmbedResponse:
    failures = {f.index: f for f in outcome.failures}
    embeddings = []
    for index, (row_id, vector) in enumerate(zip(outcome.ids, outcome.vectors)):
        msg = pb.Embedding(index=index, id=row_id)
        if index in failures:
            msg.error.CopyFrom(failure_out(failures[index]))
        else:
            msg.vector.extend(np.asarray(vector, dtype=np.float32).tolist())
        embeddings.append(msg)
    return pb.EmbedResponse(embeddings=embeddings, dim=outcome.dim,
                            provenance=provenance_out(outcome.provenance))


def ingest_out(totals: IngestTotals) -> pb.IngestSummary:
    return pb.IngestSummary(received=totals.received, inserted=totals.inserted,
                            duplicates=totals.duplicates, failed=len(totals.failures),
                            failures=[failure_out(f) for f in totals.failures],
                            provenance=provenance_out(totals.provenance))


def search_out(hits: Sequence[Hit], provenance: Provenance) -> pb.SearchResponse:
    return pb.SearchResponse(neighbors=[neighbor_out(h) for h in hits],
                             provenance=provenance_out(provenance))


def _stats_out(bundle) -> list[pb.DetectorFitStats]:
    return [pb.DetectorFitStats(detector=name, fit_seconds=float(s["fit_seconds"]),
                                n_samples=int(s["n_samples"]))
            for name, s in bundle.stats.items()]


def _filter_out(spec: dict | None) -> pb.Filter:
    spec = spec or {}
    return pb.Filter(envs=spec.get("envs", []), splits=spec.get("splits", []),
                     labels=spec.get("labels", []))


def bundle_out(bundle) -> pb.BundleInfo:
    return pb.BundleInfo(bundle_id=bundle.bundle_id, model_id=bundle.model_id,
                         detectors=list(bundle.detectors), n_samples=int(bundle.n_samples),
                         n_features=int(bundle.n_features), threshold=float(bundle.threshold),
                         created=str(bundle.created), filter=_filter_out(bundle.fit_filter),
                         stats=_stats_out(bundle), space=bundle.space.describe())


def fit_out(outcome: FitOutcome) -> pb.FitResponse:
    b = outcome.bundle
    return pb.FitResponse(bundle_id=b.bundle_id, stats=_stats_out(b), n_samples=int(b.n_samples),
                          n_features=int(b.n_features), threshold=float(b.threshold),
                          activated=outcome.activated, space=b.space.describe(),
                          provenance=provenance_out(outcome.provenance))


def model_out(meta: ModelMeta, active: bool) -> pb.ModelInfo:
    return pb.ModelInfo(model_id=meta.model_id, file=meta.file, sha256=meta.sha256,
                        input_size=meta.input_size, embedding_dim=meta.embedding_dim,
                        algorithm=meta.algorithm, training_envs=list(meta.training_envs),
                        dataset=meta.dataset, created=meta.created, active=active,
                        metadata=meta.metadata)


def info_out(info: ServerInfo) -> pb.GetInfoResponse:
    msg = pb.GetInfoResponse(server_version=info.server_version, total_rows=info.total_rows,
                             table_version=info.table_version, data_dir=info.data_dir,
                             hint=info.hint, index_rows=info.index_rows,
                             env_counts=[pb.EnvCount(env=e, rows=n)
                                         for e, n in sorted(info.env_counts.items())])
    if info.active_model is not None:
        msg.active_model.CopyFrom(model_out(info.active_model, True))
    if info.bundle is not None:
        msg.bundle.CopyFrom(bundle_out(info.bundle))
    return msg


def rows_out(batch: pa.RecordBatch) -> pb.RowBatch:
    """An Arrow record batch of store rows as a RowBatch message."""
    data = batch.to_pydict()
    vectors = data.get("vector")
    rows = []
    for i, row_id in enumerate(data["id"]):
        row = pb.Row(id=row_id, env=data["env"][i] or "", label=data["label"][i] or "",
                     split=data["split"][i] or "", uri=data["uri"][i] or "",
                     sha256=data["sha256"][i] or "", model_id=data["model_id"][i] or "")
        for name in ("timestamp", "ingested_at"):
            if data[name][i] is not None:
                getattr(row, name).FromDatetime(data[name][i])
        if vectors is not None:
            row.vector.extend(vectors[i])
        rows.append(row)
    return pb.RowBatch(rows=rows)


def arrow_ipc_out(batch: pa.RecordBatch) -> bytes:
    """An Arrow record batch as a self-contained IPC stream (schema + batch)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()
