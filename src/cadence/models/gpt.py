"""`gpt_mini`: a small pre-LN decoder-only transformer over character ids.

Blocks: embedding (token + learned position), N transformer blocks, final LayerNorm + head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cadence.models.blocks import BlockModel, named_blocks


class Embedding(nn.Module):
    """Token embedding plus a learned position embedding for up to `context` positions."""

    def __init__(self, vocab: int, context: int, d_model: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)

    def forward(self, ids: Tensor) -> Tensor:
        t = ids.shape[1]
        if t > self.pos.num_embeddings:
            raise ValueError(f"sequence length {t} exceeds context {self.pos.num_embeddings}")
        positions = torch.arange(t, device=ids.device)
        return self.tok(ids) + self.pos(positions)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t only sees positions <= t."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape

        def heads(y: Tensor) -> Tensor:
            return y.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), is_causal=True
        )
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class TransformerBlock(nn.Module):
    """Pre-LN block: x + attn(ln(x)), then x + mlp(ln(x)); both residuals live here."""

    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model),
            nn.GELU(),
            nn.Linear(mlp_ratio * d_model, d_model),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def build_gpt_mini(
    vocab: int = 128,
    context: int = 64,
    n_layers: int = 4,
    d_model: int = 128,
    n_heads: int = 4,
    mlp_ratio: int = 4,
    tie_weights: bool = False,
    num_classes: int | None = None,
) -> BlockModel:
    """Build gpt_mini; output is (B, T, vocab) logits.

    `num_classes` is accepted as an alias of `vocab` so callers can pass a dataset's
    `num_classes` uniformly. With `tie_weights` the head reuses the token embedding's
    Parameter object, so one parameter is shared by the first and last blocks.
    """
    if num_classes is not None:
        vocab = num_classes
    embed = Embedding(vocab, context, d_model)
    head = nn.Linear(d_model, vocab, bias=False)
    pairs: list[tuple[str, nn.Module]] = [("embed", embed)]
    pairs += [
        (f"layer{i + 1}", TransformerBlock(d_model, n_heads, mlp_ratio)) for i in range(n_layers)
    ]
    pairs.append(("final", nn.Sequential(nn.LayerNorm(d_model), head)))
    model = named_blocks(*pairs)
    # GPT-2 style small init keeps early logits near uniform, which speeds up training.
    for m in model.modules():
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    if tie_weights:
        head.weight = embed.tok.weight
    return model
