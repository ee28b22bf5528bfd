"""TrainConfig's ZeRO fields: every bad value fails where the config is made, in one line."""

import re

import pytest

from cadence.config import TrainConfig
from cadence.errors import UserError


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"zero_stage": 0}, "--zero-stage must be 1, 2 or 3 (got 0)"),
        ({"compression": "twobit"}, "unknown compression 'twobit'"),
        ({"compression": "onebit", "optimizer": "sgd"}, "use --optimizer adam"),
        ({"compression": "onebit", "freeze_steps": 0}, "--freeze-steps of at least 1"),
        ({"freeze_steps": -1}, "--freeze-steps must be non-negative"),
        ({"zero_stage": 3, "eval_every_epoch": False}, "needs evaluation after every epoch"),
        ({"replicated_update": True}, "--replicated-update needs --compression onebit"),
        ({"gather_dtype": "fp8"}, "unknown --gather-dtype 'fp8': choose one of fp32, bf16"),
        ({"compression": "onebit", "replicated_update": True, "gather_dtype": "bf16"},
         "--replicated-update gathers no parameters: drop --gather-dtype"),
        ({"zero_stage": 3, "compression": "onebit", "replicated_update": True},
         "--replicated-update needs --compression onebit and --zero-stage 1 or 2"),
        ({"compression": "onebit", "replicated_share": 0.5},
         "--replicated-share needs --replicated-update"),
        ({"compression": "onebit", "replicated_update": True, "replicated_share": 2.0},
         "--replicated-share must be within [0, 1] (got 2.0)"),
    ],
)
def test_bad_zero_settings_are_user_errors(kwargs, needle):
    with pytest.raises(UserError, match=re.escape(needle)) as info:
        TrainConfig.from_flat(strategy="zero", **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_forward_gather_share_is_a_fraction(share):
    from cadence.zero import ZeroConfig

    with pytest.raises(UserError, match=r"forward_gather_share must be within \[0, 1\]"):
        ZeroConfig(forward_gather_share=share)
    with pytest.raises(UserError, match=r"replicated_share must be within \[0, 1\]"):
        ZeroConfig(stage=2, compression="onebit", replicated_update=True, replicated_share=share)


@pytest.mark.parametrize(
    "kwargs",
    [{"stage": 3, "compression": "onebit"}, {"stage": 2, "compression": "fp16"},
     {"stage": 1, "compression": "onebit", "gather_dtype": "bf16"}],
)  # fmt: skip
def test_replicated_update_needs_onebit_at_stage_1_or_2_in_fp32(kwargs):
    from cadence.zero import ZeroConfig

    with pytest.raises(UserError, match="replicated_update needs stage 1 or 2 with onebit") as info:
        ZeroConfig(replicated_update=True, **kwargs)
    assert "\n" not in str(info.value)
    ZeroConfig(stage=2, compression="onebit", replicated_update=True)


def test_good_zero_settings_round_trip_through_json():
    config = TrainConfig.from_flat(
        strategy="zero", zero_stage=3, compression="onebit", freeze_steps=7
    )
    assert TrainConfig.from_json(config.to_json()) == config
    # Other strategies ignore the ZeRO fields: sgd + onebit is only refused under zero.
    TrainConfig.from_flat(strategy="ddp", compression="onebit", optimizer="sgd")


def test_train_settings_reach_the_zero_config_and_its_simulation_by_one_mapping():
    from dataclasses import fields

    from cadence.config import flat_keys
    from cadence.sim.zero_graph import ZeroSimPlan
    from cadence.zero.config import TRAIN_SETTINGS, ZeroConfig

    assert set(TRAIN_SETTINGS) <= set(flat_keys())
    assert set(TRAIN_SETTINGS.values()) <= {f.name for f in fields(ZeroConfig)}
    train = TrainConfig.from_flat(
        strategy="zero", zero_stage=1, compression="onebit", freeze_steps=7,
        overlap_gather=True, replicated_update=True, replicated_share=0.3,
    )  # fmt: skip
    zero = ZeroConfig.from_train_settings(train.to_flat())
    assert (zero.stage, zero.compression, zero.freeze_steps) == (1, "onebit", 7)
    assert zero.overlap_gather and zero.replicated_update and zero.replicated_share == 0.3
    plan = ZeroSimPlan.from_config(zero)
    assert (plan.stage, plan.compression, plan.gather_bytes_per_param) == (1, "onebit", 4)
    assert plan.overlap_gather and plan.replicated_update and plan.replicated_share == 0.3
    assert ZeroSimPlan.from_config(ZeroConfig(gather_dtype="bf16")).gather_bytes_per_param == 2
    # A saved run's config from before a setting existed: that setting's default.
    assert ZeroConfig.from_train_settings({"zero_stage": 3}) == ZeroConfig(stage=3)
