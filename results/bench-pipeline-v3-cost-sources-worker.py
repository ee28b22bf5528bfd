"""Rank of `bench-pipeline-v3-cost-sources.py` (see there); run by it inside an emulated host."""

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from cadence.comm import broadcast_object, destroy, init_from_env
from cadence.comm.cost import AlphaBeta
from cadence.models import get_model_spec, loss_fn
from cadence.pipeline.api import pipeline
from cadence.pipeline.auto import measure_stage_times, profile_sizes, profiles_for_model
from cadence.pipeline.planner import plan_pipeline
from cadence.pipeline.probe import probe_stage_link
from cadence.pipeline.stages import plan_stages
from cadence.sim.pipeline_adapter import measured_stage_costs

cfg = json.loads(Path(sys.argv[1]).read_text())
torch.set_num_threads(1)
init_from_env()
rank, name, B = dist.get_rank(), cfg["model"], 16
spec = get_model_spec(name)
torch.manual_seed(0)
model = spec.build()
link = probe_stage_link(0, 1)
profs = profiles_for_model(model, name, profile_sizes(B), together=True)
ranges = broadcast_object(plan_stages(profs[0], 2).ranges if rank == 0 else None)
times = measure_stage_times(model, name, ranges, B)
preds = None
if rank == 0:
    kw = {"stages": 2, "batch_size": B, "link": link, "optimizer": "sgd-nomomentum", "ranges": ranges}
    line = [p for p in profs if p.batch_size in (1, 2, 16)]
    preds = {
        label: {f"{c.schedule} x {c.microbatches}": c.predicted_s for c in plan.candidates}
        for label, plan in (
            ("stage probe (v3)", plan_pipeline(profs, costs=measured_stage_costs(times), **kw)),
            ("profiles, every size", plan_pipeline(profs, **kw)),
            ("profiles 1/2/16, one line (pre-v3 fit)", plan_pipeline(line, microbatches=[1, 2, 4, 8, 16], **kw)),
            ("stage probe, messages free", plan_pipeline(
                profs, costs=measured_stage_costs(times), **{**kw, "link": AlphaBeta(0.0, 0.0)})),
        )
    }
preds = broadcast_object(preds)
x, y = spec.synthetic_batch(B)
todo = [("gpipe", 8), ("1f1b", 8), ("kfkb:2", 8), ("kfkb:4", 8), ("1f1b", 16), ("1f1b", 4), ("1f1b", 2)]
exs = [pipeline(model, loss_fn, s, m, ranges, backend="cadence") for s, m in todo]


def step(ex):
    for p in ex.module.parameters():
        p.grad = None
    dist.barrier()
    t = time.perf_counter()
    ex.step(x if ex.is_first else None, y if ex.is_last else None)
    return time.perf_counter() - t


for _ in range(2):
    for ex in exs:
        step(ex)
res = [[] for _ in todo]
for rnd in range(cfg["rounds"]):
    order = list(range(len(todo)))
    for i in order if rnd % 2 == 0 else reversed(order):
        res[i].append(step(exs[i]))
every = [None, None]
dist.all_gather_object(every, res)
if rank == 0:
    measured = {
        f"{s} x {m}": statistics.median(max(r[i][k] for r in every) for k in range(cfg["rounds"]))
        for i, (s, m) in enumerate(todo)
    }
    Path(sys.argv[2]).write_text(json.dumps({"link": [link.alpha_s, link.beta_s_per_byte],
                                             "predicted": preds, "measured": measured}))
destroy()
