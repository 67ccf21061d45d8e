"""Complex tensors against torch on every suite device: creation, promotion, arithmetic, reductions,
matmul, movement, indexing, and gradients in PyTorch's conjugate-Wirtinger convention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from conformance.oracle import check, check_grad, sample, to_torch

CDTYPES = ("c64", "c128")


def _pair(shape, dtype, rng, device):
    a = sample(shape, dtype, rng)
    return ember.tensor(a, device=device), to_torch(a)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_arithmetic_and_unary(device, dtype, rng):
    (a, ta), (b, tb) = _pair((3, 1), dtype, rng, device), _pair((4,), dtype, rng, device)
    for got, want in ((a + b, ta + tb), (a - b, ta - tb), (a * b, ta * tb), (a / b, ta / tb), (-a, -ta),
                      (a * 2.5, ta * 2.5), (1j * b, 1j * tb), (a + 1, ta + 1), (a.conj(), ta.conj()),
                      (a.real, ta.real), (a.imag, ta.imag), (a.abs(), ta.abs()), (a.angle(), ta.angle()),
                      (a.exp(), ta.exp()), (a.log(), ta.log()), (a.sqrt(), ta.sqrt()), (b.sin(), tb.sin()),
                      (b.tanh(), tb.tanh()), (b.sigmoid(), tb.sigmoid()), (a ** 2, ta ** 2),
                      (a == a, ta == ta), (a != b, ta != tb), (ember.sgn(b), torch.sgn(tb)),
                      (ember.where(b.real > 0, b, a), torch.where(tb.real > 0, tb, ta)),
                      (a.cast("c128"), ta.to(torch.complex128)), (b.isfinite(), tb.isfinite())):
        check(got, want)


def test_promotion_in_ops(device, rng):
    x = sample((5,), "f64", rng)
    z = sample((5,), "c64", rng)
    n = np.arange(5)
    ex, ez, en = (ember.tensor(v, device=device) for v in (x, z, n))
    tx, tz, tn = (to_torch(v) for v in (x, z, n))
    for got, want in ((ex + ez, tx + tz), (ez * ex, tz * tx), (en + ez, tn + tz), (en * 1j, tn * 1j),
                      (ex * 1j, tx * 1j), (ex[0] + ez, tx[0] + tz), (ez.cast("f32"), tz.real.float())):
        check(got, want)
    with pytest.raises(ember.DTypeError, match="complex"):
        ember.maximum(ez, ez)
    with pytest.raises(ember.DTypeError, match="complex"):
        ez < ez
    with pytest.raises(ember.DTypeError, match="c64"):
        ez.floor()


def test_creation(device, rng):
    z = ember.tensor([[1 + 2j, 3], [0.5j, -1]], device=device)
    check(z, torch.tensor([[1 + 2j, 3], [0.5j, -1]]))
    check(ember.zeros(2, 3, dtype="c128", device=device), torch.zeros(2, 3, dtype=torch.complex128))
    check(ember.ones(3, dtype=ember.complex64, device=device), torch.ones(3, dtype=torch.complex64))
    check(ember.full((2,), 1 - 1j, device=device), torch.full((2,), 1 - 1j))
    re, im = sample((2, 3), "f64", rng), sample((3,), "f64", rng)
    check(ember.complex(ember.tensor(re, device=device), ember.tensor(im, device=device)),
          torch.complex(to_torch(re), to_torch(im)))
    check(ember.polar(ember.tensor(np.abs(re), device=device), ember.tensor(re, device=device)),
          torch.polar(to_torch(np.abs(re)), to_torch(re)))
    a = sample((4, 2), "c64", rng)
    e = ember.tensor(a, device=device)
    check(ember.view_as_real(e), torch.view_as_real(to_torch(a)))
    check(ember.view_as_complex(ember.view_as_real(e)), to_torch(a))
    check(ember.tensor(np.array(1 + 1j, np.complex128), device=device), torch.tensor(1 + 1j, dtype=torch.complex128))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_reductions_matmul_movement(device, dtype, rng):
    (a, ta), (b, tb) = _pair((2, 3, 4), dtype, rng, device), _pair((2, 4, 5), dtype, rng, device)
    idx = np.array([2, 0, 2])
    for got, want in ((a.sum(), ta.sum()), (a.sum(dim=1), ta.sum(dim=1)), (a.mean(dim=(0, 2), keepdim=True),
                      ta.mean(dim=(0, 2), keepdim=True)), (a.prod(dim=-1), ta.prod(dim=-1)),
                      (a @ b, ta @ tb), (a[0] @ b[1], ta[0] @ tb[1]), (a.transpose(1, 2).reshape(6, 4),
                      ta.transpose(1, 2).reshape(6, 4)), (a[:, ::2, 1:], ta[:, ::2, 1:]), (a.flip(-1), ta.flip(-1)),
                      (a.permute(2, 0, 1), ta.permute(2, 0, 1)), (ember.cat([a, a.conj()], 1),
                      torch.cat([ta, ta.conj()], 1)), (ember.stack([a[0], a[1]]), torch.stack([ta[0], ta[1]])),
                      (a[:, ember.tensor(idx, device=device)], ta[:, torch.from_numpy(idx)]),
                      (a.expand(3, 2, 3, 4), ta.expand(3, 2, 3, 4)), (a.cumsum(1), ta.cumsum(1)),
                      (a[:, :0].sum(1), ta[:, :0].sum(1))):
        check(got, want, tol=(1e-4, 1e-5) if dtype == "c64" else None)


def _torch_grads(fn, arrays):
    leaves = [to_torch(a).requires_grad_(True) for a in arrays]
    fn(torch, *leaves).backward()
    return [t.grad for t in leaves]


def _ember_grads(fn, arrays, device):
    leaves = [ember.tensor(a, device=device.autodiff()).require_grad() for a in arrays]
    grads = fn(ember, *leaves).backward()
    return [t.grad(grads) for t in leaves]


def _losses():
    """Real losses of complex leaves (z, w, both (3, 4)) and a real one (x, (3, 4)), as f(lib, z, w, x)."""
    return [
        lambda m, z, w, x: (z * w).abs().sum(),
        lambda m, z, w, x: ((z / w).exp() * z.conj()).real.sum() + (z @ w.transpose(0, 1)).imag.mean(),
        lambda m, z, w, x: (m.polar(x.abs() + 0.5, x) * z).angle().sum() + (z.sqrt() * w.log()).abs().sum(),
        lambda m, z, w, x: m.view_as_real(z * x).sum() * 0.5 + (m.complex(x, x * 2) ** 2 * w).real.sum(),
        lambda m, z, w, x: ((z + 1j).sin().tanh() * w.sum(dim=0)).abs().prod(dim=1).sum() + (m.real(z) * x).sum(),
        lambda m, z, w, x: (z.reshape(4, 3)[::2] * w[0:2, :3].conj()).abs().pow(2).sum() + (z - w).sigmoid().real.sum(),
    ]


@pytest.mark.parametrize("case", range(len(_losses())))
def test_gradients_match_torch(device, case, rng):
    fn = _losses()[case]
    arrays = [sample((3, 4), "c128", rng), sample((3, 4), "c128", rng), sample((3, 4), "f64", rng)]
    for got, want in zip(_ember_grads(fn, arrays, device), _torch_grads(fn, arrays)):
        if got is not None or want is not None:  # a leaf the loss does not read has none on either side
            check_grad(got, want)


def test_gradient_is_dl_dx_plus_i_dl_dy(rng):
    """Finite differences in f64 on each part: the gradient of a real loss is dL/dx + i dL/dy."""
    z0 = sample((5,), "c128", rng)
    w = ember.tensor(sample((5,), "c128", rng), device="numpy")

    def loss(z):
        return ((z * w).exp().abs() + (z.conj() * z).real).sum()

    (got,) = _ember_grads(lambda m, z: loss(z), [z0], ember.Device.numpy())
    h = 1e-6
    want = np.zeros(5, np.complex128)
    for k in range(5):
        for unit in (1, 1j):
            up, down = z0.copy(), z0.copy()
            up[k] += h * unit
            down[k] -= h * unit
            slope = (loss(ember.tensor(up, device="numpy")).item() - loss(ember.tensor(down, device="numpy")).item()) / (2 * h)
            want[k] += slope * unit
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)


def test_backward_needs_a_real_loss(device, rng):
    z = ember.tensor(sample((3,), "c64", rng), device=device.autodiff()).require_grad()
    with pytest.raises(ember.DTypeError, match="real"):
        (z * z).sum().backward()


def test_cube_rows_run_complex_as_pairs(rng):
    """On the CPU the pair rows compute (no reference fallback); fusion leaves complex ops unfused and
    ops reading complex values (abs) run at once, correctly, inside fused real chains."""
    device = ember.Device.cpu()
    cube = ember.debug.fusion_backend(device).inner
    cube.fallbacks.discard("mul")
    x, z = sample((6, 5), "f32", rng), sample((6, 5), "c64", rng)
    ex, ez = ember.tensor(x, device=device), ember.tensor(z, device=device)
    tx, tz = to_torch(x), to_torch(z)
    check(((ex * 2).cast("c64") * ez).abs() + ex.exp(), ((tx * 2).to(torch.complex64) * tz).abs() + tx.exp())
    check((ez * ez / (ez + 1)).sum(dim=0) @ ez.transpose(0, 1), (tz * tz / (tz + 1)).sum(dim=0) @ tz.T,
          tol=(1e-4, 1e-5))
    assert not {"mul", "div", "add", "abs", "sum", "matmul", "cast"} & cube.fallbacks
