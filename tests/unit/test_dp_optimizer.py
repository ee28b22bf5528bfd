"""The layer-wise updater: one call over several layers equals one call per layer."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from cadence.dp.optimizer import LayerwiseUpdater


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3))


def _step_twice(
    opt_class: Callable[..., torch.optim.Optimizer], merged: bool, **kw: float
) -> nn.Module:
    model = _model()
    optimizer = opt_class(model.parameters(), **kw)
    groups = [list(layer.parameters()) for layer in model]
    updater = LayerwiseUpdater(optimizer, groups)
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    for _ in range(2):  # the second step uses the state the first one left
        model.zero_grad()
        model(x).square().sum().backward()
        if merged:
            updater.step_many([0, 1, 2])
        else:
            for g in range(3):
                updater.step(g)
    return model


@pytest.mark.parametrize(
    ("opt_class", "kw"),
    [(torch.optim.Adam, {"lr": 0.1}), (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})],
)
def test_one_call_over_several_layers_equals_a_call_per_layer(opt_class, kw) -> None:
    merged, separate = _step_twice(opt_class, True, **kw), _step_twice(opt_class, False, **kw)
    untouched = _model()
    triples = zip(merged.parameters(), separate.parameters(), untouched.parameters(), strict=True)
    for a, b, c in triples:
        torch.testing.assert_close(a, b)
        assert not torch.equal(a, c)  # the step really moved the parameters


def test_merged_views_share_the_users_state_and_follow_its_learning_rate() -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    updater = LayerwiseUpdater(optimizer, [list(layer.parameters()) for layer in model])
    before = copy.deepcopy(model)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.param_groups[0]["lr"] = 0.5  # as an LR scheduler would
    updater.step_many([0, 2])
    for (name, p), q in zip(model.named_parameters(), before.parameters(), strict=True):
        expected = q - 0.5 if not name.startswith("1.") else q  # layer 1 was not stepped
        torch.testing.assert_close(p, expected)
