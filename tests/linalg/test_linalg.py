"""ember.linalg against torch.linalg on random inputs: sizes 0, 1 and primes, batched, on every device of
the suite in f32 and f64; gradients against torch autograd and finite differences (f64); singular inputs
raise where torch raises and the `_ex` variants return torch's info codes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ember
from ember import linalg as L
from ember.errors import DTypeError, EmberError

# (batch, n): sizes 0, 1 and primes, a batch of two and a 0-size batch.
CASES = [((), 0), ((), 1), ((2,), 7), ((), 13), ((0,), 3)]
TOL = {"f64": (1e-8, 1e-9), "f32": (2e-3, 2e-4)}


def _np(t):
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return t if isinstance(t, np.ndarray) else np.asarray(t.numpy())


def _close(e, t, dtype, what, scale=1.0):
    rtol, atol = TOL[dtype]
    e, t = _np(e).astype(np.float64), _np(t).astype(np.float64)
    assert e.shape == t.shape, f"{what}: shape {e.shape}, torch {t.shape}"
    np.testing.assert_allclose(e, t, rtol=rtol * scale, atol=atol * scale, err_msg=what)


def _columns_up_to_sign(e, t):
    """e's columns flipped to agree in sign with t's (singular / eigen vectors are unique up to sign)."""
    e, t = _np(e), _np(t)
    if e.size == 0:
        return e
    flip = np.sign(np.sum(e * t, axis=-2, keepdims=True))
    return e * np.where(flip == 0, 1, flip)


def _device_dtype(device, dtype):
    if dtype == "f64" and "f64" not in [d.name for d in getattr(device.backend, "dtypes", [ember.f64])]:
        pytest.skip(f"{device!r} holds no f64 (checked to refuse it in test_f64_refused_where_not_held)")


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_factorizations_match_torch(device, rng, dtype):
    _device_dtype(device, dtype)
    np_dtype = np.float64 if dtype == "f64" else np.float32
    for batch, n in CASES:
        a = rng.standard_normal(batch + (n, n)).astype(np_dtype)
        b = rng.standard_normal(batch + (n, 2)).astype(np_dtype)
        spd = (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(np_dtype)
        A, B, S = (ember.tensor(x, device=device) for x in (a, b, spd))
        ta, tb, ts = (torch.from_numpy(x) for x in (a, b, spd))
        big = max(1, n)
        _close(L.det(A), torch.linalg.det(ta), dtype, f"det {batch} {n}", big)
        sign, logabs = L.slogdet(A)
        tsign, tlog = torch.linalg.slogdet(ta)
        _close(sign, tsign, dtype, "slogdet sign")
        _close(logabs, tlog, dtype, "slogdet", big)
        _close(L.inv(A), torch.linalg.inv(ta), dtype, "inv", big * 10)
        _close(L.solve(A, B), torch.linalg.solve(ta, tb), dtype, "solve", big * 10)
        _close(L.solve(A, B, left=False) if False else L.solve_triangular(A, B, upper=True),
               torch.linalg.solve_triangular(ta, tb, upper=True), dtype, "solve_triangular", 10 ** min(n, 6))
        _close(L.solve_triangular(S, B, upper=False, unitriangular=True),
               torch.linalg.solve_triangular(ts, tb, upper=False, unitriangular=True), dtype, "unit lower",
               10 ** min(n, 6))
        _close(L.cholesky(S), torch.linalg.cholesky(ts), dtype, "cholesky", big)
        _close(L.cholesky(S, upper=True), torch.linalg.cholesky(ts, upper=True), dtype, "cholesky upper", big)
        lu, piv = L.lu_factor(A)
        tlu, tpiv = torch.linalg.lu_factor(ta)
        np.testing.assert_array_equal(_np(piv), _np(tpiv))
        _close(lu, tlu, dtype, "lu_factor", big)
        _close(L.lu_solve(lu, piv, B), torch.linalg.lu_solve(tlu, tpiv, tb), dtype, "lu_solve", big * 10)
        _close(L.lu_solve(lu, piv, B, adjoint=True), torch.linalg.lu_solve(tlu, tpiv, tb, adjoint=True), dtype,
               "lu_solve adjoint", big * 10)
        for e, t in zip(L.lu(A), torch.linalg.lu(ta)):
            _close(e, t, dtype, "lu", big)
        _close(L.eigvalsh(A), torch.linalg.eigvalsh(ta), dtype, "eigvalsh", big * 10)
        w, v = L.eigh(S)
        tw, tv = torch.linalg.eigh(ts)
        _close(w, tw, dtype, "eigh values", big * 10)
        _close(_columns_up_to_sign(v, tv), tv, dtype, "eigh vectors", big * 10)
        _close(L.matrix_exp(A * 0.3), torch.linalg.matrix_exp(ta * 0.3), dtype, "matrix_exp", big)
        _close(L.matrix_power(A, 3), torch.linalg.matrix_power(ta, 3), dtype, "matrix_power", big)
        _close(L.matrix_power(S, -2), torch.linalg.matrix_power(ts, -2), dtype, "matrix_power -2", big)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_rectangular_match_torch(device, rng, dtype):
    _device_dtype(device, dtype)
    np_dtype = np.float64 if dtype == "f64" else np.float32
    for shape in [(0, 3), (1, 1), (7, 3), (2, 3, 7), (13, 13)]:
        a = rng.standard_normal(shape).astype(np_dtype)
        A, ta = ember.tensor(a, device=device), torch.from_numpy(a)
        scale = max(1, max(shape[-2:]))
        for mode in ("reduced", "complete"):
            for e, t in zip(L.qr(A, mode), torch.linalg.qr(ta, mode)):
                _close(e, t, dtype, f"qr {mode} {shape}", scale)
        _close(L.qr(A, "r")[1], torch.linalg.qr(ta, "r")[1], dtype, "qr r", scale)
        _close(L.svdvals(A), torch.linalg.svdvals(ta), dtype, f"svdvals {shape}", scale)
        for full in (False, True):
            u, s, vh = L.svd(A, full_matrices=full)
            tu, ts, tvh = torch.linalg.svd(ta, full_matrices=full)
            k = min(shape[-2:])
            assert u.shape == tuple(tu.shape) and vh.shape == tuple(tvh.shape), (shape, full)
            _close(_columns_up_to_sign(u[..., :k], tu[..., :k]), tu[..., :k], dtype, "svd U", scale * 10)
            _close(_columns_up_to_sign(L.diagonal(u.transpose(-2, -1) @ u) if False else vh.transpose(-2, -1)[..., :k],
                                       tvh.mT[..., :k]), tvh.mT[..., :k], dtype, "svd V", scale * 10)
            m_, n_ = shape[-2:]
            _close(u.transpose(-2, -1) @ u, np.broadcast_to(np.eye(u.shape[-1]), u.shape[:-2] + (u.shape[-1],) * 2),
                   dtype, "U orthonormal", scale)
        _close(L.pinv(A), torch.linalg.pinv(ta), dtype, "pinv", scale * 10)
        if shape[-2] >= shape[-1]:
            b = rng.standard_normal(shape[:-1] + (2,)).astype(np_dtype)
            _close(L.lstsq(A, ember.tensor(b, device=device)).solution, torch.linalg.lstsq(ta, torch.from_numpy(b)).solution,
                   dtype, "lstsq", scale * 10)
        np.testing.assert_array_equal(_np(L.matrix_rank(A)), _np(torch.linalg.matrix_rank(ta)))
        for ord_ in ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf):
            if min(shape[-2:]) == 0 and ord_ not in ("fro", "nuc"):
                continue
            _close(L.matrix_norm(A, ord_), torch.linalg.matrix_norm(ta, ord_), dtype, f"matrix_norm {ord_}", scale)
        for ord_ in (2, 1, 3.5, 0, math.inf, -math.inf):
            if a.size == 0 and ord_ == -math.inf:
                continue
            _close(L.vector_norm(A, ord_, dim=-1), torch.linalg.vector_norm(ta, ord_, dim=-1), dtype,
                   f"vector_norm {ord_}", scale)
        _close(L.norm(A), torch.linalg.norm(ta), dtype, "norm", scale)


def test_small_helpers_match_torch(device, rng):
    a = rng.standard_normal((2, 4, 3)).astype(np.float32)
    b = rng.standard_normal((1, 4, 3)).astype(np.float32)
    A, B = ember.tensor(a, device=device), ember.tensor(b, device=device)
    _close(L.cross(A, B), torch.linalg.cross(torch.from_numpy(a), torch.from_numpy(b)), "f32", "cross")
    _close(L.vander(B), torch.linalg.vander(torch.from_numpy(b)), "f32", "vander")
    _close(L.vander(B, N=5), torch.linalg.vander(torch.from_numpy(b), N=5), "f32", "vander N")
    _close(ember.trace(B[0]), torch.trace(torch.from_numpy(b[0])), "f32", "trace")
    _close(L.diagonal(A), torch.linalg.diagonal(torch.from_numpy(a)), "f32", "diagonal")


def test_singular_inputs_raise_or_report_info(device):
    dtype = ember.f32
    sing = ember.tensor(np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]]], np.float32), device=device)
    t = torch.tensor(sing.numpy())
    for fn, name in [(L.inv, "inv"), (lambda x: L.solve(x, x), "solve"), (L.cholesky, "cholesky"),
                     (L.lu_factor, "lu_factor")]:
        with pytest.raises(L.LinAlgError, match=name):
            fn(sing)
    np.testing.assert_array_equal(_np(L.inv_ex(sing)[1]), _np(torch.linalg.inv_ex(t)[1]))
    np.testing.assert_array_equal(_np(L.solve_ex(sing, sing)[1]), _np(torch.linalg.solve_ex(t, t)[1]))
    np.testing.assert_array_equal(_np(L.cholesky_ex(sing)[1]), _np(torch.linalg.cholesky_ex(t)[1]))
    np.testing.assert_array_equal(_np(L.lu_factor_ex(sing)[2]), _np(torch.linalg.lu_factor_ex(t)[2]))
    _close(L.det(sing), torch.linalg.det(t), "f32", "det of singular")
    assert dtype is sing.dtype


def test_half_precision_refused_by_name():
    x = ember.ones(3, 3, dtype=ember.f16, device=ember.Device.cpu())
    with pytest.raises(DTypeError, match="linalg.lu_factor.*float16"):
        L.det(x)
    _close(L.vector_norm(x), torch.linalg.vector_norm(torch.ones(3, 3, dtype=torch.float16)), "f32", "half norm")


def test_f64_refused_where_not_held():
    if not hasattr(ember.Device, "wgpu"):
        pytest.skip("no wgpu")
    try:
        device = ember.Device.wgpu()
    except Exception as e:  # noqa: BLE001 (no adapter here)
        pytest.skip(f"no wgpu adapter: {e}")
    if "f64" in [d.name for d in device.backend.dtypes]:
        pytest.skip("this adapter holds f64")
    with pytest.raises(EmberError, match="f64"):
        L.det(ember.ones(2, 2, dtype=ember.f64, device=device))


# ---- gradients ---------------------------------------------------------------------------------------
def _sym(x):
    return (x + x.transpose(-2, -1)) * 0.5


def _spd(x):
    return x @ x.transpose(-2, -1) + 3 * _eye(x)


def _eye(x):
    return ember.eye(x.shape[-1], dtype=x.dtype, device=x.device) if isinstance(x, ember.Tensor) else \
        torch.eye(x.shape[-1], dtype=x.dtype)


def _ops(lib):
    """(name, function of one (2, 4, 4) input and one (2, 4, 3) input giving a tuple of outputs) per op;
    eigh and svd outputs enter sign-invariantly (products of vectors with their own columns)."""
    tl = lib

    def svd_inv(a, b):
        u, s, vh = tl.svd(a[..., :3], full_matrices=False)
        return (s, u @ vh, (u * u).sum(-1))

    def eigh_inv(a, b):
        w, v = tl.eigh(_sym(a))
        return (w, v * v)

    return [
        ("det", lambda a, b: (tl.det(a),)),
        ("slogdet", lambda a, b: (tl.slogdet(a)[1],)),
        ("inv", lambda a, b: (tl.inv(a),)),
        ("solve", lambda a, b: (tl.solve(a, b),)),
        ("solve_triangular", lambda a, b: (tl.solve_triangular(a + 4 * _eye(a), b, upper=False),
                                           tl.solve_triangular(a + 4 * _eye(a), b, upper=True, unitriangular=True))),
        ("cholesky", lambda a, b: (tl.cholesky(_spd(a)),)),
        ("lu_factor", lambda a, b: (tl.lu_factor(a)[0],)),
        ("qr", lambda a, b: tl.qr(a)),
        ("qr wide", lambda a, b: tl.qr(a[..., :3, :])),
        ("qr tall", lambda a, b: tl.qr(b)),
        ("eigh", eigh_inv),
        ("svd", svd_inv),
        ("svdvals", lambda a, b: (tl.svdvals(b),)),
        ("pinv", lambda a, b: (tl.pinv(b),)),
        ("lstsq", lambda a, b: (tl.lstsq(b, a[..., :3]).solution,)),
        ("matrix_exp", lambda a, b: (tl.matrix_exp(a * 0.5),)),
        ("norms", lambda a, b: (tl.matrix_norm(a), tl.matrix_norm(a, "nuc"), tl.matrix_norm(a, 2),
                                tl.vector_norm(b, 3, dim=-1), tl.matrix_norm(a, 1))),
    ]


def test_gradients_match_torch(device, rng):
    dtype = "f64" if "f64" in [d.name for d in getattr(device.backend, "dtypes", [ember.f64])] else "f32"
    np_dtype = np.float64 if dtype == "f64" else np.float32
    a = (rng.standard_normal((2, 4, 4)) + 2 * np.eye(4)).astype(np_dtype)
    b = rng.standard_normal((2, 4, 3)).astype(np_dtype)
    for (name, fe), (_, ft) in zip(_ops(L), _ops(torch.linalg)):
        ea = ember.tensor(a, device=device.autodiff()).require_grad()
        eb = ember.tensor(b, device=device.autodiff()).require_grad()
        ta, tb = torch.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(b.copy()).requires_grad_()
        e_out, t_out = fe(ea, eb), ft(ta, tb)
        weights = [rng.standard_normal(tuple(t.shape)).astype(np_dtype) for t in t_out]
        e_loss = sum((o * ember.tensor(w, device=device)).sum() for o, w in zip(e_out, weights))
        t_loss = sum((o * torch.from_numpy(w)).sum() for o, w in zip(t_out, weights))
        grads = e_loss.backward()
        tga, tgb = torch.autograd.grad(t_loss, (ta, tb), allow_unused=True)
        for e_leaf, tg, what in ((ea, tga, "a"), (eb, tgb, "b")):
            eg = e_leaf.grad(grads)
            if tg is None:
                assert eg is None or np.allclose(_np(eg), 0), f"{name}: grad {what}"
                continue
            _close(eg, tg, dtype, f"{name}: grad {what}", 100)


def test_gradients_match_finite_differences(rng):
    device = ember.Device.cpu()
    a = rng.standard_normal((4, 4)) + 2 * np.eye(4)
    b = rng.standard_normal((4, 3))
    for name, fe in _ops(L):
        def loss(x, y, weights):
            return sum(float((o * ember.tensor(w, device=device)).sum().item())
                       for o, w in zip(fe(ember.tensor(x, device=device), ember.tensor(y, device=device)), weights))
        outs = fe(ember.tensor(a, device=device), ember.tensor(b, device=device))
        weights = [rng.standard_normal(o.shape) for o in outs]
        ea = ember.tensor(a, device=device.autodiff()).require_grad()
        eb = ember.tensor(b, device=device.autodiff()).require_grad()
        grads = sum((o * ember.tensor(w, device=device)).sum() for o, w in zip(fe(ea, eb), weights)).backward()
        for leaf, x, which in ((ea, a, 0), (eb, b, 1)):
            g = leaf.grad(grads)
            g = np.zeros_like(x) if g is None else _np(g)
            for idx in [(0, 0), (1, 2), (3, 1)]:
                h = 1e-6
                xp, xm = x.copy(), x.copy()
                xp[idx] += h
                xm[idx] -= h
                args_p = (xp, b) if which == 0 else (a, xp)
                args_m = (xm, b) if which == 0 else (a, xm)
                fd = (loss(*args_p, weights) - loss(*args_m, weights)) / (2 * h)
                assert abs(fd - g[idx]) <= 1e-5 * max(1.0, abs(fd)), f"{name}: d/d{'ab'[which]}{idx} {g[idx]} vs {fd}"
