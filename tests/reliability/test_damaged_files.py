"""Damaged files met at start: a detector bundle whose manifest is garbage does not stop
the server; the store's RPCs keep working, Score and GetInfo name the damage and the
fix, and a Fit replaces the bundle."""

from __future__ import annotations

import grpc
import pytest

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from tiny_encoder import synthetic_images


def test_a_garbage_bundle_manifest_leaves_the_store_serving_and_fit_replaces_it(
        fitted_server):
    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    bundle_id = stub.GetInfo(pb.GetInfoRequest(), timeout=10).bundle.bundle_id
    manifest = fitted_server.data_dir / "bundles" / bundle_id / "manifest.json"
    fitted_server.stop()
    manifest.write_bytes(b"\x00garbage{{{")
    fitted_server.start()                      # starts: the bundle is not the store
    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    assert "cannot be loaded" in info.hint and "fit again" in info.hint
    assert f"bundles/{bundle_id}/manifest.json" in info.hint      # names the file ...
    assert str(fitted_server.data_dir) not in info.hint             # ... not the server's path
    assert info.total_rows == 120
    image = pb.Image(data=synthetic_images("normal", 1, seed=77)[0], env="cam-a")
    with pytest.raises(grpc.RpcError) as refused:
        stub.Score(pb.ScoreRequest(images=[image]), timeout=30)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "fit again" in refused.value.details()
    # the store's other RPCs work: Ingest, Search, Export
    summary = stub.Ingest(iter([pb.IngestRequest(items=[pb.IngestItem(image=image,
                                                                      split="train")])]),
                          timeout=30)
    assert summary.inserted == 1
    assert stub.Search(pb.SearchRequest(image=image.data, k=3), timeout=30).neighbors
    assert sum(1 for _ in stub.Export(pb.ExportRequest(), timeout=30)) >= 1
    fit = stub.Fit(pb.FitRequest(seed=1), timeout=120)     # a Fit replaces it
    assert fit.bundle_id != bundle_id
    assert stub.Score(pb.ScoreRequest(images=[image]), timeout=30).results[0].ensemble >= 0
    assert stub.GetInfo(pb.GetInfoRequest(), timeout=10).hint == "ready"
