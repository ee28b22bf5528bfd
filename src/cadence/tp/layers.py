"""Tensor-parallel layers: column- and row-parallel Linear and a vocabulary-sharded embedding.

Each layer holds one contiguous slice of the full weight (`chunk(size, dim)[rank]`) and records
the sharded dimension of each parameter in `shard_dims`, so a full tensor maps to a rank's
slice with `local_slice` (used to build shards from a full model and to check gradients).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cadence.errors import UserError
from cadence.tp.functions import (
    Group,
    copy_to_tp,
    gather_from_tp,
    group_rank_size,
    reduce_from_tp,
)


def check_divisible(what: str, n: int, size: int) -> None:
    """One-line UserError unless `n` splits evenly over `size` tensor-parallel ranks."""
    if n % size:
        raise UserError(f"{what} ({n}) is not divisible by the tensor-parallel size {size}")


def local_slice(full: Tensor, dim: int | None, rank: int, size: int) -> Tensor:
    """Rank `rank`'s slice of `full` sharded along `dim` (None: replicated, the whole tensor)."""
    return full if dim is None else full.chunk(size, dim)[rank]


class _Sharded(nn.Module):
    shard_dims: dict[str, int | None]
    """Parameter name -> sharded dimension (None: replicated on every rank)."""

    def __init__(self, group: Group) -> None:
        super().__init__()
        self.group = group
        self.rank, self.size = group_rank_size(group)

    def _load(self, **full: Tensor | None) -> None:
        with torch.no_grad():
            for name, tensor in full.items():
                param = getattr(self, name)
                if tensor is None or param is None:
                    continue
                param.copy_(local_slice(tensor, self.shard_dims[name], self.rank, self.size))


def _init_linear(weight: Tensor, bias: Tensor | None, fan_in: int) -> None:
    # nn.Linear's default, with the full layer's fan-in so shards start at the full scale.
    bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
    nn.init.uniform_(weight, -bound, bound)
    if bias is not None:
        nn.init.uniform_(bias, -bound, bound)


class ColumnParallelLinear(_Sharded):
    """y = x W^T + b with W's rows (output features) split over ranks.

    The input is replicated; each rank produces its slice of the output features. With
    `gather_output` the slices are all-gathered into the full output; with `copy_input=False`
    the caller has already applied `copy_to_tp` (several layers sharing one input, as Q, K, V
    do, then pay one all-reduce in backward instead of one each).
    """

    shard_dims = {"weight": 0, "bias": 0}

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        group: Group = None,
        *,
        gather_output: bool = False,
        copy_input: bool = True,
    ) -> None:
        super().__init__(group)
        check_divisible("output features", out_features, self.size)
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.copy_input = gather_output, copy_input
        local = out_features // self.size
        self.weight = nn.Parameter(torch.empty(local, in_features))
        self.bias = nn.Parameter(torch.empty(local)) if bias else None
        _init_linear(self.weight, self.bias, in_features)

    @classmethod
    def from_full(
        cls, full: nn.Linear, group: Group = None, *, gather_output: bool = False,
        copy_input: bool = True,
    ) -> ColumnParallelLinear:  # fmt: skip
        """This rank's shard of `full`, with its weights copied."""
        layer = cls(
            full.in_features, full.out_features, full.bias is not None, group,
            gather_output=gather_output, copy_input=copy_input,
        )  # fmt: skip
        layer._load(weight=full.weight, bias=full.bias)
        return layer

    def forward(self, x: Tensor) -> Tensor:
        if self.copy_input:
            x = copy_to_tp(x, self.group)
        y = F.linear(x, self.weight, self.bias)
        return gather_from_tp(y, self.group) if self.gather_output else y

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features} / {self.size}"


class RowParallelLinear(_Sharded):
    """y = x W^T + b with W's columns (input features) split over ranks.

    The input arrives already split along its last dimension (a column-parallel layer's
    output); each rank computes a partial product and one all-reduce sums them. The bias is
    replicated and added once, after the sum.
    """

    shard_dims = {"weight": 1, "bias": None}

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, group: Group = None
    ) -> None:
        super().__init__(group)
        check_divisible("input features", in_features, self.size)
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features // self.size))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        _init_linear(self.weight, self.bias, in_features)

    @classmethod
    def from_full(cls, full: nn.Linear, group: Group = None) -> RowParallelLinear:
        """This rank's shard of `full`, with its weights copied."""
        layer = cls(full.in_features, full.out_features, full.bias is not None, group)
        layer._load(weight=full.weight, bias=full.bias)
        return layer

    def forward(self, x: Tensor) -> Tensor:
        y = reduce_from_tp(F.linear(x, self.weight), self.group)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in={self.in_features} / {self.size}, out={self.out_features}"


class VocabParallelEmbedding(_Sharded):
    """An embedding whose table rows (token ids) are split over ranks.

    Each rank looks up the ids in its own range, writes zeros for the others, and one
    all-reduce assembles the full embeddings (exactly one rank contributes each row).
    """

    shard_dims = {"weight": 0}

    def __init__(self, num_embeddings: int, embedding_dim: int, group: Group = None) -> None:
        super().__init__(group)
        check_divisible("vocabulary size", num_embeddings, self.size)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        local = num_embeddings // self.size
        self.start, self.end = self.rank * local, (self.rank + 1) * local
        self.weight = nn.Parameter(torch.empty(local, embedding_dim))
        nn.init.normal_(self.weight)

    @classmethod
    def from_full(cls, full: nn.Embedding, group: Group = None) -> VocabParallelEmbedding:
        """This rank's rows of `full`, copied."""
        layer = cls(full.num_embeddings, full.embedding_dim, group)
        layer._load(weight=full.weight)
        return layer

    def forward(self, ids: Tensor) -> Tensor:
        if self.size == 1:
            return F.embedding(ids, self.weight)
        outside = (ids < self.start) | (ids >= self.end)
        local = torch.where(outside, torch.zeros_like(ids), ids - self.start)
        partial = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(partial, self.group)

    def extra_repr(self) -> str:
        return f"rows {self.start}:{self.end} of {self.num_embeddings}, dim={self.embedding_dim}"
