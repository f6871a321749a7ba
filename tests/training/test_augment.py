"""Batched contrastive augmentations: shapes, range, reproducibility, blur."""

from __future__ import annotations

import dataclasses

import torch

from envad.training.augment import VIEW1, VIEW2, AugmentConfig, augment, gaussian_blur


def _batch():
    torch.manual_seed(0)
    return torch.rand(6, 3, 16, 16)


def test_views_are_reproducible_and_in_range():
    x = _batch()
    for config in (VIEW1, VIEW2):
        a = augment(x, config, torch.Generator().manual_seed(5))
        b = augment(x, config, torch.Generator().manual_seed(5))
        c = augment(x, config, torch.Generator().manual_seed(6))
        assert a.shape == x.shape and torch.equal(a, b) and not torch.equal(a, c)
        assert a.min() >= 0 and a.max() <= 1
    assert torch.equal(x, _batch())        # input untouched


def test_no_op_settings_keep_the_image():
    x = _batch()
    identity = dataclasses.replace(AugmentConfig(), crop_min=1.0, flip_p=0.0, jitter_p=0.0,
                                   grayscale_p=0.0, blur_p=0.0, solarize_p=0.0)
    out = augment(x, identity, torch.Generator().manual_seed(0))
    # the full-area crop may still change the aspect ratio, so compare loosely: centre
    # pixels move by less than a pixel's worth of resampling
    assert (out - x).abs().mean() < 0.35
    greyed = augment(x, dataclasses.replace(identity, grayscale_p=1.0), torch.Generator())
    assert torch.allclose(greyed[:, 0], greyed[:, 1]) and torch.allclose(greyed[:, 1],
                                                                       greyed[:, 2])
    solarized = augment(torch.full((1, 3, 8, 8), 0.8),
                        dataclasses.replace(identity, solarize_p=1.0), torch.Generator())
    torch.testing.assert_close(solarized, torch.full((1, 3, 8, 8), 0.2))


def test_gaussian_blur():
    flat = torch.full((2, 3, 8, 8), 0.3)
    torch.testing.assert_close(gaussian_blur(flat, torch.tensor([0.5, 1.5])), flat)
    spike = torch.zeros(2, 3, 9, 9)
    spike[:, :, 4, 4] = 1.0
    out = gaussian_blur(spike, torch.tensor([0.01, 1.0]))
    assert out[0, 0, 4, 4] > 0.99                 # tiny sigma: almost no blur
    assert out[1, 0, 4, 4] < 0.3 and out[1].sum() > 0.99 * 3   # mass spread, preserved


def test_style_augmentation_is_reproducible_in_range_and_changes_style():
    from envad.training.augment import STYLE_AUGMENTS, style_augment

    x = _batch()
    a = style_augment(x, "style", torch.Generator().manual_seed(3))
    b = style_augment(x, "style", torch.Generator().manual_seed(3))
    c = style_augment(x, "style", torch.Generator().manual_seed(4))
    assert a.shape == x.shape and torch.equal(a, b) and not torch.equal(a, c)
    assert a.min() >= 0 and a.max() <= 1 and torch.equal(x, _batch())
    # per-image brightness / contrast / gain: the images' mean colours move
    assert (a.mean(dim=(2, 3)) - x.mean(dim=(2, 3))).abs().max() > 0.02
    assert style_augment(x, "none", torch.Generator()) is x
    assert set(STYLE_AUGMENTS) == {"none", "style", "style_mix"}
