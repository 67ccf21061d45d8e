"""Neural-network ONNX ops: MatMul, Gemm, Einsum, Conv, ConvTranspose, pooling, normalization.

Conv and pooling pads come as ONNX's [begins..., ends...] (or `auto_pad`): symmetric ones go to
ember's `padding`, asymmetric ones pad the input first (with -inf for MaxPool). Average pooling is
a sum over a count (so `count_include_pad` and ceil-mode windows agree with ONNX).

Example:
    >>> OPS[("", "Conv")](call, x, w, b)   # strides, pads, dilations, group from the node
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...api import math as M
from ...api import reduce as R
from ...api import shape as S
from ...api.creation import ones
from ...api.index import index_add
from ...api.linalg import einsum, matmul
from ...dtype import f32, i64
from ...nn import functional as F
from ...nn.functional import pool as P
from .registry import op

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@op("MatMul")
def mat_mul(call, a, b):
    return matmul(a, b)


@op("Gemm")
def gemm(call, a, b, c=None):
    if call.attr("transA", 0):
        a = a.T
    if call.attr("transB", 0):
        b = b.T
    return gemm_output(call, matmul(a, b), c, a.dtype)


def gemm_output(call, y, c, dtype):
    """Gemm's alpha * y + beta * c of the product y, as `dtype` (A's)."""
    alpha, beta = call.attr("alpha", 1.0), call.attr("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c * beta if beta != 1.0 else c)
    return y.cast(dtype)


@op("Einsum")
def einsum_(call, *xs):
    eq = call.attr("equation").replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not arrow:  # the implicit output: the ellipsis, then the labels used once, sorted
        labels = lhs.replace("...", "").replace(",", "")
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(c for c in set(labels) if labels.count(c) == 1))
    pairs = [_diagonals(t, x) for t, x in zip(terms, xs)]
    return einsum(",".join(t for t, _ in pairs) + "->" + rhs, *[x for _, x in pairs])


def _diagonals(term: str, x):
    """(term, x) with each label repeated in `term` reduced to one, x taken on that diagonal."""
    head, ell, tail = term.partition("...")
    labels = list(head) + ["."] * (x.ndim - len(head) - len(tail)) + list(tail) if ell else list(term)
    while True:
        repeated = [c for c in labels if c != "." and labels.count(c) > 1]
        if not repeated:
            break
        i, j = [k for k, c in enumerate(labels) if c == repeated[0]][:2]
        n = x.shape[i]
        x = S.movedim(x, (i, j), (-2, -1))
        x = x.reshape(*x.shape[:-2], n * n)[..., ::n + 1]
        labels = [c for k, c in enumerate(labels) if k not in (i, j)] + [repeated[0]]
    text = "".join(labels)
    return (text.replace("." * text.count("."), "...") if "." in text else text), x


def _spatial(call, x, kernel, strides, dilations):
    """Begin and end pads per spatial dim, from `pads` or `auto_pad`."""
    nd = len(kernel)
    auto = call.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = call.attr("pads", [0] * 2 * nd) if auto == "NOTSET" else [0] * 2 * nd
        return list(pads[:nd]), list(pads[nd:])
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        call.unsupported(f"auto_pad {auto!r}")
    begins, ends = [], []
    for n, k, s, d in zip(x.shape[2:], kernel, strides, dilations):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small = total // 2
        begins.append(small if auto == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return begins, ends


def _torch_pad(begins, ends) -> list[int]:
    flat = []
    for b, e in zip(reversed(begins), reversed(ends)):
        flat += [b, e]
    return flat


@op("Conv")
def conv(call, x, w, b=None):
    kernel = call.attr("kernel_shape", list(w.shape[2:]))
    nd = len(kernel)
    if nd not in _CONV:
        call.unsupported(f"a {nd}-D convolution (ember has 1-D, 2-D and 3-D)")
    strides, dilations = call.attr("strides", [1] * nd), call.attr("dilations", [1] * nd)
    begins, ends = _spatial(call, x, kernel, strides, dilations)
    padding = begins
    if begins != ends:
        x, padding = S.pad(x, _torch_pad(begins, ends)), [0] * nd
    return _CONV[nd](x, w, b, stride=strides, padding=padding, dilation=dilations, groups=call.attr("group", 1))


@op("ConvTranspose")
def conv_transpose(call, x, w, b=None):
    kernel = call.attr("kernel_shape", list(w.shape[2:]))
    nd = len(kernel)
    if nd not in _CONV_T:
        call.unsupported(f"a {nd}-D transposed convolution (ember has 1-D, 2-D and 3-D)")
    strides, dilations = call.attr("strides", [1] * nd), call.attr("dilations", [1] * nd)
    extra = call.attr("output_padding", [0] * nd)
    y = _CONV_T[nd](x, w, None, stride=strides, padding=0, groups=call.attr("group", 1), dilation=dilations)
    full = y.shape[2:]
    shape = call.attr("output_shape")
    auto = call.attr("auto_pad", "NOTSET")
    if shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = shape[-nd:] if shape is not None else [n * s for n, s in zip(x.shape[2:], strides)]
        totals = [f + e - o for f, e, o in zip(full, extra, shape)]
        upper = auto == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
        ends = [t - bg for t, bg in zip(totals, begins)]
    else:
        pads = call.attr("pads", [0] * 2 * nd) if auto != "VALID" else [0] * 2 * nd
        begins, ends = list(pads[:nd]), list(pads[nd:])
    widths = [-bg for bg in begins], [e_ - e for e, e_ in zip(ends, extra)]
    y = S.pad(y, _torch_pad(*widths))
    if b is not None:
        y = y + b.reshape(-1, *[1] * nd)
    return y


def _pool_args(call, x):
    kernel = call.attr("kernel_shape")
    nd = len(kernel)
    strides = call.attr("strides", [1] * nd)
    dilations = call.attr("dilations", [1] * nd)
    begins, ends = _spatial(call, x, kernel, strides, dilations)
    return kernel, nd, strides, dilations, begins, ends


@op("MaxPool")
def max_pool(call, x):
    kernel, nd, strides, dilations, begins, ends = _pool_args(call, x)
    ceil = bool(call.attr("ceil_mode", 0))
    padding = begins
    if begins != ends or any(2 * p > k for p, k in zip(begins, kernel)):
        if call.wants(1):
            call.unsupported("the Indices output with asymmetric pads")
        lowest = -math.inf if x.dtype.is_float else float(np.iinfo(x.dtype.np).min)
        x, padding = S.pad(x, _torch_pad(begins, ends), value=lowest), [0] * nd
    if not x.dtype.is_float:
        return max_pool(call, x.cast(f32)).cast(x.dtype) if not call.wants(1) else call.unsupported("integer Indices")
    if not call.wants(1):
        return P.max_pool(x, kernel, strides, padding, dilations, ceil, nd=nd)
    y, index = P.max_pool(x, kernel, strides, padding, dilations, ceil, return_indices=True, nd=nd)
    plane = math.prod(x.shape[2:])
    n, c = x.shape[:2]
    base = (np.arange(n * c, dtype=np.int64) * plane).reshape(n, c, *[1] * nd)
    index = index.cast(i64)
    if call.attr("storage_order", 0):  # column-major positions within the plane
        index = _column_major(index, x.shape[2:])
    return y, index + call.const(base)


def _column_major(index, sizes):
    """Row-major flat positions `index` into dims `sizes` as column-major ones."""
    digits, rest = [], index
    for size in reversed(sizes):
        digits.append(rest % size)
        rest = rest // size
    out, stride = None, 1
    for d, size in zip(reversed(digits), sizes):  # the first dim varies fastest column-major
        out = d * stride if out is None else out + d * stride
        stride *= size
    return out


def _sum_pool(call, x, kernel, strides, begins, ends, fill: float):
    nd = len(kernel)
    x = S.pad(x, _torch_pad(begins, ends), value=fill) if any(begins) or any(ends) else x
    return P.avg_pool(x, kernel, strides, 0, bool(call.attr("ceil_mode", 0)), True, 1, nd=nd)


def _dilated_sum_pool(call, x, kernel, strides, dilations, begins, ends, fill: float = 0.0):
    """Window sums with dilations: a sum of strided slices, one per kernel offset (ONNX's output
    size, the ceil-mode window that would start past the input dropped), pads of value `fill`."""
    ceil = bool(call.attr("ceil_mode", 0))
    x = S.pad(x, _torch_pad(begins, ends), value=fill)
    outs, extra = [], []
    for n, k, s, d, e in zip(x.shape[2:], kernel, strides, dilations, ends):
        span = (k - 1) * d + 1
        out = (-(-(n - span) // s) if ceil else (n - span) // s) + 1
        if ceil and (out - 1) * s >= n - e:  # the last window would start in the end padding
            out -= 1
        outs.append(out)
        extra.append(max(0, (out - 1) * s + span - n))
    x = S.pad(x, _torch_pad([0] * len(kernel), extra))
    total = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        index = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (m - 1) * s + 1, s) for o, d, m, s in zip(offset, dilations, outs, strides))
        part = x[index]
        total = part if total is None else total + part
    return total


@op("AveragePool")
def average_pool(call, x):
    kernel, nd, strides, dilations, begins, ends = _pool_args(call, x)
    mask = ones(*x.shape[1:], dtype=x.dtype, device=x.device).unsqueeze(0)
    if any(d != 1 for d in dilations) or call.attr("ceil_mode", 0):
        include = float(call.attr("count_include_pad", 0))
        total = _dilated_sum_pool(call, x, kernel, strides, dilations, begins, ends)
        count = _dilated_sum_pool(call, mask, kernel, strides, dilations, begins, ends, include)
        return total / count
    total = _sum_pool(call, x, kernel, strides, begins, ends, 0.0)
    mask = S.pad(mask, _torch_pad(begins, ends), value=float(call.attr("count_include_pad", 0)))
    count = P.avg_pool(mask, kernel, strides, 0, bool(call.attr("ceil_mode", 0)), True, 1, nd=nd)
    return total / count


@op("LpPool")
def lp_pool(call, x):
    kernel, nd, strides, dilations, begins, ends = _pool_args(call, x)
    p = call.attr("p", 2)
    if any(d != 1 for d in dilations) or call.attr("ceil_mode", 0):
        return _dilated_sum_pool(call, M.abs(x) ** p, kernel, strides, dilations, begins, ends) ** (1.0 / p)
    return _sum_pool(call, M.abs(x) ** p, kernel, strides, begins, ends, 0.0) ** (1.0 / p)


def _global(x, fn):
    return fn(x, tuple(range(2, x.ndim)), True)


@op("GlobalAveragePool")
def global_average_pool(call, x):
    return _global(x, R.mean)


@op("GlobalMaxPool")
def global_max_pool(call, x):
    return _global(x, R.amax)


@op("GlobalLpPool")
def global_lp_pool(call, x):
    p = call.attr("p", 2)
    return _global(M.abs(x) ** p, R.sum) ** (1.0 / p)


def _channel(v, ndim: int):
    return v.reshape(-1, *[1] * (ndim - 2))


@op("BatchNormalization")
def batch_norm(call, x, scale, bias, mean, var):
    eps = call.attr("epsilon", 1e-5)
    training = call.attr("training_mode", 0) if call.opset >= 14 else 0
    if training:
        dims = (0, *range(2, x.ndim))
        batch_mean, batch_var = R.mean(x, dims), R.var(x, dims, correction=0)
        momentum = call.attr("momentum", 0.9)
        y = (x - _channel(batch_mean, x.ndim)) / M.sqrt(_channel(batch_var, x.ndim) + eps)
        y = y * _channel(scale, x.ndim) + _channel(bias, x.ndim)
        return y, mean * momentum + batch_mean * (1 - momentum), var * momentum + batch_var * (1 - momentum)
    inv = scale / M.sqrt(var + eps)
    return x * _channel(inv, x.ndim) + _channel(bias - mean * inv, x.ndim)


@op("InstanceNormalization")
def instance_norm(call, x, scale, bias):
    return F.instance_norm(x, scale, bias, eps=call.attr("epsilon", 1e-5))


def _stats(call, x, dims):
    """x in the stash type (f32 for narrower floats), its mean and 1/std over `dims`."""
    wide = x.cast(f32) if call.attr("stash_type", 1) == 1 and x.dtype.itemsize < 4 else x
    mean = R.mean(wide, dims, True)
    inv = M.rsqrt(R.var(wide, dims, correction=0, keepdim=True) + call.attr("epsilon", 1e-5))
    return wide, mean, inv


@op("LayerNormalization")
def layer_norm(call, x, scale, bias=None):
    axis = call.attr("axis", -1) % x.ndim
    if not call.wants(1) and not call.wants(2) and x.dtype.itemsize >= 4:
        return F.layer_norm(x, x.shape[axis:], _full(scale, x.shape[axis:]), _full(bias, x.shape[axis:]),
                            eps=call.attr("epsilon", 1e-5))
    wide, mean, inv = _stats(call, x, tuple(range(axis, x.ndim)))
    y = ((wide - mean) * inv).cast(x.dtype) * scale
    return (y + bias if bias is not None else y), mean, inv


def _full(v, shape):
    return None if v is None else S.broadcast_to(v, tuple(shape))


@op("GroupNormalization")
def group_norm(call, x, scale, bias):
    groups = call.attr("num_groups")
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    wide, mean, inv = _stats(call, g, (2,))
    y = ((wide - mean) * inv).cast(x.dtype).reshape(x.shape)
    if call.opset < 21:  # scale and bias per group
        scale, bias = _per_channel(scale, c), _per_channel(bias, c)
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


def _per_channel(v, c: int):
    groups = v.shape[0]
    return S.broadcast_to(v.reshape(groups, 1), (groups, c // groups)).reshape(c)


@op("RMSNormalization")
def rms_norm(call, x, scale):
    axis = call.attr("axis", -1) % x.ndim
    wide = x.cast(f32) if call.attr("stash_type", 1) == 1 and x.dtype.itemsize < 4 else x
    ms = R.mean(wide * wide, tuple(range(axis, x.ndim)), True)
    return (wide * M.rsqrt(ms + call.attr("epsilon", 1e-5))).cast(x.dtype) * scale


@op("LpNormalization")
def lp_normalization(call, x):
    axis, p = call.attr("axis", -1), call.attr("p", 2)
    norm = R.sum(M.abs(x), axis, True) if p == 1 else M.sqrt(R.sum(x * x, axis, True))
    return M.where(norm == 0, x * 0, x / norm)  # a zero norm gives zeros, as ONNX says


@op("LRN")
def lrn(call, x):
    size = call.attr("size")
    alpha, beta, bias = call.attr("alpha", 1e-4), call.attr("beta", 0.75), call.attr("bias", 1.0)
    sq = S.pad(x * x, [0, 0] * (x.ndim - 2) + [(size - 1) // 2, size // 2])
    c = x.shape[1]
    total = sum(S.narrow(sq, 1, i, c) for i in range(size))
    return x / (bias + alpha / size * total) ** beta


@op("MeanVarianceNormalization")
def mean_variance_normalization(call, x):
    dims = tuple(a % x.ndim for a in call.attr("axes", [0, 2, 3]))
    mean = R.mean(x, dims, True)
    std = M.sqrt(R.mean((x - mean) ** 2, dims, True))
    return (x - mean) / (std + 1e-9)


@op("NegativeLogLikelihoodLoss")
def nll_loss(call, x, target, weight=None):
    ignore = call.attr("ignore_index")
    target = target.cast(i64)
    keep = None
    if ignore is not None:
        keep = target != ignore
        target = M.where(keep, target, target * 0)
    picked = -R.gather(x, 1, target.unsqueeze(1)).squeeze(1)
    w = None
    if weight is not None:
        w = weight[target]
    if keep is not None:
        w = keep.cast(x.dtype) if w is None else M.where(keep, w, w * 0)
    loss = picked if w is None else picked * w
    reduction = call.attr("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return R.sum(loss)
    return R.sum(loss) / (R.sum(w) if w is not None else loss.numel)


@op("GridSample")
def grid_sample(call, x, grid):
    mode = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest", "cubic": "bicubic",
            "bicubic": "bicubic"}.get(call.attr("mode", "linear" if call.opset >= 20 else "bilinear"))
    padding, align = call.attr("padding_mode", "zeros"), bool(call.attr("align_corners", 0))
    if mode is None:
        call.unsupported(f"mode {call.attr('mode')!r}")
    if mode == "bicubic":
        return _cubic_sample(x, grid, padding, align)
    return F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)


_A = -0.75  # the cubic convolution's coefficient (ONNX's, PyTorch's)


def _cubic_weights(t):
    """The weights of taps floor(c) - 1 .. floor(c) + 2 at fraction t."""
    def near(d):
        return ((_A + 2) * d - (_A + 3)) * d * d + 1

    def far(d):
        return ((_A * d - 5 * _A) * d + 8 * _A) * d - 4 * _A
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _reflect(c, low: float, high: float):
    """`c` reflected into [low, high] about its ends, as often as it takes."""
    span = high - low
    if span <= 0:
        return c * 0 + low
    distance = M.abs(c - low)
    flips = M.floor(distance / span)
    extra = distance - flips * span
    even = (flips - M.floor(flips / 2) * 2) == 0
    return M.where(even, low + extra, high - extra)


def _cubic_sample(x, grid, padding: str, align: bool):
    """GridSample mode "cubic" as ONNX defines it: 4 taps per spatial dim, each read with the padding
    mode, of the source coordinate (clamped or reflected first when it lies past the borders)."""
    n, c, *sizes = x.shape
    nd, points = len(sizes), math.prod(grid.shape[1:-1])
    strides = [math.prod(sizes[d + 1:]) for d in range(nd)]
    taps_per_dim = []
    for d, size in enumerate(sizes):
        g = grid[..., nd - 1 - d].reshape(n, 1, points)
        coord = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        outside = (coord < low) | (coord > high)
        if padding == "border":
            coord = M.where(outside, M.clamp(coord, min=0.0, max=size - 1.0), coord)
        elif padding == "reflection":
            coord = _reflect(coord, low, high)
        base = M.floor(coord)
        taps = []
        for k, w in zip(range(-1, 3), _cubic_weights(coord - base)):
            i = base + k
            if padding == "zeros":
                w = w * ((i >= 0) & (i <= size - 1)).cast(x.dtype)
            elif padding == "reflection":
                i = M.trunc(_reflect(i, low, high))
            taps.append((M.clamp(i, min=0.0, max=size - 1.0).cast(i64) * strides[d], w))
        taps_per_dim.append(taps)
    flat = x.reshape(n, c, math.prod(sizes))
    out = None
    for corner in itertools.product(*taps_per_dim):
        index, weight = corner[0]
        for i, w in corner[1:]:
            index, weight = index + i, weight * w
        term = R.gather(flat, 2, S.broadcast_to(index, (n, c, points))) * weight
        out = term if out is None else out + term
    return out.reshape(n, c, *grid.shape[1:-1])


@op("Col2Im")
def col2im(call, x, image_shape, block_shape):
    """Blocks summed into the image: one index_add of every (kernel offset, block) at its place."""
    image, block = call.ints(image_shape), call.ints(block_shape)
    nd = len(block)
    pads = call.attr("pads", [0] * 2 * nd)
    strides, dilations = call.attr("strides", [1] * nd), call.attr("dilations", [1] * nd)
    padded = [i + b + e for i, b, e in zip(image, pads[:nd], pads[nd:])]
    blocks = [(p - d * (k - 1) - 1) // s + 1 for p, k, s, d in zip(padded, block, strides, dilations)]
    grids = np.meshgrid(*[np.arange(k) for k in block], *[np.arange(b) for b in blocks], indexing="ij")
    position = [grids[nd + i] * strides[i] + grids[i] * dilations[i] for i in range(nd)]
    flat = np.ravel_multi_index(position, padded).reshape(-1)
    n, c = x.shape[0], x.shape[1] // math.prod(block)
    out = index_add(x.new_zeros((n, c, math.prod(padded))), 2, call.const(flat),
                    x.reshape(n, c, flat.size))
    out = out.reshape(n, c, *padded)
    return out[(slice(None), slice(None)) + tuple(slice(b, b + i) for b, i in zip(pads[:nd], image))]
