"""Fused attention, flash-style: softmax(Q K^T * scale, causal or not) V without an L x S matrix in memory.

Operands: C-contiguous (BH, L, E) queries, (BH, S, E) keys, (BH, S, Ev) values (BH = batch * heads).
- **Forward** (`attention_forward_kernel`): a cube per (batch*head, block of `rows` query rows), a unit
  per query row; the cube walks the keys in blocks of `KEYS` through shared memory, folding each into an
  online softmax `STEP` keys at a time. Causal: key blocks wholly above the diagonal are never loaded.
  It writes the output row and the row's logsumexp side by side (`out` is (BH, L, Ev + 1) in the
  accumulator type) for the backward.
- **Backward** (the flash backward, P recomputed from Q, K and the logsumexp): `attention_grad_q_kernel`
  (dQ = dS K * scale) and `attention_grad_kv_kernel` (dV = P^T dO, dK = dS^T Q * scale), with
  dS = P * (dO V^T - delta), delta = rowsum(dO * O) - dlse (`attention_delta_kernel`). They read the
  forward's packed result and its gradient, (BH, L, Ev + 1) each, as they are.
- **Forward through the scores** (`attention_forward_scores`, device arrays of f32/f64 whose rows see a
  key): the (BH, L, S) scores by the runtime's batched matmul, one row kernel (`scores_softmax_kernel`)
  turning them into P in place and writing each row's logsumexp, then P V by the matmul, into the same
  packed result; the L x S matrix lives for the call only (`ember.nn.fused_attention` decides when).

Everything is computed in `T` (f32 for f16/bf16 operands, else their own type). Rows with no visible
key (causal with an offset below -row, or S = 0) get a zero output, a logsumexp of -inf and zero
gradients. More on the kernels: docs/cube.md, "Fused attention".

Example:
    >>> q = np.ones((1, 2, 4), np.float32)
    >>> attention_forward(q, q, q, scale=0.5, causal=True, offset=0)[..., -1]   # logsumexp per row
    array([[2.       , 2.6931472]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..dtype import f32
from ..errors import ShapeError
from .common import assign, check_elements, check_float_dtypes, contiguous, cube_dtype, empty, grid
from .reduce import MAX_UNITS, RESIDENT_PER, launch_target, resident_shape, tuple_fold, units_combine
from .softmax import resident_row, row_index, store_row

KEYS = 16        # keys per shared-memory block (KEYS * (E + Ev) values of T in shared memory)
STEP = 4         # keys folded into the online softmax per output rescale (KEYS % STEP == 0)
MAX_DIM = 256    # the largest head width E or Ev: each unit keeps a few rows of it in registers


@cube.function
def dot(row, block, base, n, T):
    """sum_d row[d] * block[base + d] over the comptime length `n` (`row` a tuple, `block` shared), in
    four interleaved partial sums (four independent FMA chains instead of one long one)."""
    acc = (T(0), T(0), T(0), T(0))
    for d in cube.unroll(range(n)):
        acc = tuple(acc[j] + row[d] * block[base + d] if j == d % 4 else acc[j] for j in range(4))
    return (acc[0] + acc[1]) + (acc[2] + acc[3])


@cube.function
def visible(j, i, n_k, offset, causal):
    """Whether query i may attend key j: j is a key and, causal, j <= i + offset."""
    if causal:
        return j < n_k and j <= i + offset
    return j < n_k


@cube.function
def load_rows(src, dst, first, n_rows, count, width, stride, skip, T, units):
    """dst[r * width + d] = src[row * stride + skip + d] for rows first .. first + count - 1 (clamped to
    the last of `n_rows`, so no read leaves the array), by all `units` units of the cube together."""
    for idx in range(cube.UNIT_POS, count * width, units):
        r = cube.min(first + idx // width, n_rows - 1)
        dst[idx] = T(src[r * stride + skip + idx % width])


@cube.function
def own_row(n, rows):
    """(batch*head, the cube's first row, the unit's row, its flat row clamped to the last of `n`): a cube
    covers `rows` rows of one batch*head; units past the end work on a copy of the last row."""
    bh = cube.CUBE_POS_Y
    first = cube.CUBE_POS_X * rows
    i = first + cube.UNIT_POS
    return bh, first, i, bh * n + cube.min(i, n - 1)


@cube.function
def load_keys(k, v, ks, vs, bh, k0, n_k, e, ev, T, rows):
    """Keys and values k0 .. k0 + KEYS - 1 of batch*head `bh` into shared memory, then a barrier."""
    load_rows(k, ks, bh * n_k + k0, bh * n_k + n_k, KEYS, e, e, 0, T, rows)
    load_rows(v, vs, bh * n_k + k0, bh * n_k + n_k, KEYS, ev, ev, 0, T, rows)
    cube.sync_units()


@cube.function
def key_stop(q0, rows, n_k, offset, causal):
    """One past the last key any of the query rows q0 .. q0 + rows - 1 may see."""
    if causal:
        return cube.max(0, cube.min(n_k, q0 + rows + offset))
    return n_k


@cube.kernel
def attention_forward_kernel(q: cube.Array, k: cube.Array, v: cube.Array, out: cube.Array, n_q: cube.i32,
                             n_k: cube.i32, offset: cube.i32, scale: cube.Scalar["T"], T: cube.Comptime,
                             e: cube.Comptime[int], ev: cube.Comptime[int], rows: cube.Comptime[int],
                             causal: cube.Comptime[bool]):
    """out[bh, i] = (softmax_j(q_i . k_j * scale) @ v, logsumexp_j(q_i . k_j * scale))."""
    bh, q0, i, row = own_row(n_q, rows)
    qr = tuple(T(q[row * e + d]) * scale for d in range(e))
    ks = cube.shared(T, KEYS * e)
    vs = cube.shared(T, KEYS * ev)
    m = T(-np.inf)
    total = T(0)
    acc = tuple(T(0) for _ in range(ev))
    for k0 in range(0, key_stop(q0, rows, n_k, offset, causal), KEYS):
        load_keys(k, v, ks, vs, bh, k0, n_k, e, ev, T, rows)
        for t0 in range(0, KEYS, STEP):
            s = tuple(cube.select(visible(k0 + t0 + t, i, n_k, offset, causal),
                                  dot(qr, ks, (t0 + t) * e, e, T), T(-np.inf)) for t in range(STEP))
            top = cube.max(cube.max(m, cube.max(s[0], s[1])), cube.max(s[2], s[3]))
            base = cube.select(top == T(-np.inf), T(0), top)  # nothing visible yet: every p is 0
            corr = cube.exp(m - base)
            p = tuple(cube.exp(s[t] - base) for t in range(STEP))
            total = total * corr + ((p[0] + p[1]) + (p[2] + p[3]))
            acc = tuple(acc[c] * corr + p[0] * vs[t0 * ev + c] + p[1] * vs[(t0 + 1) * ev + c]
                        + p[2] * vs[(t0 + 2) * ev + c] + p[3] * vs[(t0 + 3) * ev + c] for c in range(ev))
            m = top
        cube.sync_units()
    if i < n_q:
        at = (bh * n_q + i) * (ev + 1)
        inv = cube.select(total == T(0), T(0), T(1) / total)
        for c in cube.unroll(range(ev)):
            out[at + c] = out.dtype(acc[c] * inv)
        out[at + ev] = out.dtype(cube.select(total == T(0), T(-np.inf), m + cube.log(total)))


@cube.kernel
def attention_grad_q_kernel(q: cube.Array, k: cube.Array, v: cube.Array, out: cube.Array, grad: cube.Array,
                            delta: cube.Array, dq: cube.Array, n_q: cube.i32, n_k: cube.i32, offset: cube.i32,
                            scale: cube.Scalar["T"], T: cube.Comptime, e: cube.Comptime[int],
                            ev: cube.Comptime[int], rows: cube.Comptime[int], causal: cube.Comptime[bool]):
    """dq[bh, i] = sum_j p_ij (grad_i . v_j - delta_i) k_j * scale, p_ij = exp(q_i . k_j * scale - lse_i)."""
    bh, q0, i, row = own_row(n_q, rows)
    qr = tuple(T(q[row * e + d]) * scale for d in range(e))
    gr = tuple(T(grad[row * (ev + 1) + c]) for c in range(ev))
    lse_i = T(out[row * (ev + 1) + ev])
    delta_i = T(delta[row])
    ks = cube.shared(T, KEYS * e)
    vs = cube.shared(T, KEYS * ev)
    acc = tuple(T(0) for _ in range(e))
    for k0 in range(0, key_stop(q0, rows, n_k, offset, causal), KEYS):
        load_keys(k, v, ks, vs, bh, k0, n_k, e, ev, T, rows)
        for t in range(KEYS):
            p = cube.select(visible(k0 + t, i, n_k, offset, causal), cube.exp(dot(qr, ks, t * e, e, T) - lse_i),
                            T(0))
            ds = p * (dot(gr, vs, t * ev, ev, T) - delta_i)
            acc = tuple(acc[d] + ds * ks[t * e + d] for d in range(e))
        cube.sync_units()
    if i < n_q:
        for d in cube.unroll(range(e)):
            dq[row * e + d] = dq.dtype(acc[d] * scale)


@cube.kernel
def attention_grad_kv_kernel(q: cube.Array, k: cube.Array, v: cube.Array, out: cube.Array, grad: cube.Array,
                             delta: cube.Array, dkv: cube.Array, n_q: cube.i32, n_k: cube.i32, offset: cube.i32,
                             scale: cube.Scalar["T"], T: cube.Comptime, e: cube.Comptime[int],
                             ev: cube.Comptime[int], rows: cube.Comptime[int], causal: cube.Comptime[bool]):
    """dkv[bh, j] = (sum_i ds_ij q_i * scale, sum_i p_ij grad_i): dK and dV side by side."""
    bh, j0, j, row = own_row(n_k, rows)
    kr = tuple(T(k[row * e + d]) * scale for d in range(e))
    vr = tuple(T(v[row * ev + c]) for c in range(ev))
    qs = cube.shared(T, KEYS * e)
    gs = cube.shared(T, KEYS * ev)
    ls = cube.shared(T, KEYS)
    ds_ = cube.shared(T, KEYS)
    dk = tuple(T(0) for _ in range(e))
    dv = tuple(T(0) for _ in range(ev))
    start = 0
    if causal:
        start = cube.max(0, cube.min(n_q, j0 - offset))  # queries before it see none of this block's keys
    for i0 in range(start, n_q, KEYS):
        load_rows(q, qs, bh * n_q + i0, bh * n_q + n_q, KEYS, e, e, 0, T, rows)
        load_rows(grad, gs, bh * n_q + i0, bh * n_q + n_q, KEYS, ev, ev + 1, 0, T, rows)
        load_rows(out, ls, bh * n_q + i0, bh * n_q + n_q, KEYS, 1, ev + 1, ev, T, rows)
        load_rows(delta, ds_, bh * n_q + i0, bh * n_q + n_q, KEYS, 1, 1, 0, T, rows)
        cube.sync_units()
        for t in range(KEYS):
            ok = i0 + t < n_q and visible(j, i0 + t, n_k, offset, causal)
            p = cube.select(ok, cube.exp(dot(kr, qs, t * e, e, T) - ls[t]), T(0))
            dv = tuple(dv[c] + p * gs[t * ev + c] for c in range(ev))
            ds = p * (dot(vr, gs, t * ev, ev, T) - ds_[t])
            dk = tuple(dk[d] + ds * qs[t * e + d] for d in range(e))
        cube.sync_units()
    if j < n_k:
        at = row * (e + ev)
        for d in cube.unroll(range(e)):
            dkv[at + d] = dkv.dtype(dk[d] * scale)
        for c in cube.unroll(range(ev)):
            dkv[at + e + c] = dkv.dtype(dv[c])


@cube.kernel
def attention_delta_kernel(out: cube.Array, grad: cube.Array, delta: cube.Array, n: cube.i32, T: cube.Comptime,
                           ev: cube.Comptime[int]):
    """delta[i] = sum_c grad[i, c] * out[i, c] - grad[i, ev] (the output's and the logsumexp's gradients)."""
    i = cube.ABSOLUTE_POS
    if i < n:
        at = i * (ev + 1)
        acc = -T(grad[at + ev])
        for c in cube.unroll(range(ev)):
            acc = acc + T(grad[at + c]) * T(out[at + c])
        delta[i] = delta.dtype(acc)


@cube.kernel
def columns_kernel(src: cube.Array, dst: cube.Array, n: cube.i32, src_width: cube.i32, dst_width: cube.i32):
    """dst[r, c] = src[r, c] for c < src_width, else 0: rows of `src` cut or padded to `dst_width` (a
    unit per element of `dst`), converted to dst's type."""
    i = cube.ABSOLUTE_POS
    if i < n:
        r = i // dst_width
        c = i % dst_width
        v = src[r * src_width + cube.min(c, src_width - 1)]
        dst[i] = cube.select(c < src_width, dst.dtype(v), dst.dtype(0))


