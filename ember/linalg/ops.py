"""The primitives of `ember.linalg`: each a `@ember.backend_extension` over a blocked factorization
(`blocked.py`, `singular.py`, `eigen.py`), with its shape rule, NumPy reference and torch's gradient
written with ember ops.

Factorizations return several outputs (the extension's `outputs=`): `lu_factor_op` (LU, pivots, info),
`cholesky_op` (L, info), `qr_op` (Q, R), `eigh_op` (eigenvalues, eigenvectors), `svd_op` (U, S, Vh);
`solve_triangular_op` and `permutation_op` (the row order that LU's pivots make) have one.

Example:
    >>> lu, pivots, info = lu_factor_op(ember.tensor([[0.0, 1.0], [2.0, 3.0]]))
    >>> pivots.tolist()
    [2, 2]
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..dtype import i32
from ..errors import EmberError, ShapeError
from ..extension import backend_extension
from ..kernels.common import empty
from . import blocked, eigen, kernels, singular


def mT(x):
    """x with its last two dims swapped."""
    return x.transpose(-2, -1)


def eye_like(x):
    """The identity of x's last two dims (rectangular: ones on the main diagonal), x's dtype and device."""
    from ..api.creation import eye
    return eye(x.shape[-2], x.shape[-1], dtype=x.dtype, device=x.device)


def diag_embed(v):
    """(..., n) -> (..., n, n) with v on the diagonal (torch.diag_embed, offset 0)."""
    n = v.shape[-1]
    from ..api.creation import eye
    return v.unsqueeze(-1) * eye(n, dtype=v.dtype, device=v.device)


def lu_unpack_factors(lu):
    """(L, U) from LU's packed factors: L (*, m, k) unit lower, U (*, k, n) upper, k = min(m, n)."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    l = lu[..., :, :k].tril(-1) + eye_like(lu[..., :, :k])
    return l, lu[..., :k, :].triu()


def _matrix(op: str, shape: tuple, square: bool = False) -> tuple:
    if len(shape) < 2 or (square and shape[-1] != shape[-2]):
        kind = "square matrices" if square else "matrices"
        raise ShapeError(f"linalg.{op}", f"needs a batch of {kind} (*, m, n), got {tuple(shape)}")
    return tuple(shape)


def _float(op: str):
    def rule(dtype, *rest, **params):
        kernels.check_dtype(op, dtype.np)
        return dtype
    return rule


# ---- LU ------------------------------------------------------------------------------------------------
def _lu_shape(a):
    _matrix("lu_factor", a)
    return a, a[:-2] + (min(a[-2:]),), a[:-2]


def _lu_reference(a):
    lu = np.array(a, copy=True)
    *batch, m, n = lu.shape
    flat = lu.reshape(int(np.prod(batch, dtype=np.int64)), m, n)
    piv = np.zeros((flat.shape[0], min(m, n)), np.int32)
    info = np.zeros(flat.shape[0], np.int32)
    for b, x in enumerate(flat):
        for k in range(min(m, n)):
            p = k + int(np.argmax(np.abs(x[k:, k])))
            piv[b, k] = p + 1
            x[[k, p]] = x[[p, k]]
            if x[k, k] == 0:
                info[b] = info[b] or k + 1
                continue
            x[k + 1:, k] /= x[k, k]
            x[k + 1:, k + 1:] -= np.outer(x[k + 1:, k], x[k, k + 1:])
    return lu, piv.reshape(tuple(batch) + (min(m, n),)), info.reshape(batch)


def _lu_backward(grads, outs, a):
    """torch's lu_factor gradient (square): P L^-H (tril(L^H gL, -1) + triu(gU U^H)) U^-H."""
    g = grads[0]
    lu, pivots, _ = outs
    n = a.shape[-1]
    if a.shape[-2] != n:
        raise EmberError("linalg.lu_factor: the gradient is implemented for square matrices only")
    l, u = lu_unpack_factors(lu)
    m = (mT(l) @ g.tril(-1)).tril(-1) + (g.triu() @ mT(u)).triu()
    x = solve_triangular_op(mT(l), m, upper=True, unit=True)               # L^-H M
    y = mT(solve_triangular_op(u, mT(x), upper=True, unit=False))          # (L^-H M) U^-H
    return (unpermute_rows(y, permutation_op(pivots.to(i32), n=n)),)


