"""The server's one thread budget: how many threads each of its pools may run.

A Score request passes through four pools: image decoding (a thread pool), ONNX Runtime
(its intra-op pool), the detectors' matrix products (OpenBLAS or MKL) and FAISS
(OpenMP). Left alone, each sizes itself to every core, and on a small machine they spin
against each other. The budget (`threads`, default: every core) is split as measured on
a 2-core host with benchmarks/threads.py (docs/benchmarks.md): ONNX Runtime and the
decoders get the whole budget (the micro-batcher runs the encoder and the detectors one
after the other, so they never overlap), and BLAS and FAISS one thread each, because
the detectors' products on a micro-batch are too small to gain from more and multi-threaded
BLAS beside a busy ONNX Runtime pool is what slowed one-image Score down. ONNX Runtime's
idle threads yield their core instead of spinning (`intra_op_spinning=0`): spinning wins
a few milliseconds on a quiet machine and loses more on a busy one. Each pool can be set
on its own (`intra_op_threads`, `intra_op_spinning`, `blas_threads`, `faiss_threads`,
`decode_threads`). Bulk work made of large matrix products (building the neighbour index
from the store at a first start) takes every thread of the budget for FAISS and BLAS
while it runs (`every_core_for_bulk_work`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import faiss
from threadpoolctl import threadpool_limits

from envad.errors import InvalidInput

log = logging.getLogger(__name__)

#: BLAS and FAISS threads when the settings leave them to the budget
DEFAULT_LIBRARY_THREADS = 1


@dataclass(frozen=True)
class ThreadBudget:
    """Threads per pool, all resolved (no zeros)."""

    total: int
    onnx_intra_op: int
    blas: int
    faiss: int
    decode: int
    onnx_spinning: bool = False

    @classmethod
    def from_settings(cls, *, threads: int = 0, intra_op_threads: int = 0,
                      blas_threads: int = 0, faiss_threads: int = 0,
                      decode_threads: int = 0, intra_op_spinning: int = 0) -> ThreadBudget:
        values = {"threads": threads, "intra_op_threads": intra_op_threads,
                  "blas_threads": blas_threads, "faiss_threads": faiss_threads,
                  "decode_threads": decode_threads}
        for name, value in values.items():
            if value < 0:
                raise InvalidInput(f"{name} must be >= 0 (0: from the thread budget), "
                                   f"got {value}")
        total = threads or os.cpu_count() or 1
        library = min(DEFAULT_LIBRARY_THREADS, total)
        return cls(total=total, onnx_intra_op=intra_op_threads or total,
                   blas=blas_threads or library, faiss=faiss_threads or library,
                   decode=decode_threads or total, onnx_spinning=bool(intra_op_spinning))

    @classmethod
    def from_config(cls, config) -> ThreadBudget:
        return cls.from_settings(threads=config.threads,
                                 intra_op_threads=config.intra_op_threads,
                                 blas_threads=config.blas_threads,
                                 faiss_threads=config.faiss_threads,
                                 decode_threads=config.decode_threads,
                                 intra_op_spinning=config.intra_op_spinning)

    def apply(self) -> None:
        """Limit the process-wide BLAS and OpenMP pools (ONNX Runtime and the decoders are
        sized where they are created)."""
        global _faiss_threads, _budget_total
        threadpool_limits(self.blas, user_api="blas")
        faiss.omp_set_num_threads(self.faiss)
        _faiss_threads, _budget_total = self.faiss, self.total
        log.info("thread budget %d: onnxruntime %d, blas %d, faiss %d, decode %d",
                 self.total, self.onnx_intra_op, self.blas, self.faiss, self.decode)


#: FAISS's OpenMP threads, once a budget is applied (0: none applied, OpenMP's default)
_faiss_threads = 0
#: the applied budget's every thread (0: none applied)
_budget_total = 0
_this_thread = threading.local()


def limit_faiss_in_this_thread() -> None:
    """Give the calling thread the budget's FAISS thread count. OpenMP keeps the count per
    thread: `omp_set_num_threads` in the thread that applied the budget leaves gRPC's
    workers, the micro-batcher and the index thread at OpenMP's default (every core), so
    each thread that searches or adds calls this first (once per thread and budget)."""
    if getattr(_this_thread, "bulk", False):     # every_core_for_bulk_work holds it
        return
    wanted = _faiss_threads
    if wanted and getattr(_this_thread, "faiss", 0) != wanted:
        faiss.omp_set_num_threads(wanted)
        _this_thread.faiss = wanted


@contextmanager
def every_core_for_bulk_work() -> Iterator[None]:
    """For the block, FAISS (OpenMP, in the calling thread) and BLAS (process-wide) on
    every thread of the budget, then the budget again: for bulk work made of large
    matrix products, such as building the neighbour index from the store (k-means and the
    assignment of every row to its list), where one thread each, right for a
    micro-batch, leaves cores idle (250,000 rows: 55.7 s on one thread, 30.4 s on both
    cores of a 2-core host, docs/benchmarks.md). Other threads' BLAS shares the cores
    meanwhile. With no budget applied nothing changes (the libraries' defaults)."""
    total = _budget_total
    if not total:
        yield
        return
    _this_thread.bulk = True
    faiss.omp_set_num_threads(total)
    try:
        with threadpool_limits(total, user_api="blas"):
            yield
    finally:
        _this_thread.bulk = False
        faiss.omp_set_num_threads(_faiss_threads)
        _this_thread.faiss = _faiss_threads
