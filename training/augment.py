"""Batched image augmentations for contrastive learning, on float [N,3,S,S] in [0, 1].

The two views of moco-v3's `main_moco.py` (BYOL's recipe): random resized crop,
horizontal flip, colour jitter (p 0.8), greyscale (p 0.2), Gaussian blur (p 1.0 / 0.1),
solarisation (p 0 / 0.2). Implemented on whole batches with an explicit generator, so
they are fast on CPU and reproducible for a seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

_LUMA = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)


@dataclass(frozen=True)
class AugmentConfig:
    """One view's augmentation. crop_min: moco-v3 uses 0.08 at 224 px; 0.2 here keeps the
    subject of a 32 px image (an 8% crop is 9x9 px). blur_sigma is at 224 px and scales
    with the image side."""

    crop_min: float = 0.2
    flip_p: float = 0.5
    jitter_p: float = 0.8
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.2
    hue: float = 0.1
    grayscale_p: float = 0.2
    blur_p: float = 1.0
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    solarize_p: float = 0.0


VIEW1 = AugmentConfig(blur_p=1.0, solarize_p=0.0)
VIEW2 = AugmentConfig(blur_p=0.1, solarize_p=0.2)


def _uniform(n: int, low: float, high: float, g: torch.Generator,
             device: torch.device | str = "cpu") -> torch.Tensor:
    """Draws come from the CPU generator (reproducible on any device), then move."""
    return (low + (high - low) * torch.rand(n, generator=g)).to(device)


def _chance(n: int, p: float, g: torch.Generator, device: torch.device | str = "cpu"
            ) -> torch.Tensor:
    return (torch.rand(n, generator=g) < p).view(-1, 1, 1, 1).to(device)


def resized_crop_flip(x: torch.Tensor, crop_min: float, flip_p: float,
                      g: torch.Generator) -> torch.Tensor:
    """Random crop of area in [crop_min, 1] and aspect in [3/4, 4/3], resized back."""
    n = len(x)
    area = _uniform(n, crop_min, 1.0, g)
    log_ratio = _uniform(n, math.log(3 / 4), math.log(4 / 3), g)
    w = torch.sqrt(area * torch.exp(log_ratio)).clamp(max=1.0)
    h = torch.sqrt(area / torch.exp(log_ratio)).clamp(max=1.0)
    cx = _uniform(n, -1.0, 1.0, g) * (1 - w)
    cy = _uniform(n, -1.0, 1.0, g) * (1 - h)
    flip = torch.where(torch.rand(n, generator=g) < flip_p, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2] = w * flip, cx
    theta[:, 1, 1], theta[:, 1, 2] = h, cy
    grid = F.affine_grid(theta.to(x.device), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection",
                         align_corners=False)


def grey(x: torch.Tensor) -> torch.Tensor:
    return (x * _LUMA.to(x.device)).sum(1, keepdim=True)


def color_jitter(x: torch.Tensor, c: AugmentConfig, g: torch.Generator) -> torch.Tensor:
    """Brightness, contrast, saturation, hue (rotation of the YIQ chroma plane)."""
    n, dev = len(x), x.device
    view = (n, 1, 1, 1)
    x = (x * _uniform(n, 1 - c.brightness, 1 + c.brightness, g, dev).view(view)).clamp(0, 1)
    mean = grey(x).mean(dim=(2, 3), keepdim=True)
    x = ((x - mean) * _uniform(n, 1 - c.contrast, 1 + c.contrast, g, dev).view(view) + mean)
    x = x.clamp(0, 1)
    luma = grey(x)
    x = ((x - luma) * _uniform(n, 1 - c.saturation, 1 + c.saturation, g, dev).view(view)
         + luma)
    x = x.clamp(0, 1)
    angle = _uniform(n, -c.hue, c.hue, g) * 2 * math.pi
    to_yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322],
                           [0.211, -0.523, 0.312]])
    cos, sin = torch.cos(angle), torch.sin(angle)
    rot = torch.zeros(n, 3, 3)
    rot[:, 0, 0], rot[:, 1, 1], rot[:, 2, 2] = 1.0, cos, cos
    rot[:, 1, 2], rot[:, 2, 1] = -sin, sin
    mix = torch.linalg.inv(to_yiq) @ rot @ to_yiq                      # [n,3,3]
    return torch.einsum("nij,njhw->nihw", mix.to(dev), x).clamp(0, 1)


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Per-sample separable Gaussian blur (sigma in pixels, one per sample)."""
    n, ch, size, _ = x.shape
    radius = max(1, math.ceil(3 * float(sigma.max())))
    radius = min(radius, size - 1)
    offsets = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)
    sigma = sigma.to(x.device)
    kernel = torch.exp(-0.5 * (offsets[None] / sigma[:, None]) ** 2)
    kernel = (kernel / kernel.sum(1, keepdim=True)).repeat_interleave(ch, 0)   # [n*ch,k]
    flat = F.pad(x.reshape(1, n * ch, size, size), (radius,) * 4, mode="reflect")
    flat = F.conv2d(flat, kernel.view(n * ch, 1, 1, -1), groups=n * ch)
    flat = F.conv2d(flat, kernel.view(n * ch, 1, -1, 1), groups=n * ch)
    return flat.view(n, ch, size, size)


