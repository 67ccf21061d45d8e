"""`ember.distributions` against `torch.distributions` on the same parameters: moments, log_prob, entropy,
cdf/icdf and the probs/logits conversions with their gradients, on every device, f32 and f64;
rsample's gradients through torch's own rsample given ember's noise; draws equal across devices for a
seed; sample statistics; the argument checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import ember
from ember import distributions as D
from conformance.oracle import case, check, check_grad, leaf, sample, to_torch
from tolerances import grad as grad_tolerance

BATCH = (3, 5)


def _params(name: str, dtype: str, rng) -> dict:
    """Random valid parameters (NumPy) of distribution `name`, with a broadcast in the continuous ones."""
    if name == "Normal":
        return {"loc": sample(BATCH, dtype, rng), "scale": sample((5,), dtype, rng, 0.3, 2.0)}
    if name == "Uniform":
        low = sample(BATCH, dtype, rng)
        return {"low": low, "high": (low + sample((5,), dtype, rng, 0.2, 3.0)).astype(low.dtype)}
    if name == "Bernoulli-probs":
        return {"probs": sample(BATCH, dtype, rng, 0.02, 0.98)}
    if name == "Bernoulli-logits":
        return {"logits": sample(BATCH, dtype, rng)}
    if name == "Categorical-probs":
        return {"probs": sample(BATCH + (4,), dtype, rng, 0.05, 1.0)}
    return {"logits": sample(BATCH + (4,), dtype, rng)}


def _values(name: str, params: dict, dtype: str, rng) -> np.ndarray:
    """Points of the support to evaluate log_prob at (with a leading sample dim of 2)."""
    if name == "Normal":
        return sample((2,) + BATCH, dtype, rng)
    if name == "Uniform":
        u = rng.uniform(0, 1, (2,) + BATCH)
        return (params["low"] + u * (params["high"] - params["low"])).astype(params["low"].dtype)
    if name.startswith("Bernoulli"):
        return (rng.random((2,) + BATCH) < 0.5).astype(params[next(iter(params))].dtype)
    return rng.integers(0, 4, (2,) + BATCH)


def _build(name: str, params: dict, lib):
    cls = getattr(lib, name.split("-")[0])
    return cls(**params)


NAMES = ["Normal", "Uniform", "Bernoulli-probs", "Bernoulli-logits", "Categorical-probs", "Categorical-logits"]


@pytest.mark.parametrize("name", NAMES)
def test_matches_torch(name, device, rng):
    for dtype in ("f32", "f64"):
        with case(dtype=dtype):
            arrays = _params(name, dtype, rng)
            pairs = {k: leaf(v, device) for k, v in arrays.items()}
            e = _build(name, {k: p[0] for k, p in pairs.items()}, D)
            t = _build(name, {k: p[1] for k, p in pairs.items()}, TD)
            assert e.batch_shape == tuple(t.batch_shape) and e.event_shape == tuple(t.event_shape)
            value = _values(name, arrays, dtype, rng)
            e_value = ember.tensor(value, device=device.autodiff())
            e_lp, t_lp = e.log_prob(e_value), t.log_prob(to_torch(value))
            check(e_lp, t_lp)
            check(e.entropy(), t.entropy())
            for prop in ("mean", "variance", "stddev", "mode"):
                with case(property=prop):
                    check(getattr(e, prop), getattr(t, prop))
            if name.split("-")[0] in ("Bernoulli", "Categorical"):
                check(e.probs, t.probs)
                check(e.logits, t.logits)
            else:
                check(e.cdf(e_value), t.cdf(to_torch(value)))
                q = rng.uniform(0.05, 0.95, BATCH).astype(value.dtype)
                check(e.icdf(ember.tensor(q, device=device)), t.icdf(to_torch(q)))
            loss_e = (e_lp * e_lp).sum() + e.entropy().sum()
            loss_t = (t_lp * t_lp).sum() + t.entropy().sum()
            grads = loss_e.backward()
            loss_t.backward()
            for key, (ep, tp) in pairs.items():
                with case(gradient_of=key):
                    check_grad(ep.grad(grads), tp.grad)


@pytest.mark.parametrize("name", ["Normal", "Uniform"])
def test_rsample_gradients_match_torch_given_the_same_noise(name, device, rng, monkeypatch):
    """torch's own rsample, fed the noise ember drew, gives ember's draws and gradients."""
    shape = (2,) + BATCH
    for dtype in ("f32", "f64"):
        with case(dtype=dtype):
            arrays = _params(name, dtype, rng)
            pairs = {k: leaf(v, device) for k, v in arrays.items()}
            e = _build(name, {k: p[0] for k, p in pairs.items()}, D)
            ember.seed(7)
            draw = ember.randn if name == "Normal" else ember.rand
            noise = to_torch(draw(*shape, dtype=dtype, device=device).numpy())
            ember.seed(7)
            e_x = e.rsample((2,))
            if name == "Normal":
                monkeypatch.setattr(TD.normal, "_standard_normal", lambda *a, **k: noise)
            else:
                monkeypatch.setattr(torch, "rand", lambda *a, **k: noise)
            t = _build(name, {k: p[1] for k, p in pairs.items()}, TD)
            t_x = t.rsample((2,))
            monkeypatch.undo()
            check(e_x, t_x)
            seed = sample(shape, dtype, rng)
            grads = (e_x * e_x * ember.tensor(seed, device=device.autodiff())).sum().backward()
            (t_x * t_x * to_torch(seed)).sum().backward()
            for key, (ep, tp) in pairs.items():
                with case(gradient_of=key):
                    check_grad(ep.grad(grads), tp.grad, dtype)
            assert e_x.requires_grad and not e.sample((2,)).requires_grad  # sample records no history


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_draws_are_the_same_on_every_device(dtype, device, rng):
    """A seed gives the numpy device's draws: uniform-based ones bit for bit, normal ones within ulps."""
    reference = ember.Device.numpy()
    probs = sample((3, 4), dtype, rng, 0.05, 1.0)
    draws = {}
    for where in (reference, device):
        ember.seed(3)
        zeros = ember.zeros(5, dtype=dtype, device=where)
        ds = [D.Normal(zeros, 2.0), D.Uniform(-1.0, zeros + 1), D.Bernoulli(probs=ember.tensor(probs[0], device=where)),
              D.Categorical(probs=ember.tensor(probs, device=where))]
        draws[where] = [np.asarray(d.sample((4,)).numpy()) for d in ds]
    normal, *exact = zip(draws[reference], draws[device])
    np.testing.assert_allclose(normal[1], normal[0], rtol=grad_tolerance(dtype)[0], atol=grad_tolerance(dtype)[1])
    for got, want in exact:
        np.testing.assert_array_equal(got, want)


