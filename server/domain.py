"""Plain server-side records exchanged between the servicer's conversions and the engine.

No protobuf, FAISS or LanceDB here (a test checks that importing this module loads
neither): `convert.py` maps these to and from envad.v1 messages. Records that are the same
on both sides of the wire (images, filters, neighbours, model and server info) live in
`envad.records`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from envad.records import BundleInfo, ItemError, Neighbor, Provenance, RowFilter


@dataclass(frozen=True)
class ScoreOptions:
    threshold: float | None = None
    top_k: int = 0
    neighbor_filter: RowFilter | None = None
    store: bool = False
    split: str = ""
    label: str = ""


@dataclass
class ImageResult:
    index: int
    id: str
    env: str
    error: ItemError | None = None
    raw: dict[str, float] = field(default_factory=dict)
    calibrated: dict[str, float] = field(default_factory=dict)
    ensemble: float = 0.0
    is_anomaly: bool = False
    threshold: float = 0.0
    neighbors: list[Neighbor] = field(default_factory=list)
    stored: bool = False
    adaptation: str = ""


@dataclass(frozen=True)
class ScoreOutcome:
    results: list[ImageResult]
    provenance: Provenance


@dataclass(frozen=True)
class EmbedOutcome:
    vectors: list  # per item: np.ndarray or None
    failures: list[ItemError]
    ids: list[str]
    dim: int
    provenance: Provenance


@dataclass
class IngestTotals:
    received: int = 0
    inserted: int = 0
    duplicates: int = 0
    failures: list[ItemError] = field(default_factory=list)
    provenance: Provenance = field(default_factory=Provenance)


@dataclass(frozen=True)
class FitOptions:
    row_filter: RowFilter = RowFilter(splits=("train",))
    detectors: tuple[str, ...] = ()
    max_samples: int = 0
    contamination: float = 0.0
    stylist: bool = False
    stylist_drop_fraction: float = 0.0
    seed: int = 0
    activate: bool = True
    space: str = "raw"
    min_camera_rows: int = 32


@dataclass(frozen=True)
class FitOutcome:
    bundle: BundleInfo
    activated: bool
    provenance: Provenance
