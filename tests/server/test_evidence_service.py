"""Score's evidence through a real server: an image's nearest normal neighbours are never
itself (same id or same content) nor a stored known anomaly, unless the request asks."""

from __future__ import annotations

import pytest

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from tiny_encoder import synthetic_images


@pytest.fixture
def stocked(envad_server):
    """40 normal training rows (n0..n39), 6 odd rows stored with label "anomaly", a bundle
    fitted on them all."""
    stub = pb_grpc.AnomalyServiceStub(envad_server.channel())
    normal = synthetic_images("normal", 40, seed=1)
    odd = synthetic_images("odd", 6, seed=2)
    items = [pb.IngestItem(image=pb.Image(data=d, id=f"n{i}", env="cam-a"), split="train")
             for i, d in enumerate(normal)]
    items += [pb.IngestItem(image=pb.Image(data=d, id=f"a{i}", env="cam-a"), split="train",
                            label="anomaly") for i, d in enumerate(odd)]
    assert stub.Ingest(iter([pb.IngestRequest(items=items)]), timeout=60).inserted == 46
    stub.Fit(pb.FitRequest(seed=0, allow_few_rows=True), timeout=120)
    return stub, normal, odd


def neighbour_ids(response) -> list[str]:
    return [n.id for n in response.results[0].neighbors]


def test_a_stored_image_is_not_its_own_nearest_normal(stocked):
    stub, normal, _ = stocked
    by_id = stub.Score(pb.ScoreRequest(images=[pb.Image(data=normal[3], id="n3")], top_k=5,
                                       neighbor_filter=pb.Filter(splits=["train"])), timeout=30)
    assert "n3" not in neighbour_ids(by_id) and len(neighbour_ids(by_id)) == 5
    assert by_id.results[0].neighbors[0].distance > 0
    # the same bytes under another id (or none): still the same image, by content
    unnamed = stub.Score(pb.ScoreRequest(images=[pb.Image(data=normal[3])], top_k=5),
                         timeout=30)
    assert "n3" not in neighbour_ids(unnamed)
    itself = stub.Score(pb.ScoreRequest(images=[pb.Image(data=normal[3], id="n3")], top_k=5,
                                        include_self=True), timeout=30)
    assert neighbour_ids(itself)[0] == "n3" and itself.results[0].neighbors[0].distance < 1e-4


def test_stored_anomalies_are_no_normal_evidence_unless_asked(stocked):
    stub, _, odd = stocked
    fresh_odd = synthetic_images("odd", 1, seed=77)[0]
    default = stub.Score(pb.ScoreRequest(images=[pb.Image(data=fresh_odd)], top_k=10,
                                         neighbor_filter=pb.Filter(splits=["train"])),
                         timeout=30)
    assert len(neighbour_ids(default)) == 10
    assert all(n.label != "anomaly" for n in default.results[0].neighbors)
    asked = stub.Score(pb.ScoreRequest(images=[pb.Image(data=fresh_odd)], top_k=10,
                                       neighbor_filter=pb.Filter(splits=["train"]),
                                       include_known_anomalies=True), timeout=30)
    assert {f"a{i}" for i in range(6)} <= set(neighbour_ids(asked))


def test_search_leaves_out_itself_and_anomalies_on_request(stocked):
    stub, normal, odd = stocked
    plain = stub.Search(pb.SearchRequest(id="n5", k=3), timeout=30)
    assert plain.neighbors[0].id == "n5"           # a search finds a stored image itself
    others = stub.Search(pb.SearchRequest(id="n5", k=3, exclude_self=True), timeout=30)
    assert "n5" not in [n.id for n in others.neighbors] and len(others.neighbors) == 3
    by_image = stub.Search(pb.SearchRequest(image=odd[0], k=8, exclude_self=True,
                                            exclude_known_anomalies=True), timeout=30)
    assert len(by_image.neighbors) == 8
    assert all(n.id.startswith("n") for n in by_image.neighbors)
