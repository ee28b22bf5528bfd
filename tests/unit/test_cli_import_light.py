"""The command line parses its arguments, prints its help and refuses what it cannot parse
without importing torch (2-4 s on a small machine): torch loads only for a command's work."""

import subprocess
import sys

import pytest

PROBE = """
import sys
from cadence.cli import main
try:
    code = main({argv!r})
except SystemExit as stop:
    code = stop.code
print("torch" in sys.modules, code)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["-h"],
        ["train", "--bogus"],
        ["simulate", "--workers", "two"],
        ["bench", "dp", "--bogus"],
        # Bad values the model registry and the config refuse: answered before torch too.
        ["train", "--model", "alexnet"],
        ["train", "--strategy", "horovod"],
        ["train", "--workers", "3"],
        ["train", "--model", "gpt_mini", "--dataset", "digits"],
        ["train", "--config", "no-such-job.toml"],
        ["simulate", "--batch-size", "8"],
        ["bench", "dp", "--models", "alexnet"],
        ["bench", "collectives", "--sizes", "1XB"],
    ],
)
def test_help_and_unparsable_input_leave_torch_unloaded(argv):
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    loaded, code = proc.stdout.split()[-2:]
    assert code != "0" or argv == ["-h"], proc.stderr  # the bad input was refused
    assert loaded == "False", (argv, proc.stderr)


def test_the_lazy_package_names_still_load_their_modules():
    import cadence.comm
    import cadence.dp
    import cadence.models
    import cadence.profile

    assert cadence.dp.data_parallel.__module__ == "cadence.dp.api"
    assert cadence.profile.Profile.__module__ == "cadence.profile.record"
    assert callable(cadence.comm.init_from_env)
    assert cadence.models.loss_fn.__module__ == "cadence.models.loss"
    assert cadence.models.BlockModel.__module__ == "cadence.models.blocks"
    with pytest.raises(AttributeError, match="cadence.dp.*no_such_name"):
        _ = cadence.dp.no_such_name
