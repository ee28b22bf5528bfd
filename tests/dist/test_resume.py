"""`cadence train --resume`: a run stopped part-way and resumed from its checkpoint ends with
bitwise the parameters, optimizer state and step losses of a run never stopped (CPU, every
strategy that supports it); a worker killed while the checkpoint is written leaves the previous
one usable; torchrun's restarts resume by themselves; mismatched or missing checkpoints are
refused in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cadence.comm import init_from_env
from cadence.config import TrainConfig
from cadence.inject import INJECT_ENV
from cadence.safe_load import load_checkpoint
from cadence.testing import run_ranks
from cadence.train.loop import run_training
from tests.cli_helpers import SRC, assert_one_line_error, run_cadence

STEPS, EVERY, STOP = 6, 2, 3  # stopped at step 3: resumed from the checkpoint of step 2


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _assert_same_end(
    whole: Path, resumed: Path, steps: int = STEPS, stop: int = STOP, world: int = 2
) -> None:
    """Same final checkpoint (model, optimizer or shards, torch RNG) on every rank, and the
    same step losses; the resumed run's figures say where it resumed."""
    merged: list[dict[Any, Any]] = [{}, {}]  # pipeline: optimizer state over all stages
    for rank in range(world):
        a = load_checkpoint(whole / "checkpoint" / f"rank{rank}.pt")
        b = load_checkpoint(resumed / "checkpoint" / f"rank{rank}.pt")
        # Python/NumPy RNGs are not seeded; the pipeline's cut is balanced on a fresh profile,
        # so which rank holds a parameter's optimizer state may differ.
        skip = {"rng", "metrics"} | ({"ranges", "optimizer"} if "ranges" in a else set())
        for key in a.keys() - skip:
            assert _equal(a[key], b[key]), f"rank {rank}: {key} differs"
        assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])
        if "ranges" in a:
            for into, state in zip(merged, (a, b), strict=True):
                into.update(state["optimizer"]["state"])
    assert _equal(merged[0], merged[1]), "optimizer state differs"
    servers = sorted(p.name for p in (whole / "checkpoint").glob("server*.npz"))
    assert servers == sorted(p.name for p in (resumed / "checkpoint").glob("server*.npz"))
    for name in servers:  # the parameter servers' values and Adam moments
        with np.load(whole / "checkpoint" / name) as a, np.load(resumed / "checkpoint" / name) as b:
            assert sorted(a.files) == sorted(b.files)
            for key in a.files:
                assert np.array_equal(a[key], b[key]), f"{name}: {key} differs"
    m_whole = json.loads((whole / "metrics.json").read_text())
    m_resumed = json.loads((resumed / "metrics.json").read_text())
    assert m_resumed["step_loss"] == m_whole["step_loss"]
    assert len(m_resumed["step_loss"]) == steps
    assert m_resumed["resumed_at_steps"] == [EVERY * (stop // EVERY)]


def _config(strategy: str, out: str, name: str, **keys: Any) -> TrainConfig:
    keys = {"steps": STEPS, **keys}
    return TrainConfig.from_flat(
        model="mlp", strategy=strategy, batch_size=32, checkpoint_every=EVERY, out=out,
        name=name, **keys,
    )  # fmt: skip


def _whole_stopped_resumed(
    rank: int, world: int, out: str, strategy: str, keys: Any, stop: int
) -> None:
    ctx = init_from_env()
    whole, cut = Path(out) / "whole", Path(out) / "cut"
    run_training(_config(strategy, out, "whole", **keys), ctx, whole)
    os.environ[INJECT_ENV] = f"{rank}:{stop}"  # every rank stops at the same step
    with pytest.raises(RuntimeError, match="injected failure"):
        run_training(_config(strategy, out, "cut", **keys), ctx, cut)
    del os.environ[INJECT_ENV]
    run_training(_config(strategy, out, "cut", resume=str(cut), **keys), ctx, cut)


TUNED = 24  # cadence-dp tunes 2 thresholds on the mlp within 21 steps (6 timed trials at most)


@pytest.mark.parametrize(
    ("strategy", "keys"),
    [
        ("ddp", {}),
        ("cadence-dp", {"autotune": "exhaustive", "autotune_trials": 2, "steps": TUNED + 6}),
        ("cadence-dp", {"dp_compression": "powersgd", "powersgd_start_step": 1, "threshold_mb": 1}),
        ("zero", {"zero_stage": 3}),
        ("zero", {"zero_stage": 1, "compression": "onebit", "freeze_steps": 2}),
        ("pipeline", {"optimizer": "sgd", "lr": 0.05}),
        ("ps", {"servers": 2, "ps_priority": "layer"}),
    ],
    ids=[
        "ddp", "cadence-dp-autotuned", "cadence-dp-powersgd", "zero3", "zero1-onebit",
        "pipeline", "ps-bsp",
    ],
)
def test_stopped_and_resumed_equals_uninterrupted(
    tmp_path: Path, strategy: str, keys: dict[str, Any]
) -> None:
    steps = keys.get("steps", STEPS)
    stop = steps - STEPS + STOP  # cadence-dp: after its tuning, which the resumed run keeps
    run_ranks(_whole_stopped_resumed, 2, str(tmp_path), strategy, keys, stop, timeout=240)
    _assert_same_end(tmp_path / "whole", tmp_path / "cut", steps, stop)
    if keys.get("autotune"):
        tuned = json.loads((tmp_path / "cut" / "metrics.json").read_text())["dp_autotune"]
        assert tuned["method"].startswith("resumed")


def _auto_plan_stopped_resumed(rank: int, world: int, out: str) -> None:
    """The run with --schedule auto stops, resumes with the plan it chose, and is compared with
    an uninterrupted run told that plan (planning again could choose another)."""
    ctx = init_from_env()
    cut = Path(out) / "cut"
    os.environ[INJECT_ENV] = f"{rank}:{STOP}"
    with pytest.raises(RuntimeError, match="injected failure"):
        run_training(_config("pipeline", out, "cut", schedule="auto"), ctx, cut)
    del os.environ[INJECT_ENV]
    run_training(_config("pipeline", out, "cut", schedule="auto", resume=str(cut)), ctx, cut)
    plan = json.loads((cut / "checkpoint" / "manifest.json").read_text())["pipeline_plan"]
    told = _config("pipeline", out, "whole", pipeline_backend="cadence", **plan)
    run_training(told, ctx, Path(out) / "whole")


def test_pipeline_auto_resumes_with_the_plan_it_chose(tmp_path: Path) -> None:
    run_ranks(_auto_plan_stopped_resumed, 2, str(tmp_path), timeout=240)
    _assert_same_end(tmp_path / "whole", tmp_path / "cut")
    metrics = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    plan = json.loads((tmp_path / "cut" / "checkpoint" / "manifest.json").read_text())
    assert {k: metrics["pipeline_plan"]["best"][k] for k in plan["pipeline_plan"]} == plan[
        "pipeline_plan"
    ]


def _cli(*args: str, name: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    return run_cadence(
        "train", "--model", "mlp", "--batch-size", "32", "--steps", str(STEPS),
        "--checkpoint-every", str(EVERY), "--out", "out",
        *(("--name", name) if name else ()), *args, cwd=cwd, env=env,
    )  # fmt: skip


def test_killed_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path: Path) -> None:
    assert _cli(name="whole", cwd=tmp_path).returncode == 0
    # Rank 0 dies natively at step 4's checkpoint, every file written, before the swap.
    killed = _cli(name="cut", cwd=tmp_path, env={INJECT_ENV: "0:4:abort:checkpoint"})
    assert killed.returncode != 0 and "SIGABRT" in killed.stderr
    run = tmp_path / "out" / "cut"
    assert (run / ".checkpoint.tmp" / "manifest.json").exists()  # the new one, never swapped in
    manifest = json.loads((run / "checkpoint" / "manifest.json").read_text())
    assert manifest["step"] == 2
    resumed = _cli("--resume", str(run), name="", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert not (run / ".checkpoint.tmp").exists()
    _assert_same_end(tmp_path / "out" / "whole", run)
    # Another job's settings are refused before any worker starts (the unit tests check the
    # other mismatches).
    assert_one_line_error(
        _cli("--resume", str(run), "--strategy", "zero", name="", cwd=tmp_path),
        "written with --strategy ddp, this job has zero",
    )


def test_resume_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert_one_line_error(
        _cli("--resume", "empty", name="", cwd=tmp_path), "--resume empty: no checkpoint there"
    )
    assert_one_line_error(
        _cli("--resume", "empty", "--strategy", "ps", "--consistency", "asp", name="",
             cwd=tmp_path),  # fmt: skip
        "--resume with --strategy ps needs --consistency bsp",
    )


def test_torchrun_restart_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    """Rank 1 fails at step 3; torchrun starts both again, and they resume from step 2 (the
    injected failure strikes the first attempt only)."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--max-restarts", "1", "-m", "cadence", "train", "--model", "mlp", "--batch-size", "32",
        "--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--out", "out", "--name", "cut",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=SRC, OMP_NUM_THREADS="1", **{INJECT_ENV: f"1:{STOP}"})
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,  # a hung run is ended with all its workers
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, output[-3000:]
    assert "resumed at step 2" in output
    metrics = json.loads((tmp_path / "out" / "cut" / "metrics.json").read_text())
    assert metrics["resumed_at_steps"] == [2] and len(metrics["step_loss"]) == STEPS
