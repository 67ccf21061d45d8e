"""Movement ops (ember/api/shape.py) against PyTorch: every op over dtypes and non-contiguous inputs,
and its gradient against autograd (reflect/replicate padding of any rank against NumPy's `np.pad`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ember
from conformance.oracle import (ALL, LAYOUTS, case, check, check_grad, leaf, make, sample, tensors, to_torch)

# name -> (input shape, ember fn, torch fn). Each op returns a tensor (lists are concatenated).
MOVEMENT = {
    "reshape": ((3, 4), lambda x: x.reshape(2, -1, 3), lambda x: x.reshape(2, -1, 3)),
    "reshape_tuple": ((2, 3, 5), lambda x: ember.reshape(x, (5, 6)), lambda x: torch.reshape(x, (5, 6))),
    "reshape_0d": ((), lambda x: x.reshape(1, 1), lambda x: x.reshape(1, 1)),
    "reshape_empty": ((2, 0, 3), lambda x: x.reshape(3, -1, 2), lambda x: x.reshape(3, -1, 2)),
    "permute": ((2, 3, 5), lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
    "permute_neg": ((2, 3, 5), lambda x: ember.permute(x, (-1, -3, -2)), lambda x: torch.permute(x, (-1, -3, -2))),
    "transpose": ((2, 3, 5), lambda x: x.transpose(0, -1), lambda x: x.transpose(0, -1)),
    "T": ((3, 4), lambda x: x.T, lambda x: x.T),
    "movedim": ((2, 3, 5), lambda x: x.movedim(0, -1), lambda x: x.movedim(0, -1)),
    "movedim_many": ((2, 3, 5, 4), lambda x: x.movedim((0, 1), (3, 0)), lambda x: x.movedim((0, 1), (3, 0))),
    "flatten": ((2, 3, 5), lambda x: x.flatten(), lambda x: x.flatten()),
    "flatten_range": ((2, 3, 5, 4), lambda x: x.flatten(1, 2), lambda x: x.flatten(1, 2)),
    "flatten_0d": ((), lambda x: x.flatten(), lambda x: x.flatten()),
    "unflatten": ((2, 12), lambda x: x.unflatten(1, (3, -1)), lambda x: x.unflatten(1, (3, -1))),
    "squeeze": ((1, 3, 1, 4), lambda x: x.squeeze(), lambda x: x.squeeze()),
    "squeeze_dim": ((1, 3, 1, 4), lambda x: x.squeeze(2), lambda x: x.squeeze(2)),
    "squeeze_dims": ((1, 3, 1, 4), lambda x: x.squeeze((0, 1)), lambda x: x.squeeze((0, 1))),
    "unsqueeze": ((3, 4), lambda x: x.unsqueeze(1), lambda x: x.unsqueeze(1)),
    "unsqueeze_last": ((3, 4), lambda x: x.unsqueeze(-1), lambda x: x.unsqueeze(-1)),
    "expand": ((3, 1), lambda x: x.expand(2, 3, 4), lambda x: x.expand(2, 3, 4)),
    "expand_keep": ((3, 1), lambda x: x.expand(-1, 5), lambda x: x.expand(-1, 5)),
    "broadcast_to": ((4,), lambda x: ember.broadcast_to(x, (3, 4)), lambda x: torch.broadcast_to(x, (3, 4))),
    "repeat": ((2, 3), lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3)),
    "repeat_0d": ((), lambda x: x.repeat(3), lambda x: x.repeat(3)),
    "tile": ((2, 3), lambda x: x.tile(2), lambda x: x.tile((2,))),
    "tile_more": ((2, 3), lambda x: ember.tile(x, (2, 1, 2)), lambda x: torch.tile(x, (2, 1, 2))),
    "flip": ((2, 3, 5), lambda x: x.flip(0, 2), lambda x: x.flip(0, 2)),
    "flip_neg": ((3, 4), lambda x: ember.flip(x, -1), lambda x: torch.flip(x, (-1,))),
    "roll": ((3, 4), lambda x: x.roll(1, 1), lambda x: x.roll(1, 1)),
    "roll_many": ((3, 4), lambda x: x.roll((-1, 5), (0, 1)), lambda x: x.roll((-1, 5), (0, 1))),
    "roll_flat": ((3, 4), lambda x: x.roll(5), lambda x: x.roll(5)),
    "narrow": ((5, 4), lambda x: x.narrow(0, 1, 3), lambda x: x.narrow(0, 1, 3)),
    "narrow_neg": ((5, 4), lambda x: x.narrow(-1, -3, 2), lambda x: x.narrow(-1, -3, 2)),
    "chunk": ((7, 3), lambda x: ember.cat(x.chunk(3)[::-1]), lambda x: torch.cat(x.chunk(3)[::-1])),
    "chunk_dim": ((2, 6), lambda x: ember.stack(x.chunk(4, dim=1)), lambda x: torch.stack(x.chunk(4, dim=1))),
    "split": ((7, 3), lambda x: ember.cat(x.split(2)[::-1]), lambda x: torch.cat(x.split(2)[::-1])),
    "split_sizes": ((2, 6), lambda x: ember.cat(x.split([1, 3, 2], 1)[::-1], 1), lambda x: torch.cat(x.split([1, 3, 2], 1)[::-1], 1)),
    "cat": ((2, 3), lambda x: ember.cat([x, x * 1, x[:1]]), lambda x: torch.cat([x, x * 1, x[:1]])),
    "cat_dim": ((2, 3), lambda x: ember.cat([x, x[:, :1]], dim=-1), lambda x: torch.cat([x, x[:, :1]], dim=-1)),
    "cat_empty": ((2, 3), lambda x: ember.cat([x, x[:0]]), lambda x: torch.cat([x, x[:0]])),
    "stack": ((2, 3), lambda x: ember.stack([x, x.flip(0)]), lambda x: torch.stack([x, x.flip(0)])),
    "stack_last": ((2, 3), lambda x: ember.stack([x, x], dim=-1), lambda x: torch.stack([x, x], dim=-1)),
    "stack_0d": ((), lambda x: ember.stack([x, x, x]), lambda x: torch.stack([x, x, x])),
    "pad": ((2, 3), lambda x: x.pad((1, 2)), lambda x: F.pad(x, (1, 2))),
    "pad_two_dims": ((2, 3), lambda x: x.pad((1, 0, 2, 1), value=1), lambda x: F.pad(x, (1, 0, 2, 1), value=1)),
    "pad_crop": ((4, 5), lambda x: x.pad((-1, 2, 1, -2)), lambda x: F.pad(x, (-1, 2, 1, -2))),
    "tril": ((4, 5), lambda x: x.tril(), lambda x: x.tril()),
    "tril_k": ((2, 4, 5), lambda x: ember.tril(x, -1), lambda x: torch.tril(x, -1)),
    "triu": ((4, 5), lambda x: x.triu(1), lambda x: x.triu(1)),
    "triu_neg": ((5, 3), lambda x: ember.triu(x, -2), lambda x: torch.triu(x, -2)),
    "diagonal": ((4, 5), lambda x: x.diagonal(), lambda x: x.diagonal()),
    "diagonal_offset": ((4, 5), lambda x: x.diagonal(2), lambda x: x.diagonal(2)),
    "diagonal_neg": ((4, 5), lambda x: x.diagonal(-1), lambda x: x.diagonal(-1)),
    "diagonal_dims": ((2, 3, 4), lambda x: ember.diagonal(x, 1, 0, 2), lambda x: torch.diagonal(x, 1, 0, 2)),
    "diagonal_empty": ((2, 3), lambda x: x.diagonal(5), lambda x: x.diagonal(5)),
}


@pytest.mark.parametrize("dtype", ALL)
def test_movement_dtypes(dtype, device, rng):
    for name, (shape, fn, tfn) in MOVEMENT.items():
        with case(op=name):
            e, t = tensors(sample(shape, dtype, rng), device)
            check(fn(e), tfn(t))


@pytest.mark.parametrize("layout", LAYOUTS[1:])
@pytest.mark.parametrize("name", [n for n, (s, _, _) in MOVEMENT.items() if len(s) >= 2])
def test_movement_views(name, layout, device, rng):
    shape, fn, tfn = MOVEMENT[name]
    e, t = make(shape, "f32", rng, device, layout)
    check(fn(e), tfn(t))


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("name", MOVEMENT)
def test_movement_grad(name, dtype, device, rng):
    shape, fn, tfn = MOVEMENT[name]
    e, t = leaf(sample(shape, dtype, rng), device)
    ev, tv = fn(e), tfn(t)
    seed = sample(tuple(tv.shape), dtype, rng)
    grads = ev.backward(ember.tensor(seed, device=device))
    tv.backward(to_torch(seed))
    check_grad(e.grad(grads), t.grad)


def test_cat_stack_promote_and_grad(device, rng):
    a, b = sample((2, 3), "f32", rng), sample((1, 3), "i32", rng)
    (ea, ta), (eb, tb) = tensors(a, device), tensors(b, device)
    check(ember.cat([ea, eb]), torch.cat([ta, tb]))
    check(ember.cat([eb, ea[:1].cast("f64")]), torch.cat([tb, ta[:1].double()]))
    check(ember.stack([ea[0], eb[0]], 1), torch.stack([ta[0], tb[0]], 1))
    # gradient to every piece of a cat/stack
    for dtype in ("f64", "f32"):
        with case(dtype=dtype):
            (ex, tx), (ey, ty) = leaf(sample((2, 3), dtype, rng), device), leaf(sample((4, 3), dtype, rng), device)
            out = ember.cat([ex, ey, ex], 0) * ember.stack([ey[:2], ex, ex], 0).sum(0).repeat(4, 1)
            tout = torch.cat([tx, ty, tx], 0) * torch.stack([ty[:2], tx, tx], 0).sum(0).repeat(4, 1)
            grads = out.sum().backward()
            tout.sum().backward()
            check_grad(ex.grad(grads), tx.grad)
            check_grad(ey.grad(grads), ty.grad)


PAD_CASES = [((5,), (2, 3)), ((3, 4), (1, 2)), ((3, 4), (3, 0, 2, 1)), ((2, 3, 4), (1, 1, 0, 2, 1, 0)), ((1,), (0, 0))]


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_modes_against_numpy(mode, dtype, device, rng):
    for shape, pad in PAD_CASES:
        if mode == "reflect" and any(p >= n for p, n in zip(pad, [n for n in reversed(shape) for _ in (0, 1)])):
            continue
        with case(shape=shape, pad=pad):
            x = sample(shape, dtype, rng)
            widths = [(0, 0)] * (len(shape) - len(pad) // 2) + [(pad[2 * i], pad[2 * i + 1]) for i in reversed(range(len(pad) // 2))]
            want = np.pad(x, widths, mode="reflect" if mode == "reflect" else "edge")
            got = ember.tensor(x, device=device).pad(pad, mode=mode)
            assert got.dtype.name == dtype and got.shape == want.shape
            np.testing.assert_array_equal(np.asarray(got.numpy()), want)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("mode", ["reflect", "replicate", "constant"])
def test_pad_modes_against_torch(mode, dtype, device, rng):
    for shape, pad in [((1, 2, 5), (2, 1)), ((1, 2, 4, 5), (1, 2, 3, 0)), ((2, 1, 3, 3, 4), (1, 1, 2, 0, 0, 1))]:
        with case(shape=shape, pad=pad):
            e, t = leaf(sample(shape, dtype, rng), device)
            ev, tv = e.flip(-1).pad(pad, mode=mode), F.pad(t.flip(-1), pad, mode=mode)
            check(ev, tv)
            seed = sample(tuple(tv.shape), dtype, rng)
            grads = ev.backward(ember.tensor(seed, device=device))
            tv.backward(to_torch(seed))
            check_grad(e.grad(grads), t.grad)
