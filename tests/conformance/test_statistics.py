"""The ops of issue 29 section 3 against PyTorch: unique, unique_consecutive, bincount, histc,
searchsorted, bucketize, meshgrid, cartesian_prod, cdist, scatter_reduce, index_put, F.normalize,
randperm and multinomial; gradients where torch has them. Cases are grouped in few tests per device
to keep CI cheap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.dtype import dtype_of
from ember.nn import functional as F
from conformance.oracle import case, check, check_grad, leaf, sample, tensors, to_torch

SHAPES = [(), (0,), (7,), (3, 4), (2, 3, 5)]


def _few_values(shape, dtype, rng):
    """Values of `dtype` drawn from a handful, so that repeats occur."""
    if dtype == "bool":
        return sample(shape, dtype, rng)
    return rng.integers(-2, 3, size=shape).astype(dtype_of(dtype).np) if dtype != "u8" else \
        rng.integers(0, 4, size=shape).astype(np.uint8)


def _check_all(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        check(g, w)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i64", "u8", "bool"])
def test_unique(dtype, device, rng):
    for shape in SHAPES:
        e, t = tensors(_few_values(shape, dtype, rng), device)
        for inverse in (False, True):
            for counts in (False, True):
                with case(shape=shape, inverse=inverse, counts=counts):
                    _check_all(ember.unique(e, return_inverse=inverse, return_counts=counts),
                               torch.unique(t, return_inverse=inverse, return_counts=counts))
                    _check_all(e.unique_consecutive(return_inverse=inverse, return_counts=counts),
                               t.unique_consecutive(return_inverse=inverse, return_counts=counts))
                    for dim in range(len(shape)):
                        _check_all(ember.unique(e, return_inverse=inverse, return_counts=counts, dim=dim),
                                   torch.unique(t, return_inverse=inverse, return_counts=counts, dim=dim))
                        _check_all(ember.unique_consecutive(e, inverse, counts, dim=dim),
                                   torch.unique_consecutive(t, return_inverse=inverse, return_counts=counts,
                                                            dim=dim))
    e, t = tensors(_few_values((9,), dtype, rng), device)
    check(e.unique(sorted=False), t.unique(sorted=True))  # ember's unsorted order is the sorted one
    if dtype in ("f32", "bf16"):  # NaNs are distinct from each other
        x = _few_values((2, 5), dtype, rng)
        x[0, 1] = x[1, 3] = np.nan
        e, t = tensors(x, device)
        _check_all(ember.unique(e, return_counts=True), torch.unique(t, return_counts=True))


def test_bincount_histc(device, rng):
    for n, minlength in [(0, 0), (0, 4), (1, 0), (13, 0), (13, 20)]:
        x = rng.integers(0, 9, size=n)
        e, t = tensors(x, device)
        with case(n=n, minlength=minlength):
            check(ember.bincount(e, minlength=minlength), torch.bincount(t, minlength=minlength))
            for wdtype in ("f32", "f64", "i32", "bf16"):
                ew, tw = tensors(sample((n,), wdtype, rng), device)
                # torch returns i64 for an empty input with weights; ember keeps the weights' rule
                check(e.bincount(ew, minlength=minlength), t.bincount(tw, minlength=minlength), check_dtype=n > 0)
    with pytest.raises(ValueError, match="non-negative"):
        ember.bincount(ember.tensor([1, -1], device=device))
    for dtype in ("f32", "f64", "bf16"):
        for shape, bins, low, high in [((7,), 10, 0, 0), ((3, 4), 5, -1, 2), ((2, 3, 5), 1, 0, 0),
                                       ((0,), 4, 0, 0), ((), 3, -3, 3), ((11,), 7, 0.5, 0.5)]:
            with case(dtype=dtype, shape=shape, bins=bins, range=(low, high)):
                e, t = tensors(sample(shape, dtype, rng), device)
                check(ember.histc(e, bins=bins, min=low, max=high), torch.histc(t, bins=bins, min=low, max=high))
    e, t = tensors(np.array([0.0, 1.0, 1.0, 2.0, 3.0], np.float32), device)  # the upper edge, in the last bin
    check(e.histc(bins=3, min=0, max=3), t.histc(bins=3, min=0, max=3))
    with pytest.raises(ValueError, match="not finite"):
        ember.histc(ember.tensor([1.0, float("inf")], device=device))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i64", "i32"])
def test_searchsorted_bucketize(dtype, device, rng):
    seq = np.sort(_few_values((9,), dtype, rng))  # repeats: left and right differ
    es, ts = tensors(seq, device)
    for vshape in [(), (0,), (7,), (3, 4)]:
        ev, tv = tensors(sample(vshape, dtype, rng, -3, 4), device)
        for right in (False, True):
            with case(values=vshape, right=right):
                check(ember.searchsorted(es, ev, right=right), torch.searchsorted(ts, tv, right=right))
                check(ember.searchsorted(es, ev, side="right" if right else "left", out_int32=True),
                      torch.searchsorted(ts, tv, side="right" if right else "left", out_int32=True))
                check(ember.bucketize(ev, es, right=right), torch.bucketize(tv, ts, right=right))
    batched = np.sort(sample((2, 3, 5), dtype, rng), axis=-1)
    eb, tb = tensors(batched, device)
    ev, tv = tensors(sample((2, 3, 4), dtype, rng), device)
    check(ember.searchsorted(eb, ev), torch.searchsorted(tb, tv))
    shuffled = sample((2, 3, 5), dtype, rng)
    order = np.argsort(shuffled, axis=-1, kind="stable")
    (eu, tu), (eo, to) = tensors(shuffled, device), tensors(order, device)
    check(ember.searchsorted(eu, ev, sorter=eo, right=True), torch.searchsorted(tu, tv, sorter=to, right=True))
    check(ember.searchsorted(es, 1), torch.searchsorted(ts, torch.tensor(1, dtype=ts.dtype)))
    with pytest.raises(ember.ShapeError, match="searchsorted"):
        ember.searchsorted(eb, ember.tensor(sample((3, 4), dtype, rng), device=device))


def test_meshgrid_cartesian_prod(device, rng):
    for sizes in [(3,), (2, 4), (0, 3), (1, 5, 2), ((), 3)]:
        arrays = [sample(s if isinstance(s, tuple) else (s,), "i64", rng) for s in sizes]
        pairs = [tensors(a, device) for a in arrays]
        es, ts = [p[0] for p in pairs], [p[1] for p in pairs]
        for indexing in ("ij", "xy"):
            with case(sizes=sizes, indexing=indexing):
                _check_all(ember.meshgrid(*es, indexing=indexing), torch.meshgrid(*ts, indexing=indexing))
                _check_all(ember.meshgrid(es, indexing=indexing), torch.meshgrid(ts, indexing=indexing))
        if all(isinstance(s, int) for s in sizes):
            with case(sizes=sizes):
                check(ember.cartesian_prod(*es), torch.cartesian_prod(*ts))


P_VALUES = [0.0, 0.5, 1.0, 2.0, 3.0, float("inf")]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_cdist(dtype, device, rng):
    for s1, s2 in [((5, 3), (4, 3)), ((2, 1, 5, 3), (3, 4, 3)), ((0, 3), (4, 3)), ((3, 0), (2, 0)), ((1, 7), (1, 7))]:
        (e1, t1), (e2, t2) = tensors(sample(s1, dtype, rng), device), tensors(sample(s2, dtype, rng), device)
        for p in P_VALUES:
            with case(shapes=(s1, s2), p=p):
                check(ember.cdist(e1, e2, p), torch.cdist(t1, t2, p))
    # p=2 through the matrix product: P above 25 by default, or asked for; and never, when refused
    (e1, t1), (e2, t2) = tensors(sample((2, 27, 4), dtype, rng), device), tensors(sample((5, 4), dtype, rng), device)
    for mode in ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"):
        with case(mode=mode):
            check(ember.cdist(e1, e2, compute_mode=mode), torch.cdist(t1, t2, compute_mode=mode))
            if mode != "use_mm_for_euclid_dist":  # near 0 the product route is rounding noise
                check(ember.cdist(e2, e2, compute_mode=mode), torch.cdist(t2, t2, compute_mode=mode))


def test_cdist_grad(device, rng):
    x1, x2 = sample((4, 3), "f64", rng), sample((2, 5, 3), "f64", rng)
    x2[0, 1] = x1[2]  # a coinciding pair: PyTorch's gradient is 0 there
    for p in [0.5, 1.0, 2.0, 3.0, float("inf")]:
        with case(p=p):
            (e1, t1), (e2, t2) = leaf(x1, device), leaf(x2, device)
            ed, td = ember.cdist(e1, e2, p), torch.cdist(t1, t2, p)
            seed = sample(tuple(td.shape), "f64", rng)
            grads = (ed * ember.tensor(seed, device=device)).sum().backward()
            (td * to_torch(seed)).sum().backward()
            check_grad(e1.grad(grads), t1.grad)
            check_grad(e2.grad(grads), t2.grad)
    (e1, t1), (e2, t2) = leaf(x1, device), leaf(x2, device)  # the matrix-product route's gradient
    mode = "use_mm_for_euclid_dist"
    ed, td = ember.cdist(e1, e2, compute_mode=mode), torch.cdist(t1, t2, compute_mode=mode)
    check(ed, td)
    grads = ed.sum().backward()
    td.sum().backward()
    check_grad(e1.grad(grads), t1.grad)
    check_grad(e2.grad(grads), t2.grad)


REDUCES = ["sum", "prod", "mean", "amax", "amin"]


def _scatter_cases(rng):
    """(input shape, dim, index, src shape): repeats, an index smaller than src, a 0-size index
    (the first three have index and src of one shape: torch's gradient needs that)."""
    return [((6,), 0, rng.integers(0, 6, (9,)), (9,)),
            ((3, 4, 2), 1, rng.integers(0, 4, (3, 5, 2)), (3, 5, 2)),
            ((4, 5), 0, rng.integers(0, 4, (6, 5)), (6, 5)),
            ((4, 5), 1, rng.integers(0, 5, (3, 7)), (4, 8)),
            ((3, 4, 2), -1, rng.integers(0, 2, (3, 2, 3)), (3, 4, 3)),
            ((3,), 0, np.zeros((0,), np.int64), (2,))]


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16", "i64", "i32"])
def test_scatter_reduce(dtype, device, rng):
    for shape, dim, index, sshape in _scatter_cases(rng):
        x, src = sample(shape, dtype, rng, -4, 5), sample(sshape, dtype, rng, -4, 5)
        (ex, tx), (ei, ti), (es, ts) = tensors(x, device), tensors(index, device), tensors(src, device)
        for reduce in REDUCES:
            for include_self in (True, False):
                with case(shape=shape, dim=dim, reduce=reduce, include_self=include_self):
                    check(ex.scatter_reduce(dim, ei, es, reduce, include_self=include_self),
                          tx.scatter_reduce(dim, ti, ts, reduce, include_self=include_self))
    e, t = tensors(np.array(2.0), device)  # 0-d
    check(ember.scatter_reduce(e, 0, ember.tensor(0, device=device), e * 3, "prod"),
          torch.scatter_reduce(t, 0, torch.tensor(0), t * 3, "prod"))
    with pytest.raises(ValueError, match="reduce must be one of"):
        e.scatter_reduce(0, ember.tensor(0, device=device), e, "max")


def test_scatter_reduce_grad(device, rng):
    for shape, dim, index, sshape in _scatter_cases(rng)[:3]:
        x, src = sample(shape, "f64", rng), sample(sshape, "f64", rng)
        x.reshape(-1)[0] = 0.0  # zeros exercise prod's special cases; one zero-free row remains
        src.reshape(-1)[[0, 1, -1]] = 0.0
        # ties for amax/amin: a source equal to the value it lands on
        src.reshape(-1)[2] = x.reshape(-1)[0]
        for reduce in REDUCES:
            for include_self in (True, False):
                with case(shape=shape, dim=dim, reduce=reduce, include_self=include_self):
                    (ex, tx), (es, ts) = leaf(x, device), leaf(src, device)
                    ei, ti = tensors(index, device)
                    ey = ex.scatter_reduce(dim, ei, es, reduce, include_self=include_self)
                    ty = tx.scatter_reduce(dim, ti, ts, reduce, include_self=include_self)
                    check(ey, ty)
                    seed = sample(shape, "f64", rng)
                    grads = (ey * ember.tensor(seed, device=device)).sum().backward()
                    (ty * to_torch(seed)).sum().backward()
                    check_grad(ex.grad(grads), tx.grad)
                    check_grad(es.grad(grads), ts.grad)


@pytest.mark.parametrize("dtype", ["f32", "i64", "bf16"])
def test_index_put(dtype, device, rng):
    x = sample((4, 5, 3), dtype, rng)
    cases = [([[0, 0, 3]], (3, 5, 3)), ([[1, 1], [4, 4]], (3,)), ([[0, 2, 2], [1, 1, 1], [2, 0, 2]], ()),
             ([[[0], [3]], [1, 2]], (2, 2, 3)), ([[]], (0, 5, 3))]
    for lists, vshape in cases:
        for accumulate in (False, True):
            with case(indices=lists, accumulate=accumulate):
                index = [np.asarray(i, np.int64) for i in lists]
                if not accumulate:  # torch leaves repeated positions unspecified: make them distinct
                    flat = np.ravel_multi_index(np.broadcast_arrays(*index), x.shape[:len(index)])
                    if len(np.unique(flat)) != flat.size:
                        continue
                e, t = tensors(x, device)
                ev, tv = tensors(sample(vshape, dtype, rng), device)
                eidx = tuple(ember.tensor(i, device=device) for i in index)
                tidx = tuple(torch.from_numpy(i) for i in index)
                check(e.index_put(eidx, ev, accumulate), t.index_put(tidx, tv, accumulate))
                check(ember.index_put(e, eidx, ev, accumulate=accumulate),
                      torch.index_put(t, tidx, tv, accumulate=accumulate))
                e.index_put_(eidx, ev, accumulate)
                t.index_put_(tidx, tv, accumulate)
                check(e, t)
    e, t = tensors(x, device)
    mask = sample((4, 5), "bool", rng)
    ev, tv = tensors(sample((int(mask.sum()), 3), dtype, rng), device)
    for accumulate in (False, True):
        with case(mask=True, accumulate=accumulate):
            check(e.index_put((ember.tensor(mask, device=device),), ev, accumulate),
                  t.index_put((torch.from_numpy(mask),), tv, accumulate))


def test_index_put_grad(device, rng):
    index = (np.array([0, 0, 3]), np.array([1, 1, 4]))
    (ex, tx), (ev, tv) = leaf(sample((4, 5), "f64", rng), device), leaf(sample((3,), "f64", rng), device)
    ey = (ex * 2).index_put(tuple(ember.tensor(i, device=device) for i in index), ev * 3, accumulate=True)
    ty = (tx * 2).index_put(tuple(torch.from_numpy(i) for i in index), tv * 3, accumulate=True)
    check(ey, ty)
    seed = sample((4, 5), "f64", rng)
    grads = (ey * ember.tensor(seed, device=device)).sum().backward()
    (ty * to_torch(seed)).sum().backward()
    check_grad(ex.grad(grads), tx.grad)
    check_grad(ev.grad(grads), tv.grad)


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
def test_normalize(dtype, device, rng):
    x = sample((3, 4, 5), dtype, rng)
    x[1, :, 2] = 0  # a zero vector along dim 1: divided by eps
    for p, dim in [(2.0, 1), (1.0, -1), (3.0, 0), (float("inf"), 2)]:
        with case(p=p, dim=dim):
            e, t = tensors(x, device)
            check(F.normalize(e, p=p, dim=dim), torch.nn.functional.normalize(t, p=p, dim=dim))
            if dtype == "f64":
                (e, t) = leaf(x, device)
                ey, ty = F.normalize(e, p, dim), torch.nn.functional.normalize(t, p, dim)
                seed = sample(x.shape, dtype, rng)
                grads = (ey * ember.tensor(seed, device=device)).sum().backward()
                (ty * to_torch(seed)).sum().backward()
                check_grad(e.grad(grads), t.grad)
    e, t = tensors(sample((0, 3), dtype, rng), device)
    check(F.normalize(e), torch.nn.functional.normalize(t))


def test_randperm_multinomial(device, rng):
    """Valid draws, the same for a seed on every device (the NumPy device's numbers), and the
    frequencies of multinomial near its probabilities."""
    reference = ember.Device.numpy()

    def draw(on):
        ember.seed(7)
        return [ember.randperm(n, device=on).numpy() for n in (0, 1, 13)], \
            ember.randperm(5, dtype="i32", device=on).numpy()
    perms, perm32 = draw(device)
    want, want32 = draw(reference)
    for n, got, ref in zip((0, 1, 13), perms, want):
        assert got.dtype == np.int64 and sorted(got.tolist()) == list(range(n))
        np.testing.assert_array_equal(got, ref)
    assert perm32.dtype == np.int32
    np.testing.assert_array_equal(perm32, want32)
    probs = np.array([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 1.0, 5.0]], np.float32)  # unnormalized rows

    def sample_all(on):
        ember.seed(3)
        p = ember.tensor(probs, device=on)
        return (ember.multinomial(p, 4000, replacement=True).numpy(), p.multinomial(3).numpy(),
                ember.multinomial(p[1], 4).numpy())
    got, ref = sample_all(device), sample_all(reference)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)
    with_rep, without, full_row = got
    assert with_rep.shape == (2, 4000) and with_rep.dtype == np.int64
    for row, p in zip(with_rep, probs):
        freq = np.bincount(row, minlength=4) / row.size
        np.testing.assert_allclose(freq, p / p.sum(), atol=0.03)
    assert (with_rep[0] != 1).all() and (without[0] != 1).all()  # zero probability: never drawn
    assert all(len(set(r)) == 3 for r in without.tolist())
    assert sorted(full_row.tolist()) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="without replacement"):
        ember.multinomial(ember.tensor(probs, device=device), 4)  # row 0 has 3 non-zero categories
    with pytest.raises(ValueError, match="non-negative"):
        ember.multinomial(ember.tensor([0.5, -0.1], device=device), 1)