@backend_extension(outputs=3, shape=_lu_shape, dtype=lambda d: (_float("lu_factor")(d), i32, i32),
                   reference=_lu_reference, backward=_lu_backward, saves="all", name="linalg_lu_factor")
def lu_factor_op(a):
    """(LU, pivots, info) of a batch of matrices (blocked.lu_factor)."""
    return blocked.lu_factor(a)


@cube.kernel
def _perm_kernel(piv: cube.Array[cube.i32], perm: cube.Array[cube.i32], count: cube.i32, k: cube.i32, n: cube.i32):
    b = cube.ABSOLUTE_POS
    if b < count:
        for i in range(0, n):
            perm[b * n + i] = i
        for i in range(0, k):
            p = piv[b * k + i] - 1
            x = perm[b * n + i]
            perm[b * n + i] = perm[b * n + p]
            perm[b * n + p] = x


def _perm_reference(piv, *, n):
    *batch, k = piv.shape
    count = int(np.prod(batch, dtype=np.int64))
    perm = np.tile(np.arange(n, dtype=np.int32), (count, 1))
    for row, p in zip(perm, piv.reshape(count, k)):
        for i in range(k):
            row[[i, p[i] - 1]] = row[[p[i] - 1, i]]
    return perm.reshape(tuple(batch) + (n,))


