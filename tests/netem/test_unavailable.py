"""check_netem_available explains itself in one line (runs anywhere, no root needed)."""

from unittest import mock

import pytest

from cadence.errors import UserError
from cadence.netem import NetemUnavailable, check_netem_available


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
