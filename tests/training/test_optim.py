"""Every trained algorithm steps with `torch.optim.Adam` on torch's fused kernel: its
settings, its learning-rate schedule, a resumed run's moments, and CUDA."""

from __future__ import annotations

import pytest
import torch

from envad.training import checkpoint as ckpt
from envad.training.algorithms import names
from envad.training.algorithms.base import scheduled_lr
from tiny_algorithms import build, float_params, steps


@pytest.mark.parametrize("name", names())
def test_every_trained_algorithm_builds_torch_fused_adam_with_its_hparams(
        name, tiny_train_data):
    algorithm = build(name, tiny_train_data)
    if not algorithm.trains:
        return
    optimizer = algorithm.optimizer
    assert type(optimizer) is torch.optim.Adam
    hparams = algorithm.hparams
    for group in optimizer.param_groups:
        assert group["fused"] is True
        assert group["lr"] == algorithm.current_lr()
        assert group["betas"] == (0.9, 0.999) and group["eps"] == 1e-8
        assert group["weight_decay"] == getattr(hparams, "weight_decay", 0.0)
        assert group["amsgrad"] is False and group["decoupled_weight_decay"] is False


def test_the_cosine_schedule_sets_the_optimizer_lr_before_each_step(tiny_train_data):
    algorithm = build("erm", tiny_train_data, total_steps=6, schedule="cosine",
                      warmup_fraction=0.0)
    for step, batch in enumerate(steps(tiny_train_data, 3)):
        algorithm.update(batch)
        expected = scheduled_lr(step, 6, algorithm.hparams.lr, "cosine", 0.0)
        assert [g["lr"] for g in algorithm.optimizer.param_groups] == [expected]
    assert algorithm.optimizer.param_groups[0]["lr"] < algorithm.hparams.lr


def test_a_resumed_checkpoint_takes_the_same_next_step(tmp_path, tiny_train_data):
    """The Adam moments saved in a checkpoint reload onto channels-last parameters (as a
    resumed run places them), and the next update is the one the unbroken run takes."""
    batches = steps(tiny_train_data, 3)
    algorithm = build("erm", tiny_train_data)
    algorithm.place("cpu")
    for batch in batches[:2]:
        algorithm.update(batch)
    path = ckpt.save_checkpoint(ckpt.checkpoint_path(tmp_path, 1), algorithm, epoch=1,
                                meta={})
    resumed = ckpt.build_algorithm(ckpt.load_checkpoint(path))
    resumed.place("cpu")
    state = resumed.optimizer.state_dict()["state"]
    assert len(state) == len(list(algorithm.parameters()))
    assert all(s["step"].item() == 2 for s in state.values())
    algorithm.update(batches[2])
    resumed.update(batches[2])
    expected, got = float_params(algorithm), float_params(resumed)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_optimizer_steps_fused_on_cuda(tiny_train_data):
    algorithm = build("erm", tiny_train_data)
    algorithm.place("cuda")
    before = float_params(algorithm)
    algorithm.update(steps(tiny_train_data, 1, device="cuda")[0])
    assert algorithm.optimizer.param_groups[0]["fused"] is True
    for param, state in algorithm.optimizer.state.items():
        assert param.is_cuda and state["exp_avg"].is_cuda
        assert state["step"].is_cuda and state["step"].dtype == torch.float32
    after = float_params(algorithm)
    assert any(not torch.equal(before[k].cpu(), after[k].cpu()) for k in before)
