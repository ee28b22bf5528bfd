"""Where the first forward reads each parameter: the module whose forward must wait for it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cadence
from cadence.dp.layers import model_layout
from cadence.dp.usemap import UseRecorder
from cadence.errors import UserError


class ReadsChildWeight(nn.Module):
    """Reads `proj.weight` without calling `proj`, as MultiheadAttention does with out_proj."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.proj.weight, self.proj.bias)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.block = ReadsChildWeight()
        self.lstm = nn.LSTM(4, 4, batch_first=True)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied: read first by the embedding
        self.scale = nn.Parameter(torch.ones(4))  # read by the root's own code
        self.never = nn.Linear(2, 2)  # never read

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.block(self.embed(ids))
        x, _ = self.lstm(x)
        return self.head(x * self.scale)


def _uses(model: nn.Module) -> tuple[dict[str, set[str]], set[str]]:
    params = model_layout(model).params
    names = {id(p): n for n, p in model.named_parameters()}
    recorder = UseRecorder(model, params)
    handles = [
        model.register_forward_pre_hook(lambda *_: recorder.start()),
        model.register_forward_hook(lambda *_: recorder.stop()),
    ]
    model(torch.randint(0, 10, (2, 3)))
    for handle in handles:
        handle.remove()
    module_names = {id(m): n for n, m in model.named_modules()}
    uses, at_root = recorder.uses()
    by_module = {module_names[id(m)]: {names[id(params[i])] for i in ix} for m, ix in uses}
    return by_module, {names[id(params[i])] for i in at_root}


def test_each_parameter_is_gated_where_it_is_first_read() -> None:
    by_module, at_root = _uses(Net())
    assert by_module["embed"] == {"embed.weight"}  # also head's weight: already updated there
    assert "head" not in by_module
    assert by_module["block"] == {"block.proj.weight", "block.proj.bias"}  # not block.proj
    assert "block.proj" not in by_module
    assert by_module["lstm"] == {n for n, _ in Net().lstm.named_parameters(prefix="lstm")}
    assert at_root == {"scale", "never.weight", "never.bias"}


def test_recording_leaves_no_hooks_behind() -> None:
    model = Net()
    _uses(model)
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 16)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)))


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int = 4) -> None:
    gen = torch.Generator().manual_seed(3)
    for step in range(steps):
        ids = torch.randint(0, 16, (4, 5), generator=gen)
        optimizer.zero_grad()
        F.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
        optimizer.step()
        if step == 1:
            model.eval()
            with torch.no_grad():
                model(ids)  # an evaluation forward sees every update
            model.train()


@pytest.mark.parametrize("threshold", [2048, 1 << 30])
def test_gated_updates_overlap_the_next_forward_and_equal_plain_training(threshold: int) -> None:
    """MultiheadAttention reads out_proj's weight without calling out_proj: every update must
    still land before that read (else autograd reports a tensor modified in place)."""
    torch.manual_seed(0)
    plain = Encoder()
    wrapped = Encoder()
    wrapped.load_state_dict(plain.state_dict())
    reference = torch.optim.AdamW(plain.parameters(), lr=1e-2, weight_decay=0.1)
    _train(plain, reference)
    model, optimizer = cadence.data_parallel(
        wrapped,
        torch.optim.AdamW(wrapped.parameters(), lr=1e-2, weight_decay=0.1),
        cadence.DPConfig(threshold_bytes=threshold),
    )
    _train(model, optimizer)
    optimizer.flush()
    want = plain.state_dict()
    for name, got in model.state_dict().items():
        torch.testing.assert_close(got, want[name], msg=name)
    model._cadence_dp_engine.close()


def test_refused_at_wrap_time() -> None:
    sparse = nn.Embedding(10, 4, sparse=True)
    with pytest.raises(UserError, match="sparse=False"):
        cadence.data_parallel(sparse, torch.optim.SGD(sparse.parameters(), lr=0.1))
    model, other = nn.Linear(2, 2), nn.Linear(2, 2)
    with pytest.raises(UserError, match="not parameters of the model"):
        cadence.data_parallel(model, torch.optim.SGD([*model.parameters(), other.weight], lr=0.1))


def test_a_closure_and_a_late_param_group_are_refused() -> None:
    model = nn.Linear(2, 2)
    model, optimizer = cadence.data_parallel(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(UserError, match="closure"):
        optimizer.step(lambda: 0.0)
    with pytest.raises(UserError, match="before wrapping"):
        optimizer.add_param_group({"params": [nn.Parameter(torch.ones(1))]})
    model._cadence_dp_engine.close()
