"""`cadence train --resume` with DiLoCo: a run stopped part-way (with a streaming sync in
flight at its checkpoint) and resumed ends bitwise like one never stopped. It uses the resume
tests' helpers and is skipped where they are absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cadence.testing import run_ranks

resume_tests = pytest.importorskip("tests.dist.test_resume")  # the resume machinery's helpers


def test_stopped_and_resumed_equals_uninterrupted(tmp_path: Path) -> None:
    # H=4 in 2 fragments: fragment 1's sync is sent after step 2, where the checkpoint is
    # written, and applied after step 3, the resumed run's first.
    keys: dict[str, Any] = {"sync_every": 4, "fragments": 2, "outer_dtype": "int8"}
    stop = resume_tests.STOP
    run_ranks(
        resume_tests._whole_stopped_resumed, 2, str(tmp_path), "diloco", keys, stop, timeout=240
    )
    resume_tests._assert_same_end(tmp_path / "whole", tmp_path / "cut", resume_tests.STEPS, stop)
