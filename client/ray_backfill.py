"""Distributed backfill on Ray Data: read the image list, embed in an actor pool with ONNX
Runtime, write the store's Lance table directly; the server picks the rows up.

Exception to the client's dependency rule: this module imports `envad.server.encoder`,
`envad.server.images.decode_image` and `envad.server.store` (schema, table name and
row-table builder), so that Ray workers embed exactly as the server does (same
preprocessing, same ONNX session settings) and the driver writes exactly the server's
rows. None of them imports torch; they are imported inside the functions that use them,
so that importing the client (the base install) never loads the server's dependencies.
Which items to send, and the checkpoint's job header, come from `backfill_plan` like
the service engine's.

Per window of WINDOW_CHUNKS chunks of `chunk_size` images, ONE Ray Data execution:
embed (an actor pool, one ONNX session per actor), its rows streamed back to the driver
a chunk at a time while the actors go on -> for each chunk, the driver drops ids already
stored or repeated in the chunk, and images whose content is stored under another id
(the service engine's rule, `content_index.duplicate_outcome`, unless
--keep-duplicates) -> the driver writes the kept rows as Lance fragments of up to
FRAGMENT_ROWS rows and commits them as ONE Append (never one commit per row), and
records it as acknowledged (ray_target.py) -> the chunk's outcomes go to the
checkpoint. The driver holds the chunk's rows by then, so it writes them itself (a
second Ray Data execution per chunk, to write them on the workers, cost seconds of
scheduling each). A crash before a commit leaves unreferenced fragment files and nothing
visible; a crash after it is harmless on resume because stored ids are skipped. The
store may be on object storage (`s3://...` with storage options), beside the service's
single writer (docs/ray.md, "Beside the writer"). Do not ingest the same images through
the server at the same time (the id key is unenforced across writers).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from envad.client.backfill_plan import (
    BackfillOptions,
    PlannedBatch,
    count_wanted,
    item_outcome,
    job_header,
    plan_batches,
)
from envad.client.backfill_report import BackfillInterrupted, BackfillSummary
from envad.client.checkpoint import Checkpoint, Outcome
from envad.client.content_index import ContentIndex, duplicate_outcome
from envad.client.ray_target import (  # noqa: F401  (target_for, resolve_target: the API)
    RayTarget,
    commit_append,
    open_store,
    resolve_target,
    target_for,
)
from envad.client.sources import Source, SourceItem, read_uri
from envad.client.sources.exif import exif_timestamp
from envad.errors import EnvadError, InvalidInput
from envad.records import sha256_hex

log = logging.getLogger(__name__)
#: most rows of one Lance fragment written by a chunk (the chunk's embedded blocks are
#: merged into as few fragments as this allows before they are written): a chunk of the
#: default size is one fragment, not one per embedding block, so a table filled by a long
#: backfill stays a few thousand fragments, not hundreds of thousands of small files
FRAGMENT_ROWS = 16_384
#: chunks embedded by one Ray Data execution: its actor pool (an ONNX Runtime session
#: per actor) starts once for them, and its rows come back chunk by chunk to be committed
WINDOW_CHUNKS = 16


@dataclass(frozen=True)
class RayOptions:
    """address: a Ray cluster ("auto", "ray://host:10001") or None for a local Ray with
    `num_cpus`; workers: embedding actors; batch_size: images per ONNX call;
    chunk_size: images per Lance commit."""

    address: str | None = None
    num_cpus: int | None = None
    workers: int = 2
    batch_size: int = 64
    chunk_size: int = 4096
    intra_op_threads: int = 1


def run_ray_backfill(
    source: Source,
    target: RayTarget,
    checkpoint_path: str | Path,
    options: BackfillOptions = BackfillOptions(),
    ray_options: RayOptions = RayOptions(),
    *,
    resume: bool = False,
    progress: bool = True,
) -> BackfillSummary:
    """Embed `source` on Ray and append it to the target's Lance table, chunk by chunk."""
    import ray  # Ray: the ray extra

    if options.scores:
        raise InvalidInput("the Ray engine stores embeddings only; score afterwards "
                           "through the service (envad backfill --no-store --scores-out)")
    header = job_header(source, options, target.model_id, target.data_dir, engine="ray")
    summary = BackfillSummary(model_id=target.model_id, engine="ray")
    started_ray = _init_ray(ray_options)
    try:
        store = open_store(target)
        held = store.stored_ids()              # then, each chunk, only what was committed since
        content = _content_index(target) if options.skip_duplicates else None
        with Checkpoint(checkpoint_path, header, resume=resume) as checkpoint:
            with tqdm(total=count_wanted(source, options), unit="img", desc="backfill (ray)",
                      disable=not progress) as bar:
                planned = plan_batches(source, options, checkpoint.is_done,
                                       ray_options.chunk_size)
                for window in _windows(planned, WINDOW_CHUNKS):
                    for part in window:     # counted and recorded as the walk found them
                        summary.already_done += part.already_done
                        summary.add(part.skipped)
                        checkpoint.record(part.skipped)
                        bar.update(part.already_done + len(part.skipped))
                    items = [item for part in window for item in part.items]
                    by_key = {item.key: item for item in items}
                    for chunk_table in _embedded_chunks(items, target, ray_options):
                        held = store.synced_ids(held)
                        outcomes, inserted = _store_chunk(chunk_table, by_key, target,
                                                          store, held.ids, content)
                        checkpoint.record(outcomes)
                        n_ok = sum(o.status == "ok" for o in outcomes)
                        summary.add(outcomes, inserted, n_ok - inserted)
                        bar.update(len(outcomes))
                        bar.set_postfix(ok=summary.ok, failed=summary.failed, refresh=False)
    except KeyboardInterrupt as exc:
        summary.interrupted = True
        raise BackfillInterrupted(summary) from exc
    finally:
        summary.elapsed_s = time.monotonic() - summary.started
        if started_ray:
            ray.shutdown()
    return summary


