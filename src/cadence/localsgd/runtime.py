"""The outer loop of local SGD / DiLoCo: after the inner steps a fragment's sync is due, each
rank's pseudo-gradient delta = theta_outer - theta_local is averaged over the ranks, an outer SGD
(momentum, Nesterov) steps theta_outer with it, and theta_outer becomes the model's weights again.

With overlap (streaming), the average travels while `delay` more inner steps run; when it is
applied, each rank keeps the progress it made meanwhile: theta_local <- theta_outer_new +
(theta_local_now - theta_local_at_issue). Floating-point buffers (BatchNorm statistics) are
averaged the same way (plain mean, in fp32). The order of every collective follows from the
step count alone, so it is the same on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cadence.errors import UserError
from cadence.localsgd.config import LocalSGDConfig, sync_wire_bytes
from cadence.localsgd.fragments import Fragment, model_fragments
from cadence.localsgd.wire import Done, Reduction, start_mean


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    if not tensors:
        return torch.zeros(0)
    return torch.cat([t.detach().reshape(-1).to(torch.float32) for t in tensors])


def _write(tensors: list[torch.Tensor], flat: torch.Tensor) -> None:
    start = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[start : start + n].view_as(t))
        start += n


@dataclass
class _InFlight:
    fragment: int
    issued_at: int
    apply_at: int
    delta: Reduction
    buffers: Reduction | None
    params_at_issue: torch.Tensor | None
    buffers_at_issue: torch.Tensor | None


class OuterLoop:
    """Counts inner steps and runs each fragment's sync when it is due."""

    def __init__(
        self,
        model: nn.Module,
        config: LocalSGDConfig,
        group: dist.ProcessGroup | None,
        world: int,
    ):
        self.config, self.group, self.world = config, group, world
        self.fragments: list[Fragment] = model_fragments(model, config.fragments)
        devices = {p.device for f in self.fragments for p in f.params}
        if len(devices) > 1:
            raise UserError(
                f"local SGD / DiLoCo keeps one outer copy per fragment on one device, but the "
                f"parameters sit on {len(devices)}: move the model to one device first"
            )
        self.device = devices.pop()
        with torch.no_grad():
            self.outer = [_flat(f.params).to(self.device) for f in self.fragments]
        momentum = config.outer_momentum
        self.outer_optimizer = torch.optim.SGD(
            self.outer,
            lr=config.outer_lr,
            momentum=momentum,
            nesterov=config.nesterov and momentum > 0,
        )
        self.taken = False
        """Whether theta_outer holds the weights training starts from: they are taken at the
        first inner step (or from a checkpoint), so weights loaded after wrapping count."""
        self.step = 0
        """Inner steps since the last full sync (the phase of every fragment's schedule)."""
        self.in_flight: list[_InFlight] = []
        self.clean = set(range(len(self.fragments)))
        """Fragments whose weights are theta_outer itself on every rank (no inner step since
        their last sync, and none carried over): a full sync skips them."""
        self.syncs = 0
        """Fragment syncs applied so far."""
        self.wire_bytes_total = 0
        """Bytes this rank has handed to the collectives for syncs (pseudo-gradients as the
        outer dtype, buffers as fp32)."""

    # --- the schedule ------------------------------------------------------------------------
    @torch.no_grad()
    def before_inner_step(self) -> None:
        """Take the starting weights as theta_outer, once."""
        if not self.taken:
            for fragment, outer in zip(self.fragments, self.outer, strict=True):
                outer.copy_(_flat(fragment.params).to(self.device))
            self.taken = True

    def after_inner_step(self) -> None:
        """Account for one inner step: apply the syncs due now, then start those due to start."""
        self.step += 1
        self.clean.clear()
        for item in [i for i in self.in_flight if i.apply_at <= self.step]:
            self._apply(item)
        for fragment in self.config.due(self.step):
            item = self._start(fragment)
            if self.config.delay == 0:
                self._apply(item)

    def sync_all(self) -> None:
        """Wait for the syncs in flight, then sync every fragment at once (blocking): afterwards
        every rank holds the same weights and buffers. The schedule restarts from step 0."""
        for item in list(self.in_flight):
            self._apply(item)
        for fragment in range(len(self.fragments)):
            if fragment not in self.clean:  # the same set on every rank: same collectives
                self._apply(self._start(fragment, blocking=True))
        self.step = 0

    # --- one fragment ------------------------------------------------------------------------
    @torch.no_grad()
    def _start(self, index: int, blocking: bool = False) -> _InFlight:
        fragment = self.fragments[index]
        local = _flat(fragment.params).to(self.device)
        delta = self.outer[index] - local
        buffers = _flat(fragment.buffers).to(self.device) if fragment.buffers else None
        mean_buffers = (
            None if buffers is None else start_mean(buffers, "fp32", self.world, self.group)
        )
        if self.world > 1:
            self.wire_bytes_total += sync_wire_bytes(delta.numel(), self.config.outer_dtype)
            if buffers is not None:
                self.wire_bytes_total += sync_wire_bytes(buffers.numel(), "fp32")
        keep = not blocking and self.config.delay > 0  # local progress to carry over
        item = _InFlight(
            fragment=index,
            issued_at=self.step,
            apply_at=self.step + (0 if blocking else self.config.delay),
            delta=start_mean(delta, self.config.outer_dtype, self.world, self.group),
            buffers=mean_buffers,
            params_at_issue=local if keep else None,
            buffers_at_issue=buffers if keep else None,
        )
        self.in_flight.append(item)
        return item

    @torch.no_grad()
    def _apply(self, item: _InFlight) -> None:
        self.in_flight.remove(item)
        fragment, outer = self.fragments[item.fragment], self.outer[item.fragment]
        outer.grad = item.delta.wait()
        self.outer_optimizer.step()  # the other fragments have no grad: SGD skips them
        outer.grad = None
        new = outer
        if item.params_at_issue is not None:
            new = outer + (_flat(fragment.params).to(self.device) - item.params_at_issue)
        _write(fragment.params, new)
        if item.params_at_issue is None or item.issued_at == self.step:  # nothing carried over
            self.clean.add(item.fragment)
        if item.buffers is not None:
            mean = item.buffers.wait()
            if item.buffers_at_issue is not None:
                mean = mean + (_flat(fragment.buffers).to(self.device) - item.buffers_at_issue)
            _write(fragment.buffers, mean)
        self.syncs += 1

    # --- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """theta_outer, the outer optimizer's state, the schedule's phase and the syncs in
        flight (waited for, a local wait: their means are saved), so a run resumed from it
        continues exactly as one never stopped. Local: no collective."""
        return {
            "step": self.step,
            "syncs": self.syncs,
            "taken": self.taken,
            "clean": sorted(self.clean),
            "outer": [t.detach().clone() for t in self.outer],
            "outer_optimizer": self.outer_optimizer.state_dict(),
            "in_flight": [
                {
                    "fragment": item.fragment,
                    "issued_at": item.issued_at,
                    "apply_at": item.apply_at,
                    "delta": item.delta.wait().clone(),
                    "buffers": None if item.buffers is None else item.buffers.wait().clone(),
                    "params_at_issue": item.params_at_issue,
                    "buffers_at_issue": item.buffers_at_issue,
                }
                for item in self.in_flight
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["outer"]) != len(self.outer):
            raise UserError(
                f"the checkpoint holds {len(state['outer'])} outer fragments, this run has "
                f"{len(self.outer)}: resume with the same --fragments"
            )
        with torch.no_grad():
            for mine, saved in zip(self.outer, state["outer"], strict=True):
                mine.copy_(saved)
        self.outer_optimizer.load_state_dict(state["outer_optimizer"])
        self.step, self.syncs = int(state["step"]), int(state["syncs"])
        self.taken = bool(state.get("taken", True))
        self.clean = set(state.get("clean", ()))
        self.in_flight = [
            _InFlight(
                fragment=int(item["fragment"]),
                issued_at=int(item["issued_at"]),
                apply_at=int(item["apply_at"]),
                delta=Done(item["delta"].to(self.device)),
                buffers=None if item["buffers"] is None else Done(item["buffers"]),
                params_at_issue=item["params_at_issue"],
                buffers_at_issue=item["buffers_at_issue"],
            )
            for item in state.get("in_flight", ())
        ]
