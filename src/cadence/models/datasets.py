"""In-memory datasets: digits (two shapes), stdlib-text, and synthetic."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from cadence.errors import UserError
from cadence.models.digits import digits_split
from cadence.models.registry import DATASET_NAMES
from cadence.models.spec import ModelSpec
from cadence.models.text import VOCAB_SIZE, encode, stdlib_corpus, windows

SYNTHETIC_TRAIN = 2048
"""Samples in the synthetic training split."""
SYNTHETIC_TEST = 512
"""Samples in the synthetic test split."""
TEXT_TRAIN_FRACTION = 0.9
"""Leading share of the text corpus used for training; the tail is the test split."""


@dataclass(frozen=True)
class Dataset:
    """A train/test split held fully in memory."""

    name: str
    """Dataset name, one of `DATASET_NAMES`, or the `pkg.module:factory` that made it."""
    train_x: Tensor
    """Training inputs: float images (N, C, H, W) or int64 token ids (N, T)."""
    train_y: Tensor
    """Training targets: int64 labels (N,) or next-token ids (N, T)."""
    test_x: Tensor
    """Test inputs, shaped like `train_x`."""
    test_y: Tensor
    """Test targets, shaped like `train_y`."""
    num_classes: int
    """Number of classes, or vocabulary size for text."""

    def __post_init__(self) -> None:
        if len(self.train_x) != len(self.train_y) or len(self.test_x) != len(self.test_y):
            raise ValueError(f"dataset {self.name!r}: inputs and targets differ in length")


def load_dataset(name: str, spec: ModelSpec, seed: int = 0) -> Dataset:
    """Load dataset `name` shaped for `spec`'s input; `seed` fixes splits and sampling."""
    if name not in DATASET_NAMES:
        raise UserError(f"unknown dataset '{name}'; known datasets: {', '.join(DATASET_NAMES)}")
    if name not in spec.datasets:
        raise UserError(
            f"model '{spec.name}' cannot use dataset '{name}'; "
            f"it accepts: {', '.join(spec.datasets)}"
        )
    if name == "digits":
        return _digits(spec.input_shape, seed)
    if name == "stdlib-text":
        (context,) = spec.input_shape
        return _stdlib_text(context)
    return _synthetic(spec, seed)


def _digits(input_shape: tuple[int, ...], seed: int) -> Dataset:
    x_tr, x_te, y_tr, y_te = digits_split(seed)
    # One scalar mean/std from the training split only, so no test statistics leak in.
    mean, std = float(x_tr.mean()), float(x_tr.std())
    train_x = _shape_digits((torch.from_numpy(x_tr) - mean) / std, input_shape)
    test_x = _shape_digits((torch.from_numpy(x_te) - mean) / std, input_shape)
    return Dataset(
        name="digits",
        train_x=train_x,
        train_y=torch.from_numpy(y_tr),
        test_x=test_x,
        test_y=torch.from_numpy(y_te),
        num_classes=10,
    )


def _shape_digits(flat: Tensor, input_shape: tuple[int, ...]) -> Tensor:
    images = flat.reshape(-1, 1, 8, 8).contiguous()
    if input_shape == (1, 8, 8):
        return images
    if input_shape == (3, 32, 32):
        big = F.interpolate(images, size=(32, 32), mode="bilinear", align_corners=False)
        return big.repeat(1, 3, 1, 1).contiguous()
    raise ValueError(f"no digits variant for input shape {input_shape}")


def _stdlib_text(context: int) -> Dataset:
    ids = encode(stdlib_corpus())
    cut = int(len(ids) * TEXT_TRAIN_FRACTION)
    train_x, train_y = windows(ids[:cut], context)
    test_x, test_y = windows(ids[cut:], context)
    return Dataset("stdlib-text", train_x, train_y, test_x, test_y, num_classes=VOCAB_SIZE)


def _synthetic(spec: ModelSpec, seed: int) -> Dataset:
    # 2*seed and 2*seed+1 keep train and test batches distinct for every seed.
    train_x, train_y = spec.synthetic_batch(SYNTHETIC_TRAIN, seed=2 * seed)
    test_x, test_y = spec.synthetic_batch(SYNTHETIC_TEST, seed=2 * seed + 1)
    return Dataset("synthetic", train_x, train_y, test_x, test_y, num_classes=spec.num_classes)
