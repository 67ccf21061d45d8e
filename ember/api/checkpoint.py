"""`ember.checkpoint(fn, *args)`: one call whose intermediates are recomputed in backward, not kept.

torch.utils.checkpoint's idea, per call, beside the device-wide `device.autodiff(checkpointing=)`. The
forward runs once, recorded, to find the tracked tensors `fn` reads (its tensor arguments and the
parameters it closes over); that graph is then dropped, and each output becomes one node whose parents
are those tensors. Its gradient rule reruns `fn(*args)` and walks the rerun's graph back to them. So
the autodiff keeps the arguments, not `fn`'s intermediates. Each rerun starts the random streams of
the arguments' devices where the first run started them (torch's checkpoint restores the RNG state
too), so dropout inside `fn` draws the same mask again; other threads drawing on those devices during
a rerun would shift it.

Example:
    >>> y = ember.checkpoint(lambda h: (h @ w).tanh() @ w2, x)
    >>> grads = y.sum().backward()          # (h @ w).tanh() is recomputed here
"""

from __future__ import annotations

from typing import Any, Callable

from ..autodiff.composite import Composite
from ..autodiff.grad_mode import enable_grad, grad_enabled, no_grad
from ..autodiff.graph import Node, backward, creating_graph, topological_order
from ..errors import EmberError
from ..random import stream_of
from ..tensor import Tensor


def checkpoint(fn: Callable, *args: Any):
    """`fn(*args)` (a tensor or a tuple of tensors) whose intermediates autodiff does not keep: backward
    reruns `fn` to get them. Gradients reach `fn`'s tensor arguments and the tracked tensors it closes
    over (module parameters). Without anything tracked, or under `ember.no_grad()`, it is `fn(*args)`.
    Each output that the backward walk reaches reruns `fn` once.

    Example:
        >>> y = ember.checkpoint(block, x)      # block's activations are recomputed in backward
    """
    rng = _rng_state(args)
    out = fn(*args)
    single = isinstance(out, Tensor)
    outs = (out,) if single else tuple(out) if isinstance(out, (tuple, list)) else None
    if outs is None or not all(isinstance(o, Tensor) for o in outs):
        raise EmberError(f"checkpoint: fn must return a tensor or a tuple of tensors, got {type(out).__name__}")
    if not grad_enabled() or not any(o.requires_grad for o in outs):
        return out
    stop = {a._handle.node for a in args if isinstance(a, Tensor) and a.requires_grad}
    order = topological_order([o._handle.node for o in outs if o.requires_grad], stop)
    reads = tuple(n for n in order if n.prim is None or n in stop)
    wrapped = tuple(_recorded(fn, args, rng, reads, i, o) if o.requires_grad else o for i, o in enumerate(outs))
    return wrapped[0] if single else type(out)(wrapped) if isinstance(out, tuple) else list(wrapped)


def _rng_state(args: tuple) -> dict:
    """The state of the random stream of each device the tensor arguments live on."""
    return {d: stream_of(d).state() for d in {a._device.inner for a in args if isinstance(a, Tensor)}}


def _recorded(fn: Callable, args: tuple, rng: dict, reads: tuple, index: int, out):
    """Output `index` of the call as one node over `reads`, its history dropped."""
    def rerun():
        now = _rng_state(args)
        for device, state in rng.items():
            stream_of(device).set_state(state)
        try:
            result = fn(*args)
        finally:
            for device, state in now.items():
                stream_of(device).set_state(state)
        return result if index == 0 and isinstance(result, Tensor) else result[index]

    def vjp(ctx, g):
        with enable_grad():
            again = rerun()
        if not again.requires_grad:
            return (None,) * len(reads)
        found = backward(again._handle.node, g, creating_graph(), reads)
        return tuple(found.get(n) for n in reads)

    def recompute(inputs):
        with no_grad():
            return rerun()._handle.primal

    prim = Composite("checkpoint", vjp, recompute)
    tape = out._handle.node.tape
    node = Node(prim, {}, reads, out._aval, out._handle.primal, tape, keep=False, capped=False)
    handle = type(out._handle)(out._handle.primal, node, out._aval)  # an autodiff handle, as out's, on the node
    return out._make(out._device, handle, out._aval)
