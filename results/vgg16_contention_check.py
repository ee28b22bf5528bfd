"""Would a contention charge measured with vgg16's own compute (not gpt_mini's) explain the
vgg16 rows predicted low on the slowed machine? Every check's vgg16 rows, scored with
`results/costs-20261126` as it is and with its contention.json replaced by
`results/contention-vgg16-400mbit-20261128aa.json` (`cadence bench contention --model vgg16
--batch-size 32 --iterations 2 --rounds 5 --sizes 1MB,4MB,16MB`); the rest as
`halves_every_check.py` scores them.

Run from the repository root:
    python results/vgg16_contention_check.py > results/vgg16-contention-check-DATE.txt
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import halves_every_check as h  # noqa: E402

BASE = "results/costs-20261126"
VGG16 = "results/contention-vgg16-400mbit-20261128aa.json"


def main() -> None:
    shares = h.share_files()
    errors: dict[tuple[str, str, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "c"
        shutil.copytree(BASE, folder)
        shutil.copy(VGG16, folder / "contention.json")
        for label, costs in (("gpt_mini's contention", BASE), ("vgg16's", str(folder))):
            for name, rep in h.check_reports(costs, ("--step-shares", *shares)):
                for r in rep["rows"]:
                    if r["model"] == "vgg16":
                        key = (name, r.get("variant", r["strategy"]), r["bandwidth"])
                        errors.setdefault(key, {})[label] = r["error"] * 100
    print("# vgg16 rows' error %: contention charge from costs-20261126 (gpt_mini) -> vgg16's")
    for (name, variant, cap), by in errors.items():
        print(f"{name}: {variant} {cap}: " + " -> ".join(f"{e:+.1f}" for e in by.values()))


if __name__ == "__main__":
    main()
