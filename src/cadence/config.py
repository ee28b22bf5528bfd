"""`cadence train`'s configuration: a frozen root, `TrainConfig`, made of frozen sections (job,
model, data, optim, cluster, dp, zero, pipeline, ps). Each field is stated once, with its type
(`Literal` where it has a fixed set of values), its default and a docstring; the command line's
flags and the TOML file's keys are derived from it (`cadence.config_flags`). Validation lives in
`__post_init__` so a bad value fails where it is made, with one line naming its flag.

Every field also has a *flat key*, unique over all sections: its flag without the dashes
(`--batch-size` -> `batch_size`, `--zero-stage` -> `zero_stage`). `TrainConfig.from_flat(**keys)`
builds a config from flat keys, and `to_json()` writes them (a run's `metrics.json`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from cadence.errors import UserError
from cadence.localsgd.config import LocalSGDConfig, OuterDtype
from cadence.placement import check_device
from cadence.sizes import parse_memory_limit

Strategy = Literal[
    "cadence-dp", "ddp", "diloco", "local-sgd", "pipeline", "ps", "torchft-diloco", "zero"
]
Optimizer = Literal["adam", "adamw", "sgd"]
Device = Literal["auto", "cpu", "cuda"]
Autotune = Literal["off", "exhaustive", "guided"]
ZeroStage = Literal[1, 2, 3]
ZeroCompression = Literal["none", "fp16", "onebit"]
GatherDtype = Literal["fp32", "bf16"]
DPCompression = Literal["none", "bf16", "fp16", "powersgd", "sign"]
DDPCommHook = Literal["none", "fp16", "powersgd"]
PipelineBackend = Literal["auto", "cadence", "torch", "torch-builtin"]

OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
ZERO_COMPRESSIONS: tuple[str, ...] = get_args(ZeroCompression)
ZERO_GATHER_DTYPES: tuple[str, ...] = get_args(GatherDtype)
AUTOTUNE_METHODS: tuple[str, ...] = get_args(Autotune)
DP_COMPRESSIONS: tuple[str, ...] = get_args(DPCompression)
DDP_COMM_HOOKS: tuple[str, ...] = get_args(DDPCommHook)
PIPELINE_BACKENDS: tuple[str, ...] = get_args(PipelineBackend)
STRATEGY_NAMES: tuple[str, ...] = get_args(Strategy)
"""Every `--strategy`, sorted; `cadence.train.strategies` registers one of each (a unit test
checks), and this copy lets the command line refuse an unknown one without loading torch."""
ACCUMULATING_STRATEGIES = ("ddp", "cadence-dp", "zero", "local-sgd", "diloco", "torchft-diloco")
"""Strategies whose wrapped model the loop trains with gradient accumulation (`grad_accum`):
the loop runs the first micro-batches of a step under the model's `no_sync()`. The parameter
server accumulates in its own step (`cadence.ps.runtime`), the pipeline runs grad_accum x the
micro-batches (`cadence.pipeline.train`)."""
USER_MODEL_STRATEGIES = (
    "ddp", "cadence-dp", "zero", "ps", "pipeline", "local-sgd", "diloco", "torchft-diloco"
)
"""Strategies that train a user's own `--model pkg.module:factory`. The pipeline takes an
`nn.Sequential` only (it cuts between its modules) and refuses other modules when it wraps."""


def check_strategy_name(name: str) -> None:
    """`UserError` naming the accepted strategies unless `name` is one."""
    if name not in STRATEGY_NAMES:
        raise UserError(f"unknown strategy '{name}': choose one of {', '.join(STRATEGY_NAMES)}")


def _check_choice(flag: str, value: object, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        names = ", ".join(map(str, choices))
        raise UserError(f"unknown {flag} '{value}': choose one of {names}")


def opt(
    default: Any, *, flag: str | None = None, metavar: str | None = None, parse: Any = None
) -> Any:
    """A field's default plus how its flag differs from `--<field-name>`: `flag` names it,
    `metavar` labels its value in help, `parse(text)` turns the flag's (or TOML's) text into
    the field's value."""
    return field(default=default, metadata={"flag": flag, "metavar": metavar, "parse": parse})


