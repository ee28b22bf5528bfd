"""Does timing each block inside whole iterations (`cadence profile --block-timing
in-iteration`, then the default on CUDA only) give the simulator a better compute shape on the
CPU than timing blocks in calls of their own (then the CPU's default)? Every check of
`results/halves_every_check.py` scored with five sets of profiles under one folder of charges:
the saved ones (`*-profile-b32-forward.json`, separate calls, 2026-11-24); separate calls made
on 2026-11-28 at midday (`*-profile-b32-20261128.json`); in-iteration ones made on 2026-11-28
at 12:29-12:31 UTC (`*-profile-b32-inner-20261128.json`, `cadence profile --model M
--block-timing in-iteration --out ...`, one process alone on the 2-core machine); and a repeat
at 12:35-12:38 UTC that made each model's in-iteration and separate profiles one after the
other (`*-profile-b32-inner-20261128b.json`, `*-profile-b32-20261128b.json`), so that each
pair shares the machine's phase. Then, per row, how the signed error moves from the saved
profiles to the first in-iteration set, and from the repeat's separate set to its
in-iteration set.

Run from the repository root:
    python results/in_iteration_profile_effect.py > results/in-iteration-profile-effect-DATE.txt
About 3 minutes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import halves_every_check as checks  # noqa: E402
from profile_refresh_effect import COSTS, MODELS, gradient_shares  # noqa: E402
from trace_first_bucket_share import FIRST_BLOCKS  # noqa: E402

SETS = {
    "saved": "results/{}-profile-b32-forward.json",
    "separate": "results/{}-profile-b32-20261128.json",
    "in-iteration": "results/{}-profile-b32-inner-20261128.json",
    "separate b": "results/{}-profile-b32-20261128b.json",
    "in-iteration b": "results/{}-profile-b32-inner-20261128b.json",
}


def print_shapes() -> None:
    """Per model and set: forward and gradient time, and the gradient share of the blocks whose
    gradients fill DDP's first 25 MB bucket in backward order (vgg16: conv11 to the head)."""
    print("| model | set | forward ms | gradients ms | largest block's gradient share |")
    print("| --- | --- | --- | --- | --- |")
    for m in MODELS:
        for name, pattern in SETS.items():
            f, g, shares = gradient_shares(pattern.format(m))
            block = max(shares, key=shares.__getitem__)
            print(f"| {m} | {name} | {f * 1e3:.1f} | {g * 1e3:.1f} | "
                  f"{block} {shares[block] * 100:.1f}% |")  # fmt: skip
    for name, pattern in SETS.items():
        _, _, shares = gradient_shares(pattern.format("vgg16"))
        first = sum(shares[b] for b in FIRST_BLOCKS)
        print(f"vgg16, {name}: conv11 to head (DDP's first bucket) {first * 100:.1f}% of the "
              "gradient time")  # fmt: skip
    print()


def main() -> None:
    print_shapes()
    shares = checks.share_files()
    scored = {
        name: list(checks.check_reports(
            COSTS, ("--step-shares", *shares), [pattern.format(m) for m in MODELS]))
        for name, pattern in SETS.items()
    }  # fmt: skip
    print(f"# charges from {COSTS}; mean/worst |error| in % with each set of profiles")
    print("| check | " + " | ".join(SETS) + " |")
    print("|" + " --- |" * (len(SETS) + 1))
    for i, (check, _) in enumerate(scored["saved"]):
        print(f"| {check} | " + " | ".join(checks.score(scored[s][i][1]) for s in SETS) + " |")
    for name, reports in scored.items():
        print(f"{name}: target met on {sum(checks.meets(r) for _, r in reports)} of "
              f"{len(reports)} checks")  # fmt: skip
    for first, second in (("saved", "in-iteration"), ("separate b", "in-iteration b")):
        checks.print_row_changes({first: scored[first], second: scored[second]})


if __name__ == "__main__":
    main()
