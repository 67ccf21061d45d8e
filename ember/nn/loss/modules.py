"""Module forms of the losses: each holds the keyword options of its function and calls it.

`CrossEntropyLoss(weight=w, label_smoothing=0.1)(logits, target)` is
`cross_entropy(logits, target, weight=w, label_smoothing=0.1)`. Tensor options (`weight`,
`pos_weight`) are buffers of the module, so they move with `to(device)` and appear in `state_dict`.

Example:
    >>> MSELoss(reduction="sum")(ember.tensor([1.0, 2.0]), ember.zeros(2)).item()
    5.0
"""

from __future__ import annotations

from ..wrap import FunctionModule
from .classification import binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, kl_div, nll_loss
from .ctc import ctc_loss
from .margin import cosine_embedding_loss, hinge_embedding_loss, margin_ranking_loss, triplet_margin_loss
from .regression import gaussian_nll_loss, huber_loss, l1_loss, mse_loss, poisson_nll_loss, smooth_l1_loss


class Loss(FunctionModule):
    """Base of the loss modules: the options of `function` (e.g. `reduction`) are the module's settings.

    Args:
        **options: keyword options of `function` (anything else raises `TypeError` naming it).
    """


class MSELoss(Loss):
    """Mean squared error (see `mse_loss`). Args: reduction.

    Example:
        >>> MSELoss()(prediction, target)
    """

    function = staticmethod(mse_loss)


class L1Loss(Loss):
    """Mean absolute error (see `l1_loss`). Args: reduction.

    Example:
        >>> L1Loss()(prediction, target)
    """

    function = staticmethod(l1_loss)


class HuberLoss(Loss):
    """Huber loss (see `huber_loss`). Args: reduction, delta.

    Example:
        >>> HuberLoss(delta=0.5)(prediction, target)
    """

    function = staticmethod(huber_loss)


class SmoothL1Loss(Loss):
    """Smooth L1 loss (see `smooth_l1_loss`). Args: reduction, beta.

    Example:
        >>> SmoothL1Loss(beta=0.5)(prediction, target)
    """

    function = staticmethod(smooth_l1_loss)


class PoissonNLLLoss(Loss):
    """Poisson negative log likelihood (see `poisson_nll_loss`). Args: log_input, full, eps, reduction.

    Example:
        >>> PoissonNLLLoss(log_input=False)(rate, counts)
    """

    function = staticmethod(poisson_nll_loss)


class GaussianNLLLoss(Loss):
    """Gaussian negative log likelihood (see `gaussian_nll_loss`). Args: full, eps, reduction.

    Example:
        >>> GaussianNLLLoss()(mean, target, var)
    """

    function = staticmethod(gaussian_nll_loss)


class CrossEntropyLoss(Loss):
    """Cross entropy on logits (see `cross_entropy`). Args: weight, ignore_index, reduction,
    label_smoothing.

    Example:
        >>> CrossEntropyLoss(label_smoothing=0.1)(logits, classes)
    """

    function = staticmethod(cross_entropy)


class NLLLoss(Loss):
    """Negative log likelihood on log-probabilities (see `nll_loss`). Args: weight, ignore_index,
    reduction.

    Example:
        >>> NLLLoss()(log_probs, classes)
    """

    function = staticmethod(nll_loss)


class BCELoss(Loss):
    """Binary cross entropy on probabilities (see `binary_cross_entropy`). Args: weight, reduction.

    Example:
        >>> BCELoss()(probabilities, targets)
    """

    function = staticmethod(binary_cross_entropy)


class BCEWithLogitsLoss(Loss):
    """Binary cross entropy on logits (see `binary_cross_entropy_with_logits`). Args: weight,
    pos_weight, reduction.

    Example:
        >>> BCEWithLogitsLoss(pos_weight=ember.full((3,), 2.0))(logits, targets)
    """

    function = staticmethod(binary_cross_entropy_with_logits)


class KLDivLoss(Loss):
    """Kullback-Leibler divergence (see `kl_div`). Args: reduction (incl. "batchmean"), log_target.

    Example:
        >>> KLDivLoss(reduction="batchmean")(log_q, p)
    """

    function = staticmethod(kl_div)


class CosineEmbeddingLoss(Loss):
    """Cosine embedding loss (see `cosine_embedding_loss`). Args: margin, reduction.

    Example:
        >>> CosineEmbeddingLoss(margin=0.2)(a, b, labels)
    """

    function = staticmethod(cosine_embedding_loss)


class MarginRankingLoss(Loss):
    """Margin ranking loss (see `margin_ranking_loss`). Args: margin, reduction.

    Example:
        >>> MarginRankingLoss(margin=1.0)(scores1, scores2, labels)
    """

    function = staticmethod(margin_ranking_loss)


class HingeEmbeddingLoss(Loss):
    """Hinge embedding loss (see `hinge_embedding_loss`). Args: margin, reduction.

    Example:
        >>> HingeEmbeddingLoss(margin=2.0)(distances, labels)
    """

    function = staticmethod(hinge_embedding_loss)


class TripletMarginLoss(Loss):
    """Triplet margin loss (see `triplet_margin_loss`). Args: margin, p, eps, swap, reduction.

    Example:
        >>> TripletMarginLoss(margin=0.5, swap=True)(anchor, positive, negative)
    """

    function = staticmethod(triplet_margin_loss)


class CTCLoss(Loss):
    """Connectionist temporal classification loss (see `ctc_loss`). Args: blank, reduction,
    zero_infinity.

    Example:
        >>> CTCLoss(blank=0)(log_probs, targets, input_lengths, target_lengths)
    """

    function = staticmethod(ctc_loss)
