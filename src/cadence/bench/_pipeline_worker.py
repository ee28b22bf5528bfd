"""One rank of `cadence bench pipeline`: `python -m cadence.bench._pipeline_worker CONFIG.json
RESULT.json`, started inside an emulated host's namespace (rank s runs stage s).

1. plan: ranks 0 and 1 probe their link and profile the model at every candidate
   micro-batch size, both at once (under whatever load the parent started); rank 0 splits the
   stages, each rank times its stage's forward and backward at those sizes (both at once,
   `pipeline.stage_probe`), rank 0 runs the planner on these times (compute) and its
   profiles (memory), and every rank receives the plan;
2. time: every candidate gets its own executor over the same stage; after warm-up, rounds
   run each candidate once (order reversed every other round), each step between barriers;
   a step's time is the slowest rank's;
3. memory: per candidate, one more step with the kernel's peak-RSS counter reset
   (/proc/self/clear_refs "5", then VmHWM): peak RSS during the step minus RSS before it.
   The parent sets MALLOC_MMAP_THRESHOLD_ so large tensors are mapped and unmapped on free,
   which makes RSS follow the tensors alive.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from cadence.comm import broadcast_object, destroy, init_from_env
from cadence.comm import ops as comm
from cadence.launch.errors import exit_worker, worker_entry
from cadence.models import get_model_spec, loss_fn
from cadence.models.blocks import BlockModel
from cadence.pipeline.api import pipeline
from cadence.pipeline.executor import PipelineExecutor

OPTIMIZER = "sgd-nomomentum"  # no optimizer step is timed: no state in the memory model either


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _release() -> None:
    gc.collect()
    with contextlib.suppress(OSError):  # hand freed heap back: the baseline is what is alive
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _step(ex: PipelineExecutor, x: torch.Tensor, y: torch.Tensor) -> float:
    for p in ex.module.parameters():
        p.grad = None
    comm.barrier()
    start = time.perf_counter()
    ex.step(x if ex.is_first else None, y if ex.is_last else None)
    return time.perf_counter() - start


def _peak_step(ex: PipelineExecutor, x: torch.Tensor, y: torch.Tensor) -> int:
    for p in ex.module.parameters():
        p.grad = None
    _release()
    comm.barrier()
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the RSS now
    before = _rss("VmRSS")
    ex.step(x if ex.is_first else None, y if ex.is_last else None)
    return _rss("VmHWM") - before


def _plan(cfg: dict[str, Any], model: BlockModel, is_main: bool) -> dict[str, Any]:
    from cadence.pipeline.auto import (
        agreed_ranges,
        measure_stage_times,
        profile_sizes,
        profiles_for_model,
    )
    from cadence.pipeline.planner import plan_pipeline
    from cadence.pipeline.probe import probe_stage_link
    from cadence.sim.pipeline_adapter import measured_stage_costs

    link = probe_stage_link(0, 1)
    batch, m = cfg["batch_size"], cfg["microbatches"]
    # Both ranks profile at once, under this scenario's load: in the pipeline they compute
    # side by side on the same cores (see `profiles_for_model`).
    started = time.perf_counter()
    profiles = profiles_for_model(model, cfg["model"], profile_sizes(batch), together=True)
    profile_s = time.perf_counter() - started
    # Rank 0's stage split; then each rank times its own stage as the executor runs it.
    ranges = agreed_ranges(profiles, 2, is_main)
    started = time.perf_counter()
    times = measure_stage_times(model, cfg["model"], ranges, batch)
    stage_probe_s = time.perf_counter() - started
    record: dict[str, Any] | None = None
    if is_main:
        assert link is not None and times is not None
        kw: dict[str, Any] = {
            "ranges": ranges,
            "costs": measured_stage_costs(times),
            "stages": 2,
            "batch_size": batch,
            "link": link,
            "optimizer": OPTIMIZER,
        }
        limit = cfg["memory_limit"]
        if limit is None:  # between the smallest and largest peak at M: some fit, some not
            free = plan_pipeline(profiles, microbatches=[m], **kw)
            peaks = sorted(max(c.peak_bytes) for c in free.candidates)
            limit = (peaks[0] + peaks[-1]) // 2
        plan = plan_pipeline(profiles, memory_limit=limit, **kw)
        record = {
            **plan.to_json(),
            "probe": {"alpha_s": link.alpha_s, "beta_s_per_byte": link.beta_s_per_byte},
            "profile_sizes": [p.batch_size for p in profiles],
            "profile_s": profile_s,
            "stage_times": [{str(n): list(fb) for n, fb in t.items()} for t in times],
            "stage_probe_s": stage_probe_s,
        }
    return dict(broadcast_object(record))


def candidates(plan: dict[str, Any], m: int) -> list[dict[str, Any]]:
    """What is measured: GPipe, 1F1B and every kFkB at M on our runtime (those over the memory
    limit too, marked: they widen the ranking the prediction is checked on), torch's
    ScheduleGPipe / Schedule1F1B at M, and the planner's pick if it is none of these."""
    ours = {(c["schedule"], c["microbatches"]): c for c in plan["candidates"]}
    out = []
    for (name, count), c in ours.items():
        if count == m:
            out.append({"name": name, "backend": "cadence", **c})
    for name in ("gpipe", "1f1b"):
        c = ours[(name, m)]
        out.append({**c, "name": f"torch-{name}", "backend": "torch-builtin"})
    best = plan["best"]
    if best["microbatches"] != m:
        out.append({"name": f"{best['schedule']} x {best['microbatches']}",
                    "backend": "cadence", **best})  # fmt: skip
    order = {"gpipe": 0, "1f1b": 1}
    out.sort(key=lambda c: (c["backend"] != "cadence", order.get(c["schedule"], 2),
                            c["schedule"], c["microbatches"]))  # fmt: skip
    return out


