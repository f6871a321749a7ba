"""16 clients against one server for a fixed time, one of them hostile.

15 clean clients loop over Score, Ingest (unique ids) and Search; one hostile client loops
over ids with control characters, 1 MB ids, 100,000-value filters, messages above the
server's message limit, unparsable bytes, out-of-range timestamps, huge vectors, empty
and out-of-range ScoreStream requests and garbage images. Reported (one JSON line):
failed items of the clean clients, every status the hostile client got (and whether each
message was one line), the server's RSS before and after, and whether its log holds a
traceback. docs/reliability.md quotes a run.

    python -m benchmarks.hostile_mix --seconds 60 --clients 16
"""

from __future__ import annotations

import argparse
import collections
import io
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
from google.protobuf.timestamp_pb2 import Timestamp
from PIL import Image

from benchmarks.common import emit, log, process_memory
from benchmarks.models import build_resnet18_onnx
from envad.client.server_process import LocalServer
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc

MESSAGE_LIMIT = 256 * 1024 * 1024   # the clients' own limit: the server's must refuse


def pngs(count: int, seed: int, size: int = 32) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(
            buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def rss_mb(pid: int) -> float:
    return process_memory(pid)["VmRSS"] / 2 ** 20


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[
        ("grpc.max_send_message_length", MESSAGE_LIMIT),
        ("grpc.max_receive_message_length", MESSAGE_LIMIT)])


