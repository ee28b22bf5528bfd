"""Tensor-parallel gpt_mini equals single-process training: same seed and data, loss step for
step, gradients of every shard equal to the matching slice of the full model's gradients, and
one all-reduce per attention / MLP forward; and so does 2 x 2 hybrid tensor + data parallel."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from cadence.errors import UserError
from cadence.models.blocks import BlockModel
from cadence.models.gpt import build_gpt_mini
from cadence.testing import run_ranks
from cadence.tp import (
    count_collectives,
    gpt_tp_plan,
    hybrid_groups,
    local_slice,
    parallelize_gpt,
    shard_dims,
)

STEPS = 4
LAYERS = 2


def _model(tied: bool) -> BlockModel:
    torch.manual_seed(0)
    return build_gpt_mini(vocab=64, context=16, n_layers=LAYERS, d_model=32, n_heads=4,
                          mlp_ratio=4, tie_weights=tied)  # fmt: skip


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 64, (4, 17), generator=gen) for _ in range(STEPS)]
    return [(x[:, :-1], x[:, 1:]) for x in ids]


def _train(model: torch.nn.Module) -> tuple[list[float], dict[str, torch.Tensor]]:
    """SGD steps over the fixed batches; the losses and the first step's gradients.

    Not Adam: it would scale gradients that are zero in exact arithmetic (attention's key bias)
    but rounding noise in practice up to full-size steps, in either model alike."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    losses, first_grads = [], {}
    for step, (x, y) in enumerate(_batches()):
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        if step == 0:
            first_grads = {
                n: cast(torch.Tensor, p.grad).clone() for n, p in model.named_parameters()
            }
        opt.step()
        losses.append(loss.item())
    return losses, first_grads


def _run_tp(group: dist.ProcessGroup | None, tied: bool) -> dict[str, Any]:
    torch.manual_seed(123 + dist.get_rank())  # must not matter: shards come from the full model
    tp = parallelize_gpt(_model(tied), group)
    with count_collectives() as fwd:
        logits = tp(_batches()[0][0])
    with count_collectives() as bwd:
        logits.sum().backward()
    tp.zero_grad()
    losses, grads = _train(tp)
    return {
        "rank": dist.get_rank(group),
        "size": dist.get_world_size(group),
        "losses": losses,
        "grads": grads,
        "params": {n: p.detach().clone() for n, p in tp.named_parameters()},
        "dims": shard_dims(tp),
        "fwd": dict(fwd),
        "bwd": dict(bwd),
        "calls": fwd.calls + bwd.calls,
    }


def _run_hybrid(
    tp_group: dist.ProcessGroup | None, dp_group: dist.ProcessGroup | None
) -> dict[str, Any]:
    """TP inside DDP: each data-parallel replica (a TP pair) trains on half of every batch."""
    dp_rank = dist.get_rank(dp_group)
    model = DDP(parallelize_gpt(_model(False), tp_group), process_group=dp_group)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    losses = []
    for x, y in _batches():
        half = slice(2 * dp_rank, 2 * dp_rank + 2)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[half]).flatten(0, 1), y[half].flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = {n: p.detach().clone() for n, p in model.module.named_parameters()}
    return {"losses": losses, "params": params, "rank": dist.get_rank(tp_group), "size": 2}


def _tp_rank(rank: int, world_size: int) -> list[dict[str, Any]]:
    # One spawn serves all cases (starting ranks dominates the cost): tensor-parallel size 2
    # on {0, 1} and {2, 3}, untied; size 4 on the whole world, tied head; then 2 x 2 hybrid
    # with data parallelism across {0, 2} and {1, 3}.
    with pytest.raises(UserError, match="size 3 does not divide the world size 4"):
        hybrid_groups(3)  # checked before any group is made, so no rank is left waiting
    tp_group, dp_group = hybrid_groups(2)
    pair, whole = _run_tp(tp_group, tied=False), _run_tp(None, tied=True)
    return [pair, whole, _run_hybrid(tp_group, dp_group)]


def _check(res: dict[str, Any], tied: bool) -> None:
    full = _model(tied)
    ref_losses, ref_grads = _train(full)
    ref_params = dict(full.named_parameters())
    rank, size = res["rank"], res["size"]
    torch.testing.assert_close(res["losses"], ref_losses, rtol=1e-5, atol=1e-6)
    dims = res["dims"]
    assert set(dims) == set(ref_params)  # same parameter names, tied weight listed once
    sharded = [n for n, d in dims.items() if d is not None]
    # embedding, head (unless tied), q/k/v weight+bias, proj weight, mlp 0 weight+bias, mlp 2
    assert len(sharded) == 1 + (0 if tied else 1) + LAYERS * 10
    for name, dim in dims.items():
        want_grad = local_slice(ref_grads[name], dim, rank, size)
        torch.testing.assert_close(res["grads"][name], want_grad, msg=name)
        want = local_slice(ref_params[name].detach(), dim, rank, size)
        torch.testing.assert_close(res["params"][name], want, rtol=1e-5, atol=1e-6, msg=name)
    # Embedding + one per attention and MLP forward; the head's logits are all-gathered.
    assert res["fwd"] == {"all_reduce": 1 + 2 * LAYERS, "all_gather": 1}
    # Backward: one per attention and MLP input and one for the head's input.
    assert res["bwd"] == {"all_reduce": 2 * LAYERS + 1}
    # The plan (data the cost model prices) is exactly what the layers issued, bytes included.
    plan = gpt_tp_plan(_model(tied), batch=4, seq=16, tp_size=size)
    assert res["calls"] == [(c.collective, c.nbytes) for c in plan]


def test_tensor_parallel_gpt_equals_single_process() -> None:
    results = run_ranks(_tp_rank, 4, timeout=150)
    for rank, (pair, whole, _) in enumerate(results):
        assert (pair["rank"], pair["size"], whole["rank"], whole["size"]) == (rank % 2, 2, rank, 4)
        _check(pair, tied=False)
        _check(whole, tied=True)

    # Hybrid: the mean of the two replicas' half-batch losses is the full-batch loss, and every
    # rank's shards equal the single-process model's slices after the same steps.
    full = _model(False)
    ref_losses, _ = _train(full)
    replicas = [results[0][2]["losses"], results[2][2]["losses"]]
    torch.testing.assert_close([sum(pair) / 2 for pair in zip(*replicas, strict=True)],
                               ref_losses, rtol=1e-5, atol=1e-6)  # fmt: skip
    dims = results[0][0]["dims"]
    for rank, (_, _, hybrid) in enumerate(results):
        assert hybrid["rank"] == rank % 2
        for name, param in full.named_parameters():
            want = local_slice(param.detach(), dims[name], rank % 2, 2)
            torch.testing.assert_close(hybrid["params"][name], want, rtol=1e-5, atol=1e-6)
