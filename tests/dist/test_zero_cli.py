"""`cadence train --strategy zero`: stage 3 with 1-bit Adam, and stage 2 with replicated
updates (of every block, or of the front half with the rest gathered), train end to end and
their checkpoints hold full parameters; bad ZeRO settings end in one line with exit status 2."""

import json

import pytest
import torch

from tests.cli_helpers import assert_one_line_error, run_cadence


@pytest.mark.parametrize(
    "flags",
    [["--zero-stage", "3"], ["--replicated-update"], ["--gather-dtype", "bf16", "--overlap-gather"],
     ["--replicated-update", "--replicated-share", "0.5", "--overlap-gather"]],
)
def test_train_zero_onebit_writes_full_checkpoint(tmp_path, flags):
    # Stage 3 gathers its sharded parameters for the checkpoint; stage 2 with replicated
    # updates gathers none after warm-up, and with bf16 gathers in flight past step() it must
    # wait for them: each must still train and save every parameter.
    proc = run_cadence(
        "train", "--model", "mlp", "--strategy", "zero", *flags,
        "--compression", "onebit", "--freeze-steps", "10", "--steps", "25", "--out", "out",
        "--name", "z3", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "out" / "z3"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 25 and metrics["world_size"] == 2
    assert metrics["step_loss"][-1] < metrics["step_loss"][0]
    assert metrics["final_test_accuracy"] > 0.5
    model = torch.load(run_dir / "checkpoint.pt")["model"]
    assert model["fc1.1.weight"].shape == (256, 64)  # full, gathered parameters
    assert model["fc1.1.weight"].abs().sum() > 0


def test_bad_zero_stage_is_one_line_and_exit_2(tmp_path):
    # The parser refuses a stage outside the field's Literal choices; the other bad settings
    # are checked where TrainConfig is made (tests/unit/test_zero_config).
    proc = run_cadence("train", "--strategy", "zero", "--zero-stage", "4", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "argument --zero-stage: invalid choice: 4 (choose from 1, 2, 3)" in proc.stderr
    proc = run_cadence(
        "train", "--strategy", "zero", "--compression", "onebit", "--optimizer", "sgd",
        cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert_one_line_error(proc, "--compression onebit is 1-bit Adam: use --optimizer adam")
