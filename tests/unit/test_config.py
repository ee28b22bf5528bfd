import argparse
from dataclasses import fields

import pytest

from cadence.config import SECTIONS, DataSection, TrainConfig, flag_of, flat_keys
from cadence.config_flags import add_config_arguments, config_from_args, field_docs
from cadence.errors import UserError


def test_defaults_are_the_embedded_job():
    config = TrainConfig()
    assert (config.model.name, config.cluster.workers, config.job.strategy) == ("cnn", 2, "ddp")
    assert TrainConfig.from_json(config.to_json()) == config


def test_sections_and_flat_keys_build_the_same_config():
    by_section = TrainConfig(data=DataSection(batch_size=32, grad_accum=2))
    assert TrainConfig.from_flat(batch_size=32, grad_accum=2) == by_section
    assert by_section.to_flat()["batch_size"] == 32


def test_an_unknown_flat_key_is_refused_in_one_line():
    with pytest.raises(UserError, match="key 'batchsize': did you mean batch_size"):
        TrainConfig.from_flat(batchsize=8)


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
        ({"timeout": 0.0}, "--timeout must be positive"),
        ({"strategy": "horovod"}, "unknown strategy 'horovod'"),
    ],
)
def test_bad_values_fail_with_one_line(kwargs, needle):
    with pytest.raises(UserError) as info:
        TrainConfig.from_flat(**kwargs)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        TrainConfig().cluster.workers = 4  # type: ignore[misc]


def test_every_field_has_one_flag_and_a_docstring():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    flags = {s for action in parser._actions for s in action.option_strings}
    every = [(cls, f) for cls in SECTIONS.values() for f in fields(cls)]
    assert len(flat_keys()) == len(every)  # flat keys (flags) are unique over the sections
    for cls, f in every:
        assert flag_of(f) in flags, f.name
        assert field_docs(cls).get(f.name), f"{cls.__name__}.{f.name}"
    assert {f"--{k.replace('_', '-')}" for k in flat_keys()} <= flags


def test_literal_choices_become_argparse_choices():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    choices = {a.option_strings[0]: a.choices for a in parser._actions if a.option_strings}
    assert choices["--strategy"] == (
        "cadence-dp", "ddp", "diloco", "local-sgd", "pipeline", "ps", "torchft-diloco", "zero"
    )
    assert choices["--optimizer"] == ("adam", "adamw", "sgd")
    assert choices["--zero-stage"] == (1, 2, 3)
    assert choices["--workers"] is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--zero-stage", "4"])
    assert vars(parser.parse_args(["--zero-stage", "3"])) == {"zero.stage": 3}


def _parse(*argv: str) -> TrainConfig:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_config_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def test_flags_override_the_toml_file_which_overrides_the_defaults(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text(
        '[job]\nsteps = 9\nstrategy = "zero"\n[data]\nbatch_size = 32\n'
        '[zero]\nstage = 3\n[optim]\nlr = 1\n[pipeline]\nmemory_limit = "2KiB"\n'
        "recompute = true\n"
    )
    config = _parse("--config", str(job), "--steps", "5", "--no-recompute")
    assert (config.job.steps, config.job.strategy, config.data.batch_size) == (5, "zero", 32)
    assert (config.zero.stage, config.optim.lr, config.pipeline.memory_limit) == (3, 1.0, 2048)
    assert config.pipeline.recompute is False and config.cluster.workers == 2  # a default
    assert _parse("--memory-limit", "1KiB").pipeline.memory_limit == 1024


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[data]\nbatchsize = 8\n", "unknown key 'batchsize' in [data]: choose from dataset,"),
        ("[zero_stage]\nx = 1\n", "unknown section [zero_stage]: use tables [job], [model]"),
        ("steps = 3\n", "unknown section [steps]"),
        ('[job]\nsteps = "3"\n', "[job] steps = '3' should be a int"),
        ("[job\n", "is not valid TOML"),
    ],
)
def test_a_bad_toml_file_is_refused_in_one_line(tmp_path, text, needle):
    job = tmp_path / "job.toml"
    job.write_text(text)
    with pytest.raises(UserError) as info:
        _parse("--config", str(job))
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_every_strategy_name_has_a_registered_strategy() -> None:
    from cadence.config import STRATEGY_NAMES
    from cadence.train.strategies import get_strategy, strategy_names

    assert list(STRATEGY_NAMES) == strategy_names()
    assert all(get_strategy(name).name == name for name in STRATEGY_NAMES)
    with pytest.raises(UserError, match="unknown strategy 'horovod': choose one of cadence-dp"):
        get_strategy("horovod")


def test_cadence_train_refuses_a_bad_config_file_in_one_line(tmp_path, capsys):
    from cadence.cli import main

    job = tmp_path / "job.toml"
    job.write_text("[zero]\nstages = 3\n")
    assert main(["train", "--config", str(job), "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key 'stages' in [zero]: choose from stage," in err
