"""The checks made on the machine computing vgg16 about 2.6x slower than when
`results/costs-20261126` was measured (v, w, x, y, z, vgg16 long r), scored with that folder
and with `results/costs-20261128`, measured on the slowed machine; the rest as
`halves_every_check.py` scores them.

Run from the repository root:
    python results/slow_machine_costs_check.py > results/slow-machine-costs-check-DATE.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import halves_every_check as h  # noqa: E402

SLOW = ("in turns v", "in turns w", "in turns x", "in turns y", "in turns z", "vgg16 long r")


def main() -> None:
    shares = h.share_files()
    slow = h.checks_starting(SLOW)
    for costs in ("results/costs-20261126", "results/costs-20261128"):
        print(f"# charges from {costs}: check, mean/worst |error| %, met, vgg16 rows' errors %")
        for name, rep in h.check_reports(costs, ("--step-shares", *shares), checks=slow):
            rows = ", ".join(f"{r.get('variant', r['strategy'])} {r['error'] * 100:+.1f}"
                             for r in rep["rows"] if r["model"] == "vgg16")
            print(f"{name}: {h.score(rep)}: met {h.meets(rep)}: vgg16 {rows}")


if __name__ == "__main__":
    main()
