"""Plain records that are the same on both sides of the wire, and the image-id rule.

The server's engine returns them and the client library hands them to callers; each
side's converter (`envad.server.convert`, `envad.client.convert`) maps them to and from
envad.v1 messages. No protobuf, gRPC, FAISS or LanceDB here: importing this is cheap.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path

#: The split of a stored image when the caller names none (Ingest, Score with store).
INGEST_SPLIT = "archive"
#: The split the server's Fit uses when its filter is empty, and the one `envad fit`
#: prefers when any stored row has it (`envad backfill` of a folder-format dataset).
FIT_SPLIT = "train"

#: The fewest rows the server's Fit accepts unless the request allows fewer
#: (`allow_few_rows`, `envad fit --allow-few-rows`): calibrated scores are percentiles
#: among the fit rows (steps of 1/n), and the detectors that estimate a covariance (PCA,
#: OCSVM and LOF5 after scaling) degenerate on fewer rows than embedding dimensions.
MIN_FIT_ROWS = 100


def sha256_hex(data: bytes) -> str:
    """The default envad id of an image: the lowercase hex sha256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


#: the labels of the review loop (`envad label --normal / --anomaly`, the SetLabel RPC):
#: a row labelled NORMAL_LABEL joins its camera's fit; ANOMALY_LABEL is the default of
#: the server's `anomaly_labels` (never fit on, never a normal neighbour)
NORMAL_LABEL = "normal"
ANOMALY_LABEL = "anomaly"

@dataclass(frozen=True)
class ItemError:
    """A problem with one item of a batch or stream (never aborts the batch)."""

    index: int
    id: str
    code: str
    message: str


@dataclass(frozen=True)
class Provenance:
    """Which encoder, detector bundle and store version produced a result."""

    model_id: str = ""
    model_sha256: str = ""
    bundle_id: str = ""
    table_version: int = 0
    server_version: str = ""
    space: str = ""
    score_adaptation: str = ""


@dataclass(frozen=True)
class ImageInput:
    """One image to score, embed or ingest. Empty `id`: the server uses sha256(data)."""

    data: bytes
    id: str = ""
    env: str = ""
    timestamp: datetime | None = None
    uri: str = ""
    #: the event (burst) within its camera, e.g. a Camtrap DP eventID; "" for none
    event: str = ""

    @classmethod
    def from_path(cls, path: str | Path, env: str = "", id: str = "") -> ImageInput:
        """Read an image file; its path becomes the uri."""
        path = Path(path)
        return cls(data=path.read_bytes(), id=id, env=env, uri=str(path))

    @cached_property
    def sha256(self) -> str:
        """sha256_hex of the bytes, computed once (a Score uses it for the id and to
        keep the image out of its own neighbours)."""
        return sha256_hex(self.data)

    def resolved_id(self) -> str:
        """The id the server stores the image under: the caller's, else sha256(data)."""
        return self.id or self.sha256


@dataclass(frozen=True)
class IngestInput:
    """One item of a backfill: the image plus its class label and split."""

    image: ImageInput
    label: str = ""
    split: str = INGEST_SPLIT


@dataclass(frozen=True)
class RowFilter:
    """Structured row filter: OR within a field, AND across fields; empty matches all."""

    envs: tuple[str, ...] = ()
    splits: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        return not (self.envs or self.splits or self.labels)

    def as_dict(self) -> dict[str, list[str]]:
        return {"envs": list(self.envs), "splits": list(self.splits), "labels": list(self.labels)}


@dataclass(frozen=True)
class Neighbor:
    """A stored row close to a query (evidence for a score): its metadata, L2 distance."""

    id: str
    env: str
    label: str
    split: str
    uri: str
    distance: float


@dataclass(frozen=True)
class ModelInfo:
    """An encoder file in the server's model directory, with its metadata
    (docs/model-format.md); `active` says whether it is the one serving."""

    model_id: str
    file: str
    sha256: str
    input_size: int
    embedding_dim: int
    algorithm: str
    training_envs: tuple[str, ...]
    dataset: str
    created: str
    active: bool = False
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelList:
    """The encoders of the models directory (ListModels)."""

    models: tuple[ModelInfo, ...]
    models_dir: str


@dataclass(frozen=True)
class DetectorFitStats:
    detector: str
    fit_seconds: float
    n_samples: int


@dataclass(frozen=True)
class BundleInfo:
    """What a fitted detector bundle is: its detectors, fit set, threshold, space step."""

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
    score_adaptation: str = ""
    calibration: str = ""
    fit_groups: str = ""     # how a scored fit row leaves out its group ("": it does not)


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