class Tally:
    """Thread-safe counters."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter = collections.Counter()
        self.examples: dict[str, str] = {}

    def add(self, key: str, example: str = "", count: int = 1) -> None:
        with self.lock:
            self.counts[key] += count
            if example and key not in self.examples:
                self.examples[key] = example[:160]


def clean_client(address: str, number: int, images: list[bytes], stop: float,
                 tally: Tally) -> None:
    stub = pb_grpc.AnomalyServiceStub(channel(address))
    serial = 0
    while time.monotonic() < stop:
        kind = serial % 3
        serial += 1
        try:
            if kind == 0:
                reply = stub.Score(pb.ScoreRequest(images=[pb.Image(data=images[serial % 40],
                                                                    env="cam-a")]), timeout=60)
                tally.add("clean_items")
                tally.add("clean_failed_items",
                          count=sum(r.HasField("error") for r in reply.results))
            elif kind == 1:
                items = [pb.IngestItem(image=pb.Image(data=images[(serial + i) % 40],
                                                      id=f"c{number}-{serial}-{i}",
                                                      env=f"cam-{number % 4}"),
                                       split="archive") for i in range(8)]
                summary = stub.Ingest(iter([pb.IngestRequest(items=items)]), timeout=60)
                tally.add("clean_items", count=len(items))
                tally.add("clean_failed_items", count=summary.failed)
            else:
                stub.Search(pb.SearchRequest(image=images[serial % 40], k=5,
                                             filter=pb.Filter(envs=["cam-a", "cam-b"])),
                            timeout=60)
                tally.add("clean_items")
        except grpc.RpcError as exc:
            tally.add("clean_rpc_errors", f"{exc.code().name}: {exc.details()}")


HostileCall = Callable[[pb_grpc.AnomalyServiceStub, grpc.Channel], object]


def hostile_requests(images: list[bytes]) -> list[tuple[str, HostileCall]]:
    """(name, call(stub, raw_channel)) of every hostile request the client cycles over."""
    huge_filter = pb.Filter(envs=[f"env-{i}" for i in range(100_000)])
    far = Timestamp(seconds=300_000_000_000)
    oversize = pb.ScoreRequest(images=[pb.Image(data=b"\xff" * (80 * 1024 * 1024))])
    bad_ids = [pb.IngestItem(image=pb.Image(data=images[i], id=f"bad\n{i}"))
               for i in range(8)]

    def stream(stub, _):
        requests = [pb.ScoreRequest(), pb.ScoreRequest(images=[pb.Image(data=images[0])],
                                                       top_k=101)]
        answers = list(stub.ScoreStream(iter(requests), timeout=60))
        assert len(answers) == 2 and all(a.HasField("error") for a in answers)
    return [
        ("ingest_control_char_ids", lambda stub, _: stub.Ingest(
            iter([pb.IngestRequest(items=bad_ids)]), timeout=60)),
        ("search_1mb_id", lambda stub, _: stub.Search(pb.SearchRequest(id="x" * 2 ** 20),
                                                      timeout=60)),
        ("export_100k_filter", lambda stub, _: list(stub.Export(
            pb.ExportRequest(filter=huge_filter), timeout=60))),
        ("fit_100k_filter", lambda stub, _: stub.Fit(pb.FitRequest(filter=huge_filter),
                                                     timeout=60)),
        ("score_80mb_message", lambda stub, _: stub.Score(oversize, timeout=60)),
        ("search_unparsable", lambda _, raw: raw.unary_unary(
            "/envad.v1.AnomalyService/Search")(b"\x1a\x02\xff\xfe", timeout=60)),
        ("ingest_bad_timestamp", lambda stub, _: stub.Ingest(iter([pb.IngestRequest(items=[
            pb.IngestItem(image=pb.Image(data=images[1], timestamp=far))])]), timeout=60)),
        ("search_huge_vector", lambda stub, _: stub.Search(pb.SearchRequest(
            vector=pb.Vector(values=[3e38] * 512)), timeout=60)),
        ("score_garbage_image", lambda stub, _: stub.Score(pb.ScoreRequest(
            images=[pb.Image(data=b"GIF89a" + b"\x00" * 64)]), timeout=60)),
        ("score_stream_bad_requests", stream),
    ]


def hostile_client(address: str, images: list[bytes], stop: float, tally: Tally) -> None:
    raw = channel(address)
    stub = pb_grpc.AnomalyServiceStub(raw)
    requests = hostile_requests(images)
    serial = 0
    while time.monotonic() < stop:
        name, call = requests[serial % len(requests)]
        serial += 1
        try:
            reply = call(stub, raw)
            failures = getattr(reply, "failures", [])
            for failure in failures:
                tally.add(f"item {failure.code}", f"{name}: {failure.message}")
            if not failures:
                tally.add("answered in-band", name)
        except grpc.RpcError as exc:
            details = exc.details() or ""
            tally.add(exc.code().name, f"{name}: {details}")
            if "\n" in details or len(details) > 1000:
                tally.add("multi_line_or_long_message", name)


def fit_server(address: str, images: list[bytes]) -> None:
    stub = pb_grpc.AnomalyServiceStub(channel(address))
    items = [pb.IngestItem(image=pb.Image(data=d, env=("cam-a", "cam-b")[i % 2]),
                           split="train") for i, d in enumerate(images)]
    stub.Ingest(iter([pb.IngestRequest(items=items[i:i + 20])
                      for i in range(0, len(items), 20)]), timeout=600)
    stub.Fit(pb.FitRequest(seed=0, detectors=["KNN", "PCA", "IsoForest"]), timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=16, help="total, one of them hostile")
    args = parser.parse_args()
    images = pngs(200, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = build_resnet18_onnx(32, work / "models" / "hostile-mix.onnx",
                                    model_id="hostile-mix")
        log_path = work / "server.log"
        with LocalServer(work / "data", model.parent, log_path=log_path) as server:
            assert server.process is not None
            fit_server(server.address, images)
            time.sleep(3)     # a refresh period: the fit's memory settles
            before = rss_mb(server.process.pid)
            tally = Tally()
            stop = time.monotonic() + args.seconds
            threads = [threading.Thread(target=clean_client,
                                        args=(server.address, n, images, stop, tally))
                       for n in range(args.clients - 1)]
            threads.append(threading.Thread(target=hostile_client,
                                            args=(server.address, images, stop, tally)))
            log(f"{args.clients} clients for {args.seconds:.0f} s, one hostile ...")
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            peak = rss_mb(server.process.pid)
            time.sleep(5)     # idle: what the server keeps
            after = rss_mb(server.process.pid)
        server_log = log_path.read_text()
    hostile = {k: v for k, v in tally.counts.items() if not k.startswith("clean")}
    emit({"benchmark": "hostile_mix", "seconds": args.seconds, "clients": args.clients,
          "clean_items": tally.counts["clean_items"],
          "clean_failed_items": tally.counts["clean_failed_items"],
          "clean_rpc_errors": tally.counts["clean_rpc_errors"],
          "hostile_statuses": hostile,
          "rss_mb_before": round(before), "rss_mb_peak_seen": round(peak),
          "rss_mb_after_idle": round(after), "rss_growth_mb": round(after - before),
          "traceback_in_log": "Traceback" in server_log,
          "examples": tally.examples})


if __name__ == "__main__":
    main()
