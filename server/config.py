"""Server settings: flags > ENVAD_* environment variables > TOML file > defaults.

Defaults run embedded with everything under ./var/envad: the LanceDB store in
`<data_dir>/lancedb`, detector bundles in `<data_dir>/bundles`, the saved neighbour index
in `<data_dir>/index`, models in `<data_dir>/models` unless `models_dir` is set.

`data_dir` may instead be a URI on object storage (`s3://bucket/prefix`, with
`storage_options`): the table and the server's files live there, and what the server
keeps on local disk (the saved index, the camera statistics' journals, models unless
`models_dir` is set) is a cache under `cache_dir` (server/storage_uri.py). `models_dir`
may be a URI too (same `storage_options`): its `*.onnx` files are downloaded into
`<cache_dir>/models` (or `<data_dir>/models` for a local data dir) before each scan.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import tomllib

from envad.defaults import DEFAULT_PORT, DEFAULT_TOP_K, FIT_MAX_SAMPLES
from envad.errors import InvalidInput
from envad.records import ANOMALY_LABEL
from envad.server.storage_uri import is_uri, join, local_path, parse_storage_options

ENV_PREFIX = "ENVAD_"
#: stored rows from which the neighbour index is IVF instead of flat. A flat search reads
#: every vector per query (about 18 ms at 100k rows on the 2-core host, IVF 0.4 ms), but
#: the switch to IVF and its retraining at each 4x of growth run k-means. Written rows
#: start it in a background thread (index.py), yet on 2 cores it still competes with the
#: writes: at 20,000 the writer fell to 0.35-0.42x lancedb's append over 100k rows, at
#: 200,000 it holds 0.50-0.60x (docs/benchmarks.md)
DEFAULT_IVF_THRESHOLD = 200_000
#: stored rows from which the IVF index's lists hold codes of each row instead of its
#: float32 vector (2,048 bytes at 512 dims): 4-bit codes (256 bytes) whose candidates
#: are re-ranked against the store's vectors on a table with stable row ids (every one
#: envad creates), else 8-bit codes (512). At 1M rows the server held 2.80 GiB with the
#: vectors, 2 GiB of them vectors; with 4-bit codes a row costs the server about 330
#: bytes (docs/results/archive-scale.md). Re-ranking reads the store for every search, a
#: round trip on object storage, so smaller stores keep float32 vectors in memory
#: (docs/neighbour-index.md)
DEFAULT_COMPRESSED_THRESHOLD = 1_000_000
#: what a server does with a shared store: "all" serves and writes (one process, the
#: default); "writer" is the one process that writes; "reader" serves Score, Search,
#: Export and Info, and follows what the writer stores (docs/scaling.md)
ROLES = ("all", "writer", "reader")


@dataclass(frozen=True)
class ServerConfig:
    """Every server setting, with its default. The docs table is generated from this."""

    host: str = "127.0.0.1"                 # address to bind ("0.0.0.0" for all)
    port: int = DEFAULT_PORT                # gRPC port (0 = pick a free port)
    data_dir: Path | str = Path("var/envad")  # store, bundles, state: a path or s3://... URI
    storage_options: Mapping[str, str] = field(  # object-storage options of a URI data_dir
        default_factory=dict, repr=False)
    cache_dir: Path | None = None           # local cache of a URI data_dir (var/envad-cache/...)
    models_dir: Path | str | None = None    # *.onnx encoders: a path or URI; <data_dir>/models
    metrics_port: int = 0                   # Prometheus /metrics HTTP port; 0 = off
    metrics_host: str = "127.0.0.1"         # /metrics bind address (it has no token)
    max_message_mb: int = 72                # gRPC send/receive limit per message
    max_image_mb: int = 64                  # largest accepted encoded image
    max_image_megapixels: int = 120         # decompression-bomb guard
    max_batch: int = 64                     # images per ONNX Runtime call
    max_wait_ms: float = 2.0                # batching window after the first request
    decode_threads: int = 0                 # threads decoding images (0 = thread budget)
    workers: int = 16                       # most gRPC handler threads (worker_pool.py)
    max_streams: int = 0                    # streaming calls open at once (0 = workers // 2)
    stream_idle_seconds: float = 30.0       # end a stream sending nothing this long (0 = never)
    threads: int = 0                        # thread budget of every pool (0 = all cores)
    intra_op_threads: int = 0               # ONNX Runtime intra-op threads (0 = budget)
    intra_op_spinning: int = 0              # 1: idle ONNX Runtime threads spin (0: they yield)
    blas_threads: int = 0                   # OpenBLAS/MKL threads (0 = budget's default)
    faiss_threads: int = 0                  # FAISS OpenMP threads (0 = budget's default)
    malloc_arenas: int = 2                  # glibc heaps the threads share (0 = glibc's limit)
    accelerator: str = "auto"               # encoder on "auto" (CUDA if present), "cpu", "cuda"
    default_top_k: int = DEFAULT_TOP_K      # neighbours returned as evidence
    anomaly_labels: str = ANOMALY_LABEL     # comma-separated labels of known anomalies
    role: str = "all"                       # "all" (one process), "writer" or "reader"
    writer_address: str = ""                # a reader's writer, named when it refuses a write
    refresh_seconds: float = 2.0            # how often external writes/models are picked up
    optimize_every: int = 100               # compact the store every N commits
    ivf_threshold: int = DEFAULT_IVF_THRESHOLD  # rows from which the index is IVF
    compressed_threshold: int = DEFAULT_COMPRESSED_THRESHOLD  # rows from which IVF holds codes
    fit_max_samples: int = FIT_MAX_SAMPLES  # default sample cap for Fit
    grace_seconds: float = 10.0             # drain time on SIGTERM
    auth_token: str = ""                    # require "authorization: Bearer <token>"
    tls_cert_file: Path | None = None       # PEM certificate chain: serve TLS when set
    tls_key_file: Path | None = None        # PEM private key of tls_cert_file
    log_format: str = "json"                # "json" or "text"
    log_level: str = "INFO"

    @property
    def remote(self) -> bool:
        """True when `data_dir` is a URI on object storage."""
        return is_uri(self.data_dir)

    @property
    def local_dir(self) -> Path:
        """The data dir itself, or for a URI data dir its local cache folder."""
        if not self.remote:
            return local_path(self.data_dir)
        if self.cache_dir:
            return Path(self.cache_dir)
        return Path("var/envad-cache") / re.sub(r"[^A-Za-z0-9._-]", "_", str(self.data_dir))

    @property
    def models_uri(self) -> str | None:
        """`models_dir` when it is a URI on object storage (its files are downloaded into
        `resolved_models_dir`), else None."""
        return str(self.models_dir) if self.models_dir and is_uri(self.models_dir) else None

    @property
    def resolved_models_dir(self) -> Path:
        """The local folder the encoders are loaded from (for a URI `models_dir`, the
        cache's copy of it)."""
        if self.models_dir and not self.models_uri:
            return Path(self.models_dir)
        return self.local_dir / "models"

    @property
    def stream_limit(self) -> int:
        """Streaming calls served at once (stream_limits.py); the other handler threads
        stay free for unary calls and health checks."""
        return self.max_streams or max(1, self.workers // 2)

    @property
    def anomaly_label_set(self) -> tuple[str, ...]:
        """Labels that mark a stored row as a known anomaly (never a normal neighbour)."""
        return tuple(sorted({v.strip() for v in self.anomaly_labels.split(",") if v.strip()}))

    @property
    def lancedb_dir(self) -> Path | str:
        """The LanceDB folder: a local path, or a URI when `data_dir` is one."""
        return join(str(self.data_dir), "lancedb") if self.remote else self.local_dir / "lancedb"

    @property
    def bundles_dir(self) -> Path:
        """Detector bundles (for a URI data dir, the local copy of `<uri>/bundles`)."""
        return self.local_dir / "bundles"

    @property
    def index_dir(self) -> Path:
        """Saved neighbour indexes, one folder per encoder (server/index_files.py)."""
        return self.local_dir / "index"

    @property
    def camera_stats_dir(self) -> Path:
        """Running per-camera statistics, one file per encoder (server/env_stats.py)."""
        return self.local_dir / "camera_stats"


def _coerce(name: str, value: Any) -> Any:
    field = {f.name: f for f in fields(ServerConfig)}[name]
    kind = field.type
    try:
        if value is None:
            return None
        if name == "storage_options":
            return parse_storage_options(value)
        if name in ("data_dir", "models_dir") and is_uri(value):
            return str(value).rstrip("/")
        if "Path" in str(kind):
            return Path(value)
        if kind in ("int", int):
            return int(value)
        if kind in ("float", float):
            return float(value)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"setting {name}: cannot use {value!r}: {exc}") from exc


def load_config(*, config_file: Path | None = None, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> ServerConfig:
    """Merge the TOML file, ENVAD_* variables and explicit overrides (highest first wins)."""
    env = os.environ if env is None else env
    known = {f.name for f in fields(ServerConfig)}
    values: dict[str, Any] = {}
    config_file = config_file or (Path(env["ENVAD_CONFIG"]) if env.get("ENVAD_CONFIG") else None)
    if config_file:
        try:
            data = tomllib.loads(Path(config_file).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"cannot read config file {config_file}: {exc}") from exc
        data = data.get("server", data)
        unknown = set(data) - known
        if unknown:
            raise InvalidInput(f"unknown setting(s) in {config_file}: {sorted(unknown)}; "
                               f"known: {sorted(known)}")
        values.update(data)
    for name in known:
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = env[key]
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    config = ServerConfig(**{k: _coerce(k, v) for k, v in values.items()})
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        raise InvalidInput("TLS needs both tls_cert_file and tls_key_file")
    if config.accelerator not in ("auto", "cpu", "cuda"):
        raise InvalidInput(f"accelerator must be auto, cpu or cuda, got {config.accelerator!r}")
    if config.workers < 2:
        raise InvalidInput(f"workers must be at least 2 (one thread stays free of streaming "
                           f"calls), got {config.workers}")
    if not 0 <= config.max_streams < config.workers:
        raise InvalidInput(f"max_streams must be below workers ({config.workers}) so that "
                           f"unary calls and health checks keep a thread, got "
                           f"{config.max_streams}")
    if config.stream_idle_seconds < 0:
        raise InvalidInput(f"stream_idle_seconds must be >= 0 (0 = never), got "
                           f"{config.stream_idle_seconds}")
    if config.role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {config.role!r}")
    if config.role != "all" and not config.remote:
        raise InvalidInput(f"role {config.role} shares a store on object storage: give "
                           "--data-dir s3://... (a local data dir is role all's)")
    if config.refresh_seconds <= 0:
        raise InvalidInput(f"refresh_seconds must be > 0, got {config.refresh_seconds}")
    if config.log_format not in ("json", "text"):
        raise InvalidInput("log_format must be 'json' or 'text'")
    return config


def describe() -> list[tuple[str, str, str]]:
    """(name, environment variable, default) for every setting, for docs and --help."""
    return [(f.name, ENV_PREFIX + f.name.upper(), _shown(f.default)) for f in fields(ServerConfig)]


def _shown(default: Any) -> str:
    """A default as a user would type it: paths plain, unset as "-"."""
    if default is None or default is MISSING:
        return "-"
    return str(default) if isinstance(default, Path) else repr(default)


replace = dataclasses.replace
