"""`--strategy torchft-diloco`: torchft's DiLoCo, a public implementation to compare against.

Not cadence's own method: `cadence bench tta` runs it beside `--strategy diloco` as a real
peer, as it runs torch's DDP comm hooks. The training loop, data, evaluations and metrics are
cadence's; only the synchronisation is torchft's (`torchft.local_sgd.DiLoCo`: the user's
optimizer steps every batch, and every `--sync-every` steps an outer SGD with Nesterov
momentum at `--outer-lr` / `--outer-momentum` steps on the all-reduced pseudo-gradient;
`--fragments K` streams it as torchft's Streaming DiLoCo does, the model cut as cadence's
streaming cuts it, each fragment's sync applied `--overlap-steps` steps after it starts).

Each worker is a torchft replica group of one: worker 0 starts the lighthouse (the quorum
service) and hands its address to the others over the job's process group; every worker runs
its own store and manager, advertised at the address its peers reach it by. The evaluations
the loop makes between syncs score each rank's own replica; `cadence bench tta` evaluates
right after a sync (every multiple of H), where the replicas are equal.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from cadence.errors import UserError
from cadence.localsgd.config import LocalSGDConfig

TIMEOUT = timedelta(seconds=300)
"""torchft's timeouts (quorum, collectives, connections): a sync on a slow emulated link, or a
worker still building its model, must not abort the run."""


def _torchft() -> Any:
    # torchft's native parts log every quorum at INFO; warnings and errors still show.
    os.environ.setdefault("RUST_LOG", "warn")
    try:
        import torchft
    except ImportError as exc:
        raise UserError(
            f"--strategy torchft-diloco needs torchft (pip install torchft==0.2.0): {exc}"
        ) from None
    return torchft


class _NoFlightRecorder(logging.Filter):
    """Drops torchft's warning that NCCL's flight recorder cannot be reset (a CPU job has
    none) at every quorum."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "flight recorder" not in record.getMessage()


class _Syncs:
    """What the loop reads as `optimizer.outer`: the bytes this rank handed to the syncs, an
    fp32 all-reduce of a fragment's pseudo-gradients per committed sync (torchft syncs
    fragment `step % K` at manager step `step`)."""

    def __init__(self, manager: Any, fragment_bytes: list[int]) -> None:
        self.manager, self.fragment_bytes = manager, fragment_bytes

    @property
    def wire_bytes_total(self) -> int:
        k = len(self.fragment_bytes)
        return sum(self.fragment_bytes[c % k] for c in range(int(self.manager.current_step())))


class TorchftDiLoCoOptimizer(torch.optim.Optimizer):
    """The user's optimizer, whose `step()` torchft's DiLoCo hooks (counting inner steps and
    syncing every H); it shares the user's param groups and state, so LR schedulers, clipping
    and `zero_grad` act as on the user's optimizer."""

    def __init__(
        self, inner: torch.optim.Optimizer, diloco: Any, manager: Any, fragments: list[nn.Module]
    ) -> None:
        super().__init__(inner.param_groups, inner.defaults)
        self.state = inner.state
        self.inner, self.diloco, self.manager = inner, diloco, manager
        self.lighthouse: Any = None
        self.store: Any = None  # this replica group's store, alive as long as the manager
        sizes = [sum(p.numel() * p.element_size() for p in f.parameters()) for f in fragments]
        self.outer = _Syncs(manager, sizes)

    def step(self, closure: Any = None) -> Any:
        return self.inner.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.inner.load_state_dict(state_dict)

    def close(self) -> None:
        """Leave the DiLoCo context and stop the manager (and, on worker 0, the lighthouse)."""
        self.diloco.__exit__(None, None, None)
        self.manager.shutdown(wait=False)
        if self.lighthouse is not None:
            self.lighthouse.shutdown()


