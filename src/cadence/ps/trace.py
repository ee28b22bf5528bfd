"""From a torch model to the inputs of the plan: parameter infos, op graph, priorities.

The op graph comes from `torch.fx.symbolic_trace`, with each op's time measured by running the
traced graph node by node; a model fx cannot trace falls back to module order (a chain of the
modules that own parameters, equal times), which makes the graph priority the layer order.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import Tensor, fx, nn

from cadence.ps.config import PSConfig
from cadence.ps.plan import ParamInfo, PSPlan, build_plan
from cadence.ps.priority import Op, fifo_priorities, graph_priorities, layer_priorities


def model_blocks(model: nn.Module) -> list[nn.Module]:
    """Units with a ready flag each: a BlockModel's blocks, else the top-level children."""
    blocks = getattr(model, "blocks", None)
    found = list(blocks()) if callable(blocks) else list(model.children())
    return found or [model]


def param_infos(model: nn.Module) -> tuple[list[nn.Parameter], list[ParamInfo]]:
    """Distinct trainable parameters in `model.parameters()` order, each with its first block."""
    params = [p for p in model.parameters() if p.requires_grad]
    block_of: dict[int, int] = {}
    for b, block in enumerate(model_blocks(model)):
        for p in block.parameters():
            block_of.setdefault(id(p), b)
    names = {id(p): n for n, p in model.named_parameters()}
    infos = [
        ParamInfo(i, names.get(id(p), f"param{i}"), p.numel(), block_of.get(id(p), 0))
        for i, p in enumerate(params)
    ]
    return params, infos


class _Timer(fx.Interpreter):
    def __init__(self, module: fx.GraphModule) -> None:
        super().__init__(module)
        self.times: dict[str, list[float]] = {}

    def run_node(self, n: fx.Node) -> Any:
        t0 = time.perf_counter()
        out = super().run_node(n)
        self.times.setdefault(n.name, []).append(time.perf_counter() - t0)
        return out


def trace_ops(model: nn.Module, example: Tensor, iterations: int = 10) -> list[Op]:
    """Forward ops with measured times (median of `iterations`); module order if untraceable."""
    params, _ = param_infos(model)
    index = {id(p): i for i, p in enumerate(params)}
    try:
        gm = fx.symbolic_trace(model)
        timer = _Timer(gm)
        with torch.no_grad():
            for _ in range(max(1, iterations)):
                timer.run(example)
    except Exception:  # fx raises many kinds on dynamic control flow, at trace or run time
        return module_order_ops(model)
    ops: list[Op] = []
    op_of: dict[str, int] = {}
    attr_params: dict[str, tuple[int, ...]] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _get_attr(gm, str(node.target))
            attr_params[node.name] = (index[id(value)],) if id(value) in index else ()
            continue
        if node.op in ("placeholder", "output"):
            continue
        reads: list[int] = []
        inputs = []
        for arg in node.all_input_nodes:
            if arg.name in op_of:
                inputs.append(op_of[arg.name])
            reads.extend(attr_params.get(arg.name, ()))
        if node.op == "call_module":
            sub = gm.get_submodule(str(node.target))
            reads.extend(index[id(p)] for p in sub.parameters() if id(p) in index)
        op_of[node.name] = len(ops)
        seconds = statistics.median(timer.times.get(node.name, [0.0]))
        ops.append(Op(node.name, seconds, tuple(sorted(set(inputs))), tuple(dict.fromkeys(reads))))
    return ops


def _get_attr(gm: nn.Module, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def module_order_ops(model: nn.Module) -> list[Op]:
    """A chain of the modules that own parameters directly, in registration order."""
    params, _ = param_infos(model)
    index = {id(p): i for i, p in enumerate(params)}
    ops: list[Op] = []
    for name, module in model.named_modules():
        reads = tuple(index[id(p)] for p in module.parameters(recurse=False) if id(p) in index)
        if reads:
            inputs = (len(ops) - 1,) if ops else ()
            ops.append(Op(name or "model", 1.0, inputs, reads))
    return ops


def model_priorities(
    model: nn.Module, kind: str, example: Tensor | None = None, iterations: int = 10
) -> list[int]:
    """Priority per parameter (in `param_infos` order) for fifo, layer or graph."""
    params, infos = param_infos(model)
    if kind == "fifo":
        return fifo_priorities(len(params))
    if kind == "layer":
        return layer_priorities([info.block for info in infos])
    ops = module_order_ops(model) if example is None else trace_ops(model, example, iterations)
    return graph_priorities(ops, len(params))


def model_plan(model: nn.Module, config: PSConfig, example: Tensor | None = None) -> PSPlan:
    """The plan `cadence train --strategy ps` makes for `model` under `config` (graph
    priorities from module order unless an `example` batch is traced and timed)."""
    _, infos = param_infos(model)
    priorities = model_priorities(model, config.order, example, config.trace_iterations)
    return build_plan(
        infos, priorities, config.servers, config.classes, config.slice_bytes,
        consistency=config.consistency,
    )  # fmt: skip
