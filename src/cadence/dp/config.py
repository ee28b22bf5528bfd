"""Configuration of scheduled data parallel."""

from __future__ import annotations

from dataclasses import dataclass

from cadence.dp.plan import DEFAULT_ONE_CHUNK_WIRE_SHARE, default_credit, default_threshold

COMPRESSIONS = ("none", "bf16", "fp16", "powersgd", "sign")
"""`DPConfig.compression`'s choices (`dp.compress` implements them)."""


def mb_to_bytes(mb: float | None) -> int | None:
    """A `--threshold-mb` value as `DPConfig.threshold_bytes` (None stays None: the default)."""
    return None if mb is None else max(1, int(mb * 2**20))


@dataclass(frozen=True, kw_only=True)
class DPConfig:
    """How cadence schedules gradient synchronisation."""

    threshold_bytes: int | None = None
    """Split gradients larger than this; fuse smaller ones (in backward order) up to it. None:
    a quarter of the model's gradient bytes, within 1-4 MiB (`plan.default_threshold`)."""
    credit_bytes: int | None = None
    """Bytes allowed in flight at once; None means two chunks' worth (2 x the threshold), four
    for a model of at least 8 chunks (`plan.default_credit`)."""
    warmup_iterations: int = 1
    """Iterations timed (in backward order) before the priority plan is built from them."""
    link_bytes_per_s: float | None = None
    """Link rate for planning; None measures it during warm-up."""
    reorder_k: int | None = None
    """Backward reordering point K (1-based layer): Linear/Conv weight gradients are deferred
    and run in the order K..1 then L..K+1 once input gradients have propagated. None (or K at
    least the number of layers L) keeps autograd's ordinary order."""
    autotune: str = "off"
    """Warm-up tuning of threshold and K on real iterations: off, exhaustive (threshold grown
    by `autotune_growth` per trial for `autotune_trials` trials, then every K) or guided (the
    simulator ranks those candidates from a profile; only the best few run for real)."""
    autotune_trials: int = 100
    """Exhaustive: number of thresholds tried, from the threshold upwards."""
    autotune_growth: float = 1.1
    """Exhaustive: factor between consecutive thresholds."""
    autotune_iterations: int = 2
    """Timed iterations per trial (after one settling iteration); the median counts."""
    guided_thresholds: int = 5
    """Guided: thresholds (of the exhaustive list) tried for real, the simulator's fastest."""
    guided_reorder_points: int = 3
    """Guided: reorder points K tried for real at the best threshold, the simulator's fastest."""
    autotune_confirm_rounds: int = 2
    """Guided and hidden-communication tuning: when the fastest trial is not the starting
    setting, both are timed again this many times each, alternately, and the one with the
    lower median over all its timings stays. One short trial each cannot tell apart settings
    closer than the step-to-step noise of a busy host. Exhaustive tuning, the published
    procedure, is not confirmed; 0 disables."""
    autotune_hidden_fraction: float = 0.02
    """Tuning is skipped when warm-up forwards waited for communication less than this share
    of the time: communication is already hidden and no setting can beat that."""
    autotune_cheap_wire_fraction: float = 0.05
    """Tuning is also skipped when one all-reduce of every gradient at the link rate probed
    before training would take less than this share of a warm-up iteration: communication
    is too cheap for any schedule to win much, so the host's time matters most. 0 disables."""
    one_chunk_wire_share: float = DEFAULT_ONE_CHUNK_WIRE_SHARE
    """With the default threshold, no K and no tuning, the first `warmup_iterations` + 3
    iterations reduce all gradients as one chunk on the main thread, the last 3 timed. The
    chunked plan is built from their median all-reduce time and the last one's gradient ready
    times, and used only if its chunks could hide at least this share of an iteration (all but
    the last chunk's share of the all-reduce, `plan.hideable_share`); else the model stays one
    chunk, because each chunk handed to the communication thread costs a core's turn on a busy
    host. Rank 0's timings decide for every rank. 0 disables (the chunked plan from the start)."""
    keep_heap: bool = True
    """Fix glibc's malloc trim and mmap thresholds for the process (`cadence.heap.keep_heap`), so
    each iteration's activations reuse the heap's pages instead of faulting in fresh ones
    (resnet32 at no cap: 8,600 page faults and 8% of every step). Process-wide; skipped off
    glibc and when MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES is set."""
    broadcast_buffers: bool = True
    """As DDP's switch of that name: rank 0's buffers (BatchNorm's running statistics) are
    broadcast before each forward that follows a synchronising training forward, so every
    rank normalises and evaluates with rank 0's. False: each rank keeps its own."""
    autotune_file: str | None = None
    """Where the chosen threshold and K are saved; when the file exists they are loaded from it
    and tuning is skipped."""
    compression: str = "none"
    """Gradients on the wire, per chunk (`dp.compress`): none (fp32, exact), bf16 or fp16
    (cast for the all-reduce), sign (1 bit and a scale per rank, with error feedback) or
    powersgd (rank `powersgd_rank` per matrix, with error feedback and warm start)."""
    powersgd_rank: int = 2
    """powersgd: rank of each matrix's approximation (at most its smaller dimension)."""
    powersgd_start_step: int = 10
    """powersgd: iterations reduced uncompressed before compression starts."""

    def __post_init__(self) -> None:
        if self.threshold_bytes is not None and self.threshold_bytes < 1:
            raise ValueError(f"threshold_bytes must be at least 1, got {self.threshold_bytes}")
        if self.credit_bytes is not None and self.credit_bytes < 1:
            raise ValueError(f"credit_bytes must be at least 1, got {self.credit_bytes}")
        if self.warmup_iterations < 1:
            raise ValueError("warmup_iterations must be at least 1")
        if self.autotune not in ("off", "exhaustive", "guided"):
            raise ValueError(f"autotune must be off, exhaustive or guided, got {self.autotune!r}")
        if self.autotune_trials < 1 or self.autotune_iterations < 1:
            raise ValueError("autotune_trials and autotune_iterations must be at least 1")
        if self.autotune_confirm_rounds < 0:
            raise ValueError(
                f"autotune_confirm_rounds must be at least 0, got {self.autotune_confirm_rounds}"
            )
        if not self.autotune_growth > 1:
            raise ValueError(f"autotune_growth must exceed 1, got {self.autotune_growth}")
        if self.guided_thresholds < 1 or self.guided_reorder_points < 1:
            raise ValueError("guided_thresholds and guided_reorder_points must be at least 1")
        if not 0 <= self.autotune_cheap_wire_fraction < 1:
            raise ValueError(
                f"autotune_cheap_wire_fraction must be in [0, 1), got "
                f"{self.autotune_cheap_wire_fraction}"
            )
        if not 0 <= self.one_chunk_wire_share < 1:
            raise ValueError(
                f"one_chunk_wire_share must be in [0, 1), got {self.one_chunk_wire_share}"
            )
        if self.reorder_k is not None and self.reorder_k < 1:
            raise ValueError(f"reorder_k must be at least 1, got {self.reorder_k}")
        if self.compression not in COMPRESSIONS:
            raise ValueError(
                f"compression must be one of {', '.join(COMPRESSIONS)}, got {self.compression!r}"
            )
        if self.powersgd_rank < 1 or self.powersgd_start_step < 0:
            raise ValueError("powersgd_rank must be at least 1 and powersgd_start_step at least 0")

    def chooses_default_plan(self, world_size: int) -> bool:
        """Whether the runtime times one-chunk iterations to choose between one chunk and the
        default chunked plan (`one_chunk_wire_share`): only for its own default, never for a
        threshold, K or tuning the user asked for."""
        return (
            world_size > 1
            and self.one_chunk_wire_share > 0
            and self.threshold_bytes is None
            and self.reorder_k is None
            and self.autotune == "off"
        )

    def threshold_for(self, gradient_bytes: int) -> int:
        """The threshold for a model with this many bytes of gradients."""
        if self.threshold_bytes is not None:
            return self.threshold_bytes
        return default_threshold(gradient_bytes)

    def credit_for(self, gradient_bytes: int) -> int:
        """The credit for a model with this many bytes of gradients."""
        if self.credit_bytes is not None:
            return self.credit_bytes
        return default_credit(self.threshold_for(gradient_bytes), gradient_bytes)
