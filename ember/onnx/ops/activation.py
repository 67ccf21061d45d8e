"""Activation ONNX ops and the softmax family (with opset-12's flatten-to-2D axis semantics).

Example:
    >>> OPS[("", "LeakyRelu")](call, x)   # alpha from the node, 0.01 by default
"""

from __future__ import annotations

from ...api import math as M
from ...api import reduce as R
from ...api.index import one_hot
from ...nn import functional as F
from .registry import op


@op("Relu")
def relu(call, x):
    return F.relu(x)


@op("LeakyRelu")
def leaky_relu(call, x):
    return F.leaky_relu(x, call.attr("alpha", 0.01))


@op("PRelu")
def prelu(call, x, slope):
    return M.where(x < 0, x * slope, x)


@op("Elu")
def elu(call, x):
    return F.elu(x, call.attr("alpha", 1.0))


@op("Celu")
def celu(call, x):
    a = call.attr("alpha", 1.0)
    return M.clamp(x, min=0.0) + M.clamp(a * M.expm1(x / a), max=0.0)


@op("Selu")
def selu(call, x):
    alpha, gamma = call.attr("alpha", 1.67326319217681884765625), call.attr("gamma", 1.05070102214813232421875)
    return gamma * M.where(x > 0, x, alpha * M.expm1(x))


@op("ThresholdedRelu")
def thresholded_relu(call, x):
    return M.where(x > call.attr("alpha", 1.0), x, x * 0)


@op("HardSigmoid")
def hard_sigmoid(call, x):
    return M.clamp(call.attr("alpha", 0.2) * x + call.attr("beta", 0.5), min=0.0, max=1.0)


@op("HardSwish")
def hard_swish(call, x):
    return x * M.clamp(x / 6 + 0.5, min=0.0, max=1.0)


@op("Softplus")
def softplus(call, x):
    return M.where(x > 0, x + M.log1p(M.exp(-x)), M.log1p(M.exp(x)))


@op("Softsign")
def softsign(call, x):
    return x / (1 + M.abs(x))


@op("Mish")
def mish(call, x):
    return x * M.tanh(softplus(call, x))


@op("Swish")
def swish(call, x):
    return x * M.sigmoid(call.attr("alpha", 1.0) * x)


@op("Gelu")
def gelu(call, x):
    return F.gelu(x, approximate=call.attr("approximate", "none"))


@op("Shrink")
def shrink(call, x):
    bias, lambd = call.attr("bias", 0.0), call.attr("lambd", 0.5)
    out = M.where(x < -lambd, x + bias, M.where(x > lambd, x - bias, x * 0))
    return out.cast(x.dtype)


def _softmax_like(call, x, fn):
    """Softmax-like `fn(x, dim)` over ONNX's axis: before opset 13 the input is flattened to 2D at
    `axis` (default 1) and normalised over the second dimension; from 13 over `axis` (default -1)."""
    if call.opset >= 13:
        return fn(x, call.attr("axis", -1))
    axis = call.attr("axis", 1) % max(x.ndim, 1)
    shape = x.shape
    lead = 1
    for d in shape[:axis]:
        lead *= d
    return fn(x.reshape(lead, -1), 1).reshape(shape)


@op("Softmax")
def softmax(call, x):
    return _softmax_like(call, x, F.softmax)


@op("LogSoftmax")
def log_softmax(call, x):
    return _softmax_like(call, x, F.log_softmax)


def _hardmax(x, dim):
    return one_hot(R.argmax(x, dim), x.shape[dim]).cast(x.dtype).movedim(-1, dim)


@op("Hardmax")
def hardmax(call, x):
    return _softmax_like(call, x, _hardmax)
