"""Losses for classification: cross entropy, negative log likelihood, binary cross entropy (on
probabilities and on logits) and the Kullback-Leibler divergence. Formulas, weighting and reductions are
PyTorch's.

The class dim is dim 1 of an input of shape (N, C) or (N, C, d1, ...), and dim 0 of an unbatched input
of shape (C,).

Example:
    >>> logits = ember.tensor([[2.0, 0.0, -1.0]])
    >>> round(cross_entropy(logits, ember.tensor([0])).item(), 4)
    0.1698
"""

from __future__ import annotations

from ... import amp
from ...api.activation import log_softmax
from ...tensor import value_bounds
from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from ...api import rowwise
from .reduction import check_reduction, check_same_shape, floating, reduce


def _class_dim(op: str, input: Tensor) -> int:
    if input.ndim == 0:
        raise ShapeError(op, "input must have a class dim: shape (C,), (N, C) or (N, C, d1, ...), got ()")
    return 1 if input.ndim >= 2 else 0


def _check_weight(op: str, weight: Tensor | None, classes: int) -> None:
    if weight is not None and weight.shape != (classes,):
        raise ShapeError(op, f"weight must have shape ({classes},), one entry per class, got {weight.shape}")


def _class_targets(op: str, input: Tensor, target: Tensor, ignore_index: int) -> tuple[Tensor, Tensor]:
    """Check integer class targets; return them with ignored entries set to 0, and the kept mask."""
    cdim = _class_dim(op, input)
    if not target.dtype.is_int:
        raise DTypeError(f"{op}: class-index targets must be an integer tensor, got {target.dtype}")
    want = input.shape[:cdim] + input.shape[cdim + 1:]
    if target.shape != want:
        raise ShapeError(op, f"target of shape {target.shape} does not fit input of shape {input.shape}: "
                             f"expected {want}")
    classes = input.shape[cdim]
    kept = target != ignore_index
    # Targets are data: checking their range reads them on the host, like index bounds checks do, unless
    # their bounds are known there (uploaded targets: on a GPU the read would wait for all queued work).
    known = value_bounds(target)
    if known is None or known[0] < 0 or known[1] >= classes:
        host = target.numpy()
        bad = host[(host != ignore_index) & ((host < 0) | (host >= classes))]
        if bad.size:
            raise IndexError(f"{op}: target {int(bad[0])} is out of bounds for {classes} classes")
    return target.masked_fill(~kept, 0), kept


def _class_weights(weight: Tensor | None, safe: Tensor, kept: Tensor, like: Tensor) -> Tensor:
    """The weight of each target's class (0 where ignored), in the dtype of `like`."""
    mask = kept.cast(like.dtype)
    if weight is None:
        return mask
    picked = weight.cast(like.dtype).index_select(0, safe.reshape(-1)).reshape(safe.shape)
    return picked * mask


def _along_class_dim(weight: Tensor, input: Tensor, cdim: int) -> Tensor:
    """`weight` (C,) shaped to broadcast along the class dim of `input`."""
    return weight.cast(input.dtype).reshape((input.shape[cdim],) + (1,) * (input.ndim - cdim - 1))


@amp.float32
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log likelihood of class indices under log-probabilities.

    Args:
        input: log-probabilities, (N, C), (N, C, d1, ...) or (C,).
        target: class indices, (N,), (N, d1, ...) or (); entries equal to `ignore_index` count nothing.
        weight: optional (C,) weight per class.
        ignore_index: a target value that is skipped.
        reduction: `"none"` gives `l_n = -w[y_n] input[n, y_n]` (0 where ignored); `"sum"` their sum;
            `"mean"` their sum divided by `sum_n w[y_n]` over the kept entries (the weighted mean).

    Example:
        >>> nll_loss(ember.tensor([[-0.5, -1.0]]), ember.tensor([1])).item()
        1.0
    """
    op = "nll_loss"
    floating(op, input, "input")
    check_reduction(op, reduction)
    cdim = _class_dim(op, input)
    _check_weight(op, weight, input.shape[cdim])
    safe, kept = _class_targets(op, input, target, ignore_index)
    return _picked_nll(input, safe, kept, weight, reduction, cdim)


def _picked_nll(logp: Tensor, safe: Tensor, kept: Tensor, weight: Tensor | None, reduction: str,
                cdim: int) -> Tensor:
    """`nll_loss` once the targets are checked (`safe`: ignored set to 0; `kept`: the mask)."""
    return _reduced_nll(-logp.gather(cdim, safe.unsqueeze(cdim)).squeeze(cdim), safe, kept, weight, reduction)


def _reduced_nll(nll: Tensor, safe: Tensor, kept: Tensor, weight: Tensor | None, reduction: str) -> Tensor:
    """Each target's `-logp[y]` (`nll`) weighted, ignored entries zeroed, and reduced."""
    w = _class_weights(weight, safe, kept, nll)
    loss = nll * w
    if reduction == "mean":
        return _weighted_mean(loss.sum(), w.sum())
    return loss.sum() if reduction == "sum" else loss


