"""The servers' optimizers in numpy (servers stay torch-free: they start in a fraction of a
second). Same update rules as torch.optim.SGD / Adam / AdamW (foreach off), elementwise, so a
server updating a slice computes what torch would for those elements."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from cadence.errors import UserError

NAMES = ("sgd", "adam", "adamw")


class SliceOptimizer:
    """One slice's optimizer state and update rule."""

    def __init__(self, name: str, size: int, settings: dict[str, Any]) -> None:
        if name not in NAMES:
            raise UserError(f"parameter servers run {', '.join(NAMES)}, not {name}")
        self.name = name
        self.lr = float(settings.get("lr", 1e-3))
        self.weight_decay = float(settings.get("weight_decay", 0.0))
        self.momentum = float(settings.get("momentum", 0.0))
        self.dampening = float(settings.get("dampening", 0.0))
        self.nesterov = bool(settings.get("nesterov", False))
        beta1, beta2 = settings.get("betas", (0.9, 0.999))
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.eps = float(settings.get("eps", 1e-8))
        self.steps = 0
        self.buf: np.ndarray | None = None
        self.m = np.zeros(size, np.float32) if name != "sgd" else None
        self.v = np.zeros(size, np.float32) if name != "sgd" else None

    def set_hyper(self, values: dict[str, float]) -> None:
        """Use these hyperparameters (`wire.HYPER_KEYS`) from the next update on."""
        self.lr, self.weight_decay = values["lr"], values["weight_decay"]
        self.momentum, self.dampening = values["momentum"], values["dampening"]
        self.beta1, self.beta2, self.eps = values["beta1"], values["beta2"], values["eps"]

    def export(self) -> np.ndarray:
        """The state as float32: [steps, has momentum buffer, has moments, buffer or moments]."""
        head = [float(self.steps), float(self.buf is not None), float(self.m is not None)]
        parts = [np.array(head, np.float32)]
        parts += [a for a in (self.buf, self.m, self.v) if a is not None]
        return np.concatenate(parts).astype(np.float32)

    def load(self, data: np.ndarray, size: int) -> None:
        """Replace the state with one `export` wrote for a slice of `size` elements."""
        if data.size < 3:
            raise ValueError(f"optimizer state of {data.size} values")
        steps, has_buf, has_moments = (int(x) for x in data[:3])
        expected = 3 + size * (has_buf + 2 * has_moments)
        if data.size != expected or (has_moments and self.name == "sgd"):
            raise ValueError(f"optimizer state of {data.size} values, expected {expected}")
        rest = data[3:]
        self.steps = steps
        self.buf = rest[:size].copy() if has_buf else None
        rest = rest[size:] if has_buf else rest
        if has_moments:
            self.m, self.v = rest[:size].copy(), rest[size:].copy()

    def step(self, param: np.ndarray, grad: np.ndarray) -> None:
        """Update `param` in place from `grad` (float32 arrays of the slice's size)."""
        self.steps += 1
        if self.name == "sgd":
            self._sgd(param, grad)
        else:
            self._adam(param, grad)

    def _sgd(self, param: np.ndarray, grad: np.ndarray) -> None:
        if self.weight_decay:
            grad = grad + np.float32(self.weight_decay) * param
        if self.momentum:
            if self.buf is None:
                self.buf = grad.copy()
            else:
                self.buf *= np.float32(self.momentum)
                self.buf += np.float32(1 - self.dampening) * grad
            grad = grad + np.float32(self.momentum) * self.buf if self.nesterov else self.buf
        param -= np.float32(self.lr) * grad

    def _adam(self, param: np.ndarray, grad: np.ndarray) -> None:
        assert self.m is not None and self.v is not None
        if self.weight_decay and self.name == "adamw":
            param *= np.float32(1 - self.lr * self.weight_decay)
        elif self.weight_decay:
            grad = grad + np.float32(self.weight_decay) * param
        self.m += (grad - self.m) * np.float32(1 - self.beta1)  # torch's lerp
        self.v *= np.float32(self.beta2)
        self.v += np.float32(1 - self.beta2) * grad * grad
        correction1 = 1 - self.beta1**self.steps
        correction2 = 1 - self.beta2**self.steps
        step_size = self.lr / correction1
        denom = np.sqrt(self.v) / np.float32(math.sqrt(correction2)) + np.float32(self.eps)
        param -= np.float32(step_size) * (self.m / denom)