def _init_ray(ray_options: RayOptions) -> bool:
    """Connect to (or start) Ray; True when this call started it."""
    import ray  # Ray: the ray extra

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if ray_options.address:
        ray.init(address=ray_options.address, **kwargs)
    else:
        ray.init(num_cpus=ray_options.num_cpus, **kwargs)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    return True


def _content_index(target: RayTarget) -> ContentIndex:
    """The content hashes of the rows in the target's table."""
    import lance  # pylance: the ray extra

    return ContentIndex.from_lance(lance.dataset(target.table_uri,
                                                 storage_options=target.lance_options))


def _windows(planned: Iterable[PlannedBatch], size: int) -> Iterator[list[PlannedBatch]]:
    """Consecutive lists of `size` planned chunks (the last one shorter)."""
    it = iter(planned)
    while window := list(itertools.islice(it, size)):
        yield window


def _embedded_chunks(items: list[SourceItem], target: RayTarget, ray_options: RayOptions
                     ) -> Iterator[pa.Table]:
    """Embed `items` in ONE Ray Data execution (one actor pool, one ONNX session per
    actor) and yield its rows in tables of `chunk_size` as they stream back, so the
    actors embed the next chunk while the driver commits one."""
    import ray  # Ray: the ray extra

    if not items:
        return
    rows = [{"key": i.key, "id": i.id, "uri": i.uri, "env": i.env, "label": i.label,
             "split": i.split, "event": i.event,
             "timestamp": i.timestamp.isoformat() if i.timestamp else ""} for i in items]
    # blocks of a quarter of a chunk's share of each actor, and at least one ONNX batch
    block_rows = max(ray_options.batch_size,
                     -(-ray_options.chunk_size // (4 * ray_options.workers)))
    blocks = -(-len(rows) // block_rows)
    embedded = ray.data.from_items(rows, override_num_blocks=blocks).map_batches(
        Embedder, fn_constructor_kwargs={"model_file": str(target.model_file),
                                         "threads": ray_options.intra_op_threads},
        batch_size=ray_options.batch_size, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=min(ray_options.workers, blocks)), num_cpus=1,
    )
    yield from embedded.iter_batches(batch_size=ray_options.chunk_size,
                                     batch_format="pyarrow")


def _store_chunk(chunk_table: pa.Table, by_key: dict[str, SourceItem], target: RayTarget,
                 store, held_ids, content: ContentIndex | None = None
                 ) -> tuple[list[Outcome], int]:
    """Dedupe, write fragments and commit one embedded chunk (its rows' items in `by_key`);
    returns its outcomes and the rows added. `store`: the target's EmbeddingStore
    (ray_target.open_store); `held_ids`: the table's ids as the chunk started
    (`IdPositions`, EmbeddingStore.synced_ids); `content`: the stored content hashes,
    for the duplicate rule (None: keep duplicates)."""
    import lance  # pylance: the ray extra

    meta = chunk_table.select(["key", "id", "sha256", "error"]).to_pylist()
    dataset = lance.dataset(target.table_uri, storage_options=target.lance_options)
    checked = [m["id"] for m in meta if not m["error"]]
    stored = {i for i, at in zip(checked, held_ids.positions(checked).tolist(), strict=True)
              if at >= 0}
    keep, outcomes, seen = set(), [], set()
    for m in meta:
        item = by_key[m["key"]]
        if m["error"]:
            code, _, reason = m["error"].partition(": ")
            outcomes.append(item_outcome(item, "failed", m["id"], code, reason))
            continue
        duplicate = duplicate_outcome(content, item, m["sha256"], m["id"])
        if duplicate is not None:
            outcomes.append(duplicate)
            continue
        if m["id"] not in stored and m["id"] not in seen:
            keep.add(m["key"])
        seen.add(m["id"])
        outcomes.append(item_outcome(item, "ok", m["id"]))
    if keep:
        commit_append(target, store, write_kept_fragments(chunk_table, keep, target),
                      dataset.version)
    return outcomes, len(keep)


def write_kept_fragments(chunk_table: pa.Table, keep: set[str], target: RayTarget) -> list:
    """Write the kept rows (by key) of an embedded chunk as Lance fragments of up to
    FRAGMENT_ROWS rows, not committed; built by the store's own row-table builder so the
    rows match what the server writes. Returns their FragmentMetadata."""
    from lance.fragment import write_fragments  # pylance: the ray extra

    # the server's code: the server extra
    from envad.server.store import Row, make_schema, rows_table, vectors_of

    kept = chunk_table.filter(pa.array([k in keep for k in chunk_table.column("key").to_pylist()]))
    vectors = vectors_of(kept)
    rows = [Row(id=r["id"], vector=vector, env=r["env"], label=r["label"], split=r["split"],
                timestamp=datetime.fromisoformat(r["timestamp"]) if r["timestamp"] else None,
                uri=r["uri"], sha256=r["sha256"], event=r["event"])
            for r, vector in zip(kept.drop_columns(["vector"]).to_pylist(), vectors,
                                 strict=True)]
    return write_fragments(rows_table(rows, target.model_id, target.dim), target.table_uri,
                           schema=make_schema(target.dim), max_rows_per_file=FRAGMENT_ROWS,
                           storage_options=target.lance_options)


# ------------------------------------------------------------------ worker side


class Embedder:
    """Ray actor: reads and decodes images and embeds them with one ONNX session."""

    def __init__(self, model_file: str, threads: int = 1) -> None:
        from envad.server.encoder import OnnxEncoder  # the server's code: the server extra

        self.encoder = OnnxEncoder(Path(model_file), intra_op_threads=threads)

    def __call__(self, batch: pa.Table) -> pa.Table:
        from envad.server.images import decode_image  # the server's code: the server extra

        size, dim = self.encoder.input_size, self.encoder.dim
        n = batch.num_rows
        pixels = np.zeros((n, size, size, 3), dtype=np.uint8)
        ids, shas, errors = [], [], []
        times = batch.column("timestamp").to_pylist()
        for i, (uri, given_id) in enumerate(zip(batch.column("uri").to_pylist(),
                                                batch.column("id").to_pylist(), strict=True)):
            error, sha = "", ""
            try:
                data = read_uri(uri)
                sha = sha256_hex(data)
                if not times[i]:        # the archive gave none: the EXIF capture time
                    taken = exif_timestamp(data)
                    times[i] = taken.isoformat() if taken else ""
                pixels[i] = decode_image(data, size)
            except OSError as exc:
                error = f"READ_ERROR: cannot read {uri}: {exc}"
            except EnvadError as exc:
                error = f"{exc.code}: {exc}"
            ids.append(given_id or sha)
            shas.append(sha)
            errors.append(error)
        good = np.array([not e for e in errors], dtype=bool)
        vectors = np.zeros((n, dim), dtype=np.float32)
        if good.any():
            vectors[good] = self.encoder.embed(pixels[good])
        batch = batch.set_column(batch.schema.get_field_index("timestamp"), "timestamp",
                                 pa.array(times, pa.string()))
        return (batch.set_column(batch.schema.get_field_index("id"), "id", pa.array(ids))
                .append_column("sha256", pa.array(shas))
                .append_column("error", pa.array(errors))
                .append_column("vector", pa.FixedSizeListArray.from_arrays(
                    pa.array(vectors.ravel()), dim)))
