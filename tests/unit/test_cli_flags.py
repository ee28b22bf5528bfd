"""A malformed flag is one line naming the flag and where help is, exit status 2 (argparse
alone prints its whole usage block first), for every subcommand."""

import pytest

from cadence.cli import main


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["train", "--ps-dead-after", "abc"],
            "cadence train: error: argument --ps-dead-after: invalid float value: 'abc' "
            "(see 'cadence train -h')",
        ),
        (
            ["train", "--strategy", "horovod"],
            "cadence train: error: argument --strategy: invalid choice: 'horovod' (choose from "
            "'cadence-dp', 'ddp', 'diloco', 'local-sgd', 'pipeline', 'ps', 'torchft-diloco', "
            "'zero')",
        ),
        (["train", "--device", "gpu"], "cadence train: error: argument --device: invalid choice"),
        (
            ["bench", "pipeline", "--contention", "maybe"],
            "cadence bench pipeline: error: argument --contention: invalid choice: 'maybe'",
        ),
        (
            ["bench", "collectives", "--workers", "all"],
            "cadence bench collectives: error: argument --workers: invalid int value: 'all'",
        ),
        (
            ["simulate", "--batch-size", "8"],
            "cadence simulate: error: --batch-size is the global batch (cadence train, bench, "
            "plan pipeline); this command takes --micro-batch-size",
        ),
        (["plan", "--workers", "x"], "cadence plan strategies: error: argument --workers"),
        (
            ["simulate", "--strategy", "pipeline"],
            "cadence simulate: error: argument --strategy: invalid choice: 'pipeline' (choose "
            "from 'cadence-dp', 'ddp', 'zero')",
        ),
        (["frobnicate"], "cadence: error: argument COMMAND: invalid choice: 'frobnicate'"),
    ],
)
def test_bad_flags_are_one_line(argv, line, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(line), err
