"""The Adam kernel (`ember/kernels/optim.py`) on the CPU against its NumPy reference, at sizes around its
cubes (256 units; written over the moments, 4 positions a unit: whole cubes unguarded, the last one
tested per unit): into a new array and written over the previous packed state, whose first row is the
parameter, as the optimizer holds it."""

from __future__ import annotations

import numpy as np
import pytest

from ember.kernels import optim

# sizes: empty, under one cube, one cube short of and at whole cubes of either form, odd 2-D shapes
SHAPES = [(0,), (7,), (255,), (1023,), (1024,), (37, 57), (3, 1029)]
HYPER = dict(lr=0.05, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
TOLERANCE = {np.float32: (1e-6, 1e-7), np.float64: (1e-15, 1e-15)}


def previous_state(rng, shape, dtype, amsgrad: bool) -> np.ndarray:
    """A packed state after one step: the parameter, then moments (the second moment positive)."""
    rows = [rng.standard_normal(shape)] + [np.abs(rng.standard_normal(shape)) for _ in range(optim.rows(amsgrad) - 1)]
    return np.concatenate([r.reshape((-1,) + shape[1:]) if shape else r.reshape(1) for r in rows]).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_update_matches_the_reference_in_place_and_not(rng, dtype, amsgrad):
    for shape in SHAPES:
        n = int(np.prod(shape))
        for decoupled in (True, False):
            s = optim.scalars(dtype, decoupled=decoupled, step=3, **HYPER)
            state = previous_state(rng, shape, dtype, amsgrad)
            grad = rng.standard_normal(shape).astype(dtype)
            param = state[:shape[0]] if shape else state[:1].reshape(())
            want = optim.adam_reference(param.copy(), grad, state.copy(), s, amsgrad=amsgrad, first=False)
            rtol, atol = TOLERANCE[dtype]
            fresh = optim.adam_update(param, grad, state, s, amsgrad=amsgrad, first=False)
            assert fresh is not state
            np.testing.assert_allclose(fresh, want, rtol=rtol, atol=atol, err_msg=f"{shape} new array")
            donated = optim.adam_update(param, grad, state, s, amsgrad=amsgrad, first=False, out=state)
            assert donated is state, f"{shape}: the state is written over"
            np.testing.assert_allclose(donated, want, rtol=rtol, atol=atol, err_msg=f"{shape} in place")
            first = optim.adam_update(grad, grad, grad, s, amsgrad=amsgrad, first=True)
            np.testing.assert_allclose(first, optim.adam_reference(grad, grad, grad, s, amsgrad=amsgrad, first=True),
                                       rtol=rtol, atol=atol, err_msg=f"{shape} first step")
            assert n or fresh.size == 0


def test_bf16_parameters_written_in_place_round_as_the_reference(rng):
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    for shape in [(5,), (1029,), (2, 1500)]:
        s = optim.scalars(bf16, decoupled=True, step=2, **HYPER)
        state = previous_state(rng, shape, bf16, amsgrad=False)
        grad = rng.standard_normal(shape).astype(bf16)
        want = optim.adam_reference(state[:shape[0]].copy(), grad, state.copy(), s, amsgrad=False, first=False)
        got = optim.adam_update(state[:shape[0]], grad, state, s, amsgrad=False, first=False, out=state)
        assert got is state
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32), err_msg=str(shape))