@backend_extension(shape=lambda p, *, n: p[:-1] + (n,), reference=_perm_reference, name="linalg_permutation")
def permutation_op(piv, *, n):
    """perm with A[perm] = L U, from LU's 1-based pivots, for matrices of n rows."""
    from ..kernels.common import contiguous
    piv = contiguous(piv)
    count, k = int(np.prod(piv.shape[:-1], dtype=np.int64)), piv.shape[-1]
    perm = empty(piv.shape[:-1] + (n,), np.int32, piv)
    if count and n:
        _perm_kernel.launch(cube.CubeCount(-(-count // 64)), cube.CubeDim(64), piv.reshape(-1), perm.reshape(-1),
                            count, k, n)
    return perm


def unpermute_rows(y, perm):
    """x with x[..., perm[i], :] = y[..., i, :] (P y for P^T A = L U)."""
    index = perm.argsort(-1).unsqueeze(-1).expand(*y.shape).to(i32)
    return y.gather(-2, index)


def permute_rows(y, perm):
    """y[..., perm, :] (P^T y)."""
    return y.gather(-2, perm.unsqueeze(-1).expand(*perm.shape, y.shape[-1]))


# ---- triangular solve ----------------------------------------------------------------------------------
def _tri_shape(a, b, *, upper, unit):
    _matrix("solve_triangular", a, square=True)
    _matrix("solve_triangular", b)
    if a[:-2] != b[:-2] or a[-1] != b[-2]:
        raise ShapeError("linalg.solve_triangular", f"needs A (*, n, n) and B (*, n, k) of one batch, got {a} and {b}")
    return b


def _tri_reference(a, b, *, upper, unit):
    t = np.triu(a) if upper else np.tril(a)
    if unit:
        t = t.copy()
        idx = np.arange(a.shape[-1])
        t[..., idx, idx] = 1
    x = np.array(b, copy=True)
    n = a.shape[-1]
    with np.errstate(all="ignore"):  # a zero on the diagonal gives infinities, as the kernel does
        for step in range(n):
            i = step if not upper else n - 1 - step
            done = slice(0, i) if not upper else slice(i + 1, n)
            x[..., i, :] = (b[..., i, :] - (t[..., i:i + 1, done] @ x[..., done, :])[..., 0, :]) / t[..., i, i:i + 1]
    return x


def _tri_backward(g, x, a, b, *, upper, unit):
    """torch's: gB = A^-H g, gA = -gB X^H on A's triangle (strictly, with a unit diagonal)."""
    gb = solve_triangular_op(mT(a), g, upper=not upper, unit=unit)
    ga = -(gb @ mT(x))
    ga = ga.triu(1 if unit else 0) if upper else ga.tril(-1 if unit else 0)
    return ga, gb


@backend_extension(shape=_tri_shape, dtype=lambda a, b, **_: _float("solve_triangular")(b), reference=_tri_reference,
                   backward=_tri_backward, name="linalg_solve_triangular")
def solve_triangular_op(a, b, *, upper, unit):
    """X with A X = B for triangular A (only its triangle is read)."""
    return blocked.solve_triangular(a, b, lower=not upper, unit=unit)


# ---- Cholesky ------------------------------------------------------------------------------------------
def _chol_reference(a):
    *batch, n, _ = a.shape
    flat = np.tril(a).reshape(int(np.prod(batch, dtype=np.int64)), n, n).copy()
    info = np.zeros(flat.shape[0], np.int32)
    for b, x in enumerate(flat):
        for k in range(n):
            d = x[k, k] - x[k, :k] @ x[k, :k]
            if not d > 0:
                info[b] = k + 1
                break
            x[k, k] = np.sqrt(d)
            x[k + 1:, k] = (x[k + 1:, k] - x[k + 1:, :k] @ x[k, :k]) / x[k, k]
    return flat.reshape(a.shape), info.reshape(batch)


def _phi(x):
    """The lower triangle of x with its diagonal halved."""
    return x.tril() - 0.5 * x.tril().triu()


def _chol_backward(grads, outs, a):
    """torch's: gA = sym(L^-H phi(L^H gL) L^-1), sym(X) = (X + X^H) / 2."""
    g, l = grads[0].tril(), outs[0]
    x = solve_triangular_op(mT(l), _phi(mT(l) @ g), upper=True, unit=False)
    y = mT(solve_triangular_op(mT(l), mT(x), upper=True, unit=False))
    return (0.5 * (y + mT(y)),)


@backend_extension(outputs=2, shape=lambda a: (_matrix("cholesky", a, square=True), a[:-2]),
                   dtype=lambda d: (_float("cholesky")(d), i32), reference=_chol_reference, backward=_chol_backward,
                   name="linalg_cholesky")
def cholesky_op(a):
    """(L, info) from the lower triangle of a batch of matrices."""
    return blocked.cholesky(a)


# ---- QR ------------------------------------------------------------------------------------------------
def _qr_shape(a, *, complete):
    *batch, m, n = _matrix("qr", a)
    k = min(m, n)
    return (tuple(batch) + (m, m if complete else k), tuple(batch) + ((m if complete else k), n))


def _qr_reference(a, *, complete):
    q, r = np.linalg.qr(a, mode="complete" if complete else "reduced")
    return q.astype(a.dtype), r.astype(a.dtype)


def _qr_backward(grads, outs, a, *, complete):
    """torch's linalg_qr_backward (reduced, or complete with m <= n)."""
    gq, gr = grads
    q, r = outs
    m, n = a.shape[-2:]
    if complete and m > n:
        raise EmberError("linalg.qr: the gradient of mode='complete' needs m <= n, as in torch")
    if m >= n:
        return (_qr_square_backward(q, r, gq, gr),)
    gy = gr[..., m:]  # A = [X | Y] = Q [R_X | R_Y]: Y = Q R_Y
    gx = _qr_square_backward(q, r[..., :m], gq + a[..., m:] @ mT(gy), gr[..., :m])
    from ..api.shape import cat
    return (cat([gx, q @ gy], -1),)


def _qr_square_backward(q, r, gq, gr):
    """gA = (Q copyltu(M) + gQ) R^-H, M = triu(gR R^H - Q^H gQ) made symmetric with its diagonal once."""
    mm = (gr @ mT(r) - mT(q) @ gq).triu()
    s = mm + mT(mm) - mm.triu().tril()
    z = q @ s + gq
    return mT(solve_triangular_op(r, mT(z), upper=True, unit=False))


@backend_extension(outputs=2, shape=_qr_shape, dtype=lambda d, **_: (_float("qr")(d),) * 2, reference=_qr_reference,
                   backward=_qr_backward, name="linalg_qr")
def qr_op(a, *, complete):
    """(Q, R) by Householder reflections."""
    return blocked.qr(a, complete=complete)


# ---- eigh ----------------------------------------------------------------------------------------------
def _eigh_reference(a):
    if a.shape[-1] == 0:
        return np.zeros(a.shape[:-1], a.dtype), np.zeros(a.shape, a.dtype)
    w, v = np.linalg.eigh(a, UPLO="L")
    return w.astype(a.dtype), v.astype(a.dtype)


def _gap_inverse(values):
    """F[i, j] = 1 / (values[j] - values[i]) off the diagonal, 0 on it."""
    e = values.unsqueeze(-2) - values.unsqueeze(-1)
    eye = eye_like(e)
    return (1 - eye) / (e + eye)


def _eigh_backward(grads, outs, a):
    """torch's: gA = V (diag(gL) + F o (V^H gV)) V^H."""
    gl, gv = grads
    w, v = outs
    inner = diag_embed(gl) + _gap_inverse(w) * (mT(v) @ gv)
    return (v @ inner @ mT(v),)


@backend_extension(outputs=2, shape=lambda a: (_matrix("eigh", a, square=True)[:-1], a),
                   dtype=lambda d: (_float("eigh")(d),) * 2, reference=_eigh_reference, backward=_eigh_backward,
                   name="linalg_eigh")
def eigh_op(a):
    """(eigenvalues ascending, eigenvectors) from the lower triangle: tridiagonalization and QL (eigen.eigh)."""
    return eigen.eigh(a)


# ---- SVD -----------------------------------------------------------------------------------------------
def _svd_shape(a, *, full):
    *batch, m, n = _matrix("svd", a)
    k = min(m, n)
    b = tuple(batch)
    return (b + (m, m if full else k), b + (k,), b + (n if full else k, n))


def _svd_reference(a, *, full):
    u, s, vh = np.linalg.svd(a, full_matrices=full)
    return u.astype(a.dtype), s.astype(a.dtype), vh.astype(a.dtype)


def _svd_backward(grads, outs, a, *, full):
    """torch's svd_backward (real, thin): U [sym terms + diag(gS)] Vh plus the parts off U's and V's span."""
    gu, gs, gvh = grads
    u, s, vh = outs
    m, n = a.shape[-2:]
    k = min(m, n)
    if full and m != n:
        u, vh, gu, gvh = u[..., :k], vh[..., :k, :], gu[..., :k], gvh[..., :k, :]
    v, gv = mT(vh), mT(gvh)
    f = _gap_inverse(s * s)
    ss = s.unsqueeze(-2)
    ut_gu, vt_gv = mT(u) @ gu, mT(v) @ gv
    j = f * (ut_gu - mT(ut_gu))
    kk = f * (vt_gv - mT(vt_gv))
    inner = j * ss + mT(ss) * kk + diag_embed(gs)
    ga = u @ inner @ vh
    s_inv = 1 / s
    if m > k:
        ga = ga + (gu - u @ ut_gu) * s_inv.unsqueeze(-2) @ vh
    if n > k:
        ga = ga + u @ ((s_inv.unsqueeze(-1) * mT(gv)) - (s_inv.unsqueeze(-1) * mT(gv)) @ v @ vh)
    return (ga,)


@backend_extension(outputs=3, shape=_svd_shape, dtype=lambda d, **_: (_float("svd")(d),) * 3,
                   reference=_svd_reference, backward=_svd_backward, name="linalg_svd")
def svd_op(a, *, full):
    """(U, S descending, Vh): bidiagonalization and bidiagonal QR (singular.svd)."""
    return singular.svd(a, full=full)
