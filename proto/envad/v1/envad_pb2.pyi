import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExportFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXPORT_FORMAT_UNSPECIFIED: _ClassVar[ExportFormat]
    EXPORT_FORMAT_ARROW_IPC: _ClassVar[ExportFormat]
    EXPORT_FORMAT_ROWS: _ClassVar[ExportFormat]
EXPORT_FORMAT_UNSPECIFIED: ExportFormat
EXPORT_FORMAT_ARROW_IPC: ExportFormat
EXPORT_FORMAT_ROWS: ExportFormat

class Image(_message.Message):
    __slots__ = ("data", "id", "env", "timestamp", "uri", "event")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    id: str
    env: str
    timestamp: _timestamp_pb2.Timestamp
    uri: str
    event: str
    def __init__(self, data: _Optional[bytes] = ..., id: _Optional[str] = ..., env: _Optional[str] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., uri: _Optional[str] = ..., event: _Optional[str] = ...) -> None: ...

class Filter(_message.Message):
    __slots__ = ("envs", "splits", "labels")
    ENVS_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    envs: _containers.RepeatedScalarFieldContainer[str]
    splits: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, envs: _Optional[_Iterable[str]] = ..., splits: _Optional[_Iterable[str]] = ..., labels: _Optional[_Iterable[str]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("index", "id", "code", "message")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    code: str
    message: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("model_id", "model_sha256", "bundle_id", "table_version", "server_version", "space", "score_adaptation")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    SCORE_ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    model_sha256: str
    bundle_id: str
    table_version: int
    server_version: str
    space: str
    score_adaptation: str
    def __init__(self, model_id: _Optional[str] = ..., model_sha256: _Optional[str] = ..., bundle_id: _Optional[str] = ..., table_version: _Optional[int] = ..., server_version: _Optional[str] = ..., space: _Optional[str] = ..., score_adaptation: _Optional[str] = ...) -> None: ...

class Neighbor(_message.Message):
    __slots__ = ("id", "env", "label", "split", "uri", "distance")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    env: str
    label: str
    split: str
    uri: str
    distance: float
    def __init__(self, id: _Optional[str] = ..., env: _Optional[str] = ..., label: _Optional[str] = ..., split: _Optional[str] = ..., uri: _Optional[str] = ..., distance: _Optional[float] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("images", "store", "split", "label", "threshold", "top_k", "neighbor_filter", "include_self", "include_known_anomalies", "reuse_stored")
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOR_FILTER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SELF_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_KNOWN_ANOMALIES_FIELD_NUMBER: _ClassVar[int]
    REUSE_STORED_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedCompositeFieldContainer[Image]
    store: bool
    split: str
    label: str
    threshold: float
    top_k: int
    neighbor_filter: Filter
    include_self: bool
    include_known_anomalies: bool
    reuse_stored: bool
    def __init__(self, images: _Optional[_Iterable[_Union[Image, _Mapping]]] = ..., store: _Optional[bool] = ..., split: _Optional[str] = ..., label: _Optional[str] = ..., threshold: _Optional[float] = ..., top_k: _Optional[int] = ..., neighbor_filter: _Optional[_Union[Filter, _Mapping]] = ..., include_self: _Optional[bool] = ..., include_known_anomalies: _Optional[bool] = ..., reuse_stored: _Optional[bool] = ...) -> None: ...

class DetectorScore(_message.Message):
    __slots__ = ("detector", "raw", "calibrated", "adapted")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    CALIBRATED_FIELD_NUMBER: _ClassVar[int]
    ADAPTED_FIELD_NUMBER: _ClassVar[int]
    detector: str
    raw: float
    calibrated: float
    adapted: float
    def __init__(self, detector: _Optional[str] = ..., raw: _Optional[float] = ..., calibrated: _Optional[float] = ..., adapted: _Optional[float] = ...) -> None: ...

class ImageScore(_message.Message):
    __slots__ = ("index", "id", "env", "error", "detectors", "ensemble", "is_anomaly", "threshold", "neighbors", "stored", "adaptation", "camera_weight")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DETECTORS_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_FIELD_NUMBER: _ClassVar[int]
    IS_ANOMALY_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    NEIGHBORS_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    CAMERA_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    env: str
    error: ItemError
    detectors: _containers.RepeatedCompositeFieldContainer[DetectorScore]
    ensemble: float
    is_anomaly: bool
    threshold: float
    neighbors: _containers.RepeatedCompositeFieldContainer[Neighbor]
    stored: bool
    adaptation: str
    camera_weight: float
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., env: _Optional[str] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ..., detectors: _Optional[_Iterable[_Union[DetectorScore, _Mapping]]] = ..., ensemble: _Optional[float] = ..., is_anomaly: _Optional[bool] = ..., threshold: _Optional[float] = ..., neighbors: _Optional[_Iterable[_Union[Neighbor, _Mapping]]] = ..., stored: _Optional[bool] = ..., adaptation: _Optional[str] = ..., camera_weight: _Optional[float] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("results", "provenance", "error")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ImageScore]
    provenance: Provenance
    error: ItemError
    def __init__(self, results: _Optional[_Iterable[_Union[ImageScore, _Mapping]]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("images", "model_id")
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedCompositeFieldContainer[Image]
    model_id: str
    def __init__(self, images: _Optional[_Iterable[_Union[Image, _Mapping]]] = ..., model_id: _Optional[str] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("index", "id", "error", "vector")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    error: ItemError
    vector: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ..., vector: _Optional[_Iterable[float]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("embeddings", "provenance", "dim")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    provenance: Provenance
    dim: int
    def __init__(self, embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., dim: _Optional[int] = ...) -> None: ...

class IngestItem(_message.Message):
    __slots__ = ("image", "label", "split")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    image: Image
    label: str
    split: str
    def __init__(self, image: _Optional[_Union[Image, _Mapping]] = ..., label: _Optional[str] = ..., split: _Optional[str] = ...) -> None: ...

class IngestRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[IngestItem]
    def __init__(self, items: _Optional[_Iterable[_Union[IngestItem, _Mapping]]] = ...) -> None: ...

class IngestSummary(_message.Message):
    __slots__ = ("received", "inserted", "duplicates", "failed", "failures", "provenance")
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    received: int
    inserted: int
    duplicates: int
    failed: int
    failures: _containers.RepeatedCompositeFieldContainer[ItemError]
    provenance: Provenance
    def __init__(self, received: _Optional[int] = ..., inserted: _Optional[int] = ..., duplicates: _Optional[int] = ..., failed: _Optional[int] = ..., failures: _Optional[_Iterable[_Union[ItemError, _Mapping]]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class Vector(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("image", "vector", "id", "k", "filter", "exclude_self", "exclude_known_anomalies")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_SELF_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_KNOWN_ANOMALIES_FIELD_NUMBER: _ClassVar[int]
    image: bytes
    vector: Vector
    id: str
    k: int
    filter: Filter
    exclude_self: bool
    exclude_known_anomalies: bool
    def __init__(self, image: _Optional[bytes] = ..., vector: _Optional[_Union[Vector, _Mapping]] = ..., id: _Optional[str] = ..., k: _Optional[int] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., exclude_self: _Optional[bool] = ..., exclude_known_anomalies: _Optional[bool] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("neighbors", "provenance")
    NEIGHBORS_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    neighbors: _containers.RepeatedCompositeFieldContainer[Neighbor]
    provenance: Provenance
    def __init__(self, neighbors: _Optional[_Iterable[_Union[Neighbor, _Mapping]]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class StylistOptions(_message.Message):
    __slots__ = ("enabled", "drop_fraction")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    DROP_FRACTION_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    drop_fraction: float
    def __init__(self, enabled: _Optional[bool] = ..., drop_fraction: _Optional[float] = ...) -> None: ...

class FitRequest(_message.Message):
    __slots__ = ("filter", "detectors", "max_samples", "contamination", "stylist", "seed", "no_activate", "space", "min_camera_rows", "allow_few_rows", "score_adaptation", "event_gap_s")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    DETECTORS_FIELD_NUMBER: _ClassVar[int]
    MAX_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CONTAMINATION_FIELD_NUMBER: _ClassVar[int]
    STYLIST_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    NO_ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    MIN_CAMERA_ROWS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_FEW_ROWS_FIELD_NUMBER: _ClassVar[int]
    SCORE_ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    EVENT_GAP_S_FIELD_NUMBER: _ClassVar[int]
    filter: Filter
    detectors: _containers.RepeatedScalarFieldContainer[str]
    max_samples: int
    contamination: float
    stylist: StylistOptions
    seed: int
    no_activate: bool
    space: str
    min_camera_rows: int
    allow_few_rows: bool
    score_adaptation: str
    event_gap_s: float
    def __init__(self, filter: _Optional[_Union[Filter, _Mapping]] = ..., detectors: _Optional[_Iterable[str]] = ..., max_samples: _Optional[int] = ..., contamination: _Optional[float] = ..., stylist: _Optional[_Union[StylistOptions, _Mapping]] = ..., seed: _Optional[int] = ..., no_activate: _Optional[bool] = ..., space: _Optional[str] = ..., min_camera_rows: _Optional[int] = ..., allow_few_rows: _Optional[bool] = ..., score_adaptation: _Optional[str] = ..., event_gap_s: _Optional[float] = ...) -> None: ...

class DetectorFitStats(_message.Message):
    __slots__ = ("detector", "fit_seconds", "n_samples")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    FIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    N_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    detector: str
    fit_seconds: float
    n_samples: int
    def __init__(self, detector: _Optional[str] = ..., fit_seconds: _Optional[float] = ..., n_samples: _Optional[int] = ...) -> None: ...

class FitResponse(_message.Message):
    __slots__ = ("bundle_id", "stats", "n_samples", "n_features", "threshold", "activated", "provenance", "space", "score_adaptation", "fit_groups")
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    N_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    N_FEATURES_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    ACTIVATED_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    SCORE_ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    FIT_GROUPS_FIELD_NUMBER: _ClassVar[int]
    bundle_id: str
    stats: _containers.RepeatedCompositeFieldContainer[DetectorFitStats]
    n_samples: int
    n_features: int
    threshold: float
    activated: bool
    provenance: Provenance
    space: str
    score_adaptation: str
    fit_groups: str
    def __init__(self, bundle_id: _Optional[str] = ..., stats: _Optional[_Iterable[_Union[DetectorFitStats, _Mapping]]] = ..., n_samples: _Optional[int] = ..., n_features: _Optional[int] = ..., threshold: _Optional[float] = ..., activated: _Optional[bool] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., space: _Optional[str] = ..., score_adaptation: _Optional[str] = ..., fit_groups: _Optional[str] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("filter", "format", "batch_size", "without_vectors")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_VECTORS_FIELD_NUMBER: _ClassVar[int]
    filter: Filter
    format: ExportFormat
    batch_size: int
    without_vectors: bool
    def __init__(self, filter: _Optional[_Union[Filter, _Mapping]] = ..., format: _Optional[_Union[ExportFormat, str]] = ..., batch_size: _Optional[int] = ..., without_vectors: _Optional[bool] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("id", "env", "label", "split", "timestamp", "uri", "sha256", "model_id", "ingested_at", "vector", "event")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    INGESTED_AT_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    env: str
    label: str
    split: str
    timestamp: _timestamp_pb2.Timestamp
    uri: str
    sha256: str
    model_id: str
    ingested_at: _timestamp_pb2.Timestamp
    vector: _containers.RepeatedScalarFieldContainer[float]
    event: str
    def __init__(self, id: _Optional[str] = ..., env: _Optional[str] = ..., label: _Optional[str] = ..., split: _Optional[str] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., uri: _Optional[str] = ..., sha256: _Optional[str] = ..., model_id: _Optional[str] = ..., ingested_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., vector: _Optional[_Iterable[float]] = ..., event: _Optional[str] = ...) -> None: ...

class RowBatch(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    def __init__(self, rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ...) -> None: ...

class ExportChunk(_message.Message):
    __slots__ = ("arrow_ipc", "rows", "provenance")
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    arrow_ipc: bytes
    rows: RowBatch
    provenance: Provenance
    def __init__(self, arrow_ipc: _Optional[bytes] = ..., rows: _Optional[_Union[RowBatch, _Mapping]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("model_id", "file", "sha256", "input_size", "embedding_dim", "algorithm", "training_envs", "dataset", "created", "active", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    INPUT_SIZE_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIM_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    TRAINING_ENVS_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    file: str
    sha256: str
    input_size: int
    embedding_dim: int
    algorithm: str
    training_envs: _containers.RepeatedScalarFieldContainer[str]
    dataset: str
    created: str
    active: bool
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, model_id: _Optional[str] = ..., file: _Optional[str] = ..., sha256: _Optional[str] = ..., input_size: _Optional[int] = ..., embedding_dim: _Optional[int] = ..., algorithm: _Optional[str] = ..., training_envs: _Optional[_Iterable[str]] = ..., dataset: _Optional[str] = ..., created: _Optional[str] = ..., active: _Optional[bool] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "models_dir")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    MODELS_DIR_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    models_dir: str
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., models_dir: _Optional[str] = ...) -> None: ...

class ActivateModelRequest(_message.Message):
    __slots__ = ("model_id",)
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    def __init__(self, model_id: _Optional[str] = ...) -> None: ...

class ActivateModelResponse(_message.Message):
    __slots__ = ("model", "provenance")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    model: ModelInfo
    provenance: Provenance
    def __init__(self, model: _Optional[_Union[ModelInfo, _Mapping]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetCameraStatsRequest(_message.Message):
    __slots__ = ("envs",)
    ENVS_FIELD_NUMBER: _ClassVar[int]
    envs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, envs: _Optional[_Iterable[str]] = ...) -> None: ...

class ResetCameraStatsResponse(_message.Message):
    __slots__ = ("reset", "provenance")
    RESET_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    reset: _containers.RepeatedScalarFieldContainer[str]
    provenance: Provenance
    def __init__(self, reset: _Optional[_Iterable[str]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class EnvCount(_message.Message):
    __slots__ = ("env", "rows")
    ENV_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    env: str
    rows: int
    def __init__(self, env: _Optional[str] = ..., rows: _Optional[int] = ...) -> None: ...

class BundleInfo(_message.Message):
    __slots__ = ("bundle_id", "model_id", "detectors", "n_samples", "n_features", "threshold", "created", "filter", "stats", "space", "score_adaptation", "calibration", "fit_groups")
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DETECTORS_FIELD_NUMBER: _ClassVar[int]
    N_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    N_FEATURES_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    SCORE_ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    FIT_GROUPS_FIELD_NUMBER: _ClassVar[int]
    bundle_id: str
    model_id: str
    detectors: _containers.RepeatedScalarFieldContainer[str]
    n_samples: int
    n_features: int
    threshold: float
    created: str
    filter: Filter
    stats: _containers.RepeatedCompositeFieldContainer[DetectorFitStats]
    space: str
    score_adaptation: str
    calibration: str
    fit_groups: str
    def __init__(self, bundle_id: _Optional[str] = ..., model_id: _Optional[str] = ..., detectors: _Optional[_Iterable[str]] = ..., n_samples: _Optional[int] = ..., n_features: _Optional[int] = ..., threshold: _Optional[float] = ..., created: _Optional[str] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., stats: _Optional[_Iterable[_Union[DetectorFitStats, _Mapping]]] = ..., space: _Optional[str] = ..., score_adaptation: _Optional[str] = ..., calibration: _Optional[str] = ..., fit_groups: _Optional[str] = ...) -> None: ...

class GetInfoResponse(_message.Message):
    __slots__ = ("server_version", "active_model", "bundle", "env_counts", "total_rows", "table_version", "data_dir", "hint", "index_rows")
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_MODEL_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    ENV_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    TABLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    INDEX_ROWS_FIELD_NUMBER: _ClassVar[int]
    server_version: str
    active_model: ModelInfo
    bundle: BundleInfo
    env_counts: _containers.RepeatedCompositeFieldContainer[EnvCount]
    total_rows: int
    table_version: int
    data_dir: str
    hint: str
    index_rows: int
    def __init__(self, server_version: _Optional[str] = ..., active_model: _Optional[_Union[ModelInfo, _Mapping]] = ..., bundle: _Optional[_Union[BundleInfo, _Mapping]] = ..., env_counts: _Optional[_Iterable[_Union[EnvCount, _Mapping]]] = ..., total_rows: _Optional[int] = ..., table_version: _Optional[int] = ..., data_dir: _Optional[str] = ..., hint: _Optional[str] = ..., index_rows: _Optional[int] = ...) -> None: ...

class SetLabelRequest(_message.Message):
    __slots__ = ("ids", "label")
    IDS_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    label: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., label: _Optional[str] = ...) -> None: ...

class SetLabelResponse(_message.Message):
    __slots__ = ("updated", "missing", "provenance")
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    updated: _containers.RepeatedScalarFieldContainer[str]
    missing: _containers.RepeatedScalarFieldContainer[str]
    provenance: Provenance
    def __init__(self, updated: _Optional[_Iterable[str]] = ..., missing: _Optional[_Iterable[str]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...
