"""The blocked factorizations, the SVD and eigh against torch.linalg at sizes that cross their block
boundaries (a block ± 1, odd sizes past two blocks, rectangular, batched) on every device of the suite, in
f32 and f64; info codes from failures past the first block; gradients through them against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember import linalg as L
from ember.linalg import blocked, eigen, singular

from .test_linalg import _close, _columns_up_to_sign, _device_dtype, _np

# Sizes past the SVD's and eigh's panels (32), LU_LEAF and QR_BLOCK (64), TRSM_LEAF, CHOLESKY_LEAF and
# SYRK_LEAF (128); batched twice.
SIZES = [((), 33), ((2,), 65), ((), 67), ((), 129)]
RECTANGLES = [(70, 33), (33, 70), (2, 97, 65), (129, 63)]


def test_block_sizes_are_the_ones_crossed():
    assert (singular.PANEL, eigen.PANEL, blocked.LU_LEAF, blocked.QR_BLOCK, blocked.TRSM_LEAF, blocked.CHOLESKY_LEAF,
            blocked.SYRK_LEAF) == (32, 32, 64, 64, 128, 128, 128)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_blocked_square_match_torch(device, rng, dtype):
    _device_dtype(device, dtype)
    np_dtype = np.float64 if dtype == "f64" else np.float32
    for batch, n in SIZES:
        a = rng.standard_normal(batch + (n, n)).astype(np_dtype)
        b = rng.standard_normal(batch + (n, 3)).astype(np_dtype)
        spd = (a @ np.swapaxes(a, -1, -2) / n + np.eye(n)).astype(np_dtype)
        A, B, S = (ember.tensor(x, device=device) for x in (a, b, spd))
        ta, tb, ts = (torch.from_numpy(x) for x in (a, b, spd))
        what = f"{batch} {n}"
        lu, piv = L.lu_factor(A)
        tlu, tpiv = torch.linalg.lu_factor(ta)
        np.testing.assert_array_equal(_np(piv), _np(tpiv), err_msg=f"pivots {what}")
        _close(lu, tlu, dtype, f"lu_factor {what}", n)
        _close(L.solve(A, B), torch.linalg.solve(ta, tb), dtype, f"solve {what}", n * 10)
        _close(L.det(A), torch.linalg.det(ta), dtype, f"det {what}", n * 10)
        _close(L.inv(A), torch.linalg.inv(ta), dtype, f"inv {what}", n * 10)
        chol = L.cholesky(S)
        _close(chol, torch.linalg.cholesky(ts), dtype, f"cholesky {what}", n)
        _close(L.cholesky(S, upper=True), torch.linalg.cholesky(ts, upper=True), dtype, f"cholesky upper {what}", n)
        tl = torch.linalg.cholesky(ts)
        for upper in (False, True):
            for unit in (False, True):
                t = tl.mT if upper else tl
                e = ember.tensor(_np(t).copy(), device=device)
                _close(L.solve_triangular(e, B, upper=upper, unitriangular=unit),
                       torch.linalg.solve_triangular(t, tb, upper=upper, unitriangular=unit), dtype,
                       f"solve_triangular upper={upper} unit={unit} {what}", n * (100 if unit else 10))
        for mode in ("reduced", "complete"):
            for e, t in zip(L.qr(A, mode), torch.linalg.qr(ta, mode)):
                _close(e, t, dtype, f"qr {mode} {what}", n)
        w, v = L.eigh(A)
        tw, tv = torch.linalg.eigh(ta)
        _close(w, tw, dtype, f"eigh values {what}", n)
        _close((v * w.unsqueeze(-2)) @ v.transpose(-2, -1), tv @ torch.diag_embed(tw) @ tv.mT, dtype,
               f"eigh V diag(w) V^T {what}", n)
        _close(v.transpose(-2, -1) @ v, np.broadcast_to(np.eye(n), batch + (n, n)), dtype, f"eigh V^T V {what}", n)
        _check_svd(A, ta, dtype, what)


def _check_svd(A, ta, dtype, what, distinct=None):
    """svdvals, svd (both modes) against torch; the first `distinct` singular vectors (default all) up to sign,
    and U, V orthonormal."""
    m, n = ta.shape[-2:]
    k = min(m, n) if distinct is None else distinct
    scale = max(m, n)
    _close(L.svdvals(A), torch.linalg.svdvals(ta), dtype, f"svdvals {what}", scale)
    for full in (False, True):
        u, s, vh = L.svd(A, full_matrices=full)
        tu, ts, tvh = torch.linalg.svd(ta, full_matrices=full)
        assert u.shape == tuple(tu.shape) and vh.shape == tuple(tvh.shape), what
        _close(_columns_up_to_sign(u[..., :k], tu[..., :k]), tu[..., :k], dtype, f"svd U {what}", scale * 10)
        _close(_columns_up_to_sign(vh.transpose(-2, -1)[..., :k], tvh.mT[..., :k]), tvh.mT[..., :k], dtype,
               f"svd V {what}", scale * 10)
        for q, name in ((u, "U"), (vh.transpose(-2, -1), "V")):
            eye = np.broadcast_to(np.eye(q.shape[-1]), tuple(q.shape[:-2]) + (q.shape[-1],) * 2)
            _close(q.transpose(-2, -1) @ q, eye, dtype, f"svd {name} orthonormal {what} full={full}", scale)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_blocked_rectangular_match_torch(device, rng, dtype):
    _device_dtype(device, dtype)
    np_dtype = np.float64 if dtype == "f64" else np.float32
    for shape in RECTANGLES:
        a = rng.standard_normal(shape).astype(np_dtype)
        A, ta = ember.tensor(a, device=device), torch.from_numpy(a)
        scale = max(shape[-2:])
        lu, piv = L.lu_factor(A)
        tlu, tpiv = torch.linalg.lu_factor(ta)
        np.testing.assert_array_equal(_np(piv), _np(tpiv), err_msg=f"pivots {shape}")
        _close(lu, tlu, dtype, f"lu_factor {shape}", scale)
        for mode in ("reduced", "complete"):
            for e, t in zip(L.qr(A, mode), torch.linalg.qr(ta, mode)):
                _close(e, t, dtype, f"qr {mode} {shape}", scale)
        _check_svd(A, ta, dtype, str(shape))


def test_singular_and_repeated_spectra(device):
    """Zero and repeated singular values and eigenvalues (a rank-5 matrix past a panel): U and V stay
    orthonormal, the spectrum matches torch's."""
    rng = np.random.default_rng(2)
    low = (rng.standard_normal((70, 5)) @ rng.standard_normal((5, 70))).astype(np.float32)
    A, ta = ember.tensor(low, device=device), torch.from_numpy(low)
    _check_svd(A, ta, "f32", "rank 5", distinct=5)
    sym = low @ low.T / 70
    w, v = L.eigh(ember.tensor(sym, device=device))
    _close(w, torch.linalg.eigvalsh(torch.from_numpy(sym)), "f32", "eigvalsh rank 5", 70)
    _close(v.transpose(-2, -1) @ v, np.eye(70), "f32", "eigh V^T V rank 5", 70)