def _weighted_mean(total: Tensor, weight_sum: Tensor) -> Tensor:
    """`total / weight_sum`; NaN when every target is ignored, with a zero gradient (as in PyTorch)."""
    empty = weight_sum == 0
    return (total / weight_sum.masked_fill(empty, 1.0)).masked_fill(empty, float("nan"))


@amp.float32
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy between logits and class indices or class probabilities.

    Args:
        input: unnormalized logits, (N, C), (N, C, d1, ...) or (C,).
        target: class indices (an integer tensor of the input's shape without the class dim) or class
            probabilities (a float tensor of the input's shape).
        weight: optional (C,) weight per class.
        ignore_index: with class indices, a target value that is skipped.
        reduction: `"mean"`, `"sum"` or `"none"`. With indices the mean is weighted like `nll_loss`;
            with probabilities it divides by the number of samples N * d1 * ... .
        label_smoothing: `eps` in [0, 1]: the target becomes `(1 - eps) * target + eps / C`. With indices
            this is `(1 - eps) * nll + eps / C * smooth` where `smooth_n = -sum_c w_c logp[n, c]`,
            reduced like the nll part (PyTorch's formula).
    With `logp = log_softmax(input)` along the class dim, the loss per sample is `-w[y] logp[y]` for an
    index `y`, or `-sum_c w_c p_c logp_c` for probabilities `p`.

    Example:
        >>> logits = ember.tensor([[2.0, 0.0, -1.0]])
        >>> round(cross_entropy(logits, ember.tensor([0]), label_smoothing=0.1).item(), 4)
        0.3365
    """
    op = "cross_entropy"
    floating(op, input, "input")
    check_reduction(op, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")
    cdim = _class_dim(op, input)
    classes = input.shape[cdim]
    _check_weight(op, weight, classes)
    if not target.dtype.is_float and label_smoothing == 0.0 and input.ndim == 2 and rowwise.routes(input):
        # logits (N, C) on a GPU cube target: one op reads them once; no (N, C) log-probabilities are kept
        safe, kept = _class_targets(op, input, target, ignore_index)
        nll = rowwise.cross_entropy_rows(input, safe.cast("i32"))[:, 0].cast(input.dtype)
        return _reduced_nll(nll, safe, kept, weight, reduction)
    logp = log_softmax(input, cdim)
    if target.dtype.is_float:
        return _soft_cross_entropy(logp, target, weight, reduction, label_smoothing, cdim)
    safe, kept = _class_targets(op, input, target, ignore_index)
    nll = _picked_nll(logp, safe, kept, weight, reduction, cdim)
    if label_smoothing == 0.0:
        return nll
    weighted = logp if weight is None else logp * _along_class_dim(weight, logp, cdim)
    smooth = (-weighted.sum(dim=cdim)).masked_fill(~kept, 0.0)
    if reduction == "mean":
        smooth = _weighted_mean(smooth.sum(), _class_weights(weight, safe, kept, input).sum())
    elif reduction == "sum":
        smooth = smooth.sum()
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / classes)


def _soft_cross_entropy(logp: Tensor, target: Tensor, weight: Tensor | None, reduction: str,
                        label_smoothing: float, cdim: int) -> Tensor:
    if target.shape != logp.shape:
        raise ShapeError("cross_entropy", f"probability target of shape {target.shape} must have the "
                                          f"input's shape {logp.shape}")
    classes = logp.shape[cdim]
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    terms = logp * target
    if weight is not None:
        terms = terms * _along_class_dim(weight, logp, cdim)
    loss = -terms.sum(dim=cdim)
    if reduction == "mean":
        return loss.sum() / (logp.numel // classes)
    return loss.sum() if reduction == "sum" else loss


@amp.float32
def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """Binary cross entropy between probabilities and targets in [0, 1].

    Args:
        input: probabilities in [0, 1], any shape.
        target: targets of the same shape.
        weight: optional rescaling weight broadcast to the input's shape.
        reduction: `"mean"`, `"sum"` or `"none"` over
            `l = -w (t log x + (1 - t) log(1 - x))`, each log clamped to >= -100 as in PyTorch.

    Example:
        >>> round(binary_cross_entropy(ember.tensor([0.8]), ember.tensor([1.0])).item(), 4)
        0.2231
    """
    op = "binary_cross_entropy"
    floating(op, input, "input")
    floating(op, target, "target")
    check_same_shape(op, input=input, target=target)
    check_reduction(op, reduction)
    host = input.numpy()
    if host.size and (host.min() < 0 or host.max() > 1):
        raise ValueError(f"{op}: every element of input must be in [0, 1] (probabilities); "
                         "use binary_cross_entropy_with_logits for logits")
    loss = -(target * input.log().clamp(min=-100) + (1 - target) * (1 - input).log().clamp(min=-100))
    if weight is not None:
        loss = loss * weight
    return reduce(loss, reduction, op)


@amp.float32
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     pos_weight: Tensor | None = None, reduction: str = "mean") -> Tensor:
    """Binary cross entropy on logits: `sigmoid` and the loss fused in a numerically stable form.

    Args:
        input: logits `x`, any shape.
        target: targets `t` in [0, 1] of the same shape.
        weight: optional rescaling weight broadcast to the input's shape.
        pos_weight: optional weight `p` of positive examples, broadcast along the last dim (one per class).
        reduction: `"mean"`, `"sum"` or `"none"` over
            `l = -w (p t log sigmoid(x) + (1 - t) log(1 - sigmoid(x)))`.

    Example:
        >>> round(binary_cross_entropy_with_logits(ember.tensor([0.0]), ember.tensor([1.0])).item(), 4)
        0.6931
    """
    op = "binary_cross_entropy_with_logits"
    floating(op, input, "input")
    floating(op, target, "target")
    check_same_shape(op, input=input, target=target)
    check_reduction(op, reduction)
    # -log sigmoid(x) = log1p(exp(-|x|)) + max(-x, 0): no overflow for large |x|.
    neg_log_sigmoid = (-input.abs()).exp().log1p() + (-input).clamp(min=0)
    scale = 1 if pos_weight is None else (pos_weight - 1) * target + 1
    loss = (1 - target) * input + scale * neg_log_sigmoid
    if weight is not None:
        loss = loss * weight
    return reduce(loss, reduction, op)


@amp.float32
def kl_div(input: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """Kullback-Leibler divergence `KL(target || model)` with the model given as log-probabilities.

    Args:
        input: log-probabilities of the model.
        target: probabilities (or log-probabilities if `log_target`) of the same shape.
        reduction: `"mean"` (over all elements), `"batchmean"` (sum divided by the batch size, the true
            KL per sample), `"sum"` or `"none"` over `l = t (log t - input)` (0 where t = 0).
        log_target: whether `target` holds log-probabilities: `l = exp(t) (t - input)`.

    Example:
        >>> kl_div(ember.tensor([0.0]), ember.tensor([1.0]), reduction="sum").item()
        0.0
    """
    op = "kl_div"
    floating(op, input, "input")
    floating(op, target, "target")
    check_same_shape(op, input=input, target=target)
    check_reduction(op, reduction, ("none", "mean", "sum", "batchmean"))
    if log_target:
        loss = target.exp() * (target - input)
    else:
        positive = target > 0
        # t log t is 0 at t = 0; the log is taken of a safe value so no NaN enters the gradient.
        t_log_t = (target * target.masked_fill(~positive, 1.0).log()).masked_fill(~positive, 0.0)
        loss = t_log_t - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return reduce(loss, reduction, op)
