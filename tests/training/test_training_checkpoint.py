"""Checkpoints: constructor args + state dicts, loaded with weights_only, atomic, pruned."""

from __future__ import annotations

import pytest
import torch

from envad.training import checkpoint as ckpt
from tiny_algorithms import build, steps


def test_round_trip_rebuilds_the_same_model(tmp_path, tiny_train_data):
    algorithm = build("irm", tiny_train_data, penalty_weight=10.0)
    algorithm.update(steps(tiny_train_data, 1)[0])
    path = ckpt.save_checkpoint(ckpt.checkpoint_path(tmp_path, 1), algorithm, epoch=1,
                                meta={"dataset": "tiny"})
    assert path.name == "checkpoint-epoch001.pt" and not list(tmp_path.glob("*.tmp"))
    raw = torch.load(path, weights_only=True)           # plain data only, no pickled modules
    assert raw["algorithm"] == "irm" and raw["args"]["hparams"]["penalty_weight"] == 10.0
    rebuilt = ckpt.build_algorithm(ckpt.load_checkpoint(path))
    assert type(rebuilt) is type(algorithm) and int(rebuilt.step) == 1
    x = tiny_train_data.tensor([0, 1, 2])
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.eval().embed(x), algorithm.eval().embed(x))
    a, b = algorithm.optimizer.state_dict(), rebuilt.optimizer.state_dict()
    assert torch.equal(a["state"][0]["exp_avg"], b["state"][0]["exp_avg"])


def test_listing_pruning_and_format(tmp_path, tiny_train_data):
    algorithm = build("random", tiny_train_data)
    for epoch in (1, 2, 3, 10):
        ckpt.save_checkpoint(ckpt.checkpoint_path(tmp_path, epoch), algorithm, epoch=epoch,
                             meta={})
    (tmp_path / "checkpoint-epoch004.pt.tmp").write_bytes(b"partial")
    assert [e for e, _ in ckpt.checkpoints(tmp_path)] == [1, 2, 3, 10]
    assert ckpt.latest_checkpoint(tmp_path).name == "checkpoint-epoch010.pt"
    ckpt.prune_checkpoints(tmp_path, 2)
    assert [e for e, _ in ckpt.checkpoints(tmp_path)] == [3, 10]
    ckpt.prune_checkpoints(tmp_path, 0)
    assert len(ckpt.checkpoints(tmp_path)) == 2
    bad = tmp_path / "checkpoint-epoch011.pt"
    torch.save({"format": 99}, bad)
    with pytest.raises(ValueError, match="unsupported checkpoint format"):
        ckpt.load_checkpoint(bad)
    assert ckpt.latest_checkpoint(tmp_path / "empty") is None