def _fragments(model: nn.Module, k: int) -> list[nn.Module]:
    """The modules torchft syncs in turn: the model, or its parameters cut into `k` fragments
    as cadence's streaming cuts them (`cadence.localsgd.fragments`), each held by a module of
    its own that shares the model's parameters."""
    if k == 1:
        return [model]
    from cadence.localsgd.fragments import model_fragments

    holders = []
    for fragment in model_fragments(model, k):
        holder = nn.Module()
        for i, p in enumerate(fragment.params):
            holder.register_parameter(f"p{i}", p)  # type: ignore[arg-type]
        holders.append(holder)
    return holders


def wrap(
    model: nn.Module, optimizer: torch.optim.Optimizer, config: LocalSGDConfig
) -> tuple[nn.Module, TorchftDiLoCoOptimizer]:
    """`model` trained with torchft's DiLoCo over the job's workers (one replica group each)."""
    import torch.distributed as dist

    torchft = _torchft()
    logging.getLogger("torchft.manager").addFilter(_NoFlightRecorder())
    from torchft.coordination import LighthouseServer
    from torchft.local_sgd import DiLoCo

    from cadence.comm.ops import broadcast_object_list, broadcast_tensors
    from cadence.comm.process_group import own_address

    if config.outer_dtype != "fp32":
        raise UserError("--strategy torchft-diloco takes no --outer-dtype")
    k, h = config.fragments, config.sync_every
    if h % k or config.delay >= h // k:  # torchft's own conditions, said in one line here
        raise UserError(
            f"torchft-diloco streams {k} fragments only with --sync-every a multiple of it "
            "and --overlap-steps below --sync-every / --fragments"
        )
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    host = own_address()
    lighthouse = None
    address: list[Any] = [None]
    if rank == 0:
        lighthouse = LighthouseServer(bind="[::]:0", min_replicas=world)
        # It names itself by host name, which the emulated hosts do not resolve to it.
        port = lighthouse.address().rsplit(":", 1)[1]
        address[0] = f"http://{host}:{port}"
    if world > 1:
        broadcast_object_list(address, src=0)
        with torch.no_grad():  # every replica starts from rank 0's weights, as DDP does
            broadcast_tensors([*model.parameters(), *model.buffers()], src=0)
    # A replica group of one: its store runs here, on a port the system picks.
    store = dist.TCPStore(host, 0, 1, is_master=True, wait_for_workers=False)
    manager = torchft.Manager(
        pg=torchft.ProcessGroupGloo(timeout=TIMEOUT),
        load_state_dict=lambda state: model.load_state_dict(state["model"]),
        state_dict=lambda: {"model": model.state_dict()},
        min_replica_size=world,
        use_async_quorum=False,
        timeout=TIMEOUT,
        quorum_timeout=TIMEOUT,
        connect_timeout=TIMEOUT,
        rank=0,
        world_size=1,
        store_addr=host,
        store_port=store.port,
        lighthouse_addr=address[0],
        replica_id=f"cadence_{rank}",
        hostname=host,
        # The replicas start equal (above): no first heal, whose checkpoint transport would
        # name this host by a name the emulated hosts do not resolve.
        init_sync=False,
    )
    fragments = _fragments(model, config.fragments)
    outer = [
        torch.optim.SGD(
            f.parameters(), lr=config.outer_lr, momentum=config.outer_momentum,
            nesterov=config.nesterov and config.outer_momentum > 0,
        )  # fmt: skip
        for f in fragments
    ]
    diloco = DiLoCo(
        manager, fragments, optimizer, outer, sync_every=config.sync_every,
        backup_device=torch.device("cpu"), pin_memory=False,
        fragment_sync_delay=config.delay,
    )  # fmt: skip
    diloco.__enter__()
    wrapped = TorchftDiLoCoOptimizer(optimizer, diloco, manager, fragments)
    wrapped.lighthouse, wrapped.store = lighthouse, store
    atexit.register(wrapped.close)
    if not callable(getattr(model, "no_sync", None)):
        model.no_sync = contextlib.nullcontext  # type: ignore[assignment]  # nothing to skip
    return model, wrapped