def accumulator(dtype) -> np.dtype:
    """The type attention computes and saves in for operands of `dtype`: f32 for f16/bf16, else itself."""
    t = cube_dtype(dtype)
    return np.dtype(np.float32) if t.itemsize < 4 else np.dtype(t.np)


def shared_bytes(e: int, ev: int, dtype) -> int:
    """The most shared memory one cube of these kernels takes (the dK/dV kernel's) for head widths e, ev.

    Example:
        >>> shared_bytes(64, 64, np.float32)
        8320
    """
    return (KEYS * (e + ev) + 2 * KEYS) * accumulator(dtype).itemsize


def _rows(n: int, rows: int | None = None) -> int:
    """Units (rows) per cube: `rows` when given, else 16 for a short sequence and 64 otherwise."""
    return rows or (16 if n <= 16 else 64)


def check_shapes(q: tuple, k: tuple, v: tuple) -> tuple[int, int, int, int, int]:
    """(BH, L, S, E, Ev) of (BH, L, E), (BH, S, E), (BH, S, Ev) operand shapes the kernels take, else
    `ShapeError` (the ops' shape rules call it, so a recorded op cannot fail later).

    Example:
        >>> check_shapes((2, 5, 8), (2, 7, 8), (2, 7, 4))
        (2, 5, 7, 8, 4)
    """
    if len(q) != 3 or len(k) != 3 or len(v) != 3 or q[0] != k[0] or k[:2] != v[:2] or q[2] != k[2]:
        raise ShapeError("attention", f"needs (BH, L, E), (BH, S, E), (BH, S, Ev) operands, got {q}, {k}, {v}")
    bh, n_q, e = q
    n_k, ev = v[1], v[2]
    if max(e, ev) > MAX_DIM:
        raise ShapeError("attention", f"head widths E={e}, Ev={ev}: the fused kernel holds up to {MAX_DIM}")
    check_elements("attention", q, k, v, (bh, n_q, ev + 1), (bh, n_k, e + ev))
    return bh, n_q, n_k, e, ev


