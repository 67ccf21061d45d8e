"""The fused attention op: softmax(Q K^T * scale, causal or not) V and its per-row logsumexp, in one place.

`attention(q, k, v)` is three `@ember.backend_extension` primitives (ember/extension.py) over the
flash-style cube kernels of `ember/kernels/attention.py`:

- `attention` (forward): (BH, L, E), (BH, S, E), (BH, S, Ev) -> (BH, L, Ev + 1) in the accumulator type
  (f32 for f16/bf16, else the operands' type): the output rows, each row's logsumexp beside them: all
  that autodiff keeps for backward, never an L x S matrix.
- `attention_grad_q`, `attention_grad_kv` (backward) take Q, K, V, the packed result and its gradient:
  P is recomputed from Q, K and the saved logsumexp, with delta = rowsum(dO * O) - (the logsumexp's own
  gradient), so a loss that uses the returned logsumexp differentiates through it too. Small f32/f64
  shapes may go through the L x S matrices instead (docs/cube.md, "Fused attention").

Each has a NumPy reference (Device.numpy() runs it; the tests use it), which builds the matrix. Causal
masking blocks key j for query i when j > i + offset (offset 0: PyTorch's top-left alignment; S - L: the
bottom-right one of incremental decoding). A query that sees no key gets a zero output, a logsumexp of
-inf and zero gradients. Head widths E, Ev are at most `MAX_DIM` (256).

Example:
    >>> q, k, v = ember.randn(2, 3, 5, 8), ember.randn(2, 3, 7, 8), ember.randn(2, 3, 7, 4)
    >>> out, lse = attention(q, k, v, causal=True)
    >>> out.shape, lse.shape
    ((2, 3, 5, 4), (2, 3, 5))
"""

from __future__ import annotations

import math

import numpy as np

from .. import amp
from ..autodiff.graph import creating_graph
from ..kernels import attention as kernels
from ..kernels.common import check_elements, check_float_dtypes
from ..kernels.reduce import launch_target
from ..dtype import DType, dtype_of, f32
from ..errors import DTypeError, ShapeError
from ..extension import backend_extension
from ..tensor import Tensor
from ..ops.constants import kept

MAX_DIM = kernels.MAX_DIM


def _accumulator(dtype: DType) -> DType:
    return f32 if dtype.itemsize < 4 else dtype


# The rules check all the kernels check (`kernels.check_shapes`, `check_float_dtypes`): the ops are recorded by
# the fusion layer (`pure=True`) and run at the next sync point, so any error must come at the call.
def _forward_shape(q, k, v, **_params) -> tuple:
    kernels.check_shapes(q, k, v)
    return q[:2] + (v[2] + 1,)


def _grad_shape(q, k, v, out, g, *, which: str) -> tuple:
    kernels.check_backward(q, k, v, out, g)
    return q if which == "q" else k[:2] + (k[2] + v[2],)


def _columns_shape(packed, *, width: int, dtype: str) -> tuple:
    check_elements("attention_columns", packed, packed[:-1] + (width,))
    return packed[:-1] + (width,)


def _masked_scores(q: np.ndarray, k: np.ndarray, scale: float, causal: bool, offset: int) -> np.ndarray:
    """(BH, L, S) scores in the accumulator type, -inf where blocked."""
    acc = np.dtype(np.float32) if q.dtype.itemsize < 4 else q.dtype
    s = np.matmul(q.astype(acc), np.swapaxes(k.astype(acc), -1, -2)) * acc.type(scale)
    if causal:
        n_q, n_k = s.shape[-2:]
        s[:, np.arange(n_k)[None, :] > np.arange(n_q)[:, None] + offset] = -np.inf
    return s


def _probabilities(q, k, lse, scale, causal, offset) -> np.ndarray:
    """P = exp(scores - lse), 0 where blocked or where the row sees nothing."""
    s = _masked_scores(q, k, scale, causal, offset)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - lse[..., None])
    return np.where(np.isfinite(lse)[..., None], p, 0).astype(s.dtype)


