"""`cadence train --emulate-bandwidth`: the cap really applies to gloo's traffic, and no
namespace survives a run, successful or failed."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cli_helpers import SRC, run_cadence
from tests.conftest import needs_netem


def _cadence_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("cadence-")}


@needs_netem
def test_iterations_respect_the_wire_bound_and_clean_up(tmp_path):
    before = _cadence_namespaces()
    # mlp: 85k parameters = 0.34 MB of gradients; at 20mbit one ring all-reduce needs ~136 ms
    # while computing a step takes ~1 ms, so the iteration time is set by the wire.
    proc = run_cadence(
        "train", "--model", "mlp", "--steps", "12", "--emulate-bandwidth", "20mbit",
        "--out", "out", "--name", "em", "--json", "m.json", cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["bandwidth_bps"] == 20e6
    bound = metrics["wire_bound_s"]
    assert 0.12 < bound < 0.15
    # Faster than the wire is impossible; far slower would mean the run did not use the link.
    assert 0.9 * bound <= metrics["median_iteration_s"] <= 3 * bound
    assert "wire bound" in proc.stdout
    # The host's interface counted what crossed it: at least the ring all-reduce's payload
    # (each rank sends its gradients' bytes a step at 2 ranks), headers on top, not far more.
    payload = metrics["steps"] * metrics["gradient_bytes"]
    assert metrics["iface"] == "cad0"  # the emulated host's end of its link
    assert payload <= metrics["iface_tx_bytes"] <= 1.2 * payload
    assert _cadence_namespaces() == before


@needs_netem
def test_failed_emulated_run_leaves_no_namespace(tmp_path):
    before = _cadence_namespaces()
    proc = run_cadence(
        "train", "--model", "mlp", "--steps", "200", "--emulate-bandwidth", "1gbit",
        "--out", str(tmp_path), cwd=tmp_path, env={"CADENCE_INJECT_FAILURE": "0:3"},
    )
    assert proc.returncode == 1
    assert "rank 0 failed: RuntimeError: injected failure at step 3" in proc.stderr
    assert _cadence_namespaces() == before


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@needs_netem
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, None)])
def test_interrupted_emulated_run_leaves_no_namespace(tmp_path, sig, code):
    before = _cadence_namespaces()
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cadence", "train", "--model", "mlp", "--steps", "100000",
         "--emulate-bandwidth", "1gbit", "--out", str(tmp_path)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # As from a terminal: a suite started in the background of a non-interactive shell
        # inherits SIGINT ignored, and the run would then never see the Ctrl-C sent below.
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + 60
    while not (_cadence_namespaces() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # let the workers start training
    proc.send_signal(sig)
    try:
        # Generous: under a loaded machine the kernel can take tens of seconds to tear down
        # network namespaces; a real hang still fails, with what the run had said.
        _, stderr = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        exited = proc.poll()
        proc.kill()
        _, stderr = proc.communicate()
        pytest.fail(f"no exit 150 s after {sig.name} (exit status then: {exited}):\n{stderr}")
    assert proc.returncode != 0
    if code is not None:
        assert proc.returncode == code, stderr
    assert "Traceback" not in stderr or sig == signal.SIGTERM
    assert _cadence_namespaces() == before
