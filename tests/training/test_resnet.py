"""ResNet-18 without torchvision: same parameter names, same seeded weights, same outputs,
and importing the training run does not import torchvision."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from envad.training.resnet import ResNet18


@pytest.mark.parametrize("seed", [0, 7])
def test_a_seed_gives_torchvisions_weights_and_random_state(seed):
    from torchvision.models import resnet18

    torch.manual_seed(seed)
    reference = resnet18(weights=None)
    after_reference = torch.rand(4)
    torch.manual_seed(seed)
    ours = ResNet18()
    after_ours = torch.rand(4)

    expected, got = reference.state_dict(), ours.state_dict()
    assert list(got) == list(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key
    # the draws that follow (the encoder's small stem, the heads) are the same too
    assert torch.equal(after_ours, after_reference)


def test_outputs_match_torchvision_in_train_and_eval_mode():
    from torchvision.models import resnet18

    torch.manual_seed(1)
    reference = resnet18(weights=None)
    ours = ResNet18()
    ours.load_state_dict(reference.state_dict())
    images = torch.rand(3, 3, 64, 64)
    for train in (True, False):
        reference.train(train)
        ours.train(train)
        with torch.no_grad():
            torch.testing.assert_close(ours(images), reference(images), rtol=0, atol=1e-6)
    # batch-norm running statistics moved identically in train mode
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[key], value, rtol=0, atol=1e-6)


def test_a_training_run_never_imports_torchvision():
    code = ("import sys; import envad.training.run; from envad.training.models import "
            "Encoder, EncoderConfig; Encoder(EncoderConfig(32)); "
            "print('torchvision' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
