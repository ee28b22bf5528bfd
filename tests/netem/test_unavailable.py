"""check_netem_available explains itself in one line (runs anywhere, no root needed)."""

import sys
from pathlib import Path
from unittest import mock

import pytest

from cadence.errors import UserError
from cadence.netem import NetemUnavailable, check_netem_available
from tests.cli_helpers import assert_one_line_error, run_cadence


def test_not_root() -> None:
    with mock.patch("os.geteuid", return_value=1000), pytest.raises(NetemUnavailable) as info:
        check_netem_available()
    assert isinstance(info.value, UserError)
    assert "root" in str(info.value) and "\n" not in str(info.value)


def test_iproute2_missing() -> None:
    with (
        mock.patch("os.geteuid", return_value=0),
        mock.patch("shutil.which", return_value=None),
        pytest.raises(NetemUnavailable, match="missing ip, tc"),
    ):
        check_netem_available()


@pytest.mark.parametrize(
    "args",
    [["netem", "status"], ["train", "--emulate-bandwidth", "200mbit", "--model", "mlp"]],
)
def test_cli_without_iproute2_is_one_line_and_exit_2(tmp_path, args) -> None:
    # A PATH holding only the interpreter's folder hides ip and tc from the command.
    env = {"PATH": str(Path(sys.executable).parent)}
    proc = run_cadence(*args, cwd=tmp_path, env=env, timeout=60)
    assert_one_line_error(proc, "needs root and iproute2")
