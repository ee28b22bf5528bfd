"""What the launcher reads back from a dead rank: the root cause behind a wrapped error, gloo's
source location left out, a collective timeout recognised."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cadence.errors import UserError, WorkerFailed
from cadence.launch.env import ERROR_FILE_ENV
from cadence.launch.errors import read_error, record_error
from cadence.launch.local import error_file, failure_cause

GLOO_TIMEOUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 5000ms for recv operation to complete"
)


def _record(monkeypatch: pytest.MonkeyPatch, logs: Path, rank: int, exc: BaseException) -> None:
    monkeypatch.setenv(ERROR_FILE_ENV, str(error_file(logs, rank)))
    try:
        raise exc
    except BaseException as raised:
        record_error(rank, raised, isinstance(raised, UserError))


def _wrapped(message: str) -> RuntimeError:
    try:
        raise RuntimeError(message)
    except RuntimeError as cause:
        try:
            raise RuntimeError("cadence-dp communication failed") from cause
        except RuntimeError as exc:
            return exc


def _exited(code: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    proc.wait()
    return proc


def test_a_wrapped_error_names_its_root_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _record(monkeypatch, tmp_path, 1, _wrapped("Connection closed by peer"))
    error = read_error(error_file(tmp_path, 1))
    assert error is not None
    assert error.summary() == (
        "RuntimeError: cadence-dp communication failed (RuntimeError: Connection closed by peer)"
    )
    assert not error.timed_out()


def test_a_gloo_timeout_is_one_line_naming_rank_and_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    _record(monkeypatch, tmp_path, 1, _wrapped(GLOO_TIMEOUT))
    procs = [_exited(0), _exited(1)]
    cause = failure_cause(procs, tmp_path, [1], timeout_s=5.0)
    assert isinstance(cause, WorkerFailed)
    message = str(cause)
    assert message.startswith("rank 1 timed out after 5 s waiting for a peer in a collective")
    assert "unbound_buffer.cc" not in message and "\n" not in message
    assert "Timed out waiting 5000ms for recv operation" in message


def test_a_user_error_keeps_its_own_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    try:
        raise ValueError("inner detail")
    except ValueError as cause:
        exc = UserError("use --batch-size 64")
        exc.__cause__ = cause
    _record(monkeypatch, tmp_path, 0, exc)
    cause_out = failure_cause([_exited(1), _exited(0)], tmp_path, [0])
    assert isinstance(cause_out, UserError) and str(cause_out) == "use --batch-size 64"
