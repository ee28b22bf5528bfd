"""Where a training step on one GPU spends the time the profile does not see.

Each variant runs 200 timed steps (after 20 untimed) of one zoo model at batch 32 on the GPU,
with a synchronise at every step's end, and prints the median step. Run on the GPU machine:
`PYTHONPATH=src python3 results/gpu-h100-20261125/loop_probe.py MODEL...`.
"""

import statistics
import sys
import time

import torch

from cadence.models import get_model_spec, load_dataset, loss_fn
from cadence.train.sharding import epoch_batches


def median_step_ms(step, steps=200, warmup=20):
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(models):
    dev = torch.device("cuda:0")
    for name in models:
        spec = get_model_spec(name)
        torch.manual_seed(0)
        model = spec.build().to(dev).train()
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
        data = load_dataset("synthetic", spec, seed=0)
        idx = list(epoch_batches(len(data.train_x), 32, 0, 1, 0, 1))
        on_gpu_x, on_gpu_y = data.train_x.to(dev), data.train_y.to(dev)
        fixed = data.train_x[idx[0]].to(dev), data.train_y[idx[0]].to(dev)

        def fwd_bwd(i, batch=fixed):
            model.zero_grad(set_to_none=True)
            loss_fn(model(batch[0]), batch[1]).backward()

        def with_step(i, batch=fixed):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(batch[0]), batch[1]).backward()
            opt.step()

        def host_batch(i):
            b = idx[i % len(idx)]
            with_step(i, (data.train_x[b].to(dev), data.train_y[b].to(dev)))

        def device_batch(i):
            b = idx[i % len(idx)].to(dev)
            with_step(i, (on_gpu_x[b], on_gpu_y[b]))

        print(name, " ".join(
            f"{label} {median_step_ms(fn):.2f} ms"
            for label, fn in [("fwd+bwd", fwd_bwd), ("+adam", with_step),
                              ("+batch from host", host_batch), ("+batch on gpu", device_batch)]
        ), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["vgg16", "resnet32", "gpt_mini"])
