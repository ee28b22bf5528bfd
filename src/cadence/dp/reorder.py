"""Backward reordering at layer K: front layers' weight gradients first.

Autograd computes each layer's input gradient and weight gradient together, back to front, so
the front layer's gradient -- the one the next forward pass needs first -- is the last to exist.
With reordering, Linear and Conv layers compute only their input gradient while the backward
pass propagates; their weight gradients are deferred and run when propagation is done, in the
order K, K-1, ..., 1, then L, ..., K+1 (1-based layer numbers). Front layers' gradients, and so
their synchronisation and the next forward, start earlier; K = L is the ordinary order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cadence.dp.plan import weight_grad_order

_CONVS: tuple[type[nn.Module], ...] = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def deferrable(module: nn.Module) -> bool:
    """Layers whose weight gradient can be split from their input gradient here (exact types
    only: a subclass may compute something else in its forward)."""
    if type(module) is nn.Linear:
        return True
    if type(module) in _CONVS:
        return module.padding_mode == "zeros" and not isinstance(module.padding, str)
    return False


class BackwardReorder:
    """Defers the weight gradients of chosen layers and runs them in reorder order.

    `on_grad(param_index)` is called once a deferred parameter's gradient is complete, so the
    synchronisation engine treats it exactly like a gradient autograd accumulated itself.
    `on_activity()` is called whenever a deferred layer is reached in a backward pass, so the
    engine knows a backward pass is under way even before any ordinary gradient arrives.
    """

    def __init__(
        self,
        layers: Sequence[nn.Module],
        layer_params: Sequence[Sequence[int]],
        params: Sequence[nn.Parameter],
        deferred_layers: Sequence[int],
        k: int,
        on_grad: Callable[[int], None],
        on_activity: Callable[[], None],
    ):
        self.order = weight_grad_order(len(layers), k)
        self.k = k
        self._params = params
        self._layer_params = layer_params
        self._on_grad = on_grad
        self._on_activity = on_activity
        self._pending: dict[int, list[Callable[[], None]]] = {}
        self._deferred = tuple(sorted(deferred_layers))
        self._originals: list[tuple[nn.Module, Any]] = []
        for layer in self._deferred:
            module = layers[layer]
            self._originals.append((module, module.__dict__.get("forward")))
            module.forward = self._make_forward(module, layer)

    @property
    def deferred_layers(self) -> tuple[int, ...]:
        return self._deferred

    def deferred_params(self) -> set[int]:
        return {i for layer in self._deferred for i in self._layer_params[layer]}

    def _make_forward(
        self, module: nn.Module, layer: int
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(x: torch.Tensor) -> torch.Tensor:
            if not torch.is_grad_enabled():
                return type(module).forward(module, x)
            return _DeferWeightGrad.apply(x, module.weight, module.bias, module, self, layer)

        return forward

    def defer(self, layer: int, work: Callable[[], None]) -> None:
        """Called from autograd: remember `work` (computes and accumulates the weight grads)."""
        self._on_activity()
        self._pending.setdefault(layer, []).append(work)

    def run(self) -> None:
        """At the end of propagation: weight gradients in reorder order, announcing each layer."""
        pending, self._pending = self._pending, {}
        if not pending:
            return
        with torch.no_grad():
            for layer in self.order:
                works = pending.get(layer)
                if not works:
                    continue
                for work in works:  # a layer called twice in one forward has two entries
                    work()
                for index in self._layer_params[layer]:
                    self._on_grad(index)

    def close(self) -> None:
        """Give the layers back their own forward."""
        for module, original in self._originals:
            if original is None:
                del module.forward
            else:
                module.forward = original
        self._originals.clear()


def _accumulate(param: torch.Tensor | None, grad: torch.Tensor) -> None:
    if param is None or not param.requires_grad:
        return
    if param.grad is None:
        param.grad = grad.to(param.dtype)
    else:
        param.grad.add_(grad)


class _DeferWeightGrad(torch.autograd.Function):
    """A Linear/Conv whose backward returns the input gradient now and defers the rest."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        module: nn.Module,
        reorder: BackwardReorder,
        layer: int,
    ) -> torch.Tensor:
        device = x.device.type
        if torch.is_autocast_enabled(device):
            # As autocast runs Linear and Conv: inputs, weight and bias in its lower precision,
            # so the backward's products meet tensors of one dtype (the weight's gradient is
            # cast back to the parameter's dtype as it is accumulated).
            dtype = torch.get_autocast_dtype(device)
            x, weight = x.to(dtype), weight.to(dtype)
            bias = None if bias is None else bias.to(dtype)
        ctx.save_for_backward(x, weight)
        ctx.module, ctx.reorder, ctx.layer = module, reorder, layer
        ctx.has_bias = bias is not None
        if isinstance(module, nn.Linear):
            return F.linear(x, weight, bias)
        return _conv_forward(module, x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        module = ctx.module
        grad_x = None
        if isinstance(module, nn.Linear):
            if ctx.needs_input_grad[0]:
                grad_x = grad_out.matmul(weight)

            def work() -> None:
                flat_out = grad_out.reshape(-1, grad_out.shape[-1])
                _accumulate(module.weight, flat_out.t().matmul(x.reshape(-1, x.shape[-1])))
                if ctx.has_bias:
                    _accumulate(module.bias, flat_out.sum(0))
        else:
            if ctx.needs_input_grad[0]:
                grad_x = _conv_backward(module, grad_out, x, weight, (True, False, False))[0]

            def work() -> None:
                _, grad_w, grad_b = _conv_backward(
                    module, grad_out, x, weight, (False, True, ctx.has_bias)
                )
                _accumulate(module.weight, grad_w)
                if ctx.has_bias:
                    _accumulate(module.bias, grad_b)

        ctx.reorder.defer(ctx.layer, work)
        return grad_x, None, None, None, None, None


def _conv_forward(
    module: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[weight.dim() - 2]
    return conv(x, weight, bias, module.stride, module.padding, module.dilation, module.groups)


def _conv_backward(
    module: Any,
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mask: tuple[bool, bool, bool],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dims = weight.dim() - 2
    bias_sizes = [weight.shape[0]] if mask[2] else None
    result: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = torch.ops.aten.convolution_backward(
        grad_out,
        x,
        weight,
        bias_sizes,
        list(module.stride),
        list(module.padding),
        list(module.dilation),
        False,
        [0] * dims,
        module.groups,
        list(mask),
    )
    return result
