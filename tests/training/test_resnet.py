"""The encoder's trunk is torchvision's ResNet-18 with the small-image stem: its weights,
parameter names and feature maps, and a trained checkpoint reloaded."""

from __future__ import annotations

import pytest
import torch
from torchvision.models import ResNet, resnet18

from envad.training import checkpoint as ckpt
from envad.training.models import Encoder, EncoderConfig
from tiny_algorithms import build, steps


@pytest.mark.parametrize("seed", [0, 7])
def test_the_trunk_is_torchvisions_resnet18_with_a_3x3_stride_1_stem(seed):
    torch.manual_seed(seed)
    reference = resnet18(weights=None).state_dict()
    torch.manual_seed(seed)
    encoder = Encoder(EncoderConfig(32))
    net = encoder.net
    assert isinstance(net, ResNet)
    assert (net.conv1.kernel_size, net.conv1.stride, net.conv1.padding) == ((3, 3), (1, 1),
                                                                            (1, 1))
    assert isinstance(net.maxpool, torch.nn.MaxPool2d)          # the max-pool stays
    assert isinstance(net.fc, torch.nn.Identity)
    # checkpoints keep torchvision's names: every tensor but the classifier's
    got = net.state_dict()
    assert list(got) == [k for k in reference if not k.startswith("fc.")]
    # the same seed draws torchvision's weights everywhere but the replaced stem
    for key, value in reference.items():
        if key != "conv1.weight" and not key.startswith("fc."):
            assert torch.equal(got[key], value), key
    assert got["conv1.weight"].shape == (64, 3, 3, 3)


def test_a_32px_batch_keeps_16px_maps_in_the_first_stage_and_gives_512_features():
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(32)).eval()
    shapes = {}
    for name in ("layer1", "layer4"):
        getattr(encoder.net, name).register_forward_hook(
            lambda module, args, out, name=name: shapes.__setitem__(name, tuple(out.shape)))
    with torch.no_grad():
        out = encoder(torch.rand(5, 3, 32, 32))
    assert out.shape == (5, Encoder.dim) == (5, 512)
    assert shapes == {"layer1": (5, 64, 16, 16), "layer4": (5, 512, 2, 2)}


def test_a_trained_checkpoint_reloads_with_identical_outputs(tmp_path, tiny_train_data):
    algorithm = build("erm", tiny_train_data)
    before = {k: v.clone() for k, v in algorithm.encoder.state_dict().items()}
    for batch in steps(tiny_train_data, 2):
        algorithm.update(batch)
    assert not torch.equal(before["net.layer1.0.conv1.weight"],
                           algorithm.encoder.state_dict()["net.layer1.0.conv1.weight"])
    path = ckpt.save_checkpoint(ckpt.checkpoint_path(tmp_path, 1), algorithm, epoch=1,
                                meta={})
    rebuilt = ckpt.build_algorithm(ckpt.load_checkpoint(path))
    assert isinstance(rebuilt.encoder.net, ResNet)
    x = tiny_train_data.tensor(list(range(8)))
    with torch.no_grad():
        assert torch.equal(rebuilt.eval().embed(x), algorithm.eval().embed(x))
