"""The encoder: ResNet-18 (training/resnet.py, torchvision's layout) -> 512-d embedding,
normalisation built in.

The encoder takes float RGB in [0, 1], NCHW, and normalises with its own mean/std
buffers, so the exported ONNX graph carries the normalisation (docs/model-format.md).
For inputs of at most 64 px an optional small-image stem replaces the 7x7/2 conv with a
3x3/1 conv (the max-pool stays), as in the BENCHMARK.md calibration pilot, so 32 px
images keep 16x16 feature maps in the first stage instead of 8x8.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from envad.training.resnet import BasicBlock, ResNet18

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
        self.config = config
        net = ResNet18()
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


def inference_copy(encoder: Encoder) -> Encoder:
    """An eval-mode copy of `encoder` for embedding many images: each batch norm folded
    into the convolution before it, weights in channels-last layout. The same embedding
    to float rounding (about 1e-5), about 1.35x faster at 32 px on a 2-core CPU; feed it
    channels-last input (`to_float_nchw(..., channels_last=True)`). The encoder itself
    is left as it was."""
    folded = copy.deepcopy(encoder).eval()
    net = folded.net
    net.conv1, net.bn1 = _fold(net.conv1, net.bn1), nn.Identity()
    for block in [m for m in net.modules() if isinstance(m, BasicBlock)]:
        block.conv1, block.bn1 = _fold(block.conv1, block.bn1), nn.Identity()
        block.conv2, block.bn2 = _fold(block.conv2, block.bn2), nn.Identity()
        if isinstance(block.downsample, nn.Sequential):
            block.downsample = _fold(block.downsample[0], block.downsample[1])
    return folded.to(memory_format=torch.channels_last)


def _fold(conv: nn.Module, norm: nn.Module) -> nn.Conv2d:
    """One convolution computing `norm(conv(x))` with eval-mode batch-norm statistics."""
    if not (isinstance(conv, nn.Conv2d) and isinstance(norm, nn.BatchNorm2d)):
        raise TypeError(f"cannot fold {type(norm).__name__} into {type(conv).__name__}")
    return fuse_conv_bn_eval(conv, norm)


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


def to_float_nchw(images, *, channels_last: bool = False) -> torch.Tensor:
    """uint8 [N,S,S,3] (NumPy or torch) -> float32 [N,3,S,S] in [0, 1] (channels-last
    memory layout when asked, which the NHWC pixels already have)."""
    tensor = torch.as_tensor(images)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    return tensor.permute(0, 3, 1, 2).to(torch.float32).div_(255.0).contiguous(
        memory_format=layout)
