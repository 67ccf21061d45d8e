"""Reductions, scans, sorting and selection (ember/api/reduce.py) against PyTorch: values, indices and
dtypes over dims, keepdim, empty and 0-d inputs, non-contiguous views; gradients against autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from conformance.oracle import (ALL, FLOATS, INTS, LAYOUTS, case, check, check_grad, leaf, make, sample,
                                tensors, to_torch)

# (shape, dim) cases: all dims, one dim (negative too), several dims, 0-d, empty.
DIM_CASES = [((3, 4), None), ((3, 4), 0), ((2, 3, 5), -1), ((2, 3, 5), (0, 2)), ((), None), ((), 0),
             ((7,), 0), ((2, 0, 3), 1), ((2, 0, 3), None)]


def _distinct(shape, dtype, rng):
    """Values without ties (a permutation), so indices of extremes and sorts are unambiguous."""
    n = int(np.prod(shape))
    values = rng.permutation(n) - n // 2
    if dtype == "u8":
        values = values + n // 2
    if dtype in ("f16", "bf16", "f32", "f64"):
        values = values / 4
    return np.asarray(values).reshape(shape).astype(ember.dtype.dtype_of(dtype).np) if dtype != "bool" \
        else (np.asarray(values).reshape(shape) > 0)


def _torch_dim(dim):
    return dim


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", ["sum", "prod"])
def test_sum_prod(name, dtype, device, rng):
    for shape, dim in DIM_CASES:
        for keepdim in (False, True):
            with case(shape=shape, dim=dim, keepdim=keepdim):
                e, t = tensors(sample(shape, dtype, rng, 0 if dtype == "u8" else -2, 3), device)
                got = getattr(e, name)(dim=dim, keepdim=keepdim)
                if dim is None:
                    want = getattr(t, name)()
                    if keepdim:
                        want = want.reshape((1,) * t.ndim)
                elif name == "prod" and not isinstance(dim, int):
                    want = t
                    for d in sorted((x % t.ndim for x in dim), reverse=True):
                        want = want.prod(dim=d, keepdim=keepdim)
                else:
                    want = getattr(t, name)(dim=dim, keepdim=keepdim)
                check(got, want, tol=(5e-2, 5e-2) if dtype in ("f16", "bf16") else None)
    for layout in LAYOUTS:
        with case(layout=layout):
            e, t = make((3, 4), dtype, rng, device, layout, 0 if dtype == "u8" else -2, 3)
            check(getattr(e, name)(dim=1), getattr(t, name)(dim=1), tol=(5e-2, 5e-2) if dtype in ("f16", "bf16") else None)


def test_sum_dtype_argument(device, rng):
    e, t = tensors(sample((3, 4), "i32", rng), device)
    check(e.sum(dtype="f64"), t.sum(dtype=torch.float64))
    check(e.sum(dim=0, dtype="i16"), t.sum(dim=0, dtype=torch.int16))


@pytest.mark.parametrize("dtype", FLOATS)
def test_mean(dtype, device, rng):
    for shape, dim in DIM_CASES:
        for keepdim in (False, True):
            with case(shape=shape, dim=dim, keepdim=keepdim):
                e, t = tensors(sample(shape, dtype, rng), device)
                want = t.mean(dim=dim, keepdim=keepdim) if dim is not None else t.mean()
                if dim is None and keepdim:
                    want = want.reshape((1,) * t.ndim)
                check(e.mean(dim=dim, keepdim=keepdim), want)


@pytest.mark.parametrize("dtype", INTS + ("bool",))
def test_mean_of_ints_is_float(dtype, device, rng):
    # PyTorch refuses mean() of integer tensors; ember gives the default float (documented).
    e, t = tensors(sample((3, 4), dtype, rng), device)
    check(e.mean(dim=1), t.float().mean(dim=1))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", ["amax", "amin"])
def test_amax_amin(name, dtype, device, rng):
    for shape, dim in DIM_CASES:
        for keepdim in (False, True):
            with case(shape=shape, dim=dim, keepdim=keepdim):
                e, t = tensors(sample(shape, dtype, rng), device)
                tdim = dim if dim is not None else tuple(range(t.ndim))
                if 0 in shape:
                    with pytest.raises(ember.ShapeError, match=name):
                        getattr(e, name)(dim=dim, keepdim=keepdim)
                    continue
                check(getattr(e, name)(dim=dim, keepdim=keepdim), getattr(t, name)(dim=tdim, keepdim=keepdim))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min(name, dtype, device, rng):
    for layout in LAYOUTS:
        for dim in (0, 1, -1):
            for keepdim in (False, True):
                with case(layout=layout, dim=dim, keepdim=keepdim):
                    e, t = make((3, 4), dtype, rng, device, layout)  # ties: ints repeat; torch picks the first
                    got, want = getattr(e, name)(dim=dim, keepdim=keepdim), getattr(t, name)(dim=dim, keepdim=keepdim)
                    check(got.values, want.values)
                    check(got.indices, want.indices)
    e, t = make((2, 3, 5), dtype, rng, device, "flipped")
    check(getattr(e, name)(), getattr(t, name)())
    e, t = tensors(sample((), dtype, rng), device)
    check(getattr(e, name)(dim=0).values, getattr(t, name)(dim=0).values)
    check(getattr(e, name)(dim=0).indices, getattr(t, name)(dim=0).indices)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name, dtype, device, rng):
    for shape, dim in [((3, 4), None), ((3, 4), 0), ((2, 3, 5), -1), ((), None), ((), 0), ((7,), 0)]:
        for keepdim in (False, True):
            with case(shape=shape, dim=dim, keepdim=keepdim):
                e, t = tensors(sample(shape, dtype, rng, 0, 4), device)  # plenty of ties
                if dtype == "bool":  # torch refuses argmax of bools; ember answers as for 0/1 values
                    t = t.to(torch.uint8)
                check(getattr(e, name)(dim=dim, keepdim=keepdim), getattr(torch, name)(t, dim=dim, keepdim=keepdim))
    e, t = make((3, 4), dtype, rng, device, "transposed")
    t = t.to(torch.uint8) if dtype == "bool" else t
    check(getattr(e, name)(dim=1), getattr(t, name)(dim=1))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std(name, dtype, device, rng):
    tol = (3e-2, 3e-2) if dtype in ("f16", "bf16") else None
    for shape, dim in [((3, 4), None), ((3, 4), 0), ((2, 3, 5), -1), ((2, 3, 5), (0, 2)), ((7,), 0)]:
        for correction in (0, 1, 2):
            for keepdim in (False, True):
                with case(shape=shape, dim=dim, correction=correction, keepdim=keepdim):
                    e, t = tensors(sample(shape, dtype, rng), device)
                    check(getattr(e, name)(dim=dim, correction=correction, keepdim=keepdim),
                          getattr(torch, name)(t, dim=dim, correction=correction, keepdim=keepdim), tol=tol)
    e, t = make((3, 4), dtype, rng, device, "strided")
    check(getattr(e, name)(dim=1), getattr(t, name)(dim=1), tol=tol)
    e, t = tensors(sample((1, 3), dtype, rng), device)  # too few elements for the correction: NaN / inf
    check(getattr(e, name)(dim=0), getattr(t, name)(dim=0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_logsumexp(dtype, device, rng):
    tol = (2e-2, 2e-2) if dtype in ("f16", "bf16") else None
    for shape, dim in [((3, 4), 1), ((2, 3, 5), (0, 2)), ((7,), 0), ((3, 4), (0, 1))]:
        for keepdim in (False, True):
            with case(shape=shape, dim=dim, keepdim=keepdim):
                e, t = tensors(sample(shape, dtype, rng, -50, 50), device)
                check(e.logsumexp(dim=dim, keepdim=keepdim), torch.logsumexp(t, dim=dim, keepdim=keepdim), tol=tol)
    x = np.array([[-np.inf, -np.inf], [1000.0, 1000.0], [-np.inf, 0.0]], np.float32)
    e, t = tensors(x, device)
    check(e.logsumexp(dim=1), torch.logsumexp(t, dim=1))


@pytest.mark.parametrize("dtype", FLOATS)
def test_norm(dtype, device, rng):
    tol = (2e-2, 2e-2) if dtype in ("f16", "bf16") else None
    for p in (2, 1, 3, 0.5, 0, float("inf"), float("-inf")):
        for dim in (None, 1, (0, 1)):
            with case(p=p, dim=dim):
                e, t = make((3, 4), dtype, rng, device, "flipped")
                check(e.norm(p=p, dim=dim), torch.linalg.vector_norm(t, ord=p, dim=dim), tol=tol)
                check(e.norm(p=p, dim=dim, keepdim=True), torch.linalg.vector_norm(t, ord=p, dim=dim, keepdim=True), tol=tol)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", ["all", "any"])
def test_all_any(name, dtype, device, rng):
    for shape, dim in DIM_CASES:
        with case(shape=shape, dim=dim):
            e, t = tensors(sample(shape, dtype, rng, 0, 2), device)
            want = getattr(t, name)() if dim is None else getattr(torch, name)(t, dim=dim)
            # PyTorch keeps u8 for all/any of u8 tensors (a legacy rule); ember always gives bool.
            check(getattr(e, name)(dim=dim), want.bool())
            if dtype != "u8":
                assert want.dtype == torch.bool


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_cumsum_cumprod(name, dtype, device, rng):
    tol = (3e-2, 3e-2) if dtype in ("f16", "bf16") else None
    for shape, dim in [((3, 4), 0), ((3, 4), -1), ((2, 3, 5), 1), ((), 0), ((0,), 0), ((2, 0, 3), 2)]:
        with case(shape=shape, dim=dim):
            e, t = tensors(sample(shape, dtype, rng, 0 if dtype == "u8" else -2, 3), device)
            check(getattr(e, name)(dim), getattr(torch, name)(t, dim), tol=tol)
    e, t = make((3, 4), dtype, rng, device, "transposed", 0 if dtype == "u8" else -2, 3)
    check(getattr(e, name)(1), getattr(torch, name)(t, 1), tol=tol)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin(name, dtype, device, rng):
    for shape, dim in [((3, 4), 0), ((3, 6), -1), ((2, 3, 5), 1), ((), 0), ((0,), 0)]:
        for layout in ("contiguous", "flipped"):
            with case(shape=shape, dim=dim, layout=layout):
                e, t = make(shape, dtype, rng, device, layout, 0, 4)  # ties: the last index of the extreme
                got, want = getattr(e, name)(dim), getattr(torch, name)(t, dim)
                check(got.values, want.values)
                check(got.indices, want.indices)


@pytest.mark.parametrize("dtype", ALL)
def test_sort_argsort(dtype, device, rng):
    for shape, dim in [((3, 4), -1), ((3, 4), 0), ((2, 3, 5), 1), ((7,), 0), ((0,), 0), ((), 0)]:
        for descending in (False, True):
            for layout in ("contiguous", "transposed"):
                with case(shape=shape, dim=dim, descending=descending, layout=layout):
                    e, t = make(shape, dtype, rng, device, layout, 0, 4)  # ties: stable order on both sides
                    got = e.sort(dim=dim, descending=descending)
                    want = torch.sort(t, dim=dim, descending=descending, stable=True)
                    check(got.values, want.values)
                    check(got.indices, want.indices)
                    check(e.argsort(dim=dim, descending=descending), torch.argsort(t, dim=dim, descending=descending, stable=True))


@pytest.mark.parametrize("dtype", [d for d in ALL if d != "bool"])  # torch has no topk of bools
def test_topk(dtype, device, rng):
    for shape, dim, k in [((3, 6), -1, 2), ((3, 6), 0, 3), ((2, 3, 5), 1, 1), ((7,), 0, 7), ((7,), 0, 0)]:
        for largest in (True, False):
            with case(shape=shape, dim=dim, k=k, largest=largest):
                e, t = tensors(_distinct(shape, dtype, rng), device)
                got, want = e.topk(k, dim=dim, largest=largest), torch.topk(t, k, dim=dim, largest=largest)
                check(got.values, want.values)
                check(got.indices, want.indices)


@pytest.mark.parametrize("dtype", [d for d in ALL if d != "bool"])
def test_median(dtype, device, rng):
    for shape in [(7,), (3, 4), (2, 3, 5)]:
        with case(shape=shape):
            e, t = tensors(_distinct(shape, dtype, rng), device)
            check(e.median(), t.median())
            for dim in range(len(shape)):
                for keepdim in (False, True):
                    got, want = e.median(dim=dim, keepdim=keepdim), t.median(dim=dim, keepdim=keepdim)
                    check(got.values, want.values)
                    check(got.indices, want.indices)


# ---- gradients ---------------------------------------------------------------------------------------

GRAD_REDUCTIONS = {
    "sum": (lambda x: x.sum(dim=(0, 2)), lambda x: x.sum(dim=(0, 2))),
    "sum_all_keepdim": (lambda x: x.sum(dim=None, keepdim=True) * x.sum(dim=1, keepdim=True),
                        lambda x: x.sum(dim=(0, 1, 2), keepdim=True) * x.sum(dim=1, keepdim=True)),
    "mean": (lambda x: x.mean(dim=1), lambda x: x.mean(dim=1)),
    "prod": (lambda x: x.prod(dim=-1), lambda x: x.prod(dim=-1)),
    "amax": (lambda x: x.amax(dim=(1, 2)), lambda x: x.amax(dim=(1, 2))),
    "amin": (lambda x: x.amin(dim=0, keepdim=True), lambda x: x.amin(dim=0, keepdim=True)),
    "max_dim": (lambda x: x.max(dim=1).values, lambda x: x.max(dim=1).values),
    "min_all": (lambda x: x.min(), lambda x: x.min()),
    "var": (lambda x: x.var(dim=2, correction=0), lambda x: x.var(dim=2, correction=0)),
    "std": (lambda x: x.std(dim=(0, 1)), lambda x: x.std(dim=(0, 1))),
    "logsumexp": (lambda x: x.logsumexp(dim=-1), lambda x: x.logsumexp(dim=-1)),
    "norm2": (lambda x: x.norm(dim=1), lambda x: torch.linalg.vector_norm(x, dim=1)),
    "norm1": (lambda x: x.norm(p=1, dim=0), lambda x: torch.linalg.vector_norm(x, ord=1, dim=0)),
    "norm3": (lambda x: x.norm(p=3), lambda x: torch.linalg.vector_norm(x, ord=3)),
    "norm_inf": (lambda x: x.norm(p=float("inf"), dim=2), lambda x: torch.linalg.vector_norm(x, ord=float("inf"), dim=2)),
    "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
    "cumprod": (lambda x: x.cumprod(2), lambda x: x.cumprod(2)),
    "cummax": (lambda x: x.cummax(2).values, lambda x: x.cummax(2).values),
    "cummin": (lambda x: x.cummin(0).values, lambda x: x.cummin(0).values),
    "sort": (lambda x: x.sort(dim=1, descending=True).values * ember.arange(3, device=x.device.inner).reshape(3, 1).cast(x.dtype),
             lambda x: x.sort(dim=1, descending=True).values * torch.arange(3).reshape(3, 1).to(x.dtype)),
    "topk": (lambda x: x.topk(2, dim=-1).values, lambda x: x.topk(2, dim=-1).values),
    "median": (lambda x: x.median(dim=1).values, lambda x: x.median(dim=1).values),
    "median_all": (lambda x: x.median(), lambda x: x.median()),
}


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("name", GRAD_REDUCTIONS)
def test_reduction_grad(name, dtype, device, rng):
    fn, tfn = GRAD_REDUCTIONS[name]
    x = _distinct((2, 3, 4), dtype, rng) + np.asarray(0.5, dtype=ember.dtype.dtype_of(dtype).np)
    for layout in ("contiguous", "flipped"):
        with case(layout=layout):
            e, t = leaf(x, device)
            ev, tv = (fn(e), tfn(t)) if layout == "contiguous" else (fn(e[:, ::-1]), tfn(t.flip(1)))
            seed = sample(tuple(tv.shape), dtype, rng)
            grads = ev.backward(ember.tensor(seed, device=device))
            tv.backward(to_torch(seed))
            check_grad(e.grad(grads), t.grad)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_grad_with_ties_and_zeros(dtype, device):
    """amax/amin and the overall median share the gradient between ties; prod is exact with one or several
    zeros; std and the 2-norm have gradient 0 where they are 0 (PyTorch's conventions)."""
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, 5.0, 0.0, 1.0]], ember.dtype.dtype_of(dtype).np)
    for name, fn in [("amax", lambda v: v.amax(dim=1)), ("amin", lambda v: v.amin(dim=1)),
                     ("max_all", lambda v: v.amax()), ("prod", lambda v: v.prod(dim=1)),
                     ("prod_all", lambda v: v.prod()), ("median_all", lambda v: v.median()),
                     ("median_dim", lambda v: v.median(dim=1).values), ("std_of_constant", lambda v: v.std(dim=1)),
                     ("norm_of_zeros", lambda v: (v * (v > 10)).norm(dim=1))]:
        with case(op=name):
            e, t = leaf(x, device)
            grads = fn(e).sum().backward()
            fn(t).sum().backward()
            check_grad(e.grad(grads), t.grad)


