"""Everyday layers against torch.nn: Linear, Bilinear, Embedding, Dropout, PixelShuffle/Unshuffle,
CosineSimilarity and PairwiseDistance; outputs, input and parameter gradients, train and eval modes,
and Module features (state_dict round trip, repr, freeze) on these layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember import nn
from ember.errors import DTypeError, ShapeError
from ember.nn import functional as F

from .compare import DEVICE, compare, compare_module, load_from_torch


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias, rng):
    tm = torch.nn.Linear(4, 3, bias=bias, dtype=torch.float64)
    em = load_from_torch(nn.Linear(4, 3, bias=bias, dtype="f64"), tm)
    compare_module(em, tm, [rng.standard_normal((2, 5, 4))], rng)


@pytest.mark.parametrize("fused", [True, False])
def test_linear_reads_its_weight_in_place_and_gets_its_gradient_in_its_layout(fused, monkeypatch):
    """On Cube(cpu) the (out, in) weight reaches the matmul as its transposed view, not a copy, and its
    gradient comes back C-contiguous in (out, in), so an optimizer reads it without a copy either."""
    from ember.backend.cube import lowering
    seen = []
    row = lowering.TABLE["matmul"]
    monkeypatch.setitem(lowering.TABLE, "matmul", lowering.Lowering(
        lambda out, a, b: seen.append((a.shape, a.strides, b.shape, b.strides)) or row.run(out, a, b)))
    device = ember.Device.cpu()
    previous = ember.debug.set_fusion(device, fused)
    try:
        tracked = device.autodiff()
        layer = nn.Linear(7, 5, device=tracked)
        x = ember.randn(2, 3, 7, device=tracked)
        grads = layer(x).square().sum().backward()
        g = layer.weight.grad(grads)
        device.sync()
    finally:
        ember.debug.set_fusion(device, previous)
    item = 4
    assert ((2, 3, 7), (84, 28, 4), (7, 5), (item, 7 * item)) in seen  # the forward: W^T read through strides
    value = g._handle.value if hasattr(g._handle, "value") else g._handle
    assert g.shape == (5, 7) and value.flags.c_contiguous


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("lead", [(5,), (2, 3), ()])
def test_bilinear(bias, lead, rng):
    tm = torch.nn.Bilinear(3, 4, 2, bias=bias, dtype=torch.float64)
    em = load_from_torch(nn.Bilinear(3, 4, 2, bias=bias, dtype="f64"), tm)
    compare_module(em, tm, [rng.standard_normal(lead + (3,)), rng.standard_normal(lead + (4,))], rng)


def test_bilinear_init_and_errors():
    b = nn.Bilinear(16, 4, 8)
    w = b.weight.numpy()
    assert w.shape == (8, 16, 4) and np.abs(w).max() <= 0.25 and np.abs(w).max() > 0.2
    with pytest.raises(ShapeError, match=r"expected inputs \(\*, 16\) and \(\*, 4\)"):
        b(ember.zeros(2, 16), ember.zeros(3, 4))


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding(padding_idx, rng):
    tm = torch.nn.Embedding(6, 3, padding_idx=padding_idx, dtype=torch.float64)
    em = load_from_torch(nn.Embedding(6, 3, padding_idx=padding_idx, dtype="f64"), tm)
    ids = rng.integers(0, 6, (4, 5))
    ids[0, :3] = [2, 5, 2]  # padding rows and repeats (whose gradients add up)
    compare_module(em, tm, [ids], rng, grad_inputs=False)


def test_embedding_init_padding_and_errors():
    ember.seed(3)
    e = nn.Embedding(400, 50, padding_idx=1)
    w = e.weight.numpy()
    assert np.all(w[1] == 0)
    others = np.delete(w, 1, axis=0)
    assert abs(others.mean()) < 0.02 and abs(others.std() - 1) < 0.02  # N(0, 1), 19950 draws
    assert repr(e) == "Embedding(400, 50, padding_idx=1, params=20,000)"
    with pytest.raises(DTypeError, match="integer"):
        e(ember.zeros(3))
    with pytest.raises(IndexError, match="out of range"):
        e(ember.tensor([400]))
    with pytest.raises(IndexError, match="index -1 is out of range"):
        e(ember.tensor([[3, -1]]))
    with pytest.raises(ValueError, match="padding_idx 7 is out of range"):
        nn.Embedding(5, 2, padding_idx=7)


def test_dropout_train_mask_scale_and_gradient():
    ember.seed(11)
    drop = nn.Dropout(0.25)
    x = ember.randn(40, 50, device=DEVICE, dtype="f64").require_grad()
    y = drop(x)
    kept = y.numpy() != 0
    np.testing.assert_allclose(y.numpy()[kept], x.numpy()[kept] / 0.75, rtol=1e-12)
    assert 0.70 < kept.mean() < 0.80  # 2000 Bernoulli(0.75) draws
    grads = y.sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), kept / 0.75, rtol=1e-12)


def test_dropout_reproducible_eval_identity_and_edges():
    x = ember.ones(8, 8)
    ember.seed(5)
    a = nn.Dropout(0.5)(x)
    ember.seed(5)
    b = nn.Dropout(0.5)(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert nn.Dropout(0.5).eval()(x) is x
    assert nn.Dropout(0.0)(x) is x
    assert float(nn.Dropout(1.0)(x).abs().sum()) == 0.0
    assert F.dropout(x, 0.5, training=False) is x
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        nn.Dropout(1.5)
    assert repr(nn.Dropout(0.1)) == "Dropout(p=0.1, params=0)"


@pytest.mark.parametrize("shape, r", [((1, 8, 3, 2), 2), ((2, 3, 9, 2, 2), 3), ((4, 3, 3), 2)])
def test_pixel_shuffle_round_trip(shape, r, rng):
    x = rng.standard_normal(shape)
    up = compare(nn.PixelShuffle(r), torch.nn.PixelShuffle(r), [x], grad=[0], rng=rng)
    compare(nn.PixelUnshuffle(r), torch.nn.PixelUnshuffle(r), [up.numpy().copy()], grad=[0], rng=rng)
    np.testing.assert_array_equal(F.pixel_unshuffle(F.pixel_shuffle(ember.tensor(x), r), r).numpy(), x)


def test_pixel_shuffle_errors():
    with pytest.raises(ShapeError, match="divisible by upscale_factor"):
        F.pixel_shuffle(ember.zeros(1, 6, 2, 2), 2)
    with pytest.raises(ShapeError, match="divisible by downscale_factor"):
        F.pixel_unshuffle(ember.zeros(1, 1, 3, 4), 2)


@pytest.mark.parametrize("dim, shapes", [(1, ((4, 3), (4, 3))), (-1, ((2, 1, 5), (3, 5))), (0, ((3,), (3,)))])
def test_cosine_similarity(dim, shapes, rng):
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    compare(nn.CosineSimilarity(dim=dim), torch.nn.CosineSimilarity(dim=dim), [a, b], grad=[0, 1], rng=rng)
    tiny = np.zeros(shapes[0])
    tiny.flat[0] = 1e-10  # norm below eps: clamped
    compare(nn.CosineSimilarity(dim=dim, eps=1e-6), torch.nn.CosineSimilarity(dim=dim, eps=1e-6), [tiny, b],
            grad=[0, 1], rng=rng)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance(p, keepdim, rng):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    compare(nn.PairwiseDistance(p=p, keepdim=keepdim), torch.nn.PairwiseDistance(p=p, keepdim=keepdim), [a, b],
            grad=[0, 1], rng=rng)
    assert repr(nn.PairwiseDistance()) == "PairwiseDistance(p=2.0, eps=1e-06, keepdim=False, params=0)"


# ---- Module features on these layers ---------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        self.embed = nn.Embedding(10, 4)
        self.blocks = [nn.Linear(4, 4), nn.LayerNorm(4)]
        self.head = nn.Bilinear(4, 4, 2)
        self.act = nn.PReLU()
        self.drop = nn.Dropout(0.2)

    def forward(self, ids):
        h = self.drop(self.act(self.blocks[1](self.blocks[0](self.embed(ids)))))
        return self.head(h, h)


def test_state_dict_round_trip_repr_and_freeze(rng):
    net = Net()
    names = list(net.state_dict())
    assert names == ["embed.weight", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                     "head.weight", "head.bias", "act.weight"]
    other = Net()
    assert other.load_state_dict(net.state_dict()).ok
    ids = ember.tensor(rng.integers(0, 10, (3, 2)))
    net.eval(), other.eval()
    np.testing.assert_array_equal(net(ids).numpy(), other(ids).numpy())
    text = repr(net)
    assert text.splitlines()[0] == f"Net(params={net.num_params():,})"
    assert "(head): Bilinear(in1=4, in2=4, out=2, bias=True, params=34)" in text
    assert "(drop): Dropout(p=0.2, params=0)" in text
    net.to(DEVICE).freeze(nn.ParamGroup(prefix="embed."))
    net.train()
    grads = net(ids).sum().backward()
    assert not net.embed.weight.requires_grad
    with pytest.raises(ValueError, match="not tracked"):
        net.embed.weight.grad(grads)
    assert net.head.weight.grad(grads).shape == (2, 4, 4)
    assert net.num_params(trainable_only=True) == net.num_params() - 40


class Classifier(nn.Module):
    def __init__(self):
        self.hidden = nn.Linear(5, 8, dtype="f64")
        self.norm = nn.BatchNorm1d(8, dtype="f64")
        self.act = nn.GELU()
        self.out = nn.Linear(8, 3, dtype="f64")

    def forward(self, x):
        return self.out(self.act(self.norm(self.hidden(x))))


LAYER_NAMES = {"0": "hidden", "1": "norm", "3": "out"}  # torch Sequential index -> our attribute


def _ours(torch_name: str, value: np.ndarray) -> tuple[str, np.ndarray]:
    """A torch Sequential state entry under our name (the layout is the same)."""
    layer, rest = torch_name.split(".", 1)
    return f"{LAYER_NAMES[layer]}.{rest}", value


def test_training_steps_match_torch(rng):
    """Two SGD steps of a small classifier (Linear, BatchNorm1d, GELU, Linear, cross entropy) match
    PyTorch step for step: parameters and running statistics."""
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.BatchNorm1d(8), torch.nn.GELU(),
                                 torch.nn.Linear(8, 3)).double()
    ours = Classifier()
    state = dict(_ours(n, v.numpy()) for n, v in theirs.state_dict().items())
    assert ours.load_state_dict({n: ember.tensor(v.copy()) for n, v in state.items()}).ok
    ours.to(DEVICE)
    opt = torch.optim.SGD(theirs.parameters(), lr=0.5)
    for _ in range(2):
        x, y = rng.standard_normal((6, 5)), rng.integers(0, 3, 6)
        grads = F.cross_entropy(ours(ember.tensor(x, device=DEVICE)), ember.tensor(y), label_smoothing=0.1).backward()
        ours.map(lambda name, p: p.inner() - 0.5 * p.grad(grads))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y), label_smoothing=0.1).backward()
        opt.step()
    mine = ours.state_dict()
    for name, value in theirs.state_dict().items():
        key, expected = _ours(name, value.numpy())
        np.testing.assert_allclose(mine[key].numpy(), expected, rtol=1e-9, atol=1e-12, err_msg=key)
