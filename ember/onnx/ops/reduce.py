"""Reduction ONNX ops (ReduceX, CumSum, CumProd), with the axes as attribute or input by opset.

ReduceSum takes its axes as an input from opset 13, the other ReduceX from 18; an empty axes list
reduces everything unless `noop_with_empty_axes`. A reduction over an empty dimension gives the
reduction's identity (-inf for ReduceMax, 0 for ReduceSum, ...), as ONNX says.

Example:
    >>> OPS[("", "ReduceMean")](call, x)   # axes=[1], keepdims=1 from the node
"""

from __future__ import annotations

import math

from ...api import math as M
from ...api import reduce as R
from ...api import shape as S
from ...api.creation import full
from .registry import op


def _sum(x, dims, keep):
    return R.sum(x, dims, keep)


def _log_sum_exp(x, dims, keep):
    return R.logsumexp(x, dims, keep) if x.dtype.is_float else M.log(R.sum(M.exp(x), dims, keep))


# name: (reduce(x, dims, keepdim), identity over no elements, input map, output map)
_REDUCTIONS = {
    "ReduceSum": (_sum, 0.0, None, None),
    "ReduceMean": (lambda x, d, k: R.mean(x, d, k), math.nan, None, None),
    "ReduceMax": (lambda x, d, k: R.amax(x, d, k), -math.inf, None, None),
    "ReduceMin": (lambda x, d, k: R.amin(x, d, k), math.inf, None, None),
    "ReduceProd": (lambda x, d, k: R.prod(x, d, k), 1.0, None, None),
    "ReduceL1": (_sum, 0.0, M.abs, None),
    "ReduceL2": (_sum, 0.0, lambda x: x * x, M.sqrt),
    "ReduceSumSquare": (_sum, 0.0, lambda x: x * x, None),
    "ReduceLogSum": (_sum, -math.inf, None, M.log),
    "ReduceLogSumExp": (_log_sum_exp, -math.inf, None, None),
}
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce(call, x, axes=None):
    name = call.node.op_type
    fn, identity, pre, post = _REDUCTIONS[name]
    if call.opset >= _AXES_INPUT_SINCE.get(name, 18):
        axes = call.ints(axes) if axes is not None else []
    else:
        axes = call.attr("axes", [])
    keep = bool(call.attr("keepdims", 1))
    if not axes:
        if call.attr("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.ndim))
    dims = sorted({a % x.ndim for a in axes}) if x.ndim else []
    if any(x.shape[d] == 0 for d in dims):
        shape = [1 if d in dims else n for d, n in enumerate(x.shape) if keep or d not in dims]
        if x.dtype.name == "bool":
            identity = {math.inf: True, -math.inf: False}.get(identity, identity)
        elif not x.dtype.is_float:
            identity = {math.inf: 2 ** 31 - 1, -math.inf: -2 ** 31}.get(identity, identity)
        return full(tuple(shape), identity, dtype=x.dtype, device=x.device)
    if not dims:
        return x
    y = fn(pre(x) if pre else x, tuple(dims), keep)
    return (post(y) if post else y).cast(x.dtype)


for _name in _REDUCTIONS:
    op(_name)(_reduce)


def _cumulative(call, x, axis, fn, identity):
    axis = int(call.host(axis).reshape(-1)[0]) % x.ndim
    if call.attr("reverse", 0):
        x = S.flip(x, axis)
    if call.attr("exclusive", 0):
        pad = [0, 0] * (x.ndim - 1 - axis) + [1, 0]
        x = S.narrow(S.pad(x, pad, value=identity), axis, 0, x.shape[axis])
    y = fn(x, axis).cast(x.dtype)
    return S.flip(y, axis) if call.attr("reverse", 0) else y


@op("CumSum")
def cum_sum(call, x, axis):
    return _cumulative(call, x, axis, R.cumsum, 0.0)


@op("CumProd")
def cum_prod(call, x, axis):
    return _cumulative(call, x, axis, R.cumprod, 1.0)
