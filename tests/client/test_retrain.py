"""`envad retrain` with an already trained encoder file, against a real server: install,
snapshot, activate, re-embed under the same ids, fit; stopping and resuming."""

from __future__ import annotations

import json

import pytest

from client_archives import make_folder_dataset
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.results import RowFilter
from envad.client.retrain import STEPS, RetrainSpec, run_retrain
from envad.client.sources import open_source
from envad.errors import InvalidInput
from tiny_encoder import build_tiny_encoder


def test_rollout_of_a_new_encoder(envad_server, tmp_path) -> None:
    dataset = make_folder_dataset(tmp_path / "ds", per_env=12)
    new_model = build_tiny_encoder(tmp_path / "new.onnx", model_id="tiny-v2", dim=8, seed=1)
    spec = RetrainSpec(dataset="", workdir=str(tmp_path / "job"), model_file=str(new_model),
                       detectors=("KNN",), allow_few_rows=True)
    with EnvadClient(envad_server.address) as client:
        run_backfill(client, open_source(dataset), tmp_path / "ck.jsonl", progress=False)
        client.fit(RowFilter(splits=("train",)), detectors=("KNN",), allow_few_rows=True)
        old_ids = sorted(i for b in client.export(with_vectors=False)
                         for i in b.column("id").to_pylist())

        state = run_retrain(client, spec, until="snapshot", progress=False, say=lambda m: None)
        assert list(state.done) == ["train", "export", "install", "snapshot"]
        assert state.done["snapshot"]["rows"] == 24
        assert client.info().active_model.model_id == "tiny-test"  # not switched yet
        assert "tiny-v2" in {m.model_id for m in client.list_models().models}

        said: list[str] = []
        state = run_retrain(client, spec, progress=False, say=said.append)
        assert list(state.done) == list(STEPS)
        assert sum("done before" in m for m in said) == 4
        info = client.info()
        assert info.active_model.model_id == "tiny-v2" and info.active_model.embedding_dim == 8
        assert info.total_rows == 24 and info.env_counts == {"cam0": 12, "cam1": 12}
        assert info.bundle is not None and info.bundle.n_samples == 24
        new_ids = sorted(i for b in client.export(with_vectors=False)
                         for i in b.column("id").to_pylist())
        assert new_ids == old_ids
        assert client.score([next(iter(open_source(dataset))).read_bytes()]).results[0].ok

        said.clear()
        run_retrain(client, spec, progress=False, say=said.append)
        assert len(said) == len(STEPS) and all("done before" in m for m in said)
    saved = json.loads((tmp_path / "job" / "retrain.json").read_text())
    assert saved["done"]["activate"]["model_id"] == "tiny-v2"


def test_another_job_in_the_same_workdir_is_refused(envad_server, tmp_path) -> None:
    model = build_tiny_encoder(tmp_path / "m.onnx", model_id="tiny-v3", dim=8, seed=2)
    spec = RetrainSpec(dataset="", workdir=str(tmp_path / "job"), model_file=str(model))
    with EnvadClient(envad_server.address) as client:
        run_retrain(client, spec, until="export", progress=False, say=lambda m: None)
        with pytest.raises(InvalidInput, match="other settings"):
            run_retrain(client, RetrainSpec(**{**spec.__dict__, "epochs": 9}), progress=False,
                        say=lambda m: None)
        with pytest.raises(InvalidInput, match="unknown step"):
            run_retrain(client, spec, until="deploy", progress=False)


def test_where_the_job_trains_is_not_what_it_does(tmp_path) -> None:
    """A job started with one --device resumes with another (the same job); any setting
    of what it does makes another job."""
    spec = RetrainSpec(dataset="d", workdir=str(tmp_path / "job"))
    assert spec.device == "auto"
    assert RetrainSpec(**{**spec.__dict__, "device": "cpu"}).fingerprint() == \
        spec.fingerprint()
    assert RetrainSpec(**{**spec.__dict__, "seed": 1}).fingerprint() != spec.fingerprint()


def test_retrain_trains_a_new_encoder_through_the_cli(envad_server, tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    from envad.client.cli import main
    from envad.training.photodigits import generate

    dataset = generate(tmp_path / "pd", size=32, progress=False, train_per_camera=12,
                       test_per_camera=5)
    with EnvadClient(envad_server.address) as client:
        run_backfill(client, open_source(dataset), tmp_path / "ck.jsonl",
                     BackfillOptions(splits=("train", "val")), progress=False)
    code = main(["retrain", "--server", envad_server.address, "--data", str(dataset),
                 "--workdir", str(tmp_path / "job"), "--epochs", "1", "--detectors", "KNN",
                 "--allow-few-rows",
                 "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0 and "retrained: model erm-pd-32px-e1-s0 active, 72 rows re-embedded" in out
    with EnvadClient(envad_server.address) as client:
        info = client.info()
    assert info.active_model.algorithm == "erm" and info.active_model.embedding_dim == 512
    assert info.total_rows == 72 and info.bundle.n_samples == 66
    # the refit takes the default pipeline's score adaptation
    assert info.bundle.score_adaptation == "frozen(prior_rows=64)"
    code = main(["retrain", "--server", envad_server.address, "--data", str(dataset),
                 "--workdir", str(tmp_path / "job"), "--epochs", "1", "--detectors", "KNN",
                 "--allow-few-rows", "--device", "cpu",     # where, not what: the same job
                 "--no-progress", "--json"])        # finished: resumes to the same report
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["finished"] and report["done"]["fit"]["n_samples"] == 66
