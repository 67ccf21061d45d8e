"""`GradientAccumulator`: sum the gradients of several backward passes, then take one step (Burn's
`GradientsAccumulator`).

Each pass adds `g_k` to the running sum `G = sum_k g_k` of every trainable parameter, which is what
PyTorch's `.grad` holds after several `backward()` calls without `zero_grad()`. For the gradient of a
mean over all micro-batches, divide each micro-batch loss by their number, as with PyTorch.

Example:
    >>> acc = GradientAccumulator()
    >>> for batch in micro_batches:
    ...     acc.accumulate(model, (loss_fn(model, batch) / len(micro_batches)).backward())
    >>> opt.step(acc.grads())
"""

from __future__ import annotations

from ..autodiff.gradients import Gradients
from ..nn.module import Module
from ..nn.param import Param
from ..tensor import Tensor


class GradientAccumulator:
    """Running sums of parameter gradients over several backward passes (see the module docs).

    Example:
        >>> acc = GradientAccumulator()
        >>> acc.accumulate(model, loss_a.backward()); acc.accumulate(model, loss_b.backward())
        >>> opt.step(acc.grads())
    """

    def __init__(self) -> None:
        self._sums: dict[int, tuple[Param, object, Tensor]] = {}  # id -> (param, its leaf, sum)
        self.passes = 0

    def accumulate(self, module: Module, grads: Gradients) -> None:
        """Add the gradients in `grads` of every trainable parameter of `module`.

        The parameters must not change between passes (step only after `grads()`): a parameter that
        was `set` is a new autodiff leaf, which the older passes' gradients do not belong to.
        """
        if not isinstance(grads, Gradients):
            raise TypeError(f"accumulate takes the Gradients of backward(), got {type(grads).__name__}")
        for param in module.parameters():
            if param.frozen or not param.requires_grad:
                continue
            grad = param.grad(grads)
            if grad is None:
                continue
            held = self._sums.get(id(param))
            if held is None:
                self._sums[id(param)] = (param, param._handle, grad)
            elif held[1] is not param._handle:
                raise RuntimeError("GradientAccumulator: a parameter changed between passes; call grads() "
                                   "and step before changing the model")
            else:
                self._sums[id(param)] = (param, held[1], held[2] + grad)
        self.passes += 1

    def grads(self) -> Gradients:
        """The summed gradients (for `opt.step`), and a fresh start for the next accumulation."""
        out = Gradients.from_pairs((p, total) for p, _, total in self._sums.values())
        self._sums.clear()
        self.passes = 0
        return out
