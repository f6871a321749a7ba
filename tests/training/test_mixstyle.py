"""MixStyle: statistics mixed exactly, reproducible per seed, training only, and wired
into supervised algorithms by `--augment style_mix`."""

import torch

from envad.training.mixstyle import MixStyle, mix_statistics
from envad.training.models import Encoder, EncoderConfig


def _features(seed=0):
    g = torch.Generator().manual_seed(seed)
    scale = torch.rand(4, 3, 1, 1, generator=g) * 3 + 0.5
    shift = torch.randn(4, 3, 1, 1, generator=g) * 2
    return torch.randn(4, 3, 6, 6, generator=g) * scale + shift


def test_mixed_statistics_are_the_convex_mix_of_both_samples():
    x = _features()
    partner = torch.tensor([1, 0, 3, 2])
    weight = torch.tensor([0.25, 1.0, 0.0, 0.5])
    out = mix_statistics(x, partner, weight)
    mean, std = x.mean(dim=(2, 3)), (x.var(dim=(2, 3)) + 1e-6).sqrt()
    w = weight.view(-1, 1)
    torch.testing.assert_close(out.mean(dim=(2, 3)), w * mean + (1 - w) * mean[partner],
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close((out.var(dim=(2, 3)) + 1e-6).sqrt(),
                               w * std + (1 - w) * std[partner], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out[1], x[1], atol=1e-5, rtol=1e-5)   # weight 1: unchanged
    # the content (the normalised map) is kept
    normalised = (out - out.mean(dim=(2, 3), keepdim=True)) / out.std(dim=(2, 3), keepdim=True)
    expected = (x - x.mean(dim=(2, 3), keepdim=True)) / x.std(dim=(2, 3), keepdim=True)
    torch.testing.assert_close(normalised, expected, atol=1e-4, rtol=1e-4)


def test_mixstyle_is_reproducible_and_follows_its_probability():
    x = _features()
    a = MixStyle(torch.Generator().manual_seed(5), p=1.0)(x)
    b = MixStyle(torch.Generator().manual_seed(5), p=1.0)(x)
    assert torch.equal(a, b) and not torch.allclose(a, x)
    assert MixStyle(torch.Generator().manual_seed(5), p=0.0)(x) is x
    single = x[:1]
    assert MixStyle(torch.Generator(), p=1.0)(single) is single   # nobody to mix with


def test_encoder_mixes_only_in_training_mode():
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(32))
    x = torch.rand(6, 3, 32, 32)
    encoder.eval()
    plain = encoder(x)
    encoder.mixing = MixStyle(torch.Generator().manual_seed(1), p=1.0)
    torch.testing.assert_close(encoder(x), plain)                # eval: no mixing
    encoder.train()
    mixed = encoder(x)
    encoder.mixing = None
    unmixed = encoder(x)
    assert not torch.allclose(mixed, unmixed, atol=1e-4)


def test_style_mix_augment_restyles_features_in_supervised_updates(tiny_train_data):
    from envad.training.algorithms import get

    def step(augment):
        torch.manual_seed(0)
        algorithm = get("erm")(EncoderConfig(tiny_train_data.size), None,
                               num_envs=len(tiny_train_data.env_names), total_steps=4,
                               seed=0, augment=augment)
        calls = []
        original = algorithm._mixing

        def spy(generator):
            mixing = original(generator)
            calls.append(mixing)
            return mixing
        algorithm._mixing = spy
        batches = [tiny_train_data.batch(e, list(range(i * 4, i * 4 + 4)))
                   for i, e in enumerate(range(2))]
        algorithm.update(batches)
        return algorithm, calls

    mixed, calls = step("style_mix")
    assert isinstance(calls[0], MixStyle) and mixed.encoder.mixing is None
    plain, calls = step("style")
    assert calls == [None]
    assert any(not torch.equal(a, b) for a, b in zip(mixed.state_dict().values(),
                                                      plain.state_dict().values(), strict=True))
