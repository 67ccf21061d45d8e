"""ember's dtypes and promotion rules against PyTorch's `promote_types` and `result_type`."""

from __future__ import annotations

import itertools
import pickle

import ml_dtypes
import numpy as np
import pytest
import torch

import ember
from ember.dtype import ALL, dtype_of, promote_types, result_type
from conformance.oracle import EMBER_NAME, TORCH_DTYPE


def _torch(d):
    return TORCH_DTYPE[d.name]


@pytest.mark.parametrize("a", ALL, ids=lambda d: d.name)
def test_promote_types_matches_torch(a):
    for b in ALL:
        want = EMBER_NAME[torch.promote_types(_torch(a), _torch(b))]
        assert promote_types(a, b).name == want, (a, b)
        assert promote_types(b, a) is promote_types(a, b)


class _Fake:
    """A stand-in tensor: result_type only reads `.dtype` and `.ndim`."""

    def __init__(self, dtype, ndim):
        self.dtype, self.ndim = dtype, ndim


SCALARS = [True, 3, -2, 2.5, 1.5j]


def _same(got, want, case) -> None:
    """`got()` gives torch's dtype `want()`; where torch gives complex32 (ember holds none) or has no
    complex type (bf16 with a complex number), a DTypeError."""
    try:
        want = want()
    except RuntimeError:
        want = None
    if want not in EMBER_NAME:
        assert want in (torch.complex32, None), case
        with pytest.raises(ember.DTypeError, match="complex32"):
            got()
        return
    assert got().name == EMBER_NAME[want], case


@pytest.mark.parametrize("a", ALL, ids=lambda d: d.name)
def test_result_type_with_scalars_and_0d(a):
    ta = torch.zeros(2, dtype=_torch(a))
    for scalar in SCALARS:
        _same(lambda: result_type(_Fake(a, 1), scalar), lambda: torch.result_type(ta, scalar), (a, scalar))
        _same(lambda: result_type(scalar, _Fake(a, 1)), lambda: torch.result_type(scalar, ta), (a, scalar))
        _same(lambda: result_type(_Fake(a, 0), scalar), lambda: torch.result_type(ta[0], scalar), (a, scalar))
    for b in ALL:
        tb0 = torch.zeros((), dtype=_torch(b))
        _same(lambda: result_type(_Fake(a, 1), _Fake(b, 0)), lambda: torch.result_type(ta, tb0), (a, b))
        _same(lambda: result_type(_Fake(a, 0), _Fake(b, 0)), lambda: torch.result_type(ta[0], tb0), (a, b))
        for scalar in SCALARS:
            # three operands (dimensioned, 0-d, scalar): torch.where takes exactly these three roles
            cond = torch.ones(2, dtype=torch.bool)
            branch = torch.where(cond, torch.zeros(2, dtype=_torch(a)), torch.zeros((), dtype=_torch(b))).dtype
            _same(lambda: result_type(_Fake(a, 1), _Fake(b, 0), scalar),
                  lambda: torch.result_type(torch.zeros(2, dtype=branch), scalar), (a, b, scalar))


def test_result_type_of_real_tensors():
    x = ember.zeros(2, dtype="i32")
    assert result_type(x, 2.5) is ember.f32
    assert result_type(x, ember.tensor(1.0, dtype="f64")) is ember.f64  # 0-d float beats dimensioned int
    assert result_type(ember.zeros(2, dtype="f16"), ember.tensor(1.0, dtype="f64")) is ember.f16
    assert result_type(True, 2) is ember.i64 and result_type(2, 2.0) is ember.f32
    with pytest.raises(TypeError):
        result_type()
    with pytest.raises(TypeError):
        result_type("a")


def test_dtype_of_and_values():
    for d in ALL:
        assert dtype_of(d.name) is d and dtype_of(d) is d and dtype_of(d.np) is d
        assert dtype_of(_torch(d)) is d
        assert pickle.loads(pickle.dumps(d)) is d
        assert repr(d) == d.name
    assert dtype_of("float32") is ember.f32 and dtype_of("double") is ember.f64 and dtype_of("long") is ember.i64
    assert dtype_of(float) is ember.f32 and dtype_of(int) is ember.i64 and dtype_of(bool) is ember.bool_
    assert dtype_of(ml_dtypes.bfloat16) is ember.bf16 and dtype_of(np.dtype("float16")) is ember.f16
    assert [d.is_float for d in (ember.f16, ember.i8, ember.bool_)] == [True, False, False]
    assert ember.u8.is_int and not ember.u8.signed and ember.bool_.is_bool
    assert {d.itemsize for d in ALL} == {1, 2, 4, 8, 16}
    assert [d.is_complex for d in (ember.c64, ember.c128, ember.f64)] == [True, True, False]
    assert not ember.c64.is_float and ember.c64.is_inexact and ember.complex128 is ember.c128
    assert all(np.dtype(d.np).itemsize == d.itemsize for d in ALL)


@pytest.mark.parametrize("bad", ["f128", "float8", "complex32", np.clongdouble, torch.complex32, object])
def test_unknown_dtypes(bad):
    with pytest.raises(ember.DTypeError) as info:
        dtype_of(bad)
    assert "f32" in str(info.value)  # the message lists what ember holds


def test_all_pairs_through_ops():
    """Promotion in real ops matches torch for every pair (a compact cross-check of the table)."""
    for a, b in itertools.product(ALL, ALL):
        ea, eb = ember.ones(2, dtype=a, device="numpy"), ember.ones(2, dtype=b, device="numpy")
        want = EMBER_NAME[torch.promote_types(_torch(a), _torch(b))]
        both = ember.add if a.is_complex or b.is_complex else ember.maximum  # max refuses complex (as torch)
        assert both(ea, eb).dtype.name == want, (a, b)
        assert ember.cat([ea, eb]).dtype.name == want, (a, b)
