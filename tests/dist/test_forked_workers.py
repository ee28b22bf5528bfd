"""Local workers forked from the worker server (`cadence.launch.forked`) behave as the
subprocesses they replace: the environment, working directory, import path and log each was
given, exit codes and signals as `Popen` reports them, and the launching script is not run again
in them (a script that calls `cadence.train` needs no `if __name__ == "__main__"` guard)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cadence.launch.forked import start_server
from tests.cli_helpers import SRC

PROBE = """
import json, os, sys
from pathlib import Path
argv = sys.argv[1:]
out = Path(argv[1])
out.write_text(json.dumps({"env": os.environ.get("PROBE"), "cwd": os.getcwd(),
                           "path0": sys.path[0], "argv": argv}))
print("to the log", file=sys.stderr)
if argv[0] == "abort":
    os.abort()
raise SystemExit(int(argv[0]))
"""


def _run_probe(tmp_path: Path, code: str) -> tuple[int, dict[str, object], str]:
    """Fork one worker whose `main` is the probe, from `tmp_path/work`, through a server
    running the fork server's loop; return its exit code, what it saw and its log."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    log = tmp_path / "rank1.log"
    seen = tmp_path / "seen.json"
    script = tmp_path / "server_probe.py"
    # The server's own loop, with the worker's `main` replaced by the probe's.
    script.write_text(
        "import os, sys, types\n"
        f"sys.path.insert(0, {SRC!r})\n"
        "import cadence.launch.fork_server as server\n"
        "server.PRELOADED = ()\n"
        "module = types.ModuleType('cadence.launch.worker')\n"
        "def main(argv):\n" + textwrap.indent(PROBE.strip(), "    ") + "\n"
        "module.main = main\n"
        "sys.modules['cadence.launch.worker'] = module\n"
        "server._serve(sys.stdin.fileno(), os.fdopen(int(sys.argv[1]), 'w'))\n"
    )
    server = start_server(["label"], command=[sys.executable, str(script)])
    try:
        cwd = os.getcwd()
        os.chdir(work)
        try:
            worker = server.start([code, str(seen)], {"PROBE": "yes", "PATH": "/usr/bin"}, log)
        finally:
            os.chdir(cwd)
        returncode = worker.wait(timeout=60)
    finally:
        server.close()
    return returncode, json.loads(seen.read_text()), log.read_text()


def test_a_forked_worker_gets_its_environment_directory_path_and_log(tmp_path: Path) -> None:
    code, seen, log = _run_probe(tmp_path, "0")
    assert code == 0
    assert seen["env"] == "yes"
    assert seen["cwd"] == str(tmp_path / "work") == seen["path0"]
    assert seen["argv"] == ["0", str(tmp_path / "seen.json")]
    assert "to the log" in log


@pytest.mark.parametrize(("how", "expected"), [("3", 3), ("abort", -signal.SIGABRT)])
def test_exit_codes_and_signals_read_as_popen_reports_them(
    tmp_path: Path, how: str, expected: int
) -> None:
    assert _run_probe(tmp_path, how)[0] == expected


def test_a_script_calling_train_is_not_run_again_in_the_workers(tmp_path: Path) -> None:
    script = tmp_path / "my_training.py"
    script.write_text(
        textwrap.dedent(
            """
            import cadence
            from cadence.config import TrainConfig
            print("script top level ran", flush=True)
            config = TrainConfig.from_flat(model="mlp", steps=2, out="out", name="r")
            metrics, _ = cadence.train(config)
            print("steps", metrics["steps"], flush=True)
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
        timeout=180, env=dict(os.environ, PYTHONPATH=SRC),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("script top level ran") == 1
    assert "steps 2" in proc.stdout
