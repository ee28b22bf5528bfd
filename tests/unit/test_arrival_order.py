"""The order gradients arrive in one backward pass, and the plans built from it: cadence-dp's
chunks fuse ties (one block's gradients, timed alike by the simulator) in that order, and DDP's
buckets follow it, as torch rebuilds them after the first iteration."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from cadence.dp.layers import gradient_arrival_order, model_layout
from cadence.dp.plan import DPPlan, ParamInfo, build_plan
from cadence.models.loss import loss_fn
from cadence.sim.api import plan_dp
from cadence.sim.command import make_setup, model_params, zoo_arrival_order
from cadence.sim.dp_adapter import ddp_buckets
from tests.unit.test_sim_cli import zoo_profile


def test_cnn_lstm_input_weights_arrive_before_hidden_weights() -> None:
    params = model_params("cnn_lstm")
    order = zoo_arrival_order("cnn_lstm")
    assert sorted(order) == [p.index for p in params]
    index = {p.name: p.index for p in params}
    position = {i: n for n, i in enumerate(order)}
    assert position[index["lstm.lstm.weight_ih_l0"]] < position[index["lstm.lstm.weight_hh_l0"]]
    assert list(order) != sorted(order, reverse=True)  # not reverse registration
    layers = [params[i].layer for i in order]
    assert layers == sorted(layers, reverse=True)  # back layers still first


class _WithUnused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)
        self.last = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.relu(self.first(x)))


def test_arrival_order_puts_unreached_parameters_last_and_clears_gradients() -> None:
    torch.manual_seed(0)
    model = _WithUnused()
    x, y = torch.randn(2, 4), torch.tensor([0, 2])
    order = gradient_arrival_order(model, lambda m: loss_fn(m(x), y))
    params = model_layout(model).params
    assert sorted(order) == list(range(len(params)))
    names = [n for n, _ in model.named_parameters()]
    assert {names[i] for i in order[-2:]} == {"unused.weight", "unused.bias"}
    assert [names[i].split(".")[0] for i in order[:4]] == ["last"] * 2 + ["first"] * 2
    assert all(p.grad is None for p in params)


# Two layers; layer 1's two gradients are timed alike (one block), 600 B each.
TIED = [
    ParamInfo(0, "a.w", 150, 4, 0),
    ParamInfo(1, "b.w", 150, 4, 1),
    ParamInfo(2, "b.b", 150, 4, 1),
]
READY = [2.0, 1.0, 1.0]


def _chunks(order: tuple[int, ...] | None) -> list[list[int]]:
    plan = build_plan(TIED, 1000, 2000, READY, 1e3, arrival_order=order)
    return [[s.param for s in c.segments] for c in plan.chunks]


def test_ties_fuse_in_arrival_order() -> None:
    assert _chunks(None) == [[2, 1], [0]]  # expected order: last registered first
    assert _chunks((1, 2, 0)) == [[1, 2], [0]]
    with pytest.raises(ValueError, match="every parameter index once"):
        _chunks((1, 2))


def test_ddp_buckets_follow_the_arrival_order() -> None:
    params = [ParamInfo(i, f"p{i}", 300_000, 4, i // 2) for i in range(4)]  # 1.2 MB each
    by_registration = ddp_buckets(params, 2_000_000, None)
    assert [[p.index for p in b] for b in by_registration] == [[3, 2], [1, 0]]
    arrived = ddp_buckets(params, 2_000_000, None, arrival_order=(2, 3, 0, 1))
    assert [[p.index for p in b] for b in arrived] == [[2, 3], [0, 1]]
    with pytest.raises(ValueError, match="every parameter index once"):
        ddp_buckets(params, 2_000_000, None, arrival_order=(0, 1, 2))


def test_simulate_setup_carries_the_zoo_arrival_order(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    zoo_profile("cnn_lstm").save(path)
    setup = make_setup(
        model="cnn_lstm", workers=2, bandwidth="1gbit", profile_path=str(path),
        optimizer_step_s=0.001, echo=lambda _: None,
    )  # fmt: skip
    assert setup.arrival_order == zoo_arrival_order("cnn_lstm")


def test_vgg16_classifier_chunk_goes_first_as_the_runtime_sends_it() -> None:
    # The runtime's hooks see the classifier's and conv13's BatchNorm gradients before
    # conv13's weight, so the runtime sends the chunk holding them first. With each layer's
    # gradients ready at its own point in the block the plan starts the same way.
    profile = zoo_profile("vgg16")
    params = model_params("vgg16")
    order = zoo_arrival_order("vgg16")
    names = {p.index: p.name for p in params}

    def chunk_names(plan: DPPlan, position: int) -> set[str]:
        return {names[s.param] for s in plan.chunks[plan.issue_order[position]].segments}

    by_layer = plan_dp(profile, params, 4 << 20, 16 << 20, 2, 50e6, arrival_order=order)
    assert {"head.weight", "conv13.1.weight"} <= chunk_names(by_layer, 0)
