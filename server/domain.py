"""Plain server-side records exchanged between the servicer's conversions and the engine.

No protobuf, FAISS or LanceDB here (a test checks that importing this module loads
neither): `convert.py` maps these to and from envad.v1 messages. Records that are the same
on both sides of the wire (images, filters, neighbours, model and server info) live in
`envad.records`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from envad.records import (
    FIT_SPLIT,
    BundleInfo,
    ImageInput,
    ItemError,
    ModelInfo,
    Neighbor,
    Provenance,
    RowFilter,
)

#: Neighbours a Search returns when the request names no k.
DEFAULT_SEARCH_K = 10
#: Rows per Export chunk when the request names no batch size.
DEFAULT_EXPORT_BATCH_SIZE = 4096
#: The rows Fit uses when the request's filter is empty.
DEFAULT_FIT_FILTER = RowFilter(splits=(FIT_SPLIT,))

# The option records below are fully resolved: the request converters (convert.py) fill
# every default from these constants and the server config, so the engine never sees
# "0 means default".


@dataclass(frozen=True)
class RejectedImage(ImageInput):
    """An item whose fields broke a request limit (server/limits.py): reported as that
    item's INVALID_ARGUMENT error, never decoded or stored."""

    problem: str = ""


@dataclass(frozen=True)
class ScoreOptions:
    """How to score a batch; `threshold` None means the bundle's own threshold."""

    top_k: int
    split: str                     # of stored images (`store`)
    threshold: float | None = None
    neighbor_filter: RowFilter | None = None   # None: the bundle's fit filter
    store: bool = False
    label: str = ""
    include_self: bool = False                 # may an image's own stored row be evidence
    exclude_labels: tuple[str, ...] = ()       # labels of rows never returned as evidence
    reuse_stored: bool = False                 # stored embedding of a stored image


@dataclass(frozen=True)
class SearchQuery:
    """Exactly one of `image`, `vector` or `row_id`, the k nearest rows matching a filter."""

    k: int
    row_filter: RowFilter
    image: bytes | None = None
    vector: tuple[float, ...] | None = None
    row_id: str | None = None
    exclude_self: bool = False                 # leave out the queried row/image itself
    exclude_labels: tuple[str, ...] = ()       # labels of rows never returned


@dataclass(frozen=True)
class SearchOutcome:
    neighbors: list[Neighbor]
    provenance: Provenance


@dataclass(frozen=True)
class ExportOptions:
    row_filter: RowFilter
    batch_size: int
    with_vectors: bool


@dataclass(frozen=True)
class Activation:
    """The model ActivateModel made active, and the provenance it now serves with."""

    model: ModelInfo
    provenance: Provenance


@dataclass(frozen=True)
class CameraStatsReset:
    """The cameras whose running statistics were forgotten."""

    envs: tuple[str, ...]
    provenance: Provenance


@dataclass(frozen=True)
class LabelOutcome:
    """What SetLabel did: the ids relabelled and the requested ids not stored."""

    updated: tuple[str, ...]
    missing: tuple[str, ...]
    provenance: Provenance


@dataclass(frozen=True)
class ExportOutcome:
    batches: Iterator   # of pyarrow.RecordBatch, read lazily from the store
    provenance: Provenance


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
    adapted: dict[str, float] = field(default_factory=dict)
    camera_weight: float = 0.0


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
    """What to fit on and how; `stylist_drop_fraction` None means no Stylist step."""

    row_filter: RowFilter
    detectors: tuple[str, ...]
    max_samples: int
    contamination: float
    stylist_drop_fraction: float | None
    space: str
    min_camera_rows: int
    score_adaptation: str = "none"
    seed: int = 0
    activate: bool = True
    allow_few_rows: bool = False   # fit on fewer than MIN_FIT_ROWS rows
    # the fit rows' event gap, resolved (the wire's 0 is 60 s by now; leave_out.py);
    # 0: each row an event of its own
    event_gap_s: float = 0.0


@dataclass(frozen=True)
class FitOutcome:
    bundle: BundleInfo
    activated: bool
    provenance: Provenance
