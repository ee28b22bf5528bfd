"""Tensor-parallel layers without a process group (a group of one): exact equality with the
full model, names that map shards to full tensors, and one-line errors for unsupported input."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from cadence.errors import UserError
from cadence.models.gpt import build_gpt_mini
from cadence.models.vision import build_mlp
from cadence.tp import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    count_collectives,
    local_slice,
    parallelize_gpt,
    shard_dims,
)
from cadence.tp.layers import check_divisible


@pytest.mark.parametrize("tied", [False, True])
def test_group_of_one_is_the_full_model(tied: bool) -> None:
    torch.manual_seed(0)
    # Any: the test reaches into the blocks' submodules (embedding, head) by index and name.
    full: Any = build_gpt_mini(
        vocab=32, context=8, n_layers=1, d_model=16, n_heads=2, tie_weights=tied
    )
    tp: Any = parallelize_gpt(full)
    ids = torch.randint(0, 32, (2, 8))
    with count_collectives() as counted:
        out = tp(ids)
    torch.testing.assert_close(out, full(ids), rtol=0, atol=0)
    assert not counted  # a group of one communicates nothing
    assert set(shard_dims(tp)) == {n for n, _ in full.named_parameters()}
    assert (tp[-1][1].weight is tp[0].tok.weight) == tied
    assert tp.block_names() == full.block_names()
    # The conversion copies: training the shard leaves the full model alone.
    with torch.no_grad():
        tp[0].tok.weight.add_(1.0)
    assert not torch.equal(tp[0].tok.weight, full[0].tok.weight)


def test_shard_dims_of_each_layer() -> None:
    dims = shard_dims(parallelize_gpt(build_gpt_mini(vocab=32, n_layers=1, d_model=16)))
    assert dims["embed.tok.weight"] == 0 and dims["embed.pos.weight"] is None
    assert dims["layer1.attn.q.weight"] == 0 and dims["layer1.attn.q.bias"] == 0
    assert dims["layer1.attn.proj.weight"] == 1 and dims["layer1.attn.proj.bias"] is None
    assert dims["layer1.mlp.0.weight"] == 0 and dims["layer1.mlp.2.weight"] == 1
    assert dims["layer1.ln1.weight"] is None and dims["final.1.weight"] == 0


def test_local_slice_splits_contiguously() -> None:
    full = torch.arange(12).view(3, 4)
    assert local_slice(full, 1, 1, 2).tolist() == [[2, 3], [6, 7], [10, 11]]
    assert local_slice(full, None, 1, 2) is full


def test_single_layers_match_torch() -> None:
    torch.manual_seed(0)
    lin, emb = nn.Linear(6, 4), nn.Embedding(10, 3)
    x, ids = torch.randn(5, 6), torch.randint(0, 10, (5,))
    torch.testing.assert_close(ColumnParallelLinear.from_full(lin)(x), lin(x))
    torch.testing.assert_close(RowParallelLinear.from_full(lin)(x), lin(x))
    torch.testing.assert_close(VocabParallelEmbedding.from_full(emb)(ids), emb(ids))


def test_unsupported_model_is_a_one_line_user_error() -> None:
    with pytest.raises(UserError, match="gpt_mini-style") as info:
        parallelize_gpt(build_mlp())
    assert "\n" not in str(info.value)


def test_uneven_split_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"attention heads \(6\) is not divisible by .* 4"):
        check_divisible("attention heads", 6, 4)
    check_divisible("vocabulary size", 128, 4)