def _forward_reference(q, k, v, *, scale: float, causal: bool, offset: int) -> np.ndarray:
    s = _masked_scores(q, k, scale, causal, offset)
    top = s.max(axis=-1, initial=-np.inf)
    top = np.where(np.isinf(top), 0, top)
    e = np.exp(s - top[..., None])
    total = e.sum(axis=-1)
    out = np.matmul(e / np.where(total == 0, 1, total)[..., None], v.astype(s.dtype))
    with np.errstate(divide="ignore"):
        lse = top + np.log(total)
    return np.concatenate([out, lse[..., None]], axis=-1).astype(s.dtype)


MATERIALIZE_KINDS = ("cuda",)
"""Device kinds (CUDA's cube target has the same name) whose attention goes through the L x S matrices
(`_materialized_backward`, `kernels.attention_forward_scores`)."""
MATERIALIZE_MAX_BYTES = 1 << 30
"""The largest L x S matrix (all batch*heads, in bytes) that backward materializes; larger: the kernels."""
MATERIALIZE_MIN_SCORES = 256 * 256
"""The smallest L * S that backward materializes: below it the kernels cost less than the host time of
the matmul route's extra recorded ops (docs/cube.md, "Fused attention")."""


def _materializes(kind: str, itemsize: int, shape_q: tuple, n_k: int, causal: bool, offset: int) -> bool:
    """Whether attention runs as matmuls over the L x S matrices: f32/f64 on a `MATERIALIZE_KINDS` device
    (or cube target), every query row seeing a key (no -inf logsumexp), L * S at least
    `MATERIALIZE_MIN_SCORES` and the matrix within `MATERIALIZE_MAX_BYTES`."""
    bh, n_q, _ = shape_q
    return (kind in MATERIALIZE_KINDS and itemsize >= 4 and n_k > 0 and (offset >= 0 or not causal)
            and n_q * n_k >= MATERIALIZE_MIN_SCORES and bh * n_q * n_k * itemsize <= MATERIALIZE_MAX_BYTES)


def _materialized(q: Tensor, k: Tensor, causal: bool, offset: int) -> bool:
    """`_materializes` for the backward's tensors."""
    return _materializes(q.device.kind, q.dtype.itemsize, q.shape, k.shape[1], causal, offset)


_biases: dict = {}  # (L, S, offset, dtype, device) -> the causal bias on the device


def _causal_bias(n_q: int, n_k: int, offset: int, dtype: DType, like: Tensor) -> Tensor:
    """(L, S): 0 where query i sees key j, -inf where j > i + offset; made once per shape and kept
    (`constants.kept`)."""
    def host() -> np.ndarray:
        blocked = np.arange(n_k)[None, :] > np.arange(n_q)[:, None] + offset
        return np.where(blocked, -np.inf, 0).astype(dtype.np)
    return kept(_biases, (n_q, n_k, offset, dtype), host, like)


def _materialized_backward(g: Tensor, out: Tensor, q: Tensor, k: Tensor, v: Tensor, *, scale: float,
                           causal: bool, offset: int) -> tuple:
    """dQ, dK, dV with P recomputed as one (BH, L, S) matrix: five batched matmuls (cuBLAS on the GPU,
    with its tensor cores) and elementwise ops the fusion layer fuses, instead of the flash kernels' plain
    FMAs. Needs every row to see a key."""
    ev = v.shape[-1]
    grad = g[..., :ev]
    dp = grad @ v.transpose(-1, -2)
    delta = (grad * out[..., :ev]).sum(-1, keepdim=True) - g[..., ev:]
    # dP first: P and dS then come from one fused pass over the scores and dP, which writes both
    scores = (q @ k.transpose(-1, -2)) * scale - out[..., ev:]  # out[..., ev:]: the logsumexp, (BH, L, 1)
    if causal:
        scores = scores + _causal_bias(q.shape[1], k.shape[1], offset, q.dtype, q)
    p = scores.exp()
    ds = p * (dp - delta)
    return (ds @ k) * scale, (ds.transpose(-1, -2) @ q) * scale, p.transpose(-1, -2) @ grad


