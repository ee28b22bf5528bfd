"""Profile-derived vs directly timed stage costs (issue 6, why v2's predictions were low).

Run: PYTHONPATH=src python results/bench-pipeline-v3-stage-costs.py gpt_mini
(and again with MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=65536, the allocator setting
`cadence bench pipeline` gives its workers). For each stage of a 2-stage split and each
micro-batch size: the stage's forward and backward timed as the executor runs one micro-batch
(median of 10 after 2 warm-up), next to what the planner took from profiles before v3 (a line
through profiles at 1, 2 and 16 samples, 3 iterations each) and the profile at that very size.
"""

import copy
import statistics
import sys
import time

import torch

from cadence.models import get_model_spec, loss_fn
from cadence.pipeline.stages import plan_stages, stage_module
from cadence.profile import profile_model
from cadence.sim.pipeline_adapter import Affine, StageCosts, _stage_seconds

torch.set_num_threads(1)
name = sys.argv[1]
B = 16
spec = get_model_spec(name)
torch.manual_seed(0)
model = spec.build()
sizes = [1, 2, 4, 8, 16]
profs = {b: profile_model(copy.deepcopy(model), spec.synthetic_batch(b), 3, 1, name) for b in sizes}
ranges = plan_stages(profs[16], 2, None).ranges
print("ranges", ranges)


def line(bs: list[int]) -> StageCosts:
    # the pre-v3 fit: least-squares line per stage through the profiles at sizes `bs`
    per = [_stage_seconds(profs[b], ranges) for b in bs]

    def fit(vals: list[float]) -> Affine:
        n = len(bs)
        mx, my = sum(bs) / n, sum(vals) / n
        slope = max(sum((x - mx) * (y - my) for x, y in zip(bs, vals)) / sum((x - mx) ** 2 for x in bs), 0.0)
        return Affine(max(my - slope * mx, 0.0), slope)

    return StageCosts(tuple(fit([p[s][0] for p in per]) for s in range(2)),
                      tuple(fit([p[s][1] for p in per]) for s in range(2)))


old = line([1, 2, 16])
x, y = spec.synthetic_batch(B)
mods = [stage_module(model, ranges, s) for s in range(2)]
for s in range(2):
    for b in sizes:
        with torch.no_grad():
            inp0 = x[:b] if s == 0 else mods[0](x[:b])
        fs, bs_ = [], []
        for it in range(12):
            i = inp0 if s == 0 else inp0.detach().requires_grad_(True)
            t0 = time.perf_counter()
            out = mods[s](i)
            if s == 1:
                out = loss_fn(out, y[:b])
            t1 = time.perf_counter()
            torch.autograd.backward(out, None if s == 1 else torch.ones_like(out))
            t2 = time.perf_counter()
            fs.append(t1 - t0)
            bs_.append(t2 - t1)
        mf, mb = statistics.median(fs[2:]), statistics.median(bs_[2:])
        own = _stage_seconds(profs[b], ranges)[s]
        pc = old.forward[s](b) + old.backward[s](b)
        print(f"stage {s} size {b:2d}: timed as a stage {(mf + mb) * 1e3:7.2f} ms (fwd {mf * 1e3:6.2f}) | "
              f"pre-v3 line {pc * 1e3:7.2f} | profile at this size {sum(own) * 1e3:7.2f}")
