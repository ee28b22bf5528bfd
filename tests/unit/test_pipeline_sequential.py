"""What `cadence.pipeline_parallel` accepts as a model, where it cuts it, which parameters two
stages share, and what it refuses (pure: no processes)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

from cadence.errors import UserError
from cadence.pipeline.sequential import (
    as_blocks,
    check_batchnorm,
    shared_parameters,
    stage_ranges,
)


def test_sequential_keeps_its_names_and_modules() -> None:
    seq = nn.Sequential(OrderedDict(a=nn.Linear(2, 3), b=nn.ReLU(), c=nn.Linear(3, 1)))
    blocks = as_blocks(seq)
    assert blocks.block_names() == ["a", "b", "c"]
    assert list(blocks.state_dict()) == list(seq.state_dict())
    assert blocks.a is seq.a  # the user's optimizer over seq.parameters() still applies


def test_a_list_is_numbered_like_sequential() -> None:
    layers = [nn.Linear(2, 3), nn.Linear(3, 1)]
    assert list(as_blocks(layers).state_dict()) == list(nn.Sequential(*layers).state_dict())


def test_a_model_with_its_own_forward_is_refused() -> None:
    class Net(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    with pytest.raises(UserError, match="Net is not sequential.*nn.Sequential"):
        as_blocks(Net())


def test_split_points() -> None:
    assert stage_ranges(5, 2, None) == ((0, 3), (3, 5))
    assert stage_ranges(5, 3, [1, 4]) == ((0, 1), (1, 4), (4, 5))
    with pytest.raises(UserError, match="give 2 block indices"):
        stage_ranges(5, 3, [2])
    with pytest.raises(UserError, match="increase strictly"):
        stage_ranges(5, 3, [3, 3])
    with pytest.raises(UserError, match="increase strictly"):
        stage_ranges(5, 2, [5])


def test_tied_weights_are_grouped_by_the_stages_holding_them() -> None:
    embed, mid, head = nn.Embedding(4, 2), nn.Linear(2, 2), nn.Linear(2, 4, bias=False)
    head.weight = embed.weight
    blocks = as_blocks([embed, mid, head])
    assert shared_parameters(blocks, ((0, 1), (1, 2), (2, 3))) == [((0, 2), [embed.weight])]
    assert shared_parameters(blocks, ((0, 1), (1, 3))) == [((0, 1), [embed.weight])]
    assert shared_parameters(blocks, ((0, 3),)) == []


def test_batchnorm_needs_one_microbatch() -> None:
    model = nn.Sequential(nn.Conv2d(1, 1, 1), nn.BatchNorm2d(1))
    check_batchnorm(model, 1)
    with pytest.raises(UserError, match="microbatches=1"):
        check_batchnorm(model, 2)
