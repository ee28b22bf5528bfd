"""Backward reordering at K: same gradients as autograd, weight gradients in K..1, L..K+1."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cadence.dp.layers import model_layout
from cadence.dp.plan import build_plan, expected_ready_order, weight_grad_order
from cadence.dp.reorder import BackwardReorder, deferrable


def test_weight_grad_order():
    assert weight_grad_order(5, 2) == [1, 0, 4, 3, 2]
    assert weight_grad_order(5, 5) == [4, 3, 2, 1, 0]  # K = L: ordinary order
    assert weight_grad_order(5, 1) == [0, 4, 3, 2, 1]
    with pytest.raises(ValueError, match="1..5"):
        weight_grad_order(5, 0)
    with pytest.raises(ValueError, match="1..5"):
        weight_grad_order(5, 6)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False, groups=2)
        self.fc1 = nn.Linear(4 * 4 * 4, 8)
        self.fc2 = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv1(x)))
        x = F.relu(self.conv2(x)).flatten(1)
        return self.fc2(torch.tanh(self.fc1(x)))


def _grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_reordered_gradients_equal_autograd_and_run_in_reorder_order(k):
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(6, 2, 8, 8), torch.randint(0, 5, (6,))
    expected = _grads(model, x, y)

    layout = model_layout(model)
    chosen = [i for i, m in enumerate(layout.layers) if deferrable(m)]
    assert chosen == [0, 2, 3, 4]  # conv1, conv2, fc1, fc2; not BatchNorm
    announced: list[int] = []
    layer_of = {i: info.layer for i, info in enumerate(layout.infos)}
    reorder = BackwardReorder(
        layout.layers,
        layout.layer_params,
        layout.params,
        chosen,
        k,
        on_grad=announced.append,
        on_activity=lambda: None,
    )
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    # Autograd left the deferred weights without gradients: nothing ran yet.
    assert model.fc2.weight.grad is None and model.conv1.weight.grad is None
    assert model.bn.weight.grad is not None  # BatchNorm is not deferred
    reorder.run()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6)
    layers_in_order = list(dict.fromkeys(layer_of[i] for i in announced))
    assert layers_in_order == [layer for layer in weight_grad_order(5, k) if layer in chosen]

    reorder.close()
    assert "forward" not in vars(model.fc1)  # the layers got their own forward back
    torch.testing.assert_close(_grads(model, x, y)["fc1.weight"], expected["fc1.weight"])


def test_eval_forward_is_untouched_and_a_layer_called_twice_accumulates_both():
    torch.manual_seed(0)
    lin = nn.Linear(3, 3)
    model = nn.Sequential(lin, nn.Tanh(), lin)  # the same layer twice
    x = torch.randn(4, 3)
    model.zero_grad()
    model(x).pow(2).sum().backward()
    assert lin.weight.grad is not None
    expected = lin.weight.grad.clone()
    layout = model_layout(model)
    reorder = BackwardReorder(
        layout.layers, layout.layer_params, layout.params, [0], 1, lambda i: None, lambda: None
    )
    with torch.no_grad():
        torch.testing.assert_close(model(x), nn.Sequential(lin, nn.Tanh(), lin)(x))
    lin.weight.grad = None
    lin.bias.grad = None
    model(x).pow(2).sum().backward()
    reorder.run()
    torch.testing.assert_close(lin.weight.grad, expected)


def test_plan_expects_and_fuses_in_reorder_order():
    torch.manual_seed(0)
    layout = model_layout(Net())
    order = [p.layer for p in expected_ready_order(layout.infos, 2)]
    assert list(dict.fromkeys(order)) == [1, 0, 4, 3, 2]
    plan = build_plan(layout.infos, 1 << 30, 1 << 31, reorder_k=2)
    assert plan.reorder_k == 2
    assert len(plan.chunks) == 1
    # Fused in ready order: layer 1's and layer 0's gradients come first in the chunk.
    first_layers = [layout.infos[s.param].layer for s in plan.chunks[0].segments][:3]
    assert first_layers[0] == 1 and 0 in first_layers
