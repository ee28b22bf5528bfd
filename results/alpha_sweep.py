"""The all-reduce alpha's effect on `cadence bench sim` over the six long matrices of
2026-11-26: `python results/alpha_sweep.py > results/alpha-sweep-20261126.txt`.

Every other charge is the `cadence bench costs` folder's; the calibration is that folder's
with its all-reduce alpha replaced by each value swept (a sensitivity check, not a fit).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent
ALPHAS_MS = (0.0, 0.3, 0.5, 0.7, 0.9, 1.1, 1.4)
RUNS = ("", "b", "c", "d", "e", "f")
PROFILES = [
    arg
    for model in ("cnn_lstm", "resnet32", "gpt_mini")
    for arg in ("--profile", str(RESULTS / f"{model}-profile-b32-forward.json"))
]


def main() -> None:
    base = json.loads((RESULTS / "costs-20261126" / "calibration.json").read_text())
    print("alpha ms | " + " | ".join(f"run {r or 'a'} mean / worst" for r in RUNS))
    with tempfile.TemporaryDirectory() as tmp:
        for alpha_ms in ALPHAS_MS:
            calibration = json.loads(json.dumps(base))
            calibration["model"]["alpha_s"] = alpha_ms * 1e-3
            cal_path = Path(tmp) / f"calibration-{alpha_ms}.json"
            cal_path.write_text(json.dumps(calibration))
            cells = []
            for run in RUNS:
                out = Path(tmp) / f"sim-{alpha_ms}-{run}.json"
                matrix = RESULTS / f"bench-dp-small-long-probe-20261126{run}.json"
                subprocess.run(
                    ["cadence", "bench", "sim", "--from-bench-dp", str(matrix), *PROFILES,
                     "--costs", str(RESULTS / "costs-20261126"), "--calibration", str(cal_path),
                     "--json", str(out)],
                    check=True, capture_output=True,
                )  # fmt: skip
                report = json.loads(out.read_text())
                worst = max(report["rows"], key=lambda r: abs(r["error"]))
                mean, most = report["mean_abs_error"] * 100, report["worst_abs_error"] * 100
                where = f"{worst['model']} {worst['strategy']} {worst['bandwidth']}"
                cells.append(f"{mean:.1f}% / {most:.1f}% ({where})")
            print(f"{alpha_ms} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
