"""Local SGD and DiLoCo at world size 2 (gloo): parity with DDP where the arithmetic is the
same, DiLoCo's outer lr 1 / no momentum equals local SGD, identical replicas after a sync,
compressed syncs near fp32, streaming fragments synced at their own steps, and the ordinary
loop (accumulation under no_sync, clipping, an LR scheduler, BatchNorm) through it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import cadence
from cadence.comm import init_from_env
from cadence.localsgd.runtime import OuterLoop
from cadence.testing import run_ranks
from tests.cli_helpers import run_cadence

WORLD = 2


def _mlp(seed: int, batchnorm: bool = False) -> nn.Module:
    torch.manual_seed(seed + 17 * torch.distributed.get_rank())  # ranks differ until broadcast
    middle: list[nn.Module] = [nn.BatchNorm1d(16)] if batchnorm else []
    return nn.Sequential(nn.Linear(6, 16), *middle, nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3))  # fmt: skip


def _batches(
    rank: int, steps: int, per_rank: int = 8, world: int = WORLD
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(5)
    out = []
    for _ in range(steps):
        x = torch.randn(world * per_rank, 6, generator=gen)
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        out.append((x[mine], y[mine]))
    return out


def _train(model: nn.Module, optimizer: Any, batches: list[Any]) -> list[float]:
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _vector(model: nn.Module) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).clone() for t in model.state_dict().values()
                      if t.is_floating_point()])  # fmt: skip


def _parity_rank(rank: int, world: int) -> dict[str, torch.Tensor]:
    init_from_env()
    batches = _batches(rank, 6, world=world)
    ddp_model = DistributedDataParallel(_mlp(0))
    _train(ddp_model, torch.optim.SGD(ddp_model.parameters(), lr=0.2), batches)
    model = _mlp(0)
    model, opt = cadence.local_sgd(model, torch.optim.SGD(model.parameters(), lr=0.2), sync_every=1)
    _train(model, opt, batches)
    # DiLoCo with outer lr 1 and no momentum is local SGD, here with Adam and H=3.
    a = _mlp(1)
    a, opt_a = cadence.local_sgd(a, torch.optim.Adam(a.parameters(), lr=0.01), sync_every=3)
    _train(a, opt_a, batches)
    b = _mlp(1)
    b, opt_b = cadence.diloco(b, torch.optim.Adam(b.parameters(), lr=0.01), sync_every=3,
                              outer_lr=1.0, outer_momentum=0.0)  # fmt: skip
    _train(b, opt_b, batches)
    return {"ddp": _vector(ddp_model.module), "h1": _vector(model), "local": _vector(a),
            "diloco": _vector(b), "initial": _vector(_mlp(1))}  # fmt: skip


@pytest.mark.parametrize("world", [2, 4])
def test_h1_equals_ddp_and_diloco_with_lr1_no_momentum_equals_local_sgd(world):
    results = run_ranks(_parity_rank, world)
    for r in results:
        torch.testing.assert_close(r["h1"], r["ddp"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(r["diloco"], r["local"], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(results[0]["local"], results[0]["initial"])  # it trained
    for key in ("h1", "local", "diloco"):  # H=1 and H=3 end on a sync: identical replicas
        for r in results[1:]:
            assert torch.equal(r[key], results[0][key]), key


def _compressed_rank(rank: int, world: int) -> dict[str, Any]:
    init_from_env()
    batches = _batches(rank, 8)
    out: dict[str, Any] = {}
    for dtype in ("fp32", "bf16", "int8"):
        model = _mlp(2)
        model, opt = cadence.diloco(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                    sync_every=8, outer_dtype=dtype)  # fmt: skip
        _train(model, opt, batches)
        out[dtype] = _vector(model)
    out["initial"] = _vector_after_broadcast()
    return out


def _vector_after_broadcast() -> torch.Tensor:
    model = _mlp(2)
    cadence.local_sgd(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return _vector(model)


def test_bf16_and_int8_outer_syncs_stay_near_fp32():
    results = run_ranks(_compressed_rank, WORLD)
    for dtype in ("fp32", "bf16", "int8"):
        assert torch.equal(results[0][dtype], results[1][dtype]), dtype  # same on every rank
    r = results[0]
    moved = (r["fp32"] - r["initial"]).norm()
    assert moved > 0
    # One sync. bf16 rounds each value by at most 2^-9 of itself: within 0.5% of the step.
    # int8 rounds by up to half a step of its chunk's absmax / 127, about absmax / 440 on
    # average, which is about 1% of the pseudo-gradient's norm: within 2%.
    for dtype, tolerance in (("bf16", 0.005), ("int8", 0.02)):
        error = (r[dtype] - r["fp32"]).norm()
        assert 0 < error < tolerance * moved, (dtype, error.item(), moved.item())


def _streaming_rank(rank: int, world: int) -> dict[str, Any]:
    init_from_env()
    starts: list[tuple[int, int]] = []
    original = OuterLoop._start

    def recording(self: OuterLoop, index: int, blocking: bool = False) -> Any:
        starts.append((self.step, index))
        return original(self, index, blocking)

    OuterLoop._start = recording  # type: ignore[method-assign]
    model = _mlp(3)
    model, opt = cadence.diloco(model, torch.optim.AdamW(model.parameters(), lr=0.01),
                                sync_every=4, fragments=2, overlap_steps=1)  # fmt: skip
    losses = _train(model, opt, _batches(rank, 24) * 2)
    opt.sync()
    return {"starts": starts, "losses": losses, "final": _vector(model),
            "fragments": [len(f.params) for f in opt.outer.fragments]}  # fmt: skip


def test_streaming_syncs_each_fragment_at_its_steps_and_trains():
    results = run_ranks(_streaming_rank, WORLD)
    r = results[0]
    assert r["fragments"] == [2, 4]  # by module order: 112 and 323 values
    expected = [(t, 1 if t % 4 == 2 else 0) for t in range(2, 49, 2)]
    # sync() then waits for fragment 0's (no inner step since it was sent: its result is the
    # replicas' common theta_outer) and syncs fragment 1 at once.
    assert r["starts"] == [*expected, (48, 1)]
    assert results[1]["starts"] == r["starts"]
    assert torch.equal(results[0]["final"], results[1]["final"])
    first, last = sum(r["losses"][:6]) / 6, sum(r["losses"][-6:]) / 6
    assert last < 0.8 * first


def _loop_rank(rank: int, world: int) -> dict[str, Any]:
    init_from_env()
    model = _mlp(4, batchnorm=True)
    inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = cadence.local_sgd(model, inner, sync_every=3)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for x, y in _batches(rank, 7, per_rank=16):
        opt.zero_grad()
        for i, (xi, yi) in enumerate(zip(x.chunk(2), y.chunk(2), strict=True)):
            with model.no_sync() if i == 0 else _nothing():
                (F.cross_entropy(model(xi), yi) / 2).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        scheduler.step()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt.sync()
    return {"before": before, "after": model.state_dict(), "lr": inner.param_groups[0]["lr"]}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


def test_accumulation_clipping_scheduler_and_batchnorm_buffers():
    results = run_ranks(_loop_rank, WORLD)
    assert results[0]["lr"] == 0.1 * 0.5**3  # the scheduler reached the inner optimizer
    after0, after1 = results[0]["after"], results[1]["after"]
    for key in after0:
        assert torch.equal(after0[key], after1[key]), key
    mean = (results[0]["before"]["1.running_mean"] + results[1]["before"]["1.running_mean"]) / 2
    torch.testing.assert_close(after0["1.running_mean"], mean)  # buffers averaged at a sync
    assert not torch.equal(results[0]["before"]["1.running_mean"], mean)  # they had drifted


def test_cli_trains_streaming_int8_diloco_with_accumulation_and_saves_the_outer_state(tmp_path):
    proc = run_cadence(
        "train", "--model", "mlp", "--strategy", "diloco", "--steps", "20", "--sync-every", "4",
        "--fragments", "2", "--outer-dtype", "int8", "--grad-accum", "2", "--out", "out",
        "--name", "r", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "out" / "r"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 20 and metrics["config"]["strategy"] == "diloco"
    assert metrics["step_loss"][-1] < metrics["step_loss"][0]
    assert 0.5 < metrics["final_test_accuracy"] <= 1.0
    checkpoint = torch.load(run_dir / "checkpoint.pt")
    outer = checkpoint["optimizer"]["localsgd"]
    assert outer["step"] == 0  # saved after the loop's full sync
    assert len(outer["outer"]) == 2 and outer["outer_optimizer"]["state"]
    # The saved weights are theta_outer: the model every rank holds after that sync.
    saved = torch.cat([t.reshape(-1) for t in checkpoint["model"].values()])
    torch.testing.assert_close(saved, torch.cat(outer["outer"]))


def _scaler_rank(rank: int, world: int) -> dict[str, Any]:
    init_from_env()
    batches = _batches(rank, 6)
    out: dict[str, Any] = {}
    for case in ("plain", "implicit", "explicit", "overflow"):
        model = _mlp(6)
        model, opt = cadence.local_sgd(model, torch.optim.AdamW(model.parameters(), lr=0.01),
                                       sync_every=2)  # fmt: skip
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        for step, (x, y) in enumerate(batches):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            if case == "overflow" and rank == 0 and step == 2:
                loss = loss * float("inf")  # this rank alone skips this step
            if case == "plain":
                loss.backward()
                opt.step()
                continue
            scaler.scale(loss).backward()
            if case == "explicit":
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 100.0)
            scaler.step(opt)
            scaler.update()
        opt.sync()
        steps = max(int(s["step"]) for s in opt.state.values())
        out[case] = (_vector(model), steps, opt.outer.syncs)
    return out


def test_grad_scaler_steps_skipped_on_one_rank_keep_the_sync_schedule():
    results = run_ranks(_scaler_rank, WORLD)
    for r in results:
        for case in ("implicit", "explicit"):  # a power-of-two scale: unscaling is exact
            torch.testing.assert_close(r[case][0], r["plain"][0], rtol=1e-6, atol=1e-7)
    assert results[0]["overflow"][1] == 5 and results[1]["overflow"][1] == 6  # rank 0 skipped
    assert results[0]["overflow"][2] == results[1]["overflow"][2] == 3  # every sync ran
    assert torch.equal(results[0]["overflow"][0], results[1]["overflow"][0])
    assert not torch.equal(results[0]["overflow"][0], results[0]["plain"][0])


def _resume_rank(rank: int, world: int) -> dict[str, Any]:
    import io

    init_from_env()
    batches = _batches(rank, 11)

    def fresh() -> tuple[nn.Module, Any]:
        model = _mlp(7)
        return cadence.diloco(model, torch.optim.AdamW(model.parameters(), lr=0.01),
                              sync_every=4, fragments=2, overlap_steps=1)  # fmt: skip

    model, opt = fresh()
    _train(model, opt, batches)
    whole = _vector(model)
    model, opt = fresh()
    _train(model, opt, batches[:6])
    in_flight = len(opt.outer.in_flight)  # fragment 1's sync, sent after step 6
    stream = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, stream)
    stream.seek(0)
    saved = torch.load(stream, weights_only=True)
    model, opt = fresh()
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    _train(model, opt, batches[6:])
    return {"whole": whole, "resumed": _vector(model), "in_flight": in_flight}


def test_state_dict_resumes_exactly_with_a_sync_in_flight():
    for r in run_ranks(_resume_rank, WORLD):
        assert r["in_flight"] == 1
        assert torch.equal(r["resumed"], r["whole"])
