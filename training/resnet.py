"""ResNet-18 (He et al., CVPR 2016) with torchvision's module names and initialisation.

The encoder needs only this one network; building it here spares every training run the
import of torchvision (about 1.5 s on a 2-core machine, most of it torch._dynamo pulled in
by torchvision.ops). The module tree and parameter names are torchvision's
(`conv1`, `bn1`, `layer1.0.conv1`, `layer2.0.downsample.0`, `fc`, ...), so a torchvision
ResNet-18 state_dict loads as it is, and the layers are built and initialised in the
same order (the constructors' default draws, then Kaiming-normal fan-out for every
convolution), so a seed gives the same weights either way
(tests/training/test_resnet.py checks both against torchvision).
"""

from __future__ import annotations

import torch
from torch import nn

#: channels of the four stages; two basic blocks each
STAGE_WIDTHS = (64, 128, 256, 512)
BLOCKS_PER_STAGE = 2


def conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1,
                     bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (projected by
    `downsample` when the shape changes)."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1,
                 downsample: nn.Module | None = None):
        super().__init__()
        self.conv1: nn.Module = conv3x3(in_channels, channels, stride)
        self.bn1: nn.Module = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2: nn.Module = conv3x3(channels, channels)
        self.bn2: nn.Module = nn.BatchNorm2d(channels)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


class ResNet18(nn.Module):
    """7x7/2 stem, 3x3/2 max-pool, four stages of two basic blocks, global average pool,
    linear classifier over `num_classes`."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        # typed as modules: the encoder swaps the stem and the classifier, and its
        # inference copy folds the batch norms away
        self.conv1: nn.Module = nn.Conv2d(3, STAGE_WIDTHS[0], kernel_size=7, stride=2,
                                          padding=3, bias=False)
        self.bn1: nn.Module = nn.BatchNorm2d(STAGE_WIDTHS[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        widths = STAGE_WIDTHS
        self.layer1 = self._stage(widths[0], widths[0], stride=1)
        self.layer2 = self._stage(widths[0], widths[1], stride=2)
        self.layer3 = self._stage(widths[1], widths[2], stride=2)
        self.layer4 = self._stage(widths[2], widths[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc: nn.Module = nn.Linear(widths[3], num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    @staticmethod
    def _stage(in_channels: int, width: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or in_channels != width:
            # built before the block, as torchvision does: the draw order fixes the weights
            downsample = nn.Sequential(
                nn.Conv2d(in_channels, width, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(width))
        blocks = [BasicBlock(in_channels, width, stride, downsample)]
        blocks += [BasicBlock(width, width) for _ in range(BLOCKS_PER_STAGE - 1)]
        return nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))
