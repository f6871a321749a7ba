"""Approximate neighbour search for large tables: an IVF index, trained once, calibrated.

The index mirror (index.py) searches exactly (flat) up to its `ivf_threshold` rows,
through an inverted-file index (IVF, float32 vectors in its lists) above it, and from
`compressed_threshold` rows through an IVF index whose lists hold 8-bit codes instead of
the vectors (`COMPRESSED`: each row's residual to its list's centroid, scalar-quantized,
one byte a dimension: a quarter of the memory; distances are computed from the codes).
A store whose rows keep their row ids for good (stable row ids: every table envad
creates) takes `RERANKED` instead from the same row count: half a byte a dimension, and
each search's `RERANK_FACTOR * k` candidates re-ranked by their exact distances to the
store's vectors, read by row id (index.py). `kind_for` picks the kind by row count; the
rest is common to every IVF kind:

- **Lists**: `nlist = 4 * sqrt(n)` at training time.
- **Training**: k-means on a seeded sample of at most `TRAIN_POINTS_PER_LIST` points a
  list (and `MAX_TRAIN_SAMPLE` in all), `TRAIN_ITERATIONS` iterations; never on every row.
- **Probes**: `nprobe` is the smallest power of two whose recall@10 against exact search,
  on `CALIBRATION_QUERIES` stored rows (each query's own row left out), reaches
  `CALIBRATION_RECALL` (a margin above the 0.95 target for unseen queries).
- **Filters**: a filter that allows at most `EXACT_FILTER_ROWS` rows probes every list,
  which is exact and costs in proportion to the rows it allows; a wider one probes
  `nprobe / f` lists for a filter that leaves a share f of the rows.
- **Growth**: rows added later go into the trained lists (no training per commit); the
  index is retrained once the rows reach `RETRAIN_GROWTH` times the rows it was trained
  on, so the lists keep about the same length as the table grows.

Every IVF index keeps a direct map (8 bytes a row) so rows can be read back from it for
retraining and for the check that a saved index still matches its store. Rows read back
from a compressed index are decoded (within about half a quantization step of the
stored vector, or clipped for a vector outside the range the codes were trained on): its
retraining re-encodes decoded rows, and the check compares a saved row with its stored
vector as the index encodes it, allowing for that (`encoded`, `COMPRESSED_TOLERANCE`).
Rows read back from a `RERANKED` index for retraining come from the store instead (index.py), so
its codes are always those of the stored vectors. Why these codes, and why re-ranking
against the store: docs/neighbour-index.md.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import faiss
import numpy as np

from envad.server.rerank import exact_order

log = logging.getLogger(__name__)

TRAIN_POINTS_PER_LIST = 32
MAX_TRAIN_SAMPLE = 131_072
TRAIN_ITERATIONS = 10
CALIBRATION_QUERIES = 200
CALIBRATION_RECALL = 0.97
CALIBRATION_K = 10
RETRAIN_GROWTH = 4
#: a filter allowing at most this many rows is searched exactly (all lists probed)
EXACT_FILTER_ROWS = 32_768
SEED = 1234
#: rows read back from an index at a time while moving them into a retrained one
COPY_CHUNK = 65_536
#: the index kinds, smallest store first (an index only ever moves up this list);
#: a store with stable row ids takes RERANKED where one without takes COMPRESSED
FLAT, IVF, COMPRESSED, RERANKED = "flat", "ivf", "ivf-sq8", "ivf-sq4"
KINDS = (FLAT, IVF, COMPRESSED, RERANKED)
#: the kinds whose lists hold codes, not the vectors
CODED = (COMPRESSED, RERANKED)
#: a RERANKED search ranks this many times its k candidates by their codes, then
#: re-ranks them by their exact distances (recall@10 1.000 with 4, 0.982 with 2 on the
#: benchmark's clustered rows: docs/neighbour-index.md)
RERANK_FACTOR = 4
_CODE_TYPES = {COMPRESSED: faiss.ScalarQuantizer.QT_8bit,
               RERANKED: faiss.ScalarQuantizer.QT_4bit}
#: largest distance between a saved compressed row and its stored vector as the index
#: encodes it now (`encoded`), relative to the vector's norm: 0 for a row added to this
#: index; a retraining re-encodes decoded rows, which moves codes by about a quantization
#: step (at most 0.004 measured); another row of its cluster is 0.3-0.5 norms away in the
#: tests' and benchmark's rows, a random one 1.4
COMPRESSED_TOLERANCE = 0.1


def kind_for(rows: int, ivf_threshold: int, compressed_threshold: int, *,
             reranked: bool = False) -> str:
    """The index kind for a table of `rows` rows under the two thresholds (`reranked`:
    the store's vectors can be read by stable row id)."""
    if rows >= compressed_threshold:
        return RERANKED if reranked else COMPRESSED
    return IVF if rows >= ivf_threshold else FLAT


def nlist_for(rows: int) -> int:
    """Inverted lists for a table of `rows` rows."""
    return max(1, int(4 * math.sqrt(rows)))


def needs_retraining(rows: int, trained_rows: int) -> bool:
    return trained_rows > 0 and rows >= RETRAIN_GROWTH * trained_rows


def rows_of(index: faiss.Index, positions: np.ndarray) -> np.ndarray:
    """The vectors at `positions` of a flat or IVF (direct-mapped) index (decoded from a
    compressed one)."""
    return index.reconstruct_batch(np.ascontiguousarray(positions, dtype=np.int64))


def encoded(index: faiss.Index, vectors: np.ndarray) -> np.ndarray:
    """`vectors` as `index` holds them once added: themselves for a flat or IVF index,
    decoded from their codes (list and residual) for a coded one, however far
    outside the quantizer's trained range a vector lies (its codes are clipped)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if not isinstance(index, faiss.IndexIVFScalarQuantizer):
        return vectors
    return index.sa_decode(index.sa_encode(vectors))


RowReader = Callable[[np.ndarray], np.ndarray]


def build_ivf(source: faiss.Index, extra: np.ndarray, *, kind: str = IVF,
              rows: RowReader | None = None) -> faiss.IndexIVF:
    """An index of the IVF `kind` holding the rows of `source` (any kind) followed by
    `extra`, trained on a seeded sample and calibrated; positions are kept. `rows` reads
    `source`'s rows at given positions (default: from `source` itself, decoded from a
    coded one)."""
    started = time.monotonic()
    total = source.ntotal + len(extra)
    read = rows or (lambda positions: rows_of(source, positions))
    sample = training_sample(source.ntotal, read, extra)
    ivf = trained_kind(kind, sample, nlist_for(total))
    for start in range(0, source.ntotal, COPY_CHUNK):
        ivf.add(read(np.arange(start, min(start + COPY_CHUNK, source.ntotal))))
    if len(extra):
        ivf.add(np.ascontiguousarray(extra, dtype=np.float32))
    ivf.nprobe = calibrate_nprobe(ivf, exact_rows=None if kind != RERANKED else (
        lambda positions: _rows_or_extra(read, source.ntotal, extra, positions)))
    log.info("IVF index trained on %d of %d rows: %d lists, nprobe %d, %.1f s", len(sample),
             total, ivf.nlist, ivf.nprobe, time.monotonic() - started)
    return ivf


def _rows_or_extra(rows: RowReader, held: int, extra: np.ndarray,
                   positions: np.ndarray) -> np.ndarray:
    """The rows at `positions` of `held` rows read by `rows` followed by `extra`."""
    out = np.empty((len(positions), extra.shape[1]), np.float32)
    inside = positions < held
    if inside.any():
        out[inside] = rows(positions[inside])
    out[~inside] = extra[positions[~inside] - held]
    return out


def sample_positions(total: int) -> np.ndarray:
    """The seeded, sorted positions among `total` rows that an IVF index for all of them
    is trained on."""
    size = min(total, TRAIN_POINTS_PER_LIST * nlist_for(total), MAX_TRAIN_SAMPLE)
    return np.sort(np.random.default_rng(SEED).choice(total, size=size, replace=False))


def training_sample(held: int, rows: RowReader, extra: np.ndarray) -> np.ndarray:
    """The rows at `sample_positions` of `held` rows read by `rows`, followed by
    `extra`."""
    chosen = sample_positions(held + len(extra))
    from_source = chosen[chosen < held]
    parts = [rows(from_source)] if len(from_source) else []
    return np.vstack([*parts, extra[chosen[chosen >= held] - held]])


def trained_ivf(sample: np.ndarray, nlist: int) -> faiss.IndexIVF:
    """An empty IVF index with `nlist` lists trained (k-means, seeded) on `sample`."""
    dim = sample.shape[1]
    return _trained(faiss.IndexIVFFlat(faiss.IndexFlatL2(dim), dim, nlist), sample)


def trained_coded(kind: str, sample: np.ndarray, nlist: int) -> faiss.IndexIVF:
    """`trained_ivf` whose lists hold 8-bit (COMPRESSED) or 4-bit (RERANKED) codes of
    each row's residual to its list's centroid (the quantizer's per-dimension ranges
    trained on the same sample)."""
    dim = sample.shape[1]
    return _trained(faiss.IndexIVFScalarQuantizer(faiss.IndexFlatL2(dim), dim, nlist,
                                                  _CODE_TYPES[kind]), sample)


def trained_kind(kind: str, sample: np.ndarray, nlist: int) -> faiss.IndexIVF:
    """An empty index of the IVF `kind` (IVF, COMPRESSED or RERANKED) trained on
    `sample`."""
    if kind not in (IVF, *CODED):
        raise ValueError(f"{kind!r} is not an IVF kind")
    return trained_coded(kind, sample, nlist) if kind in CODED else trained_ivf(sample, nlist)


def _trained(ivf: faiss.IndexIVF, sample: np.ndarray) -> faiss.IndexIVF:
    ivf.cp.niter = TRAIN_ITERATIONS
    ivf.cp.seed = SEED
    ivf.train(sample)
    ivf.make_direct_map(True)
    return ivf


def calibrate_nprobe(ivf: faiss.IndexIVF, *, target: float = CALIBRATION_RECALL,
                     queries: int = CALIBRATION_QUERIES,
                     exact_rows: RowReader | None = None) -> int:
    """The smallest power-of-two nprobe with recall@10 >= target against exact search
    (all lists probed), on stored rows as queries, each query's own row left out. With
    `exact_rows` (a RERANKED index's stored vectors by position), each search is
    re-ranked by them as the server's are, and the queries are the stored vectors."""
    rows = ivf.ntotal
    if rows <= CALIBRATION_K + 1:
        return ivf.nlist
    rng = np.random.default_rng(SEED + 1)
    positions = np.sort(rng.choice(rows, size=min(queries, rows), replace=False))
    x = rows_of(ivf, positions) if exact_rows is None else exact_rows(positions)
    exact = _others(ivf, x, positions, ivf.nlist, exact_rows)
    nprobe = 1
    while nprobe < ivf.nlist:
        found = _others(ivf, x, positions, nprobe, exact_rows)
        if recall_at_k(found, exact) >= target:
            return nprobe
        nprobe *= 2
    return ivf.nlist


def _others(ivf: faiss.IndexIVF, x: np.ndarray, positions: np.ndarray, nprobe: int,
            exact_rows: RowReader | None) -> np.ndarray:
    """Each query's 10 nearest rows other than its own, found with `nprobe` lists (and
    `RERANK_FACTOR` times as many candidates re-ranked by `exact_rows`, when given)."""
    params = faiss.SearchParametersIVF(nprobe=nprobe)  # type: ignore[call-arg]
    fetch = (CALIBRATION_K + 1) * (1 if exact_rows is None else RERANK_FACTOR)
    _, found = ivf.search(x, fetch, params=params)
    if exact_rows is not None:
        _, found = exact_order(x, found, exact_rows)
    out = np.full((len(x), CALIBRATION_K), -1, dtype=np.int64)
    for q, (row, own) in enumerate(zip(found, positions, strict=True)):
        others = row[(row != own) & (row >= 0)][:CALIBRATION_K]
        out[q, :len(others)] = others
    return out


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each row of `exact` (valid ids) that `found` holds too."""
    hits = total = 0
    for got, truth in zip(found, exact, strict=True):
        wanted = set(truth[truth >= 0].tolist())
        hits += len(wanted & set(got.tolist()))
        total += len(wanted)
    return hits / total if total else 1.0


def probes_for(ivf: faiss.IndexIVF, allowed: int) -> int:
    """nprobe for a search restricted to `allowed` rows. Up to `EXACT_FILTER_ROWS` rows,
    every list (exact: distances are computed for the allowed rows only, so the cost
    follows `allowed`); above, a filter that leaves a fraction f of the rows probes 1/f
    times the lists, to see about as many candidates as an unfiltered search."""
    if allowed <= EXACT_FILTER_ROWS:
        return ivf.nlist
    rows = max(ivf.ntotal, 1)
    return min(ivf.nlist, math.ceil(ivf.nprobe * rows / max(allowed, 1)))
