"""ZeRO stages 1-3 against DDP, one worker on one H200 over NCCL (files beside this):
`python results/gpu-h200-20261129/zero/parity.py`."""

import json
from pathlib import Path

HERE = Path(__file__).parent
runs = {n: json.loads((HERE / f"zero-{n}.json").read_text()) for n in
        ("ddp", "zero1-none", "zero2-none", "zero3-none")}  # fmt: skip
reference = runs["ddp"]["step_loss"]
for name, run in runs.items():
    gap = max(abs(a - b) for a, b in zip(reference, run["step_loss"], strict=True))
    print(f"{name:<11} {run['backend']} {run['device']} world {run['world_size']}: "
          f"{len(run['step_loss'])} steps, largest step-loss gap to DDP {gap:.1e}, "
          f"final test loss {run['final_test_loss']:.6f}, median iteration "
          f"{run['median_iteration_s'] * 1e3:.1f} ms")
