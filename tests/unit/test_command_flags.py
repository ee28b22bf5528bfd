"""Every command's flags come from config fields: a name means one field everywhere, with the
same type, choices and help; `--config FILE` < flags for the simulator, planner and benches."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from cadence.cli import build_parser, main
from cadence.command_options import COMMAND_TABLES
from cadence.config_flags import field_docs, resolve_flags
from cadence.errors import UserError

SHARED_NAMES = {
    # flag: the fields it names, each meaning that command's version of the same thing
    "--memory-limit": {"pipeline.memory_limit", "plan.worker_memory"},  # per stage / worker
    "--profile": {"profile.file", "plan.profiles", "bench.profiles"},  # one file / several
    "--workers": {"cluster.workers", "plan.worker_counts"},  # plan map: several counts
    "--microbatches": {"pipeline.microbatches", "plan.microbatch_counts"},  # several counts
    "--out": {"job.out", "profile.out", "bench.out"},  # where the command writes
}


def _commands(
    parser: argparse.ArgumentParser, path: str = ""
) -> dict[str, argparse.ArgumentParser]:
    out = {path: parser} if path else {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out |= _commands(sub, f"{path} {name}".strip())
    return out


def _derived() -> dict[str, list[tuple[str, argparse.Action]]]:
    """flag -> (command, action) for every flag derived from a field (dest `table.field`)."""
    out: dict[str, list[tuple[str, argparse.Action]]] = {}
    for command, parser in _commands(build_parser()).items():
        for action in parser._actions:
            if "." in action.dest:
                out.setdefault(action.option_strings[0], []).append((command, action))
    return out


def test_a_flag_names_one_field_with_one_type_choices_and_help() -> None:
    derived = _derived()
    assert {"simulate", "plan map", "bench dp", "calibrate", "profile"} <= {
        command for uses in derived.values() for command, _ in uses
    }
    for flag, uses in derived.items():
        dests = {a.dest for _, a in uses}
        assert dests == SHARED_NAMES.get(flag, dests) and (len(dests) == 1) != (
            flag in SHARED_NAMES
        ), (flag, dests)
        for dest in dests:
            same = [a for _, a in uses if a.dest == dest]
            helps = {re.sub(r" \(default: .*\)$", "", a.help or "") for a in same}
            assert len(helps) == 1 and len({(a.type, a.choices is None) for a in same}) == 1, flag


def test_the_hand_written_spellings_are_gone() -> None:
    flags = set(_derived())
    assert {"--threshold-mb", "--bucket-mb", "--credit-mb", "--profile-iterations"} <= flags
    every = {
        s for p in _commands(build_parser()).values() for a in p._actions for s in a.option_strings
    }
    assert not every & {"--threshold", "--bucket", "--credit"}


def test_every_command_option_has_a_docstring() -> None:
    for cls in COMMAND_TABLES.values():
        for f in fields(cls):
            assert field_docs(cls).get(f.name), f"{cls.__name__}.{f.name}"


def _resolved(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(list(argv))
    resolve_flags(args)
    return args


def test_flags_override_the_toml_file_which_overrides_the_command_defaults(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text(
        '[job]\nstrategy = "zero"\nepochs = 3\n[data]\nbatch_size = 8\n[cluster]\nworkers = 8\n'
        '[zero]\nstage = 3\n[network]\nbandwidth = "1gbit"\n[plan]\nthresholds = "1mib"\n'
    )
    args = _resolved("simulate", "--config", str(job), "--workers", "4")
    assert (args.strategy, args.zero_stage, args.bandwidth) == ("zero", 3, "1gbit")
    assert (args.workers, args.model, args.micro_batch_size) == (4, "vgg16", 32)
    # The same file serves cadence train (epochs, batch size) and plan dp (thresholds).
    assert _resolved("plan", "dp", "--config", str(job)).thresholds == "1mib"
    pipe = _resolved("plan", "pipeline", "--config", str(job), "--memory-limit", "2KiB")
    assert (pipe.batch_size, pipe.memory_limit, pipe.bandwidth) == (8, 2048, "1gbit")
    bench = _resolved("bench", "dp", "--config", str(job))
    assert (bench.workers, bench.batch_size, bench.models) == (
        8,
        8,
        "vgg16,resnet32,cnn_lstm,gpt_mini",
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[simulate]\nreplica = 2\n", "unknown key 'replica' in [simulate]: choose from"),
        ("[sim]\nreplicas = 2\n", "unknown section [sim]: use tables [job], [model]"),
        (
            '[job]\nstrategy = "ps"\n',
            "unknown --strategy 'ps': choose one of cadence-dp, ddp, zero",
        ),
        ("[simulate]\nreplicas = 0\n", "--replicas must be >= 1, got 0"),
        ('[network]\nlatency = "1ms"\n', "[network] latency = '1ms' should be a float"),
    ],
)
def test_a_bad_file_for_simulate_is_refused_in_one_line(
    tmp_path: Path, text: str, needle: str
) -> None:
    job = tmp_path / "job.toml"
    job.write_text(text)
    with pytest.raises(UserError) as info:
        _resolved("simulate", "--config", str(job))
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_simulate_reads_the_file_end_to_end(tmp_path: Path) -> None:
    from tests.unit.test_sim_cli import zoo_profile

    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    out = tmp_path / "r.json"
    job = tmp_path / "job.toml"
    job.write_text(
        f'[model]\nname = "cnn"\n[profile]\nfile = "{profile}"\n[cluster]\nworkers = 8\n'
        f'[job]\nstrategy = "ddp"\n[optim]\nname = "none"\n[simulate]\njson = "{out}"\n'
    )
    assert main(["simulate", "--config", str(job), "--workers", "4"]) == 0
    data = json.loads(out.read_text())
    assert (data["strategy"], data["world_size"]) == ("ddp", 4)


def test_netem_flags_come_from_their_table_and_the_cap_is_trains() -> None:
    up = _resolved("netem", "up", "--emulate-bandwidth", "400mbit", "--port-queue", "fifo")
    assert (up.hosts, up.emulate_bandwidth, up.port_queue, up.json) == (2, "400mbit", "fifo", None)
    assert _resolved("netem", "up").emulate_bandwidth == "1gbit"
    probe = _resolved("netem", "probe", "abc", "--dst", "3")
    assert (probe.cluster, probe.emulate_bandwidth, probe.dst) == ("abc", None, 3)
    assert probe.seconds == 2.0
    assert _resolved("netem", "load").seconds == 0.0
    assert _resolved("netem", "down", "--all").all is True
    derived = _derived()
    assert {c for c, _ in derived["--emulate-bandwidth"]} >= {"train", "netem up", "netem probe"}
    assert {a.dest for _, a in derived["--emulate-bandwidth"]} == {"cluster.emulate_bandwidth"}
    assert {c for c, _ in derived["--json"]} >= {"train", "models", "netem status"}
    every = {s for a in build_parser()._actions for s in a.option_strings}
    for command, parser in _commands(build_parser()).items():
        if command.startswith("netem"):
            every |= {s for a in parser._actions for s in a.option_strings}
    assert "--bandwidth" not in every
    with pytest.raises(UserError, match="--seconds must be >= 0"):
        _resolved("netem", "load", "--seconds", "-1")
