"""What already held under load and faults, kept holding (slow: `make test-slow`).

16 concurrent clients scoring and ingesting with no error and every acknowledged id
stored once; kill -9 in the middle of ingestion, three rounds, with no acknowledged row
lost and an idempotent re-send; the active encoder swapped back and forth under load
with no failed request.
"""

from __future__ import annotations

import collections
import threading
import time

import grpc
import pytest

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import wait_for_health
from tiny_encoder import build_tiny_encoder, synthetic_images

pytestmark = pytest.mark.slow
IMAGES = synthetic_images("normal", 64, seed=31)


def stored_ids(stub) -> list[str]:
    chunks = stub.Export(pb.ExportRequest(format=pb.EXPORT_FORMAT_ROWS, without_vectors=True),
                         timeout=120)
    return [row.id for chunk in chunks for row in chunk.rows.rows]


def ingest_items(prefix: str, count: int) -> list[pb.IngestItem]:
    return [pb.IngestItem(image=pb.Image(data=IMAGES[i % len(IMAGES)], id=f"{prefix}-{i}",
                                         env=f"cam-{i % 3}"), split="archive")
            for i in range(count)]


def test_sixteen_clients_score_and_ingest_with_every_acknowledged_id_stored_once(
        fitted_server):
    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    errors: list[str] = []
    acknowledged: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def client(number: int) -> None:
        for round_ in range(6):
            try:
                if number % 2:
                    reply = stub.Score(pb.ScoreRequest(images=[
                        pb.Image(data=IMAGES[(number + round_) % len(IMAGES)])]), timeout=120)
                    bad = [r.error.message for r in reply.results if r.HasField("error")]
                    with lock:
                        errors.extend(bad)
                else:   # clients overlap on ids on purpose: duplicates must stay single
                    items = ingest_items(f"load-{number % 4}-{round_}", 12)
                    summary = stub.Ingest(iter([pb.IngestRequest(items=items)]), timeout=120)
                    with lock:
                        errors.extend(f.message for f in summary.failures)
                        for item in items:
                            acknowledged[item.image.id] += 1
            except grpc.RpcError as exc:
                with lock:
                    errors.append(f"{exc.code().name}: {exc.details()}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ids = [i for i in stored_ids(stub) if i.startswith("load-")]
    assert len(ids) == len(set(ids)) == len(acknowledged)


def test_kill_9_mid_ingest_loses_no_acknowledged_row(envad_process):
    acknowledged: set[str] = set()
    sent = []
    for round_ in range(3):
        stub = pb_grpc.AnomalyServiceStub(envad_process.channel())
        stop = threading.Event()

        def writer(round_=round_, stub=stub, stop=stop) -> None:
            batch = 0
            while not stop.is_set():
                items = ingest_items(f"kill-{round_}-{batch}", 10)
                sent.extend(items)
                batch += 1
                try:
                    summary = stub.Ingest(iter([pb.IngestRequest(items=items)]), timeout=30)
                except grpc.RpcError:
                    return        # the server died under this call: nothing acknowledged
                failed = {f.id for f in summary.failures}
                acknowledged.update(i.image.id for i in items if i.image.id not in failed)

        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(1.5)
        assert envad_process.process is not None
        envad_process.process.kill()                          # kill -9
        envad_process.process.wait()
        stop.set()
        thread.join(30)
        started = time.monotonic()
        envad_process.start()
        wait_for_health(envad_process.address, timeout=60)
        assert time.monotonic() - started < 60
        stub = pb_grpc.AnomalyServiceStub(envad_process.channel())
        stored = set(stored_ids(stub))
        assert acknowledged <= stored, sorted(acknowledged - stored)[:5]
    resent = stub.Ingest(iter([pb.IngestRequest(items=sent[i:i + 50])
                               for i in range(0, len(sent), 50)]), timeout=300)
    assert resent.failed == 0 and resent.inserted + resent.duplicates == len(sent)
    ids = stored_ids(stub)
    assert len(ids) == len(set(ids)) == len({i.image.id for i in sent})


def test_activating_encoders_back_and_forth_under_load_fails_no_request(envad_process):
    build_tiny_encoder(envad_process.models_dir / "swap.onnx", model_id="swap", seed=11)
    stub = pb_grpc.AnomalyServiceStub(envad_process.channel())
    deadline = time.monotonic() + 30
    while "swap" not in {m.model_id for m in stub.ListModels(pb.ListModelsRequest(),
                                                             timeout=10).models}:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    errors: list[str] = []
    served: collections.Counter = collections.Counter()
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                reply = stub.Embed(pb.EmbedRequest(images=[pb.Image(data=IMAGES[0])]),
                                   timeout=60)
                served[reply.provenance.model_id] += 1
            except grpc.RpcError as exc:
                errors.append(f"{exc.code().name}: {exc.details()}")

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for model_id in ["swap", "tiny-test"] * 4:
        stub.ActivateModel(pb.ActivateModelRequest(model_id=model_id), timeout=60)
        time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert served["swap"] > 0 and served["tiny-test"] > 0
