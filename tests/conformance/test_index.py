"""Indexing (ember/api/index.py) against PyTorch and NumPy: subscripts of every kind, assignment,
gather/scatter family, masks, `one_hot`, `nonzero`; gradients through them; hypothesis properties of
basic slicing, advanced indexing and broadcasting against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import ember
from conformance.oracle import ALL, case, check, check_grad, leaf, make, sample, tensors, to_torch

X = (4, 5, 6)


# Subscripts without negative steps, identical for ember (tensors given as lists) and torch.
SUBSCRIPTS = [
    1, -1, (0, 2), (-4, -1, 3), slice(1, 3), slice(None, None, 2), (slice(-3, None), 1),
    (Ellipsis, 2), (1, Ellipsis), (None, 1), (slice(None), None, 2), (Ellipsis, None),
    (slice(10, 20),), (slice(-10, 2),), (slice(3, 1),),
    ([0, 2, 3],), ([[0, 1], [3, 2]],), (slice(None), [4, 0, 0]), (1, [0, 1], [2, 3]),
    ([0, 1], slice(None), [2, 3]), (slice(1, 3), [0, 1], [2, 3]), ([[0], [1]], [1, 2, 3]),
    (Ellipsis, [-1, 0]), ([0, -1], None, [1, 1]),
]


def _as_torch(index):
    items = index if isinstance(index, tuple) else (index,)
    return tuple(torch.tensor(i) if isinstance(i, list) else i for i in items)


def _as_ember(index, device):
    items = index if isinstance(index, tuple) else (index,)
    return tuple(ember.tensor(i, device=device) if isinstance(i, list) else i for i in items)


@pytest.mark.parametrize("dtype", ALL)
def test_getitem(dtype, device, rng):
    x = sample(X, dtype, rng)
    e, t = tensors(x, device)
    for index in SUBSCRIPTS:
        with case(index=index):
            check(e[_as_ember(index, device)], t[_as_torch(index)])
            check(e[index], t[_as_torch(index)])  # lists work as index tensors too


def test_getitem_negative_steps(device, rng):
    e, t = tensors(sample(X, "f32", rng), device)
    check(e[::-1], t.flip(0))
    check(e[:, ::-2], t.flip(1)[:, ::2])
    check(e[3:0:-1, 1, ::-3], t[1:4].flip(0)[:, 1].flip(-1)[:, ::3])
    check(e[-1::-2, [0, 2]], t.flip(0)[::2][:, [0, 2]])
    check(e[..., 4:1:-1], t[..., 2:5].flip(-1))
    check(e[0:3:-1], t[0:0])


def test_getitem_views_and_0d(device, rng):
    for layout in ("transposed", "strided", "flipped"):
        with case(layout=layout):
            e, t = make((4, 6), "f64", rng, device, layout)
            check(e[1:, [0, 2]], t[1:, [0, 2]])
            check(e[..., -1], t[..., -1])
    e, t = tensors(np.array(3.5), device)
    check(e[None], t[None])
    check(e[...], t[...])
    e, t = tensors(sample((3,), "i64", rng), device)
    check(e[ember.tensor(2, device=device)], t[torch.tensor(2)])  # a 0-d index tensor


@pytest.mark.parametrize("dtype", ["f32", "i64", "bool"])
def test_bool_mask_index(dtype, device, rng):
    x = sample(X, dtype, rng)
    e, t = tensors(x, device)
    for shape, prefix in [((4,), ()), ((4, 5), ()), (X, ()), ((5,), (slice(None),)), ((5, 6), (1,)), ((), ())]:
        with case(mask=shape, prefix=prefix):
            m = sample(shape, "bool", rng)
            em, tm = tensors(m, device)
            check(e[prefix + (em,)], t[prefix + (tm,)])
    m = np.zeros(6, bool)
    m[[1, 4]] = True  # two hits: broadcasts with the list [0, 2] below
    check(e[..., ember.tensor(m, device=device)], t[..., torch.tensor(m)])
    check(e[[0, 2], :, ember.tensor(m, device=device)], t[[0, 2], :, torch.tensor(m)])
    check(e.masked_select(ember.tensor(m, device=device)), t.masked_select(torch.tensor(m)))
    m2 = sample((5, 1), "bool", rng)
    check(e.masked_select(ember.tensor(m2, device=device)), t.masked_select(torch.tensor(m2)))


@pytest.mark.parametrize("dtype", ALL)
def test_setitem(dtype, device, rng):
    x = sample(X, dtype, rng)
    value_cases = [(1, ()), ((slice(1, 3), 2), (6,)), ((Ellipsis, slice(None, None, 2)), (3,)),
                   ((slice(None), [0, 4]), (1, 6)), (([1, 2], [0, 0], [5, 4]), ()), (([3, 1],), (5, 6)),
                   ((None, 2, slice(1, 4)), (3, 1)), ((slice(None), -1), (4, 6))]
    for index, vshape in value_cases:
        with case(index=index, value=vshape):
            e, t = tensors(x, device)
            v = sample(vshape, dtype, rng)
            e[_as_ember(index, device)] = ember.tensor(v, device=device)
            t[_as_torch(index)] = to_torch(v)
            check(e, t)
            scalar = True if dtype == "bool" else 7
            e[_as_ember(index, device)] = scalar
            t[_as_torch(index)] = scalar
            check(e, t)
    e, t = tensors(x, device)
    m = sample(X, "bool", rng)
    e[ember.tensor(m, device=device)] = 0
    t[torch.tensor(m)] = 0
    check(e, t)


def test_setitem_negative_step_and_slice_assign(device, rng):
    x, v = sample((4, 6), "f64", rng), sample((4, 3), "f64", rng)
    e, t = tensors(x, device)
    e[:, ::-2] = ember.tensor(v, device=device)
    t[:, [5, 3, 1]] = to_torch(v)  # torch has no negative steps: the same positions, listed
    check(e, t)
    e0, t0 = tensors(x, device)
    out = e0.slice_assign(ember.s[1:3, ::-1], 2.5)
    t0[1:3] = 2.5
    check(out, t0)
    check(e0, to_torch(x))  # slice_assign leaves its input alone
    idx = ember.s[..., 1]
    assert idx == (Ellipsis, 1)


@pytest.mark.parametrize("dtype", ALL)
def test_gather_scatter(dtype, device, rng):
    x = sample((4, 5), dtype, rng)
    e, t = tensors(x, device)
    for dim, ishape in [(0, (3, 5)), (1, (4, 2)), (1, (2, 7)), (-1, (4, 5))]:
        with case(dim=dim, index=ishape):
            size = x.shape[dim]
            index = rng.integers(0, size, ishape)
            ei, ti = tensors(index, device)
            check(e.gather(dim, ei), t.gather(dim, ti))
            check(ember.gather(e, dim, ei), torch.gather(t, dim, ti))
            if ishape[1 - dim % 2] > x.shape[1 - dim % 2]:
                continue
            # scatter with unique positions per row/column (torch leaves duplicates unspecified)
            uniq = np.stack([rng.permutation(size)[:ishape[dim % 2]] for _ in range(ishape[1 - dim % 2])], axis=1 - dim % 2)
            eu, tu = tensors(uniq, device)
            src = sample(uniq.shape, dtype, rng)
            es, ts = tensors(src, device)
            check(e.scatter(dim, eu, es), t.scatter(dim, tu, ts))
            check(e.scatter(dim, eu, 1 if dtype != "bool" else True), t.scatter(dim, tu, 1 if dtype != "bool" else True))
            if dtype != "bool":
                src2 = sample(index.shape, dtype, rng)
                # repeated indices add up in an order each library picks: half precision rounds differently
                tol = {"f16": (1e-2, 1e-2), "bf16": (6e-2, 6e-2)}.get(dtype)
                check(e.scatter_add(dim, ei, ember.tensor(src2, device=device)), t.scatter_add(dim, ti, to_torch(src2)), tol=tol)


@pytest.mark.parametrize("dtype", ALL)
def test_index_select_take_masked_fill(dtype, device, rng):
    x = sample((4, 5), dtype, rng)
    e, t = tensors(x, device)
    for dim, index in [(0, [3, 0, 3]), (1, [4, 0]), (-1, []), (0, [2])]:
        with case(dim=dim, index=index):
            ei, ti = tensors(np.array(index, np.int64), device)
            check(e.index_select(dim, ei), t.index_select(dim, ti))
    index = rng.integers(-20, 20, (2, 3))
    ei, ti = tensors(index, device)
    check(e.take(ei), t.take(ti))
    if dtype != "bool":
        src = sample((4, 3), dtype, rng)
        ei, ti = tensors(np.array([0, 4, 0], np.int64), device)
        check(e.index_add(1, ei, ember.tensor(src, device=device)), t.index_add(1, ti, to_torch(src)))


def test_one_hot_and_nonzero(device, rng):
    labels = rng.integers(0, 5, (3, 4))
    e, t = tensors(labels, device)
    check(ember.one_hot(e, 6), torch.nn.functional.one_hot(t, 6))
    check(ember.one_hot(e), torch.nn.functional.one_hot(t))
    check(ember.one_hot(e[:0], 3), torch.nn.functional.one_hot(t[:0], 3))
    for dtype in ALL:
        with case(dtype=dtype):
            x = sample((3, 4), dtype, rng, 0, 2)
            e, t = tensors(x, device)
            check(e.nonzero(), t.nonzero())
            for got, want in zip(e.nonzero(as_tuple=True), t.nonzero(as_tuple=True)):
                check(got, want)
    e, t = tensors(np.array(2.0), device)
    check(ember.nonzero(e), torch.nonzero(t))


# ---- gradients ---------------------------------------------------------------------------------------

GRAD_INDEX = {
    "int_slice": lambda x, T: x[1, 1:4],
    "neg_step": lambda x, T: x[::-1, ::-2] if not T else x.flip(0).flip(1)[:, ::2],
    "ellipsis_none": lambda x, T: x[..., None, 2],
    "int_tensor": lambda x, T: x[[0, 3, 0]],
    "two_tensors": lambda x, T: x[[0, 1, 1], :, [2, 2, 5]],
    "tensor_and_slice": lambda x, T: x[1:, [4, 4]],
    "bool_mask": lambda x, T: x[(x > 0)],
    "mask_prefix": lambda x, T: x[:, (x[0, :, 0] > -100)],
    "gather": lambda x, T: (x.gather(1, T.tensor([[[0, 1], [4, 4], [2, 2]]] * 4))),
    "index_select": lambda x, T: x.index_select(2, T.tensor([5, 0, 5])),
    "take": lambda x, T: x.take(T.tensor([[0, 119], [7, 7]])),
    "masked_select": lambda x, T: x.masked_select(x < 0.5),
    "masked_fill": lambda x, T: x.masked_fill(x < 0, 3.0),
}


def _tensor_module(device):
    class Make:
        @staticmethod
        def tensor(v):
            return ember.tensor(v, device=device)
    return Make


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("name", GRAD_INDEX)
def test_index_grad(name, dtype, device, rng):
    fn = GRAD_INDEX[name]
    e, t = leaf(sample(X, dtype, rng), device)
    ev, tv = fn(e, _tensor_module(device)), fn(t, torch)
    check(ev, tv)
    seed = sample(tuple(tv.shape), dtype, rng)
    grads = ev.backward(ember.tensor(seed, device=device))
    tv.backward(to_torch(seed))
    check_grad(e.grad(grads), t.grad)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_assignment_grad(dtype, device, rng):
    """Gradients flow through `x[idx] = v` to both the overwritten tensor and the value."""
    for index, vshape in [((slice(1, 3), 2), (2, 6)), ((slice(None), [0, 4]), (1, 6)), (([1, 2], [0, 0], [5, 4]), ()),
                          ((Ellipsis, slice(None, None, 2)), (3,))]:
        with case(index=index):
            (ex, tx), (ev, tv) = leaf(sample(X, dtype, rng), device), leaf(sample(vshape, dtype, rng), device)
            ey, ty = ex * 2, tx * 2
            ey[_as_ember(index, device)] = ev * 3
            ty[_as_torch(index)] = tv * 3
            check(ey, ty)
            seed = sample(X, dtype, rng)
            grads = (ey * ember.tensor(seed, device=device)).sum().backward()
            (ty * to_torch(seed)).sum().backward()
            check_grad(ex.grad(grads), tx.grad)
            check_grad(ev.grad(grads), tv.grad)
    # negative step assignment (torch: through a flipped view)
    (ex, tx), (ev, tv) = leaf(sample((4, 6), dtype, rng), device), leaf(sample((4, 3), dtype, rng), device)
    ey, ty = ex * 1, tx * 1
    ey[:, ::-2] = ev
    ty.flip(1)  # torch cannot assign into a flip; build the same result functionally
    ty = torch.cat([ty[:, j:j + 1] if j % 2 == 0 else tv[:, (5 - j) // 2:(5 - j) // 2 + 1] for j in range(6)], 1)
    check(ey, ty)
    grads = (ey * ey).sum().backward()
    (ty * ty).sum().backward()
    check_grad(ex.grad(grads), tx.grad)
    check_grad(ev.grad(grads), tv.grad)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_gather_grad(dtype, device, rng):
    """gather's gradient in both of its forms: one index per row of `dim` (a compare against the positions,
    elementwise) and any other index (a scatter-add: repeated indices add up), with NaN and inf in the
    incoming gradient, int32 and int64 indices, 1-d to 3-d."""
    for shape, dim, ishape in [((4, 5), 1, (4, 1)), ((4, 5), 0, (1, 5)), ((3, 4, 6), 2, (3, 4, 1)),
                               ((3, 4, 6), -2, (3, 1, 6)), ((7,), 0, (1,)), ((4, 5), 1, (4, 3)),
                               ((4, 5), 1, (2, 1)), ((4, 5), 0, (6, 5)), ((0, 5), 1, (0, 1))]:
        for index_dtype in (np.int64, np.int32):
            with case(shape=shape, dim=dim, index=ishape, index_dtype=index_dtype.__name__):
                ex, tx = leaf(sample(shape, dtype, rng), device)
                index = rng.integers(0, shape[dim], ishape).astype(index_dtype)
                ev = ex.gather(dim, ember.tensor(index, device=device))
                tv = torch.gather(tx, dim, torch.tensor(index.astype(np.int64)))
                seed = sample(ishape, dtype, rng)
                if seed.size > 2:
                    seed.flat[:2] = [np.nan, np.inf]
                grads = (ev * ember.tensor(seed, device=device)).sum().backward()
                (tv * to_torch(seed)).sum().backward()
                check_grad(ex.grad(grads), tx.grad)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_scatter_grad(dtype, device, rng):
    x, src = sample((4, 5), dtype, rng), sample((3, 5), dtype, rng)
    index = np.stack([rng.permutation(4)[:3] for _ in range(5)], axis=1)
    dup = rng.integers(0, 4, (3, 5))
    for name, ef, tf in [("scatter", lambda a, i, s: a.scatter(0, i, s), lambda a, i, s: a.scatter(0, i, s)),
                         ("scatter_add", lambda a, i, s: a.scatter_add(0, i, s), lambda a, i, s: a.scatter_add(0, i, s))]:
        with case(op=name):
            (ex, tx), (es, ts) = leaf(x, device), leaf(src, device)
            idx = index if name == "scatter" else dup
            ev, tv = ef(ex, ember.tensor(idx, device=device), es), tf(tx, torch.tensor(idx), ts)
            check(ev, tv)
            seed = sample((4, 5), dtype, rng)
            grads = ev.backward(ember.tensor(seed, device=device))
            tv.backward(to_torch(seed))
            check_grad(ex.grad(grads), tx.grad)
            check_grad(es.grad(grads), ts.grad)
    (ex, tx), (es, ts) = leaf(x, device), leaf(sample((4, 2), dtype, rng), device)
    ev = ex.index_add(1, ember.tensor([0, 3], device=device), es)
    tv = tx.index_add(1, torch.tensor([0, 3]), ts)
    grads = (ev * ev).sum().backward()
    (tv * tv).sum().backward()
    check_grad(ex.grad(grads), tx.grad)
    check_grad(es.grad(grads), ts.grad)


# ---- properties against NumPy --------------------------------------------------------------------------

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


@given(data=st.data())
def test_property_basic_slicing(data):
    shape = data.draw(shapes)
    x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    index = data.draw(hnp.basic_indices(shape, min_dims=0, allow_newaxis=True, allow_ellipsis=True))
    got = ember.tensor(x, device=ember.Device.numpy())[index]
    want = x[index]
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got.numpy()), want)


@given(data=st.data())
def test_property_advanced_indexing(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    index = data.draw(hnp.integer_array_indices(shape, result_shape=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)))
    # mix in a slice at a random position after the integer arrays (NumPy's placement rules apply)
    use_slice = data.draw(st.booleans()) and len(index) < len(shape)
    full = tuple(index) + ((slice(None, None, data.draw(st.sampled_from([1, 2, -1]))),) if use_slice else ())
    device = ember.Device.cpu()
    got = ember.tensor(x, device=device)[tuple(ember.tensor(i, device=device) if isinstance(i, np.ndarray) else i for i in full)]
    want = x[full]
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got.numpy()), want)


@given(data=st.data())
def test_property_broadcasting(data):
    shapes_ = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4))
    a = np.arange(int(np.prod(shapes_.input_shapes[0])), dtype=np.float64).reshape(shapes_.input_shapes[0])
    b = np.arange(int(np.prod(shapes_.input_shapes[1])), dtype=np.float64).reshape(shapes_.input_shapes[1]) - 3
    device = ember.Device.numpy()
    ea, eb = ember.tensor(a, device=device), ember.tensor(b, device=device)
    for got, want in [(ea * eb + eb, a * b + b), (ember.where(ea > eb, ea, eb), np.where(a > b, a, b))]:
        assert got.shape == shapes_.result_shape == want.shape
        np.testing.assert_array_equal(np.asarray(got.numpy()), want)


@given(data=st.data())
def test_property_mask_and_setitem(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    mask = data.draw(hnp.arrays(np.bool_, shape))
    index = data.draw(hnp.basic_indices(shape, allow_ellipsis=True))
    e = ember.tensor(x, device=ember.Device.numpy())
    np.testing.assert_array_equal(np.asarray(e[ember.tensor(mask)].numpy()), x[mask])
    e[index] = -1.0
    y = x.copy()
    y[index] = -1.0
    np.testing.assert_array_equal(np.asarray(e.numpy()), y)


@given(data=st.data())
def test_property_reductions_and_movement(data):
    """Reductions over any dims and permutes/flips of any shape agree with NumPy."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    x = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-100, 100)))
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    keepdim = data.draw(st.booleans())
    perm = data.draw(st.permutations(range(len(shape))))
    e = ember.tensor(x, device=ember.Device.numpy())
    np.testing.assert_allclose(e.sum(dim=dims, keepdim=keepdim).numpy(), x.sum(axis=dims, keepdims=keepdim), atol=1e-9)
    np.testing.assert_array_equal(e.amax(dim=dims, keepdim=keepdim).numpy(), x.max(axis=dims, keepdims=keepdim))
    np.testing.assert_array_equal(e.permute(perm).flip(dims).numpy(), np.flip(x.transpose(perm), dims))
