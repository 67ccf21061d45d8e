"""Shape and movement ONNX ops: Reshape, Transpose, Slice, Pad, Split, Concat, Expand, constants.

Shape arguments are read on the host (`call.ints`); before the opset that turned them into inputs
(Reshape 5, Slice 10, Pad 11, Split/Squeeze/Unsqueeze 13) they are attributes, as the opset says.

Example:
    >>> OPS[("", "Reshape")](call, x, shape)   # 0 copies the input's dim unless allowzero=1
"""

from __future__ import annotations

import math

import numpy as np

from ... import api
from ...api import shape as S
from ...api import math as M
from ...api.creation import arange, full, rand
from ...api.index import index_select
from ..proto import dtype_of, type_name
from .registry import op


def _axes(axes, ndim: int) -> list[int]:
    return [int(a) % ndim if ndim else 0 for a in axes]


@op("Reshape")
def reshape(call, x, shape=None):
    target = call.attr("shape") if call.opset < 5 else call.ints(shape)
    if not call.attr("allowzero", 0):
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return _reshape(x, target)


def _reshape(x, target):
    target = list(target)
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        target[target.index(-1)] = x.numel // known if known else 0
    return S.reshape(x, *target) if target else S.reshape(x, ())


@op("Flatten")
def flatten(call, x):
    axis = call.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return _reshape(x, [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])


@op("Transpose")
def transpose(call, x):
    perm = call.attr("perm", list(range(x.ndim))[::-1])
    return S.permute(x, *perm) if perm else x


@op("Squeeze")
def squeeze(call, x, axes=None):
    axes = call.attr("axes") if call.opset < 13 else (call.ints(axes) if axes is not None else None)
    if axes is None:
        return _reshape(x, [d for d in x.shape if d != 1])
    drop = set(_axes(axes, x.ndim))
    return _reshape(x, [d for i, d in enumerate(x.shape) if i not in drop])


@op("Unsqueeze")
def unsqueeze(call, x, axes=None):
    axes = call.attr("axes") if call.opset < 13 else call.ints(axes)
    rank = x.ndim + len(axes)
    new = set(_axes(axes, rank))
    dims = iter(x.shape)
    return _reshape(x, [1 if i in new else next(dims) for i in range(rank)])


@op("Concat")
def concat(call, *xs):
    axis = call.attr("axis")
    xs = [x for x in xs if x is not None]
    return S.cat(xs, axis)


