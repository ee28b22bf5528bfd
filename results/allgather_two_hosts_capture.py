"""Why later back-to-back gloo all-gathers on 2 emulated hosts take one half longer: tcpdump on
both hosts while 8 blocks of 3 back-to-back 16 MB all-gathers run at 400mbit (the workers of
`results/allgather_congestion_control.py`), then each direction's bytes per 10 ms in the
fastest and the slowest call, and the small (48-byte) gloo control messages around them.

    sudo python results/allgather_two_hosts_capture.py > results/allgather-two-hosts-capture.txt

Needs tcpdump. Run from the repository root.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PACKET = re.compile(r"^(\d+\.\d+) IP (\S+)\.\d+ > (\S+)\.\d+: .* length (\d+)")


def packets(pcap: Path) -> list[tuple[float, str, int]]:
    """(time, source address, payload bytes) of every TCP packet in `pcap`."""
    text = subprocess.run(["tcpdump", "-r", str(pcap), "-tt", "-n"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    return [(float(m[1]), m[2], int(m[4])) for m in map(_PACKET.match, text.splitlines()) if m]


def calls(data: list[tuple[float, str, int]]) -> list[tuple[float, float]]:
    """(start, end) of each burst of data packets, bursts split by 3 ms of silence."""
    bursts, start, last = [], data[0][0], data[0][0]
    for t, _, _ in data[1:]:
        if t - last > 0.003:
            bursts.append((start, last))
            start = t
        last = t
    bursts.append((start, last))
    return bursts


def main() -> None:
    from cadence.bench._launch import run_workers
    from cadence.netem import EmulatedCluster, check_netem_available, cleanup_on_signals

    if not Path("results", Path(__file__).name).is_file():
        sys.exit("run from the repository root")
    check_netem_available()
    with tempfile.TemporaryDirectory() as tmp, cleanup_on_signals(), EmulatedCluster(
        2, 400e6
    ) as cluster:
        dumps = [subprocess.Popen([*cluster.exec_prefix(h.index), "tcpdump", "-i", h.iface, "-n",
                                   "-s", "96", "-B", "32768", "-w", f"{tmp}/host{h.index}.pcap"],
                                  stderr=subprocess.DEVNULL)
                 for h in cluster.hosts]  # fmt: skip
        time.sleep(1.0)
        out = Path(tmp, "times.json")
        run_workers(cluster, "results.allgather_congestion_control",
                    ["--worker", str(out), str(16 << 20), "3", "8"], Path(tmp), 1, 600,
                    pin_hosts=True)  # fmt: skip
        for dump in dumps:
            dump.terminate()
            dump.wait()
        timed = [round(t * 1e3, 1) for t in json.loads(out.read_text())]
        seen = packets(Path(tmp, "host0.pcap"))
        host0, host1 = cluster.hosts[0].ip, cluster.hosts[1].ip
    print(f"24 calls of a 16 MB all-gather on 2 hosts at 400mbit (link time 175.4 ms), slowest "
          f"rank's times in ms: {timed}")  # fmt: skip
    # A call is a burst that carries 8 MB each way (drains and barriers carry less).
    bursts = [(a, b) for a, b in calls([p for p in seen if p[2] > 1000])
              if sum(n for t, s, n in seen if a <= t <= b and s == host0) >= 8 << 20]  # fmt: skip
    bursts = [(a, b) for a, b in bursts if b - a < 0.3]  # one call each
    for label, (a, b) in (("fastest", min(bursts, key=lambda c: c[1] - c[0])),
                          ("slowest", max(bursts, key=lambda c: c[1] - c[0]))):  # fmt: skip
        print(f"\n{label} call on the wire: {(b - a) * 1e3:.1f} ms; KB per 10 ms from its start")
        for name, src in (("host0 -> host1", host0), ("host1 -> host0", host1)):
            bins = [0] * (int((b - a) * 100) + 1)
            for t, s, n in seen:
                if a <= t <= b and s == src and n > 1000:
                    bins[int((t - a) * 100)] += n
            print(f"  {name}: " + " ".join(str(x // 1000) for x in bins))
        notes = [(round((t - a) * 1e3, 1), "host0" if s == host0 else "host1")
                 for t, s, n in seen if a - 0.003 <= t <= b and 0 < n < 1000]  # fmt: skip
        print(f"  48-byte control messages (ms from the start, sender): {notes}")


if __name__ == "__main__":
    main()