def test_blocked_info_codes_past_the_first_block(device):
    n = 130
    a = np.random.default_rng(1).standard_normal((2, n, n)).astype(np.float32)
    a[1, :, 100] = 0  # U[100, 100] is exactly 0: info 101 in the second matrix only
    spd = np.stack([np.eye(n), np.eye(n)]).astype(np.float32)
    spd[0, 99, 99] = -1  # the leading minor of order 100 fails, in the second Cholesky leaf
    A, S = ember.tensor(a, device=device), ember.tensor(spd, device=device)
    ta, ts = torch.from_numpy(a), torch.from_numpy(spd)
    np.testing.assert_array_equal(_np(L.lu_factor_ex(A)[2]), _np(torch.linalg.lu_factor_ex(ta)[2]))
    np.testing.assert_array_equal(_np(L.cholesky_ex(S)[1]), _np(torch.linalg.cholesky_ex(ts)[1]))
    _close(L.cholesky_ex(S)[0][1], torch.linalg.cholesky_ex(ts)[0][1], "f32", "the valid matrix")
    with pytest.raises(L.LinAlgError, match="order 100"):
        L.cholesky(S)
    with pytest.raises(L.LinAlgError, match="singular"):
        L.solve(A, A)


def test_blocked_gradients_match_torch(device, rng):
    dtype = "f64" if "f64" in [d.name for d in getattr(device.backend, "dtypes", [ember.f64])] else "f32"
    np_dtype = np.float64 if dtype == "f64" else np.float32
    n = 67
    a = (rng.standard_normal((n, n)) + 4 * np.eye(n)).astype(np_dtype)
    b = rng.standard_normal((n, 2)).astype(np_dtype)

    def ops(lib):
        spd = lambda x: x @ x.transpose(-2, -1) / n + (ember.eye(n, dtype=x.dtype, device=x.device)  # noqa: E731
                                                        if lib is L else torch.eye(n, dtype=x.dtype))
        def svd(x, y):
            u, s, vh = lib.svd(x[:, :40], full_matrices=False)
            return s, u @ vh

        def eigh(x, y):
            w, v = lib.eigh(x + x.transpose(-2, -1))
            return w, v * v

        return [("solve", lambda x, y: (lib.solve(x, y),)), ("cholesky", lambda x, y: (lib.cholesky(spd(x)),)),
                ("qr", lambda x, y: lib.qr(x[:, :40])), ("svd", svd), ("eigh", eigh)]

    for (name, fe), (_, ft) in zip(ops(L), ops(torch.linalg)):
        ea = ember.tensor(a, device=device.autodiff()).require_grad()
        eb = ember.tensor(b, device=device.autodiff()).require_grad()
        ta, tb = torch.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(b.copy()).requires_grad_()
        t_out = ft(ta, tb)
        weights = [rng.standard_normal(tuple(t.shape)).astype(np_dtype) for t in t_out]
        grads = sum((o * ember.tensor(w, device=device)).sum() for o, w in zip(fe(ea, eb), weights)).backward()
        tga = torch.autograd.grad(sum((o * torch.from_numpy(w)).sum() for o, w in zip(t_out, weights)), ta)[0]
        _close(ea.grad(grads), tga, dtype, f"{name}: grad", n * 100)
