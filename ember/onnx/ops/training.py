"""The training ops of ai.onnx.preview.training: Adagrad, Adam, Momentum (one optimizer step).

Each takes the learning rate R and step count T, then per optimized tensor X its gradient G and state
(grouped: all X, then all G, then each state kind), and returns the new X and states in that grouping.
The update is elementwise ember math on the device; T is read on the host (the step's bias correction).

Example:
    >>> OPS[("ai.onnx.preview.training", "Adam")](call, r, t, x, g, v, h)   # -> x_new, v_new, h_new
"""

from __future__ import annotations

from ...api import math as M
from .registry import op

TRAINING = "ai.onnx.preview.training"


def _step(call, r, t, tensors, kinds: int, update):
    """Apply `update(r, t, x, g, *states) -> (x, *states)` to each group of `kinds` inputs; the outputs
    grouped by kind, as the inputs are."""
    n = len(tensors) // kinds
    results = [update(r.reshape(()), int(call.host(t).item()), *tensors[i::n]) for i in range(n)]
    return tuple(out[k] for k in range(kinds - 1) for out in results)


@op("Adagrad", domain=TRAINING)
def adagrad(call, r, t, *tensors):
    decay, eps, norm = call.attr("decay_factor", 0.0), call.attr("epsilon", 1e-6), call.attr("norm_coefficient", 0.0)

    def update(r, t, x, g, h):
        g = norm * x + g
        h = h + g * g
        return x - r / (1 + t * decay) * g / (M.sqrt(h) + eps), h
    return _step(call, r, t, tensors, 3, update)


@op("Adam", domain=TRAINING)
def adam(call, r, t, *tensors):
    alpha, beta, eps = call.attr("alpha", 0.9), call.attr("beta", 0.999), call.attr("epsilon", 1e-6)
    norm, post = call.attr("norm_coefficient", 0.0), call.attr("norm_coefficient_post", 0.0)

    def update(r, t, x, g, v, h):
        g = norm * x + g
        v = alpha * v + (1 - alpha) * g
        h = beta * h + (1 - beta) * (g * g)
        rate = r * ((1 - beta ** t) ** 0.5 / (1 - alpha ** t)) if t > 0 else r
        return (1 - post) * (x - rate * (v / (M.sqrt(h) + eps))), v, h
    return _step(call, r, t, tensors, 4, update)


@op("Momentum", domain=TRAINING)
def momentum(call, r, t, *tensors):
    alpha, beta, norm = call.attr("alpha"), call.attr("beta"), call.attr("norm_coefficient")
    nesterov = call.attr("mode", "standard") == "nesterov"

    def update(r, t, x, g, v):
        g = norm * x + g
        v = alpha * v + (beta if t > 0 else 1) * g
        return x - r * (g + alpha * v if nesterov else v), v
    return _step(call, r, t, tensors, 3, update)
