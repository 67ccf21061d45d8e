"""Matrix products (ember/api/linalg.py) against PyTorch: matmul with 1-d, batched and broadcast
operands, `@`, outer, einsum; gradients against autograd."""

from __future__ import annotations

import pytest
import torch

import ember
from conformance.oracle import FLOATS, INTS, case, check, check_grad, leaf, make, sample, tensors, to_torch

MATMUL_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                 ((3,), (5, 3, 4)), ((5, 2, 3), (3,)), ((2, 1, 2, 3), (5, 3, 4)), ((0, 3), (3, 2)), ((2, 0), (0, 4)),
                 ((4, 2, 3), (4, 3, 1)), ((2, 3, 2, 3), (3, 4)), ((0, 2, 3), (3, 4))]

EINSUM = [("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]), ("ij->ji", [(2, 3)]),
          ("i,i->", [(4,), (4,)]), ("i,j->ij", [(3,), (4,)]), ("...ij,...jk->...ik", [(2, 5, 2, 3), (3, 4)]),
          ("ij->", [(2, 3)]), ("ij->j", [(2, 3)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
          ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("ij,kj", [(2, 3), (4, 3)]), ("abc,cd,ae->bde", [(2, 3, 4), (4, 5), (2, 6)])]


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_matmul(dtype, device, rng):
    tol = {"f16": (1e-2, 1e-2), "bf16": (5e-2, 5e-2)}.get(dtype)
    for sa, sb in MATMUL_SHAPES:
        with case(a=sa, b=sb):
            (ea, ta), (eb, tb) = tensors(sample(sa, dtype, rng, 0 if dtype == "u8" else -3, 4), device), \
                tensors(sample(sb, dtype, rng, 0 if dtype == "u8" else -3, 4), device)
            check(ember.matmul(ea, eb), torch.matmul(ta, tb), tol=tol)
            check(ea @ eb, ta @ tb, tol=tol)


@pytest.mark.parametrize("layout", ["transposed", "strided", "flipped"])
def test_matmul_views_and_promotion(layout, device, rng):
    ea, ta = make((4, 3), "f64", rng, device, layout)
    eb, tb = make((3, 5), "f64", rng, device, layout)
    check(ea @ eb, ta @ tb)
    ei, ti = tensors(sample((3, 5), "i32", rng), device)
    check(ea @ ei, ta @ ti.double())  # torch refuses mixed matmul; ember promotes like an elementwise op
    assert (ea @ ei).dtype == ember.f64


@pytest.mark.parametrize("dtype", ["f64", "f32", "i64"])
def test_outer_and_einsum(dtype, device, rng):
    (ea, ta), (eb, tb) = tensors(sample((3,), dtype, rng), device), tensors(sample((4,), dtype, rng), device)
    check(ember.outer(ea, eb), torch.outer(ta, tb))
    for equation, shapes in EINSUM:
        with case(equation=equation):
            pairs = [tensors(sample(s, dtype, rng), device) for s in shapes]
            check(ember.einsum(equation, *[e for e, _ in pairs]), torch.einsum(equation, *[t for _, t in pairs]),
                  tol=(1e-4, 1e-4) if dtype == "f32" else None)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_matmul_grad(dtype, device, rng):
    for sa, sb in MATMUL_SHAPES:
        with case(a=sa, b=sb):
            (ea, ta), (eb, tb) = leaf(sample(sa, dtype, rng), device), leaf(sample(sb, dtype, rng), device)
            ev, tv = ea @ eb, ta @ tb
            seed = sample(tuple(tv.shape), dtype, rng)
            grads = ev.backward(ember.tensor(seed, device=device))
            tv.backward(to_torch(seed))
            check_grad(ea.grad(grads), ta.grad)
            check_grad(eb.grad(grads), tb.grad)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_einsum_outer_grad(dtype, device, rng):
    for equation, shapes in EINSUM:
        with case(equation=equation):
            pairs = [leaf(sample(s, dtype, rng), device) for s in shapes]
            ev = ember.einsum(equation, *[e for e, _ in pairs])
            tv = torch.einsum(equation, *[t for _, t in pairs])
            seed = sample(tuple(tv.shape), dtype, rng)
            grads = ev.backward(ember.tensor(seed, device=device))
            tv.backward(to_torch(seed))
            for e, t in pairs:
                check_grad(e.grad(grads), t.grad)
    (ea, ta), (eb, tb) = leaf(sample((3,), dtype, rng), device), leaf(sample((4,), dtype, rng), device)
    grads = (ember.outer(ea, eb) ** 2).sum().backward()
    (torch.outer(ta, tb) ** 2).sum().backward()
    check_grad(ea.grad(grads), ta.grad)
    check_grad(eb.grad(grads), tb.grad)
