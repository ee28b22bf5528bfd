"""Parameter-server training on real processes: BSP equals single-process training on the full
batch (SGD with momentum and Adam; 1 and 2 servers; 2 and 4 workers; every priority order), and
ASP / SSP / backup workers keep their promises (staleness bound, late gradients dropped).

Ranks are expensive to start on a busy machine, so each `run_ranks` call runs several jobs in a
row (each with its own fresh servers)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cadence.models import loss_fn
from cadence.models.blocks import named_blocks
from cadence.ps import PSConfig, PSTrainer
from cadence.testing import run_ranks

BATCH = 16


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return named_blocks(
        ("fc1", nn.Sequential(nn.Linear(8, 24), nn.ReLU())),
        ("fc2", nn.Sequential(nn.Linear(24, 16), nn.Tanh())),
        ("head", nn.Linear(16, 4)),
    )


def make_optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)
    return torch.optim.Adam(params, lr=0.01)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 8, generator=gen), torch.randint(0, 4, (BATCH,), generator=gen)


def reference(optimizer: str, steps: int) -> list[torch.Tensor]:
    """Single-process training on the full batch."""
    model = make_model()
    opt = make_optimizer(optimizer, model.parameters())
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def ps_job(
    rank: int, world: int, optimizer: str, steps: int, settings: dict[str, Any]
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Train `steps` steps on this rank's share of each batch; return parameters and stats."""
    model = make_model()
    opt = make_optimizer(optimizer, model.parameters())
    config = PSConfig(workers=world, **settings)
    trainer = PSTrainer(model, opt, config, rank, example=batch(0)[0])
    share = BATCH // world
    for step in range(steps):
        x, y = batch(step)
        part = slice(rank * share, (rank + 1) * share)
        trainer.train_step(x[part], y[part])
    trainer.sync()
    params = [p.detach().clone() for p in model.parameters()]
    stats = trainer.close()
    return params, stats


def ps_jobs(rank: int, world: int, jobs: list[tuple[str, int, dict[str, Any]]]) -> list[Any]:
    return [ps_job(rank, world, *job) for job in jobs]


STEPS = 4
TOL: dict[str, Any] = {"rtol": 1e-4, "atol": 1e-5}
PARITY_2 = [
    ("sgd", STEPS, {"servers": 1, "priority": "graph"}),
    ("adam", STEPS, {"servers": 2, "priority": "fifo"}),
    ("sgd", STEPS, {"servers": 2, "priority": "layer", "classes": 1, "window_bytes": 64}),
    ("adam", STEPS, {"servers": 1, "consistency": "backup:2"}),  # K = W: synchronous
]
DELAY = "1:0.15"
MODES_2 = [
    ("sgd", 6, {"servers": 1, "consistency": "ssp:1", "straggler": DELAY}),
    ("sgd", 6, {"servers": 2, "consistency": "backup:1", "straggler": DELAY}),
    ("sgd", 3, {"servers": 1, "consistency": "asp"}),
]


def test_two_workers_bsp_parity_and_consistency_modes():
    results = run_ranks(ps_jobs, 2, PARITY_2 + MODES_2, timeout=150)
    for j, (optimizer, steps, settings) in enumerate(PARITY_2):
        expected = reference(optimizer, steps)
        for rank in range(2):
            params, stats = results[rank][j]
            for got, want in zip(params, expected, strict=True):
                torch.testing.assert_close(got, want, **TOL, msg=f"{settings} rank {rank}")
            assert stats["rejected"] == 0 and stats["dropped"] == 0
            assert stats["unauthenticated"] == 0  # every message of the job's own verified
            assert stats["version"] == steps
    ssp, backup, asp = (len(PARITY_2) + i for i in range(3))
    for rank in range(2):  # the staleness counter never exceeds s = 1
        assert results[rank][ssp][1]["max_staleness"] <= 1
    # Worker 1 sleeps 0.15 s a step: worker 0 alone makes every step, worker 1 comes late.
    counters = ("applied", "dropped", "rejected", "received")
    assert [results[0][backup][1][k] for k in counters] == [
        results[1][backup][1][k] for k in counters
    ]  # the servers' final figures
    assert results[0][backup][1]["dropped"] > 0
    assert results[0][backup][1]["version"] >= 6
    for rank in range(2):  # asp: every gradient applied (3 steps x 2 workers per slice)
        params, stats = results[rank][asp]
        assert stats["applied"] == 3 * 2 * 6 and stats["rejected"] == 0
        assert all(torch.isfinite(p).all() for p in params)


def test_four_workers_bsp_parity():
    jobs = [("adam", 3, {"servers": 2, "priority": "graph"})]
    results = run_ranks(ps_jobs, 4, jobs, timeout=150)
    expected = reference("adam", 3)
    for rank in range(4):
        for got, want in zip(results[rank][0][0], expected, strict=True):
            torch.testing.assert_close(got, want, **TOL)
