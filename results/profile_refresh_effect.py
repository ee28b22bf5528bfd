"""Does a profile made in the session the checks are scored in change the score? Every check of
`results/halves_every_check.py` scored with the saved profiles (`*-profile-b32-forward.json`,
2026-11-24) and with profiles made on 2026-11-28 (`*-profile-b32-20261128.json`, `cadence
profile --model M --out ...`, one process alone on the 2-core machine), under one folder of
charges; then, per row, how the signed error moves.

Run from the repository root:
    python results/profile_refresh_effect.py > results/profile-refresh-effect-DATE.txt
About 2 minutes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import halves_every_check as checks  # noqa: E402

MODELS = ("vgg16", "cnn_lstm", "resnet32", "gpt_mini")
COSTS = "results/costs-20261126"


def gradient_shares(path: str) -> tuple[float, float, dict[str, float]]:
    """A profile's forward and gradient time, and each block's share of the gradient time."""
    blocks = json.loads(Path(path).read_text())["blocks"]
    grads = [b["input_grad_s"] + b["weight_grad_s"] for b in blocks]
    shares = {b["name"]: g / sum(grads) for b, g in zip(blocks, grads, strict=True)}
    return sum(b["forward_s"] for b in blocks), sum(grads), shares


def print_profile_changes() -> None:
    """Per model: forward and gradient time, saved -> new, and the most any block's share of
    the gradient time moved; then the first model's every block."""
    print("| model | forward ms | gradients ms | largest move of a block's gradient share |")
    print("| --- | --- | --- | --- |")
    moves = {}
    for m in MODELS:
        f0, g0, s0 = gradient_shares(f"results/{m}-profile-b32-forward.json")
        f1, g1, s1 = gradient_shares(f"results/{m}-profile-b32-20261128.json")
        moves[m] = [(name, s0[name], s1[name]) for name in s0]
        move = max(abs(a - b) for _, a, b in moves[m])
        print(f"| {m} | {f0 * 1e3:.1f} -> {f1 * 1e3:.1f} | {g0 * 1e3:.1f} -> {g1 * 1e3:.1f} | "
              f"{move * 100:.1f} points |")  # fmt: skip
    blocks = ", ".join(f"{n} {a * 100:.1f} -> {b * 100:.1f}" for n, a, b in moves[MODELS[0]])
    print(f"\n{MODELS[0]}, each block's share of the gradient time (%), saved -> new: {blocks}")
    print()


def main() -> None:
    print_profile_changes()
    shares = checks.share_files()
    profiles = {
        "saved profiles": [f"results/{m}-profile-b32-forward.json" for m in MODELS],
        "profiles of 2026-11-28": [f"results/{m}-profile-b32-20261128.json" for m in MODELS],
    }
    scored = {
        name: list(checks.check_reports(COSTS, ("--step-shares", *shares), files))
        for name, files in profiles.items()
    }
    checks.print_side_by_side(scored, COSTS, "saved profiles vs profiles of 2026-11-28")
    checks.print_row_changes(scored)


if __name__ == "__main__":
    main()
