"""`--strategy ddp --ddp-comm-hook fp16|powersgd` (torch's hooks, the real peers of
cadence-dp's compression) through the training loop at 2 ranks, and `--eval-every-steps`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from cadence.comm import init_from_env
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.testing import run_ranks
from cadence.train.loop import run_training

STEPS = 6


def _config(**flags: Any) -> TrainConfig:
    return TrainConfig.from_flat(
        model="mlp", workers=2, batch_size=32, steps=STEPS, optimizer="sgd", lr=0.05,
        eval_every_epoch=False, **flags,
    )  # fmt: skip


def _train_rank(rank: int, world: int, out: str, flags: dict[str, Any]) -> dict[str, Any]:
    run_dir = Path(out) if rank == 0 else None
    return run_training(_config(**flags), init_from_env(), run_dir)


def _run(tmp_path: Path, name: str, **flags: Any) -> list[dict[str, Any]]:
    """Each rank's metrics, and rank 0's trained parameters (its epoch-end checkpoint)."""
    out = tmp_path / name
    out.mkdir()
    ranks = run_ranks(_train_rank, 2, str(out), flags, timeout=180)
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    return [{"metrics": m, "params": saved["model"]} for m in ranks]


def test_ddp_fp16_hook_equals_cadence_dp_fp16_and_counts_its_bytes(tmp_path: Path) -> None:
    hook = _run(tmp_path, "hook", strategy="ddp", ddp_comm_hook="fp16")
    ours = _run(tmp_path, "ours", strategy="cadence-dp", dp_compression="fp16")
    plain = _run(tmp_path, "plain", strategy="ddp")
    for name, p in hook[0]["params"].items():  # at 2 ranks a sum has one order: the same
        torch.testing.assert_close(p, ours[0]["params"][name], rtol=0.0, atol=1e-6)
    differs = any(
        not torch.allclose(p, plain[0]["params"][n], rtol=0.0, atol=1e-7)
        for n, p in hook[0]["params"].items()
    )
    assert differs  # the hook did round the gradients
    grad_bytes = hook[0]["metrics"]["gradient_bytes"]
    assert hook[0]["metrics"]["wire_bytes_total"] == STEPS * grad_bytes // 2
    assert "wire_bytes_total" not in plain[0]["metrics"]
    assert "iface_tx_bytes" not in plain[0]["metrics"]  # the loopback's count is everyone's


def test_ddp_powersgd_hook_trains_and_sends_fewer_bytes(tmp_path: Path) -> None:
    ranks = _run(tmp_path, "psgd", strategy="ddp", ddp_comm_hook="powersgd",
                 powersgd_start_step=2, powersgd_rank=1)  # fmt: skip
    m = ranks[0]["metrics"]
    full = m["gradient_bytes"]
    # Two uncompressed steps, then each step's factors: fewer bytes than the gradients.
    assert 2 * full < m["wire_bytes_total"] < STEPS * full
    assert all(math.isfinite(x) for x in m["step_loss"])
    assert all(torch.isfinite(p).all() for p in ranks[0]["params"].values())


def test_eval_every_steps_records_points_without_changing_training(tmp_path: Path) -> None:
    evaluated = _run(tmp_path, "evals", strategy="ddp", eval_every_steps=2)
    quiet = _run(tmp_path, "quiet", strategy="ddp")
    m = evaluated[0]["metrics"]
    assert [e["step"] for e in m["evals"]] == [2, 4, 6]
    seconds = [e["seconds"] for e in m["evals"]]
    assert seconds == sorted(seconds)
    assert seconds[-1] == pytest.approx(sum(m["iteration_times_s"]) + m["sync_seconds"])
    assert m["evals"][-1]["test_loss"] == pytest.approx(m["final_test_loss"])
    assert all(0.0 <= e["test_accuracy"] <= 1.0 for e in m["evals"])
    assert m["step_loss"] == quiet[0]["metrics"]["step_loss"]  # evaluation changes nothing
    assert "evals" not in quiet[0]["metrics"]



def test_local_sgd_counts_the_bytes_of_its_syncs(tmp_path: Path) -> None:
    ranks = _run(tmp_path, "lsgd", strategy="local-sgd", sync_every=2)
    m = ranks[0]["metrics"]
    # Syncs after steps 2, 4 and 6 (the run's end finds every fragment synced): the model
    # in fp32 each time (the mlp has no buffers).
    assert m["wire_bytes_total"] == 3 * m["gradient_bytes"]


def _ddp_buckets(rank: int, world_size: int) -> list[tuple[bool, int]]:
    from cadence.comm.process_group import DistContext
    from cadence.train.strategies import get_strategy

    out: list[tuple[bool, int]] = []
    for hook, bucket_mb in (("none", None), ("none", 4.0), ("powersgd", None), ("powersgd", 0.5)):
        config = TrainConfig.from_flat(
            model="mlp", strategy="ddp", bucket_mb=bucket_mb, ddp_comm_hook=hook
        )
        model = torch.nn.Linear(4, 2)
        ctx = DistContext(rank, world_size, rank, "gloo", torch.device("cpu"))
        wrap = get_strategy("ddp").wrap_for(config)
        try:
            ddp, _ = wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), ctx)
        except UserError as exc:
            assert "needs one bucket" in str(exc) and "at least 1.0" in str(exc)
            out.append((False, -1))
            continue
        assert isinstance(ddp, torch.nn.parallel.DistributedDataParallel)
        out.append((ddp.bucket_bytes_cap_default, ddp.bucket_bytes_cap))
    return out


def test_ddp_is_built_with_torchs_buckets_unless_given_a_size() -> None:
    # Without --bucket-mb, torch's default: 25 MiB buckets after a 1 MiB first one (what the
    # simulator assumes then); --bucket-mb caps every bucket, the first too.
    from cadence.sim.options import ddp_bucket_caps

    # torch's PowerSGD hook on gloo gets one bucket (the model's gradients + 1 MiB): with
    # several, its callbacks can issue the buckets' collectives in different orders per rank.
    one = int((40 / 2**20 + 1.0) * 2**20)
    for default, given, powersgd, too_small in run_ranks(_ddp_buckets, 2):
        assert default == (True, 25 * 2**20) and given == (False, 4 * 2**20)
        assert powersgd == (False, one) and too_small == (False, -1)
    assert ddp_bucket_caps(None) == (25 * 2**20, 2**20)
    assert ddp_bucket_caps(4.0) == (4 * 2**20, None)
