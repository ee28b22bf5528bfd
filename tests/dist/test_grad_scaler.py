"""`torch.amp.GradScaler` with fp16 autocast under every strategy, against torch.

GradScaler("cpu") with `torch.autocast("cpu", dtype=torch.float16)` runs the whole scaler path
on CPU: scaled backward, unscale_ (explicit, before a clip, or inside step), the inf/NaN check,
skipped steps and the scale's back-off. One rank's batch overflows at one step: under DDP every
rank's reduced gradient holds the inf, so every rank skips that step; cadence-dp and ZeRO must
skip it on every rank too and end with DDP's parameters, scale history and optimizer step count.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from cadence.errors import UserError
from cadence.testing import run_ranks

BATCH, STEPS, INF_STEP, MICRO = 8, 5, 2, 2


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)
    )


def _data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 8, generator=g), torch.randint(0, 3, (BATCH,), generator=g)


def _adamw(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2, eps=1e-6)


def _step_count(opt: torch.optim.Optimizer) -> int | None:
    """Adam's step count (None on a ZeRO rank whose pieces hold no parameter)."""
    return max((int(s["step"]) for s in opt.state.values() if "step" in s), default=None)


def _train(
    rank: int, world: int, strategy: str, explicit_unscale: bool, device: str = "cpu"
) -> dict[str, Any]:
    import cadence

    if device == "cuda":  # the ranks share the GPUs over gloo
        torch.cuda.set_device(rank % torch.cuda.device_count())
        torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(device, torch.cuda.current_device()) if device == "cuda" else None
    model = _model().to(dev)
    if strategy.startswith("ddp"):
        wrapped: nn.Module = nn.parallel.DistributedDataParallel(model)
        if strategy == "ddp-fp16":
            cast(nn.parallel.DistributedDataParallel, wrapped).register_comm_hook(
                None, default_hooks.fp16_compress_hook
            )
        opt: Any = _adamw(model.parameters())
    elif strategy == "dp":
        wrapped, opt = cadence.data_parallel(
            model, _adamw(model.parameters()), cadence.DPConfig(threshold_bytes=64)
        )
    else:
        stage, _, compression = strategy.removeprefix("zero").partition("-")
        wrapped, opt = cadence.zero(
            model, stage=int(stage), optimizer=_adamw, compression=compression or "none"
        )
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10)
    per = BATCH // world
    scales = []
    for step in range(STEPS):
        x, y = _data(step)
        x, y = x[rank * per : (rank + 1) * per].to(dev), y[rank * per : (rank + 1) * per].to(dev)
        if step == INF_STEP and rank == world - 1:
            x = x * float("inf")  # this rank alone overflows
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = F.cross_entropy(wrapped(x), y)
        scaler.scale(loss).backward()
        if explicit_unscale:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(wrapped.parameters(), 0.5)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    if hasattr(opt, "flush"):
        opt.flush()
    inner = opt.engine.inner if strategy.startswith("zero") else opt
    return {
        "params": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "scales": scales,
        "steps": _step_count(inner) if strategy != "dp" else None,
    }


def _check(got: list[dict[str, Any]], ref: list[dict[str, Any]], **tol: Any) -> None:
    for mine in got:
        assert mine["scales"] == ref[0]["scales"]
        if mine["steps"] is not None:
            assert mine["steps"] == ref[0]["steps"]
        for name, value in ref[0]["params"].items():
            torch.testing.assert_close(
                mine["params"][name], value, **(tol or {"rtol": 1e-5, "atol": 1e-6})
            )


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("explicit_unscale", [True, False])
@pytest.mark.parametrize("strategy", ["dp", "zero1", "zero2", "zero3"])
def test_grad_scaler_equals_ddp(strategy, explicit_unscale, world):
    ref = run_ranks(_train, world, "ddp", explicit_unscale, timeout=120)
    assert ref[0]["steps"] < STEPS  # the overflow step (at least) was skipped
    assert len(set(ref[0]["scales"])) > 1  # and the scale backed off
    got = run_ranks(_train, world, strategy, explicit_unscale, timeout=120)
    _check(got, ref)
    assert strategy == "dp" or any(mine["steps"] is not None for mine in got)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("stage", [1, 2])
def test_grad_scaler_with_fp16_compression_equals_ddp_fp16_hook(stage, world):
    ref = run_ranks(_train, world, "ddp-fp16", True, timeout=120)
    # fp16 sums round in another order than DDP's buckets: Adam may move a near-zero entry
    # by fp16's precision each step (as in test_zero_parity); the skipped steps are the same.
    got = run_ranks(_train, world, f"zero{stage}-fp16", True, timeout=120)
    _check(got, ref, rtol=0.0, atol=3e-3 * STEPS)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("strategy", ["dp", "zero2", "zero3"])
def test_grad_scaler_equals_ddp_on_cuda(strategy):
    ref = run_ranks(_train, 2, "ddp", True, "cuda", timeout=240)
    _check(run_ranks(_train, 2, strategy, True, "cuda", timeout=240), ref)


