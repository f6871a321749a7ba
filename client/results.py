"""Typed inputs and results of the client library: plain frozen dataclasses, no protobuf.

The client-only results (scores as the client sees them, embeddings, summaries) are
defined here; the shared ones come from envad.records.

`envad.client.convert` builds them from the wire messages; callers never see `_pb2`.
"""

from __future__ import annotations

from dataclasses import dataclass

# The records identical on both sides of the wire live in envad.records; re-exported so
# callers find every type of the client library here.
from envad.records import (  # noqa: F401
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
    sha256_hex,
)


@dataclass(frozen=True)
class DetectorScore:
    """One detector's raw score, that score on the fit set's scale for the image's camera
    (`adapted`, equal to raw when the bundle does not adapt scores) and its calibrated
    percentile in [0, 1]."""

    detector: str
    raw: float
    calibrated: float
    adapted: float = 0.0


@dataclass(frozen=True)
class ImageScore:
    """The scores of one image; `error` is set (and scores empty) when it failed."""

    index: int
    id: str
    env: str
    error: ItemError | None
    detectors: tuple[DetectorScore, ...]
    ensemble: float
    is_anomaly: bool
    threshold: float
    neighbors: tuple[Neighbor, ...]
    stored: bool
    adaptation: str = ""    # how the space step placed the camera ("fit", "camera", "global")
    camera_weight: float = 0.0   # weight of the camera's own score statistics in `adapted`

    @property
    def ok(self) -> bool:
        return self.error is None

    def detector_scores(self, calibrated: bool = False) -> dict[str, float]:
        """Detector name -> raw (default) or calibrated score."""
        return {d.detector: (d.calibrated if calibrated else d.raw) for d in self.detectors}


@dataclass(frozen=True)
class ScoreResult:
    results: tuple[ImageScore, ...]
    provenance: Provenance


@dataclass(frozen=True)
class Embedding:
    index: int
    id: str
    error: ItemError | None
    vector: tuple[float, ...]


@dataclass(frozen=True)
class EmbedResult:
    embeddings: tuple[Embedding, ...]
    dim: int
    provenance: Provenance


@dataclass(frozen=True)
class IngestSummary:
    """What one Ingest stream did: rows inserted, ids already stored, failures."""

    received: int
    inserted: int
    duplicates: int
    failed: int
    failures: tuple[ItemError, ...]
    provenance: Provenance


@dataclass(frozen=True)
class SearchResult:
    neighbors: tuple[Neighbor, ...]
    provenance: Provenance


@dataclass(frozen=True)
class FitResult:
    bundle_id: str
    stats: tuple[DetectorFitStats, ...]
    n_samples: int
    n_features: int
    threshold: float
    activated: bool
    provenance: Provenance
    space: str = ""
    score_adaptation: str = ""
    fit_groups: str = ""


@dataclass(frozen=True)
class LabelResult:
    """What SetLabel did: the ids relabelled, and the requested ids not stored."""

    updated: tuple[str, ...]
    missing: tuple[str, ...]
    provenance: Provenance
