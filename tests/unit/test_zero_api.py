"""`cadence.zero` in a world of one: the user's optimizer (groups kept, unused parameters left
alone), units that follow the module tree with tied weights in their common unit, and one-line
refusals of what cannot be sharded."""

from typing import cast

import pytest
import torch
from torch import nn

import cadence
from cadence.errors import UserError
from cadence.zero.layout import bucket_params, build_layout
from cadence.zero.shard_optim import ELEMENTWISE, Segment, segments


class Tied(nn.Module):
    """Two units (items of a ModuleList) sharing one weight, a nested unit, an unused layer."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6), nn.Sequential(nn.Linear(6, 6), nn.Tanh())])
        cast(nn.Sequential, self.layers[1])[0].weight = self.layers[0].weight
        self.unused = nn.Linear(2, 2)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_units_follow_the_tree_and_a_tied_weight_goes_to_the_common_unit():
    model = Tied()
    units = {name: [n for n, _ in params] for name, _, params in bucket_params(model)}
    assert units == {
        "model": ["layers.0.weight", "unused.weight", "unused.bias", "head.weight", "head.bias"],
        "layers.0": ["layers.0.bias"],
        "layers.1": [],
        "layers.1.0": ["layers.1.0.bias"],
        "layers.1.1": [],  # Tanh: a unit without parameters
    }


def test_segments_cut_parameters_at_piece_borders():
    layout = build_layout([("b", [("w", (300,)), ("v", (100,)), ("u", (200,))])], 2)
    bucket = layout.buckets[0]  # padded to 1024: pieces [0, 512) and [512, 1024)
    assert segments(bucket, 0) == [Segment(0, 0, 300), Segment(1, 300, 400), Segment(2, 400, 512)]
    assert segments(bucket, 1) == [Segment(2, 0, 88)]


def _groups(model):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_user_optimizer_groups_and_unused_parameters_match_torch(stage):
    torch.manual_seed(0)
    plain, x = Tied(), torch.randn(4, 6)
    torch.manual_seed(0)
    model = Tied()
    ref = torch.optim.AdamW(_groups(plain), lr=1e-2)
    user = torch.optim.AdamW(_groups(model), lr=1e-2)
    model, opt = cadence.zero(model, stage=stage, optimizer=user)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    for _ in range(3):
        for m, o in ((plain, ref), (model, opt)):
            o.zero_grad()
            m(x).square().mean().backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
            o.step()
    got = model.state_dict()
    assert got.keys() == plain.state_dict().keys()
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=key)
    torch.manual_seed(0)
    initial = Tied().state_dict()
    for key in ("unused.weight", "unused.bias"):  # no gradient: no weight decay, no step
        assert torch.equal(got[key], initial[key]), key
    assert not torch.equal(got["head.weight"], initial["head.weight"])


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda m: torch.optim.LBFGS(m.parameters()), "cannot shard LBFGS"),
        (lambda m: torch.optim.Adafactor(m.parameters()), "cannot shard Adafactor"),
        (lambda m: torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1), "not a trainable"),
        (lambda m: "rmsprop", "unknown ZeRO optimizer 'rmsprop'"),
    ],
)
def test_unshardable_optimizers_are_refused_in_one_line(make, needle):
    model = Tied()
    with pytest.raises(UserError, match=needle) as info:
        cadence.zero(model, stage=3, optimizer=make(model))
    assert "\n" not in str(info.value)


def test_other_refusals_are_one_line():
    model = Tied()
    with pytest.raises(UserError, match="set them on the optimizer itself"):
        cadence.zero(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), lr=0.2)
    stepped = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 6)).sum().backward()
    stepped.step()
    with pytest.raises(UserError, match="has already stepped"):
        cadence.zero(model, optimizer=stepped)
    with pytest.raises(UserError, match="1-bit Adam"):
        cadence.zero(Tied(), compression="onebit", optimizer=lambda ps: torch.optim.SGD(ps, lr=1))
    model, opt = cadence.zero(Tied(), stage=2, compression="onebit", lr=1e-3)
    model(torch.randn(2, 6)).sum().backward()
    with pytest.raises(UserError, match="not available with onebit") as info:
        opt.clip_grad_norm_(1.0)
    assert "\n" not in str(info.value)
    model, opt = cadence.zero(Tied(), stage=2, lr=1e-3)
    model(torch.randn(2, 6)).sum().backward()
    with pytest.raises(UserError, match="part of a ZeRO model's parameters") as info:
        torch.nn.utils.clip_grad_norm_(model.head.parameters(), 1.0)
    assert "\n" not in str(info.value)


class ReadsWeight(nn.Module):
    """Reads a unit's weight without calling the unit."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[0](x) @ self.layers[1].weight


def test_stage3_reading_a_released_parameter_is_one_line():
    import inspect

    model, _ = cadence.zero(ReadsWeight(), stage=3, lr=0.1, prefetch=False)
    assert list(inspect.signature(model.forward).parameters) == ["x"]
    with pytest.raises(UserError, match="outside the forward of the unit holding it") as info:
        model(torch.randn(2, 4))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("cls", ELEMENTWISE, ids=lambda c: c.__name__)
def test_every_elementwise_optimizer_steps_segments_as_torch_steps_parameters(cls):
    torch.manual_seed(0)
    plain, x = Tied(), torch.randn(4, 6)
    torch.manual_seed(0)
    model, opt = cadence.zero(Tied(), stage=3, optimizer=lambda ps: cls(ps, lr=1e-2))
    ref = cls(plain.parameters(), lr=1e-2)
    for _ in range(3):
        for m, o in ((plain, ref), (model, opt)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    got = model.state_dict()
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("norm_type", [1.0, 2.0, float("inf")])
def test_clip_returns_torchs_norm_and_scales_as_torch(norm_type):
    torch.manual_seed(0)
    plain, x = Tied(), torch.randn(4, 6)
    torch.manual_seed(0)
    model, opt = cadence.zero(Tied(), stage=2, optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0))
    ref = torch.optim.SGD(plain.parameters(), lr=1.0)
    norms = []
    for m, o, clip in ((plain, ref, torch.nn.utils.clip_grad_norm_), (model, opt, None)):
        m(x).square().mean().backward()
        if clip is None:
            norms.append(opt.clip_grad_norm_(0.01, norm_type=norm_type))
        else:
            norms.append(clip(m.parameters(), 0.01, norm_type=norm_type))
        o.step()
    torch.testing.assert_close(norms[1], norms[0])
    got = model.state_dict()
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=key)