@pytest.mark.parametrize("dtype", ["f64", "f32", "f16", "bf16"])
def test_nan_handling(dtype, device):
    """NaN propagates as in PyTorch: it is the largest value for sorts, sticks in running extremes,
    and makes extremes and medians NaN."""
    nan, inf = float("nan"), float("inf")
    x = np.array([[1.0, nan, 3.0, nan, 5.0, -1.0], [2.0, 0.5, -1.0, inf, nan, inf], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]])
    e, t = tensors(x.astype(ember.dtype.dtype_of(dtype).np), device)
    for descending in (False, True):
        with case(op="sort", descending=descending):
            got, want = e.sort(dim=1, descending=descending), torch.sort(t, dim=1, descending=descending, stable=True)
            check(got.values, want.values)
            check(got.indices, want.indices)
    for name in ("cummax", "cummin"):
        with case(op=name):
            got, want = getattr(e, name)(1), getattr(t, name)(1)
            check(got.values, want.values)
            check(got.indices, want.indices)
    with case(op="topk"):
        got, want = e.topk(3, dim=1), t.topk(3, dim=1)
        check(got.values, want.values)
        check(got.indices, want.indices)
    with case(op="median"):
        got, want = e.median(dim=1), t.median(dim=1)
        check(got.values, want.values)
        check(got.indices, want.indices)
        check(e.median(), t.median())
        check(e[2].median(), t[2].median())
    for name in ("amax", "amin"):
        with case(op=name):
            check(getattr(e, name)(dim=1), getattr(t, name)(dim=1))
    with case(op="max"):
        check(e.max(dim=1).values, t.max(dim=1).values)
        check(e.max(), t.max())


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_reductions_accumulate_in_f32(dtype, device):
    """Sums of squares and totals overflow f16 long before the statistic does: PyTorch accumulates in f32."""
    td = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    for name, fn in [("mean", lambda v: v.mean()), ("var", lambda v: v.var()), ("std", lambda v: v.std(dim=0)),
                     ("norm", lambda v: v.norm() if isinstance(v, ember.Tensor) else torch.linalg.vector_norm(v)),
                     ("sum", lambda v: v.sum()), ("logsumexp", lambda v: v.logsumexp(0))]:
        with case(op=name):
            e = ember.arange(0, 5000, 1, dtype=dtype, device=device) / 100 + 30
            t = torch.arange(0, 5000, 1, dtype=td) / 100 + 30
            check(fn(e), fn(t), tol=(2e-2, 1e-2))
            if name != "sum":  # the f16 sum itself (275000) is out of range: inf on both sides
                assert np.isfinite(np.asarray(fn(e).numpy(), np.float64)).all()