def run(cfg: dict[str, Any], result: Path) -> None:
    torch.set_num_threads(1)
    ctx = init_from_env()
    try:
        spec = get_model_spec(cfg["model"])
        torch.manual_seed(0)
        model = spec.build()
        assert isinstance(model, BlockModel)
        plan = _plan(cfg, model, ctx.is_main)
        ranges = tuple((a, b) for a, b in plan["ranges"])
        x, y = spec.synthetic_batch(cfg["batch_size"])
        todo = candidates(plan, cfg["microbatches"])
        executors = [
            pipeline(model, loss_fn, c["schedule"], c["microbatches"], ranges, backend=c["backend"])
            for c in todo
        ]
        for _ in range(cfg["warmup"]):
            for ex in executors:
                _step(ex, x, y)
        times: list[list[float]] = [[] for _ in todo]
        for rnd in range(cfg["rounds"]):
            order = list(range(len(todo)))
            for i in order if rnd % 2 == 0 else reversed(order):
                times[i].append(_step(executors[i], x, y))
        peaks = [_peak_step(ex, x, y) for ex in executors]
        stage_params = sum(p.numel() * p.element_size() for p in executors[0].module.parameters())
        mine = {"times": times, "peaks": peaks, "params": stage_params}
        every = comm.all_gather_object(mine)
        if ctx.is_main:
            rows = []
            for i, c in enumerate(todo):
                slowest = [max(r["times"][i][k] for r in every) for k in range(cfg["rounds"])]
                rows.append({
                    **c,
                    "step_s": slowest,
                    "measured_s": statistics.median(slowest),
                    "measured_peak_bytes": [r["params"] + r["peaks"][i] for r in every],
                })  # fmt: skip
            result.write_text(json.dumps({"plan": plan, "rows": rows}, indent=2) + "\n")
    finally:
        destroy()


def main(argv: list[str]) -> int:
    return worker_entry(lambda: run(json.loads(Path(argv[0]).read_text()), Path(argv[1])))


if __name__ == "__main__":
    exit_worker(main(sys.argv[1:]))
