"""One writer and readers on one store on object storage (moto's S3 server on loopback):
Score throughput through one and two readers, staleness from an acknowledged Ingest to
its visibility on a reader, a reader's start on a `--rows` store, and the object-store
requests a Score makes.

- reader_start: a reader on an empty cache, from start to SERVING, on a store of
  `--rows` seeded 512-d rows whose index the writer saved and uploaded (a trained IVF
  index, below `--ivf-threshold` rows, the reader downloads and loads; a flat one it
  builds from the store) — and, as the reference, the same reader building its index
  from the store (no saved index on the bucket);
- throughput: `--clients` threads sending one-image Score calls for `--seconds` through
  a client with one reader's address, then with both readers' (gRPC round_robin); every
  process shares this machine's cores, so the second reader adds no cores here;
- staleness: one-image Ingest calls on the writer, each after a random pause (so that
  they fall at every point of the reader's refresh cycle); for each, the seconds from
  its acknowledgement until a Search on a reader finds the row (polled every 20 ms);
- requests per Score: the S3 requests moto receives during `--calls` Score calls on a
  reader whose refresh is paused, divided by the calls (reads come from memory: 0).

    python -m benchmarks.scale_out --rows 100000
    python -m benchmarks.scale_out --rows 100000 --ivf-threshold 50000
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
from moto import server as moto_server

from benchmarks.common import emit, log, percentile_ms
from benchmarks.models import build_resnet18_onnx
from benchmarks.scale import write_store
from benchmarks.serving import camera_jpegs
from envad.client.library import EnvadClient
from envad.client.server_process import LocalServer
from envad.records import ImageInput, IngestInput
from envad.server.remote_dir import RemoteDir

SIZE = 32
MODEL_ID = "bench-scale-out"
BUCKET = "envad-bench"
REFRESH_S = 2.0
#: ENVAD_* settings of every server of the run (--ivf-threshold)
SETTINGS: dict[str, str] = {}


class Replica(LocalServer):
    """`envad serve` in a role on a store on object storage, with a cache of its own."""

    def __init__(self, uri: str, models: Path, cache: Path, options: dict[str, str],
                 role: str, refresh_s: float = REFRESH_S):
        listed = ",".join(f"{k}={v}" for k, v in options.items())
        super().__init__(cache, models, env={"ENVAD_STORAGE_OPTIONS": listed,
                                             "ENVAD_LOG_LEVEL": "WARNING",
                                             **SETTINGS})
        self.uri, self.cache, self.role, self.refresh_s = uri, cache, role, refresh_s

    def serve_args(self) -> list[str]:
        return ["serve", "--host", self.host, "--port", str(self.port), "--data-dir", self.uri,
                "--models-dir", str(self.models_dir), "--cache-dir", str(self.cache),
                "--role", self.role, "--refresh-seconds", str(self.refresh_s)]


class RequestCounter(logging.Handler):
    """Counts the requests moto's server logs (werkzeug's one line per request)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def start_s3() -> tuple[moto_server.ThreadedMotoServer, dict[str, str], RequestCounter]:
    counter = RequestCounter()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    werkzeug.addHandler(counter)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"aws_endpoint": f"http://{host}:{port}", "allow_http": "true",
               "aws_region": "us-east-1", "aws_access_key_id": "bench",
               "aws_secret_access_key": "bench-secret"}
    pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", region="us-east-1",
                      access_key="bench", secret_key="bench-secret",
                      allow_bucket_creation=True).create_dir(BUCKET)
    return server, options, counter


def timed_start(server: LocalServer) -> float:
    started = time.perf_counter()
    server.start(timeout=600)
    return time.perf_counter() - started


def throughput(addresses: list[str], jpeg: bytes, clients: int, seconds: float) -> float:
    """Score calls a second from `clients` threads through one client of `addresses`."""
    done = [0] * clients
    stop = time.perf_counter() + seconds
    with EnvadClient(",".join(addresses), timeout=60) as client:
        client.score([jpeg])                                   # connect, warm up

        def loop(slot: int) -> None:
            while time.perf_counter() < stop:
                client.score([jpeg])
                done[slot] += 1
        threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sum(done) / (time.perf_counter() - started)


