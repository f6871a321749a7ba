"""Object-storage requests per store operation: envad's settings against the reference.

A store on moto's S3 server on loopback (the test suite's emulator: every request it
answers is counted, nothing leaves the machine). Each operation runs `--rounds` times on
a store opened with envad's settings (`store.READ_CONSISTENCY`: reads use the version
the process holds; `remote_dir`: writes sent when the stream closes) and on one opened
with the reference settings (LanceDB checking for a newer version on every read; pyarrow's
default multipart writes), in the same run. One JSON line per operation: requests and
listings per call for each, and their ratio.

    python -m benchmarks.store_requests --rows 2000 --rounds 20
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import logging
import threading
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow.fs as pafs
from moto import server as moto_server
from moto.moto_server import werkzeug_app

from benchmarks.common import emit, log
from envad.server import store as store_module
from envad.server.remote_dir import RemoteDir
from envad.server.store import EmbeddingStore, Row

BUCKET = "envad-bench"
DIM = 64


class RequestCounter:
    """Every request moto's S3 servers in this process answer while `counting`, as
    (method, whether it is a listing) -> count (tests/scale counts with it too)."""

    def __init__(self) -> None:
        self.seen: collections.Counter[tuple[str, bool]] = collections.Counter()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def counting(self) -> Iterator[RequestCounter]:
        answer = werkzeug_app.DomainDispatcherApplication.__call__

        def counted(app, environ, start_response):
            query = environ.get("QUERY_STRING", "")
            method = environ["REQUEST_METHOD"]
            listing = method == "GET" and ("list-type" in query or "prefix=" in query)
            with self._lock:
                self.seen[(method, listing)] += 1
            return answer(app, environ, start_response)

        werkzeug_app.DomainDispatcherApplication.__call__ = counted  # type: ignore[method-assign]
        try:
            yield self
        finally:
            werkzeug_app.DomainDispatcherApplication.__call__ = answer  # type: ignore[method-assign]

    def clear(self) -> None:
        with self._lock:
            self.seen.clear()

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.seen.values())

    @property
    def listings(self) -> int:
        with self._lock:
            return self.seen[("GET", True)]

    def per_call(self, operation: Callable[[], object], rounds: int) -> tuple[float, float]:
        """Requests and listings per call of `operation`."""
        self.clear()
        for _ in range(rounds):
            operation()
        return self.total / rounds, self.listings / rounds


def store_on(uri: str, options: dict[str, str], consistency: dt.timedelta | None
             ) -> EmbeddingStore:
    store_module.READ_CONSISTENCY = consistency     # read when the store connects
    try:
        return EmbeddingStore(uri, "bench", DIM, options)
    finally:
        store_module.READ_CONSISTENCY = None


def operations(uri: str, options: dict[str, str], consistency: dt.timedelta | None,
               multipart: bool) -> dict[str, Callable[[], object]]:
    store = store_on(f"{uri}/lancedb", options, consistency)
    row_ids = np.asarray(store.read(with_vectors=False, columns=["id"],
                                    with_row_ids=True)["_rowid"])
    rng = np.random.default_rng(0)
    remote = RemoteDir(uri, options)
    if multipart:        # pyarrow's default: a write is a multipart upload
        endpoint = options["aws_endpoint"].removeprefix("http://")
        remote._fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http",
                                       region=options["aws_region"],
                                       access_key=options["aws_access_key_id"],
                                       secret_key=options["aws_secret_access_key"])

    def idle_refresh() -> None:          # what a server's refresh reads of its table
        store.refresh()
        store.fragment_ids()
        store.count()

    return {
        "read 40 re-ranking candidates by row id":
            lambda: store.vectors_by_row_id(rng.choice(row_ids, 40)),
        "refresh with nothing new": idle_refresh,
        "write a small object (lease, statistics)":
            lambda: remote.write_bytes("state.json", b"{}" * 500),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"aws_endpoint": f"http://{host}:{port}", "allow_http": "true",
                   "aws_region": "us-east-1", "aws_access_key_id": "bench",
                   "aws_secret_access_key": "bench-secret"}
        pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http",
                          region="us-east-1", access_key="bench", secret_key="bench-secret",
                          allow_bucket_creation=True).create_dir(BUCKET)
        uri = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
        filled = store_on(f"{uri}/lancedb", options, None)
        rng = np.random.default_rng(1)
        filled.append(filled.to_arrow([
            Row(id=f"r{i}", vector=rng.normal(size=DIM).astype(np.float32), env="cam")
            for i in range(args.rows)]))
        log(f"store requests: {args.rows:,} rows, {args.rounds} rounds per operation")
        shipped = operations(uri, options, None, multipart=False)
        reference = operations(uri, options, dt.timedelta(0), multipart=True)
        with RequestCounter().counting() as counter:
            for name in shipped:
                requests, listings = counter.per_call(shipped[name], args.rounds)
                ref_requests, ref_listings = counter.per_call(reference[name], args.rounds)
                emit({"benchmark": "store_requests", "operation": name, "rows": args.rows,
                      "requests": requests, "listings": listings,
                      "reference_requests": ref_requests, "reference_listings": ref_listings,
                      "ratio_reference_over_envad": (ref_requests / requests if requests
                                                     else None)})
    finally:
        server.stop()


if __name__ == "__main__":
    main()