def _forward_backward(g: Tensor, out: Tensor, q: Tensor, k: Tensor, v: Tensor, *, scale: float, causal: bool,
                      offset: int) -> tuple:
    e = q.shape[-1]
    params = dict(scale=scale, causal=causal, offset=offset)
    if creating_graph() or _materialized(q, k, causal, offset):  # the kernels have no gradient of their own
        dq, dk, dv = _materialized_backward(g, out, q, k, v, **params)
        return dq.cast(q.dtype), dk.cast(k.dtype), dv.cast(v.dtype)
    dq = attention_grad_q(q, k, v, out, g, **params)
    dkv = attention_grad_kv(q, k, v, out, g, **params)
    return dq.cast(q.dtype), dkv[..., :e].cast(k.dtype), dkv[..., e:].cast(v.dtype)


def _backward_terms(q, k, v, out, g, scale, causal, offset) -> tuple:
    """(P, dS, dO) of the NumPy references, from the packed forward result and its gradient."""
    ev = v.shape[-1]
    grad = g[..., :ev]
    delta = (grad * out[..., :ev]).sum(axis=-1) - g[..., ev]
    p = _probabilities(q, k, out[..., ev], scale, causal, offset)
    ds = p * (np.matmul(grad, np.swapaxes(v.astype(p.dtype), -1, -2)) - delta[..., None])
    return p, ds, grad


def _grad_q_reference(q, k, v, out, g, *, scale: float, causal: bool, offset: int) -> np.ndarray:
    p, ds, _ = _backward_terms(q, k, v, out, g, scale, causal, offset)
    return (np.matmul(ds, k.astype(p.dtype)) * p.dtype.type(scale)).astype(p.dtype)


def _grad_kv_reference(q, k, v, out, g, *, scale: float, causal: bool, offset: int) -> np.ndarray:
    p, ds, grad = _backward_terms(q, k, v, out, g, scale, causal, offset)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q.astype(p.dtype)) * p.dtype.type(scale)
    dv = np.matmul(np.swapaxes(p, -1, -2), grad)
    return np.concatenate([dk, dv], axis=-1).astype(p.dtype)


def _accumulator_of(q, k, v, *packed, **_params) -> DType:
    check_float_dtypes("attention", q, k, v)
    if packed:  # the backward ops: the packed result and its gradient, in the accumulator type
        check_float_dtypes("attention backward", _accumulator(q), *packed)
    return _accumulator(q)


@backend_extension(shape=_forward_shape, dtype=_accumulator_of, backward=_forward_backward,
                   reference=_forward_reference, name="attention", pure=True)
def _attention(q, k, v, *, scale: float, causal: bool, offset: int):
    """The forward primitive on (BH, L, E), (BH, S, E), (BH, S, Ev) arrays (see the module docstring)."""
    if _materializes(launch_target(q), np.dtype(q.dtype).itemsize, q.shape, k.shape[1], causal, offset) \
            and kernels.scores_fit(q, k.shape[1]):
        return kernels.attention_forward_scores(q, k, v, scale=scale, causal=causal, offset=offset)
    return kernels.attention_forward(q, k, v, scale=scale, causal=causal, offset=offset)


@backend_extension(shape=lambda q, k, v, out, g, **_: _grad_shape(q, k, v, out, g, which="q"), dtype=_accumulator_of,
                   reference=_grad_q_reference, name="attention_grad_q", pure=True)
def attention_grad_q(q, k, v, out, g, *, scale: float, causal: bool, offset: int):
    """dQ (BH, L, E) of the fused attention from its packed result `out` and that result's gradient `g`."""
    return kernels.attention_grad_q(q, k, v, out, g, scale=scale, causal=causal, offset=offset)


