"""Connectionist temporal classification loss: the forward algorithm in log space, written with tensor
ops so that its gradient comes from autodiff.

For a target `l` of length L the extended label sequence `l'` (length S = 2L + 1) interleaves blanks:
`blank, l1, blank, l2, ..., blank`. With emissions `e_t(s) = log_probs[t, l'_s]`,

    alpha_0(0) = e_0(0),  alpha_0(1) = e_0(1)
    alpha_t(s) = e_t(s) + logsumexp(alpha_{t-1}(s), alpha_{t-1}(s-1), alpha_{t-1}(s-2))

where the `s-2` term only counts when `l'_s` is not blank and differs from `l'_{s-2}`. The loss is
`-logsumexp(alpha_{T-1}(S-1), alpha_{T-1}(S-2))` with `T` the sample's input length. The batch runs
together: one step per time step over all samples and states.

Example:
    >>> log_probs = ember.randn(6, 2, 4).log_softmax(-1)
    >>> ctc_loss(log_probs, ember.tensor([[1, 2], [3, 3]]), [6, 5], [2, 2]).shape
    ()
"""

from __future__ import annotations

import numpy as np

from ...api.creation import from_numpy
from ...errors import ShapeError
from ...tensor import Tensor
from .reduction import check_reduction, floating

# Log-space zero. A finite stand-in for -inf keeps every exp/log step finite, so no NaN (0 * inf) can
# enter the gradient; anything below half of it is an impossible path.
_LOG_ZERO = -1e30


def _lengths(op: str, name: str, lengths, batch: int) -> np.ndarray:
    values = np.asarray(lengths.numpy() if isinstance(lengths, Tensor) else lengths, dtype=np.int64).reshape(-1)
    if values.shape != (batch,):
        raise ShapeError(op, f"{name} must have one entry per sample ({batch}), got {values.shape[0]}")
    if (values < 0).any():
        raise ValueError(f"{op}: {name} must be non-negative, got {values.tolist()}")
    return values


def _padded_targets(op: str, targets: Tensor, target_lengths: np.ndarray, batch: int) -> np.ndarray:
    """Targets as an (N, max L) array, from padded (N, S) or concatenated (sum L,) form."""
    host = np.asarray(targets.numpy(), dtype=np.int64)
    longest = int(target_lengths.max()) if batch else 0
    if host.ndim == 2:
        if host.shape[0] != batch or host.shape[1] < longest:
            raise ShapeError(op, f"padded targets of shape {host.shape} need {batch} rows of at least "
                                 f"{longest} labels (the longest target length)")
        return host[:, :longest]
    if host.ndim != 1 or host.shape[0] != target_lengths.sum():
        raise ShapeError(op, f"targets must be padded (N, S) or concatenated (sum of target_lengths = "
                             f"{int(target_lengths.sum())},), got shape {host.shape}")
    out = np.zeros((batch, longest), np.int64)
    starts = np.concatenate([[0], np.cumsum(target_lengths)[:-1]])
    for n, (start, length) in enumerate(zip(starts, target_lengths)):
        out[n, :length] = host[start:start + length]
    return out


def _extended(labels: np.ndarray, target_lengths: np.ndarray, blank: int) -> tuple[np.ndarray, np.ndarray]:
    """The extended label sequences (N, 2 max L + 1) and where the skip transition s-2 -> s is allowed."""
    batch, longest = labels.shape
    ext = np.full((batch, 2 * longest + 1), blank, np.int64)
    ext[:, 1::2] = labels
    skip = np.zeros(ext.shape, bool)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    inside = np.arange(ext.shape[1])[None, :] < (2 * target_lengths + 1)[:, None]
    return np.where(inside, ext, blank), skip & inside


