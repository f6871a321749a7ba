"""The thread budget: one setting sizes every pool, each pool can be set on its own, and
applying it limits the process's BLAS and FAISS OpenMP pools."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from envad.errors import InvalidInput
from envad.server.config import load_config
from envad.server.threads import DEFAULT_LIBRARY_THREADS, ThreadBudget


def test_the_budget_defaults_to_every_core_and_splits_by_pool():
    budget = ThreadBudget.from_settings()
    cores = os.cpu_count() or 1
    assert budget.total == budget.onnx_intra_op == budget.decode == cores
    assert budget.blas == budget.faiss == min(DEFAULT_LIBRARY_THREADS, cores)
    three = ThreadBudget.from_settings(threads=3)
    assert (three.onnx_intra_op, three.decode, three.blas) == (3, 3, 1)


def test_each_pool_can_be_set_on_its_own_through_the_config():
    config = load_config(env={"ENVAD_THREADS": "4", "ENVAD_BLAS_THREADS": "2",
                              "ENVAD_INTRA_OP_THREADS": "3", "ENVAD_FAISS_THREADS": "2",
                              "ENVAD_DECODE_THREADS": "1", "ENVAD_INTRA_OP_SPINNING": "1"})
    assert ThreadBudget.from_config(config) == ThreadBudget(
        total=4, onnx_intra_op=3, blas=2, faiss=2, decode=1, onnx_spinning=True)
    assert not ThreadBudget.from_settings().onnx_spinning


def test_a_negative_setting_is_a_one_line_error():
    with pytest.raises(InvalidInput, match="blas_threads must be >= 0"):
        ThreadBudget.from_settings(blas_threads=-1)


def printed_json(script: str, env: dict[str, str] | None = None) -> dict:
    """Run `script` in a fresh interpreter (thread pools are per process); the JSON object
    it printed last."""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_apply_limits_blas_and_faiss_in_the_process():
    script = (
        "import json, faiss, numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "from envad.server.threads import ThreadBudget\n"
        "ThreadBudget.from_settings(threads=2, blas_threads=1, faiss_threads=1).apply()\n"
        "blas = [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "print(json.dumps({'blas': blas, 'faiss': faiss.omp_get_max_threads()}))\n")
    seen = printed_json(script)
    assert seen["blas"] and set(seen["blas"]) == {1}
    assert seen["faiss"] == 1


def test_threads_that_search_or_add_to_the_index_get_the_faiss_budget():
    """OpenMP's thread count is per thread: the budget applied in one thread must reach
    the threads that search (gRPC workers, the micro-batcher) and add (the index thread)."""
    script = (
        "import json, threading, faiss, numpy as np, pyarrow as pa\n"
        "from envad.server.threads import ThreadBudget\n"
        "from envad.server.index import VectorIndex\n"
        "from envad.server.store import make_schema\n"
        "ThreadBudget.from_settings(threads=2, faiss_threads=1).apply()\n"
        "index = VectorIndex(4)\n"
        "seen = {}\n"
        "def search():\n"
        "    index.search(np.zeros((1, 4), np.float32), 1)\n"
        "    seen['searching thread'] = faiss.omp_get_max_threads()\n"
        "def other():\n"
        "    seen['other thread'] = faiss.omp_get_max_threads()\n"
        "n = 8\n"
        "rows = pa.table({'id': [f'r{i}' for i in range(n)], 'env': ['cam'] * n,\n"
        "    'label': ['normal'] * n, 'split': ['train'] * n, 'timestamp': [None] * n,\n"
        "    'uri': [''] * n, 'sha256': [''] * n, 'model_id': ['m'] * n,\n"
        "    'ingested_at': [None] * n, 'vector': pa.FixedSizeListArray.from_arrays(\n"
        "        pa.array(np.ones(4 * n, np.float32)), 4), 'event': [''] * n},\n"
        "    schema=make_schema(4))\n"
        "index.add_table_soon(rows)\n"
        "index.flush()\n"
        "seen['index thread'] = index._adder.submit(faiss.omp_get_max_threads).result()\n"
        "for target in (search, other):\n"
        "    t = threading.Thread(target=target); t.start(); t.join()\n"
        "print(json.dumps(seen))\n")
    seen = printed_json(script, {**os.environ, "OMP_NUM_THREADS": "4"})
    assert seen == {"searching thread": 1, "index thread": 1, "other thread": 4}


def test_bulk_work_gets_every_core_and_the_budget_comes_back():
    """A build of the index from the store trains and fills IVF with FAISS and BLAS on
    every thread of the budget; before and after, the budget's one thread each."""
    script = (
        "import json, tempfile, faiss, numpy as np\n"
        "from pathlib import Path\n"
        "from threadpoolctl import threadpool_info\n"
        "from envad.server import ann, index_files, threads\n"
        "from envad.server.store import EmbeddingStore, Row\n"
        "threads.ThreadBudget.from_settings(threads=2, blas_threads=1, faiss_threads=1).apply()\n"
        "def blas():\n"
        "    return sorted({p['num_threads'] for p in threadpool_info()\n"
        "                   if p['user_api'] == 'blas'})\n"
        "seen = {}\n"
        "trained = ann.trained_ivf\n"
        "def watched(sample, nlist):\n"
        "    seen['training'] = [faiss.omp_get_max_threads(), blas()]\n"
        "    return trained(sample, nlist)\n"
        "ann.trained_ivf = watched\n"
        "tmp = Path(tempfile.mkdtemp())\n"
        "store = EmbeddingStore(tmp / 'db', 'm', 4)\n"
        "vectors = np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32)\n"
        "store.insert([Row(id=f'r{i}', vector=v, env='e') for i, v in enumerate(vectors)])\n"
        "opened = index_files.open_index(tmp / 'index', store, ivf_threshold=100)\n"
        "seen['kind'] = opened.index.kind\n"
        "seen['after'] = [faiss.omp_get_max_threads(), blas()]\n"
        "with threads.every_core_for_bulk_work():\n"
        "    threads.limit_faiss_in_this_thread()\n"
        "    seen['inside, after a search thread limit'] = faiss.omp_get_max_threads()\n"
        "print(json.dumps(seen))\n")
    seen = printed_json(script)
    assert seen == {"training": [2, [2]], "kind": "ivf", "after": [1, [1]],
                    "inside, after a search thread limit": 2}
