"""Whole training runs on every suite device against Device.numpy()'s run of the same case.

Op-by-op conformance does not see what only a training loop does: a step's forward pass, backward
pass and optimizer updates recorded into one fusion plan, the previous step's buffers donated to this
one, the plan replayed from the third step on, optimizer state carried between steps. An update that
goes wrong only over a donated state, from the second step, for sizes that are not a multiple of the
kernel's cube, passes every op test. So each case here trains 8 steps on a device, fused and
unfused, from the same initial values and data as the NumPy reference (`cases.py`), reads the loss
with `.item()` after each update as a training loop logs it, and compares the losses, every
parameter and buffer, and the optimizer's `state_dict` with the reference's.

The grid (`cases.GRID`, 25 cases): every optimizer on the MLP, the cheapest model where each rule's
arithmetic is seen alone, and on one more family; every family with Adam or AdamW (the packed,
donated moments of `ember.optim.fused`) and at least one rule of another kind:

    cnn (BatchNorm buffers, seeded Dropout)     AdamW, RMSprop (centered, momentum), SGD momentum
    rnn (LSTM into GRU)                         Adam, Lion
    transformer (embedding, causal attention)   AdamW, AMSGrad, Muon (and its AdamW fallback), LBFGS
    bert (2 small BERT blocks, padding mask)    Adam, Adan, SGD Nesterov
    frozen_accum (frozen group, clip, accum.)   AdamW, AdaGrad

LBFGS meets a closure (several evaluations a step, a strong-Wolfe line search) and is the costliest
per step, so its second family is the transformer rather than the recurrent one, which costs most
per evaluation on wgpu (one small kernel chain per time step).

Tolerances: the reference's own dtype (f32) at the gradient tolerance of `tests/tolerances.py`
(rtol 1e-4, atol 1e-5): after 8 steps a parameter has been through 8 forward and backward passes,
each rounding differently on another backend (summation order of matmuls and reductions, fused
multiply-adds), which is the error of one gradient check, not of one forward op. LBFGS gets 10x
that (`WIDER`): its direction divides by the curvature y.s of each history pair, differences of
nearby gradients, so the gradients' rounding reaches the step relatively enlarged. Its strong-Wolfe
line search runs on the MLP only: on the transformer its first extrapolation is a near tie (whether
the cubic through the first two trials has a minimum), which one ulp of the loss decides differently
on two backends and no tolerance covers, so that case steps without it
(`cases.OPTIMIZERS["lbfgs_fixed"]`). Device.numpy() against itself must be exact: the run is a
function of the case alone. A frozen parameter must end bitwise where it started.

For the same reason the CNN's conv has no bias (BatchNorm right after it cancels one) and attention's
key bias is frozen (softmax cancels it): their gradients are zero but for rounding, which Adam-like
rules blow up to full steps (`cases.CNN`, `cases.Family`).

Example:
    python -m pytest tests/trajectories -n 2 -k "adam and cpu"
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
from tolerances import grad as grad_tolerance

from .cases import FAMILIES, GRID, Case, Trajectory, initial_state, train

WIDER = {"lbfgs": 10, "lbfgs_fixed": 10}
"""Factors on the base tolerance, by optimizer (the module docs say why)."""

_references: dict[Case, Trajectory] = {}


def reference(case: Case) -> Trajectory:
    """The case's run on Device.numpy(), computed once per process and shared by every device."""
    if case not in _references:
        _references[case] = train(case, ember.Device.numpy())
    return _references[case]


def assert_same_trajectory(got: Trajectory, expected: Trajectory, rtol: float, atol: float) -> None:
    """Losses, parameters and buffers (by name), and optimizer state (by key) within rtol/atol; integers,
    strings and key sets exactly."""
    np.testing.assert_allclose(got.losses, expected.losses, rtol=rtol, atol=atol, err_msg="losses")
    for what, a, b in (("module", got.module, expected.module), ("optimizer", got.optimizer, expected.optimizer)):
        assert sorted(a) == sorted(b), f"{what}: the keys differ"
        for key in b:
            if b[key].dtype.kind in "fc":
                np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=atol, err_msg=f"{what} {key}")
            else:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{what} {key}")


def tolerance(case: Case) -> tuple[float, float]:
    """(rtol, atol) of a case on a device other than the reference's."""
    rtol, atol = grad_tolerance("f32")
    factor = WIDER.get(case.optimizer, 1)
    return rtol * factor, atol * factor


def is_frozen(case: Case, name: str) -> bool:
    frozen = FAMILIES[case.family].frozen
    return frozen is not None and re.search(frozen, name) is not None


@pytest.mark.parametrize("case", GRID, ids=[c.id for c in GRID])
def test_trajectory_matches_numpy(device, case):
    expected = reference(case)
    got = train(case, device)
    rtol, atol = (0.0, 0.0) if device.kind == "numpy" else tolerance(case)
    assert_same_trajectory(got, expected, rtol, atol)
    for name, value in initial_state(case.family).items():
        if is_frozen(case, name):
            assert got.module[name].tobytes() == value.tobytes(), f"frozen {name} changed"


@pytest.mark.parametrize("case", GRID, ids=[c.id for c in GRID])
def test_reference_moves_every_trained_parameter(case):
    """The comparisons above mean something only if training moves the parameters well past the
    tolerance: every trained parameter tensor moves by more than 100 x atol somewhere."""
    start, atol = initial_state(case.family), grad_tolerance("f32")[1]
    for name, value in reference(case).module.items():
        if value.dtype.kind == "f" and not is_frozen(case, name):
            assert np.abs(value - start[name]).max() > 100 * atol, f"{name} barely moved"
