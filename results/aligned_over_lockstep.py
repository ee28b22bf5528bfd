"""Per row of the aligned-turn matrices (2026-11-29, kk and ll): the aligned compute turns over
the free-running lockstep, median and range over rounds, the aligned turns' optimizer step over
the free-running one's (median), and the row's cadence/DDP and cadence/bound.

    python results/aligned_over_lockstep.py > results/aligned-over-lockstep-20261129.txt
"""

import json
import statistics as st

for suffix in ("kk", "ll"):
    for kind in ("vgg16-400mbit-twins", "small-twins-10rounds"):
        path = f"results/bench-dp-paired-{kind}-aligned-20261129{suffix}.json"
        for r in json.load(open(path))["rows"]:
            pairs = zip(r["aligned_compute_rounds_s"], r["lockstep_compute_rounds_s"], strict=True)
            ratio = [a / b for a, b in pairs]
            steps = zip(r["aligned_compute_step_rounds_s"], r["compute_step_rounds_s"], strict=True)
            step = st.median(a / b for a, b in steps)
            print(f"{suffix} {r['model']} {r['cap']}: aligned / lockstep {st.median(ratio):.3f} "
                  f"({min(ratio):.3f}-{max(ratio):.3f}), optimizer step {step:.2f}, "
                  f"cadence/DDP {r['cadence_over_ddp_paired']:.2f}, "
                  f"cadence/bound {r['cadence_over_bound_paired']:.2f}")
