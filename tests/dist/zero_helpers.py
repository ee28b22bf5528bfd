"""Rank functions shared by the ZeRO tests (module level, so `run_ranks` can pickle them)."""

from __future__ import annotations

from typing import Any

import torch

import cadence
from cadence.models import get_model_spec, loss_fn

BATCH = 32


def make_model(name: str = "mlp") -> torch.nn.Module:
    torch.manual_seed(0)
    return get_model_spec(name).build()


def batch(name: str, step: int, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s global batch, this rank's contiguous slice of it."""
    x, y = get_model_spec(name).synthetic_batch(BATCH, seed=100 + step)
    per = BATCH // world_size
    return x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]


def opt_kwargs(optimizer: str) -> dict[str, Any]:
    if optimizer == "sgd":
        return {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}
    return {"lr": 3e-3, "weight_decay": 1e-4}


def reference(name: str, optimizer: str, steps: int) -> dict[str, torch.Tensor]:
    """Single-process torch training on the full batches."""
    model = make_model(name)
    cls = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer]
    opt = cls(model.parameters(), **opt_kwargs(optimizer))
    for step in range(steps):
        x, y = batch(name, step, 0, 1)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_zero(
    rank: int, world_size: int, name: str, optimizer: str, stage: int, compression: str,
    steps: int, freeze_steps: int = 100,
) -> tuple[dict[str, torch.Tensor], list[float], list[dict[str, int]], dict[str, int]]:
    """(final full state dict, global losses, bytes per step, peak memory) of one ZeRO run."""
    model, opt = cadence.zero(
        make_model(name), stage=stage, optimizer=optimizer, compression=compression,
        freeze_steps=freeze_steps, **opt_kwargs(optimizer),
    )
    losses, sent = [], []
    for step in range(steps):
        x, y = batch(name, step, rank, world_size)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        sent.append(opt.bytes_sent_last_step)
    model.eval()  # stage 3: gathers the full parameters on every rank
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, losses, sent, opt.peak_memory


def parity_runs(rank: int, world_size: int, runs: list[tuple[str, int, str]], steps: int) -> list:
    """Several (optimizer, stage, compression) runs in one process group."""
    return [train_zero(rank, world_size, "mlp", o, s, c, steps)[0] for o, s, c in runs]
