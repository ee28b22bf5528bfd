"""CIFAR ResNet-32 (He et al. 2016, section 4.2) as stem + 15 residual blocks + head.

Shortcuts use option A: identity, and where the shape changes, stride-2 subsampling plus
zero-padded channels. That adds no parameters, matching the paper's ~0.46M count.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from cadence.models.blocks import BlockModel, named_blocks


class PadShortcut(nn.Module):
    """Option-A shortcut: subsample spatially by `stride`, zero-pad channels to `out_ch`."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.extra = out_ch - in_ch
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        half = self.extra // 2
        return F.pad(x, (0, 0, 0, 0, half, self.extra - half))


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers plus shortcut, ReLU after the add (the residual is inside)."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        same = stride == 1 and in_ch == out_ch
        self.shortcut: nn.Module = nn.Identity() if same else PadShortcut(in_ch, out_ch, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


def build_resnet(
    num_classes: int = 10, blocks_per_stage: int = 5, widths: tuple[int, ...] = (16, 32, 64)
) -> BlockModel:
    """CIFAR ResNet with depth 6 * blocks_per_stage + 2 (ResNet-32 by default)."""
    pairs: list[tuple[str, nn.Module]] = [
        (
            "stem",
            nn.Sequential(
                nn.Conv2d(3, widths[0], 3, padding=1, bias=False),
                nn.BatchNorm2d(widths[0]),
                nn.ReLU(),
            ),
        )
    ]
    in_ch = widths[0]
    for stage, out_ch in enumerate(widths):
        for i in range(blocks_per_stage):
            stride = 2 if stage > 0 and i == 0 else 1
            pairs.append((f"res{stage + 1}_{i + 1}", BasicBlock(in_ch, out_ch, stride)))
            in_ch = out_ch
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes))
    pairs.append(("head", head))
    model = named_blocks(*pairs)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    return model


def build_resnet32(num_classes: int = 10) -> BlockModel:
    """ResNet-32: 3 stages x 5 basic blocks, 16/32/64 channels."""
    return build_resnet(num_classes=num_classes, blocks_per_stage=5)