def _within(got, want, standard_error) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert (np.abs(got - want) <= 5 * np.asarray(standard_error) + 1e-12).all(), f"{got} is not {want}"


def test_sample_statistics():
    """Large samples have the distributions' means, variances and frequencies (within 5 standard errors)."""
    ember.seed(11)
    n = 40_000
    normal = D.Normal(ember.tensor([-1.0, 2.0], dtype="f64"), ember.tensor([0.5, 3.0], dtype="f64"))
    x = normal.sample((n,)).numpy()
    _within(x.mean(0), [-1.0, 2.0], np.array([0.5, 3.0]) / np.sqrt(n))
    _within(x.var(0), [0.25, 9.0], np.array([0.25, 9.0]) * np.sqrt(2 / n))
    u = D.Uniform(ember.tensor([0.0, -2.0]), ember.tensor([1.0, 6.0])).sample((n,)).numpy()
    assert u.min(0).tolist() >= [0.0, -2.0] and (u.max(0) < [1.0, 6.0]).all()
    _within(u.mean(0), [0.5, 2.0], np.array([1, 8]) / np.sqrt(12 * n))
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    for draws in (D.Categorical(probs=ember.tensor(probs)).sample((n,)).numpy(),
                  D.Categorical(logits=ember.tensor(np.log(probs + 1e-30))).sample((n,)).numpy()):
        assert draws.dtype == np.int64 and set(np.unique(draws)) <= {0, 2, 3}
        freq = np.bincount(draws, minlength=4) / n
        _within(freq, probs, np.sqrt(probs * (1 - probs) / n))
    b = D.Bernoulli(probs=ember.tensor([0.2, 0.9])).sample((n,)).numpy()
    assert set(np.unique(b)) <= {0.0, 1.0}
    _within(b.mean(0), [0.2, 0.9], np.sqrt(np.array([0.16, 0.09]) / n))


def test_bad_arguments_raise_ember_errors():
    cases = [
        (lambda: D.Normal(0.0, ember.tensor([1.0, -2.0, 0.0])),
         r"Normal: scale of shape \(3,\) must be > 0, found -2.0, 0.0"),
        (lambda: D.Normal(float("nan"), 1.0), "Normal: loc .*not NaN"),
        (lambda: D.Uniform(ember.tensor([0.0, 2.0]), 1.0), r"Uniform: low of shape \(2,\) must be < high, found 2.0"),
        (lambda: D.Bernoulli(probs=ember.tensor([0.5, 1.5])), r"Bernoulli: probs .* in \[0, 1\], found 1.5"),
        (lambda: D.Categorical(probs=ember.tensor([1.0, -1.0, 1.0])), "Categorical: probs .* non-negative"),
        (lambda: D.Categorical(logits=ember.full((3,), float("-inf"))), "Categorical: logits"),
        (lambda: D.Normal(0.0, 1.0).log_prob(float("nan")), "Normal.log_prob: value"),
        (lambda: D.Uniform(0.0, 1.0).log_prob(ember.tensor([0.5, 1.0])),
         r"Uniform.log_prob: value .* \[low, high\), found 1.0"),
        (lambda: D.Bernoulli(probs=0.5).log_prob(0.5), "Bernoulli.log_prob: value .* 0 or 1, found 0.5"),
        (lambda: D.Categorical(logits=ember.zeros(3)).log_prob(ember.tensor([1, 3])), r"integer in \[0, 3\), found 3"),
    ]
    for build, message in cases:
        with pytest.raises(ember.errors.DomainError, match=message):
            build()
    with pytest.raises(ember.ShapeError, match=r"Normal.log_prob: value of shape \(4,\) does not broadcast"):
        D.Normal(ember.zeros(3), 1.0).log_prob(ember.zeros(4))
    with pytest.raises(ember.ShapeError, match="Normal: shapes"):
        D.Normal(ember.zeros(3), ember.ones(2))
    with pytest.raises(ValueError, match="exactly one of probs and logits"):
        D.Bernoulli()
    with pytest.raises(ember.ShapeError, match="Categorical: probs must have at least one dim"):
        D.Categorical(probs=ember.tensor(1.0))
    with pytest.raises(NotImplementedError, match="Categorical has no reparametrized sample"):
        D.Categorical(logits=ember.zeros(3)).rsample()
    assert np.isnan(D.Normal(0.0, -1.0, validate_args=False).log_prob(0.0).item())  # unchecked when asked
    D.Distribution.set_default_validate_args(False)
    try:
        D.Uniform(1.0, 0.0)
    finally:
        D.Distribution.set_default_validate_args(True)
