"""The encoder: torchvision's ResNet-18 -> 512-d embedding, normalisation built in.

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
from torchvision.models import resnet18
from torchvision.models.resnet import BasicBlock, ResNet

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
        net = resnet_trunk(config.uses_small_stem)
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


def resnet_trunk(small_stem: bool) -> ResNet:
    """torchvision's `resnet18(weights=None)` without its classifier (`fc` an identity);
    with `small_stem` its 7x7/2 first convolution becomes a 3x3/1 one, initialised as
    torchvision initialises convolutions (the max-pool stays)."""
    net = resnet18(weights=None)
    if small_stem:
        conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(conv1.weight, mode="fan_out", nonlinearity="relu")
        net.conv1 = conv1
    net.fc = nn.Identity()
    return net


def inference_copy(encoder: Encoder, device: str = "cpu", *,
                   blocked: bool | None = None) -> nn.Module:
    """An eval-mode copy of `encoder` for embedding many images, the same embedding to
    float rounding (about 1e-5); the encoder itself is left as it was. Each batch norm
    is folded into the convolution before it. On a CPU whose oneDNN (torch's MKL-DNN)
    runs blocked layouts fastest (`blocked_layout_is_faster`) the copy keeps its weights
    and feature maps in oneDNN's blocked layout between layers (`OneDnnEncoder`);
    elsewhere its weights are channels-last. `blocked` True or False asks for one layout
    (CPU only for the blocked one). Feed it float NCHW input in [0, 1] (`to_float_nchw`,
    either layout)."""
    folded = copy.deepcopy(encoder).eval()
    net = folded.net
    net.conv1, net.bn1 = _fold(net.conv1, net.bn1), nn.Identity()
    for block in [m for m in net.modules() if isinstance(m, BasicBlock)]:
        block.conv1, block.bn1 = _fold(block.conv1, block.bn1), nn.Identity()
        block.conv2, block.bn2 = _fold(block.conv2, block.bn2), nn.Identity()
        if isinstance(block.downsample, nn.Sequential):
            block.downsample = _fold(block.downsample[0], block.downsample[1])
    if blocked is None:
        blocked = torch.device(device).type == "cpu" and blocked_layout_is_faster()
    if blocked:
        return OneDnnEncoder(folded)
    return folded.to(memory_format=torch.channels_last)


#: torch's CPU capabilities (`torch.backends.cpu.get_cpu_capability`) on which oneDNN's
#: blocked layout beats channels-last for the folded ResNet-18 (docs/benchmarks.md)
BLOCKED_LAYOUT_CAPABILITIES = ("AVX512",)


def blocked_layout_is_faster() -> bool:
    """Whether this CPU embeds faster with feature maps in oneDNN's blocked layout than in
    channels-last. With AVX-512, oneDNN's direct convolutions on the blocked layout were
    1.54x faster than channels-last at 32 px (2 cores); with AVX2 only, oneDNN runs
    channels-last convolutions through its brgemm kernels and the blocked layout through
    older direct ones, and channels-last was 1.26x faster (2-core AMD EPYC)."""
    return (torch.backends.mkldnn.is_available()
            and torch.backends.cpu.get_cpu_capability() in BLOCKED_LAYOUT_CAPABILITIES)


class OneDnnEncoder(nn.Module):
    """A folded encoder (`inference_copy`) whose trunk runs on oneDNN tensors: the
    convolutions' weights reordered once into oneDNN's blocked layout, the feature maps
    left in it from the first convolution to the global pool, so no layer converts
    layouts. CPU inference only (oneDNN tensors carry no gradients)."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, folded: Encoder):
        super().__init__()
        self.dim = folded.dim
        self.register_buffer("mean", folded.mean.clone())
        self.register_buffer("std", folded.std.clone())
        net = folded.net
        for parent in list(net.modules()):
            for name, child in parent.named_children():
                if isinstance(child, nn.Conv2d):
                    setattr(parent, name, _OneDnnConv2d(child))
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        net = self.net
        z = ((x - self.mean) / self.std).contiguous().to_mkldnn()
        z = net.maxpool(net.relu(net.conv1(z)))
        z = net.layer4(net.layer3(net.layer2(net.layer1(z))))
        return torch.flatten(net.avgpool(z).to_dense(), 1)


class _OneDnnConv2d(nn.Module):
    """A biased 2-D convolution on oneDNN tensors, its weight reordered once."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        if conv.bias is None or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            raise TypeError("only folded convolutions (with a bias, numeric zero padding)")
        self.geometry = (list(conv.padding), list(conv.stride), list(conv.dilation),
                         conv.groups)
        self.weight = torch._C._nn.mkldnn_reorder_conv2d_weight(
            conv.weight.detach().to_mkldnn(), *self.geometry)
        self.bias = conv.bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mkldnn_convolution(x, self.weight, self.bias, *self.geometry)


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
