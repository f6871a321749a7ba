"""Which ids of a chunk are stored, as the table grows: the held ids brought up to date
from the fragments committed since (`EmbeddingStore.synced_ids`, what the store writer
and the Ray engine's driver do) against the reference, Lance's filtered scan of the id
column (`isin` in parts of 1,000 ids) for each chunk, measured in the same run on the
same table.

For each size, a store table of that many rows (64-hex-digit ids, as an image tree's
sha256 ids, appended 16,384 rows at a time), then `--chunks` rounds of: one commit of
4,096 new rows by another connection, then a chunk of 4,096 ids (half of them stored)
checked both ways, so each round's sync reads one fragment. One JSON line per size
(`stored_ids`): the one-off read of every id, the mean seconds a chunk with each method,
and their ratio.

    python -m benchmarks.stored_ids --rows 100000 1000000
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import emit, log
from envad.server.store import EmbeddingStore, Row

CHUNK = 4096
FRAGMENT = 16_384
DIM = 4
#: ids a filtered scan asks for at a time
SCAN_PART = 1000


def hex_ids(start: int, count: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(start, start + count)]


def append(store: EmbeddingStore, start: int, count: int) -> None:
    vector = np.zeros(DIM, np.float32)
    store.append(store.to_arrow([Row(id=i, vector=vector, env="cam", label="normal")
                                 for i in hex_ids(start, count)]))


def scanned(dataset, ids: list[str]) -> set[str]:
    """The reference: the ids of `ids` that a filtered scan of the id column finds."""
    found: set[str] = set()
    for start in range(0, len(ids), SCAN_PART):
        part = pa.array(ids[start:start + SCAN_PART], pa.string())
        found.update(dataset.to_table(columns=["id"], filter=pc.field("id").isin(part))
                     .column("id").to_pylist())
    return found


def measure(rows: int, chunks: int, work: Path) -> dict:
    store = EmbeddingStore(work / f"db{rows}", "bench", DIM)
    for start in range(0, rows, FRAGMENT):
        append(store, start, min(FRAGMENT, rows - start))
    started = time.perf_counter()
    held = store.stored_ids()
    first_read = time.perf_counter() - started
    other = EmbeddingStore(work / f"db{rows}", "bench", DIM)
    rng = np.random.default_rng(rows)
    scan_s, held_s, total = [], [], rows
    for _ in range(chunks):
        append(other, total, CHUNK)
        total += CHUNK
        old = rng.choice(total, CHUNK // 2, replace=False)
        ids = [hex_ids(int(i), 1)[0] for i in old] + hex_ids(total, CHUNK // 2)
        started = time.perf_counter()
        reference = scanned(store._table.to_lance(), ids)
        scan_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        held = store.synced_ids(held)
        found = {i for i, at in zip(ids, held.ids.positions(ids).tolist(), strict=True)
                 if at >= 0}
        held_s.append(time.perf_counter() - started)
        assert found == reference and len(found) == CHUNK // 2, (len(found), len(reference))
    scan, held_chunk = float(np.mean(scan_s)), float(np.mean(held_s))
    log(f"stored_ids: {rows:,} rows: a chunk {scan:.3f} s scanned, {held_chunk:.4f} s held "
        f"(first read {first_read:.1f} s)")
    return {"benchmark": "stored_ids", "rows": rows, "chunk": CHUNK, "chunks": chunks,
            "first_read_s": first_read, "scan_s_per_chunk": scan,
            "held_s_per_chunk": held_chunk, "ratio_scan_over_held": scan / held_chunk}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--chunks", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="envad-stored-ids-") as tmp:
        for rows in args.rows:
            emit(measure(rows, args.chunks, Path(tmp)))


if __name__ == "__main__":
    main()
