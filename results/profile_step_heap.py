"""Does `cadence profile` time the optimizer step a training process pays? Each zoo model is
profiled in turns by the real command with glibc's heap thresholds fixed (what `cadence
profile` does since 2026-11-28, as cadence-dp's processes run) and left dynamic
(`GLIBC_TUNABLES=` in its environment: `keep_heap` then leaves malloc's settings alone, as
before), and the step's share of measured iteration + step is set beside the share the
benchmark runs timed in their own processes (`cadence.sim.step_share`, the checks' files).

Run from the repository root:
    python results/profile_step_heap.py > results/profile-step-heap-DATE.txt
About 6 minutes.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import share_files  # noqa: E402

from cadence.sim.step_share import step_shares  # noqa: E402

MODELS = ("cnn_lstm", "resnet32", "gpt_mini", "vgg16")
ROUNDS = 2


def profile(model: str, heap: str) -> tuple[float, float]:
    """(measured iteration, Adam step) in seconds from one `cadence profile` of `model`."""
    env = dict(os.environ)
    if heap == "dynamic":
        env["GLIBC_TUNABLES"] = ""
    out = subprocess.run(
        [sys.executable, "-m", "cadence", "profile", "--model", model, "--batch-size", "32",
         "--threads", "1", "--device", "cpu"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    iteration = re.search(r"vs measured iteration ([\d.]+) ms", out)
    step = re.search(r"adam ([\d.]+) ms", out)
    assert iteration and step, out
    return float(iteration.group(1)) / 1e3, float(step.group(1)) / 1e3


def main() -> None:
    in_run = step_shares(share_files())
    print("# Adam's step over measured iteration + step (%) from `cadence profile`, heap fixed "
          "(now) and dynamic (before), in turns; beside it the runs' own share")  # fmt: skip
    print("| model | round | fixed: step ms, share | dynamic: step ms, share | runs' share |")
    print("| --- | --- | --- | --- | --- |")
    shares: dict[str, dict[str, list[float]]] = {}
    for model in MODELS:
        for r in range(ROUNDS):
            cells = []
            for heap in ("fixed", "dynamic"):
                iteration, step = profile(model, heap)
                share = step / (iteration + step)
                shares.setdefault(model, {}).setdefault(heap, []).append(share)
                cells.append(f"{step * 1e3:.2f}, {share * 100:.2f}%")
            print(f"| {model} | {r + 1} | {cells[0]} | {cells[1]} | {in_run[model] * 100:.2f}% |",
                  flush=True)  # fmt: skip
    print()
    for model, by_heap in shares.items():
        fixed, dynamic = (statistics.median(by_heap[h]) * 100 for h in ("fixed", "dynamic"))
        runs = in_run[model] * 100
        print(f"{model}: fixed {fixed:.2f}%, dynamic {dynamic:.2f}%, runs {runs:.2f}%")


if __name__ == "__main__":
    main()
