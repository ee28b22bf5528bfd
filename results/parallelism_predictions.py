"""Prints the alpha-beta predictions quoted in the README's "Which parallelism when" section:
gpt_mini (batch 32 x 64 tokens) on 1 gbit links, data parallel vs tensor parallel.

    python results/parallelism_predictions.py
"""

from cadence.comm.cost import AlphaBeta
from cadence.models import get_model_spec
from cadence.tp import gpt_tp_plan, predict_comm_s

link = AlphaBeta.from_bandwidth(1e9)
model = get_model_spec("gpt_mini").build()
grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
dp_s = link.time("allreduce", "ring", grad_bytes, 2)
print(f"DP, 2 workers: one all-reduce of {grad_bytes / 1e6:.2f} MB, {dp_s * 1000:.0f} ms")
for tp in (2, 4):
    plan = gpt_tp_plan(model, batch=32, seq=64, tp_size=tp)
    total = sum(c.nbytes for c in plan)
    ms = predict_comm_s(plan, link, tp) * 1000
    print(f"TP, {tp} ranks: {len(plan)} collectives, {total / 1e6:.1f} MB, {ms:.0f} ms")