@dataclass(frozen=True, kw_only=True)
class JobSection:
    """What to run and where its outputs go."""

    strategy: Strategy = "ddp"
    """How the workers share the training (docs/ has a page per strategy)."""
    epochs: int = 12
    """Passes over the training split."""
    steps: int | None = None
    """Run exactly this many optimizer steps (as many epochs as that takes) instead of epochs."""
    seed: int = 0
    """Seed for model initialisation, data split and shuffling; equal on every rank."""
    out: str = "runs"
    """Directory under which <name>/ receives metrics, plot and checkpoint."""
    name: str | None = None
    """Run name; none: <model>-<strategy>-<time>."""
    eval_every_epoch: bool = True
    """Evaluate on the test split after every epoch (always done once at the end)."""
    eval_every_steps: int | None = opt(None, metavar="N")
    """Also evaluate on the test split every N steps, recording (step, training seconds so far
    without evaluations, test loss, accuracy) in metrics.json's `evals`; none: epoch ends only."""
    checkpoint_every: int = opt(0, metavar="N")
    """Also write the resumable checkpoint (<run>/checkpoint/) every N steps; 0: only at
    epoch ends and when training ends."""
    resume: str | None = opt(None, metavar="RUN_DIR")
    """Continue the run in RUN_DIR from its latest checkpoint, with the same settings (only
    --steps, --epochs, --checkpoint-every and outputs may change); outputs stay in RUN_DIR."""

    def __post_init__(self) -> None:
        _check_choice("strategy", self.strategy, STRATEGY_NAMES)
        if self.checkpoint_every < 0:
            raise UserError(
                f"--checkpoint-every must be 0 (epoch ends) or more (got {self.checkpoint_every})"
            )
        if self.epochs < 1:
            raise UserError(f"--epochs must be at least 1 (got {self.epochs})")
        if self.steps is not None and self.steps < 1:
            raise UserError(f"--steps must be at least 1 (got {self.steps})")
        if self.eval_every_steps is not None and self.eval_every_steps < 1:
            raise UserError(f"--eval-every-steps must be at least 1 (got {self.eval_every_steps})")


@dataclass(frozen=True, kw_only=True)
class ModelSection:
    """The model and its loss."""

    name: str = opt("cnn", flag="--model")
    """Model zoo name (`cadence models`), or pkg.module:factory: factory() returns your
    nn.Module (docs/your-model.md)."""
    loss: str | None = opt(None, metavar="PKG.MODULE:FN")
    """fn(output, target) returning the batch's mean loss; none: cross entropy over the last
    dimension (the zoo's loss)."""


@dataclass(frozen=True, kw_only=True)
class DataSection:
    """The data and how much of it one optimizer step takes."""

    dataset: str | None = None
    """digits, stdlib-text or synthetic (none: the zoo model's own), or pkg.module:factory:
    factory() returns (train, test) of (input, target) samples."""
    batch_size: int = 64
    """Global batch: samples per optimizer step over all workers, split evenly across them."""
    grad_accum: int = opt(1, metavar="N")
    """N micro-batches of batch_size / N samples (over all workers) per optimizer step, each
    loss divided by N, gradients synced once (ps: pushed once); the pipeline runs N x
    microbatches micro-batches in one step instead."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.grad_accum < 1:
            raise UserError(f"--grad-accum must be at least 1 (got {self.grad_accum})")


@dataclass(frozen=True, kw_only=True)
class OptimSection:
    """The optimizer."""

    name: Optimizer = opt("adam", flag="--optimizer")
    """The optimizer every strategy builds over the model's parameters."""
    lr: float = 2e-3
    """Learning rate."""
    momentum: float = 0.9
    """SGD momentum (Adam ignores it)."""
    weight_decay: float = 0.0
    """Weight decay, for every optimizer."""

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            choices = ", ".join(OPTIMIZERS)
            raise UserError(f"unknown optimizer '{self.name}': choose one of {choices}")
        if not self.lr > 0:
            raise UserError(f"--lr must be positive (got {self.lr})")


