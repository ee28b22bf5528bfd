"""Page faults of Adam's step with glibc's heap thresholds dynamic and fixed: one process per
call, three `cadence.profile.optimizer_step.optimizer_step_s` timings (each the least of 5
steps after an untimed one, 18 steps in all) of a zoo model's step on one thread, and the
process's minor page faults over them.

Run from the repository root, in turns:
    for m in vgg16 cnn_lstm; do for h in dynamic fixed dynamic fixed; do
        python results/step_heap_faults.py $m $h; done; done > results/step-heap-faults-DATE.txt
"""

from __future__ import annotations

import resource
import sys

import torch

from cadence.dp.heap import keep_heap
from cadence.models import get_model_spec
from cadence.profile.optimizer_step import optimizer_step_s

model_name, heap = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
if heap == "fixed":
    assert keep_heap()
torch.manual_seed(0)
model = get_model_spec(model_name).build()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
steps = [optimizer_step_s(model, "adam", 5) for _ in range(3)]
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(f"{model_name} heap {heap}: Adam step {' '.join(f'{s * 1e3:.2f}' for s in steps)} ms; "
      f"minor page faults over the 18 steps {faults}")  # fmt: skip
