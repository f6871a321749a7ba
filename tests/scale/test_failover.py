"""Losing a replica: `envad serve` processes on one store on object storage (moto's S3
server on loopback), killed with SIGKILL under load. A reader's loss fails no Score of
a client that knows both readers; the writer's loss leaves the readers serving, and
re-sending the unacknowledged Ingest batches after its restart stores every image
exactly once."""

from __future__ import annotations

import threading
import time

from s3_emulator import UriServer, in_process, local_models

from envad.client.library import EnvadClient
from envad.client.retry import RetryPolicy
from envad.errors import EnvadError
from envad.records import ImageInput, IngestInput
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import fit_normal_rows
from tiny_encoder import synthetic_images


def _process(uri: str, models, cache, options: dict[str, str], role: str) -> UriServer:
    server = UriServer(uri, models, cache, options)
    server.env["ENVAD_ROLE"] = role
    return server


def test_a_killed_reader_fails_no_score(s3_options, s3_uri, tmp_path, tiny_model_path):
    models = local_models(tmp_path, tiny_model_path)
    writer = in_process(s3_uri, models, tmp_path / "cache-w", s3_options, role="writer").start()
    readers = [_process(s3_uri, models, tmp_path / f"cache-r{n}", s3_options, "reader")
               for n in (1, 2)]
    try:
        fit_normal_rows(pb_grpc.AnomalyServiceStub(writer.channel()), count=60)
        for reader in readers:
            reader.start()
        probe = synthetic_images("odd", 2, seed=3)
        scored, failed = [0, 0], []         # calls answered before / after the kill
        killed, stop = threading.Event(), threading.Event()
        addresses = ",".join(r.address for r in readers)
        with EnvadClient(addresses, writer=writer.address, timeout=30) as client:
            while not all(_has_bundle(client) for _ in range(4)):
                time.sleep(0.2)             # both readers followed the writer's Fit

            def score_loop() -> None:
                while not stop.is_set():
                    try:
                        client.score([ImageInput(d, env="cam-a") for d in probe])
                        scored[killed.is_set()] += 1
                    except EnvadError as exc:
                        failed.append(exc)

            threads = [threading.Thread(target=score_loop) for _ in range(3)]
            for thread in threads:
                thread.start()
            time.sleep(1.5)
            assert readers[0].process is not None
            readers[0].process.kill()
            readers[0].process.wait()
            killed.set()
            time.sleep(3.0)
            stop.set()
            for thread in threads:
                thread.join(60)
        assert failed == []
        assert scored[0] > 0 and scored[1] > 0, scored
    finally:
        for reader in readers:
            reader.stop()
        writer.stop()


def _has_bundle(client: EnvadClient) -> bool:
    try:
        return client.info().bundle is not None
    except EnvadError:
        return False


def test_a_killed_writer_loses_no_acknowledged_image(s3_options, s3_uri, tmp_path,
                                                     tiny_model_path):
    models = local_models(tmp_path, tiny_model_path)
    writer = _process(s3_uri, models, tmp_path / "cache-w", s3_options, "writer")
    writer.start()
    reader = in_process(s3_uri, models, tmp_path / "cache-r", s3_options, role="reader",
                        writer_address=writer.address).start()
    images = synthetic_images("normal", 96, seed=11)
    batches = [[IngestInput(ImageInput(d, id=f"img-{b}-{i}", env="cam-a"), split="train")
                for i, d in enumerate(images[b * 8:(b + 1) * 8])] for b in range(12)]
    acknowledged: set[int] = set()
    # one attempt per call: a batch the dead writer did not answer is re-sent below
    once = RetryPolicy(max_attempts=1)
    try:
        with EnvadClient(reader.address, writer=writer.address, timeout=20,
                         retry=once) as client:
            for n, batch in enumerate(batches):
                if n == 6:
                    assert writer.process is not None
                    writer.process.kill()
                    writer.process.wait()
                try:
                    client.ingest(batch)
                    acknowledged.add(n)
                except EnvadError:
                    pass
            assert acknowledged == set(range(6))
            # the reader keeps serving what was stored, picked up at its next refresh
            deadline = time.monotonic() + 30
            while (len(client.search(image=images[0], k=3).neighbors) < 3
                   and time.monotonic() < deadline):
                time.sleep(0.1)
            assert len(client.search(image=images[0], k=3).neighbors) == 3
        writer.start()                      # the same address: it takes its lease back
        with EnvadClient(writer.address, timeout=60) as client:
            for n, batch in enumerate(batches):
                if n not in acknowledged:
                    client.ingest(batch)
            client.ingest(batches[0])       # a re-sent acknowledged batch stores nothing
            ids = [i for batch in client.export(with_vectors=False)
                   for i in batch.column("id").to_pylist()]
        assert sorted(ids) == sorted(item.image.id for batch in batches for item in batch)
    finally:
        reader.stop()
        writer.stop()
