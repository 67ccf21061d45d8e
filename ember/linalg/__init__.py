"""`ember.linalg`: torch.linalg's functions for real matrices (f32, f64), batched over leading dims, with
gradients, on every device; built on `@ember.backend_extension` (the factorizations, primitives in
`ops.py`, are blocked algorithms of cube kernels and matmuls: `blocked.py`, `singular.py`, `eigen.py`),
as a user could build such a library.

Factorizations: lu_factor(_ex), lu, lu_solve, cholesky(_ex), qr, eigh, eigvalsh, svd, svdvals; from them
det, slogdet, inv(_ex), solve(_ex), solve_triangular, pinv, lstsq, matrix_rank, matrix_exp, matrix_power;
norms (vector_norm, matrix_norm, norm) and cross, vander, trace, diagonal, diag_embed. Singular inputs
raise `LinAlgError` where torch raises (inv, solve, cholesky, lu_factor); the `_ex` variants return
torch's info codes instead. Half precision is refused by the factorizations (as torch's CPU kernels do);
complex matrices are not supported. See docs/linalg.md.

Example:
    >>> a = ember.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=ember.f64)
    >>> ember.linalg.solve(a, ember.tensor([1.0, 2.0], dtype=ember.f64)).tolist()
    [0.09090909090909091, 0.6363636363636364]
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..api.creation import eye, ones, zeros
from ..api.math import where
from ..api.shape import cat, diagonal as _diagonal
from ..dtype import i64
from ..errors import EmberError, ShapeError
from ..tensor import Tensor
from .ops import (cholesky_op, diag_embed, eigh_op, eye_like, lu_factor_op, lu_unpack_factors, mT, permutation_op,
                  permute_rows, qr_op, solve_triangular_op, svd_op, unpermute_rows)

__all__ = ["LinAlgError", "det", "slogdet", "inv", "inv_ex", "solve", "solve_ex", "solve_triangular", "cholesky",
           "cholesky_ex", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "qr", "eigh", "eigvalsh", "svd", "svdvals",
           "pinv", "lstsq", "matrix_norm", "vector_norm", "norm", "matrix_rank", "matrix_power", "matrix_exp",
           "cross", "vander", "trace", "diagonal", "diag_embed"]


class LinAlgError(EmberError):
    """A singular or non-positive-definite input where torch raises (`torch.linalg.LinAlgError`)."""


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def _square(op: str, a: Tensor) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"linalg.{op}", f"needs a batch of square matrices (*, n, n), got {a.shape}")


def _first_failure(info: Tensor) -> int:
    """The first nonzero info code of a batch (0: none), read on the host (a sync, as in torch)."""
    return int(info.reshape(-1).amax().item()) if info.numel else 0


def _permutation_sign(pivots: Tensor, dtype) -> Tensor:
    """(-1) ** (number of row swaps) per matrix."""
    k = pivots.shape[-1]
    steps = ember_arange(k, pivots) + 1
    swaps = (pivots != steps).to(dtype).sum(-1)
    return 1 - 2 * (swaps - 2 * (swaps * 0.5).floor())


def ember_arange(n: int, like: Tensor) -> Tensor:
    from ..api.creation import arange
    return arange(n, dtype=like.dtype, device=like.device)


# ---- LU and what it gives ----------------------------------------------------------------------------
def lu_factor_ex(a: Tensor, *, pivot: bool = True, check_errors: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """(LU, pivots, info): torch.linalg.lu_factor_ex (partial pivoting; pivots 1-based int32)."""
    if not pivot:
        raise EmberError("linalg.lu_factor_ex: pivot=False is not supported (torch supports it on CUDA only)")
    lu_, pivots, info = lu_factor_op(a)
    if check_errors and _first_failure(info):
        raise LinAlgError(f"linalg.lu_factor_ex: U[{_first_failure(info) - 1}, {_first_failure(info) - 1}] is zero")
    return lu_, pivots, info


def lu_factor(a: Tensor, *, pivot: bool = True) -> tuple[Tensor, Tensor]:
    """(LU, pivots); raises `LinAlgError` when U has a zero on its diagonal, as torch does."""
    lu_, pivots, info = lu_factor_ex(a, pivot=pivot)
    bad = _first_failure(info)
    if bad:
        raise LinAlgError(f"linalg.lu_factor: U[{bad - 1},{bad - 1}] is zero and using it on lu_solve would result "
                          f"in a division by zero; call linalg.lu or linalg.lu_factor_ex to factor anyway")
    return lu_, pivots


def lu(a: Tensor, *, pivot: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """(P, L, U) with A = P L U."""
    lu_, pivots, _ = lu_factor_ex(a, pivot=pivot)
    perm = permutation_op(pivots, n=a.shape[-2])
    m = a.shape[-2]
    p = unpermute_rows(eye(m, dtype=a.dtype, device=a.device).expand(*a.shape[:-2], m, m), perm)
    l_, u_ = lu_unpack_factors(lu_)
    return p, l_, u_


def lu_solve(lu_: Tensor, pivots: Tensor, b: Tensor, *, left: bool = True, adjoint: bool = False) -> Tensor:
    """X with A X = B (A^H X = B when `adjoint`; X A = B when not `left`) from A's lu_factor."""
    if not left:
        return mT(lu_solve(lu_, pivots, mT(b), left=True, adjoint=not adjoint))
    lu_, b = _broadcast_batch(lu_, b)
    pivots = pivots.expand(*lu_.shape[:-2], pivots.shape[-1])
    perm = permutation_op(pivots, n=lu_.shape[-1])
    if not adjoint:
        y = solve_triangular_op(lu_, permute_rows(b, perm), upper=False, unit=True)
        return solve_triangular_op(lu_, y, upper=True, unit=False)
    y = solve_triangular_op(mT(lu_), b, upper=False, unit=False)
    return unpermute_rows(solve_triangular_op(mT(lu_), y, upper=True, unit=True), perm)


