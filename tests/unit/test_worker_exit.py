"""How worker processes end: status kept, output flushed, interpreter teardown skipped.

Teardown is where gloo's native threads aborted workers ("terminate called without an active
exception" on the user's terminal), after a success and after a recorded failure alike.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
import atexit, sys
atexit.register(lambda: print("teardown ran", file=sys.stderr))
print("result written", end="")
print("error logged", end="", file=sys.stderr)
from cadence.launch.errors import exit_worker
exit_worker(int(sys.argv[1]))
"""


@pytest.mark.parametrize("code", [0, 1, 2])
def test_exit_worker_keeps_the_status_and_output_and_skips_teardown(code: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(code)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == code
    assert proc.stdout == "result written"
    assert proc.stderr == "error logged"
