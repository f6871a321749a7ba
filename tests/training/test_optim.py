"""FusedAdam: torch.optim.Adam(fused=True)'s updates to the bit, its state dicts both
ways, and no torch._dynamo import."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from envad.training.optim import FusedAdam


def _model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 3), nn.Linear(3, 2))
    return model.to(memory_format=torch.channels_last)


def _steps(model: nn.Sequential, optimizer, steps: range, lrs=(1e-3, 5e-4, 2e-4)) -> None:
    """Seeded batches; the learning rate moves between steps, as the schedules move it;
    the last layer gets no gradient on odd steps (a parameter left out of an update)."""
    for step in steps:
        generator = torch.Generator().manual_seed(step)
        x = torch.randn(5, 3, 8, 8, generator=generator)
        for group in optimizer.param_groups:
            group["lr"] = lrs[step % len(lrs)]
        optimizer.zero_grad(set_to_none=True)
        hidden = model[:5](x)
        out = model[5](hidden) if step % 2 == 0 else hidden[:, :2]
        out.square().mean().backward()
        optimizer.step()


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                 b.state_dict().values(), strict=True))


@pytest.mark.parametrize("weight_decay", [0.0, 1e-4])
def test_updates_equal_torch_fused_adam_to_the_bit(weight_decay):
    ours, theirs = _model(), _model()
    _steps(ours, FusedAdam(ours.parameters(), lr=1e-3, weight_decay=weight_decay), range(7))
    _steps(theirs, torch.optim.Adam(theirs.parameters(), lr=1e-3, weight_decay=weight_decay,
                                    fused=True), range(7))
    assert _same(ours, theirs)
    assert not _same(ours, _model())          # it did train


def test_state_dicts_load_both_ways_and_the_run_goes_on_identically():
    reference = _model()
    reference_adam = torch.optim.Adam(reference.parameters(), lr=1e-3, fused=True)
    _steps(reference, reference_adam, range(6))

    from_torch = _model()
    torch_adam = torch.optim.Adam(from_torch.parameters(), lr=1e-3, fused=True)
    _steps(from_torch, torch_adam, range(3))
    ours = FusedAdam(from_torch.parameters(), lr=1e-3)
    ours.load_state_dict(torch_adam.state_dict())       # a checkpoint of torch's Adam
    _steps(from_torch, ours, range(3, 6))
    assert _same(from_torch, reference)

    from_ours = _model()
    ours = FusedAdam(from_ours.parameters(), lr=1e-3)
    _steps(from_ours, ours, range(3))
    saved = ours.state_dict()
    assert saved["param_groups"][0].keys() == torch_adam.state_dict()["param_groups"][0].keys()
    torch_adam = torch.optim.Adam(from_ours.parameters(), lr=1e-3, fused=True)
    torch_adam.load_state_dict(saved)                   # and the other way
    _steps(from_ours, torch_adam, range(3, 6))
    assert _same(from_ours, reference)


def test_parameter_groups_keep_their_own_settings():
    model = _model()
    adam = FusedAdam([{"params": model[0].parameters()},
                      {"params": model[4].parameters(), "weight_decay": 0.1}], lr=1e-3)
    assert [g["weight_decay"] for g in adam.param_groups] == [0.0, 0.1]
    saved = adam.state_dict()
    assert [g["params"] for g in saved["param_groups"]] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="other parameter groups"):
        FusedAdam(model.parameters(), lr=1e-3).load_state_dict(saved)
    with pytest.raises(ValueError, match="empty"):
        FusedAdam([], lr=1e-3)


def test_building_and_stepping_import_no_compiler():
    """torch.optim's optimizers import torch._dynamo (1.3 s on the build host); this one
    must not."""
    code = ("import sys, torch\n"
            "from envad.training.optim import FusedAdam\n"
            "m = torch.nn.Linear(4, 2)\n"
            "a = FusedAdam(m.parameters(), lr=1e-3)\n"
            "m(torch.ones(3, 4)).sum().backward(); a.step(); a.state_dict()\n"
            "print('torch._dynamo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