def _broadcast_batch(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    import numpy as np
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise ShapeError("linalg", f"batch dims of {a.shape} and {b.shape} do not broadcast") from None
    return a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])


def det(a: Tensor) -> Tensor:
    """The determinant (0 for singular matrices), from LU."""
    _square("det", a)
    lu_, pivots, _ = lu_factor_op(a)
    return _diagonal(lu_, 0, -2, -1).prod(-1) * _permutation_sign(pivots, a.dtype)


def slogdet(a: Tensor) -> SlogdetResult:
    """(sign, log |det|): sign 0 and logabsdet -inf for singular matrices."""
    _square("slogdet", a)
    lu_, pivots, _ = lu_factor_op(a)
    d = _diagonal(lu_, 0, -2, -1)
    sign = d.sign().prod(-1) * _permutation_sign(pivots, a.dtype)
    return SlogdetResult(sign, d.abs().log().sum(-1))


def inv_ex(a: Tensor, *, check_errors: bool = False) -> tuple[Tensor, Tensor]:
    """(inverse, info): info is the first zero diagonal element of U (1-based), 0 when invertible."""
    _square("inv", a)
    lu_, pivots, info = lu_factor_op(a)
    if check_errors and _first_failure(info):
        raise LinAlgError(f"linalg.inv_ex: the matrix is singular (U[{_first_failure(info) - 1}] is zero)")
    return lu_solve(lu_, pivots, eye_like(a).expand(*a.shape)), info


def inv(a: Tensor) -> Tensor:
    """The inverse; raises `LinAlgError` for singular matrices, as torch does."""
    result, info = inv_ex(a)
    bad = _first_failure(info)
    if bad:
        raise LinAlgError(f"linalg.inv: The diagonal element {bad} is zero, the inversion could not be completed "
                          f"because the input matrix is singular.")
    return result


def _as_matrix_rhs(a: Tensor, b: Tensor) -> bool:
    """torch.linalg.solve's rule: B is a batch of vectors when 1-D or one dim short of A with A's batch."""
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and tuple(b.shape) == tuple(a.shape[:-1]))