def check_backward(q: tuple, k: tuple, v: tuple, out: tuple, grad: tuple) -> tuple[int, int, int, int, int]:
    """`check_shapes`, and the packed forward result `out` and its gradient `grad` both (BH, L, Ev + 1)."""
    bh, n_q, n_k, e, ev = check_shapes(q, k, v)
    if tuple(out) != (bh, n_q, ev + 1) or tuple(grad) != tuple(out):
        raise ShapeError("attention backward", f"out {tuple(out)} and grad {tuple(grad)} must both be "
                                               f"{(bh, n_q, ev + 1)}")
    return bh, n_q, n_k, e, ev


def _check(q, k, v) -> tuple[int, int, int, int, int]:
    """(BH, L, S, E, Ev) of operands of one float dtype (`check_shapes`, `common.check_float_dtypes`)."""
    check_float_dtypes("attention", q.dtype, k.dtype, v.dtype)
    return check_shapes(q.shape, k.shape, v.shape)


def attention_forward(q, k, v, *, scale: float, causal: bool, offset: int, rows: int | None = None):
    """(BH, L, Ev + 1) in `accumulator(q.dtype)`: the attention output and, last, each row's logsumexp.
    `rows` (units per cube) overrides the default (bench/attention.py sweeps it).

    Example:
        >>> x = np.zeros((1, 3, 2), np.float32)
        >>> attention_forward(x, x, x, scale=1.0, causal=False, offset=0).shape
        (1, 3, 3)
    """
    bh, n_q, n_k, e, ev = _check(q, k, v)
    q, k, v = contiguous(q), contiguous(k), contiguous(v)
    out = empty((bh, n_q, ev + 1), accumulator(q.dtype), q)
    if out.size:
        rows = _rows(n_q, rows)
        t = cube_dtype(out.dtype)
        attention_forward_kernel.launch(cube.CubeCount(-(-n_q // rows), bh), cube.CubeDim(rows), q, k, v, out,
                                        n_q, n_k, offset, scale, T=t, e=e, ev=ev, rows=rows, causal=causal)
    return out


@cube.function
def scores_row(s, out, i, n, n_q, width, offset, scale, causal, T, span, per, lanes, full):
    """Row i of the (BH * L, S) scores `s`: scaled and masked, replaced by its softmax; its logsumexp
    written at out[i * width + width - 1]."""
    base = i * n
    query = i % n_q
    v = resident_row(s, base, n, span, per, full, T)
    v = tuple(cube.select(visible(r * span + cube.UNIT_POS % span, query, n, offset, causal), v[r] * scale,
                          T(-np.inf)) for r in range(per))
    m = units_combine("max", tuple_fold("max", v), span, lanes, T)
    e = tuple(cube.exp(v[r] - m) for r in range(per))
    total = units_combine("sum", tuple_fold("sum", e), span, lanes, T)
    store_row(s, base, n, tuple(e[r] / total for r in range(per)), span, full)
    if cube.UNIT_POS % span == 0:
        out[i * width + width - 1] = out.dtype(m + cube.log(total))


@cube.kernel
def scores_softmax_kernel(s: cube.Array, out: cube.Array, rows: cube.i32, n: cube.i32, n_q: cube.i32,
                          width: cube.i32, offset: cube.i32, scale: cube.Scalar["T"], T: cube.Comptime,
                          causal: cube.Comptime[bool], units: cube.Comptime[int], span: cube.Comptime[int],
                          per: cube.Comptime[int], lanes: cube.Comptime[int], full: cube.Comptime[bool]):
    # Rows held in registers (`reduce.resident_shape`: a cube or a plane per row), as `softmax_resident_kernel`.
    i = row_index(units, span)
    if span == units:
        scores_row(s, out, i, n, n_q, width, offset, scale, causal, T, span, per, lanes, full)
    else:
        if i < rows:  # whole planes take this branch or skip it: their plane ops see every lane
            scores_row(s, out, i, n, n_q, width, offset, scale, causal, T, span, per, lanes, full)


def scores_fit(q, n_k: int) -> bool:
    """Whether `attention_forward_scores` takes these operands: device arrays of f32/f64 on a target whose
    rows of `n_k` scores fit in a cube's registers (`reduce.resident_shape`)."""
    target = launch_target(q)
    return target != "cpu" and np.dtype(q.dtype).itemsize >= 4 and n_k > 0 and resident_shape(n_k, target) is not None


def attention_forward_scores(q, k, v, *, scale: float, causal: bool, offset: int):
    """`attention_forward` through the (BH, L, S) scores (see the module docstring); for operands
    `scores_fit` takes and rows that each see a key (causal: `offset >= 0`).

    Example:
        >>> attention_forward_scores(q, k, v, scale=0.125, causal=True, offset=0).shape   # device arrays
        (96, 1024, 65)
    """
    from .matmul import tuned_matmul
    bh, n_q, n_k, e, ev = _check(q, k, v)
    if not scores_fit(q, n_k) or causal and offset < 0:
        raise ValueError(f"attention_forward_scores: needs device arrays of f32/f64, rows of at most "
                         f"{MAX_UNITS * RESIDENT_PER} keys and every row seeing a key; got {q.dtype}, S={n_k}, "
                         f"causal={causal}, offset={offset}")
    out = empty((bh, n_q, ev + 1), q.dtype, q)
    if not out.size:
        return out
    scores = tuned_matmul(q, k.transpose(0, 2, 1))
    units, span, per, lanes = resident_shape(n_k, launch_target(q))  # not None: `scores_fit` held
    rows = bh * n_q
    scores_softmax_kernel.launch(cube.CubeCount(-(-rows // (units // span))), cube.CubeDim(units), scores, out, rows,
                                 n_k, n_q, ev + 1, offset, scale, T=cube_dtype(q.dtype), causal=causal, units=units,
                                 span=span, per=per, lanes=lanes, full=n_k == span * per)
    assign(out[:, :, :ev], tuned_matmul(scores, v))
    return out


def attention_grad_q(q, k, v, out, grad, *, scale: float, causal: bool, offset: int, rows: int | None = None):
    """dQ (BH, L, E) in `accumulator(q.dtype)`, from the forward's result `out` (output rows and logsumexp,
    (BH, L, Ev + 1)) and its gradient `grad` (the same shape: a gradient of the logsumexp counts too).

    Example:
        >>> attention_grad_q(q, k, v, out, grad, scale=0.5, causal=True, offset=0).shape
        (2, 5, 8)
    """
    return _backward(attention_grad_q_kernel, "q", q, k, v, out, grad, scale, causal, offset, rows)


def attention_grad_kv(q, k, v, out, grad, *, scale: float, causal: bool, offset: int, rows: int | None = None):
    """dK and dV side by side, (BH, S, E + Ev) in `accumulator(q.dtype)` (arguments as `attention_grad_q`).

    Example:
        >>> attention_grad_kv(q, k, v, out, grad, scale=0.5, causal=True, offset=0).shape
        (2, 7, 14)
    """
    return _backward(attention_grad_kv_kernel, "kv", q, k, v, out, grad, scale, causal, offset, rows)


def _backward(kernel, which: str, q, k, v, out, grad, scale, causal, offset, rows):
    check_float_dtypes("attention", q.dtype, k.dtype, v.dtype)
    check_float_dtypes("attention backward", out.dtype, grad.dtype)
    bh, n_q, n_k, e, ev = check_backward(q.shape, k.shape, v.shape, out.shape, grad.shape)
    q, k, v, out, grad = (contiguous(x) for x in (q, k, v, out, grad))
    acc = accumulator(q.dtype)
    n = n_q if which == "q" else n_k
    result = empty((bh, n, e if which == "q" else e + ev), acc, q)
    if result.size:
        t = cube_dtype(acc)
        delta = empty((bh * n_q,), acc, q)
        if delta.size:
            attention_delta_kernel.launch(*grid(delta.size), out, grad, delta, delta.size, T=t, ev=ev)
        rows = _rows(n, rows)
        kernel.launch(cube.CubeCount(-(-n // rows), bh), cube.CubeDim(rows), q, k, v, out, grad, delta, result,
                      n_q, n_k, offset, scale, T=t, e=e, ev=ev, rows=rows, causal=causal)
    return result


def columns(x, width: int, dtype):
    """The rows of a (..., w) array cut or zero-padded to `width` columns, as `dtype`: the forward's
    output rows out of its packed result (and, for the gradient, back in) without a host round trip.

    Example:
        >>> columns(np.arange(6, dtype=np.float32).reshape(2, 3), 2, np.float16)
        array([[0., 1.],
               [3., 4.]], dtype=float16)
    """
    x = contiguous(x)
    out = empty(x.shape[:-1] + (width,), dtype, x)
    if out.size:
        columns_kernel.launch(*grid(out.size), x, out, out.size, x.shape[-1], width)
    return out