def augment(x: torch.Tensor, c: AugmentConfig, g: torch.Generator) -> torch.Tensor:
    """One augmented view of a batch (the input is not modified)."""
    n, size, dev = len(x), x.shape[-1], x.device
    x = resized_crop_flip(x, c.crop_min, c.flip_p, g)
    x = torch.where(_chance(n, c.jitter_p, g, dev), color_jitter(x, c, g), x)
    x = torch.where(_chance(n, c.grayscale_p, g, dev), grey(x).expand_as(x), x)
    sigma = _uniform(n, *c.blur_sigma, g) * size / 224
    x = torch.where(_chance(n, c.blur_p, g, dev), gaussian_blur(x, sigma), x)
    x = torch.where(_chance(n, c.solarize_p, g, dev), torch.where(x >= 0.5, 1 - x, x), x)
    return x.contiguous()


@dataclass(frozen=True)
class StyleAugmentConfig:
    """Per-image camera-style changes for supervised training: the content stays, the
    look of the camera changes, so the encoder cannot lean on style. Brightness and
    contrast factors, per-channel colour gain (white balance), greyscale (night / IR
    cameras), sensor noise, lens blur (sigma in pixels at 32 px, scaled with the side),
    a mild crop (area >= crop_min) and a horizontal flip. mixstyle_p > 0 also restyles
    the encoder's early feature maps (MixStyle, training/mixstyle.py) with that
    probability per step."""

    brightness: float = 0.4
    contrast: float = 0.4
    color_gain: float = 0.2
    grayscale_p: float = 0.2
    noise_max: float = 0.06
    blur_p: float = 0.3
    blur_sigma: tuple[float, float] = (0.1, 1.0)
    crop_min: float = 0.8
    flip_p: float = 0.5
    mixstyle_p: float = 0.0


#: `--augment` choices: name -> config (None = no augmentation)
STYLE_AUGMENTS: dict[str, StyleAugmentConfig | None] = {
    "none": None,
    "style": StyleAugmentConfig(),
    "style_mix": StyleAugmentConfig(mixstyle_p=0.5),
}


def style_augment(x: torch.Tensor, name: str, g: torch.Generator) -> torch.Tensor:
    """The `name` style augmentation of a batch (float [N,3,S,S] in [0, 1]); the input
    is not modified, and draws come from `g` (reproducible for a seed)."""
    c = STYLE_AUGMENTS[name]
    if c is None:
        return x
    n, size, dev = len(x), x.shape[-1], x.device
    view = (n, 1, 1, 1)
    x = resized_crop_flip(x, c.crop_min, c.flip_p, g)
    x = x * _uniform(n, 1 - c.brightness, 1 + c.brightness, g, dev).view(view)
    mean = grey(x).mean(dim=(2, 3), keepdim=True)
    x = (x - mean) * _uniform(n, 1 - c.contrast, 1 + c.contrast, g, dev).view(view) + mean
    gain = (1 + c.color_gain * (2 * torch.rand(n, 3, generator=g) - 1)).to(dev)
    x = (x * gain.view(n, 3, 1, 1)).clamp(0, 1)
    x = torch.where(_chance(n, c.grayscale_p, g, dev), grey(x).expand_as(x), x)
    sigma = _uniform(n, *c.blur_sigma, g) * size / 32
    x = torch.where(_chance(n, c.blur_p, g, dev), gaussian_blur(x, sigma), x)
    noise = torch.randn(x.shape, generator=g).to(dev) * _uniform(n, 0.0, c.noise_max, g,
                                                                  dev).view(view)
    return (x + noise).clamp(0, 1).contiguous()