def solve_ex(a: Tensor, b: Tensor, *, left: bool = True, check_errors: bool = False) -> tuple[Tensor, Tensor]:
    """(X, info) with A X = B (X A = B when not `left`)."""
    _square("solve", a)
    vector = _as_matrix_rhs(a, b)
    rhs = b.unsqueeze(-1) if vector else b
    lu_, pivots, info = lu_factor_op(a)
    if check_errors and _first_failure(info):
        raise LinAlgError("linalg.solve_ex: The solver failed because the input matrix is singular.")
    x = lu_solve(lu_, pivots, rhs if left else rhs, left=left)
    return (x[..., 0] if vector else x), info


def solve(a: Tensor, b: Tensor, *, left: bool = True) -> Tensor:
    """X with A X = B; raises `LinAlgError` for singular A, as torch does."""
    x, info = solve_ex(a, b, left=left)
    if _first_failure(info):
        raise LinAlgError("linalg.solve: The solver failed because the input matrix is singular.")
    return x


def solve_triangular(a: Tensor, b: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False) -> Tensor:
    """X with A X = B (X A = B when not `left`) for triangular A: only its `upper` or lower triangle is read."""
    _square("solve_triangular", a)
    if not left:
        return mT(solve_triangular(mT(a), mT(b), upper=not upper, unitriangular=unitriangular))
    a, b = _broadcast_batch(a, b)
    return solve_triangular_op(a, b, upper=bool(upper), unit=bool(unitriangular))


# ---- Cholesky, QR, eigh, SVD ---------------------------------------------------------------------------
def cholesky_ex(a: Tensor, *, upper: bool = False, check_errors: bool = False) -> tuple[Tensor, Tensor]:
    """(L, info): L lower with A = L L^H (U with A = U^H U when `upper`); info the order of the first leading
    minor that is not positive definite (0: none)."""
    l_, info = cholesky_op(mT(a) if upper else a)
    if check_errors and _first_failure(info):
        raise LinAlgError(f"linalg.cholesky_ex: the leading minor of order {_first_failure(info)} is not "
                          f"positive-definite")
    return (mT(l_) if upper else l_), info


def cholesky(a: Tensor, *, upper: bool = False) -> Tensor:
    """The Cholesky factor; raises `LinAlgError` when A is not positive definite, as torch does."""
    l_, info = cholesky_ex(a, upper=upper)
    bad = _first_failure(info)
    if bad:
        raise LinAlgError(f"linalg.cholesky: The factorization could not be completed because the input is not "
                          f"positive-definite (the leading minor of order {bad} is not positive-definite).")
    return l_


