"""Typed inputs and results of the client library: plain frozen dataclasses, no protobuf.

`envad.client.convert` builds them from the wire messages; callers never see `_pb2`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from envad.records import ItemError, Provenance
from envad.records import sha256_hex as sha256_hex  # the client's id rule, re-exported


@dataclass(frozen=True)
class ImageInput:
    """One image to score, embed or ingest. Empty `id`: the server uses sha256(data)."""

    data: bytes
    id: str = ""
    env: str = ""
    timestamp: datetime | None = None
    uri: str = ""

    @classmethod
    def from_path(cls, path: str | Path, env: str = "", id: str = "") -> ImageInput:
        """Read an image file; its path becomes the uri."""
        path = Path(path)
        return cls(data=path.read_bytes(), id=id, env=env, uri=str(path))


@dataclass(frozen=True)
class IngestInput:
    """One item of a backfill: the image plus its class label and split."""

    image: ImageInput
    label: str = ""
    split: str = "archive"


@dataclass(frozen=True)
class RowFilter:
    """Structured row filter: lists are OR within a field, AND across fields."""

    envs: tuple[str, ...] = ()
    splits: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Neighbor:
    """A stored row close to a query (evidence for a score)."""

    id: str
    env: str
    label: str
    split: str
    uri: str
    distance: float


@dataclass(frozen=True)
class DetectorScore:
    """One detector's raw score and its calibrated percentile in [0, 1]."""

    detector: str
    raw: float
    calibrated: float


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
class DetectorFitStats:
    detector: str
    fit_seconds: float
    n_samples: int


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


@dataclass(frozen=True)
class ModelInfo:
    """An encoder file in the server's model directory, with its metadata."""

    model_id: str
    file: str
    sha256: str
    input_size: int
    embedding_dim: int
    algorithm: str
    training_envs: tuple[str, ...]
    dataset: str
    created: str
    active: bool
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelList:
    models: tuple[ModelInfo, ...]
    models_dir: str


@dataclass(frozen=True)
class BundleInfo:
    bundle_id: str
    model_id: str
    detectors: tuple[str, ...]
    n_samples: int
    n_features: int
    threshold: float
    created: str
    filter: RowFilter
    stats: tuple[DetectorFitStats, ...]
    space: str = ""


@dataclass(frozen=True)
class ServerInfo:
    """The server's state: version, active encoder and bundle, rows per environment."""

    server_version: str
    active_model: ModelInfo | None
    bundle: BundleInfo | None
    env_counts: dict[str, int]
    total_rows: int
    table_version: int
    data_dir: str
    hint: str
    index_rows: int
