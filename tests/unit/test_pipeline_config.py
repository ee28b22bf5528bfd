"""`TrainConfig` checks of the pipeline settings: one line naming what is possible instead."""

import pytest

from cadence.config import TrainConfig
from cadence.errors import UserError


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"stages": 3}, "--stages 3 does not divide --workers 2"),
        ({"stages": 1, "batch_size": 63}, "--batch-size 63 does not split over 2 pipeline rep"),
        ({"microbatches": 5}, "--microbatches 5 does not divide the 64 samples per replica"),
        ({"stages": 1, "microbatches": 64}, "does not divide the 32 samples per replica: use"),
        ({"microbatches": 0}, "--microbatches 0 does not divide"),
        ({"schedule": "zb"}, "unknown pipeline schedule 'zb': choose gpipe, 1f1b or kfkb:K"),
        ({"schedule": "kfkb:3"}, r"kfkb:3 needs K to divide the 4 micro-batches: use K in \[1"),
        ({"pipeline_backend": "gloo"}, "unknown --pipeline-backend 'gloo': choose one of auto"),
        (
            {"pipeline_backend": "torch", "schedule": "kfkb:2"},
            "--pipeline-backend torch cannot run --schedule kfkb:2: use cadence",
        ),
        (
            {"pipeline_backend": "torch-builtin", "recompute": True},
            "cannot run --schedule 1f1b with --recompute: use cadence",
        ),
    ],
)
def test_bad_pipeline_settings(fields: dict[str, object], needle: str) -> None:
    with pytest.raises(UserError, match=needle) as info:
        TrainConfig.from_flat(strategy="pipeline", **fields)
    assert "\n" not in str(info.value)


def test_pipeline_batch_need_not_divide_by_workers() -> None:
    # Pipeline ranks share one batch (not 1/W each): 3 stages with batch 64 is fine.
    config = TrainConfig.from_flat(
        strategy="pipeline", workers=3, stages=3, batch_size=64, microbatches=8
    )
    assert config.pipeline.schedule == "1f1b"
    with pytest.raises(UserError, match="not divisible by --workers 3"):
        TrainConfig.from_flat(strategy="ddp", workers=3, batch_size=64)
    TrainConfig.from_flat(strategy="ddp", stages=5, schedule="zb")  # ignored by other strategies
