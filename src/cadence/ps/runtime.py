"""A worker's training runtime for parameter-server training (`PSTrainer`).

Set-up (every worker, same order): rank 0 computes the priorities and broadcasts them, every
worker builds the same plan, each worker starts the servers s with s % W == rank as
subprocesses and the addresses are all-gathered, rank 0 sends the initial values, and every
worker pulls version 0. A step: each block's forward waits only for its own parameters, the
backward pushes every gradient the moment it is accumulated and asks for that slice's next
version at once; the servers answer most urgent first among the answers ready.
Servers and workers sign every message with the job's secret (`job_secret`, `cadence.ps.auth`)
and the servers listen only on the address the workers reach them at (`PSConfig.bind`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.optim import Optimizer

import cadence
from cadence.comm import ops as comm
from cadence.comm.ops import broadcast_object
from cadence.comm.process_group import own_address
from cadence.errors import UserError
from cadence.launch.env import ERROR_FILE_ENV
from cadence.launch.errors import fail_worker
from cadence.models import loss_fn
from cadence.ps.auth import SECRET_ENV, new_secret, parse_secret
from cadence.ps.checkpoint import checkpoint_path
from cadence.ps.config import (
    PSConfig,
    parse_consistency,
    parse_straggler,
    survives_dead_workers,
)
from cadence.ps.plan import PSPlan, build_plan
from cadence.ps.trace import model_blocks, model_priorities, param_infos
from cadence.ps.wire import Header, Kind
from cadence.ps.worker import Liveness, ServerTimeout, WorkerChannels

_WATCH_S = 0.5
"""How often a worker polls the servers it started (launcher runs only)."""
_OPT_KEYS = ("lr", "momentum", "dampening", "nesterov", "weight_decay", "betas", "eps")


def optimizer_settings(optimizer: Optimizer) -> tuple[str, dict[str, Any]]:
    """(name, kwargs) of the user's optimizer, for the servers to rebuild it per slice."""
    names = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}
    name = names.get(type(optimizer))
    if name is None:
        raise UserError(
            f"--strategy ps supports SGD, Adam and AdamW, not {type(optimizer).__name__}"
        )
    kwargs = {k: v for k, v in optimizer.defaults.items() if k in _OPT_KEYS}
    if isinstance(kwargs.get("lr"), Tensor):
        kwargs["lr"] = float(kwargs["lr"])
    return name, kwargs


def job_secret() -> bytes:
    """The secret this job's servers and workers sign with: from the environment (`SECRET_ENV`,
    set by `cadence train`'s launcher on every worker), else made by worker 0 and sent to the
    others over the process group (set it on every host to keep it off the network)."""
    text = os.environ.get(SECRET_ENV)
    if text is not None:
        try:
            return parse_secret(text)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    secret = new_secret() if not dist.is_initialized() or dist.get_rank() == 0 else None
    made: bytes = broadcast_object(secret)
    return made


def spawn_server(settings: dict[str, Any]) -> tuple[subprocess.Popen[bytes], list[int]]:
    """Start `python -m cadence.ps.server` and read the ports it bound."""
    import json

    env = dict(os.environ)
    root = str(Path(cadence.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cadence.ps.server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(settings) + "\n").encode())
    proc.stdin.close()
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        raise RuntimeError(f"parameter server exited with code {proc.returncode} at start-up")
    return proc, list(json.loads(line)["ports"])