@backend_extension(shape=lambda q, k, v, out, g, **_: _grad_shape(q, k, v, out, g, which="kv"), dtype=_accumulator_of,
                   reference=_grad_kv_reference, name="attention_grad_kv", pure=True)
def attention_grad_kv(q, k, v, out, g, *, scale: float, causal: bool, offset: int):
    """dK and dV of the fused attention side by side, (BH, S, E + Ev) (arguments as `attention_grad_q`)."""
    return kernels.attention_grad_kv(q, k, v, out, g, scale=scale, causal=causal, offset=offset)


@backend_extension(shape=_columns_shape,
                   dtype=lambda packed, *, width, dtype: dtype_of(dtype),
                   reference=lambda packed, *, width, dtype: _columns_reference(packed, width, dtype),
                   backward=lambda g, out, packed, *, width, dtype: (
                       _columns(g, width=packed.shape[-1], dtype=packed.dtype.name),),
                   name="attention_columns", saves="inputs", pure=True)  # packed is the attention's kept output
def _columns(packed, *, width: int, dtype: str):
    """`packed`'s rows cut (or zero-padded) to `width` columns as `dtype` (the output rows of the packed
    result, and their gradient back into the packed shape: no slice_assign, which device backends run
    on the host)."""
    return kernels.columns(packed, width, dtype_of(dtype).np)


def _columns_reference(x: np.ndarray, width: int, dtype: str) -> np.ndarray:
    out = np.zeros(x.shape[:-1] + (width,), dtype_of(dtype).np)
    n = min(width, x.shape[-1])
    out[..., :n] = x[..., :n]
    return out


@amp.lower_precision
def attention(query: Tensor, key: Tensor, value: Tensor, *, scale: float | None = None, causal: bool = False,
              offset: int = 0) -> tuple[Tensor, Tensor]:
    """Fused `softmax(query @ key^T * scale) @ value` and the per-row logsumexp of the scaled scores.

    Args:
        query: (..., L, E); key: (..., S, E); value: (..., S, Ev), one float dtype, equal batch dims.
        scale: the score factor, `1 / sqrt(E)` by default.
        causal: block key j for query i when j > i + offset.
        offset: the causal diagonal's shift (0: top-left aligned; S - L: bottom-right).
    Returns `(out, lse)`: out (..., L, Ev) in the operands' dtype, lse (..., L) in f32 (f64 for f64
    operands). Both are differentiable.

    Example:
        >>> out, lse = attention(ember.randn(4, 6, 8), ember.randn(4, 6, 8), ember.randn(4, 6, 8), causal=True)
        >>> out.shape
        (4, 6, 8)
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"attention: {name} must be an ember Tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ShapeError("attention", f"{name} needs at least 2 dims (..., length, features), got {t.shape}")
    if not (query.dtype is key.dtype is value.dtype) or not query.dtype.is_float:
        raise DTypeError(f"attention: query, key and value must share one float dtype, got {query.dtype}, "
                         f"{key.dtype}, {value.dtype}")
    batch = query.shape[:-2]
    if key.shape[:-2] != batch or value.shape[:-2] != batch or key.shape[-2] != value.shape[-2] \
            or key.shape[-1] != query.shape[-1]:
        raise ShapeError("attention", f"query {query.shape}, key {key.shape}, value {value.shape}: expected "
                                      f"(..., L, E), (..., S, E), (..., S, Ev) with equal batch dims")
    (n_q, e), (n_k, ev) = query.shape[-2:], value.shape[-2:]
    if max(e, ev) > MAX_DIM:
        raise ShapeError("attention", f"head widths E={e}, Ev={ev}: the fused kernels hold up to {MAX_DIM}")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    bh = math.prod(batch)
    packed = _attention(query.reshape(bh, n_q, e), key.reshape(bh, n_k, e), value.reshape(bh, n_k, ev),
                        scale=scale, causal=bool(causal), offset=int(offset))
    out = _columns(packed, width=ev, dtype=query.dtype.name)
    return out.reshape(batch + (n_q, ev)), packed[..., ev].reshape(batch + (n_q,))
