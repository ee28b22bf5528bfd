"""The training loss shared by every model in the zoo."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    """Mean cross entropy for (B, C) vs (B,) and (B, T, V) vs (B, T) alike.

    Flattening all leading dims makes next-token loss a per-token average.
    """
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