def staleness(writer: str, reader: str, jpegs: list[bytes]) -> list[float]:
    """Seconds from each one-image Ingest's acknowledgement to its row found on `reader`."""
    delays = []
    phases = np.random.default_rng(0).uniform(0, REFRESH_S, len(jpegs))
    with EnvadClient(writer, timeout=60) as ingest, EnvadClient(reader, timeout=60) as read:
        for n, jpeg in enumerate(jpegs):
            time.sleep(phases[n])       # each Ingest at another point of the refresh cycle
            row_id = f"stale-{n}-{uuid.uuid4().hex[:8]}"
            ingest.ingest([IngestInput(ImageInput(jpeg, id=row_id, env="cam-stale"))])
            acknowledged = time.perf_counter()
            while not any(hit.id == row_id for hit in read.search(image=jpeg, k=3).neighbors):
                time.sleep(0.02)
            delays.append(time.perf_counter() - acknowledged)
    return delays


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the store")
    parser.add_argument("--clients", type=int, default=4, help="scoring threads")
    parser.add_argument("--seconds", type=float, default=20.0, help="per throughput run")
    parser.add_argument("--calls", type=int, default=200, help="Score calls counted")
    parser.add_argument("--ingests", type=int, default=40, help="staleness samples")
    parser.add_argument("--ivf-threshold", type=int, default=None,
                        help="the servers' ivf_threshold (default the server's): below the "
                             "rows, the saved index is a trained IVF one, which a reader "
                             "downloads; a flat one it builds from the store")
    args = parser.parse_args(argv)
    if args.ivf_threshold is not None:
        SETTINGS["ENVAD_IVF_THRESHOLD"] = str(args.ivf_threshold)
    s3, options, counter = start_s3()
    try:
        with tempfile.TemporaryDirectory(prefix="envad-scale-out-") as tmp:
            emit(measure(Path(tmp), options, counter, args))
    finally:
        s3.stop()


def measure(work: Path, options: dict[str, str], counter: RequestCounter, args) -> dict:
    uri = f"s3://{BUCKET}/store"
    started = time.perf_counter()
    write_store(f"{uri}/lancedb", args.rows, MODEL_ID, storage_options=options)
    log(f"scale_out: {args.rows:,} rows written to {uri} in {time.perf_counter() - started:.1f} s")
    models = build_resnet18_onnx(SIZE, work / "models" / "encoder.onnx",
                                 model_id=MODEL_ID).parent
    jpegs = camera_jpegs(args.ingests + 1, 640, 480)
    record: dict = {"benchmark": "scale_out", "rows": args.rows, "size": SIZE,
                    "clients": args.clients, "refresh_s": REFRESH_S,
                    "ivf_threshold": args.ivf_threshold}
    # the reference: a reader building its index from the store (nothing saved yet)
    rebuilt = Replica(uri, models, work / "cache-0", options, "reader")
    record["reader_start_rebuild_s"] = timed_start(rebuilt)
    rebuilt.stop()
    writer = Replica(uri, models, work / "cache-w", options, "writer")
    record["writer_start_s"] = timed_start(writer)     # builds, saves and uploads its index
    readers = [Replica(uri, models, work / f"cache-r{n}", options, "reader") for n in (1, 2)]
    try:
        with EnvadClient(writer.address, timeout=600) as client:
            client.fit(allow_few_rows=True)
        uploaded = RemoteDir(uri, options).child("index").files()
        record["index_uploaded"] = any(name.endswith("manifest.json") for name in uploaded)
        # a reader joining a running deployment finds the bundle's score statistics the
        # writer uploaded (else it would start them from the stored rows itself)
        statistics = RemoteDir(uri, options).child("camera_stats")
        deadline = time.monotonic() + 120
        while (not any("-scores-" in name for name in statistics.files())
               and time.monotonic() < deadline):
            time.sleep(0.5)
        record["reader_start_s"] = timed_start(readers[0])
        readers[1].start(timeout=600)
        record["ratio_reader_start_over_rebuild"] = (record["reader_start_s"]
                                                     / record["reader_start_rebuild_s"])
        one = throughput([readers[0].address], jpegs[0], args.clients, args.seconds)
        two = throughput([r.address for r in readers], jpegs[0], args.clients, args.seconds)
        record.update(score_per_s_one_reader=one, score_per_s_two_readers=two,
                      ratio_two_over_one=two / one)
        delays = staleness(writer.address, readers[1].address, jpegs[1:])
        record.update(staleness_p50_ms=percentile_ms(delays, 50),
                      staleness_p99_ms=percentile_ms(delays, 99))
    finally:
        for server in [*readers, writer]:
            server.stop()
    record["requests_per_score"] = requests_per_score(uri, models, work, options, counter,
                                                      jpegs[0], args.calls)
    return record


def requests_per_score(uri: str, models: Path, work: Path, options: dict[str, str],
                       counter: RequestCounter, jpeg: bytes, calls: int) -> float:
    """S3 requests during `calls` Score calls on a reader whose refresh is paused."""
    reader = Replica(uri, models, work / "cache-quiet", options, "reader", refresh_s=3600)
    reader.start(timeout=600)
    try:
        with EnvadClient(reader.address, timeout=60) as client:
            client.score([jpeg])
            before = counter.count
            for _ in range(calls):
                client.score([jpeg])
            return (counter.count - before) / calls
    finally:
        reader.stop()


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
