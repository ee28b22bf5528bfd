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


def train_steps(
    model: torch.nn.Module, opt: Any, name: str, steps: int, rank: int, world_size: int
) -> tuple[list[float], list[dict[str, int]]]:
    """(losses, bytes sent per step) of `steps` ordinary training steps of a ZeRO model."""
    losses, sent = [], []
    for step in range(steps):
        x, y = batch(name, step, rank, world_size)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        sent.append(opt.bytes_sent_last_step)
    return losses, sent


def train_zero(
    rank: int,
    world_size: int,
    name: str,
    optimizer: str,
    stage: int,
    compression: str,
    steps: int,
    freeze_steps: int = 100,
    gather_dtype: str = "fp32",
    overlap_gather: bool = False,
) -> tuple[dict[str, torch.Tensor], list[float], list[dict[str, int]], dict[str, int]]:
    """(final full state dict, global losses, bytes per step, peak memory) of one ZeRO run."""
    model, opt = cadence.zero(
        make_model(name),
        stage=stage,
        optimizer=optimizer,
        compression=compression,
        freeze_steps=freeze_steps,
        gather_dtype=gather_dtype,
        overlap_gather=overlap_gather,
        **opt_kwargs(optimizer),
    )
    losses, sent = train_steps(model, opt, name, steps, rank, world_size)
    model.eval()  # stage 3: gathers the full parameters on every rank
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, losses, sent, opt.peak_memory


def parity_runs(rank: int, world_size: int, runs: list[tuple], steps: int) -> list:
    """Several (optimizer, stage, compression[, gather dtype[, overlap gather]]) runs in one
    process group: (final state, bytes sent in the last step) each."""
    out = []
    for optimizer, stage, compression, *extra in runs:
        state, _, sent, _ = train_zero(
            rank,
            world_size,
            "mlp",
            optimizer,
            stage,
            compression,
            steps,
            gather_dtype=extra[0] if extra else "fp32",
            overlap_gather=bool(extra[1:] and extra[1]),
        )
        out.append((state, sent[-1]))
    return out


def digits_run(
    rank: int, world_size: int, stage: int, compression: str, steps: int, freeze_steps: int
) -> tuple[list[float], list[dict[str, int]], float, dict[str, int]]:
    """mlp on digits (global batch 64): (global mean losses, bytes per step, test accuracy,
    sizes of this rank's error buffers)."""
    import torch.distributed as dist

    from cadence.models import load_dataset

    spec = get_model_spec("mlp")
    data = load_dataset("digits", spec, seed=0)
    model, opt = cadence.zero(
        make_model("mlp"),
        stage=stage,
        compression=compression,
        freeze_steps=freeze_steps,
        lr=2e-3,
    )
    per = 64 // world_size
    gen = torch.Generator().manual_seed(0)
    losses, sent = [], []
    for _ in range(steps):
        idx = torch.randperm(len(data.train_x), generator=gen)[:64][rank * per : (rank + 1) * per]
        opt.zero_grad()
        loss = loss_fn(model(data.train_x[idx]), data.train_y[idx])
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world_size)
        sent.append(opt.bytes_sent_last_step)
    model.eval()
    with torch.no_grad():
        acc = (model(data.test_x).argmax(-1) == data.test_y).float().mean().item()
    engine = opt.engine
    errors = {
        "sender": sum(
            st.sender_error.numel() for st in engine.states if st.sender_error is not None
        ),
        "reducer": sum(
            st.reducer_error.numel() for st in engine.states if st.reducer_error is not None
        ),
        "padded": engine.layout.padded,
    }
    return losses, sent, acc, errors


def memory_run(rank: int, world_size: int, stages: list[int]) -> list[dict[str, int]]:
    """Peak bytes per stage after two Adam steps of a 6-hidden-layer mlp (equal blocks)."""
    out = []
    for stage in stages:
        torch.manual_seed(0)
        model = get_model_spec("mlp").build(hidden=(128,) * 6)
        model, opt = cadence.zero(model, stage=stage, lr=1e-3)
        for step in range(2):
            x, y = batch("mlp", step, rank, world_size)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        out.append(
            {
                **opt.peak_memory,
                "padded": opt.engine.layout.padded,
                "largest": max(b.padded for b in opt.engine.layout.buckets),
            }
        )
    return out


def checkpoint_run(
    rank: int, world_size: int, directory: str, stages: list[int], replicated: bool = False
) -> list:
    """Per stage: train 3 steps, save, train 2 more; then a fresh model loads and trains the
    same 2 steps. Returns both final state dicts per stage."""
    return [
        _checkpoint_stage(rank, world_size, f"{directory}{s}", s, replicated) for s in stages
    ]


def _checkpoint_stage(
    rank: int, world_size: int, directory: str, stage: int, replicated: bool
) -> list[dict]:
    results = []
    for resume in (False, True):
        model, opt = cadence.zero(
            make_model("mlp"), stage=stage, compression="onebit", freeze_steps=2, lr=3e-3,
            replicated_update=replicated,
        )  # fmt: skip
        if resume:
            cadence.zero.load(directory, opt)
        for step in range(5):
            if resume and step < 3:
                continue
            x, y = batch("mlp", step, rank, world_size)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            if step == 2 and not resume:
                cadence.zero.save(directory, opt)
        model.eval()
        results.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return results


def digits_pair(rank: int, world_size: int, stage: int, steps: int, freeze_steps: int) -> list:
    """`digits_run` without compression, then with onebit, in one process group."""
    return [digits_run(rank, world_size, stage, c, steps, freeze_steps) for c in ("none", "onebit")]
