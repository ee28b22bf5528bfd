"""Benchmark files that timed the optimizer step beside their compute (since 2026-11-27),
scored by `cadence bench sim` twice: each round or run priced at its own step (the default)
and, as before, at one step timed now in this process (the same files with the steps taken
out). Also printed: each model's own steps against the one timed now.

Run from the repository root, with nothing else running (the step timed now is a timing):
    python results/own_step_compare.py OUT_PREFIX FILE... [--costs FOLDER]
writes OUT_PREFIX-own-step.json and OUT_PREFIX-timed-now.json (the `--json` of each call).
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

from cadence.cli import main

PROFILES = [f"results/{m}-profile-b32-forward.json" for m in ("vgg16", "cnn_lstm", "resnet32",
                                                               "gpt_mini")]  # fmt: skip
STEP_KEYS = ("compute_step_rounds_s", "variant_step_runs_s")


def _sim(files: list[str], costs: str, out: Path) -> dict:
    args = ["bench", "sim", "--from-bench-dp", *files, "--costs", costs, "--json", str(out)]
    for profile in PROFILES:
        args += ["--profile", profile]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(args) == 0
    print("\n".join(text.getvalue().rstrip().splitlines()[-2:]))
    return json.loads(out.read_text())


def _without_steps(files: list[str], tmp: Path) -> list[str]:
    out = []
    for f in files:
        data = json.loads(Path(f).read_text())
        for row in data["rows"]:
            for key in STEP_KEYS:
                row.pop(key, None)
        copy = tmp / Path(f).name  # the same name, so the rows read the same
        copy.write_text(json.dumps(data))
        out.append(str(copy))
    return out


def main_(prefix: str, files: list[str], costs: str) -> None:
    print(f"# {' '.join(files)}; charges from {costs}")
    print("## each round or run at the optimizer step timed beside its compute")
    own = _sim(files, costs, Path(f"{prefix}-own-step.json"))
    with tempfile.TemporaryDirectory() as tmp:
        print("## every round or run at one step timed now (as before 2026-11-27)")
        now = _sim(_without_steps(files, Path(tmp)), costs, Path(f"{prefix}-timed-now.json"))
    print("## optimizer step, ms: median of the file's own (their range) | timed now")
    seen = set()
    for a, b in zip(own["rows"], now["rows"], strict=True):
        if (a["run"], a["bandwidth"]) in seen:
            continue
        seen.add((a["run"], a["bandwidth"]))
        row = next(r for f in files for r in json.loads(Path(f).read_text())["rows"]
                   if f.endswith(a["run"].split(":")[0]) and r["model"] == a["model"]
                   and r["cap"] == a["bandwidth"])  # fmt: skip
        steps = row.get("compute_step_rounds_s") or [
            s for runs in row.get("variant_step_runs_s", {}).values() for s in runs
        ]
        print(f"{a['run']} {a['bandwidth']}: {statistics.median(steps) * 1e3:.1f} "
              f"({min(steps) * 1e3:.1f}-{max(steps) * 1e3:.1f}) | "
              f"{b['optimizer_step_s'] * 1e3:.1f}")  # fmt: skip


if __name__ == "__main__":
    argv = sys.argv[1:]
    costs = "results/costs-20261126"
    if "--costs" in argv:
        i = argv.index("--costs")
        costs = argv[i + 1]
        del argv[i : i + 2]
    main_(argv[0], argv[1:], costs)
