"""The blocked factorizations of `ember.linalg` (arrays in, arrays out, any cube runtime): their leaves and
panels are the unblocked cube kernels of `kernels.py`, their trailing updates matmuls (`blocks.gemm_update`).

- `lu_factor(a)`: recursive LU with partial pivoting (LAPACK's getrf2): factor the left half of the
  columns, swap its interchanges into the right half, U12 = L11^-1 A12, A22 -= L21 U12, factor A22,
  swap its interchanges back into the left half; panels of `LU_LEAF` columns by the unblocked kernel.
- `cholesky(a)`: recursive right-looking, as U^T U of the transpose (U = L^T, rows contiguous):
  U11 = chol(A11), U12 = U11^-T A12, A22 -= U12^T U12 (a recursive SYRK: only the upper triangle's
  blocks), U22 = chol(A22); `CHOLESKY_LEAF` at the leaves.
- `solve_triangular(a, b, lower, unit)` (and the TRSMs above): recursive, X1 = A11^-1 B1, B2 -= A21 X1,
  X2 = A22^-1 B2 (the mirror for upper); substitution at `TRSM_LEAF` rows.
- `qr(a, complete)`: blocked Householder with the compact WY form: a panel of `QR_BLOCK` columns by the
  unblocked kernel, its T (H_1 ... H_w = I - V T V^T, larft), then A2 -= V (T^T (V^T A2)); Q by the
  blocks applied to the identity in reverse (orgqr). `reflect` applies the stored blocks to any matrix.

Example:
    >>> lu, piv, info = lu_factor(np.array([[0.0, 1.0], [2.0, 3.0]]))
    >>> piv.tolist(), info.tolist()
    ([2, 2], 0)
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels.common import assign, contiguous, copy_as, empty
from ..kernels.matmul import tuned_matmul
from . import kernels
from .blocks import Block, gemm_update, halves, swap_rows, transposed_copy

# Block sizes: each the best of a sweep at 512 and 2048 (f32, one thread; docs/linalg.md, "Speed").
LU_LEAF = 64  # panel width of the unblocked LU kernel
CHOLESKY_LEAF = 128  # order of the unblocked Cholesky kernel's blocks
TRSM_LEAF = 128  # rows solved by substitution
SYRK_LEAF = 128  # below this a SYRK updates its whole square (twice the flops, fewer launches)
QR_BLOCK = 64  # columns per Householder panel


def _batch(x, tail: int):
    """(x as (count, ...) of its last `tail` dims, the batch shape)."""
    batch = tuple(x.shape[:-tail])
    return x.reshape((math.prod(batch),) + tuple(x.shape[-tail:])), batch


# ---- LU ------------------------------------------------------------------------------------------------
def lu_factor(a):
    """(LU, pivots, info) of a (..., m, n) batch: LU packs unit-lower L and U, pivots are 1-based i32
    (row i was swapped with row pivots[i] - 1), info the first zero pivot (1-based; 0: none)."""
    lu = copy_as(a, a.dtype)
    x, batch = _batch(lu, 2)
    count, m, n = x.shape
    k = min(m, n)
    piv = empty((count, k), np.int32, lu)
    info = empty((count,), np.int32, lu)
    kernels.zero(info)
    if count and k:
        _lu(x, empty((count, min(k, LU_LEAF), m), x.dtype, x), piv, info, 0, k)
        if n > k:  # wide: U's columns past the square
            swap_rows(x, piv, 0, k, k, n)
            trsm(Block(x, 0, 0, k, k), Block(x, 0, k, k, n - k), lower=True, unit=True)
    return lu, piv.reshape(batch + (k,)), info.reshape(batch)


def _lu(x, t, piv, info, k0: int, w: int) -> None:
    """Factor columns [k0, k0 + w) of x from row k0 down, their interchanges applied to those columns (t:
    the panels' scratch)."""
    if w <= LU_LEAF:
        kernels.lu_panel(x, t, piv, info, k0, w)
        return
    m = x.shape[1]
    h = halves(w, LU_LEAF)
    _lu(x, t, piv, info, k0, h)
    swap_rows(x, piv, k0, k0 + h, k0 + h, k0 + w)
    trsm(Block(x, k0, k0, h, h), Block(x, k0, k0 + h, h, w - h), lower=True, unit=True)
    gemm_update(Block(x, k0 + h, k0 + h, m - k0 - h, w - h), Block(x, k0 + h, k0, m - k0 - h, h),
                Block(x, k0, k0 + h, h, w - h))
    _lu(x, t, piv, info, k0 + h, w - h)
    swap_rows(x, piv, k0 + h, k0 + w, k0, k0 + h)


# ---- triangular solve ----------------------------------------------------------------------------------
def solve_triangular(a, b, lower: bool, unit: bool):
    """X with a @ X = b for (..., n, n) triangular `a` (its other triangle is not read) and (..., n, k) `b`
    of the same batch shape; a zero on the diagonal gives infinities, as LAPACK's trtrs would refuse."""
    a3, _ = _batch(contiguous(a), 2)
    x = copy_as(b, b.dtype)
    x3, _ = _batch(x, 2)
    count, n, k = x3.shape
    if count and n and k:
        trsm(Block(a3, 0, 0, n, n), Block(x3, 0, 0, n, k), lower, unit)
    return x


def trsm(a: Block, b: Block, lower: bool, unit: bool) -> None:
    """B = A^-1 B in place for a triangular block A (n x n) and a block B (n x k) of batches of one count."""
    n = a.rows
    if b.empty or not n:
        return
    if n <= TRSM_LEAF:
        kernels.triangular_leaf(a, b, lower, unit)
        return
    h = halves(n, TRSM_LEAF)
    k = b.cols
    a11, a21, a12, a22 = a.at(0, 0, h, h), a.at(h, 0, n - h, h), a.at(0, h, h, n - h), a.at(h, h, n - h, n - h)
    b1, b2 = b.at(0, 0, h, k), b.at(h, 0, n - h, k)
    if lower:
        trsm(a11, b1, lower, unit)
        gemm_update(b2, a21, b1)
        trsm(a22, b2, lower, unit)
    else:
        trsm(a22, b2, lower, unit)
        gemm_update(b1, a12, b2)
        trsm(a11, b1, lower, unit)


# ---- Cholesky ------------------------------------------------------------------------------------------
def cholesky(a):
    """(L, info) of a (..., n, n) batch from its lower triangle; info is the order of the first leading
    minor that is not positive definite (0: none), and L is valid only where info is 0. Factored as
    U^T U of the transpose (U = L^T): the row-major upper factor's steps run along rows."""
    u = transposed_copy(a)
    x, batch = _batch(u, 2)
    count, n, _ = x.shape
    info = empty((count,), np.int32, u)
    kernels.zero(info)
    if count and n:
        _cholesky(x, info, 0, n)
        if n > CHOLESKY_LEAF:
            _zero_lower_blocks(x, 0, n)
    return transposed_copy(u), info.reshape(batch)


def _cholesky(x, info, k0: int, n: int) -> None:
    if n <= CHOLESKY_LEAF:
        kernels.cholesky_leaf(x, info, k0, n)
        return
    h = halves(n, CHOLESKY_LEAF)
    _cholesky(x, info, k0, h)
    u12 = Block(x, k0, k0 + h, h, n - h)
    trsm(Block(x, k0, k0, h, h).T, u12, lower=True, unit=False)   # U12 = U11^-T A12
    syrk(Block(x, k0 + h, k0 + h, n - h, n - h), u12.T)
    _cholesky(x, info, k0 + h, n - h)


def syrk(c: Block, a: Block) -> None:
    """The upper triangle of C (n x n) -= A A^T (the blocks below it are written too, at the leaves)."""
    n = c.rows
    if n <= SYRK_LEAF:
        gemm_update(c, a, a.T)
        return
    h = halves(n, SYRK_LEAF // 2)
    a1, a2 = a.at(0, 0, h, a.cols), a.at(h, 0, n - h, a.cols)
    syrk(c.at(0, 0, h, h), a1)
    gemm_update(c.at(0, h, h, n - h), a1, a2.T)
    syrk(c.at(h, h, n - h, n - h), a2)


def _zero_lower_blocks(x, k0: int, n: int) -> None:
    """Zero the blocks below the diagonal that the recursion never wrote (the leaves zero their own)."""
    if n <= CHOLESKY_LEAF:
        return
    h = halves(n, CHOLESKY_LEAF)
    assign(x[:, k0 + h:k0 + n, k0:k0 + h], np.zeros((), x.dtype))
    _zero_lower_blocks(x, k0, h)
    _zero_lower_blocks(x, k0 + h, n - h)


# ---- Householder QR ------------------------------------------------------------------------------------
class Reflectors:
    """Householder reflectors in blocks of `QR_BLOCK`, as a blocked QR (or a bidiagonalization) leaves
    them: vs (count, k, m) holds reflector j as row j, its 1 at column j + shift and zeros before it;
    taus (count, >= k) their taus; `add` computes each block's T (H_k0 ... H_(k0+w-1) = I - V T V^T)."""

    def __init__(self, vs, taus, shift: int = 0) -> None:
        self.vs, self.taus, self.shift, self.ts = vs, taus, shift, []

    def block(self, i: int) -> tuple[int, Block, object]:
        """(first row of C it acts on, V (m - that row, w), T) of block i."""
        t = self.ts[i]
        k0, w = i * QR_BLOCK, t.shape[-1]
        r0 = k0 + self.shift
        return r0, Block(self.vs, k0, r0, w, self.vs.shape[2] - r0).T, t

    def add(self, k0: int, w: int) -> None:
        """The T of reflectors [k0, k0 + w) (the next block), from S = V^T V."""
        vt = self.vs[:, k0:k0 + w, k0 + self.shift:]
        self.ts.append(kernels.t_factor(contiguous(tuned_matmul(vt, kernels.transposed(vt))), self.taus, k0, w))

    def apply(self, c, transpose: bool, identity: bool = False) -> None:
        """C = Q C (Q^T C when `transpose`) in place, C (count, m, p) a C-contiguous batch. `identity`: C
        holds the identity's first p columns, so block i changes only its columns from i's first
        reflector on (how LAPACK's orgqr builds Q)."""
        order = range(len(self.ts)) if transpose else reversed(range(len(self.ts)))
        for i in order:
            r0, v, t = self.block(i)
            c0 = min(r0, c.shape[2]) if identity else 0
            _reflect(Block(c, r0, c0, v.rows, c.shape[2] - c0), v, t, transpose)

    def q(self, m: int, p: int):
        """The first p columns of Q = H_0 H_1 ... (count, m, p)."""
        q = empty((self.vs.shape[0], m, p), self.vs.dtype, self.vs)
        assign(q, np.eye(m, p, dtype=q.dtype))
        self.apply(q, transpose=False, identity=True)
        return q


def _reflect(c: Block, v: Block, t, transpose: bool) -> None:
    """C = (I - V T V^T) C, or with T^T when `transpose`."""
    if c.empty:
        return
    w = tuned_matmul(v.T.view(), c.view())
    w = contiguous(tuned_matmul(kernels.transposed(t) if transpose else t, w))
    gemm_update(c, v, Block(w, 0, 0, w.shape[1], w.shape[2]))


def householder(r) -> Reflectors:
    """Blocked Householder QR of r (count, m, n) in place (R, zeros below), and its reflectors."""
    count, m, n = r.shape
    k = min(m, n)
    reflectors = Reflectors(empty((count, max(k, 1), m), r.dtype, r), empty((count, max(k, 1)), r.dtype, r))
    for k0 in range(0, k, QR_BLOCK):
        w = min(QR_BLOCK, k - k0)
        kernels.qr_panel(r, reflectors.vs, reflectors.taus, k0, w)
        reflectors.add(k0, w)
        if k0 + w < n:
            _, v, t = reflectors.block(len(reflectors.ts) - 1)
            _reflect(Block(r, k0, k0 + w, m - k0, n - k0 - w), v, t, transpose=True)
    return reflectors


def qr(a, complete: bool):
    """(Q, R) of a (..., m, n) batch: Q (..., m, k) with k = min(m, n), or (..., m, m) when `complete`;
    R (..., k, n) or (..., m, n). R's diagonal has LAPACK's signs (beta = -sign(alpha) * norm)."""
    r = copy_as(a, a.dtype)
    x, batch = _batch(r, 2)
    count, m, n = x.shape
    k = min(m, n)
    kq = m if complete else k
    q = householder(x).q(m, kq) if count and m else empty((count, m, kq), r.dtype, r)
    return q.reshape(batch + (m, kq)), (r if complete else r[..., :k, :])
