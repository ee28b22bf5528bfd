"""A missing optional package is one line saying which extra installs it."""

from __future__ import annotations

from typing import Any

import pytest

from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.extras import missing_line, require, user_error_for


def test_the_line_names_the_package_and_the_extra() -> None:
    line = missing_line("zmq")
    assert "pyzmq" in line and "cadence[ps]" in line and "\n" not in line
    assert "cadence[peers]" in missing_line("deepspeed")


def test_require_refuses_a_missing_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"pip install 'cadence\[ps\]'"):
        require("zmq")


def test_only_optional_packages_become_user_errors() -> None:
    assert isinstance(user_error_for(ModuleNotFoundError("x", name="zmq.sugar")), UserError)
    assert user_error_for(ModuleNotFoundError("x", name="torch")) is None


def test_the_ps_strategy_is_refused_up_front_without_pyzmq(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "zmq" else real(name, *a)
    )
    with pytest.raises(UserError, match="pyzmq"):
        TrainConfig.from_flat(strategy="ps", workers=2)
    TrainConfig.from_flat(strategy="ddp", workers=2)  # the other strategies do not need it


def test_a_lazy_name_whose_module_needs_a_missing_package_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib

    from cadence._lazy import lazy_names

    def no_zmq(name: str) -> Any:
        raise ModuleNotFoundError("No module named 'zmq'", name="zmq")

    monkeypatch.setattr(importlib, "import_module", no_zmq)
    with pytest.raises(UserError, match=r"cadence\[ps\]"):
        lazy_names("pkg", {"server": "pkg.server"})("server")
