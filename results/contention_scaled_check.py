"""Would charging communication's processor time at the slow machine's speed explain the
vgg16 rows predicted low on it? The checks run on the machine that computed vgg16 about 2.6x
slower than when `results/costs-20261126` was measured (v, w, x, y and vgg16 long r), scored
with those charges and with a copy whose contention constants (per message and per byte) are
multiplied by 2.6; the rest as `halves_every_check.py` scores them.

Run from the repository root:
    python results/contention_scaled_check.py > results/contention-scaled-check-DATE.txt
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import halves_every_check as h  # noqa: E402

SLOW = ("in turns v", "in turns w", "in turns x", "in turns y", "vgg16 long r")
FACTOR = 2.6
BASE = "results/costs-20261126"


def scaled_costs(folder: Path) -> str:
    shutil.copytree(BASE, folder)
    path = folder / "contention.json"
    data = json.loads(path.read_text())
    for key in ("cpu_s_per_message", "cpu_s_per_byte"):
        data["fit"][key] *= FACTOR
    path.write_text(json.dumps(data))
    return str(folder)


def main() -> None:
    shares = h.share_files()
    slow = h.checks_starting(SLOW)
    with tempfile.TemporaryDirectory() as tmp:
        for label, costs in (("as measured", BASE),
                             (f"contention x{FACTOR}", scaled_costs(Path(tmp) / "c"))):
            print(f"# {label}: check, mean/worst |error| %, each row's error %")
            for name, rep in h.check_reports(costs, ("--step-shares", *shares), checks=slow):
                rows = ", ".join(f"{r['model']} {r.get('variant', r['strategy'])} "
                                 f"{r['bandwidth']} {r['error'] * 100:+.1f}" for r in rep["rows"])
                print(f"{name}: {h.score(rep)}: {rows}")


if __name__ == "__main__":
    main()
