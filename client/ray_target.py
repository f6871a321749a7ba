"""Where a Ray backfill writes: the server's store, in a local data dir or on object
storage (`s3://bucket/prefix` with storage options, as `envad serve` takes them).

The driver opens the store as the server does (`envad.server.store.EmbeddingStore`: the
table is created with the server's schema, and a table served read-only below its
acknowledged record is refused), commits each chunk's fragments as one Lance Append,
and then makes that version the table's acknowledged record, as the server's writer does
after each commit: rows the Ray backfill recorded in its checkpoint are guarded like
rows the service acknowledged (docs/ray.md, "Beside the writer").

Storage options: `--storage-option KEY=VALUE` (repeatable), else ENVAD_STORAGE_OPTIONS
(the server's setting, `KEY=VALUE,KEY=VALUE`); the AWS_* variables are honoured by Lance
itself. Secret values are never shown: RayTarget's repr leaves the options out, and a
store that cannot be opened is reported with them redacted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envad.client.command_line import open_client
from envad.errors import FailedPrecondition


@dataclass(frozen=True)
class RayTarget:
    """Where the rows go and which encoder makes them. `data_dir`: the server's data dir,
    an absolute local path or a URI on object storage."""

    data_dir: str
    model_file: Path
    model_id: str
    dim: int
    input_size: int
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False,
                                               compare=False)

    @property
    def remote(self) -> bool:
        # the server's URI parsing (no storage library); the client imports no server
        # module at import time
        from envad.server.storage_uri import is_uri

        return is_uri(self.data_dir)

    @property
    def lancedb_dir(self) -> str:
        return join_location(self.data_dir, "lancedb")

    @property
    def table_uri(self) -> str:
        from envad.server.store import table_name  # the server's code: the server extra

        return join_location(self.lancedb_dir, f"{table_name(self.model_id)}.lance")

    @property
    def lance_options(self) -> dict[str, str] | None:
        """Storage options for Lance calls (None for a local data dir)."""
        return dict(self.storage_options) if self.remote else None


def join_location(location: str, *parts: str) -> str:
    """A local path or URI with path parts appended."""
    from envad.server.storage_uri import is_uri, join  # URI parsing, as in RayTarget.remote

    return join(location, *parts) if is_uri(location) else str(Path(location, *parts))


def storage_options_of(given: list[str] | None) -> dict[str, str]:
    """`--storage-option KEY=VALUE` values, else ENVAD_STORAGE_OPTIONS (as the server)."""
    from envad.server.storage_uri import parse_storage_options  # URI parsing, as above

    return parse_storage_options(given or os.environ.get("ENVAD_STORAGE_OPTIONS", ""))


def target_for(data_dir: str | Path, model_file: str | Path,
               storage_options: Mapping[str, str] | None = None) -> RayTarget:
    """Read the encoder's metadata (model id, dimension, input size) from its file; a
    local data dir is made absolute (the workers may run elsewhere)."""
    from envad.server.encoder import OnnxEncoder  # the server's code: the server extra
    from envad.server.storage_uri import is_uri, local_path  # URI parsing, as above

    encoder = OnnxEncoder(Path(model_file), intra_op_threads=1)
    location = (str(data_dir).rstrip("/") if is_uri(data_dir)
                else str(local_path(data_dir).resolve()))
    return RayTarget(location, Path(model_file).resolve(), encoder.meta.model_id,
                     encoder.dim, encoder.input_size, dict(storage_options or {}))


def resolve_target(args) -> RayTarget:
    """--data-dir / --model-file, else ask the server (GetInfo, ListModels) where they are.

    The server reports its data dir (a URI on object storage) and its models folder; the
    model file must be visible from here and from the Ray workers (shared file system or
    the same machine), and so must a local data dir."""
    data_dir, model_file = args.data_dir, args.model_file
    if data_dir is None or model_file is None:
        with open_client(args) as client:
            info = client.info()
            listing = client.list_models()
        if info.active_model is None:
            raise FailedPrecondition(f"the server has no active encoder: {info.hint}")
        data_dir = data_dir or info.data_dir
        model_file = model_file or Path(listing.models_dir) / info.active_model.file
    return target_for(data_dir, model_file, storage_options_of(args.storage_option))


def open_store(target: RayTarget) -> Any:
    """The target's EmbeddingStore, opened as the server opens it (table created with the
    server's schema when missing); refused while it is served read-only below its
    acknowledged record (the server refuses writes then too)."""
    from envad.server.store import EmbeddingStore  # the server's code: the server extra

    store = EmbeddingStore(target.lancedb_dir, target.model_id, target.dim,
                           target.lance_options)
    store.require_writable()
    return store


def commit_append(target: RayTarget, store: Any, fragments: list, read_version: int) -> int:
    """Commit `fragments` as ONE Append and make the new version the acknowledged record
    (before the caller's checkpoint hears of the rows); returns the version."""
    import lance  # pylance: the ray extra

    committed = lance.LanceDataset.commit(target.table_uri, lance.LanceOperation.Append(fragments),
                                          read_version=read_version,
                                          storage_options=target.lance_options)
    store.record_acknowledged(int(committed.version))
    return int(committed.version)
