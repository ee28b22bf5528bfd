"""Tensor-parallel transformer blocks and the conversion of a gpt_mini model into one.

MLP: column-parallel up-projection, GELU on the local slice, row-parallel down-projection.
Attention: Q, K and V column-parallel so each rank owns whole heads, attention on those heads,
row-parallel output projection. Each costs one all-reduce forward and one backward; the token
embedding is vocabulary-sharded (one all-reduce forward) and the head is column-parallel over
the vocabulary with its logits all-gathered, so the loss is computed as usual on every rank.
"""

from __future__ import annotations

import copy

import torch.nn.functional as F
from torch import Tensor, nn

from cadence.errors import UserError
from cadence.models.blocks import BlockModel
from cadence.models.gpt import CausalSelfAttention, Embedding, TransformerBlock
from cadence.tp.functions import Group, copy_to_tp, group_rank_size
from cadence.tp.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    _Sharded,
    check_divisible,
)


class TPAttention(nn.Module):
    """Causal self-attention with heads split over ranks; parameter names match the full
    `CausalSelfAttention` (q, k, v, proj), so shards map to full tensors by name."""

    def __init__(self, full: CausalSelfAttention, group: Group = None) -> None:
        super().__init__()
        _, size = group_rank_size(group)
        check_divisible("attention heads", full.n_heads, size)
        self.group = group
        self.local_heads = full.n_heads // size
        self.head_dim = full.q.out_features // full.n_heads
        # One copy_to_tp for Q, K and V together: one all-reduce of the input grad backward.
        self.q, self.k, self.v = (
            ColumnParallelLinear.from_full(lin, group, copy_input=False)
            for lin in (full.q, full.k, full.v)
        )
        self.proj = RowParallelLinear.from_full(full.proj, group)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        x = copy_to_tp(x, self.group)

        def heads(y: Tensor) -> Tensor:
            return y.view(b, t, self.local_heads, self.head_dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), is_causal=True
        )
        return self.proj(out.transpose(1, 2).reshape(b, t, self.local_heads * self.head_dim))


def tp_mlp(full: nn.Sequential, group: Group = None) -> nn.Sequential:
    """Linear-activation-Linear as column-parallel, activation, row-parallel (indices kept)."""
    if not (len(full) == 3 and isinstance(full[0], nn.Linear) and isinstance(full[2], nn.Linear)):
        raise UserError(f"tensor-parallel MLP needs Linear, activation, Linear; got {full}")
    return nn.Sequential(
        ColumnParallelLinear.from_full(full[0], group),
        copy.deepcopy(full[1]),
        RowParallelLinear.from_full(full[2], group),
    )


def gpt_parts(model: nn.Module) -> tuple[Embedding, list[TransformerBlock], nn.Sequential]:
    """(embedding, transformer blocks, final LayerNorm + head) of a gpt_mini-style model."""
    blocks = list(model.children())
    embed, layers, final = (blocks[0], blocks[1:-1], blocks[-1]) if blocks else (None, [], None)
    if (
        isinstance(model, BlockModel)
        and isinstance(embed, Embedding)
        and all(isinstance(b, TransformerBlock) for b in layers)
        and isinstance(final, nn.Sequential)
        and len(final) == 2
        and isinstance(final[0], nn.LayerNorm)
        and isinstance(final[1], nn.Linear)
    ):
        return embed, [b for b in layers if isinstance(b, TransformerBlock)], final
    raise UserError(
        "tensor parallelism supports gpt_mini-style models (embedding, transformer blocks, "
        f"LayerNorm + head); got {type(model).__name__} with blocks "
        f"{[type(b).__name__ for b in blocks]}"
    )


def parallelize_gpt(model: BlockModel, group: Group = None) -> BlockModel:
    """A tensor-parallel copy of a gpt_mini model for this rank of `group`.

    Sharded weights are this rank's slices of `model`'s, replicated ones (LayerNorms, position
    embedding, row-parallel biases) are copies; `model` is left unchanged. Block and parameter
    names are the same as in `model`. A tied head keeps sharing the token-embedding shard
    (both are split along the vocabulary). Call it on every rank of `group`.
    """
    embed, layers, final = gpt_parts(model)
    full_head = final[1]
    assert isinstance(full_head, nn.Linear)  # checked by gpt_parts; narrows the type
    tied = full_head.weight is embed.tok.weight
    tp = copy.deepcopy(model)
    tp_embed, tp_layers, tp_final = gpt_parts(tp)
    tok = VocabParallelEmbedding.from_full(embed.tok, group)
    tp_embed.tok = tok  # type: ignore[assignment]  # a drop-in for nn.Embedding
    for full_block, block in zip(layers, tp_layers, strict=True):
        block.attn = TPAttention(full_block.attn, group)  # type: ignore[assignment]
        block.mlp = tp_mlp(full_block.mlp, group)
    head = ColumnParallelLinear.from_full(full_head, group, gather_output=True)
    if tied:
        head.weight = tok.weight
    tp_final[1] = head
    return tp


def shard_dims(model: nn.Module) -> dict[str, int | None]:
    """Parameter name -> dimension along which it is sharded (None: replicated).

    For a `parallelize_gpt` model the same name in the full model gives the full tensor, and
    `local_slice(full, dim, rank, size)` this rank's part of it.
    """
    dims: dict[str, int | None] = {}
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        for p_name, param in module.named_parameters(recurse=False):
            if id(param) in seen:  # a tied parameter keeps its first name, as in parameters()
                continue
            seen.add(id(param))
            name = f"{mod_name}.{p_name}" if mod_name else p_name
            dims[name] = module.shard_dims[p_name] if isinstance(module, _Sharded) else None
    return dims
