"""`ZeroRedundancyOptimizer`: ZeRO stage 1, the optimizer state sharded over the ranks.

The trainable parameters are seen as one flat vector, padded to a multiple of the world size and cut
into one block per rank. `step(grads)` reduce-scatters the flat local gradients (rank r receives the
mean over ranks of block r), runs the wrapped optimizer's rule on block r only (so each rank keeps
1/world of its state), and all-gathers the updated blocks into every parameter. That equals plain
data-parallel training for rules that work element by element (SGD, Adam, AdamW, RMSprop, AdaGrad,
Lion, Adan); other rules, parameter groups and optimizer-level clipping are refused.

`state_dict()` (a collective: every rank calls it) gathers the blocks into the wrapped optimizer's own
format, keyed by parameter name; `load_state_dict` takes that format, so a checkpoint resumes with or
without ZeRO, on any number of ranks. Unlike the plain rule, a parameter without a gradient in a step
is updated with a zero gradient (its block holds other parameters' elements too).

Example:
    >>> opt = ZeroRedundancyOptimizer(AdamW(model, lr=1e-3))     # after ember.distributed.init()
    >>> opt.step(loss.backward())
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import distributed
from ..api.creation import from_numpy, zeros
from ..api.shape import cat
from ..autodiff.gradients import Gradients
from ..distributed import ProcessGroup
from ..nn.module import Module
from ..nn.param import Param
from ..optim import SGD, AdaGrad, Adam, AdamW, Adan, Lion, Optimizer, RMSprop

ELEMENTWISE = (SGD, Adam, AdamW, RMSprop, AdaGrad, Lion, Adan)


class _Block(Module):
    """The module the sharded rule runs on: one parameter, this rank's block of the flat vector."""

    def __init__(self, value) -> None:
        self.flat = Param(value)


class ZeroRedundancyOptimizer:
    """`optimizer`'s rule with its state sharded over `group` (see the module docs)."""

    def __init__(self, optimizer: Optimizer, group: ProcessGroup | None = None) -> None:
        name = type(optimizer).__name__
        if type(optimizer) not in ELEMENTWISE:
            raise ValueError(f"ZeroRedundancyOptimizer: {name} does not update element by element; supported: "
                             f"{[c.__name__ for c in ELEMENTWISE]}")
        if optimizer._delegates or any(e.group_lr is not None for e in optimizer._entries):
            raise ValueError(f"ZeroRedundancyOptimizer: {name} has ParamGroups; sharding takes one set of options")
        if optimizer.clip_value is not None or optimizer.clip_norm is not None:
            raise ValueError(f"ZeroRedundancyOptimizer: {name} clips (clip_value/clip_norm), which needs every "
                             f"rank's block; clip before the step instead")
        self.base, self.group = optimizer, group if group is not None else distributed.group()
        self.entries = [e for e in optimizer._entries if not e.param.frozen]
        dtypes = {e.param.dtype for e in self.entries}
        if len(dtypes) != 1:
            raise ValueError(f"ZeroRedundancyOptimizer: the trainable parameters must share one dtype, got "
                             f"{sorted(d.name for d in dtypes)}")
        self.total = sum(e.param.numel for e in self.entries)
        self.block = -(-self.total // self.group.size)
        device = self.entries[0].param.device
        self._block = _Block(self._flat_values()[self._span()].to(device.autodiff()))
        self.shard = type(optimizer)(self._block, lr=optimizer.lr, master_weights=optimizer.master_weights,
                                     **vars(optimizer.options))

    # ---- what the Learner and schedulers use ----------------------------------------------------
    @property
    def lr(self) -> float:
        return self.base.lr

    @lr.setter
    def lr(self, value: float) -> None:
        self.base.lr = value

    @property
    def initial_lr(self) -> float:
        return self.base.initial_lr

    @property
    def steps(self) -> int:
        return self.shard.steps

    def step(self, grads: Gradients) -> None:
        """One step of the sharded rule (a collective: every rank calls it)."""
        device = self.entries[0].param.device.inner
        parts = []
        for e in self.entries:
            g = e.param.grad(grads)
            parts.append(g.reshape(-1) if g is not None else zeros(e.param.numel, dtype=e.param.dtype, device=device))
        mine = self.group.reduce_scatter(self._padded(parts), op="mean")
        self._block.flat.set(self._flat_values()[self._span()])
        self.shard.lr = self.base.lr
        self.shard.step(Gradients.from_pairs([(self._block.flat, mine)]))
        self._scatter(self.group.all_gather(self._block.flat.value.inner()))
        self.base.steps = self.shard.steps

    # ---- state: the wrapped optimizer's format, gathered and split -------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The full state in `optimizer.state_dict()`'s format (a collective: every rank calls it)."""
        inner = self.shard.state_dict()
        block = inner["params"].get("flat", {})
        params: dict[str, dict[str, Any]] = {e.name: {} for e in self.entries} if block else {}
        for key, value in block.items():
            if isinstance(value, np.ndarray):
                gathered = self.group.all_gather(from_numpy(value)).numpy()[:self.total]
                for e, piece in zip(self.entries, np.split(gathered, np.cumsum(self._sizes())[:-1])):
                    params[e.name][key] = piece.reshape(e.param.shape)
            else:
                for e in self.entries:
                    params[e.name][key] = value
        return {"optimizer": type(self.base).__name__, "lr": self.base.lr, "steps": inner["steps"],
                "params": params, "delegates": []}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state of the wrapped optimizer's format (saved with or without ZeRO)."""
        name = type(self.base).__name__
        if state.get("optimizer") != name:
            raise ValueError(f"ZeroRedundancyOptimizer.load_state_dict: the state is of {state.get('optimizer')!r}, "
                             f"this optimizer is {name}")
        saved = state["params"]
        block: dict[str, Any] = {}
        if saved:
            missing = [e.name for e in self.entries if e.name not in saved]
            if missing:
                raise ValueError(f"ZeroRedundancyOptimizer.load_state_dict: no state for {missing} (the sharded "
                                 f"rule keeps state for every parameter)")
            for key, first in saved[self.entries[0].name].items():
                if isinstance(first, np.ndarray):
                    flat = np.concatenate([np.asarray(saved[e.name][key]).reshape(-1) for e in self.entries])
                    padded = np.zeros(self.block * self.group.size, flat.dtype)
                    padded[:self.total] = flat
                    block[key] = padded[self._span()]
                else:
                    block[key] = first
        self.shard.load_state_dict({"optimizer": name, "lr": state["lr"], "steps": state["steps"],
                                    "params": {"flat": block} if block else {}, "delegates": []})
        self.base.lr, self.base.steps = state["lr"], int(state["steps"])

    # ---- the flat vector -------------------------------------------------------------------------
    def _sizes(self) -> list[int]:
        return [e.param.numel for e in self.entries]

    def _span(self) -> slice:
        return slice(self.group.rank * self.block, (self.group.rank + 1) * self.block)

    def _padded(self, parts: list) -> Any:
        pad = self.block * self.group.size - self.total
        if pad:
            parts = [*parts, zeros(pad, dtype=parts[0].dtype, device=parts[0].device)]
        return cat(parts)

    def _flat_values(self) -> Any:
        return self._padded([e.param.value.inner().reshape(-1) for e in self.entries])

    def _scatter(self, flat: Any) -> None:
        offset = 0
        for e in self.entries:
            n = e.param.numel
            e.param.set(flat[offset:offset + n].reshape(e.param.shape))
            offset += n
