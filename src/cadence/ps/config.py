"""Parameter-server settings: a frozen config and the parsers of its string options (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cadence.errors import UserError

PRIORITIES = ("fifo", "layer", "graph")
OPTIMIZERS = ("sgd", "adam", "adamw")
# DSCP code points per priority class, most urgent first: EF, AF41, AF21, best effort.
DSCP = (46, 34, 18, 0)


NET_SUFFIX = "+net"
NETWORK_CLASSES = 4
"""Priority classes installed on the emulated switch ports by `ORDER+net` (one per channel)."""


def parse_priority(text: str) -> tuple[str, bool]:
    """`fifo|layer|graph` optionally followed by `+net` -> (order, network classes wanted)."""
    order = text.removesuffix(NET_SUFFIX)
    if order not in PRIORITIES:
        choices = ", ".join(PRIORITIES)
        raise UserError(
            f"unknown --ps-priority '{text}': choose one of {choices}, optionally with +net "
            "(priority classes on the emulated switch ports), e.g. graph+net"
        )
    return order, order != text


def parse_consistency(text: str) -> tuple[str, int]:
    """`bsp`, `asp`, `ssp:S` or `backup:K` -> (mode, bound); bound is 0 for bsp/asp."""
    mode, _, arg = text.partition(":")
    if mode in ("bsp", "asp") and not arg:
        return mode, 0
    if mode in ("ssp", "backup") and arg:
        try:
            bound = int(arg)
        except ValueError:
            bound = -1
        if bound >= (0 if mode == "ssp" else 1):
            return mode, bound
    raise UserError(
        f"bad --consistency '{text}': use bsp, asp, ssp:S (S >= 0) or backup:K (K >= 1)"
    )


def survives_dead_workers(strategy: str, consistency: str) -> bool:
    """Whether a job trains on when a worker process dies: the parameter server with asp, ssp
    or backup workers (bsp cannot make a step without every worker)."""
    return strategy == "ps" and parse_consistency(consistency)[0] != "bsp"


def parse_straggler(text: str | None) -> tuple[int, float] | None:
    """`RANK:DELAY` (seconds added to every step of that worker) -> (rank, delay)."""
    if text is None:
        return None
    rank, _, delay = text.partition(":")
    try:
        parsed = int(rank), float(delay)
    except ValueError:
        parsed = (-1, -1.0)
    if parsed[0] < 0 or not parsed[1] >= 0:
        raise UserError(f"bad --straggler '{text}': use RANK:DELAY, e.g. 1:0.5 (seconds)")
    return parsed


@dataclass(frozen=True, kw_only=True)
class PSConfig:
    """How a parameter-server job shards, orders and synchronises parameters."""

    servers: int = 1
    """Number of server processes S; parameters are balanced over them by bytes."""
    workers: int = 2
    """Number of workers W pushing gradients."""
    consistency: str = "bsp"
    """bsp (synchronous), asp (apply each gradient on arrival), ssp:S (at most S steps ahead
    of the slowest worker) or backup:K (the first K of W gradients make each step)."""
    priority: str = "graph"
    """Order of parameter transfers: fifo, layer (block order) or graph (torch.fx critical path);
    `+net` (e.g. graph+net) also asks the emulated cluster for switch-port priority classes."""
    classes: int = 4
    """Priority classes: channels (sockets) per worker-server pair, each with its DSCP mark."""
    slice_bytes: int = 4 << 20
    """Tensors larger than this (or than an even 1/S share of the model) are sliced."""
    window_bytes: int = 1 << 20
    """A server keeps at most this many unacknowledged parameter bytes in flight per worker
    and sends the rest most urgent first as acknowledgements return (0: send all at once)."""
    straggler: str | None = None
    """`RANK:DELAY`: that worker sleeps DELAY seconds every step (experiments)."""
    timeout_s: float = 60.0
    """A worker waiting longer than this for a server's answer fails, naming the server."""
    heartbeat_s: float = 1.0
    """Seconds between heartbeats from each worker's communication thread to every server."""
    dead_after_s: float = 10.0
    """A worker the servers have heard nothing from for this long is declared dead: bsp stops
    every other worker with an error naming it; asp, ssp and backup train on without it."""
    trace_iterations: int = 10
    """Timed forward passes behind the per-op times (medians) of the graph priority."""
    checkpoint_dir: str | None = None
    """Servers save their shards and optimizer state here (`server<S>.npz`) when they stop
    and every `checkpoint_every` steps, and restore them on start when the files exist."""
    checkpoint_every: int = 0
    """Steps (versions of each slice) between periodic checkpoints; 0: only at the end."""
    bind: str | None = None
    """Address the servers listen on. None: the address the job's workers reach this host at
    (the interface that routes to MASTER_ADDR; 127.0.0.1 for a job on one host). `*` listens
    on every interface (then workers still connect to the routed address)."""

    @property
    def order(self) -> str:
        """The transfer order without the network part: fifo, layer or graph."""
        return parse_priority(self.priority)[0]

    def __post_init__(self) -> None:
        if self.servers < 1:
            raise UserError(f"--servers must be at least 1 (got {self.servers})")
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1 (got {self.workers})")
        mode, bound = parse_consistency(self.consistency)
        if mode == "backup" and bound > self.workers:
            raise UserError(
                f"--consistency {self.consistency}: K must be at most --workers {self.workers}"
            )
        parse_priority(self.priority)
        if not 1 <= self.classes <= len(DSCP):
            raise UserError(f"priority classes must be 1..{len(DSCP)} (got {self.classes})")
        if self.slice_bytes < 4:
            raise UserError(f"slice size must be at least 4 bytes (got {self.slice_bytes})")
        straggler = parse_straggler(self.straggler)
        if straggler is not None and straggler[0] >= self.workers:
            raise UserError(
                f"--straggler rank {straggler[0]} does not exist with {self.workers} workers"
            )
        if self.window_bytes < 0:
            raise UserError(f"window must be non-negative (got {self.window_bytes})")
        if self.checkpoint_every < 0:
            raise UserError(
                f"--ps-checkpoint-every must be non-negative (got {self.checkpoint_every})"
            )
        if self.checkpoint_every and self.checkpoint_dir is None:
            raise UserError("--ps-checkpoint-every needs --ps-checkpoint-dir")
        if not self.timeout_s > 0:
            raise UserError(f"timeout must be positive (got {self.timeout_s})")
        if not 0 < self.heartbeat_s < self.dead_after_s:
            raise UserError(
                f"--ps-dead-after ({self.dead_after_s} s) must exceed the heartbeat interval "
                f"({self.heartbeat_s} s), which must be positive"
            )


def ps_config(train: Any, workers: int) -> PSConfig:
    """The PS settings of a `TrainConfig` (its `ps` section; validated by `PSConfig`)."""
    ps = train.ps
    return PSConfig(
        servers=ps.servers,
        workers=workers,
        consistency=ps.consistency,
        priority=ps.priority,
        straggler=ps.straggler,
        checkpoint_dir=ps.checkpoint_dir,
        checkpoint_every=ps.checkpoint_every,
        dead_after_s=ps.dead_after_s,
    )
