"""Where a ZeRO step's time goes, one rank's share, measured in one process.

    python -m cadence.zero.profile_step --model vgg16 --workers 2 --bandwidth 200mbit

Times (median of `--repeats`, one intra-op thread like the benchmark's workers): forward +
backward on the rank's batch share; the 1-bit codec work one rank does per step in
`onebit.momentum_all_reduce` (form the local momentum from the last gathered wires, encode p
pieces with error feedback, decode the p received pieces into the mean, re-encode its own
piece), every bucket of the real layout; the optimizer update of its shard. Next to them the
wire times of the computed payload at the cap. No collectives run: this is the CPU side the
network cannot hide.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from cadence.models import get_model_spec, loss_fn
from cadence.netem import parse_bandwidth
from cadence.zero.compress import encode
from cadence.zero.layout import bucket_params, build_layout, comm_bytes_per_step
from cadence.zero.onebit import encode_local_momentum, reduce_received


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: allocator, first-call costs
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile(model: str, workers: int, bandwidth: str, batch: int, repeats: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = get_model_spec(model)
    net = spec.build()
    entries = [e for e in bucket_params(net) if e[2]]
    layout = build_layout(
        [(n, [(k, tuple(p.shape)) for k, p in params]) for n, _, params in entries], workers
    )
    x, y = spec.synthetic_batch(batch // workers, seed=0)

    def compute() -> None:
        net.zero_grad()
        loss_fn(net(x), y).backward()

    p = workers
    momenta = [torch.randn(b.piece) for b in layout.buckets]
    grads = [torch.randn(b.padded) for b in layout.buckets]
    errors = [torch.zeros(b.padded) for b in layout.buckets]
    own_errors = [torch.zeros(b.piece) for b in layout.buckets]
    wires = [
        torch.stack([encode(torch.randn(b.piece))[0] for _ in range(p)]) for b in layout.buckets
    ]

    def codec() -> None:  # momentum_all_reduce as rank 0 runs it, what it sent as if received
        for g, m, err, own, w in zip(grads, momenta, errors, own_errors, wires, strict=True):
            sent = encode_local_momentum(g, w, m, err, 0.9, 0)
            reduce_received(sent, own, m)

    shard = [torch.zeros(b.piece) for b in layout.buckets]
    opt = torch.optim.Adam([torch.nn.Parameter(s) for s in shard], lr=1e-3)
    for param in opt.param_groups[0]["params"]:
        param.grad = torch.randn_like(param)

    bps = parse_bandwidth(bandwidth)
    rows = {}
    for stage in (1, 2, 3):
        for comp, gather in (("none", 4), ("onebit", 4), ("onebit", 2)):
            sent = comm_bytes_per_step(layout, stage, comp, True, gather)
            name = f"zero{stage}-{comp}" + ("-bf16" if gather == 2 else "")
            rows[name] = {k: v * 8 / bps for k, v in sent.items()}
    return {
        "model": model,
        "workers": workers,
        "bandwidth": bandwidth,
        "batch_per_rank": batch // workers,
        "params": layout.numel,
        "compute_s": _median_s(compute, repeats),
        "onebit_codec_s": _median_s(codec, repeats),
        "adam_update_s": _median_s(opt.step, repeats),
        "wire_s": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vgg16")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--bandwidth", default="200mbit")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    result = profile(args.model, args.workers, args.bandwidth, args.batch_size, args.repeats)
    result["command"] = " ".join(["python -m cadence.zero.profile_step", *sys.argv[1:]])
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
