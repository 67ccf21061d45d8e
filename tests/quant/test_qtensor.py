"""Quantized tensors on every device (ember/api/quantize.py) against the NumPy reference
(ember/qscheme/reference.py): the stored parts bit for bit, the dequantized values exactly, odd and
empty shapes, moving between devices, and fake_quantize's straight-through gradient against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import quant
from ember.qscheme import reference

SCHEMES = [  # (scheme, logical shape): odd shapes, partial last blocks
    (quant.int8(), (5, 37)),
    (quant.int8(axis=0), (7, 19)),
    (quant.int8(axis=1, affine=True), (3, 11, 4)),
    (quant.int4(block=32), (3, 2, 45)),
    (quant.int4(block=5, affine=True), (6, 23)),
    (quant.int2(block=6), (4, 17)),
    (quant.int2(axis=0, affine=True), (5, 9)),
    (quant.fp8_e4m3(), (9, 13)),
    (quant.fp8_e5m2(axis=0), (4, 21)),
    (quant.fp8_e4m3(block=7), (19,)),
    (quant.mxfp4(), (3, 64)),
    (quant.nf4(), (5, 70)),
    (quant.nf4(block=8, double_quant=True), (40, 70)),
]


def _data(rng, shape):
    """Normal values whose scale differs per row, with an exact zero row where there are rows."""
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(10.0 ** rng.uniform(-3, 3))
    if len(shape) > 1:
        x *= np.float32(10.0) ** rng.uniform(-2, 2, size=shape[:1] + (1,) * (len(shape) - 1)).astype(np.float32)
        x[0] = 0
    return x


def _assert_parts_equal(q, expected):
    assert set(q.parts) == set(expected)
    for name, want in expected.items():
        got = np.asarray(q.parts[name].numpy())
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=name)


def test_quantize_and_dequantize_match_the_reference(device, rng):
    for scheme, shape in SCHEMES:
        x = _data(rng, shape)
        q = ember.from_numpy(x).to(device).quantize(scheme)
        assert q.device is device and q.shape == shape and q.dtype == ember.qtype(scheme)
        expected = reference.quantize(x, scheme)
        _assert_parts_equal(q, expected)
        np.testing.assert_array_equal(q.dequantize().numpy(), reference.dequantize(expected, scheme, shape),
                                      err_msg=str(scheme))


def test_scale_dtypes_and_dequantized_dtypes(device, rng):
    for scheme, dtype in [(quant.int8(block=9, scale_dtype="f16"), "f16"), (quant.int4(block=16, scale_dtype="bf16"), "bf16"),
                          (quant.fp8_e4m3(axis=0, scale_dtype="bf16"), "f32")]:
        x = _data(rng, (6, 31))
        q = ember.quantize(ember.from_numpy(x).to(device).cast(dtype), scheme)
        expected = reference.quantize(x.astype(ember.dtype.dtype_of(dtype).np).astype(np.float32), scheme)
        _assert_parts_equal(q, expected)
        out = q.dequantize(dtype)
        assert out.dtype == ember.dtype.dtype_of(dtype)
        want = reference.dequantize(expected, scheme, (6, 31), dtype=ember.dtype.dtype_of(dtype).np)
        np.testing.assert_array_equal(np.asarray(out.numpy()).astype(np.float32), want.astype(np.float32))


def test_empty_tensors_and_moves_between_devices(device, rng):
    for scheme, shape in [(quant.int4(block=8), (0, 9)), (quant.nf4(), (3, 0)), (quant.int8(axis=0), (0, 4))]:
        q = ember.zeros(*shape, device=device).quantize(scheme)
        assert q.dequantize().shape == shape and {n: p.shape for n, p in q.parts.items()} == scheme.parts(shape)
    x = _data(rng, (4, 33))
    q = ember.from_numpy(x).quantize(quant.int4(block=16, affine=True))
    moved = q.to(device)
    assert moved.device is device and moved.nbytes == q.nbytes == 4 * 17 + 4 * 3 * 4 + 4 * 3
    np.testing.assert_array_equal(moved.dequantize().numpy(), q.dequantize().numpy())


def test_qtensor_reports_its_scheme_bytes_and_rejects_bad_parts():
    q = ember.randn(10, 64).quantize(quant.int4(block=32))
    assert q.nbytes == 10 * 32 + 10 * 2 * 4 and q.numel == 640
    assert "int4(block=32, f32 scales)" in repr(q) and "QTensor(shape=(10, 64)" in repr(q)
    assert q.kernel_args()["code"] == "int4" and q.kernel_args()["block"] == 32 and q.kernel_args()["k"] == 64
    with pytest.raises(ember.errors.QuantSchemeError, match=r"part 'scales'.*\(10, 2\)"):
        ember.QTensor(q.scheme, q.shape, {"values": q.parts["values"], "scales": ember.zeros(10, 3)})
    x = ember.randn(40, 512)
    nf = x.quantize(quant.nf4(double_quant=True))
    absmax = np.abs(x.numpy()).reshape(40, 8, 64).max(-1)  # the scales before double quantization
    step = (absmax.max() - absmax.min()) / 2 / 127  # one int8 code of the midrange-centred scales
    got = nf.kernel_args()["scales"].numpy()
    assert got.shape == (40, 8) and np.abs(got - absmax).max() <= step / 2 * 1.001


def test_fake_quantize_forward_and_straight_through_gradient_match_torch(device, rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((6, 13)).astype(np.float32)
    w = rng.standard_normal((6, 13)).astype(np.float32)
    ad = device.autodiff()
    xe = ember.from_numpy(x).to(ad).require_grad()
    y = ember.fake_quantize(xe, quant.int8(axis=0))
    grads = (y * ember.from_numpy(w).to(ad)).sum().backward()

    xt = torch.tensor(x, requires_grad=True)
    scale = torch.tensor(np.abs(x).max(axis=1) / np.float32(127))
    yt = torch.fake_quantize_per_channel_affine(xt, scale, torch.zeros(6, dtype=torch.int32), 0, -127, 127)
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(y.numpy(), yt.detach().numpy())
    np.testing.assert_array_equal(xe.grad(grads).numpy(), xt.grad.numpy())
    for scheme in (quant.nf4(block=8), quant.fp8_e5m2()):  # no torch op: the gradient is the identity
        xe = ember.from_numpy(x).to(ad).require_grad()
        y = ember.fake_quantize(xe, scheme)
        np.testing.assert_array_equal(y.numpy(), reference.dequantize(reference.quantize(x, scheme), scheme, x.shape))
        np.testing.assert_array_equal(xe.grad((y * 3.0).sum().backward()).numpy(), np.full(x.shape, 3, np.float32))


def test_mse_scale_search_matches_the_reference_and_never_loses_to_absmax(device, rng):
    for scheme, shape in SCHEMES:
        x = _data(rng, shape)
        q = ember.from_numpy(x).to(device).quantize(scheme, method="mse")
        expected = reference.quantize(x, scheme, method="mse")
        _assert_parts_equal(q, expected)
        got = q.dequantize().numpy()
        np.testing.assert_array_equal(got, reference.dequantize(expected, scheme, shape), err_msg=str(scheme))
        if scheme.double_quant:
            continue  # the searched scales are then rounded again: no longer each block's best
        plain = reference.dequantize(reference.quantize(x, scheme), scheme, shape)
        # each block's squared error is at most round-to-nearest's (ratio 1 is a candidate); in total too
        assert ((got - x).astype(np.float64) ** 2).sum() <= ((plain - x).astype(np.float64) ** 2).sum() * (1 + 1e-6), scheme
    # clipping pays at 4 bits: normal blocks of 32 lose about 12% less with the searched scales
    t = rng.standard_normal((64, 32)).astype(np.float32)
    errors = [np.square(reference.dequantize(reference.quantize(t, quant.int4(block=32), method=m), quant.int4(block=32),
                                             t.shape) - t).sum() for m in ("absmax", "mse")]
    assert errors[1] < 0.93 * errors[0], errors
    with pytest.raises(ember.errors.QuantSchemeError, match=r"int4\(block=32.*'best'.*\(64, 32\)"):
        ember.from_numpy(t).to(device).quantize(quant.int4(block=32), method="best")
