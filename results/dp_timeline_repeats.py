"""The same `cadence bench dp-timeline` run again and again: how much do identical runs of one
model and cap differ, and is it the compute or the network?

    sudo python results/dp_timeline_repeats.py cnn_lstm 1gbit 6 \
        > results/dp-timeline-repeats-cnn_lstm-1gbit-20261126.txt

Arguments: model, cap, runs (defaults cnn_lstm, 1gbit, 6). Each run trains DDP and then
cadence-dp for 30 steps on 2 emulated hosts and traces steps 19-22 on every rank. Printed per
run: each variant's median step (steps 5-30), and for DDP's traced steps on rank 0 the time from
the forward's start to the end of backward, the wait for the all-reduce after it, the
all-reduce's own span and the update, and for both variants the time from calling the forward
to its first layer (DDP broadcasts its buffers there). Beside it, polled every 0.3 s while the
run lasts, each emulated host's TCP segments sent and retransmitted (`nstat`) and the packets
its queues dropped (`tc -s qdisc`): the last reading before the cluster went away. The poller
runs on the same cores as the ranks, so the steps are slower than a benchmark's.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _ns_counters(ns: str) -> tuple[int, int, int] | None:
    """(segments out, segments retransmitted, queue drops) of namespace `ns`, or None."""
    try:
        tcp = subprocess.run(
            ["ip", "netns", "exec", ns, "nstat", "-az", "TcpOutSegs", "TcpRetransSegs"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout  # fmt: skip
        tc = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout  # fmt: skip
    except (subprocess.SubprocessError, OSError):
        return None
    values = {line.split()[0]: int(line.split()[1]) for line in tcp.splitlines()[1:] if line}
    words = tc.split()
    drops = sum(int(words[i + 1].rstrip(",")) for i, w in enumerate(words) if w == "dropped")
    return values.get("TcpOutSegs", 0), values.get("TcpRetransSegs", 0), drops


def _poll(stop: threading.Event, last: dict[str, tuple[int, int, int]]) -> None:
    while not stop.is_set():
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for ns in (line.split()[0] for line in names.splitlines() if line.startswith("cadence-")):
            got = _ns_counters(ns)
            if got is not None:
                last[ns] = got
        time.sleep(0.3)


def _by_step(run: dict) -> list[list[dict]]:
    """Rank 0's traced events, one list per step, in step order."""
    by_step: dict[int, list[dict]] = {}
    for e in run["events"]:
        by_step.setdefault(e["iteration"], []).append(e)
    return [events for _, events in sorted(by_step.items())]


def _first_layer_gaps(run: dict) -> list[float]:
    """Per traced step on rank 0, ms from calling the forward to its first layer starting
    (DDP broadcasts its buffers there; cadence-dp waits for a pending update)."""
    gaps = []
    for events in _by_step(run):
        called = [e["start"] for e in events if e["kind"] == "forward-pass"]
        layers = [e["start"] for e in events if e["kind"] == "forward"]
        if called and layers:
            gaps.append(round((min(layers) - called[0]) * 1e3, 2))
    return gaps


def _ddp_steps(run: dict) -> list[tuple[float, float, float, float]]:
    """Rank 0's traced DDP steps: (forward start to backward end, wait, all-reduce, update) ms."""
    out = []
    for events in _by_step(run):
        forward = [e for e in events if e["kind"] == "forward-pass"]
        wait = [e for e in events if e["kind"] == "wait"]
        comm = [e for e in events if e["row"] == "comm"]
        update = [e for e in events if e["row"] == "update"]
        if forward and wait and comm and update:
            out.append(tuple(round(x * 1e3, 1) for x in (
                wait[0]["start"] - forward[0]["start"], wait[0]["end"] - wait[0]["start"],
                comm[0]["end"] - comm[0]["start"], update[0]["end"] - update[0]["start"],
            )))  # fmt: skip
    return out  # type: ignore[return-value]


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "cnn_lstm"
    cap = sys.argv[2] if len(sys.argv) > 2 else "1gbit"
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    print(f"# {model} at {cap}, {runs} identical runs of cadence bench dp-timeline")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            out = Path(tmp) / f"run{i}.png"
            stop, last = threading.Event(), {}
            poller = threading.Thread(target=_poll, args=(stop, last))
            poller.start()
            cmd = ["cadence", "bench", "dp-timeline", "--model", model, "--cap", cap]
            cmd += ["--steps", "30", "--record-step", "20", "--out", str(out)]
            subprocess.run(cmd, check=True, capture_output=True)
            stop.set()
            poller.join()
            data = json.loads(out.with_suffix(".json").read_text())
            medians = {
                name: statistics.median(r["step_times_s"][4:]) * 1e3
                for name, r in data["runs"].items()
            }
            hosts = {ns: c for ns, c in last.items() if not ns.endswith("-sw")}
            sent = sum(c[0] for c in hosts.values())
            retrans = sum(c[1] for c in hosts.values())
            drops = sum(c[2] for c in last.values())
            ddp, cadence = medians["ddp"], medians["cadence"]
            print(
                f"run {i}: median step ddp {ddp:.1f} ms, cadence {cadence:.1f} ms; "
                f"segments {sent}, retransmitted {retrans}, queue drops {drops}"
            )
            for step in _ddp_steps(data["runs"]["ddp"]):
                print("  ddp rank 0 (forward+backward, wait, all-reduce, update) ms:", step)
            for ranks in data["runs"]["ddp"].get("iteration_breakdowns", []):
                print("  ddp every rank (forward+backward, all-reduce in flight) ms:", [
                    (round((b["forward_s"] + b["backward_s"]) * 1e3, 1),
                     round(b["allreduce_in_flight_s"] * 1e3, 1)) for b in ranks
                ])  # fmt: skip
            for name, run in data["runs"].items():
                print(f"  {name} rank 0 forward call to first layer ms:", _first_layer_gaps(run))


if __name__ == "__main__":
    main()
