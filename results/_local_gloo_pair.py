"""Shared launcher of the `results/gloo_*.py` scripts: two local gloo ranks over loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence


def run_modes(script: str, modes: Sequence[str], first_port: int, rounds: int = 3) -> None:
    """Run `python script --worker` as ranks 0 and 1 once per mode (in $MODE), modes
    alternating, `rounds` times; each run gets its own port from `first_port` + 1 on."""
    port = first_port
    for _round in range(rounds):
        for mode in modes:
            port += 1
            env = dict(os.environ, MODE=mode, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")  # fmt: skip
            procs = [
                subprocess.Popen([sys.executable, script, "--worker"],
                                 env=dict(env, RANK=str(r)), stderr=subprocess.DEVNULL)  # fmt: skip
                for r in range(2)
            ]
            for p in procs:
                p.wait()
