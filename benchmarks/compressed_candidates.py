"""Compressed neighbour indexes compared on the scale benchmark's rows, in raw FAISS:
which one the server's compressed kind should be (server/ann.py).

Candidates, each trained on the server's sample size and list count (ann.nlist_for):
IVF-flat (the reference: float32 vectors), IVF over 8-bit residual codes (IVF-SQ8),
IVF-PQ alone, IVF-PQ whose k * R candidates are re-ranked (faiss.IndexRefine) with 8-bit
or float16 codes of every row kept in memory, and IVF over 4-bit codes whose k * R
candidates are re-ranked by their exact vectors (the server reads those from the store
by row id; here they are in memory, and the index's bytes are the codes' alone). One
JSON line per candidate, probe count and re-rank factor (`compressed_candidates`):
recall@10 of 200 held-out queries against exact search, one-query p50 ms (without the
store read), bytes per row of the serialized index, train and build seconds.

    python -m benchmarks.compressed_candidates --rows 100000
"""

from __future__ import annotations

import argparse
import os
import time

import faiss
import numpy as np

from benchmarks.common import emit, log, percentile_ms
from benchmarks.scale import DIM, WRITE_CHUNK, K, held_out_queries, vectors
from envad.server import ann

PQ_BYTES = 64
#: (name, re-rank factors) of each candidate; factor 1 = no re-ranking
CANDIDATES = (("ivf-flat", (1,)), ("ivf-sq8", (1,)), (f"ivf-pq{PQ_BYTES}", (1,)),
              (f"ivf-pq{PQ_BYTES} + sq8 re-rank", (8, 32)),
              (f"ivf-pq{PQ_BYTES} + fp16 re-rank", (8, 32)),
              ("ivf-sq4 + store re-rank", (1, 2, 4)))


def candidate(name: str, nlist: int) -> faiss.Index:
    """An untrained index of the candidate `name`."""
    coarse = faiss.IndexFlatL2(DIM)
    if name == "ivf-flat":
        return faiss.IndexIVFFlat(coarse, DIM, nlist)
    if name == "ivf-sq8":
        return faiss.IndexIVFScalarQuantizer(coarse, DIM, nlist, faiss.ScalarQuantizer.QT_8bit)
    if name.startswith("ivf-sq4"):
        return faiss.IndexRefineFlat(faiss.IndexIVFScalarQuantizer(
            coarse, DIM, nlist, faiss.ScalarQuantizer.QT_4bit))
    base = faiss.IndexIVFPQ(coarse, DIM, nlist, PQ_BYTES, 8)
    if "re-rank" not in name:
        return base
    codes = faiss.ScalarQuantizer.QT_8bit if "sq8" in name else faiss.ScalarQuantizer.QT_fp16
    return faiss.IndexRefine(base, faiss.IndexScalarQuantizer(DIM, codes))


def search_params(index: faiss.Index, nprobe: int, factor: int) -> faiss.SearchParameters:
    ivf = faiss.SearchParametersIVF(nprobe=nprobe)  # type: ignore[call-arg]
    if isinstance(index, faiss.IndexRefine):
        return faiss.IndexRefineSearchParameters(  # type: ignore[call-arg]
            k_factor=factor, base_index_params=ivf)
    return ivf


def measure(rows: int, nprobes: list[int]) -> None:
    data = np.vstack([vectors(min(WRITE_CHUNK, rows - s), s) for s in range(0, rows, WRITE_CHUNK)])
    queries = held_out_queries(rows)
    exact = faiss.IndexFlatL2(DIM)
    exact.add(data)
    truth = exact.search(queries, K)[1]
    del exact
    nlist = ann.nlist_for(rows)
    sample_size = min(rows, ann.TRAIN_POINTS_PER_LIST * nlist, ann.MAX_TRAIN_SAMPLE)
    sample = data[np.random.default_rng(ann.SEED).choice(rows, sample_size, replace=False)]
    for name, factors in CANDIDATES:
        index = candidate(name, nlist)
        faiss.extract_index_ivf(index).cp.niter = ann.TRAIN_ITERATIONS
        faiss.omp_set_num_threads(os.cpu_count() or 1)   # as the server's build
        started = time.perf_counter()
        index.train(sample)
        trained = time.perf_counter() - started
        index.add(data)
        built = time.perf_counter() - started
        faiss.omp_set_num_threads(1)                     # the server searches on one
        # the store re-rank's vectors are the store's, not the index's
        coded = (faiss.downcast_index(index.base_index)  # type: ignore[attr-defined]
                 if "store" in name else index)
        size = faiss.serialize_index(coded).nbytes
        log(f"compressed_candidates: {name} at {rows} rows built in {built:.1f} s")
        for nprobe in nprobes:
            for factor in factors:
                params = search_params(index, nprobe, factor)
                times, found = [], []
                for query in queries:
                    start = time.perf_counter()
                    found.append(index.search(query[None, :], K, params=params)[1][0])
                    times.append(time.perf_counter() - start)
                emit({"benchmark": "compressed_candidates", "rows": rows, "dim": DIM,
                      "index": name, "nprobe": nprobe, "rerank_factor": factor,
                      "recall_at_10": ann.recall_at_k(np.asarray(found), truth),
                      "search_p50_ms": percentile_ms(times, 50),
                      "index_bytes_per_row": size / rows, "train_s": trained,
                      "build_s": built})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[16],
                        help="lists probed (the server calibrates its own)")
    args = parser.parse_args(argv)
    measure(args.rows, args.nprobe)


if __name__ == "__main__":
    main()