def qr(a: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:
    """(Q, R) by Householder reflections; mode "reduced", "complete" or "r" (Q empty), as in torch."""
    if mode not in ("reduced", "complete", "r"):
        raise EmberError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    q, r = qr_op(a, complete=mode == "complete")
    if mode == "r":
        return zeros(0, dtype=a.dtype, device=a.device), r
    return q, r


def eigh(a: Tensor, UPLO: str = "L") -> tuple[Tensor, Tensor]:  # noqa: N803 (torch's name)
    """(eigenvalues ascending, eigenvectors as columns) of the symmetric matrix in A's `UPLO` triangle."""
    if UPLO not in ("L", "U"):
        raise EmberError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return eigh_op(mT(a) if UPLO == "U" else a)


def eigvalsh(a: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803
    """The eigenvalues (ascending) of the symmetric matrix in A's `UPLO` triangle."""
    return eigh(a, UPLO)[0]


def svd(a: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """(U, S descending, Vh) with A = U diag(S) Vh."""
    return svd_op(a, full=bool(full_matrices))


def svdvals(a: Tensor) -> Tensor:
    """The singular values, descending."""
    return svd_op(a, full=False)[1]


# ---- composed ------------------------------------------------------------------------------------------
def _tolerance(s_max: Tensor, m: int, n: int, atol, rtol, dtype) -> Tensor:
    import numpy as np
    if rtol is None:
        rtol = float(np.finfo(dtype.np).eps) * max(m, n) if atol is None or atol == 0 else 0.0
    tol = s_max * rtol
    return tol.maximum(tol.new_tensor(atol)) if atol is not None else tol


def pinv(a: Tensor, *, atol: float | None = None, rtol: float | None = None, hermitian: bool = False) -> Tensor:
    """The pseudo-inverse: singular values at most max(atol, rtol * largest) count as zero."""
    m, n = a.shape[-2:]
    if hermitian:
        w, v = eigh(a)
        tol = _tolerance(w.abs().amax(-1, keepdim=True) if n else w, m, n, atol, rtol, a.dtype)
        keep = w.abs() > tol
        winv = where(keep, 1 / where(keep, w, 1.0), 0.0)
        return (v * winv.unsqueeze(-2)) @ mT(v)
    u, s, vh = svd(a, full_matrices=False)
    tol = _tolerance(s[..., :1] if min(m, n) else s, m, n, atol, rtol, a.dtype)
    keep = s > tol
    sinv = where(keep, 1 / where(keep, s, 1.0), 0.0)
    return (mT(vh) * sinv.unsqueeze(-2)) @ mT(u)


class LstsqResult(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


def lstsq(a: Tensor, b: Tensor, rcond: float | None = None, *, driver: str | None = None) -> LstsqResult:
    """The least-squares solution of A X = B by the pseudo-inverse (rank-deficient A included); residuals and
    singular_values come back empty and rank is computed, as from torch's default CPU driver (gelsy)."""
    if driver not in (None, "gelsy", "gelsd", "gelss", "gels"):
        raise EmberError(f"linalg.lstsq: unknown driver {driver!r}")
    vector = b.ndim == a.ndim - 1
    rhs = b.unsqueeze(-1) if vector else b
    x = pinv(a, rtol=rcond) @ rhs
    empty_ = zeros(0, dtype=a.dtype, device=a.device)
    return LstsqResult(x[..., 0] if vector else x, empty_, matrix_rank(a, rtol=rcond), empty_)


def matrix_rank(a: Tensor, *, atol: float | None = None, rtol: float | None = None, hermitian: bool = False) -> Tensor:
    """The number of singular values (|eigenvalues| when `hermitian`) above max(atol, rtol * largest), int64."""
    m, n = a.shape[-2:]
    s = eigvalsh(a).abs() if hermitian else svdvals(a)
    if not min(m, n):
        return zeros(*a.shape[:-2], dtype=i64, device=a.device)
    tol = _tolerance(s.amax(-1, keepdim=True), m, n, atol, rtol, a.dtype)
    return (s > tol).to(i64).sum(-1)


def matrix_power(a: Tensor, n: int) -> Tensor:
    """A ** n by repeated squaring (n < 0: of inv(A))."""
    _square("matrix_power", a)
    if n == 0:
        return eye_like(a).expand(*a.shape)
    base = inv(a) if n < 0 else a
    n, result = abs(n), None
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    return result


def matrix_exp(a: Tensor) -> Tensor:
    """exp(A) by scaling and squaring: A / 2**s of 1-norm <= 1/2, Taylor series to degree 18, s squarings."""
    _square("matrix_exp", a)
    if a.numel == 0:
        return a + 0
    norm1 = float(a.detach().abs().sum(-2).amax().item())
    s = max(0, math.ceil(math.log2(norm1 / 0.5))) if norm1 > 0.5 else 0
    x = a * (0.5 ** s)
    eye_ = eye_like(a)
    result = eye_ + x / 18
    for k in range(17, 0, -1):
        result = eye_ + (x @ result) / k
    for _ in range(s):
        result = result @ result
    return result


def vector_norm(x: Tensor, ord: float = 2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The vector `ord`-norm over `dim` (None: all elements): inf, -inf, 0 (count of nonzeros) or any p."""
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_float:
        raise EmberError(f"linalg.vector_norm: needs a floating tensor, got {x.dtype}")
    dims = tuple(range(x.ndim)) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    if dim is None and not keepdim:
        x, dims = x.reshape(-1), (0,)
    a = x.abs()
    if ord == math.inf:
        return a.amax(dims, keepdim=keepdim)
    if ord == -math.inf:
        return a.amin(dims, keepdim=keepdim)
    if ord == 0:
        return (x != 0).to(x.dtype).sum(dims, keepdim=keepdim)
    if ord == 1:
        return a.sum(dims, keepdim=keepdim)
    if ord == 2:
        return (x * x).sum(dims, keepdim=keepdim).sqrt()
    return (a ** ord).sum(dims, keepdim=keepdim) ** (1.0 / ord)


def matrix_norm(a: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The matrix norm: "fro", "nuc", 2 / -2 (largest / smallest singular value), 1 / -1 (max / min column
    sum of |A|), inf / -inf (max / min row sum)."""
    if dtype is not None:
        a = a.to(dtype)
    if a.ndim < 2:
        raise ShapeError("linalg.matrix_norm", f"needs at least 2 dims, got {a.shape}")
    d0, d1 = (d % a.ndim for d in dim)
    if ord == "fro":
        return vector_norm(a, 2, (d0, d1), keepdim)
    x = a.movedim((d0, d1), (-2, -1))
    if ord in ("nuc", 2, -2):
        s = svdvals(x)
        out = s.sum(-1) if ord == "nuc" else (s.amax(-1) if ord == 2 else s.amin(-1))
    elif ord in (1, -1):
        col = x.abs().sum(-2)
        out = col.amax(-1) if ord == 1 else col.amin(-1)
    elif ord in (math.inf, -math.inf):
        row = x.abs().sum(-1)
        out = row.amax(-1) if ord == math.inf else row.amin(-1)
    else:
        raise EmberError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}")
    if keepdim:
        for d in sorted((d0, d1)):
            out = out.unsqueeze(d)
    return out


def norm(a: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """torch.linalg.norm: a vector norm over an int `dim` (or of the flattened input when ord and dim are
    None), a matrix norm over a 2-tuple `dim` (or of a 2-D input)."""
    if dim is None and ord is None:
        return vector_norm(a, 2, None, keepdim, dtype=dtype)
    if isinstance(dim, int) or (dim is None and a.ndim == 1) or (dim is not None and len(dim) == 1):
        return vector_norm(a, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    return matrix_norm(a, "fro" if ord is None else ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)


def cross(a: Tensor, b: Tensor, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along `dim` (broadcast)."""
    if a.shape[dim] != 3 or b.shape[dim] != 3:
        raise ShapeError("linalg.cross", f"needs size 3 along dim {dim}, got {a.shape} and {b.shape}")
    ax, ay, az = (a.narrow(dim, i, 1) for i in range(3))
    bx, by, bz = (b.narrow(dim, i, 1) for i in range(3))
    return cat([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], dim)


def vander(x: Tensor, *, N: int | None = None) -> Tensor:  # noqa: N803 (torch's name)
    """(*, n) -> (*, n, N): columns x**0, x**1, ..., x**(N - 1) (torch.linalg.vander's increasing powers)."""
    n = x.shape[-1] if N is None else N
    if n < 1:
        raise EmberError(f"linalg.vander: N must be positive, got {n}")
    first = ones(*x.shape, 1, dtype=x.dtype, device=x.device)
    if n == 1:
        return first
    return cat([first, x.unsqueeze(-1).expand(*x.shape, n - 1).cumprod(-1)], -1)


def trace(a: Tensor) -> Tensor:
    """The sum of the main diagonal of a 2-D tensor (torch.trace)."""
    from ..api.linalg import trace as _trace
    return _trace(a)


def diagonal(a: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """torch.linalg.diagonal: the diagonal of dims (dim1, dim2) (default the last two), as the last dim."""
    return _diagonal(a, offset, dim1, dim2)

