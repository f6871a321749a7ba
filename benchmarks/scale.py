"""Neighbour search as the store grows: flat, IVF and compressed IVF (4-bit codes
re-ranked against the store, or 8-bit codes), search latency, recall, restart, memory.

Synthetic 512-d float32 vectors (seeded Gaussian clusters, 8 cameras) are written to a
real LanceDB store; for each size and index kind a fresh process opens the index the
way the server does at start (`index_files.open_index`): once with no saved index
(build from the table, then save) and once loading the saved one. The loading process
then measures one-query search (k=10) without and with a camera filter, and recall@10
against exact search on held-out queries. One JSON line per size and kind (`scale`):

- search_p50_ms / filtered_p50_ms, and `ratio_search_over_first_size` (the same kind's
  p50 at this size ÷ at the first size: 1.0 means the cost does not grow);
- recall_at_10 / filtered_recall_at_10 against exact (brute-force) search;
- build_s (restart with no saved index: read the table, build, save), restart_loaded_s
  and `ratio_restart_loaded_over_rebuilt`;
- rss_bytes_per_row: resident memory the loaded index process gained while opening the
  index (FAISS vectors, ids and metadata, and the store's fixed caches), per stored row;
  rss_bytes_per_added_row: the same gain minus the first size's, per row added since (the
  cost of one more stored row, without the fixed part);
- index_bytes_per_row: the saved FAISS index's bytes per row (what the index itself
  holds in memory: vectors or codes, list ids, direct map, centroids);
- ratio_search_over_flat (IVF kinds): this size's p50 ÷ its flat p50.

    python -m benchmarks.scale --rows 10000 100000 [1000000] [--kinds ivf ivf-sq8 ivf-sq4]

Every kind is forced at every size (thresholds 1 or rows + 1) so its recall and cost are
seen at each; the server's own thresholds pick IVF from 200,000 rows and compressed IVF
from 1,000,000 (server/config.py): ivf-sq4 on the stores envad creates (stable row ids),
ivf-sq8 on a table without them (forced here with `open_index(rerank=False)`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.common import emit, log, percentile_ms

DIM = 512
MODEL_ID = "scale"
CAMERAS = 8
CLUSTERS = 256
QUERIES = 200
K = 10
WRITE_CHUNK = 50_000


def vectors(count: int, start: int = 0, seed: int = 0) -> np.ndarray:
    """Rows start..start+count of the seeded clustered data set (any slice, same rows)."""
    centres = np.random.default_rng(seed).normal(size=(CLUSTERS, DIM)).astype(np.float32)
    rng = np.random.default_rng((seed, start))
    which = rng.integers(CLUSTERS, size=count)
    noise = rng.normal(scale=0.35, size=(count, DIM)).astype(np.float32)
    return centres[which] + noise


def camera_of(rows: np.ndarray) -> np.ndarray:
    return rows % CAMERAS


def write_store(db_dir: Path | str, rows: int, model_id: str = MODEL_ID,
                storage_options: dict[str, str] | None = None, label: str = "") -> None:
    """`rows` seeded rows (`vectors`), 8 cameras, split train, each with `label`, in the
    server's table of `model_id` under `db_dir` (a folder, or a URI with its
    `storage_options`). Unlabelled by default, as a backfill stores an archive: a row
    labelled `normal` is a reviewer's mark, and a Fit remembers every such row."""
    from envad.server.store import EmbeddingStore, make_schema

    store = EmbeddingStore(db_dir, model_id, DIM, storage_options)
    for start in range(0, rows, WRITE_CHUNK):
        count = min(WRITE_CHUNK, rows - start)
        numbers = np.arange(start, start + count)
        block = vectors(count, start)
        table = pa.table({
            "id": [f"r{i}" for i in numbers],
            "env": [f"cam-{c}" for c in camera_of(numbers)],
            "label": [label] * count, "split": ["train"] * count,
            "timestamp": [None] * count, "uri": [f"file:///archive/{i}.jpg" for i in numbers],
            "sha256": [f"{i:064x}" for i in numbers], "model_id": [model_id] * count,
            "ingested_at": [None] * count,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(block.ravel()), DIM),
            "event": [""] * count,
        }, schema=make_schema(DIM))
        store.append(table)


def exact_neighbours(rows: int, queries: np.ndarray, camera: int | None) -> np.ndarray:
    """Row numbers of the exact K nearest rows (of one camera, or all) to each query."""
    import faiss

    index = faiss.IndexFlatL2(DIM)
    numbers = []
    for start in range(0, rows, WRITE_CHUNK):
        count = min(WRITE_CHUNK, rows - start)
        block = np.arange(start, start + count)
        data = vectors(count, start)
        if camera is not None:
            keep = camera_of(block) == camera
            block, data = block[keep], data[keep]
        index.add(data)
        numbers.append(block)
    _, positions = index.search(queries, K)
    return np.concatenate(numbers)[positions]


def held_out_queries(rows: int) -> np.ndarray:
    """Queries from the same clusters as the stored rows, never stored themselves."""
    return vectors(QUERIES, start=rows + 10_000_000)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def thresholds(kind: str, rows: int) -> tuple[int, int]:
    """(ivf_threshold, compressed_threshold) under which the index is `kind` at `rows`."""
    return {"flat": (rows + 1, rows + 1), "ivf": (1, rows + 1), "ivf-sq8": (1, 1),
            "ivf-sq4": (1, 1)}[kind]