def _onebit(rank: int, world: int) -> str:
    import cadence

    model, opt = cadence.zero(_model(), stage=2, compression="onebit", lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    x, y = _data(0)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    try:
        scaler.step(opt)
    except UserError as exc:
        return str(exc)
    return "accepted"


def test_onebit_refuses_grad_scaler():
    for message in run_ranks(_onebit, 2, timeout=120):
        assert "GradScaler is not supported with onebit" in message
        assert "\n" not in message


def _pipeline_steps(
    train: Any, opt: torch.optim.Optimizer, clip: Any, scaler: torch.amp.GradScaler
) -> tuple[list[float], list[float]]:
    """(losses, scales) of the scaler's loop; step INF_STEP's batch overflows."""
    from tests.dist.pipeline_helpers import batches

    losses, scales = [], []
    for step, (x, y) in enumerate(batches("mlp", STEPS)):
        if step == INF_STEP:
            x = x * float("inf")
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = train(x, y)
        scaler.unscale_(opt)
        clip()
        scaler.step(opt)
        scaler.update()
        losses.append(float(loss))
        scales.append(scaler.get_scale())
    return losses, scales


def _pipeline_reference(
    replicas: int, backend: str
) -> tuple[list[float], list[float], dict[str, torch.Tensor]]:
    """One process accumulating the pipeline's micro-batches as its runtime does: cadence's
    divides each micro-batch loss by M before backward, torch's divides the gradients after
    (so fp16 overflows at an M times lower scale there)."""
    from cadence.models import loss_fn
    from tests.dist.pipeline_helpers import build

    net = build("mlp")
    opt = _adamw(net.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)

    def train(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # fp16 products round per micro-batch; the replicas' gradients are averaged.
        total = torch.zeros(())
        chunks = MICRO * replicas
        before = MICRO if backend == "cadence" else 1
        for xm, ym in zip(x.chunk(chunks), y.chunk(chunks), strict=True):
            loss = loss_fn(net(xm), ym)
            scaler.scale(loss / before).backward()
            total += loss.detach().float() / chunks
        for p in net.parameters():
            if p.grad is not None:
                p.grad /= replicas * MICRO // before
        return total

    def clip() -> None:
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)

    losses, scales = _pipeline_steps(train, opt, clip, scaler)
    return losses, scales, net.state_dict()


def _pipeline(
    rank: int, world: int, replicas: int
) -> tuple[list[float], list[float], dict[str, torch.Tensor], str]:
    import cadence
    from cadence.models import loss_fn
    from tests.dist.pipeline_helpers import build

    pipe = cadence.pipeline_parallel(build("mlp"), microbatches=MICRO, data_parallel=replicas)
    opt = _adamw(pipe.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)
    losses, scales = _pipeline_steps(
        lambda x, y: pipe.train_step(x, y, loss_fn, scaler=scaler),
        opt, lambda: pipe.clip_grad_norm_(0.5), scaler,
    )  # fmt: skip
    state = {k: v.detach().clone() for k, v in pipe.state_dict().items()}
    return losses, scales, state, pipe.executor.backend


@pytest.mark.parametrize(("world", "replicas"), [(2, 1), (4, 1), (4, 2)])
def test_pipeline_grad_scaler_equals_one_process(world, replicas):
    got = run_ranks(_pipeline, world, replicas, timeout=120)
    losses, scales, state = _pipeline_reference(replicas, got[0][3])
    assert len(set(scales)) > 1  # steps were skipped and the scale backed off
    for got_losses, got_scales, got_state, _ in got:
        assert got_scales == scales
        torch.testing.assert_close(got_losses, losses, equal_nan=True)
        for name, value in got_state.items():
            torch.testing.assert_close(value, state[name], rtol=1e-5, atol=1e-6)


def _ps(rank: int, world: int, explicit_unscale: bool) -> str:
    import cadence
    from cadence.ps import PSConfig

    model = _model()
    model, opt = cadence.parameter_server(model, _adamw(model.parameters()), PSConfig(servers=1))
    scaler = torch.amp.GradScaler("cpu")
    x, y = _data(0)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    try:
        scaler.unscale_(opt) if explicit_unscale else scaler.step(opt)
        message = "accepted"
    except UserError as exc:
        message = str(exc)
    opt.step()  # the refused call changed nothing: the step completes, the servers stop
    opt.close()
    return message


@pytest.mark.parametrize("explicit_unscale", [True, False])
def test_parameter_server_refuses_grad_scaler(explicit_unscale):
    for message in run_ranks(_ps, 2, explicit_unscale, timeout=120):
        assert "GradScaler is not supported by parameter servers" in message
        assert "bf16 autocast" in message and "\n" not in message


def _pipeline_without_scaler_argument(rank: int, world: int) -> str:
    import cadence
    from cadence.models import loss_fn
    from tests.dist.pipeline_helpers import batches, build

    pipe = cadence.pipeline_parallel(build("mlp"), microbatches=MICRO)
    opt = _adamw(pipe.parameters())
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(()))  # as if the user had scaled a loss on this rank
    x, y = batches("mlp", 1)[0]
    pipe.train_step(x, y, loss_fn)
    try:
        scaler.step(opt)
    except UserError as exc:
        return str(exc)
    return "accepted"


def test_pipeline_grad_scaler_needs_train_step_argument():
    for message in run_ranks(_pipeline_without_scaler_argument, 2, timeout=120):
        assert "scaler=scaler" in message and "\n" not in message
