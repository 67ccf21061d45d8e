"""The ONNX form of each primitive: `EMIT[name](b, record, inputs, avals, out)` adds the nodes computing
`record` from the value names `inputs` (whose avals are `avals`) into `out`.

Most primitives are one ONNX op; a few are short compositions (rsqrt is `Reciprocal(Sqrt)`, expm1
is `Exp - 1`, exact GELU below opset 20 is `x * (1 + erf(x / sqrt 2)) / 2`). A primitive missing here
cannot be exported (`unsupported` names it, with the model's line).

Example:
    >>> sorted(EMIT)[:3]
    ['abs', 'acos', 'acosh']
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...backend.capture import Record, expr_of
from ...errors import ExportError
from ...ops.primitive import Aval
from .graph import Builder

Emit = Callable[[Builder, Record, list, list, str], None]
EMIT: dict[str, Emit] = {}
INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min

_UNARY = {"abs": "Abs", "neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "sin": "Sin", "cos": "Cos",
          "tan": "Tan", "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "reciprocal": "Reciprocal",
          "floor": "Floor", "ceil": "Ceil", "round": "Round", "sign": "Sign", "asin": "Asin", "acos": "Acos",
          "atan": "Atan", "sinh": "Sinh", "cosh": "Cosh", "asinh": "Asinh", "acosh": "Acosh", "atanh": "Atanh",
          "isnan": "IsNaN", "isinf": "IsInf", "logical_not": "Not", "bitwise_not": "BitwiseNot"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "maximum": "Max",
           "minimum": "Min", "eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
           "ge": "GreaterOrEqual", "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor",
           "bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr", "bitwise_xor": "BitwiseXor", "where": "Where"}
_REDUCE = {"sum": ("ReduceSum", 13), "amax": ("ReduceMax", 18), "amin": ("ReduceMin", 18),
           "prod": ("ReduceProd", 18)}


def _register(name: str):
    def add(fn: Emit) -> Emit:
        EMIT[name] = fn
        return fn
    return add


def _simple(op: str) -> Emit:
    return lambda b, rec, ins, avals, out: b.node(op, ins, out)


for _name, _op in {**_UNARY, **_BINARY}.items():
    EMIT[_name] = _simple(_op)


@_register("ne")
def _ne(b, rec, ins, avals, out):
    b.node("Not", [b.node("Equal", ins)], out)


@_register("rsqrt")
def _rsqrt(b, rec, ins, avals, out):
    b.node("Reciprocal", [b.node("Sqrt", ins)], out)


@_register("expm1")
def _expm1(b, rec, ins, avals, out):
    b.node("Sub", [b.node("Exp", ins), b.scalar(1, rec.aval.dtype)], out)


@_register("log1p")
def _log1p(b, rec, ins, avals, out):
    b.node("Log", [b.node("Add", [ins[0], b.scalar(1, rec.aval.dtype)])], out)


@_register("exp2")
def _exp2(b, rec, ins, avals, out):
    b.node("Pow", [b.scalar(2, rec.aval.dtype), ins[0]], out)


def _log_base(base: float) -> Emit:
    return lambda b, rec, ins, avals, out: b.node("Div", [b.node("Log", ins), b.scalar(math.log(base),
                                                                                          rec.aval.dtype)], out)


EMIT["log2"], EMIT["log10"] = _log_base(2.0), _log_base(10.0)


@_register("trunc")
def _trunc(b, rec, ins, avals, out):
    b.node("Mul", [b.node("Sign", ins), b.node("Floor", [b.node("Abs", ins)])], out)


@_register("gelu")
def _gelu(b, rec, ins, avals, out):
    if b.opset >= 20:
        b.node("Gelu", ins, out)
        return
    dtype = rec.aval.dtype
    phi = b.node("Add", [b.node("Erf", [b.node("Div", [ins[0], b.scalar(math.sqrt(2.0), dtype)])]),
                         b.scalar(1, dtype)])
    b.node("Mul", [b.node("Mul", [ins[0], phi]), b.scalar(0.5, dtype)], out)


@_register("remainder")
def _remainder(b, rec, ins, avals, out):
    if not rec.aval.dtype.is_float:
        b.node("Mod", ins, out)  # fmod=0: the sign of the divisor, as Python's %
        return
    floor = b.node("Floor", [b.node("Div", ins)])
    b.node("Sub", [ins[0], b.node("Mul", [floor, ins[1]])], out)


@_register("floor_divide")
def _floor_divide(b, rec, ins, avals, out):
    if rec.aval.dtype.is_float:
        b.node("Floor", [b.node("Div", ins)], out)
        return
    b.node("Div", [b.node("Sub", [ins[0], b.node("Mod", ins)]), ins[1]], out)  # exact: floors as Python


@_register("cast")
def _cast(b, rec, ins, avals, out):
    b.node("Cast", ins, out, to=b.type_of(rec.params["dtype"]))


def _reduce(name: str) -> Emit:
    op, since = _REDUCE[name]

    def emit(b, rec, ins, avals, out):
        dims, keep = rec.params["dims"], int(rec.params["keepdim"])
        if not dims:
            b.node("Identity", ins, out)
            return
        inputs, attrs = list(ins), {"keepdims": keep}
        b.axes(inputs, dims, attrs, since)
        b.node(op, inputs, out, **attrs)
    return emit


for _name in _REDUCE:
    EMIT[_name] = _reduce(_name)


@_register("argmax")
def _argmax_emit(b, rec, ins, avals, out):
    _index_reduce(b, rec, ins, out, "ArgMax")


@_register("argmin")
def _argmin_emit(b, rec, ins, avals, out):
    _index_reduce(b, rec, ins, out, "ArgMin")


def _index_reduce(b, rec, ins, out, op):
    attrs = {"axis": rec.params["dim"], "keepdims": int(rec.params["keepdim"])}
    if rec.aval.dtype.name == "i64":
        b.node(op, ins, out, **attrs)
    else:
        b.node("Cast", [b.node(op, ins, **attrs)], out, to=b.type_of(rec.aval.dtype))


@_register("cumsum")
def _cumsum(b, rec, ins, avals, out):
    b.node("CumSum", [ins[0], b.const(np.array(rec.params["dim"], np.int64))], out)


@_register("matmul")
def _matmul(b, rec, ins, avals, out):
    b.node("MatMul", ins, out)


@_register("reshape")
def _reshape(b, rec, ins, avals, out):
    shape = rec.params["shape"]
    attrs = {"allowzero": 1} if b.opset >= 14 and any(not is_sym(v) and int(v) == 0 for v in shape) else {}
    b.node("Reshape", [ins[0], b.ints(shape)], out, **attrs)


def is_sym(v) -> bool:
    return not isinstance(expr_of(v), int)


@_register("permute")
def _permute(b, rec, ins, avals, out):
    b.node("Transpose", ins, out, perm=list(rec.params["dims"]))


@_register("expand")
def _expand(b, rec, ins, avals, out):
    b.node("Expand", [ins[0], b.ints(rec.params["shape"])], out)


@_register("slice")
def _slice(b, rec, ins, avals, out):
    shape = avals[0].shape
    axes, starts, ends, steps = [], [], [], []
    for axis, (start, stop, step) in enumerate(rec.params["ranges"]):
        full_stop = expr_of(stop) == expr_of(shape[axis])
        if start == 0 and step == 1 and full_stop and not is_sym(start):
            continue
        axes.append(axis)
        starts.append(start)
        ends.append(INT64_MAX if full_stop else stop)
        steps.append(step)
    if not axes:
        b.node("Identity", ins, out)
        return
    b.node("Slice", [ins[0], b.ints(starts), b.ints(ends), b.ints(axes), b.ints(steps)], out)


@_register("flip")
def _flip(b, rec, ins, avals, out):
    dims = list(rec.params["dims"])
    if not dims:
        b.node("Identity", ins, out)
        return
    k = len(dims)
    b.node("Slice", [ins[0], b.ints([-1] * k), b.ints([INT64_MIN] * k), b.ints(dims), b.ints([-1] * k)], out)


@_register("cat")
def _cat(b, rec, ins, avals, out):
    b.node("Concat", ins, out, axis=rec.params["dim"])


@_register("pad")
def _pad(b, rec, ins, avals, out):
    pads = rec.params["pads"]
    values = [a for a, _ in pads] + [z for _, z in pads]
    b.node("Pad", [ins[0], b.ints(values), b.scalar(rec.params["value"], rec.aval.dtype)], out)


@_register("full")
def _full(b, rec, ins, avals, out):
    value = b.onnx.numpy_helper.from_array(np.array([rec.params["value"]], rec.aval.dtype.np))
    b.node("ConstantOfShape", [b.ints(rec.params["shape"])], out, value=value)


@_register("embedding")
def _embedding(b, rec, ins, avals, out):
    b.node("Gather", ins, out, axis=0)


@_register("index_select")
def _index_select(b, rec, ins, avals, out):
    b.node("Gather", ins, out, axis=rec.params["dim"])


@_register("gather")
def _gather(b, rec, ins, avals, out):
    b.node("GatherElements", ins, out, axis=rec.params["dim"])


@_register("scatter")
def _scatter(b, rec, ins, avals, out):
    reduction = {None: "none", "none": "none", "add": "add", "multiply": "mul", "mul": "mul"}.get(
        rec.params["reduce"])
    if reduction is None:
        raise unsupported(rec, f"scatter with reduce={rec.params['reduce']!r}")
    b.node("ScatterElements", ins, out, axis=rec.params["dim"], reduction=reduction)


def _spatial(params: dict, rank: int) -> dict:
    pads = [int(p) for p in params["padding"]]
    attrs = {"strides": [int(s) for s in params["stride"]], "pads": pads + pads}
    if "dilation" in params:
        attrs["dilations"] = [int(d) for d in params["dilation"]]
    return attrs


@_register("conv")
def _conv(b, rec, ins, avals, out):
    b.node("Conv", ins, out, group=rec.params["groups"], **_spatial(rec.params, len(avals[0].shape)))


@_register("conv_transpose")
def _conv_transpose(b, rec, ins, avals, out):
    b.node("ConvTranspose", ins, out, group=rec.params["groups"],
           output_padding=[int(p) for p in rec.params["output_padding"]], **_spatial(rec.params, 0))


@_register("max_pool")
def _max_pool(b, rec, ins, avals, out):
    b.node("MaxPool", ins, out, kernel_shape=list(rec.params["kernel"]), ceil_mode=int(rec.params["ceil_mode"]),
           **_spatial(rec.params, 0))


@_register("avg_pool")
def _avg_pool(b, rec, ins, avals, out):
    if rec.params["divisor_override"] is not None:
        raise unsupported(rec, "avg_pool with divisor_override")
    b.node("AveragePool", ins, out, kernel_shape=list(rec.params["kernel"]),
           ceil_mode=int(rec.params["ceil_mode"]), count_include_pad=int(rec.params["count_include_pad"]),
           **_spatial(rec.params, 0))


_RANDOM = ("uniform", "normal", "randint", "randperm", "multinomial")


def unsupported(rec: Record, what: str | None = None) -> ExportError:
    """The error for a record with no ONNX form here."""
    if rec.prim in _RANDOM:
        return ExportError(f"export: the random op {rec.prim} at {rec.where} cannot be exported (dropout in training "
                           f"mode? call model.eval() first)")
    return ExportError(f"export: {what or rec.prim} at {rec.where} has no ONNX form in ember's exporter "
                       f"(supported primitives: {', '.join(sorted(EMIT))})")


def emit(b: Builder, rec: Record, ins: list[str], avals: list[Aval], out: str) -> None:
    """Add the nodes of `rec` (see the module docs)."""
    fn = EMIT.get(rec.prim)
    if fn is None:
        raise unsupported(rec)
    fn(b, rec, ins, avals, out)
