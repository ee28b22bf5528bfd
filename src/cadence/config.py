"""Frozen configuration objects. Each field says what it means; validation lives in `__post_init__`
so a bad value fails where it is made, with one line naming it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cadence.errors import UserError
from cadence.models.refs import USER_ZOO_DATASETS, is_ref
from cadence.placement import check_device

OPTIMIZERS = ("adam", "adamw", "sgd")
ZERO_COMPRESSIONS = ("none", "fp16", "onebit")
ZERO_GATHER_DTYPES = ("fp32", "bf16")
AUTOTUNE_METHODS = ("off", "exhaustive", "guided")
STRATEGY_NAMES = ("cadence-dp", "ddp", "pipeline", "ps", "zero")
"""Every `--strategy`, sorted; `cadence.train.strategies` registers one of each (a unit test
checks), and this copy lets the command line refuse an unknown one without loading torch."""
ACCUMULATING_STRATEGIES = ("ddp", "cadence-dp", "zero")
"""Strategies whose wrapped model the loop trains with gradient accumulation (`grad_accum`):
the loop runs the first micro-batches of a step under the model's `no_sync()`. The parameter
server accumulates in its own step (`cadence.ps.runtime`), the pipeline runs grad_accum x the
micro-batches (`cadence.pipeline.train`)."""
USER_MODEL_STRATEGIES = ("ddp", "cadence-dp", "zero", "ps", "pipeline")
"""Strategies that train a user's own `--model pkg.module:factory`. The pipeline takes an
`nn.Sequential` only (it cuts between its modules) and refuses other modules when it wraps."""


def check_strategy_name(name: str) -> None:
    """`UserError` naming the accepted strategies unless `name` is one."""
    if name not in STRATEGY_NAMES:
        raise UserError(f"unknown strategy '{name}': choose one of {', '.join(STRATEGY_NAMES)}")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything `cadence train` needs to run one job; the same object reaches every worker."""

    model: str = "cnn"
    """Model zoo name (`cadence.models.model_names()`), or `pkg.module:factory`: a function
    returning the user's own `nn.Module` (`cadence.models.user`)."""
    dataset: str | None = None
    """Dataset name, or `pkg.module:factory` returning the user's (train, test) data; None
    picks a zoo model's default (digits for image models)."""
    loss: str | None = None
    """`pkg.module:fn`, fn(output, target) returning the batch's mean loss; None: cross
    entropy over the last dimension (the zoo's loss)."""
    workers: int = 2
    """Number of worker processes (ranks). Ignored under torchrun, which sets WORLD_SIZE."""
    batch_size: int = 64
    """Global batch size per step, split evenly across workers."""
    grad_accum: int = 1
    """Gradient accumulation: each optimizer step runs this many micro-batches of
    batch_size / grad_accum samples (over all workers), each loss divided by grad_accum, the
    gradients synchronised (ps: pushed) once, with the last micro-batch's backward. The
    pipeline runs grad_accum x `microbatches` micro-batches in one step instead."""
    epochs: int = 12
    """Passes over the training split."""
    steps: int | None = None
    """Run exactly this many optimizer steps (as many epochs as that takes), instead of `epochs`."""
    lr: float = 2e-3
    """Learning rate."""
    optimizer: str = "adam"
    """One of `OPTIMIZERS`."""
    momentum: float = 0.9
    """Momentum for SGD (ignored by Adam)."""
    weight_decay: float = 0.0
    """Weight decay for every optimizer."""
    strategy: str = "ddp"
    """Distribution strategy, one of `STRATEGY_NAMES`."""
    seed: int = 0
    """Seed for model initialisation, data split and shuffling; equal on every rank."""
    out: str = "runs"
    """Directory under which `<name>/` receives metrics, plot and checkpoint."""
    name: str | None = None
    """Run name; None makes `<model>-<strategy>-<timestamp>`."""
    threads: int | None = None
    """Intra-op threads per worker; None shares the machine's cores evenly between workers."""
    device: str = "auto"
    """Where workers compute: auto (a GPU per worker over NCCL where the host has one for each,
    else the CPU), cpu, or cuda (GPUs shared over gloo where there are fewer than workers)."""
    emulate_bandwidth: str | None = None
    """Run each worker in its own network namespace with links capped at this rate, e.g. 400mbit."""
    master_port: int | None = None
    """Rendezvous port for local launches; None picks a free one."""
    eval_every_epoch: bool = True
    """Evaluate on the test split after every epoch (always done once at the end)."""
    # --- data parallel (--strategy ddp / cadence-dp) ---
    ddp_bucket_mb: float = 25.0
    """DDP's gradient bucket size in MB (torch's default is 25)."""
    dp_threshold_mb: float | None = None
    """cadence-dp split/fuse threshold in MB (the starting point when autotuning); None: a
    quarter of the model's gradient bytes, within 1-4 MiB."""
    reorder_k: int | None = None
    """cadence-dp backward reordering point K (1-based layer); None keeps autograd's order."""
    autotune: str = "off"
    """cadence-dp warm-up autotuning of threshold and K: off, exhaustive or guided."""
    autotune_file: str | None = None
    """cadence-dp: save the tuned threshold and K here; when the file exists, load them and
    skip tuning."""
    autotune_trials: int = 100
    """cadence-dp exhaustive tuning: thresholds tried, each 10% above the previous."""
    # --- ZeRO (--strategy zero; cadence.zero) ---
    zero_stage: int = 2
    """ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters."""
    compression: str = "none"
    """ZeRO gradient/momentum traffic: none (fp32), fp16, or onebit (1-bit Adam)."""
    freeze_steps: int = 100
    """1-bit Adam warm-up: plain Adam steps before the variance freezes and compression starts."""
    replicated_update: bool = False
    """ZeRO stages 1-2 with onebit: after warm-up every rank applies every piece's update itself
    and no parameters are all-gathered (4 more bytes per parameter on every rank)."""
    replicated_share: float = 1.0
    """With replicated_update: only the front blocks holding up to this share of the parameters
    are updated on every rank; the rest are gathered from their owners as usual."""
    gather_dtype: str = "fp32"
    """ZeRO parameter all-gather on the wire: fp32, or bf16 (half the bytes; every rank's full
    parameters are then rounded to bf16, the owners keep fp32 masters)."""
    overlap_gather: bool = False
    """ZeRO stages 1-2: step() returns with the parameter all-gathers in flight and each block
    waits for its own just before its next forward."""
    # --- pipeline (--strategy pipeline; cadence.pipeline) ---
    stages: int = 2
    """Pipeline stages S, cut at block boundaries balanced on a quick profile; workers / S
    replicas of the pipeline train on shares of the batch (hybrid data x pipeline)."""
    microbatches: int = 4
    """Micro-batches M per step and replica; must divide each replica's share of the batch."""
    schedule: str = "1f1b"
    """Pipeline schedule: gpipe, 1f1b, kfkb:K (K micro-batches per message; K divides M), or
    auto: at start, simulate every schedule and micro-batch count under the probed link and
    `memory_limit` and run the fastest (`cadence.pipeline.planner`; M is then chosen too)."""
    memory_limit: int | None = None
    """Pipeline --schedule auto: bytes each stage may use (parameters, gradients, optimizer
    state, activations in flight); None: no limit."""
    recompute: bool = False
    """Pipeline: keep only stage inputs in forward and recompute activations in backward."""
    pipeline_backend: str = "auto"
    """Pipeline runtime: torch (torch's runtime on our action lists), cadence (ours; needed for
    kfkb:K>1 and recompute), torch-builtin (torch's ScheduleGPipe/Schedule1F1B), auto."""
    replan_every: int = 0
    """Pipeline --schedule auto: every N steps re-probe the stage link and re-plan schedule and
    micro-batches on the start's profiles (stage ranges stay); 0: never."""
    replan_file: str | None = None
    """Pipeline --schedule auto: rank 0 looks for this file before every step; when it is
    there, it deletes it and every rank re-plans (one tiny all-reduce per step); None: off."""

    # --- parameter server (--strategy ps; cadence.ps) ---
    servers: int = 1
    """Parameter servers S, started by the workers (server s by worker s % W); parameters are
    balanced over them by bytes, large tensors sliced."""
    consistency: str = "bsp"
    """Parameter server: bsp, asp, ssp:S (at most S steps ahead of the slowest worker) or
    backup:K (the first K of W gradients make each step; late ones are dropped)."""
    ps_priority: str = "graph"
    """Parameter server transfer order: fifo, layer (block order) or graph (torch.fx critical
    path from measured per-op times); ORDER+net adds priority classes on the emulated switch."""
    ps_checkpoint_dir: str | None = None
    """Parameter servers save their shards + optimizer state here and restore them on start."""
    ps_checkpoint_every: int = 0
    """Steps between parameter-server checkpoints (0: only when training ends)."""
    ps_dead_after_s: float = 10.0
    """Seconds without a heartbeat after which the servers declare a worker dead (asp, ssp,
    backup: the others train on; bsp: they stop with an error naming it)."""
    straggler: str | None = None
    """`RANK:DELAY`: that parameter-server worker sleeps DELAY seconds every step."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1 (got {self.workers})")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.batch_size % self.workers and self.strategy != "pipeline":
            raise UserError(
                f"--batch-size {self.batch_size} is not divisible by --workers {self.workers}: "
                f"use a multiple of {self.workers}"
            )
        self._check_accumulation()
        self._check_user_parts()
        if self.epochs < 1:
            raise UserError(f"--epochs must be at least 1 (got {self.epochs})")
        if self.steps is not None and self.steps < 1:
            raise UserError(f"--steps must be at least 1 (got {self.steps})")
        if not self.lr > 0:
            raise UserError(f"--lr must be positive (got {self.lr})")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(
                f"unknown optimizer '{self.optimizer}': choose one of {', '.join(OPTIMIZERS)}"
            )
        if self.threads is not None and self.threads < 1:
            raise UserError(f"--threads must be at least 1 (got {self.threads})")
        check_device(self.device)
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise UserError(f"--master-port must be in 1..65535 (got {self.master_port})")
        self._check_dp()
        self._check_zero()
        self._check_pipeline()
        self._check_ps()

    def _check_accumulation(self) -> None:
        n = self.grad_accum
        if n < 1:
            raise UserError(f"--grad-accum must be at least 1 (got {n})")
        if n == 1:
            return
        if self.strategy == "pipeline":
            if self.schedule == "auto":
                raise UserError(
                    "--schedule auto picks the number of micro-batches itself: drop "
                    "--grad-accum, or give --schedule and --microbatches"
                )
            return  # grad_accum x the micro-batches: _check_pipeline checks they divide
        if self.batch_size % (self.workers * n):
            raise UserError(
                f"--batch-size {self.batch_size} does not split into {n} micro-batches on each "
                f"of {self.workers} workers: use a multiple of {self.workers * n}"
            )

    def _check_user_parts(self) -> None:
        """What a user's own model, dataset or loss (`pkg.module:name`) cannot be used with."""
        if is_ref(self.model) and not (is_ref(self.dataset) or self.dataset in USER_ZOO_DATASETS):
            raise UserError(
                f"--model {self.model} needs --dataset {' or '.join(USER_ZOO_DATASETS)} or "
                f"pkg.module:factory (your data), not {self.dataset or 'none'}"
            )
        if is_ref(self.model) and self.strategy not in USER_MODEL_STRATEGIES:
            raise UserError(
                f"--strategy {self.strategy} trains zoo models only: train --model "
                f"{self.model} with --strategy {', '.join(USER_MODEL_STRATEGIES)}"
            )
        if is_ref(self.model) and self.autotune == "guided":
            raise UserError(
                "--autotune guided profiles a zoo model: use --autotune exhaustive with "
                f"--model {self.model}"
            )

    def _check_ps(self) -> None:
        from cadence.ps.config import ps_config  # torch-free

        if self.strategy != "ps":
            if self.straggler is not None:
                raise UserError("--straggler is for --strategy ps")
            return
        ps_config(self, self.workers)  # validates; the workers build theirs the same way
        from cadence.extras import require

        require("zmq")  # before any worker starts: one line, not each worker's traceback
        if self.ps_priority.endswith("+net") and self.emulate_bandwidth in (None, "none"):
            raise UserError(
                f"--ps-priority {self.ps_priority} sets priority classes on the emulated "
                "switch: it needs --emulate-bandwidth RATE"
            )

    def _check_dp(self) -> None:
        if not self.ddp_bucket_mb > 0:
            raise UserError(f"--bucket-mb must be positive (got {self.ddp_bucket_mb})")
        if self.dp_threshold_mb is not None and not self.dp_threshold_mb > 0:
            raise UserError(f"--threshold-mb must be positive (got {self.dp_threshold_mb})")
        if self.reorder_k is not None and self.reorder_k < 1:
            raise UserError(f"--reorder-k must be at least 1 (got {self.reorder_k})")
        if self.autotune_trials < 1:
            raise UserError(f"--autotune-trials must be at least 1 (got {self.autotune_trials})")
        if self.autotune not in AUTOTUNE_METHODS:
            raise UserError(
                f"unknown --autotune '{self.autotune}': choose one of "
                f"{', '.join(AUTOTUNE_METHODS)}"
            )

    def _check_pipeline(self) -> None:
        from cadence.pipeline.schedule import build_schedule  # torch-free

        if self.replan_every < 0:
            raise UserError(f"--replan-every must be 0 (never) or more (got {self.replan_every})")
        if (self.replan_every or self.replan_file) and (
            self.strategy != "pipeline" or self.schedule != "auto"
        ):
            flag = "--replan-every" if self.replan_every else "--replan-file"
            raise UserError(
                f"{flag} re-runs the pipeline planner: use it with --strategy pipeline "
                f"--schedule auto (got --strategy {self.strategy} --schedule {self.schedule})"
            )
        if self.strategy != "pipeline":
            return
        if self.stages < 1 or self.workers % self.stages:
            raise UserError(
                f"--strategy pipeline needs --workers a multiple of --stages (replicas x "
                f"stages): --stages {self.stages} does not divide --workers {self.workers}"
            )
        replicas = self.workers // self.stages
        per_replica = self.batch_size // replicas
        if self.batch_size % replicas:
            raise UserError(
                f"--batch-size {self.batch_size} does not split over {replicas} pipeline "
                f"replicas: use a multiple of {replicas}"
            )
        if self.memory_limit is not None and self.memory_limit < 1:
            raise UserError(f"--memory-limit must be positive (got {self.memory_limit})")
        if self.schedule == "auto":  # the planner picks M and the schedule; it checks the rest
            if self.pipeline_backend != "auto":
                raise UserError("--schedule auto picks its runtime: leave --pipeline-backend auto")
            return
        # --grad-accum N runs N x the micro-batches in a step (cadence.pipeline.train).
        count = self.microbatches * self.grad_accum
        if self.microbatches < 1 or per_replica % count:
            fits = [
                m for m in range(1, per_replica + 1) if per_replica % (m * self.grad_accum) == 0
            ]
            accum = f" x --grad-accum {self.grad_accum}" if self.grad_accum > 1 else ""
            if not fits:
                raise UserError(
                    f"--grad-accum {self.grad_accum} does not divide the {per_replica} samples "
                    "per replica: use a smaller --grad-accum or a larger --batch-size"
                )
            raise UserError(
                f"--microbatches {self.microbatches}{accum} does not divide the {per_replica} "
                f"samples per replica: use one of {', '.join(map(str, fits))}"
            )
        schedule = build_schedule(self.schedule, self.stages, count, self.recompute)
        backends = ("auto", "cadence", "torch", "torch-builtin")
        if self.pipeline_backend not in backends:
            raise UserError(
                f"unknown --pipeline-backend '{self.pipeline_backend}': "
                f"choose one of {', '.join(backends)}"
            )
        torch_ok = schedule.group_size == 1 and not self.recompute
        if self.pipeline_backend == "torch-builtin":
            torch_ok = torch_ok and schedule.name in ("gpipe", "1f1b")
        if self.pipeline_backend.startswith("torch") and not torch_ok:
            raise UserError(
                f"--pipeline-backend {self.pipeline_backend} cannot run --schedule "
                f"{self.schedule}{' with --recompute' if self.recompute else ''}: use cadence"
            )

    def _check_zero(self) -> None:
        if self.zero_stage not in (1, 2, 3):
            raise UserError(f"--zero-stage must be 1, 2 or 3 (got {self.zero_stage})")
        if self.compression not in ZERO_COMPRESSIONS:
            raise UserError(
                f"unknown compression '{self.compression}': "
                f"choose one of {', '.join(ZERO_COMPRESSIONS)}"
            )
        if self.freeze_steps < 0:
            raise UserError(f"--freeze-steps must be non-negative (got {self.freeze_steps})")
        if self.strategy == "zero" and self.compression == "onebit":
            if self.optimizer != "adam":
                raise UserError(
                    f"--compression onebit is 1-bit Adam: use --optimizer adam, "
                    f"not {self.optimizer}"
                )
            if self.freeze_steps < 1:
                raise UserError("--compression onebit needs --freeze-steps of at least 1")
        if self.gather_dtype not in ZERO_GATHER_DTYPES:
            raise UserError(
                f"unknown --gather-dtype '{self.gather_dtype}': "
                f"choose one of {', '.join(ZERO_GATHER_DTYPES)}"
            )
        if self.strategy == "zero" and self.replicated_update and self.gather_dtype != "fp32":
            raise UserError("--replicated-update gathers no parameters: drop --gather-dtype")
        replicable = self.compression == "onebit" and self.zero_stage < 3
        if self.strategy == "zero" and self.replicated_update and not replicable:
            raise UserError(
                "--replicated-update needs --compression onebit and --zero-stage 1 or 2"
            )
        if not 0 <= self.replicated_share <= 1:
            raise UserError(
                f"--replicated-share must be within [0, 1] (got {self.replicated_share})"
            )
        if self.replicated_share != 1 and not self.replicated_update:
            raise UserError("--replicated-share needs --replicated-update")
        if self.strategy == "zero" and self.zero_stage == 3 and not self.eval_every_epoch:
            # Stage 3 gathers full parameters for checkpoints during each epoch's evaluation.
            raise UserError("--zero-stage 3 needs evaluation after every epoch")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainConfig:
        return cls(**data)