@dataclass(frozen=True, kw_only=True)
class ClusterSection:
    """The worker processes and the network between them."""

    workers: int = 2
    """Worker processes (ranks); under torchrun, WORLD_SIZE decides."""
    threads: int | None = None
    """Intra-op threads per worker; none: the machine's cores shared evenly."""
    device: Device = "auto"
    """auto (a GPU per worker over NCCL where there are enough, else the CPU), cpu, or cuda
    (fewer GPUs than workers: shared over gloo)."""
    emulate_bandwidth: str | None = opt(None, metavar="RATE")
    """Run the workers as hosts of an emulated cluster with links capped at RATE, e.g. 400mbit."""
    master_port: int | None = None
    """Rendezvous port of local launches; none: a free one."""
    timeout_s: float = opt(300.0, flag="--timeout", metavar="SECONDS")
    """A rank that waits this long for a peer (rendezvous or collective, e.g. across a link
    that is down) fails and the job stops naming the timeout; a peer that dies is noticed at
    once (its connections close)."""
    keep_heap: bool = True
    """Fix glibc's malloc thresholds in every worker, whatever the strategy (`cadence.heap`), so
    each step reuses the heap's pages, as profiles and the simulator assume; off: glibc's own,
    as a plain torch script runs (under DDP, GPT-2 faulted 2,000-2,400 pages a step back in)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1 (got {self.workers})")
        if self.threads is not None and self.threads < 1:
            raise UserError(f"--threads must be at least 1 (got {self.threads})")
        check_device(self.device)
        if not self.timeout_s > 0:
            raise UserError(f"--timeout must be positive (got {self.timeout_s})")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise UserError(f"--master-port must be in 1..65535 (got {self.master_port})")


@dataclass(frozen=True, kw_only=True)
class DPSection:
    """Data parallel: --strategy ddp and cadence-dp."""

    bucket_mb: float | None = None
    """ddp: gradient bucket size in MB, the first bucket's too; none: torch's default (25 MB
    buckets after a first one of 1 MB, which lets the last layers' gradients go early)."""
    threshold_mb: float | None = None
    """cadence-dp: split/fuse threshold in MB, where autotuning starts; none: a quarter of the
    model's gradients, within 1-4 MiB."""
    reorder_k: int | None = None
    """cadence-dp: backward reordering point K (1-based layer); none: autograd's order."""
    autotune: Autotune = "off"
    """cadence-dp: tune threshold and K in warm-up."""
    autotune_file: str | None = opt(None, metavar="FILE")
    """cadence-dp: save the tuned setting here; when the file exists, load it and skip tuning."""
    autotune_trials: int = 100
    """cadence-dp exhaustive tuning: thresholds tried, each 10% above the last."""
    compression: DPCompression = opt("none", flag="--dp-compression")
    """cadence-dp: gradients on the wire per chunk: none (fp32), bf16, fp16, sign (1 bit with
    error feedback) or powersgd (low rank with error feedback)."""
    powersgd_rank: int = 2
    """cadence-dp powersgd and ddp's powersgd hook: rank of each matrix's approximation."""
    powersgd_start_step: int = 10
    """cadence-dp powersgd and ddp's powersgd hook: iterations reduced uncompressed before
    compression starts."""
    ddp_comm_hook: DDPCommHook = "none"
    """ddp: torch's communication hook on the gradient buckets: none, fp16
    (`fp16_compress_hook`) or powersgd (`powerSGD_hook` with error feedback, at
    --powersgd-rank from step --powersgd-start-step)."""

    def __post_init__(self) -> None:
        if self.bucket_mb is not None and not self.bucket_mb > 0:
            raise UserError(f"--bucket-mb must be positive (got {self.bucket_mb})")
        if self.threshold_mb is not None and not self.threshold_mb > 0:
            raise UserError(f"--threshold-mb must be positive (got {self.threshold_mb})")
        if self.reorder_k is not None and self.reorder_k < 1:
            raise UserError(f"--reorder-k must be at least 1 (got {self.reorder_k})")
        if self.autotune_trials < 1:
            raise UserError(f"--autotune-trials must be at least 1 (got {self.autotune_trials})")
        _check_choice("--autotune", self.autotune, AUTOTUNE_METHODS)
        _check_choice("--dp-compression", self.compression, DP_COMPRESSIONS)
        _check_choice("--ddp-comm-hook", self.ddp_comm_hook, DDP_COMM_HOOKS)
        if self.compression != "none" and self.autotune != "off":
            raise UserError("--dp-compression cannot be combined with --autotune: choose one")
        if self.powersgd_rank < 1:
            raise UserError(f"--powersgd-rank must be at least 1 (got {self.powersgd_rank})")
        if self.powersgd_start_step < 0:
            raise UserError(
                f"--powersgd-start-step must be at least 0 (got {self.powersgd_start_step})"
            )


@dataclass(frozen=True, kw_only=True)
class ZeroSection:
    """ZeRO: --strategy zero (cadence.zero)."""

    stage: ZeroStage = opt(2, flag="--zero-stage")
    """1 shards optimizer state, 2 also gradients, 3 also parameters."""
    compression: ZeroCompression = "none"
    """Gradient/momentum traffic: none (fp32), fp16, or onebit (1-bit Adam)."""
    freeze_steps: int = 100
    """onebit: plain Adam warm-up steps before the variance freezes and compression starts."""
    replicated_update: bool = False
    """Stages 1-2 with onebit: after warm-up every rank updates every piece itself and no
    parameters are all-gathered (4 more bytes per parameter on every rank)."""
    replicated_share: float = opt(1.0, metavar="S")
    """With replicated_update: only the front blocks within this share of the parameters are
    updated on every rank; the rest are gathered from their owners."""
    gather_dtype: GatherDtype = "fp32"
    """Parameter all-gather on the wire; bf16 halves the bytes and rounds every rank's full
    parameters to bf16 (the owners keep fp32 masters)."""
    overlap_gather: bool = False
    """Stages 1-2: step() returns with the parameter all-gathers in flight and each block
    waits for its own just before its next forward."""

    def __post_init__(self) -> None:
        if self.stage not in (1, 2, 3):
            raise UserError(f"--zero-stage must be 1, 2 or 3 (got {self.stage})")
        if self.compression not in ZERO_COMPRESSIONS:
            raise UserError(
                f"unknown compression '{self.compression}': "
                f"choose one of {', '.join(ZERO_COMPRESSIONS)}"
            )
        if self.freeze_steps < 0:
            raise UserError(f"--freeze-steps must be non-negative (got {self.freeze_steps})")
        _check_choice("--gather-dtype", self.gather_dtype, ZERO_GATHER_DTYPES)
        if not 0 <= self.replicated_share <= 1:
            raise UserError(
                f"--replicated-share must be within [0, 1] (got {self.replicated_share})"
            )
        if self.replicated_share != 1 and not self.replicated_update:
            raise UserError("--replicated-share needs --replicated-update")


@dataclass(frozen=True, kw_only=True)
class PipelineSection:
    """Pipeline: --strategy pipeline (cadence.pipeline)."""

    stages: int = 2
    """Pipeline stages S, cut at block boundaries balanced on a quick profile; workers / S
    replicas of the pipeline train on shares of the batch."""
    microbatches: int = 4
    """Micro-batches M per step and replica; M must divide each replica's share of the batch."""
    schedule: str = opt("1f1b", metavar="gpipe|1f1b|kfkb:K|auto")
    """kfkb:K sends K micro-batches per message (K divides M); auto simulates every schedule
    and micro-batch count at start under the probed link and memory_limit and runs the
    fastest."""
    memory_limit: int | None = opt(None, metavar="BYTES", parse=parse_memory_limit)
    """schedule auto: bytes each stage may use, e.g. 2GiB; none: no limit."""
    recompute: bool = False
    """Keep only stage inputs in forward and recompute activations in backward."""
    backend: PipelineBackend = opt("auto", flag="--pipeline-backend")
    """Runtime: cadence (ours; needed for kfkb:K>1 and recompute), torch (torch's runtime on
    our action lists), torch-builtin (torch's ScheduleGPipe/Schedule1F1B)."""
    replan_every: int = opt(0, metavar="N")
    """schedule auto: every N steps re-probe the stage link and re-plan schedule and
    micro-batches (stage ranges stay); 0: never."""
    replan_file: str | None = opt(None, metavar="PATH")
    """schedule auto: re-plan before the next step when PATH appears (`touch PATH`; rank 0
    deletes it)."""

    def __post_init__(self) -> None:
        if self.replan_every < 0:
            raise UserError(f"--replan-every must be 0 (never) or more (got {self.replan_every})")
        if self.memory_limit is not None and self.memory_limit < 1:
            raise UserError(f"--memory-limit must be positive (got {self.memory_limit})")
        _check_choice("--pipeline-backend", self.backend, PIPELINE_BACKENDS)

    @property
    def auto(self) -> bool:
        """The planner picks schedule and micro-batches at start."""
        return self.schedule == "auto"


@dataclass(frozen=True, kw_only=True)
class PSSection:
    """Parameter server: --strategy ps (cadence.ps)."""

    servers: int = 1
    """Parameter servers, started by the workers (server s by worker s % workers); parameters
    are balanced over them by bytes, large tensors sliced."""
    consistency: str = opt("bsp", metavar="bsp|asp|ssp:S|backup:K")
    """ssp:S lets a worker run at most S steps ahead of the slowest; backup:K makes each step
    of the first K of the workers' gradients (late ones are dropped)."""
    priority: str = opt("graph", flag="--ps-priority", metavar="ORDER[+net]")
    """Transfer order fifo, layer (block order) or graph (torch.fx critical path); ORDER+net
    also installs priority classes on the emulated switch ports (needs emulate_bandwidth)."""
    checkpoint_dir: str | None = opt(None, flag="--ps-checkpoint-dir", metavar="DIR")
    """The servers save shards + optimizer state here and restore them on start."""
    checkpoint_every: int = opt(0, flag="--ps-checkpoint-every", metavar="N")
    """Steps between server checkpoints; 0: only when training ends."""
    dead_after_s: float = opt(10.0, flag="--ps-dead-after", metavar="SECONDS")
    """A worker silent this long is declared dead (asp, ssp, backup train on without it, bsp
    stops naming it)."""
    straggler: str | None = opt(None, metavar="RANK:DELAY")
    """That worker sleeps DELAY seconds every step."""


@dataclass(frozen=True, kw_only=True)
class LocalSGDSection:
    """Semi-synchronous data parallel: --strategy local-sgd and diloco (cadence.localsgd);
    torchft-diloco (torchft's DiLoCo, a peer to compare with) takes H and the outer step."""

    sync_every: int = opt(16, metavar="H")
    """Inner steps between syncs (each rank steps on its own gradients meanwhile): a few syncs
    per epoch of the zoo's small datasets; DiLoCo used 500 for language models. The loop also
    syncs at each epoch's end, before evaluating and saving the model."""
    outer_lr: float = 0.7
    """diloco: outer SGD learning rate on the averaged pseudo-gradient (DiLoCo's 0.7);
    local-sgd averages the models (outer lr 1, no momentum)."""
    outer_momentum: float = 0.9
    """diloco: outer Nesterov momentum (DiLoCo's 0.9; 0 for none)."""
    fragments: int = opt(1, metavar="K")
    """K > 1 streams the sync: the model is cut into K fragments by module order, synced in
    turn, each overlapped with --overlap-steps inner steps."""
    overlap_steps: int | None = opt(None, metavar="N")
    """Inner steps a fragment's sync travels before it is applied; none: 1 when streaming,
    else 0."""
    outer_dtype: OuterDtype = "fp32"
    """Pseudo-gradients on the wire: fp32, bf16, or int8 (absmax-scaled, all-gathered)."""

    def __post_init__(self) -> None:
        self.to_config()  # LocalSGDConfig checks the values

    def to_config(self, averaging: bool = False) -> LocalSGDConfig:
        """The runtime's settings; `averaging`: local SGD (outer lr 1, no momentum)."""
        return LocalSGDConfig(
            sync_every=self.sync_every,
            outer_lr=1.0 if averaging else self.outer_lr,
            outer_momentum=0.0 if averaging else self.outer_momentum,
            nesterov=not averaging,
            fragments=self.fragments,
            overlap_steps=self.overlap_steps,
            outer_dtype=self.outer_dtype,
        )


SECTIONS: dict[str, type] = {
    "job": JobSection,
    "model": ModelSection,
    "data": DataSection,
    "optim": OptimSection,
    "cluster": ClusterSection,
    "dp": DPSection,
    "zero": ZeroSection,
    "pipeline": PipelineSection,
    "ps": PSSection,
    "localsgd": LocalSGDSection,
}
"""TrainConfig's sections in the order `cadence train --help` shows them."""


def flag_of(section_field: Any) -> str:
    """A section field's command-line flag: its `opt(flag=...)`, else `--<name>`."""
    return section_field.metadata.get("flag") or "--" + section_field.name.replace("_", "-")


def flat_keys() -> dict[str, tuple[str, str]]:
    """Every field's flat key (its flag without dashes) -> (section, field name)."""
    out: dict[str, tuple[str, str]] = {}
    for section, cls in SECTIONS.items():
        for f in fields(cls):
            out[flag_of(f)[2:].replace("-", "_")] = (section, f.name)
    return out


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything `cadence train` needs to run one job; the same object reaches every worker.
    Build it from sections (`TrainConfig(data=DataSection(batch_size=32))`) or from flat keys
    (`TrainConfig.from_flat(batch_size=32)`); a section left out takes its defaults."""

    job: JobSection = field(default_factory=JobSection)
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    dp: DPSection = field(default_factory=DPSection)
    zero: ZeroSection = field(default_factory=ZeroSection)
    pipeline: PipelineSection = field(default_factory=PipelineSection)
    ps: PSSection = field(default_factory=PSSection)
    localsgd: LocalSGDSection = field(default_factory=LocalSGDSection)

    def __post_init__(self) -> None:
        from cadence.config_checks import check_train_config  # the checks across sections

        check_train_config(self)

    @classmethod
    def from_flat(cls, **keys: Any) -> TrainConfig:
        """A config from flat keys (`batch_size=32, zero_stage=3`): one per flag, without the
        dashes; an unknown key is refused in one line naming the close ones."""
        known = flat_keys()
        grouped: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        for key, value in keys.items():
            if key not in known:
                raise UserError(f"unknown TrainConfig key '{key}': {_close(key, known)}")
            section, name = known[key]
            grouped[section][name] = value
        return cls(**{s: SECTIONS[s](**kw) for s, kw in grouped.items()})

    def to_flat(self) -> dict[str, Any]:
        """The flat keys and their values (what `from_flat` takes back)."""
        return {k: getattr(getattr(self, s), n) for k, (s, n) in flat_keys().items()}

    def to_json(self) -> dict[str, Any]:
        """The flat form, as a run's `metrics.json` records it and the workers receive it."""
        return self.to_flat()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainConfig:
        return cls.from_flat(**data)


def _close(key: str, known: dict[str, Any]) -> str:
    import difflib

    near = difflib.get_close_matches(key, list(known), n=3)
    return f"did you mean {' or '.join(near)}?" if near else "see `cadence train --help`"