def index_file_bytes(directory: Path) -> int:
    """Bytes of the FAISS file of the index saved in `directory`."""
    manifest = json.loads((directory / "manifest.json").read_text())
    return manifest["files"][manifest["index_file"]]["bytes"]


def child(args: argparse.Namespace) -> None:
    """One start of the index: open it (build or load), then measure it."""
    from envad.records import RowFilter
    from envad.server.ann import recall_at_k
    from envad.server.index_files import open_index, save_index
    from envad.server.store import EmbeddingStore
    from envad.server.threads import ThreadBudget

    ThreadBudget.from_settings().apply()                # the server's default thread budget
    store = EmbeddingStore(args.dir / "lancedb", MODEL_ID, DIM)
    queries = np.load(args.dir / "queries.npy")
    before = rss_bytes()
    started = time.perf_counter()
    ivf_threshold, compressed_threshold = thresholds(args.kind, store.count())
    opened = open_index(args.dir / f"index-{args.kind}", store, ivf_threshold=ivf_threshold,
                        compressed_threshold=compressed_threshold,
                        rerank=args.kind != "ivf-sq8")
    seconds = time.perf_counter() - started
    index = opened.index
    record = {"loaded": opened.loaded, "open_s": seconds, "kind": index.kind,
              "rows": len(index), "rss_bytes": rss_bytes() - before,
              "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
              "index_bytes": index_file_bytes(args.dir / f"index-{args.kind}")}
    if opened.loaded:
        started = time.perf_counter()
        save_index(args.dir / f"index-{args.kind}", index, model_id=MODEL_ID,
                   table_version=store.version)
        record["save_s"] = time.perf_counter() - started
        camera = RowFilter(envs=("cam-1",))
        for name, row_filter, truth_file in (("", RowFilter(), "exact.npy"),
                                             ("filtered_", camera, "exact_cam1.npy")):
            index.search(queries[:1], K, row_filter)                # warm-up (filter bitmap)
            times, found = [], []
            for query in queries:
                start = time.perf_counter()
                hits = index.search(query[None, :], K, row_filter)[0]
                times.append(time.perf_counter() - start)
                found.append([int(h.id[1:]) for h in hits] + [-1] * (K - len(hits)))
            truth = np.load(args.dir / truth_file)
            record[f"{name}p50_ms"] = percentile_ms(times, 50)
            record[f"{name}recall_at_10"] = recall_at_k(np.asarray(found), truth)
    print(json.dumps(record), flush=True)


def run_child(directory: Path, kind: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--child", "--dir",
                          str(directory), "--kind", kind],
                         check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(rows: int, work: Path, first: dict[str, dict], kinds: list[str]) -> None:
    directory = work / f"rows-{rows}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    started = time.perf_counter()
    write_store(directory / "lancedb", rows)
    log(f"scale: {rows} rows written in {time.perf_counter() - started:.1f} s")
    queries = held_out_queries(rows)
    np.save(directory / "queries.npy", queries)
    np.save(directory / "exact.npy", exact_neighbours(rows, queries, None))
    np.save(directory / "exact_cam1.npy", exact_neighbours(rows, queries, 1))
    flat_p50 = None
    for kind in kinds:
        built = run_child(directory, kind)
        loaded = run_child(directory, kind)
        assert not built["loaded"] and loaded["loaded"] and loaded["kind"] == kind
        reference = first.setdefault(kind, {"rows": rows, **loaded})
        record = {"benchmark": "scale", "rows": rows, "kind": kind, "dim": DIM,
                  "search_p50_ms": loaded["p50_ms"],
                  "filtered_p50_ms": loaded["filtered_p50_ms"],
                  "recall_at_10": loaded["recall_at_10"],
                  "filtered_recall_at_10": loaded["filtered_recall_at_10"],
                  "build_s": built["open_s"], "restart_loaded_s": loaded["open_s"],
                  "save_s": loaded["save_s"],
                  "rss_bytes_per_row": loaded["rss_bytes"] / rows,
                  "index_bytes_per_row": loaded["index_bytes"] / rows,
                  "peak_rss_gb_build": built["peak_rss_gb"],
                  "peak_rss_gb_loaded": loaded["peak_rss_gb"],
                  "ratio_restart_loaded_over_rebuilt": loaded["open_s"] / built["open_s"],
                  "ratio_search_over_first_size": loaded["p50_ms"] / reference["p50_ms"]}
        if rows > reference["rows"]:
            record["rss_bytes_per_added_row"] = ((loaded["rss_bytes"] - reference["rss_bytes"])
                                                 / (rows - reference["rows"]))
        if kind == "flat":
            flat_p50 = loaded["p50_ms"]
        elif flat_p50:
            record["ratio_search_over_flat"] = loaded["p50_ms"] / flat_p50
        emit(record)
    shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000],
                        help="store sizes, smallest first (the first is the reference)")
    parser.add_argument("--kinds", nargs="+", default=["flat", "ivf", "ivf-sq4"],
                        choices=["flat", "ivf", "ivf-sq8", "ivf-sq4"],
                        help="index kinds to measure (ivf-sq8: on a copy of the store "
                             "without stable row ids)")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the stores (default: a temporary folder)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    first: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        for rows in sorted(args.rows):
            measure(rows, Path(work), first, args.kinds)


if __name__ == "__main__":
    main()
