"""Where each parameter is first read in a forward pass: the module whose forward must wait for
that parameter's update.

A module's own parameters are not always read by that module: `nn.MultiheadAttention` reads
`out_proj.weight` without calling `out_proj`, a tied weight is read by two modules, functional
code reads weights from anywhere. So the first forward pass is watched: a torch function mode
records, for every parameter handed to a torch function (also inside lists and tuples, as an
LSTM's flat weights are), the innermost module running at its first use. Metadata reads
(`.shape`, `.dtype`) do not count: an in-place update does not change them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle


class _FirstUse(TorchFunctionMode):
    def __init__(self, index_of: dict[int, int], stack: list[nn.Module]):
        super().__init__()
        self.index_of = index_of
        self.stack = stack
        self.first: dict[int, nn.Module | None] = {}

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) != "__get__":
            self._scan(args)
            self._scan(kwargs.values())
        return func(*args, **kwargs)

    def _scan(self, items: Iterable[Any]) -> None:
        for item in items:
            if isinstance(item, nn.Parameter):
                index = self.index_of.get(id(item))
                if index is not None and index not in self.first:
                    self.first[index] = self.stack[-1] if self.stack else None
            elif isinstance(item, (list, tuple)):
                self._scan(item)


class UseRecorder:
    """Watches one forward pass of `root`: `start()` in the root's pre-hook, `stop()` in its
    post-hook; then `uses()` maps each module to the parameters it reads first."""

    def __init__(self, root: nn.Module, params: Sequence[nn.Parameter]):
        self._root = root
        self._num_params = len(params)
        self._stack: list[nn.Module] = []
        self._mode = _FirstUse({id(p): i for i, p in enumerate(params)}, self._stack)
        self._handles: list[RemovableHandle] = []

    def start(self) -> None:
        stack = self._stack

        def push(module: nn.Module, _args: Any) -> None:
            stack.append(module)

        def pop(_module: nn.Module, _args: Any, _out: Any) -> None:
            stack.pop()

        for module in self._root.modules():
            if module is self._root:  # running already: its hooks are chosen
                continue
            self._handles.append(module.register_forward_pre_hook(push))
            self._handles.append(module.register_forward_hook(pop, always_call=True))
        self._mode.__enter__()

    def stop(self) -> None:
        self._mode.__exit__(None, None, None)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.clear()

    def uses(self) -> tuple[list[tuple[nn.Module, tuple[int, ...]]], tuple[int, ...]]:
        """(module, parameter indices it reads first) in first-use order, and the parameters
        never read or first read outside every module (the root's forward gates those)."""
        by_module: dict[int, tuple[nn.Module, list[int]]] = {}
        at_root: list[int] = []
        for index, module in self._mode.first.items():
            if module is None or module is self._root:
                at_root.append(index)
            else:
                by_module.setdefault(id(module), (module, []))[1].append(index)
        seen = set(self._mode.first)
        at_root += [i for i in range(self._num_params) if i not in seen]
        return [(m, tuple(ix)) for m, ix in by_module.values()], tuple(sorted(at_root))
