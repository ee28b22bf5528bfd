"""All-reduce's latency per message at each calibrated size, in every 400mbit calibration here.

Run from the repository root:
    python results/calibration_latency_by_size.py > results/calibration-latency-by-size-20261126.txt
"""

from cadence.comm.calibrate import Calibration

FILES = (
    "results/calibration-400mbit-2hosts-20261126.json",
    "results/costs-20261126/calibration.json",
    "results/calibration-small-sizes-400mbit-20261126.json",
    "results/costs-20261126h/calibration.json",
)

for path in FILES:
    calibration = Calibration.load(path)
    sized = calibration.sized_model()
    print(path)
    print(
        f"  fitted: alpha {calibration.model.alpha_s * 1e6:.1f} us, "
        f"beta {calibration.model.beta_s_per_byte * 1e9:.4f} ns/B; by size: beta "
        f"{sized.beta_s_per_byte * 1e9:.4f} ns/B (refitted on the bandwidth-bound rows)"
    )
    measured = {r.nbytes: r.measured_s for r in calibration.rows if r.collective == "all_reduce"}
    for nbytes, alpha in sized.allreduce_alphas:
        print(
            f"  {int(nbytes) >> 10:>6} KB: measured {measured[int(nbytes)] * 1e3:9.3f} ms, "
            f"latency {alpha * 1e6:8.1f} us a message"
        )
