"""Tracing a torch model into the op graph behind the graph priority (no processes)."""

import torch
from torch import nn

from cadence.ps.trace import model_priorities, module_order_ops, param_infos, trace_ops


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.w  # fx traces through: a get_attr read by a mul op


class ScaleThenLinear(nn.Module):
    """`lin` is registered first but runs second: module order and graph order disagree."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.pre = Scale()

    def forward(self, x):
        return self.lin(torch.relu(self.pre(x)))


class Untraceable(ScaleThenLinear):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: fx cannot trace it
            x = x * 2
        return super().forward(x)


def test_trace_finds_ops_inputs_and_parameters():
    model = ScaleThenLinear()
    _, infos = param_infos(model)
    assert [i.name for i in infos] == ["lin.weight", "lin.bias", "pre.w"]
    ops = trace_ops(model, torch.randn(2, 4), iterations=1)
    assert [(op.inputs, op.params) for op in ops] == [((), (2,)), ((0,), ()), ((1,), (0, 1))]
    assert all(op.time_s >= 0 for op in ops)


def test_graph_priority_receives_in_use_order_not_registration_order():
    model = ScaleThenLinear()
    assert model_priorities(model, "graph", torch.randn(2, 4), iterations=1) == [1, 1, 0]
    assert model_priorities(model, "fifo") == [0, 0, 0]


def test_untraceable_model_falls_back_to_module_order():
    model = Untraceable()
    ops = module_order_ops(model)
    assert [op.name for op in ops] == ["lin", "pre"]
    assert model_priorities(model, "graph", torch.randn(2, 4), iterations=1) == [0, 0, 1]


def test_layer_priority_uses_blocks():
    from cadence.models.blocks import named_blocks

    model = named_blocks(("a", nn.Linear(2, 2)), ("b", nn.ReLU()), ("c", nn.Linear(2, 2)))
    assert model_priorities(model, "layer") == [0, 0, 1, 1]
    assert [i.block for i in param_infos(model)[1]] == [0, 0, 2, 2]
