"""Conv, ConvTranspose, pooling and Upsample layers against their torch.nn twins: weights copied over,
outputs and the gradients of input, weight and bias compared; PyTorch's initialization bounds; errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ember
from ember import nn
from ops.torch_check import check_op, random
from tolerances import grad as grad_tolerance


def _twin_check(layer, twin, x: np.ndarray, device, rng, **call) -> None:
    """Copy `layer`'s parameters into `twin`, run both on `x`, compare output and all gradients."""
    with torch.no_grad():
        for name, p in layer.named_parameters():
            getattr(twin, name).copy_(torch.from_numpy(np.array(p.numpy())))
    ex = ember.tensor(x, device=device.autodiff()).require_grad()
    tx = torch.from_numpy(x.copy()).requires_grad_(True)
    ey, ty = layer(ex, **call), twin(tx, **call)
    rtol, atol = grad_tolerance("f64")
    np.testing.assert_allclose(ey.numpy(), ty.detach().numpy(), rtol=rtol, atol=atol)
    cot = random(rng, ty.shape)
    ty.backward(torch.from_numpy(cot))
    grads = ey.backward(ember.tensor(cot, device=device))
    np.testing.assert_allclose(ex.grad(grads).numpy(), tx.grad.numpy(), rtol=rtol, atol=atol, err_msg="input")
    for name, p in layer.named_parameters():
        np.testing.assert_allclose(p.grad(grads).numpy(), getattr(twin, name).grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=name)


CONVS = [
    (nn.Conv1d, torch.nn.Conv1d, 1, dict(kernel_size=3, stride=2, padding=1)),
    (nn.Conv2d, torch.nn.Conv2d, 2, dict(kernel_size=(3, 2), dilation=(1, 2), groups=2, bias=False)),
    (nn.Conv2d, torch.nn.Conv2d, 2, dict(kernel_size=3, padding="same")),
    (nn.Conv2d, torch.nn.Conv2d, 2, dict(kernel_size=3, padding=1, padding_mode="reflect")),
    (nn.Conv1d, torch.nn.Conv1d, 1, dict(kernel_size=3, padding=2, padding_mode="replicate")),
    (nn.Conv2d, torch.nn.Conv2d, 2, dict(kernel_size=3, padding=(2, 1), padding_mode="circular")),
    (nn.Conv3d, torch.nn.Conv3d, 3, dict(kernel_size=2, stride=(1, 2, 1))),
    (nn.ConvTranspose1d, torch.nn.ConvTranspose1d, 1, dict(kernel_size=3, stride=2, padding=1, output_padding=1)),
    (nn.ConvTranspose2d, torch.nn.ConvTranspose2d, 2, dict(kernel_size=2, stride=2, groups=2)),
    (nn.ConvTranspose3d, torch.nn.ConvTranspose3d, 3, dict(kernel_size=2, dilation=2, bias=False)),
]


@pytest.mark.parametrize("ours, theirs, nd, options", CONVS, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CONVS)])
def test_conv_layers_match_torch(device, rng, ours, theirs, nd, options):
    layer = ours(4, 6, device=device.autodiff(), dtype="f64", **options)
    twin = theirs(4, 6, dtype=torch.float64, **options)
    _twin_check(layer, twin, random(rng, (2, 4) + (5,) * nd), device, rng)


def test_conv_transpose_output_size(device, rng):
    layer = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, device=device.autodiff(), dtype="f64")
    twin = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, dtype=torch.float64)
    _twin_check(layer, twin, random(rng, (1, 3, 4, 5)), device, rng, output_size=(8, 9))
    with pytest.raises(ember.ShapeError, match="output_size \\(9, 9\\) is not reachable"):
        layer(ember.ones(1, 3, 4, 5, dtype="f64"), output_size=(9, 9))


@pytest.mark.parametrize("layer, fan_in", [(nn.Conv2d(6, 8, 3, groups=2), 27), (nn.Conv1d(5, 4, 7), 35),
                                           (nn.ConvTranspose2d(8, 6, 4, groups=2), 48)])
def test_init_follows_pytorch(layer, fan_in):
    bound = 1 / math.sqrt(fan_in)
    w, b = np.asarray(layer.weight.numpy()), np.asarray(layer.bias.numpy())
    twin_shape = {nn.Conv2d: (8, 3, 3, 3), nn.Conv1d: (4, 5, 7), nn.ConvTranspose2d: (8, 3, 4, 4)}[type(layer)]
    assert w.shape == twin_shape and b.shape == (twin_shape[0] if type(layer) is not nn.ConvTranspose2d else 6,)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.8 * bound  # spread over the whole interval, not a narrower one
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]


