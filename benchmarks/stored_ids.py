"""The Ray driver's check of which ids of a chunk are stored, as the table grows: the
ids read once and refreshed from new fragments (client/ray_stored_ids.py) against the
reference, Lance's filtered scan of the id column (`isin` in parts of 1,000 ids) for each
chunk, measured in the same run on the same table.

For each size, a Lance table of that many rows (64-hex-digit ids, as an image tree's
sha256 ids, in fragments of 16,384 rows), then `--chunks` rounds of: a chunk of 4,096
ids (half of them stored) checked, and one new fragment of 4,096 rows committed (the
driver's own commit), so each round's refresh reads one fragment. One JSON line per size
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

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import emit, log
from envad.client.ray_stored_ids import StoredIds

CHUNK = 4096
FRAGMENT = 16_384
#: ids a filtered scan asks for at a time (the size of an `isin` list before this module)
SCAN_PART = 1000


def hex_ids(start: int, count: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(start, start + count)]


def write_table(uri: str, rows: int) -> None:
    for start in range(0, rows, FRAGMENT):
        ids = hex_ids(start, min(FRAGMENT, rows - start))
        lance.write_dataset(pa.table({"id": ids, "value": np.arange(len(ids))}), uri,
                            mode="append" if start else "create")


def scanned(dataset, ids: list[str]) -> set[str]:
    """The reference: the ids of `ids` that a filtered scan of the id column finds."""
    found: set[str] = set()
    for start in range(0, len(ids), SCAN_PART):
        part = pa.array(ids[start:start + SCAN_PART], pa.string())
        found.update(dataset.to_table(columns=["id"], filter=pc.field("id").isin(part))
                     .column("id").to_pylist())
    return found


def measure(rows: int, chunks: int, work: Path) -> dict:
    uri = str(work / f"t{rows}.lance")
    write_table(uri, rows)
    started = time.perf_counter()
    held = StoredIds(lance.dataset(uri))
    first_read = time.perf_counter() - started
    rng = np.random.default_rng(rows)
    scan_s, held_s, total = [], [], rows
    for _ in range(chunks):
        old = rng.choice(total, CHUNK // 2, replace=False)
        ids = [hex_ids(int(i), 1)[0] for i in old] + hex_ids(total, CHUNK // 2)
        dataset = lance.dataset(uri)
        started = time.perf_counter()
        reference = scanned(dataset, ids)
        scan_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        held.refresh(dataset)
        found = held.stored(ids)
        held_s.append(time.perf_counter() - started)
        assert found == reference and len(found) == CHUNK // 2, (len(found), len(reference))
        fresh = hex_ids(total, CHUNK)
        lance.write_dataset(pa.table({"id": fresh, "value": np.arange(CHUNK)}), uri,
                            mode="append")
        total += CHUNK
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