def _logsumexp3(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    m = a.maximum(b).maximum(c).detach()
    return ((a - m).exp() + (b - m).exp() + (c - m).exp()).log() + m


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """The CTC loss of label sequences under per-frame class log-probabilities.

    Args:
        log_probs: (T, N, C) or unbatched (T, C) log-probabilities (e.g. `log_softmax` output).
        targets: an integer tensor of labels, padded (N, S) (entries past a target's length are
            ignored) or concatenated (sum of target_lengths,); never `blank`.
        input_lengths: (N,) frames used per sample (a tensor or a sequence of ints), each <= T.
        target_lengths: (N,) labels per sample.
        blank: the blank class index.
        reduction: `"mean"` (each loss divided by its target length, then averaged over the batch),
            `"sum"` or `"none"` (one loss per sample).
        zero_infinity: give impossible alignments (target too long for the input) a loss of 0 instead
            of `inf`; either way they pass no gradient.

    Example:
        >>> lp = ember.randn(5, 3).log_softmax(-1)
        >>> ctc_loss(lp, ember.tensor([1, 2]), [5], [2]).shape
        ()
    """
    op = "ctc_loss"
    floating(op, log_probs, "log_probs")
    check_reduction(op, reduction)
    unbatched = log_probs.ndim == 2
    if unbatched:
        # One sample: targets (S,) is its padded label row; the lengths are single numbers.
        log_probs, targets = log_probs.unsqueeze(1), targets.reshape(1, -1)
    if log_probs.ndim != 3:
        raise ShapeError(op, f"log_probs must be (T, N, C) or (T, C), got {log_probs.shape}")
    steps, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise ValueError(f"{op}: blank {blank} is not a class index in [0, {classes})")
    in_lens = _lengths(op, "input_lengths", input_lengths, batch)
    tgt_lens = _lengths(op, "target_lengths", target_lengths, batch)
    if (in_lens > steps).any():
        raise ShapeError(op, f"input_lengths {in_lens.tolist()} exceed the {steps} frames of log_probs")
    labels = _padded_targets(op, targets, tgt_lens, batch)
    used = labels[np.arange(labels.shape[1])[None, :] < tgt_lens[:, None]]  # padding may hold anything
    if ((used < 0) | (used >= classes) | (used == blank)).any():
        raise ValueError(f"{op}: targets must be class indices in [0, {classes}) other than blank {blank}")
    losses = _forward(log_probs, labels, in_lens, tgt_lens, blank)
    impossible = losses.detach() > -_LOG_ZERO / 2
    fill = 0.0 if zero_infinity else float("inf")
    losses = losses.masked_fill(impossible, fill)
    if unbatched:
        losses = losses.squeeze(0)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    divisor = from_numpy(np.maximum(tgt_lens, 1).astype(log_probs.dtype.np), log_probs.device.inner)
    return (losses / (divisor.squeeze(0) if unbatched else divisor)).mean()


def _forward(log_probs: Tensor, labels: np.ndarray, in_lens: np.ndarray, tgt_lens: np.ndarray,
             blank: int) -> Tensor:
    """Per-sample negative log likelihoods (N,) by the forward recursion (see the module docs)."""
    steps, batch, _ = log_probs.shape
    device = log_probs.device.inner
    ext, skip = _extended(labels, tgt_lens, blank)
    states = ext.shape[1]
    index = from_numpy(np.ascontiguousarray(np.broadcast_to(ext, (steps, batch, states))), device)
    emissions = log_probs.gather(2, index)  # (T, N, S)
    dtype = log_probs.dtype.np
    no_skip = from_numpy(np.where(skip, 0.0, _LOG_ZERO).astype(dtype), device)
    start = np.full((batch, states), _LOG_ZERO, dtype)
    start[:, :2] = 0.0
    alpha = emissions[0] + from_numpy(start, device)
    for t in range(1, steps):
        one_back = alpha.pad((1, 0), value=_LOG_ZERO)[:, :states]
        two_back = alpha.pad((2, 0), value=_LOG_ZERO)[:, :states] + no_skip
        step = _logsumexp3(alpha, one_back, two_back) + emissions[t]
        # Samples whose input has ended keep their last alpha.
        running = from_numpy((t < in_lens)[:, None], device)
        alpha = step.where(running, alpha)
    last = from_numpy((2 * tgt_lens)[:, None], device)
    final = alpha.gather(1, last).squeeze(1)
    before = alpha.gather(1, (last - 1).clamp(min=0)).squeeze(1)
    # An empty target has only the one (blank) state: the second term is log-zero.
    before = before.masked_fill(from_numpy(tgt_lens == 0, device), _LOG_ZERO)
    m = final.maximum(before).detach()
    total = ((final - m).exp() + (before - m).exp()).log() + m
    # A sample with no frames has no alignment unless its target is empty (probability 1).
    total = total.masked_fill(from_numpy(in_lens == 0, device), _LOG_ZERO)
    total = total.masked_fill(from_numpy((in_lens == 0) & (tgt_lens == 0), device), 0.0)
    return -total