def test_pool_and_upsample_layers(device, rng):
    x = random(rng, (2, 3, 9, 8))
    tn = torch.nn
    pairs = [(nn.MaxPool2d(3, 2, 1, ceil_mode=True), tn.MaxPool2d(3, 2, 1, ceil_mode=True)),
             (nn.MaxPool2d(2, return_indices=True), tn.MaxPool2d(2, return_indices=True)),
             (nn.AvgPool2d(3, 2, 1, count_include_pad=False), tn.AvgPool2d(3, 2, 1, count_include_pad=False)),
             (nn.AdaptiveAvgPool2d((4, None)), tn.AdaptiveAvgPool2d((4, None))),
             (nn.AdaptiveMaxPool2d(3), tn.AdaptiveMaxPool2d(3)),
             (nn.Upsample(scale_factor=1.5, mode="bicubic"), tn.Upsample(scale_factor=1.5, mode="bicubic")),
             (nn.Upsample(size=(4, 11), mode="nearest"), tn.Upsample(size=(4, 11), mode="nearest"))]
    for ours, theirs in pairs:
        check_op(ours, theirs, [x], device, rng=rng)
    line = random(rng, (2, 3, 10))
    for ours, theirs in [(nn.MaxPool1d(3, 2), tn.MaxPool1d(3, 2)), (nn.AvgPool1d(4, 3, 2), tn.AvgPool1d(4, 3, 2)),
                         (nn.AdaptiveAvgPool1d(4), tn.AdaptiveAvgPool1d(4)),
                         (nn.AdaptiveMaxPool1d(3, True), tn.AdaptiveMaxPool1d(3, True))]:
        check_op(ours, theirs, [line], device, rng=rng)


def test_layer_errors():
    with pytest.raises(ember.ShapeError, match="groups=3 must divide in_channels=4"):
        nn.Conv2d(4, 6, 3, groups=3)
    with pytest.raises(ValueError, match="unknown padding_mode 'wrap'"):
        nn.Conv2d(4, 6, 3, padding_mode="wrap")
    with pytest.raises(ValueError, match="padding must be 'same', 'valid' or ints"):
        nn.Conv2d(4, 6, 3, padding="full")
    with pytest.raises(ember.ShapeError, match="kernel_size must be an int or 2 ints"):
        nn.Conv2d(4, 6, (3, 3, 3))
    with pytest.raises(ember.ShapeError, match="Conv2d: input of shape \\(4, 6\\) is neither"):
        nn.Conv2d(4, 6, 3)(ember.ones(4, 6))
    assert nn.Conv1d(2, 2, 1, bias=False).bias is None


def test_small_cnn_learns_mnist_sample():
    # End to end: Conv2d -> relu -> MaxPool2d twice and a Linear head, trained by plain SGD on a few
    # batches of real digits. The loss must fall well below chance (ln 10 = 2.30).
    from ember.data.vision.mnist import mnist_sample
    from ember.nn import functional as F
    data = mnist_sample("train")
    pick = np.random.default_rng(0).permutation(len(data.labels))[:256]
    images = (data.images[pick].astype(np.float32) / 255.0)[:, None]
    labels = data.labels[pick].astype(np.int64)
    device = ember.Device.cpu().autodiff()
    ember.seed(0)
    layers = [nn.Conv2d(1, 8, 3, padding=1, device=device), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1, device=device),
              nn.MaxPool2d(2)]
    head = nn.Linear(16 * 7 * 7, 10, device=device)
    params = [p for layer in layers + [head] for p in layer.parameters()]
    losses = []
    for step in range(48):
        start = (step * 32) % 256
        x = ember.tensor(images[start:start + 32], device=device)
        for layer in layers:
            x = F.relu(layer(x)) if isinstance(layer, nn.Conv2d) else layer(x)
        loss = F.cross_entropy(head(x.reshape(x.shape[0], -1)), ember.tensor(labels[start:start + 32], device=device))
        grads = loss.backward()
        for p in params:
            p.set(p - 0.1 * p.grad(grads))
        losses.append(float(loss))
    assert np.mean(losses[-8:]) < 0.7 * np.mean(losses[:8]), losses
