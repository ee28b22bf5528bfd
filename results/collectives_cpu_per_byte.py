"""Would processor time per byte that the link cannot hide price gloo's collectives better than
the token-bucket model's max(alpha x messages, beta x bytes)? An offline look at saved runs.

On the emulated links (`AlphaBeta.overlap`) a call costs the larger of its latency and its
transfer. Near where the two are equal the calls take longer than either: 4-host 16-64 KB
all-reduces, reduce-scatters and all-gathers came out 1.11-1.21x slow in every pass of
2026-11-29 while every row from 256 KB up was within 10%. One reading: each byte also costs the
sending and receiving processes some processor time (copies through the socket layers, four
processes on two cores). While the link is the bottleneck that time passes as the rank waits for
tokens; while latency is, it adds to it. So a call costs

    max(alpha x messages + c x bytes, beta x bytes) (+ gamma x reduced bytes)

This refits every saved `cadence bench collectives` run that has the token-bucket model and
per-collective alphas (the fit does not use the combination, so c = 0 reproduces every run's
saved count), prices its gloo rows at several c, and counts the rows within 10% per run and in
all. Any c picked from this table is picked in sample; `bench costs`' contention fit measures a
per-byte processor time of its own (1.56 ns/B on 2026-11-26, 2.21 on 2026-12-01).

    python results/collectives_cpu_per_byte.py > results/collectives-cpu-per-byte-DATE.txt
"""

from __future__ import annotations

import glob
import sys

from collectives_reprice import ORIGINAL_COST, Cost, print_table

from cadence.comm.cost import AlphaBeta, Terms

CS = (0.0, 0.5e-9, 1.0e-9, 1.5e-9, 2.21e-9, 3.0e-9)
"""Seconds of processor time per byte on the wire; 2.21 ns/B is the contention fit of
`results/costs-20261201`."""


def cpu_cost(c: float) -> Cost:
    def cost(self: AlphaBeta, t: Terms) -> float:
        if not self.overlap or c == 0.0:
            return ORIGINAL_COST(self, t)
        latency = self.alpha_s * t.messages + c * t.wire_bytes
        link = max(latency, self.beta_s_per_byte * t.wire_bytes)
        return link + self.gamma_s_per_byte * t.reduce_bytes

    return cost


def main(paths: list[str]) -> None:
    print_table(paths, {f"c={c * 1e9:g} ns/B": cpu_cost(c) for c in CS})


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(glob.glob("results/bench-collectives-*.json")))
