"""The encoder: torchvision ResNet-18 -> 512-d embedding, normalisation built in.

The encoder takes float RGB in [0, 1], NCHW, and normalises with its own mean/std
buffers, so the exported ONNX graph carries the normalisation (docs/model-format.md).
For inputs of at most 64 px an optional small-image stem replaces the 7x7/2 conv with a
3x3/1 conv (the max-pool stays), as in the BENCHMARK.md calibration pilot, so 32 px
images keep 16x16 feature maps in the first stage instead of 8x8.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

log = logging.getLogger(__name__)

EMBEDDING_DIM = 512
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SMALL_STEM_MAX_SIZE = 64


@dataclass(frozen=True)
class EncoderConfig:
    """Constructor arguments of the encoder (stored in every checkpoint).

    small_stem: None picks it for input_size <= 64. weights: a local file holding a
    torchvision ResNet-18 state_dict (e.g. ImageNet weights saved with torch.save);
    None = random init. Nothing is ever downloaded.
    """

    input_size: int = 32
    small_stem: bool | None = None
    weights: str | None = None
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    @property
    def uses_small_stem(self) -> bool:
        if self.small_stem is None:
            return self.input_size <= SMALL_STEM_MAX_SIZE
        return self.small_stem

    def __post_init__(self):
        if self.input_size < 8:
            raise ValueError(f"input_size must be at least 8, got {self.input_size}")
        if self.small_stem and self.input_size > SMALL_STEM_MAX_SIZE:
            raise ValueError(f"the small-image stem is for inputs <= {SMALL_STEM_MAX_SIZE} px")


class Encoder(nn.Module):
    """ResNet-18 trunk without its classifier: float [N,3,S,S] in [0,1] -> [N, 512]."""

    dim = EMBEDDING_DIM
    #: ImageNet normalisation (buffers, so they follow the module's device)
    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, config: EncoderConfig, *, load_weights: bool = True):
        super().__init__()
        from torchvision.models import resnet18

        self.config = config
        net = resnet18(weights=None)
        if config.uses_small_stem:
            net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
            nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
        net.fc = nn.Identity()
        self.net = net
        self.register_buffer("mean", torch.tensor(config.mean).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(config.std).view(1, 3, 1, 1))
        if config.weights and load_weights:
            load_resnet_weights(net, Path(config.weights))
        #: set by a training step that restyles early feature maps (training/mixstyle.py);
        #: None at inference, so the exported graph is the plain ResNet
        self.mixing: Callable[[torch.Tensor], torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean) / self.std
        if self.mixing is None or not self.training:
            return self.net(x)
        net = self.net
        x = net.maxpool(net.relu(net.bn1(net.conv1(x))))
        x = self.mixing(net.layer1(x))
        x = self.mixing(net.layer2(x))
        x = net.layer4(net.layer3(x))
        return torch.flatten(net.avgpool(x), 1)


def load_resnet_weights(net: nn.Module, path: Path) -> None:
    """Copy matching tensors from a torchvision ResNet-18 state_dict file (fc is ignored;
    a 7x7 conv1 is skipped when the small stem is used, and said so)."""
    if not path.is_file():
        raise FileNotFoundError(f"encoder weights file {path} does not exist")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    own = net.state_dict()
    usable = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    skipped = sorted(k for k in state if k not in usable and not k.startswith("fc."))
    if not usable:
        raise ValueError(f"{path} holds no ResNet-18 tensors")
    net.load_state_dict(usable, strict=False)
    if skipped:
        log.warning("weights from %s: %d tensor(s) not used (shape or name differ): %s",
                    path, len(skipped), ", ".join(skipped[:5]))


class Uint8Encoder(nn.Module):
    """The exported graph: uint8 NHWC pixels -> float [0,1] NCHW -> encoder -> [N, 512]."""

    def __init__(self, encoder: Encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.to(torch.float32) / 255.0
        return self.encoder(x.permute(0, 3, 1, 2))


def to_float_nchw(images) -> torch.Tensor:
    """uint8 [N,S,S,3] (NumPy or torch) -> float32 [N,3,S,S] in [0, 1]."""
    tensor = torch.as_tensor(images)
    return tensor.permute(0, 3, 1, 2).to(torch.float32).div_(255.0).contiguous()
