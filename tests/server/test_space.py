"""A real server saves its index next to the store and loads it at the next start."""

from __future__ import annotations

import json

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from tiny_encoder import synthetic_images


def _ingest(stub, images, first: int) -> None:
    summary = stub.Ingest(iter([pb.IngestRequest(items=[
        pb.IngestItem(image=pb.Image(data=d, id=f"img-{first + i}", env=("cam-a", "cam-b")[i % 2]),
                      split="train") for i, d in enumerate(images)])]), timeout=60)
    assert summary.inserted == len(images), summary


def _neighbours(stub) -> list[list[tuple[str, float]]]:
    out = []
    for row_id in ("img-0", "img-13", "img-29"):
        for row_filter in (pb.Filter(), pb.Filter(envs=["cam-b"])):
            found = stub.Search(pb.SearchRequest(id=row_id, k=6, filter=row_filter), timeout=30)
            out.append([(n.id, round(n.distance, 5)) for n in found.neighbors])
    return out


def _manifest(envad_process) -> dict:
    (folder,) = (envad_process.data_dir / "index").iterdir()
    return json.loads((folder / "manifest.json").read_text())


def test_a_restart_loads_the_saved_index_and_a_kill_adds_the_unsaved_rows(envad_process):
    stub = pb_grpc.AnomalyServiceStub(envad_process.channel())
    images = synthetic_images("normal", 40, seed=4)
    _ingest(stub, images[:30], 0)
    before = _neighbours(stub)

    envad_process.restart()                                  # SIGTERM: saved at shutdown
    assert _manifest(envad_process)["rows"] == 30
    stub = pb_grpc.AnomalyServiceStub(envad_process.channel())
    assert _neighbours(stub) == before
    log = "".join(envad_process.tail)
    assert "loaded: 30 rows (flat), 0 added from the store" in log

    _ingest(stub, images[30:], 30)
    after = _neighbours(stub)
    envad_process.process.kill()                             # kill -9: nothing saved
    envad_process.process.wait()
    envad_process.start()
    stub = pb_grpc.AnomalyServiceStub(envad_process.channel())
    assert _neighbours(stub) == after
    assert "loaded: 40 rows (flat), 10 added from the store" in "".join(envad_process.tail)
    # the writer knows every stored id from the load, the ones added after the save too
    again = stub.Ingest(iter([pb.IngestRequest(items=[
        pb.IngestItem(image=pb.Image(data=images[i], id=f"img-{i}", env="cam-a"), split="train")
        for i in (0, 35)])]), timeout=60)
    assert again.inserted == 0 and again.duplicates == 2, again
