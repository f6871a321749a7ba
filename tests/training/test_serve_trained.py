"""A model trained by `envad train` on PhotoDigits loads in `envad serve` and scores.

Overrides the shared `tiny_model_path` fixture (tests/conftest.py) with the exported
file, so `envad_server` starts a real server process on it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from envad.client.cli import main
from envad.training.data import load_folder


@pytest.fixture(scope="module")
def tiny_model_path(tiny_photodigits, tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("trained")
    assert main(["train", "--data", str(tiny_photodigits), "--algorithm", "erm",
                 "--out", str(work / "run"), "--epochs", "1", "--batch-size", "16",
                 "--quiet"]) == 0
    out = work / "photodigits-erm.onnx"
    assert main(["export", str(work / "run"), "--out", str(out),
                 "--model-id", "erm-tiny-photodigits"]) == 0
    return out


def test_trained_model_serves_and_scores(envad_server, tiny_photodigits):
    from envad.v1 import envad_pb2 as pb
    from envad.v1 import envad_pb2_grpc as pb_grpc

    stub = pb_grpc.AnomalyServiceStub(envad_server.channel())
    models = stub.ListModels(pb.ListModelsRequest(), timeout=30).models
    assert [m.model_id for m in models] == ["erm-tiny-photodigits"]

    ds = load_folder(tiny_photodigits)
    train = ds.indices("train", normal_only=True)
    items = [pb.IngestItem(image=pb.Image(data=ds.read_bytes(i), id=ds.records[i].id,
                                          env=ds.records[i].env),
                           split="train", label=ds.records[i].label) for i in train]
    summary = stub.Ingest(iter([pb.IngestRequest(items=items[k:k + 32])
                                for k in range(0, len(items), 32)]), timeout=120)
    assert summary.inserted == len(train), summary
    fit = stub.Fit(pb.FitRequest(seed=0, allow_few_rows=True), timeout=300)
    assert fit.n_samples == len(train) and fit.n_features == 512

    test = ds.indices("test")
    reply = stub.Score(pb.ScoreRequest(images=[
        pb.Image(data=ds.read_bytes(i), env=ds.records[i].env) for i in test]), timeout=120)
    assert reply.provenance.model_id == "erm-tiny-photodigits"
    assert len(reply.results) == len(test)
    for result in reply.results:
        assert math.isfinite(result.ensemble) and 0.0 <= result.ensemble <= 1.0
        assert len(result.detectors) == len(fit.stats)
