"""Which order does torch's DDP fill its buckets in once it has rebuilt them after the first
iteration? For zoo cnn_lstm (one process, gloo), DDP's own logging data after three steps,
beside the order one backward pass accumulates the gradients (`zoo_arrival_order`) and the
reverse registration order the simulator assumed before. Default buckets (first bucket 1 MiB)
and `bucket_cap_mb=25` (what the benchmarks build).

Run from the repository root:
    python results/ddp_rebuilt_buckets.py > results/ddp-rebuilt-buckets-DATE.txt
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from cadence.models import get_model_spec
from cadence.models.loss import loss_fn
from cadence.sim.command import zoo_arrival_order

MODEL = "cnn_lstm"


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    spec = get_model_spec(MODEL)
    print(f"# {MODEL}, torch {torch.__version__}")
    order = zoo_arrival_order(MODEL)
    print(f"arrival order (zoo_arrival_order): {' '.join(map(str, order))}")
    print(f"reverse registration: {' '.join(map(str, reversed(range(len(order)))))}")
    for cap in (None, 25.0):
        torch.manual_seed(0)
        model = spec.build()
        kwargs = {} if cap is None else {"bucket_cap_mb": cap}
        ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
        x, y = spec.synthetic_batch(4)
        for _ in range(3):
            loss_fn(ddp(x), y).backward()
        data = ddp._get_ddp_logging_data()
        label = "default buckets" if cap is None else f"bucket_cap_mb={cap:g}"
        sizes, indices = data["rebuilt_bucket_sizes"], data["rebuilt_per_bucket_param_indices"]
        print(f"{label}: rebuilt bucket sizes {sizes}; parameter indices per bucket {indices}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
