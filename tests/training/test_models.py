"""The ResNet-18 encoder: 512-d output, small-image stem, local weights, uint8 wrapper."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from envad.training.models import (
    Encoder,
    EncoderConfig,
    OneDnnEncoder,
    Uint8Encoder,
    blocked_layout_is_faster,
    inference_copy,
    to_float_nchw,
)


@pytest.mark.parametrize("size, small", [(32, True), (64, True), (96, False)])
def test_embedding_and_stem(size, small):
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(size)).eval()
    assert encoder.config.uses_small_stem is small
    assert encoder.net.conv1.kernel_size == ((3, 3) if small else (7, 7))
    with torch.no_grad():
        out = encoder(torch.rand(2, 3, size, size))
    assert out.shape == (2, 512)


def test_stem_choice_is_checked():
    assert not EncoderConfig(32, small_stem=False).uses_small_stem
    with pytest.raises(ValueError, match="small-image stem"):
        EncoderConfig(128, small_stem=True)
    with pytest.raises(ValueError, match="at least 8"):
        EncoderConfig(4)


def test_weights_from_a_local_file(tmp_path, caplog):
    from torchvision.models import resnet18

    torch.manual_seed(1)
    reference = resnet18(weights=None)
    path = tmp_path / "resnet18.pt"
    torch.save(reference.state_dict(), path)
    big = Encoder(EncoderConfig(96, weights=str(path)))
    for key, value in big.net.state_dict().items():
        assert torch.equal(value, reference.state_dict()[key]), key
    with caplog.at_level(logging.WARNING):
        small = Encoder(EncoderConfig(32, weights=str(path)))
    assert "conv1.weight" in caplog.text                  # 7x7 kernel does not fit the stem
    assert torch.equal(small.net.layer4[1].conv2.weight, reference.layer4[1].conv2.weight)
    assert not Encoder(EncoderConfig(32, weights=str(path)), load_weights=False) \
        .net.layer1[0].conv1.weight.equal(reference.layer1[0].conv1.weight)
    with pytest.raises(FileNotFoundError):
        Encoder(EncoderConfig(32, weights=str(tmp_path / "missing.pt")))


def test_uint8_wrapper_matches_float_path():
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(32)).eval()
    pixels = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    with torch.no_grad():
        direct = encoder(to_float_nchw(pixels))
        wrapped = Uint8Encoder(encoder)(torch.from_numpy(pixels))
    torch.testing.assert_close(direct, wrapped)
    assert to_float_nchw(pixels).max() <= 1.0


@pytest.mark.parametrize("size", [32, 96])
def test_inference_copy_folds_batch_norm_and_gives_the_same_embedding(size):
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(size))
    images = torch.rand(8, 3, size, size)
    encoder.train()
    with torch.no_grad():
        encoder(images)          # move the running statistics away from their init
    encoder.eval()
    with torch.no_grad():
        expected = encoder(images)
        folded = inference_copy(encoder)
        got = folded(images.contiguous(memory_format=torch.channels_last))
        got_dense_input = folded(images)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_dense_input, expected, rtol=1e-4, atol=1e-4)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    # the encoder being trained keeps its batch norms
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in encoder.modules()) == 20


def test_channels_last_input_holds_the_same_values():
    pixels = np.random.default_rng(1).integers(0, 256, (2, 8, 8, 3), dtype=np.uint8)
    dense = to_float_nchw(pixels)
    last = to_float_nchw(pixels, channels_last=True)
    assert last.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(dense, last)


def _cpu_capability(monkeypatch, capability: str) -> None:
    """Make torch report `capability` as this CPU's (the hardware is outside the tests)."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_inference_copy_on_an_avx512_cpu_keeps_feature_maps_in_onednn_layout(monkeypatch):
    _cpu_capability(monkeypatch, "AVX512")
    torch.manual_seed(2)
    encoder = Encoder(EncoderConfig(32)).eval()
    folded = inference_copy(encoder, "cpu")
    assert isinstance(folded, OneDnnEncoder)
    convolutions = [m for m in folded.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convolutions == []              # every one reordered into oneDNN's layout
    seen = []
    handle = folded.net.layer2.register_forward_hook(lambda _m, _i, out: seen.append(out))
    images = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        got = folded(images)
        expected = encoder(images)
    handle.remove()
    assert seen[0].is_mkldnn                # no conversion between layers
    assert not got.is_mkldnn and got.shape == (3, 512)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    # where oneDNN is not the device's library, the copy is the channels-last module
    assert isinstance(inference_copy(encoder, "meta"), Encoder)


@pytest.mark.parametrize("capability", ["AVX2", "DEFAULT"])
def test_inference_copy_without_avx512_is_channels_last(monkeypatch, capability):
    _cpu_capability(monkeypatch, capability)
    torch.manual_seed(3)
    encoder = Encoder(EncoderConfig(32)).eval()
    folded = inference_copy(encoder, "cpu")
    assert not isinstance(folded, OneDnnEncoder) and isinstance(folded, Encoder)
    assert folded.net.layer1[0].conv1.weight.is_contiguous(memory_format=torch.channels_last)
    pixels = np.random.default_rng(3).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    with torch.no_grad():
        got = folded(to_float_nchw(pixels, channels_last=True))
        expected = encoder(to_float_nchw(pixels))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_blocked_layout_needs_onednn(monkeypatch):
    _cpu_capability(monkeypatch, "AVX512")
    assert blocked_layout_is_faster() is torch.backends.mkldnn.is_available()
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert not blocked_layout_is_faster()
