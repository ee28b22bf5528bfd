import pytest

from cadence.config import TrainConfig
from cadence.errors import UserError


def test_defaults_are_the_embedded_job():
    config = TrainConfig()
    assert (config.model, config.workers, config.strategy) == ("cnn", 2, "ddp")
    assert TrainConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"workers": 0}, "--workers must be at least 1"),
        ({"workers": 3, "batch_size": 64}, "not divisible by --workers 3"),
        ({"batch_size": 0}, "--batch-size must be at least 1"),
        ({"epochs": 0}, "--epochs"),
        ({"steps": 0}, "--steps"),
        ({"lr": 0.0}, "--lr must be positive"),
        ({"optimizer": "lion"}, "unknown optimizer 'lion'"),
        ({"master_port": 70000}, "--master-port"),
    ],
)
def test_bad_values_fail_with_one_line(kwargs, needle):
    with pytest.raises(UserError) as info:
        TrainConfig(**kwargs)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        TrainConfig().workers = 4  # type: ignore[misc]


def test_every_strategy_name_has_a_registered_strategy() -> None:
    from cadence.config import STRATEGY_NAMES
    from cadence.train.strategies import get_strategy, strategy_names

    assert list(STRATEGY_NAMES) == strategy_names()
    assert all(get_strategy(name).name == name for name in STRATEGY_NAMES)
    with pytest.raises(UserError, match="unknown strategy 'horovod': choose one of cadence-dp"):
        get_strategy("horovod")
