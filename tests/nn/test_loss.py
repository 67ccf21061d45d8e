"""Every loss against torch.nn.functional on random f64 inputs: outputs for each reduction and the
gradients of inputs (and differentiable targets); module forms and bad-input errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
import torch
import torch.nn.functional as TF

import ember
from ember.errors import DTypeError, ShapeError
from ember.nn import functional as F
from ember import nn

from .compare import DEVICE, compare, to_ember

REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name, kw", [("mse_loss", {}), ("l1_loss", {}), ("huber_loss", {"delta": 0.7}),
                                      ("smooth_l1_loss", {"beta": 0.6}), ("smooth_l1_loss", {"beta": 0.0})])
def test_regression(name, kw, reduction, rng):
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    compare(lambda a, b: getattr(F, name)(a, b, reduction=reduction, **kw),
            lambda a, b: getattr(TF, name)(a, b, reduction=reduction, **kw), [x, y], grad=[0, 1], rng=rng)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("log_input", [True, False])
@pytest.mark.parametrize("full", [True, False])
def test_poisson_nll(log_input, full, reduction, rng):
    x = rng.uniform(0.1, 3.0, (5, 2)) if not log_input else rng.standard_normal((5, 2))
    y = rng.integers(0, 6, (5, 2)).astype(np.float64)
    compare(lambda a, b: F.poisson_nll_loss(a, b, log_input=log_input, full=full, reduction=reduction),
            lambda a, b: TF.poisson_nll_loss(a, b, log_input=log_input, full=full, reduction=reduction),
            [x, y], grad=[0], rng=rng)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("var_shape", [(4, 3), (4, 1), (4,), (1, 3)])
def test_gaussian_nll(var_shape, reduction, rng):
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    var = rng.uniform(0.2, 2.0, var_shape)
    var.flat[0] = 1e-9  # below eps: clamped, gradient passes as if unclamped
    for full in (False, True):
        compare(lambda a, b, v: F.gaussian_nll_loss(a, b, v, full=full, reduction=reduction),
                lambda a, b, v: TF.gaussian_nll_loss(a, b, v, full=full, reduction=reduction),
                [x, y, var], grad=[0, 1, 2], rng=rng)


def test_gaussian_nll_float_var_and_errors(rng):
    x, y = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    compare(lambda a, b: F.gaussian_nll_loss(a, b, 0.5), lambda a, b: TF.gaussian_nll_loss(a, b, 0.5),
            [x, y], grad=[0])
    with pytest.raises(ShapeError, match="var of shape"):
        F.gaussian_nll_loss(to_ember(x), to_ember(y), to_ember(np.ones((2, 2))))
    with pytest.raises(ValueError, match="negative"):
        F.gaussian_nll_loss(to_ember(x), to_ember(y), to_ember(-np.ones((3, 2))))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(weighted, reduction, rng):
    p, t = rng.uniform(0.02, 0.98, (4, 3)), rng.uniform(0, 1, (4, 3))
    w = rng.uniform(0.5, 2.0, (3,)) if weighted else None
    compare(lambda a, b: F.binary_cross_entropy(a, b, weight=to_ember(w), reduction=reduction),
            lambda a, b: TF.binary_cross_entropy(a, b, weight=None if w is None else torch.tensor(w),
                                                 reduction=reduction), [p, t], grad=[0, 1], rng=rng)


def test_binary_cross_entropy_checks_range():
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        F.binary_cross_entropy(ember.tensor([1.5]), ember.tensor([1.0]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted, pos", [(False, False), (True, False), (False, True), (True, True)])
def test_bce_with_logits(weighted, pos, reduction, rng):
    x, t = rng.standard_normal((4, 3)) * 4, rng.uniform(0, 1, (4, 3))
    x[0, 0] = 60.0  # large logits stay finite
    w = rng.uniform(0.5, 2.0, (4, 1)) if weighted else None
    pw = rng.uniform(0.5, 3.0, (3,)) if pos else None
    tt = lambda v: None if v is None else torch.tensor(v)  # noqa: E731
    compare(lambda a, b: F.binary_cross_entropy_with_logits(a, b, weight=to_ember(w), pos_weight=to_ember(pw),
                                                            reduction=reduction),
            lambda a, b: TF.binary_cross_entropy_with_logits(a, b, weight=tt(w), pos_weight=tt(pw),
                                                             reduction=reduction),
            [x, t], grad=[0, 1], rng=rng)


@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(log_target, reduction, rng):
    x = np.log(rng.dirichlet(np.ones(4), size=3))
    t = rng.dirichlet(np.ones(4), size=3)
    if log_target:
        t = np.log(t)
    else:
        t[0, 1] = 0.0  # t log t is 0 at t = 0
    grad = [0, 1] if log_target else [0]
    compare(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target),
            lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=log_target), [x, t], grad=grad, rng=rng)


def _targets(rng, shape, classes, ignore=None):
    t = rng.integers(0, classes, shape)
    if ignore is not None:
        t.flat[::3] = ignore
    return t


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 3), (4,)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1])
def test_nll_loss(shape, weighted, ignore, reduction, rng):
    x = torch.log_softmax(torch.tensor(rng.standard_normal(shape)), dim=1 if len(shape) > 1 else 0).numpy()
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    t = _targets(rng, tshape, 4, ignore)
    w = rng.uniform(0.5, 2.0, (4,)) if weighted else None
    ii = -100 if ignore is None else ignore
    compare(lambda a: F.nll_loss(a, to_ember(t), weight=to_ember(w), ignore_index=ii, reduction=reduction),
            lambda a: TF.nll_loss(a, torch.tensor(t), weight=None if w is None else torch.tensor(w),
                                  ignore_index=ii, reduction=reduction), [x], grad=[0], rng=rng)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 3), (4,)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_indices(shape, weighted, smoothing, reduction, rng):
    x = rng.standard_normal(shape) * 2
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    ignore = 2 if len(shape) > 1 else -100
    t = _targets(rng, tshape, 4, ignore if len(shape) > 1 else None)
    w = rng.uniform(0.5, 2.0, (4,)) if weighted else None
    compare(lambda a: F.cross_entropy(a, to_ember(t), weight=to_ember(w), ignore_index=ignore,
                                      reduction=reduction, label_smoothing=smoothing),
            lambda a: TF.cross_entropy(a, torch.tensor(t), weight=None if w is None else torch.tensor(w),
                                       ignore_index=ignore, reduction=reduction, label_smoothing=smoothing),
            [x], grad=[0], rng=rng)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5, 4), (2, 4, 3)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probabilities(shape, weighted, smoothing, reduction, rng):
    x = rng.standard_normal(shape)
    p = np.moveaxis(rng.dirichlet(np.ones(4), size=(shape[0],) + shape[2:]), -1, 1)
    w = rng.uniform(0.5, 2.0, (4,)) if weighted else None
    compare(lambda a, b: F.cross_entropy(a, b, weight=to_ember(w), reduction=reduction, label_smoothing=smoothing),
            lambda a, b: TF.cross_entropy(a, b, weight=None if w is None else torch.tensor(w),
                                          reduction=reduction, label_smoothing=smoothing),
            [x, p], grad=[0, 1], rng=rng)


def test_cross_entropy_errors():
    x = ember.zeros(3, 4)
    with pytest.raises(ShapeError, match=r"target of shape \(2,\)"):
        F.cross_entropy(x, ember.tensor([0, 1]))
    with pytest.raises(IndexError, match="target 4 is out of bounds for 4 classes"):
        F.cross_entropy(x, ember.tensor([0, 4, 1]))
    with pytest.raises(ShapeError, match=r"weight must have shape \(4,\)"):
        F.cross_entropy(x, ember.tensor([0, 1, 2]), weight=ember.ones(3))
    with pytest.raises(ShapeError, match="probability target"):
        F.cross_entropy(x, ember.zeros(3, 5))
    with pytest.raises(DTypeError, match="float"):
        F.cross_entropy(ember.zeros(3, 4, dtype="i64"), ember.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.cross_entropy(x, ember.tensor([0, 1, 2]), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, ember.tensor([0, 1, 2]), label_smoothing=1.5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cosine_embedding(reduction, rng):
    a, b = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    y = np.array([1, -1, 1, -1, -1, 1])
    for margin in (0.0, 0.3):
        compare(lambda p, q: F.cosine_embedding_loss(p, q, to_ember(y), margin=margin, reduction=reduction),
                lambda p, q: TF.cosine_embedding_loss(p, q, torch.tensor(y), margin=margin, reduction=reduction),
                [a, b], grad=[0, 1], rng=rng)
    compare(lambda p, q: F.cosine_embedding_loss(p, q, to_ember(np.array(-1)), reduction=reduction),
            lambda p, q: TF.cosine_embedding_loss(p, q, torch.tensor(-1), reduction=reduction),
            [a[0], b[0]], grad=[0, 1], rng=rng)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_ranking_and_hinge(reduction, rng):
    a, b = rng.standard_normal(7), rng.standard_normal(7)
    y = rng.choice([-1.0, 1.0], 7)
    compare(lambda p, q: F.margin_ranking_loss(p, q, to_ember(y), margin=0.4, reduction=reduction),
            lambda p, q: TF.margin_ranking_loss(p, q, torch.tensor(y), margin=0.4, reduction=reduction),
            [a, b], grad=[0, 1], rng=rng)
    d = rng.uniform(0, 2, (3, 4))
    y2 = rng.choice([-1.0, 1.0], (3, 4))
    compare(lambda p: F.hinge_embedding_loss(p, to_ember(y2), margin=1.2, reduction=reduction),
            lambda p: TF.hinge_embedding_loss(p, torch.tensor(y2), margin=1.2, reduction=reduction),
            [d], grad=[0], rng=rng)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p, swap", [(2.0, False), (1.0, False), (2.0, True), (3.0, True)])
def test_triplet_margin(p, swap, reduction, rng):
    a, pos, neg = (rng.standard_normal((5, 3)) for _ in range(3))
    compare(lambda x, y, z: F.triplet_margin_loss(x, y, z, margin=0.8, p=p, swap=swap, reduction=reduction),
            lambda x, y, z: TF.triplet_margin_loss(x, y, z, margin=0.8, p=p, swap=swap, reduction=reduction),
            [a, pos, neg], grad=[0, 1, 2], rng=rng)


# ---- CTC -------------------------------------------------------------------------------------------

def _ctc_case(rng, steps=7, batch=3, classes=5):
    logits = rng.standard_normal((steps, batch, classes))
    in_lens = np.array([steps, steps - 2, steps - 1])[:batch]
    tgt_lens = np.array([3, 2, 0])[:batch]
    targets = rng.integers(1, classes, (batch, 3))
    targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between
    return logits, targets, in_lens, tgt_lens


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_against_torch(reduction, concatenated, rng):
    logits, targets, in_lens, tgt_lens = _ctc_case(rng)
    if concatenated:
        targets = np.concatenate([row[:n] for row, n in zip(targets, tgt_lens)])
    else:
        targets[1, 2:] = -1  # padding past a target's length is never read
        targets[2, :] = 0
    # Through log_softmax: PyTorch's ctc gradient w.r.t. log_probs assumes normalized inputs, and the
    # gradient w.r.t. the logits is the same for both.
    compare(lambda x: F.ctc_loss(x.log_softmax(-1), to_ember(targets), to_ember(in_lens), list(tgt_lens),
                                 reduction=reduction),
            lambda x: TF.ctc_loss(x.log_softmax(-1), torch.tensor(targets), torch.tensor(in_lens),
                                  torch.tensor(tgt_lens), reduction=reduction),
            [logits], grad=[0], rng=rng, rtol=1e-8, atol=1e-10)


def test_ctc_blank_last_and_unbatched(rng):
    logits = rng.standard_normal((6, 4))
    target = np.array([0, 1, 1])
    compare(lambda x: F.ctc_loss(x.log_softmax(-1), to_ember(target), 6, 3, blank=3),
            lambda x: TF.ctc_loss(x.log_softmax(-1), torch.tensor(target), torch.tensor(6), torch.tensor(3),
                                  blank=3), [logits], grad=[0], rng=rng, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_impossible_alignment(zero_infinity, rng):
    logits = rng.standard_normal((3, 2, 4))
    targets = np.array([[1, 1, 2], [1, 2, 3]])  # sample 0 needs 4 frames, has 3
    in_lens, tgt_lens = np.array([3, 3]), np.array([3, 3])
    e = F.ctc_loss(to_ember(logits).log_softmax(-1), to_ember(targets), in_lens, tgt_lens, reduction="none",
                   zero_infinity=zero_infinity)
    t = TF.ctc_loss(torch.tensor(logits).log_softmax(-1), torch.tensor(targets), torch.tensor(in_lens),
                    torch.tensor(tgt_lens), reduction="none", zero_infinity=zero_infinity)
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-9)
    if zero_infinity:
        compare(lambda x: F.ctc_loss(x.log_softmax(-1), to_ember(targets), in_lens, tgt_lens, zero_infinity=True),
                lambda x: TF.ctc_loss(x.log_softmax(-1), torch.tensor(targets), torch.tensor(in_lens),
                                      torch.tensor(tgt_lens), zero_infinity=True), [logits], grad=[0], rng=rng)


def test_ctc_errors():
    lp = ember.zeros(4, 2, 3)
    with pytest.raises(ShapeError, match="input_lengths"):
        F.ctc_loss(lp, ember.tensor([[1], [2]]), [4, 5], [1, 1])
    with pytest.raises(ValueError, match="other than blank"):
        F.ctc_loss(lp, ember.tensor([[0], [2]]), [4, 4], [1, 1])
    with pytest.raises(ShapeError, match="concatenated"):
        F.ctc_loss(lp, ember.tensor([1, 2, 1]), [4, 4], [1, 1])
    with pytest.raises(ShapeError, match="one entry per sample"):
        F.ctc_loss(lp, ember.tensor([[1], [2]]), [4], [1, 1])


# ---- module forms ----------------------------------------------------------------------------------

MODULE_CASES = [
    (nn.MSELoss, torch.nn.MSELoss, {"reduction": "sum"}),
    (nn.L1Loss, torch.nn.L1Loss, {}),
    (nn.HuberLoss, torch.nn.HuberLoss, {"delta": 0.5}),
    (nn.SmoothL1Loss, torch.nn.SmoothL1Loss, {"beta": 0.5, "reduction": "none"}),
    (nn.KLDivLoss, torch.nn.KLDivLoss, {"reduction": "batchmean", "log_target": True}),
    (nn.BCEWithLogitsLoss, torch.nn.BCEWithLogitsLoss, {}),
    (nn.PoissonNLLLoss, torch.nn.PoissonNLLLoss, {"full": True}),
]


@pytest.mark.parametrize("ours, theirs, kw", MODULE_CASES, ids=[c[0].__name__ for c in MODULE_CASES])
def test_module_forms(ours, theirs, kw, rng):
    x, y = rng.standard_normal((3, 4)), rng.uniform(0, 1, (3, 4))
    compare(ours(**kw), theirs(**kw), [x, y], grad=[0], rng=rng)


def test_weighted_module_forms_keep_weights_as_buffers(rng):
    w = rng.uniform(0.5, 2, (4,))
    x, t = rng.standard_normal((6, 4)), rng.integers(0, 4, 6)
    ce = nn.CrossEntropyLoss(weight=to_ember(w), label_smoothing=0.1, ignore_index=3)
    compare(lambda a: ce(a, to_ember(t)),
            lambda a: torch.nn.CrossEntropyLoss(weight=torch.tensor(w), label_smoothing=0.1, ignore_index=3)(
                a, torch.tensor(t)), [x], grad=[0], rng=rng)
    assert list(ce.state_dict()) == ["weight"]
    assert "label_smoothing=0.1" in repr(ce) and "ignore_index=3" in repr(ce)
    nll = nn.NLLLoss(weight=to_ember(w))
    compare(lambda a: nll(a, to_ember(t)), lambda a: torch.nn.NLLLoss(weight=torch.tensor(w))(a, torch.tensor(t)),
            [x], grad=[0], rng=rng)
    bce = nn.BCELoss(weight=to_ember(w))
    p = rng.uniform(0.1, 0.9, (6, 4))
    compare(lambda a: bce(a, to_ember(p)), lambda a: torch.nn.BCELoss(weight=torch.tensor(w))(a, torch.tensor(p)),
            [p], grad=[0], rng=rng)


def test_other_module_forms(rng):
    a, b, c = (rng.standard_normal((4, 3)) for _ in range(3))
    y = np.array([1, -1, -1, 1])
    compare(lambda p, q: nn.CosineEmbeddingLoss(margin=0.1)(p, q, to_ember(y)),
            lambda p, q: torch.nn.CosineEmbeddingLoss(margin=0.1)(p, q, torch.tensor(y)), [a, b], grad=[0, 1])
    compare(lambda p, q: nn.MarginRankingLoss(margin=0.2)(p[:, 0], q[:, 0], to_ember(y.astype(float))),
            lambda p, q: torch.nn.MarginRankingLoss(margin=0.2)(p[:, 0], q[:, 0], torch.tensor(y, dtype=p.dtype)),
            [a, b], grad=[0, 1])
    compare(lambda p: nn.HingeEmbeddingLoss(margin=0.5)(p[:, 0], to_ember(y.astype(float))),
            lambda p: torch.nn.HingeEmbeddingLoss(margin=0.5)(p[:, 0], torch.tensor(y, dtype=p.dtype)), [a], grad=[0])
    compare(nn.TripletMarginLoss(margin=0.3, swap=True), torch.nn.TripletMarginLoss(margin=0.3, swap=True),
            [a, b, c], grad=[0, 1, 2])
    var = rng.uniform(0.5, 1.5, (4, 3))
    compare(nn.GaussianNLLLoss(full=True), torch.nn.GaussianNLLLoss(full=True), [a, b, var], grad=[0, 2])
    logits = rng.standard_normal((5, 2, 4))
    tg, il, tl = np.array([[1, 2], [3, 1]]), np.array([5, 4]), np.array([2, 1])
    compare(lambda x: nn.CTCLoss(reduction="sum")(x.log_softmax(-1), to_ember(tg), il, tl),
            lambda x: torch.nn.CTCLoss(reduction="sum")(x.log_softmax(-1), torch.tensor(tg), torch.tensor(il),
                                                        torch.tensor(tl)), [logits], grad=[0])


def test_loss_module_rejects_unknown_option():
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['smoothing'\]"):
        nn.CrossEntropyLoss(smoothing=0.1)


def test_loss_weight_buffer_moves_with_module():
    ce = nn.CrossEntropyLoss(weight=ember.ones(3, device=ember.Device.numpy()))
    ce.to(DEVICE)
    assert ce.weight.device == DEVICE


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(ShapeError, match=r"input \(2, 3\), target \(3, 2\)"):
        F.mse_loss(ember.zeros(2, 3), ember.zeros(3, 2))


F32_CASES = {
    "cross_entropy": lambda m, x, t, i: m.cross_entropy(x, i, label_smoothing=0.1),
    "nll_loss": lambda m, x, t, i: m.nll_loss(x.log_softmax(1), i),
    "bce_with_logits": lambda m, x, t, i: m.binary_cross_entropy_with_logits(x, t),
    "kl_div": lambda m, x, t, i: m.kl_div(x.log_softmax(1), t.softmax(1), reduction="batchmean"),
    "huber_loss": lambda m, x, t, i: m.huber_loss(x, t, delta=0.5),
    "poisson_nll_loss": lambda m, x, t, i: m.poisson_nll_loss(x, t, full=True),
}


@pytest.mark.parametrize("name", list(F32_CASES))
def test_f32_inputs_give_f32_losses(name, rng):
    x, t = rng.standard_normal((4, 3)).astype(np.float32), rng.uniform(0, 3, (4, 3)).astype(np.float32)
    i = rng.integers(0, 3, 4)
    out = F32_CASES[name](F, ember.tensor(x), ember.tensor(t), ember.tensor(i))
    expected = F32_CASES[name](TF, torch.tensor(x), torch.tensor(t), torch.tensor(i))
    assert out.dtype == ember.f32
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_default_ignore_index(reduction, rng):
    x = rng.standard_normal((3, 4, 5))
    t = rng.integers(0, 4, (3, 5))
    t[0, :2] = -100
    t[2, 4] = -100
    w = rng.uniform(0.5, 2.0, 4)
    compare(lambda a: F.cross_entropy(a, to_ember(t), weight=to_ember(w), reduction=reduction, label_smoothing=0.05),
            lambda a: TF.cross_entropy(a, torch.tensor(t), weight=torch.tensor(w), reduction=reduction,
                                       label_smoothing=0.05), [x], grad=[0], rng=rng)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_all_ignored_mean_is_nan_with_zero_gradient(smoothing, rng):
    t = ember.tensor([-100, -100])
    out = compare(lambda a: F.cross_entropy(a, t, label_smoothing=smoothing),
                  lambda a: TF.cross_entropy(a, torch.tensor([-100, -100]), label_smoothing=smoothing),
                  [rng.standard_normal((2, 3))], grad=[0], rng=rng)
    assert np.isnan(out.item())


@given(n=st.integers(1, 4), c=st.integers(1, 5), extra=st.lists(st.integers(1, 3), max_size=2),
       weighted=st.booleans(), smoothing=st.sampled_from([0.0, 0.15, 1.0]),
       reduction=st.sampled_from(REDUCTIONS), seed=st.integers(0, 2**31))
def test_cross_entropy_any_shape(n, c, extra, weighted, smoothing, reduction, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *extra))
    t = rng.integers(-1, c, (n, *extra))  # -1: the ignored class
    w = rng.uniform(0.5, 2.0, c) if weighted else None
    compare(lambda a: F.cross_entropy(a, to_ember(t), weight=to_ember(w), ignore_index=-1, reduction=reduction,
                                      label_smoothing=smoothing),
            lambda a: TF.cross_entropy(a, torch.tensor(t), weight=None if w is None else torch.tensor(w),
                                       ignore_index=-1, reduction=reduction, label_smoothing=smoothing),
            [x], grad=[0], rng=rng)


@settings(max_examples=20)  # each example runs the recursion step by step: keep the suite fast
@given(steps=st.integers(1, 6), batch=st.integers(1, 3), classes=st.integers(2, 5), blank_last=st.booleans(),
       reduction=st.sampled_from(REDUCTIONS), seed=st.integers(0, 2**31))
def test_ctc_any_lengths(steps, batch, classes, blank_last, reduction, seed):
    rng = np.random.default_rng(seed)
    blank = classes - 1 if blank_last else 0
    logits = rng.standard_normal((steps, batch, classes))
    in_lens = rng.integers(1, steps + 1, batch)
    tgt_lens = rng.integers(0, 4, batch)
    labels = rng.integers(0, classes - 1, (batch, 3))
    targets = labels + (labels >= blank)  # every label but the blank
    # zero_infinity: targets too long for their input give 0 in both libraries.
    compare(lambda x: F.ctc_loss(x.log_softmax(-1), to_ember(targets), in_lens, tgt_lens, blank=blank,
                                 reduction=reduction, zero_infinity=True),
            lambda x: TF.ctc_loss(x.log_softmax(-1), torch.tensor(targets), torch.tensor(in_lens),
                                  torch.tensor(tgt_lens), blank=blank, reduction=reduction, zero_infinity=True),
            [logits], grad=[0], rng=rng, rtol=1e-8, atol=1e-10)