def split_sizes(call, n: int, split, noutputs: int) -> list[int]:
    if split is not None:
        return list(split)
    parts = call.attr("num_outputs", noutputs)
    size = -(-n // parts)
    return [min(size, n - i * size) for i in range(parts)]


@op("Split")
def split(call, x, split_=None):
    axis = call.attr("axis", 0) % x.ndim
    sizes = call.attr("split") if call.opset < 13 else (call.ints(split_) if split_ is not None else None)
    sizes = split_sizes(call, x.shape[axis], sizes, call.noutputs)
    return tuple(S.split(x, sizes, axis))


@op("Slice")
def slice_(call, x, starts=None, ends=None, axes=None, steps=None):
    if call.opset < 10:
        starts, ends, axes = call.attr("starts"), call.attr("ends"), call.attr("axes")
        steps = None
    else:
        starts, ends = call.ints(starts), call.ints(ends)
        axes = call.ints(axes) if axes is not None else None
        steps = call.ints(steps) if steps is not None else None
    axes = _axes(axes if axes is not None else range(len(starts)), x.ndim)
    steps = steps or [1] * len(starts)
    index = [slice(None)] * x.ndim
    for a, start, end, step in zip(axes, starts, ends, steps):
        if step == 0:
            call.unsupported("a step of 0 (ONNX requires non-zero steps)")
        index[a] = slice(start, end, step)
    index = [_python_slice(s, n) for s, n in zip(index, x.shape)]
    if all(s == slice(0, n, 1) for s, n in zip(index, x.shape)):
        return x
    sizes = [len(range(*s.indices(n))) if isinstance(s, slice) else n for s, n in zip(index, x.shape)]
    if 0 in sizes:
        return api.creation.zeros(*sizes, dtype=x.dtype, device=x.device)
    return x[tuple(index)]


def _python_slice(s: slice, n: int) -> slice:
    """A normalised slice whose stop -1 (before the start, going down) is spelled as None."""
    start, stop, step = s.indices(n)
    return slice(start, None if stop < 0 else stop, step)


def _pad_index(mode: str, n: int, before: int, after: int) -> np.ndarray:
    i = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return i % n
    period = 2 * (n - 1) if n > 1 else 1
    i = np.abs(i) % period
    return np.where(i >= n, period - i, i)


@op("Pad")
def pad(call, x, pads=None, value=None, axes=None):
    mode = call.attr("mode", "constant")
    if call.opset < 11:
        pads, value = call.attr("pads", call.attr("paddings")), call.attr("value", 0.0)
    else:
        pads = call.ints(pads)
        value = call.host(value).item() if value is not None else 0
    axes = _axes(call.ints(axes), x.ndim) if axes is not None else list(range(x.ndim))
    k = len(axes)
    widths = {a: (pads[i], pads[i + k]) for i, a in enumerate(axes)}
    if mode == "constant":
        flat = []
        for a in reversed(range(x.ndim)):
            flat += widths.get(a, (0, 0))
        return S.pad(x, flat, value=value)
    if mode not in ("reflect", "edge", "wrap"):
        call.unsupported(f"mode {mode!r} (known: constant, reflect, edge, wrap)")
    for a, (before, after) in widths.items():
        if before or after:
            index = _pad_index(mode, x.shape[a], before, after)
            x = index_select(x, a, call.const(index.astype(np.int64)))
    return x


def broadcast_shape(a, b) -> list[int]:
    return list(np.broadcast_shapes(tuple(a), tuple(b)))


@op("Expand")
def expand(call, x, shape):
    return S.broadcast_to(x, broadcast_shape(x.shape, call.ints(shape)))


@op("Tile")
def tile(call, x, repeats):
    reps = call.ints(repeats)
    return S.tile(x, *reps) if reps else x


@op("Shape")
def shape(call, x):
    dims = list(x.shape)
    start, end = call.attr("start", 0), call.attr("end", None)
    return call.const(np.array(dims[slice(start, end)], np.int64))


@op("Size")
def size(call, x):
    return call.const(np.array(x.numel, np.int64))


@op("Constant")
def constant(call):
    cached = call.node.cache.get(call.device)
    if cached is not None:
        return cached
    a = call.node.attrs
    if "value" in a or "sparse_value" in a:
        value = a.get("value", a.get("sparse_value"))
    elif "value_float" in a:
        value = np.array(a["value_float"], np.float32)
    elif "value_floats" in a:
        value = np.array(a["value_floats"], np.float32)
    elif "value_int" in a:
        value = np.array(a["value_int"], np.int64)
    elif "value_ints" in a:
        value = np.array(a["value_ints"], np.int64)
    else:
        call.unsupported(f"attribute {next(iter(a), '?')!r} (string constants: ember holds no strings)")
    if value.dtype.kind in "OSU":
        call.unsupported("a string tensor (ember holds no strings)")
    call.node.cache[call.device] = t = call.const(value)
    return t


@op("ConstantOfShape")
def constant_of_shape(call, shape):
    value = call.attr("value", np.zeros(1, np.float32))
    if dtype_of_np(value.dtype) is None:
        call.unsupported(f"a value of dtype {value.dtype}, which ember does not hold")
    return full(tuple(call.ints(shape)), value.reshape(-1)[0].item(), dtype=dtype_of_np(value.dtype), device=call.device)


def dtype_of_np(dt):
    from ...dtype import dtype_of as of
    try:
        return of(dt)
    except Exception:  # an array dtype ember does not hold
        return None


@op("Range")
def range_(call, start, limit, delta):
    s, l, d = (call.host(v).item() for v in (start, limit, delta))
    n = max(int(math.ceil((l - s) / d)), 0)
    return (arange(n, device=call.device).cast(start.dtype) * delta.reshape(()) + start.reshape(())).cast(start.dtype)


@op("EyeLike")
def eye_like(call, x):
    code = call.attr("dtype")
    dt = x.dtype if code is None else dtype_of(code)
    if dt is None:
        call.unsupported(f"dtype {type_name(code)}, which ember does not hold")
    n, m = x.shape
    k = call.attr("k", 0)
    rows = arange(n, device=call.device).reshape(n, 1)
    cols = arange(m, device=call.device).reshape(1, m)
    return (cols - rows == k).cast(dt)


@op("Trilu")
def trilu(call, x, k=None):
    k = int(call.host(k).item()) if k is not None else 0
    return S.triu(x, k) if call.attr("upper", 1) else S.tril(x, k)


@op("DepthToSpace")
def depth_to_space(call, x):
    b, mode = call.attr("blocksize"), call.attr("mode", "DCR")
    n, c, h, w = x.shape
    if mode == "DCR":
        y = S.permute(x.reshape(n, b, b, c // (b * b), h, w), 0, 3, 4, 1, 5, 2)
    else:
        y = S.permute(x.reshape(n, c // (b * b), b, b, h, w), 0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@op("SpaceToDepth")
def space_to_depth(call, x):
    b = call.attr("blocksize")
    n, c, h, w = x.shape
    order = (0, 1, 3, 5, 2, 4) if call.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    y = S.permute(x.reshape(n, c, h // b, b, w // b, b), *order)
    return y.reshape(n, c * b * b, h // b, w // b)


@op("ReverseSequence")
def reverse_sequence(call, x, lengths):
    batch_axis, time_axis = call.attr("batch_axis", 1), call.attr("time_axis", 0)
    steps, batch = x.shape[time_axis], x.shape[batch_axis]
    lens = call.host(lengths).astype(np.int64)
    t = np.arange(steps)[:, None]
    index = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)  # (time, batch)
    shape = [1] * x.ndim
    shape[time_axis], shape[batch_axis] = steps, batch
    order = [time_axis, batch_axis] if time_axis < batch_axis else [batch_axis, time_axis]
    index = index if order[0] == time_axis else index.T
    index = np.broadcast_to(index.reshape(shape), x.shape)
    return api.reduce.gather(x, time_axis, call.const(np.ascontiguousarray(index)))


@op("CenterCropPad")
def center_crop_pad(call, x, shape):
    target = call.ints(shape)
    axes = _axes(call.attr("axes", list(range(x.ndim))), x.ndim)
    for a, size in zip(axes, target):
        n = x.shape[a]
        if size < n:
            start = (n - size) // 2
            x = S.narrow(x, a, start, size)
        elif size > n:
            before = (size - n) // 2
            flat = [0, 0] * (x.ndim - 1 - a) + [before, size - n - before]
            x = S.pad(x, flat)
    return x


@op("Dropout")
def dropout(call, x, ratio=None, training=None):
    rate = float(call.host(ratio).item()) if ratio is not None else call.attr("ratio", 0.5)
    if call.opset < 7 and call.attr("is_test", 0) == 0:
        call.unsupported("is_test=0")
    if training is None or not bool(call.host(training).item()) or rate == 0:
        return (x, full(x.shape, True, device=call.device)) if call.wants(1) else x
    keep = _keep_mask(call, x.shape, rate)
    y = M.where(keep, x * (1 / (1 - rate)), x * 0)
    return (y, keep) if call.wants(1) else y


def _keep_mask(call, shape, rate: float):
    """Dropout's kept positions: with a `seed`, drawn on the host by NumPy's RandomState(seed) (the
    generator of ONNX's reference, so seeded graphs reproduce it); without, by ember's generator."""
    seed = call.attr("seed")
    if seed is None:
        return rand(*shape, device=call.device) >= rate
    return call.const(np.random.RandomState(int(seed)).uniform(0, 1.0, shape) >= rate)
