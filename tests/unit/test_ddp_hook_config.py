"""`--ddp-comm-hook` and `--eval-every-steps` are checked where the config is made: one line."""

from __future__ import annotations

from typing import Any

import pytest

from cadence.config import TrainConfig
from cadence.config_checks import check_train_config
from cadence.errors import UserError
from tests.cli_helpers import assert_one_line_error, run_cadence


def _config(**flags: Any) -> TrainConfig:
    return TrainConfig.from_flat(model="mlp", workers=2, batch_size=32, steps=4, **flags)


def test_hooks_are_refused_off_ddp_and_before_torchs_minimum_start() -> None:
    check_train_config(_config(strategy="ddp", ddp_comm_hook="powersgd"))
    with pytest.raises(UserError, match="use --strategy ddp"):
        check_train_config(_config(strategy="cadence-dp", ddp_comm_hook="fp16"))
    with pytest.raises(UserError, match="at least 2"):
        check_train_config(_config(strategy="ddp", ddp_comm_hook="powersgd",
                                   powersgd_start_step=1))  # fmt: skip
    with pytest.raises(UserError, match="--eval-every-steps"):
        _config(eval_every_steps=0)


def test_train_refuses_a_hook_off_ddp_in_one_line(tmp_path: Any) -> None:
    proc = run_cadence("train", "--model", "mlp", "--strategy", "zero", "--ddp-comm-hook",
                       "fp16", "--steps", "1", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(proc, "--ddp-comm-hook")
    proc = run_cadence("train", "--ddp-comm-hook", "bf16", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "invalid choice: 'bf16'" in proc.stderr
