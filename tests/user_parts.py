"""A user's own models, datasets and losses, as `--model tests.user_parts:NAME` names them."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

FEATURES, CLASSES = 16, 4
NOT_CALLABLE = 3


def digits_mlp() -> nn.Module:
    """For `--dataset digits` (8x8 images, 10 classes)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def small_net() -> nn.Module:
    """For `blobs`: an MLP with no BatchNorm, so micro-batches give the batch's gradients."""
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.Tanh(), nn.Linear(32, CLASSES))


def _blobs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.randint(0, CLASSES, (n,))
    centres = torch.eye(CLASSES, FEATURES) * 3
    return centres[y] + torch.randn(n, FEATURES), y


def blobs() -> tuple[TensorDataset, TensorDataset]:
    """Separable Gaussian blobs: (train, test) TensorDatasets of (features, label)."""
    return TensorDataset(*_blobs(512)), TensorDataset(*_blobs(128))


def blob_pairs() -> tuple[list[tuple[torch.Tensor, int]], tuple[torch.Tensor, torch.Tensor]]:
    """The same data as a list of (input, target) items and a pair of tensors."""
    x, y = _blobs(64)
    return [(x[i], int(y[i])) for i in range(len(x))], _blobs(32)


def wrong_width() -> nn.Module:
    return nn.Linear(FEATURES + 1, CLASSES)


def not_a_module() -> int:
    return 42


def not_a_pair() -> TensorDataset:
    return TensorDataset(*_blobs(8))


def per_sample_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross entropy without the mean: not one number."""
    return nn.functional.cross_entropy(output, target, reduction="none")


def smooth_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(output, target, label_smoothing=0.1)


def numpy_blobs() -> tuple[tuple[object, object], tuple[object, object]]:
    """(inputs, targets) numpy arrays: not mistaken for a dataset of two items."""
    (x, y), (tx, ty) = _blobs(40), _blobs(24)
    return (x.numpy(), y.numpy()), (tx.numpy(), ty.numpy())


def line() -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Regression: float targets (N, 1)."""
    x = torch.randn(96, FEATURES)
    y = x.sum(dim=1, keepdim=True)
    return (x[:64], y[:64]), (x[64:], y[64:])


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


def regressor() -> nn.Module:
    return nn.Linear(FEATURES, 1)


def deep_regressor() -> nn.Module:
    """For `line` with `mse`: a Sequential a pipeline cuts into stages."""
    return nn.Sequential(
        nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 1)
    )


def batchnorm_net() -> nn.Module:
    """A Sequential with BatchNorm: micro-batches would be normalised on their own statistics."""
    return nn.Sequential(nn.Linear(FEATURES, 8), nn.BatchNorm1d(8), nn.Linear(8, CLASSES))


class OwnForward(nn.Sequential):
    """A Sequential whose forward does more than apply its modules in order."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


def own_forward() -> nn.Module:
    return OwnForward(nn.Linear(FEATURES, CLASSES))


class TwoTower(nn.Module):
    """Not a Sequential: two branches added, as users' models often are."""

    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Linear(FEATURES, CLASSES)
        self.right = nn.Sequential(nn.Linear(FEATURES, 8), nn.ReLU(), nn.Linear(8, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.left(x) + self.right(x)


def two_tower() -> nn.Module:
    return TwoTower()
