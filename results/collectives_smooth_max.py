"""Would a smooth maximum of latency and transfer price gloo's collectives better than the
token-bucket model's max(alpha x messages, beta x bytes)? An offline look at saved runs.

On the emulated links (`AlphaBeta.overlap`) a call costs the larger of its latency and its
transfer. Near where the two are equal the calls take longer than either: 4-host 16-64 KB
reduce-scatters and all-gathers came out 1.11-1.21x slow in every pass of 2026-11-29. This
refits every saved `cadence bench collectives` run that has the token-bucket model and
per-collective alphas (the fit itself does not use the combination), prices its gloo rows with
(latency^k + transfer^k)^(1/k) for several k (k = inf is the model as it is), and counts the
rows within 10% per run and in all.

    python results/collectives_smooth_max.py > results/collectives-smooth-max-DATE.txt
"""

from __future__ import annotations

import glob

from collectives_reprice import ORIGINAL_COST, Cost, print_table

from cadence.comm.cost import AlphaBeta, Terms

KS = (float("inf"), 8.0, 6.0, 4.0, 3.0)


def smooth_cost(k: float) -> Cost:
    def cost(self: AlphaBeta, t: Terms) -> float:
        if not self.overlap or k == float("inf"):
            return ORIGINAL_COST(self, t)
        latency, transfer = self.alpha_s * t.messages, self.beta_s_per_byte * t.wire_bytes
        link = (latency**k + transfer**k) ** (1 / k)
        return link + self.gamma_s_per_byte * t.reduce_bytes

    return cost


def main() -> None:
    costs = {f"k={k:g}": smooth_cost(k) for k in KS}
    print_table(sorted(glob.glob("results/bench-collectives-*.json")), costs)


if __name__ == "__main__":
    main()
