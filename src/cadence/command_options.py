"""Options of the commands besides `cadence train` that no `TrainConfig` section holds: frozen
tables, each field stated once with its type, default and docstring, from which
`cadence.config_flags.add_flags` derives the flags (and a TOML file's `[table]` keys). An option
that means what a `TrainConfig` field means (`--model`, `--workers`, `--batch-size`,
`--zero-stage`, `--threshold-mb`, ...) is taken from that field instead, so it has one name,
type and help everywhere. Kept free of heavy imports: `cadence --help` loads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cadence.config import opt
from cadence.errors import UserError
from cadence.sim.stepcost import OPTIMIZERS as STEP_OPTIMIZERS
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION
from cadence.sizes import parse_memory_limit

SIM_STRATEGIES = ("cadence-dp", "ddp", "zero")
"""The strategies `cadence simulate` predicts (`cadence plan` ranks the others too)."""
SIM_OPTIMIZERS: tuple[str, ...] = STEP_OPTIMIZERS
"""Optimizers whose step the simulator charges (`cadence train`'s, and none: no step)."""


def _at_least(flag: str, value: float | None, low: float) -> None:
    if value is not None and not value >= low:
        raise UserError(f"{flag} must be >= {low:g}, got {value}")


@dataclass(frozen=True, kw_only=True)
class NetworkModel:
    """The network the simulator and planners model (a link rate here is a model's input;
    `--emulate-bandwidth` caps real links instead)."""

    bandwidth: str = opt("10gbit", metavar="RATE")
    """Line rate of each worker's modelled link, e.g. 400mbit (plan pipeline: between stages)."""
    latency: float = opt(0.0, metavar="SECONDS")
    """Seconds per message (alpha)."""
    payload_fraction: float = opt(TCP_PAYLOAD_FRACTION, metavar="SHARE")
    """Share of the link rate that carries data (TCP over Ethernet, MTU 1500)."""
    calibration: str | None = opt(None, metavar="FILE")
    """`cadence calibrate` JSON: the links' measured alpha-beta, each collective's own alpha
    included (replaces bandwidth, latency and payload fraction; bench sim: the alphas only,
    beta from each run's cap, for every row of --held-out instead of calibrating each
    cluster)."""
    calibration_latency: Literal["by-size", "fitted"] = "by-size"
    """With calibration: price each all-reduce's per-message latency as measured at its own
    size (by-size) or with the calibration's one fitted alpha (fitted)."""

    def __post_init__(self) -> None:
        _at_least("--latency", self.latency, 0.0)
        if not 0 < self.payload_fraction <= 1:
            raise UserError(f"--payload-fraction must be in (0, 1], got {self.payload_fraction}")


@dataclass(frozen=True, kw_only=True)
class ProfileOptions:
    """The profile (per-block costs) a prediction reads, or how `cadence profile` makes one."""

    file: str | None = opt(None, flag="--profile", metavar="FILE")
    """Saved `cadence profile` JSON; none: profile the model now."""
    micro_batch_size: int = opt(32, metavar="N")
    """Samples per worker in one forward/backward, the batch a profile times (--batch-size is
    the global batch of cadence train)."""
    profile_iterations: int = 5
    """Most timed iterations of a profile (medians are kept); it stops once they are known to
    within 1% (at least 3)."""
    block_timing: Literal["in-iteration", "separate", "auto"] = "in-iteration"
    """in-iteration (each block's share of whole iterations), separate (each block's forward
    and gradients in calls of their own), or auto (in-iteration on CUDA, separate on the CPU,
    as the pipeline planners profile)."""
    out: str | None = opt(None, metavar="FILE")
    """Save the profile JSON here."""
    workers_per_host: int = opt(1, metavar="N")
    """Training workers that will compute on each host at once: the profile is timed with
    N - 1 processes training the same model beside it, so it sees the cores shared as they
    will be, then put at the pace of iterations they all start together, as steps start."""

    def __post_init__(self) -> None:
        _at_least("--micro-batch-size", self.micro_batch_size, 1)
        _at_least("--profile-iterations", self.profile_iterations, 1)
        _at_least("--workers-per-host", self.workers_per_host, 1)


@dataclass(frozen=True, kw_only=True)
class SimulateOptions:
    """What the simulator runs beyond the model, the cluster and the strategy's settings."""

    optimizer_step: float | None = opt(None, metavar="SECONDS")
    """One optimizer step over the whole model; none: as the profile timed it where it was
    made, else timed now on this CPU."""
    replicas: int = 1
    """Workers simulated one by one (the others behave alike)."""
    clip: bool = False
    """The loop clips gradients by global norm before step."""
    iterations: int = 3
    """Simulated iterations measured (after a warm-up one)."""
    credit_mb: float | None = None
    """cadence-dp bytes in flight in MB; none: 2 x threshold (4 x for at least 8 chunks of
    gradients)."""
    trace: str | None = opt(None, metavar="FILE")
    """Write a Chrome-trace JSON of the timeline (Perfetto)."""
    png: str | None = opt(None, metavar="FILE")
    """Draw the command's picture here (simulate: the timeline; plan map: the map)."""
    json: str | None = opt(None, metavar="FILE")
    """Also write the results here as JSON: the figures (simulate, plan), the profile, the
    metrics (train), the zoo (models), the cluster or the probe (netem)."""

    def __post_init__(self) -> None:
        _at_least("--replicas", self.replicas, 1)
        _at_least("--iterations", self.iterations, 1)
        if self.credit_mb is not None and not self.credit_mb > 0:
            raise UserError(f"--credit-mb must be positive (got {self.credit_mb})")
        if self.optimizer_step is not None and not self.optimizer_step >= 0:
            raise UserError(f"--optimizer-step must be >= 0 seconds, got {self.optimizer_step}")


@dataclass(frozen=True, kw_only=True)
class PlanOptions:
    """The candidates `cadence plan` tries."""

    thresholds: str = opt("256kib,1mib,4mib,16mib", metavar="SIZES")
    """plan dp: cadence-dp thresholds to try, comma-separated."""
    reorder_ks: str = opt("none", metavar="KS")
    """plan dp: reordering points K to try, e.g. none,1,8."""
    worker_counts: str = opt("2,8,64", flag="--workers", metavar="COUNTS")
    """plan map: worker counts, comma-separated (the map's rows); bench tta: emulated host
    counts, one worker each."""
    bandwidths: str = opt("100mbit,1gbit,10gbit,100gbit", metavar="RATES")
    """plan map: modelled link rates, comma-separated (the map's columns)."""
    worker_memory: int | None = opt(
        None, flag="--memory-limit", metavar="BYTES", parse=parse_memory_limit
    )
    """Bytes each worker may use, e.g. 2GiB; a strategy needing more is marked, not picked."""
    microbatch_counts: str | None = opt(None, flag="--microbatches", metavar="COUNTS")
    """plan pipeline: micro-batch counts to try, e.g. 4,8; none: every divisor of the batch."""
    profiles: tuple[str, ...] = opt((), flag="--profile", metavar="FILE")
    """plan pipeline: saved `cadence profile` JSONs, one per batch size (several after one
    --profile, or --profile repeated); none: profile now."""
    methods: str | None = opt(None, metavar="NAMES")
    """plan tta and bench tta: methods, comma-separated (`cadence.sim.methods`: ddp+fp16,
    cadence-dp+sign, diloco:H16:K4, zero+onebit, ...); none: ddp with and without torch's
    hooks, cadence-dp's compressions, local SGD / DiLoCo at a few H, ZeRO + 1-bit Adam (bench
    tta: ddp must be among them, its final test loss is the target)."""
    target_loss: float | None = opt(None, metavar="LOSS")
    """plan tta: the loss to reach; none: the pilot's target."""
    target_steps: int | None = opt(None, metavar="N")
    """plan tta: the target is the loss ddp reaches in N steps, from the same samples; a
    pilot that stops short of N has its curves forecast to it from their pace against ddp's."""
    pilot: str | None = opt(None, metavar="FILE")
    """plan tta: JSON of a pilot run (`cadence bench tta` writes one per model and host count):
    per method, steps to the target or a curve of (step, loss)."""
    steps_to_target: str | None = opt(None, metavar="METHOD=N,...")
    """plan tta: the user's steps to the target per method, e.g. ddp=400,diloco:H16=520."""
    loop_costs: str | None = opt(None, metavar="FILE")
    """plan tta: what PowerSGD adds to a step in the loop, measured on local processes over
    the loopback (a few minutes) and saved here, or read from here if the file exists; none:
    its matrix products timed alone. Each probe's step is also a floor on its method's where
    the profile ran with as many workers per host."""


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What a benchmark runs and where it writes (options every `cadence bench` benchmark
    spells the same; each takes those it uses)."""

    models: str = opt("vgg16", metavar="NAMES")
    """Comma-separated zoo models."""
    caps: str = opt("400mbit", metavar="RATES")
    """Comma-separated link caps of the emulated cluster, e.g. 400mbit; none: loopback;
    balanced: per model, the cap where wire time = compute time."""
    repeats: int = 3
    """Rounds of every variant, alternating."""
    warmup: int = 2
    """Untimed rounds (or steps) before the timed ones."""
    out: str = opt("bench-out/bench.json", metavar="FILE")
    """JSON file of the results (a benchmark's PNG goes next to it)."""
    sizes: str | None = opt(None, metavar="SIZES")
    """Comma-separated message sizes (bench collectives, none: 1KB to 64MB, x4)."""
    collectives: str = opt("all_reduce,reduce_scatter,all_gather,broadcast", metavar="NAMES")
    """Collectives to time, comma-separated, from all_reduce, reduce_scatter, all_gather,
    broadcast, all_to_all (calibrate: all-reduce is always timed; also cadence's own
    ring_all_reduce, ring_reduce_scatter, ring_all_gather)."""
    ddp_buckets_mb: str = opt("5,100", metavar="MBS")
    """dp: DDP bucket sizes tried for the tuned DDP row, comma-separated."""
    ddp_fixed_heap: bool = False
    """dp: also run DDP with glibc's heap thresholds fixed as cadence-dp fixes them (variant
    ddp-heap): how much of cadence-dp's lead is that setting."""
    jobs: str = opt("", metavar="NAMES")
    """zero: comma-separated (empty: all): ddp, fsdp2, deepspeed-zero2,
    zero<1|2|3>-<none|fp16|onebit>[-bf16][-overlap][-backorder|-fwdorder][-onelane]."""
    contention: Literal["off", "on", "both"] = "both"
    """pipeline: time the schedules without, with, or both without and with background
    traffic on the stage link; soak: competing bulk TCP traffic both ways between hosts 0 and
    1 (on) or none (off)."""
    orders: str = opt("fifo,layer,graph,graph+net", metavar="ORDERS")
    """ps: --ps-priority values to compare, comma-separated."""
    straggler_model: str = opt("resnet32", metavar="NAME")
    """ps: the backup-worker and ASP runs train this model ('' skips them)."""
    run: bool = False
    """sim: first train --models at --caps in the emulated cluster (run JSONs next to --out)."""
    strategies: str = opt("ddp,cadence-dp", metavar="NAMES")
    """sim with --run, soak: strategies to train, comma-separated."""
    start_step: int = 100
    """soak: step of the start sample (one-off allocations come before it)."""
    pilot_steps: int | None = opt(None, metavar="N")
    """tta: steps of the pilot every method first trains on the loopback per model and host
    count, from which `cadence plan tta` forecasts the cells; none: a quarter of --steps."""
    pilot_only: bool = False
    """tta: run the pilots only, every method --pilot-steps steps on the loopback per model
    and host count (no caps, no root), for `cadence plan tta --pilot` on your own cluster."""
    rescore: str | None = opt(None, metavar="FILES")
    """tta: plan earlier runs' cells again (the JSONs they wrote, comma-separated) from new
    pilots, calibrations and profiles, scoring the plans against their measured runs without
    training them again; their models, caps, host counts, methods and steps are used."""
    every: int = opt(20, metavar="STEPS")
    """soak: steps between samples (the PNG)."""
    time_limit: float = opt(900.0, metavar="SECONDS")
    """soak: seconds per strategy; a run still going is stopped and reported as far as it
    got."""
    from_bench_dp: tuple[str, ...] = opt((), metavar="FILE")
    """sim: also predict the DDP and cadence-dp rows of `cadence bench dp` result files."""
    profiles: tuple[str, ...] = opt((), flag="--profile", metavar="FILE")
    """sim: saved profiles, one per model (several after one --profile, or --profile
    repeated); none: profile now."""
    held_out: str | None = opt(None, metavar="FILE")
    """sim: calibrate the links of each emulated cluster a held-out set
    (benchmarks/held_out.toml) trains on (`<out>.<cap>.<n>w.calibration.json`, kept), train
    every row there --repeats times, rows alternating, and print each row's error beside its
    run-to-run spread (a profile per round, at each row's per-worker batch and threads, taken
    before the round's first run that uses it; the prediction is their median), and what the
    caps alone predict."""
    measured: str | None = opt(None, metavar="FILE")
    """sim with --held-out: each row's runs from this earlier --held-out JSON of the same set
    instead of training them again; the profiles (--repeats of them) and predictions are made
    now."""

    def __post_init__(self) -> None:
        _at_least("--repeats", self.repeats, 1)
        _at_least("--warmup", self.warmup, 0)
        _at_least("--every", self.every, 1)


@dataclass(frozen=True, kw_only=True)
class NetemOptions:
    """The emulated cluster `cadence netem` makes, probes or loads: network namespaces joined
    by capped links (each subcommand takes the options it uses; the cap is
    `--emulate-bandwidth`, as in `cadence train`)."""

    hosts: int = 2
    """Hosts of the cluster."""
    priority_classes: int = opt(0, metavar="N")
    """N (2-4) htb priority classes on every port, by the TOS byte the parameter server's
    channels mark; 0: one tbf per port."""
    congestion_control: str | None = opt(None, metavar="NAME")
    """TCP congestion control of every host, e.g. bbr or reno; none: cubic, or
    $CADENCE_NETEM_CONGESTION_CONTROL."""
    port_queue: Literal["fifo", "per-peer"] | None = None
    """How every capped port queues: one FIFO (tbf), or an even share for each other host
    (htb), as a real host's fair queues give; none: per-peer, or $CADENCE_NETEM_PORT_QUEUE
    (fifo under priority classes)."""
    slow_start_after_idle: bool | None = None
    """Whether hosts start an idle TCP connection's window again, as Linux does by default
    (net.ipv4.tcp_slow_start_after_idle); none: off, or $CADENCE_NETEM_SLOW_START_AFTER_IDLE=1|0."""
    src: int = 0
    """Sending host."""
    dst: int = 1
    """Receiving host."""
    seconds: float = opt(2.0, metavar="SECONDS")
    """How long to send (load: 0 sends until Ctrl-C)."""
    remove_all: bool = opt(False, flag="--all")
    """down: remove every cadence cluster."""

    def __post_init__(self) -> None:
        _at_least("--hosts", self.hosts, 1)
        _at_least("--seconds", self.seconds, 0.0)


COMMAND_TABLES: dict[str, type] = {
    "network": NetworkModel,
    "profile": ProfileOptions,
    "simulate": SimulateOptions,
    "plan": PlanOptions,
    "bench": BenchOptions,
    "netem": NetemOptions,
}
"""The commands' own TOML tables (next to `TrainConfig`'s sections in a `--config` file)."""
