"""Convolutional and MLP classifiers for digits (1x8x8) and CIFAR-shaped (3x32x32) inputs."""

from __future__ import annotations

from torch import Tensor, nn

from cadence.models.blocks import BlockModel, named_blocks

# CIFAR VGG16 conv widths in five stages; each stage ends with a 2x2 max-pool.
VGG16_STAGES: tuple[tuple[int, ...], ...] = (
    (64, 64),
    (128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (512, 512, 512),
)


def build_cnn(num_classes: int = 10, channels: tuple[int, int] = (32, 64)) -> BlockModel:
    """Small CNN for 1x8x8 digits: conv-relu, conv-relu-pool, linear head (~29k params)."""
    c1, c2 = channels
    return named_blocks(
        ("conv1", nn.Sequential(nn.Conv2d(1, c1, 3, padding=1), nn.ReLU())),
        ("conv2", nn.Sequential(nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))),
        ("head", nn.Sequential(nn.Flatten(), nn.Linear(c2 * 4 * 4, num_classes))),
    )


def build_mlp(num_classes: int = 10, hidden: tuple[int, ...] = (256, 256)) -> BlockModel:
    """MLP over flattened 1x8x8 digits; one block per linear layer, the first one flattens."""
    widths = (64, *hidden)
    pairs: list[tuple[str, nn.Module]] = []
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers: list[nn.Module] = [nn.Linear(n_in, n_out), nn.ReLU()]
        if i == 0:
            layers.insert(0, nn.Flatten())
        pairs.append((f"fc{i + 1}", nn.Sequential(*layers)))
    head: list[nn.Module] = [nn.Linear(widths[-1], num_classes)]
    if not hidden:
        head.insert(0, nn.Flatten())
    pairs.append(("head", nn.Sequential(*head)))
    return named_blocks(*pairs)


def build_vgg16(num_classes: int = 10, width: int = 512) -> BlockModel:
    """CIFAR VGG16 with BatchNorm: one block per conv (conv,bn,relu[,pool]) and per linear.

    The default (width 512, 10 classes) has about 15.2M parameters.
    """
    pairs: list[tuple[str, nn.Module]] = []
    in_ch = 3
    for stage in VGG16_STAGES:
        for i, out_ch in enumerate(stage):
            layers = [nn.Conv2d(in_ch, out_ch, 3, padding=1), nn.BatchNorm2d(out_ch), nn.ReLU()]
            if i == len(stage) - 1:
                # The pool folds into the stage's last conv block: no parameter-free blocks.
                layers.append(nn.MaxPool2d(2))
            pairs.append((f"conv{len(pairs) + 1}", nn.Sequential(*layers)))
            in_ch = out_ch
    # After five pools a 32x32 input is 1x1, so the flattened features are in_ch wide.
    pairs.append(("fc1", nn.Sequential(nn.Flatten(), nn.Linear(in_ch, width), nn.ReLU())))
    pairs.append(("fc2", nn.Sequential(nn.Linear(width, width), nn.ReLU())))
    pairs.append(("head", nn.Linear(width, num_classes)))
    return named_blocks(*pairs)


class ColumnLSTM(nn.Module):
    """Reads a (B,C,H,W) feature map as a width-long sequence of C*H features via an LSTM.

    Returns the last time step's hidden state, shape (B, hidden).
    """

    def __init__(self, in_features: int, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(in_features, hidden, batch_first=True)

    def forward(self, fmap: Tensor) -> Tensor:
        b, c, h, w = fmap.shape
        seq = fmap.permute(0, 3, 1, 2).reshape(b, w, c * h)
        out, _ = self.lstm(seq)
        return out[:, -1]


def build_cnn_lstm(
    num_classes: int = 10, channels: tuple[int, int] = (32, 64), hidden: int = 128
) -> BlockModel:
    """CNN over 3x32x32 images, then an LSTM across feature-map columns, then a linear head."""
    c1, c2 = channels

    def conv(n_in: int, n_out: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(n_in, n_out, 3, padding=1), nn.BatchNorm2d(n_out), nn.ReLU(), nn.MaxPool2d(2)
        )

    # Two pools take 32x32 to 8x8: 8 time steps of c2 * 8 features.
    return named_blocks(
        ("conv1", conv(3, c1)),
        ("conv2", conv(c1, c2)),
        ("lstm", ColumnLSTM(c2 * 8, hidden)),
        ("head", nn.Linear(hidden, num_classes)),
    )