class PSTrainer(nn.Module):
    """The model plus the hooks the training loop calls (`train_step`, `sync`)."""

    full_batch = False
    """Each worker reads its 1/W share of the global batch."""

    @property
    def survives_dead_workers(self) -> bool:
        """asp, ssp and backup train on when a worker dies (bsp cannot): the training loop then
        keeps each rank's figures local instead of running collectives a dead rank would stall."""
        return survives_dead_workers("ps", self.config.consistency)

    def __init__(
        self,
        model: nn.Module,
        optimizer: Optimizer,
        config: PSConfig,
        rank: int = 0,
        example: Tensor | None = None,
        pause_after: Callable[[int], bool] | None = None,
        loss: Callable[[Tensor, Tensor], Tensor] = loss_fn,
        grad_accum: int = 1,
    ) -> None:
        super().__init__()
        self.module = model
        self.loss = loss
        self.grad_accum = grad_accum
        self._accumulating = False  # backward passes that keep their gradients, unpushed
        self.config, self.rank = config, rank
        straggler = parse_straggler(config.straggler)
        self.delay_s = straggler[1] if straggler is not None and straggler[0] == rank else 0.0
        self.params, infos = param_infos(model)
        if any(p.dtype != torch.float32 for p in self.params):
            raise UserError("--strategy ps needs float32 parameters")
        priorities = None
        if rank == 0:
            priorities = model_priorities(model, config.order, example, config.trace_iterations)
        priorities = broadcast_object(priorities)
        self.plan: PSPlan = build_plan(
            infos, priorities, config.servers, config.classes, config.slice_bytes,
            consistency=config.consistency,
        )  # fmt: skip
        self.mode, _ = parse_consistency(self.plan.consistency)
        self._secret = job_secret()
        self.servers = self._start_servers(*optimizer_settings(optimizer))
        blocks = model_blocks(model)
        self.channels = WorkerChannels(
            self.plan,
            rank,
            self.addresses,
            self.params,
            len(blocks),
            config.timeout_s,
            self._secret,
            Liveness(config.heartbeat_s, config.dead_after_s),
        )
        self.channels.check = self._check_servers
        self._closing = threading.Event()
        if os.environ.get(ERROR_FILE_ENV) and self._owned:
            # Under cadence's launcher a dead server ends this worker at once, wherever it
            # waits: a collective with a peer that is itself waiting on the dead server's
            # parameters would otherwise hold both until a timeout named the wrong cause.
            watch = threading.Thread(target=self._watch_servers, name="ps-watch", daemon=True)
            watch.start()
        self.step = 0
        self.max_staleness = 0
        self.staleness: list[int] = []  # asp/ssp: steps behind the slowest worker, per step
        self.step_wait_s: list[float] = []  # per step: waiting for parameters in the forward
        self.iterations = 0
        self.pause_after = pause_after
        self._pushed: set[int] = set()
        self._handles = [
            block.register_forward_pre_hook(self._make_wait(b)) for b, block in enumerate(blocks)
        ]
        self._handles += [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]
        self._index = {id(p): i for i, p in enumerate(self.params)}
        if rank == 0:
            for piece in self.plan.slices:
                self._send(Kind.INIT, piece.key, 0, self._flat(piece.key))
        self._pull(self.plan.pull_order(), 0)

    # --- set-up --------------------------------------------------------------------------------
    def _start_servers(self, opt_name: str, opt_kwargs: dict[str, Any]) -> list[Any]:
        world = dist.get_world_size() if dist.is_initialized() else 1
        mine: dict[int, tuple[str, list[int]]] = {}
        self._owned: list[int] = []
        procs = []
        address = own_address()  # where the other workers reach this host's servers
        for server in range(self.rank, self.plan.servers, world):
            slices = [
                [s.key, s.length, s.priority, s.klass]
                for s in self.plan.slices
                if s.server == server
            ]
            settings = {
                "server": server,
                "secret": self._secret.hex(),  # on the child's stdin, never on a command line
                "bind": self.config.bind or address,
                "workers": world,
                "consistency": self.plan.consistency,
                "classes": self.plan.classes,
                "slices": slices,
                "optimizer": opt_name,
                "optimizer_kwargs": opt_kwargs,
                "parent_pid": os.getpid(),
                "window_bytes": self.config.window_bytes,
                "dead_after_s": self.config.dead_after_s,
            }
            if self.config.checkpoint_dir is not None:
                path = checkpoint_path(self.config.checkpoint_dir, server)
                settings["checkpoint"] = str(path.resolve())
                settings["checkpoint_every"] = self.config.checkpoint_every
            proc, ports = spawn_server(settings)
            procs.append(proc)
            self._owned.append(server)
            mine[server] = (address, ports)
        gathered: list[Any] = [mine]
        if dist.is_initialized():
            gathered = comm.all_gather_object(mine)
        table = {s: addr for part in gathered for s, addr in part.items()}
        self.addresses = [table[s] for s in range(self.plan.servers)]
        return procs

    def _check_servers(self) -> None:
        for server, proc in zip(self._owned, self.servers, strict=True):
            if proc.poll() is not None:
                raise ServerTimeout(
                    f"worker {self.rank}: parameter server {server} (pid {proc.pid}) exited "
                    f"with code {proc.returncode}"
                )

    def _watch_servers(self) -> None:
        while not self._closing.wait(_WATCH_S):
            try:
                self._check_servers()
            except ServerTimeout as exc:
                if self._closing.is_set():
                    return
                os._exit(fail_worker(self.rank, exc))

    def _make_wait(self, block: int) -> Any:
        def wait(module: nn.Module, args: Any) -> None:
            self.channels.wait_block(block)

        return wait

    # --- messages ------------------------------------------------------------------------------
    def _flat(self, key: int, grad: bool = False) -> bytes:
        piece = self.plan.slices[key]
        source = self.params[piece.param]
        tensor = source.grad if grad and source.grad is not None else source.data
        if grad and source.grad is None:
            tensor = torch.zeros_like(source)  # unused this step: contributes nothing
        part = tensor.detach().reshape(-1)[piece.start : piece.start + piece.length]
        return part.contiguous().cpu().numpy().tobytes()  # a no-op on CPU

    def _send(self, kind: Kind, key: int, step: int, payload: bytes = b"") -> None:
        piece = self.plan.slices[key]
        header = Header(kind, piece.priority, self.rank, key, step, 0, len(payload) // 4)
        self.channels.send(piece.server, piece.klass, header, payload)

    def _pull(self, keys: list[int], step: int) -> None:
        self.channels.expect(keys)
        for key in keys:
            self._send(Kind.PULL, key, step)

    def _push_param(self, index: int) -> None:
        self._last_push = self.step
        keys = [s.key for s in self.plan.slices_of(index)]
        for key in keys:
            self._send(Kind.PUSH, key, self.step, self._flat(key, grad=True))
        self.params[index].grad = None
        self._pushed.add(index)
        # Ask at once, whatever the order: the server answers as soon as the slice is updated,
        # most urgent first among the answers ready (asking after backward left the link idle).
        self._pull(keys, self.step + 1)

    def _on_grad(self, param: Tensor) -> None:
        if not self._accumulating:
            self._push_param(self._index[id(param)])

    # --- the loop's hooks ----------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.module(x)
        return out

    def train_step(self, x: Tensor, y: Tensor, optimizer: Optimizer | None = None) -> Tensor:
        """Forward (block by block as parameters arrive), backward pushing gradients, pulls.

        With `grad_accum` N the batch is cut into N micro-batches, each loss divided by N: the
        first N-1 backward passes keep their gradients, the last one adds its own and pushes
        the sums, the gradients of the batch's mean loss. Returns that mean loss."""
        if self.delay_s:
            time.sleep(self.delay_s)
        n = self.grad_accum
        if len(x) % n:
            raise UserError(
                f"this worker's {len(x)} samples per step do not split into --grad-accum {n} "
                "equal micro-batches"
            )
        total: Tensor | None = None
        pieces = list(zip(x.chunk(n), y.chunk(n), strict=True))
        for i, (xi, yi) in enumerate(pieces):
            waited = self.channels.wait_s
            out = self.module(xi)
            if i == 0:
                self.channels.wait_all()  # blocks the forward did not run
                self.step_wait_s.append(self.channels.wait_s - waited)
                self._advance()
                self._pushed.clear()
            loss = self.loss(out, yi) / n if n > 1 else self.loss(out, yi)
            self._accumulating = i < n - 1
            try:
                loss.backward()
            finally:
                self._accumulating = False
            total = loss.detach() if total is None else total + loss.detach()
        for index in range(len(self.params)):
            if index not in self._pushed:
                self._push_param(index)
        self.iterations += 1
        if self.pause_after is not None and self.pause_after(self.iterations):
            self._idle()  # e.g. the loop's epoch end: it waits there for every worker
        assert total is not None
        return total

    def _advance(self) -> None:
        """Set `step` from what the last pulls brought (called once all of them arrived)."""
        if self.mode in ("bsp", "backup"):
            self.step = min(self.channels.versions, default=0)
        elif self._started:
            self.step += 1
            oldest = min(self.channels.min_clocks, default=self.step)
            self.max_staleness = max(self.max_staleness, self.step - oldest)
            self.staleness.append(self.step - oldest)
        self._started = True

    _started = False
    _last_push = -1

    def sync(self) -> None:
        """Wait until the parameters of the next step are all here. With backup workers, also
        tell the servers this worker pauses (the loop evaluates, or is done), so workers still
        behind make their steps without it instead of waiting for K gradients forever."""
        self.channels.wait_all()
        self._idle()

    def _idle(self) -> None:
        if self.mode == "backup" and self._last_push >= 0:
            for server in range(self.config.servers):
                header = Header(Kind.IDLE, 0, self.rank, 0, self._last_push)
                self.channels.send(server, 0, header)

    def close(self) -> dict[str, Any]:
        """Stop the servers (every worker must call it); returns the servers' counters summed
        plus this worker's largest staleness."""
        self.sync()
        self._closing.set()
        stats = self.channels.stop(self.config.servers)
        for handle in self._handles:
            handle.remove()
        for proc in self.servers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        totals = {k: sum(s.get(k, 0) for s in stats) for k in stats[0]} if stats else {}
        if stats:  # every server declares the same dead workers
            totals["dead_workers"] = max(s.get("dead_workers", 0) for s in stats)
        totals["max_staleness"] = self.max_staleness
        totals["version"] = min(self.channels.versions, default=0)
        return totals

    def worker_counters(self) -> dict[str, Any]:
        """This worker's traffic, waiting and staleness (JSON-safe)."""
        stale = self.staleness or [0]
        waits = sorted(self.step_wait_s) or [0.0]
        return {
            "rank": self.rank,
            **self.channels.counters(),
            "median_step_param_wait_s": waits[len(waits) // 2],
            "max_staleness": max(stale),
            "mean_staleness": sum(stale) / len(stale),
        }

    def run_report(self) -> dict[str, Any]:
        """Stop the servers (every worker calls it once, after its last step) and return the
        run's counters for metrics.json: the servers' (rejected and dropped messages, updates)
        and every worker's (bytes pushed/pulled, per priority class, waiting, staleness); only
        this worker's when a worker died (no collective with a dead rank)."""
        servers = self.close()
        mine = self.worker_counters()
        workers: list[Any] = [mine]
        # Every live worker knows the same dead ones once the servers' final counters are in
        # (each server's death notices precede them): all gather, or none does.
        if dist.is_initialized() and not self.channels.dead_workers:
            workers = comm.all_gather_object(mine)
        summary = {
            key: sum(w[key] for w in workers)
            for key in ("bytes_pushed", "bytes_pulled", "param_wait_s")
        }
        per_class = [w["bytes_per_class"] for w in workers]
        summary["bytes_per_class"] = [sum(c) for c in zip(*per_class, strict=True)]
        summary["max_staleness"] = max(w["max_staleness"] for w in workers)
        summary["mean_staleness"] = sum(w["mean_staleness"] for w in workers) / len(workers)
        servers.pop("max_staleness", None)
        return {"ps": {"servers": servers, **summary, "workers": workers}}
