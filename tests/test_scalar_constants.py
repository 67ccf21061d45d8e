"""Python scalars as 0-d tensors: converted once per value, dtype and device, zeros keeping their sign."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
from ember.api._common import scalar_like
from ember.dtype import f32 as float32, i32 as int32


@pytest.mark.parametrize("make", [ember.Device.numpy, ember.Device.cpu])
def test_a_scalar_is_converted_once_nan_and_signed_zeros_included(make):
    device = make()
    for value in (2.0, float("nan"), 0.0, -0.0, np.float32("nan"), 3):
        first = scalar_like(value, float32, device)
        assert scalar_like(value, float32, device) is first, value
    assert math.isnan(scalar_like(float("nan"), float32, device).item())
    zero, negative = scalar_like(0.0, float32, device), scalar_like(-0.0, float32, device)
    assert zero is not negative
    assert not np.signbit(zero.numpy()) and np.signbit(negative.numpy())
    assert scalar_like(2.0, float32, device) is not scalar_like(2.0, int32, device)


def test_masked_fill_with_nan_reuses_its_constant():
    """The mean of a cross entropy whose targets are all ignored is NaN by `masked_fill(empty, nan)`: a
    new upload at each step before (a CUDA loss kept one 0-d tensor a step alive, up to 1,024)."""
    device = ember.Device.cpu()
    x = ember.tensor([1.0, 2.0, 3.0], device=device)
    mask = ember.tensor([True, False, True], device=device)
    a, b = x.masked_fill(mask, float("nan")), x.masked_fill(mask, float("nan"))
    np.testing.assert_array_equal(a.numpy(), [np.nan, 2.0, np.nan])
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    assert len({id(scalar_like(float("nan"), float32, device)) for _ in range(5)}) == 1
