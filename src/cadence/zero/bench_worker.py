"""One rank of one `cadence bench zero` job: `python -m cadence.zero.bench_worker SPEC.json DIR`.

Every job (DDP, FSDP2, DeepSpeed, cadence's stages) runs this same loop on the same model,
data, global batch and seed; only `peers.py`'s wrap differs. The loop times each step end to
end and reads the emulated host's interface counters (bytes the kernel actually moved, headers
included) just before the timed window and just after it. Writes DIR/rank<R>.json.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.comm import ops as comm
from cadence.netem.counters import read_iface_bytes
from cadence.zero.config import DEFAULT_FORWARD_GATHER_SHARE, ZeroConfig

JOB_KINDS = ("ddp", "fsdp2", "deepspeed", "zero")


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What one benchmark job trains and how."""

    name: str
    """Row label, e.g. "zero2-onebit-bf16"."""
    kind: str
    """One of `JOB_KINDS`."""
    stage: int = 0
    """ZeRO stage for kind "zero"."""
    compression: str = "none"
    """cadence.zero compression for kind "zero"."""
    gather_dtype: str = "fp32"
    """cadence.zero parameter all-gather dtype for kind "zero"."""
    overlap_gather: bool = False
    """cadence.zero stages 1-2: parameter all-gathers overlap the next forward."""
    forward_gather_share: float = DEFAULT_FORWARD_GATHER_SHARE
    """cadence.zero: `ZeroConfig.forward_gather_share` (0: gathers in backward order)."""
    gather_lane: bool = True
    """cadence.zero: `ZeroConfig.gather_lane`."""
    replicated_update: bool = False
    """cadence.zero: `ZeroConfig.replicated_update`."""
    replicated_share: float = 1.0
    """cadence.zero: `ZeroConfig.replicated_share`."""
    model: str = "gpt_mini"
    """Model zoo name."""
    batch_size: int = 64
    """Global batch per step."""
    steps: int = 30
    """Steps to run."""
    window_start: int = 12
    """First timed step; steps before it are warm-up (and 1-bit Adam's fp32 phase)."""
    freeze_steps: int = 10
    """1-bit Adam warm-up steps."""
    lr: float = 2e-3
    """Adam learning rate (every job)."""
    seed: int = 0
    """Model initialisation and data order."""
    threads: int = 1
    """Intra-op threads per rank."""
    iface: str = "cad0"
    """The emulated host's interface whose counters are read."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def zero_config(self) -> ZeroConfig:
        """The `ZeroConfig` a job of kind "zero" runs (and is simulated) with; a UserError
        in one line for a combination cadence.zero refuses."""
        return ZeroConfig(
            stage=self.stage,
            compression=self.compression,
            freeze_steps=self.freeze_steps,
            gather_dtype=self.gather_dtype,
            overlap_gather=self.overlap_gather,
            forward_gather_share=self.forward_gather_share,
            gather_lane=self.gather_lane,
            replicated_update=self.replicated_update,
            replicated_share=self.replicated_share,
        )


def _build_job(spec: JobSpec, model: Any, world_size: int) -> Any:
    from cadence.zero import peers

    if spec.kind == "ddp":
        return peers.wrap_ddp(model, spec.lr)
    if spec.kind == "fsdp2":
        return peers.wrap_fsdp2(model, spec.lr)
    if spec.kind == "deepspeed":
        return peers.wrap_deepspeed(model, spec.lr, spec.batch_size // world_size)
    return peers.wrap_zero(model, spec.lr, spec.zero_config())


def run(spec: JobSpec, out_dir: Path) -> None:
    import torch

    from cadence.comm import all_reduce_sum, destroy, init_from_env
    from cadence.models import get_model_spec, load_dataset
    from cadence.train.sharding import batch_stream

    torch.set_num_threads(spec.threads)
    ctx = init_from_env()
    try:
        torch.manual_seed(spec.seed)
        model_spec = get_model_spec(spec.model)
        data = load_dataset(model_spec.datasets[0], model_spec, seed=spec.seed)
        job = _build_job(spec, model_spec.build(), ctx.world_size)
        times: list[float] = []
        losses: list[Any] = []
        counters: dict[str, tuple[int, int]] = {}
        batches = batch_stream(
            len(data.train_x), spec.batch_size, ctx.rank, ctx.world_size, spec.seed
        )
        t_prev = time.perf_counter()
        for idx in itertools.islice(batches, spec.steps):
            if len(times) == spec.window_start and ctx.world_size > 1:
                counters["start"] = read_iface_bytes(spec.iface)
            losses.append(job.train_step(data.train_x[idx], data.train_y[idx]))
            now = time.perf_counter()
            times.append(now - t_prev)
            t_prev = now
        if ctx.world_size > 1:
            counters["end"] = read_iface_bytes(spec.iface)
        job.close()
        mean_loss = all_reduce_sum(torch.stack(losses).float()) / ctx.world_size
        record = {
            "rank": ctx.rank,
            "iteration_times_s": times,
            "step_loss": mean_loss.tolist(),
            "iface_bytes": counters,
        }
        (out_dir / f"rank{ctx.rank}.json").write_text(json.dumps(record) + "\n")
        if ctx.world_size > 1:

            comm.barrier()  # leave together (see cadence.launch.worker)
    finally:
        destroy()


def main(argv: list[str]) -> int:
    from cadence.launch.errors import fail_worker

    spec = JobSpec(**json.loads(Path(argv[0]).read_text()))
    try:
        run(spec, Path(argv[1]))
    except BaseException as exc:  # record the cause for the supervisor, then die
        return fail_worker(int(os.environ.get("RANK", "0")), exc)
    return 0


if __name__ == "__main__":
    from cadence.launch.errors import exit_worker

    exit_worker(main(sys.argv[1:]))  # skips interpreter teardown (gloo threads abort there)
