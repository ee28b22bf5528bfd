"""Fault injection for tests: `CADENCE_INJECT_FAILURE=RANK:STEP[:MODE[:PHASE]]` makes that rank
fail at that (0-based) step.

MODE is how it fails: `raise` (a RuntimeError, recorded like any error; the default), `abort`
(SIGABRT) or `kill` (SIGKILL), both native deaths that record nothing. PHASE is where: `step`
(between steps; the default), `forward` (inside the model's forward pass, from a hook on its
first leaf module) or `allreduce` (cadence-dp's communication thread, right after it issued its
first gradient all-reduce of that step) or `checkpoint` (while the checkpoint written after
that many steps is being saved: every file written, not yet swapped in). Unset, nothing is
injected and nothing is checked. A resumed run (`--resume`, a torchrun restart) injects
nothing: the fault strikes the first attempt only.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any, Literal

from cadence.errors import UserError

INJECT_ENV = "CADENCE_INJECT_FAILURE"
MODES = ("raise", "abort", "kill")
PHASES = ("step", "forward", "allreduce", "checkpoint")


@dataclass(frozen=True)
class Fault:
    """One injected failure of this rank."""

    step: int
    """0-based training step (cadence-dp: backward pass) at which it fails."""
    mode: Literal["raise", "abort", "kill"]
    phase: Literal["step", "forward", "allreduce", "checkpoint"]

    def fire(self, where: str) -> None:
        """Fail now, as `mode` says."""
        if self.mode == "abort":
            os.abort()
        if self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"injected failure at step {self.step} {where} ({INJECT_ENV})")


def injected_fault(rank: int, phase: str) -> Fault | None:
    """The fault `CADENCE_INJECT_FAILURE` asks of `rank` in `phase`, or None."""
    spec = os.environ.get(INJECT_ENV)
    if not spec:
        return None
    parts = spec.split(":")
    mode = parts[2] if len(parts) > 2 else "raise"
    where = parts[3] if len(parts) > 3 else "step"
    if len(parts) < 2 or len(parts) > 4 or mode not in MODES or where not in PHASES:
        raise UserError(
            f"{INJECT_ENV}={spec}: expected RANK:STEP[:MODE[:PHASE]] with MODE one of "
            f"{', '.join(MODES)} and PHASE one of {', '.join(PHASES)}"
        )
    if int(parts[0]) != rank or where != phase:
        return None
    return Fault(int(parts[1]), mode, where)  # type: ignore[arg-type]


def fail_in_forward(model: Any, fault: Fault) -> None:
    """Make `fault` fire inside the forward pass of `model`'s `fault.step`-th training call
    (counted on its first leaf module, which runs once per forward)."""
    leaf = next((m for m in model.modules() if not list(m.children())), model)
    calls = [0]

    def hook(module: Any, _args: Any) -> None:
        if not module.training:
            return
        if calls[0] == fault.step:
            fault.fire("in the forward pass")
        calls[0] += 1

    leaf.register_forward_pre_hook(hook)
