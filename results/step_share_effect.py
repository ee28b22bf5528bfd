"""What pricing the optimizer step as a share of the compute changes: every check of
`results/halves_every_check.py` scored twice under one folder of charges, once as `bench sim`
does by default (rows that timed no step of their own, files from before 2026-11-27, get one
timed now on the scoring machine: none of the profiles in results/ records one) and once with
`--step-shares` over the checks' files that timed the step beside their compute (rows that
timed their own keep it). Then, per row (model, strategy, cap) over the checks that have it,
how many are predicted low, the mean signed error and the mean |error|.

Run from the repository root:
    python results/step_share_effect.py [COSTS_FOLDER] > results/step-share-effect-DATE.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import check_reports, print_row_changes, print_side_by_side, share_files  # noqa: E402

from cadence.sim.step_share import step_shares  # noqa: E402


def main_(costs: str) -> None:
    files = share_files()
    print(f"# --step-shares over {len(files)} files: " + ", ".join(Path(f).name for f in files))
    shares = step_shares(files)
    print("# shares: " + ", ".join(f"{m} {s * 100:.2f}%" for m, s in sorted(shares.items())))
    scored = {
        "timed now": list(check_reports(costs)),
        "share": list(check_reports(costs, ("--step-shares", *files))),
    }
    print_side_by_side(scored, costs, "step timed now | step as a share", "")
    print_row_changes(scored)


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
