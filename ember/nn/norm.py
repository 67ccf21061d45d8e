"""Normalization layers: batch norm (1d, 2d, 3d), instance norm (1d, 2d), layer norm, group norm and
RMS norm, with the functional forms `layer_norm`, `group_norm`, `rms_norm` and `instance_norm`.

Each layer standardizes `x` over some dims with the biased variance, `(x - mean) / sqrt(var + eps)`, then
applies an optional learned affine map. Batch and instance norm can keep running statistics as buffers
(`running_mean`, `running_var`, `num_batches_tracked`, PyTorch's names): training updates them with the
unbiased variance, `running = (1 - momentum) * running + momentum * batch` (a cumulative average when
`momentum` is None), and evaluation uses them instead of the batch's statistics.

Example:
    >>> bn = BatchNorm2d(3)
    >>> bn(ember.randn(4, 3, 5, 5)).shape
    (4, 3, 5, 5)
"""

from __future__ import annotations

import math

import numpy as np

from .. import amp
from ..api import creation
from ..api import rowwise
from ..dtype import i64
from ..errors import ShapeError
from ..tensor import Tensor
from .module import Module
from .param import Param


def _standardize(x: Tensor, mean: Tensor, var: Tensor, eps: float) -> Tensor:
    return (x - mean) * (var + eps).rsqrt()


def _channel_shape(x: Tensor) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel (C,) tensor along dim 1 of `x`."""
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _normalized_shape(shape) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _check_trailing(op: str, x: Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The dims of `x` that `shape` covers (its last ones); raises `ShapeError` when they differ."""
    if x.shape[x.ndim - len(shape):] != shape or x.ndim < len(shape):
        raise ShapeError(op, f"input of shape {x.shape} does not end with normalized_shape {shape}")
    return tuple(range(x.ndim - len(shape), x.ndim))


def _rows_routed(x: Tensor, shape: tuple, weight: Tensor | None, bias: Tensor | None) -> bool:
    """Whether layer/RMS norm over the trailing `shape` of `x` runs as one op (`ember.api.rowwise`):
    on a GPU cube target, with the parameters (if any) of `shape` and of x's dtype and device."""
    params = [p for p in (weight, bias) if p is not None]
    return (len(shape) >= 1 and rowwise.routes(x) and all(isinstance(p, Tensor) and p.shape == shape and p.dtype is x.dtype
                                                   and p.device == x.device for p in params))


def _norm_rows(x: Tensor, shape: tuple, weight: Tensor | None, bias: Tensor | None, eps: float, rms: bool) -> Tensor:
    """The norm over the trailing `shape` as rows of prod(shape) elements (`rowwise.norm_rows`)."""
    n = math.prod(shape)
    rows = x.reshape(x.shape[:x.ndim - len(shape)] + (n,)) if len(shape) > 1 else x
    flat = [p.reshape(n) if p is not None and len(shape) > 1 else p for p in (weight, bias)]
    y = rowwise.norm_rows(rows, *(p if p is not None else rows for p in flat), eps=float(eps), rms=rms,
                  has_weight=weight is not None, has_bias=bias is not None)
    return y.reshape(x.shape) if len(shape) > 1 else y


@amp.float32
def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Standardize over the last dims given by `normalized_shape`, then scale and shift.

    Args:
        x: input whose last dims equal `normalized_shape`.
        normalized_shape: an int or a tuple of trailing sizes.
        weight, bias: optional tensors of `normalized_shape`.
        eps: added to the variance.
    `y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias` over those dims (biased variance).

    Example:
        >>> layer_norm(ember.tensor([[1.0, 3.0]]), 2).tolist()
        [[-0.99999..., 0.99999...]]
    """
    shape = _normalized_shape(normalized_shape)
    dims = _check_trailing("layer_norm", x, shape)
    if _rows_routed(x, shape, weight, bias):
        return _norm_rows(x, shape, weight, bias, eps, rms=False)
    centered = x - x.mean(dims, keepdim=True)  # once: the variance and the result share it (and its kept copy)
    y = centered * ((centered * centered).mean(dims, keepdim=True) + eps).rsqrt()
    return _affine(y, weight, bias, shape)


@amp.float32
def rms_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """Scale by the root mean square over the last dims: `y = x / sqrt(mean(x^2) + eps) * weight`.

    Args:
        x: input whose last dims equal `normalized_shape`.
        normalized_shape: an int or a tuple of trailing sizes.
        weight: optional tensor of `normalized_shape`.
        eps: added to the mean square; None means the machine epsilon of `x`'s dtype (PyTorch's default).

    Example:
        >>> rms_norm(ember.tensor([[3.0, 4.0]]), 2).shape
        (1, 2)
    """
    shape = _normalized_shape(normalized_shape)
    dims = _check_trailing("rms_norm", x, shape)
    if eps is None:
        eps = float(np.finfo(x.dtype.np).eps)
    if _rows_routed(x, shape, weight, None):
        return _norm_rows(x, shape, weight, None, eps, rms=True)
    y = x * ((x * x).mean(dims, keepdim=True) + eps).rsqrt()
    return y * weight if weight is not None else y


@amp.float32
def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Standardize each sample over groups of channels, then apply a per-channel affine map.

    Args:
        x: (N, C, *) input; C must be divisible by `num_groups`.
        num_groups: how many groups the channels are split into.
        weight, bias: optional (C,) tensors.
        eps: added to the variance.

    Example:
        >>> group_norm(ember.randn(2, 4, 3), 2).shape
        (2, 4, 3)
    """
    if x.ndim < 2 or x.shape[1] % num_groups:
        raise ShapeError("group_norm", f"input of shape {x.shape} needs (N, C, *) with C divisible by "
                                       f"num_groups={num_groups}")
    grouped = x.reshape(x.shape[0], num_groups, -1)
    y = _standardize(grouped, grouped.mean(2, keepdim=True), grouped.var(2, correction=0, keepdim=True), eps)
    return _affine(y.reshape(x.shape), weight, bias, _channel_shape(x))


def instance_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Standardize each channel of each sample over its spatial dims (no running statistics).

    Args:
        x: (N, C, *spatial) input.
        weight, bias: optional (C,) tensors.
        eps: added to the variance.

    Example:
        >>> instance_norm(ember.randn(2, 3, 8)).shape
        (2, 3, 8)
    """
    dims = tuple(range(2, x.ndim))
    if not dims:
        raise ShapeError("instance_norm", f"input of shape {x.shape} needs (N, C, *spatial) with spatial dims")
    y = _standardize(x, x.mean(dims, keepdim=True), x.var(dims, correction=0, keepdim=True), eps)
    return _affine(y, weight, bias, _channel_shape(x))


class _RunningStatsNorm(Module):
    """What batch and instance norm share: per-channel affine parameters and running statistics."""

    def __init__(self, num_features: int, eps: float, momentum: float | None, affine: bool,
                 track_running_stats: bool, device, dtype) -> None:
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self.weight = Param(creation.ones(num_features, dtype=dtype, device=device)) if affine else None
        self.bias = Param(creation.zeros(num_features, dtype=dtype, device=device)) if affine else None
        if track_running_stats:
            self.running_mean = creation.zeros(num_features, dtype=dtype, device=device)
            self.running_var = creation.ones(num_features, dtype=dtype, device=device)
            self.num_batches_tracked = creation.zeros((), dtype=i64, device=device)
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def reset_running_stats(self) -> None:
        """Running mean 0, variance 1 and batch count 0, as at construction (PyTorch's name)."""
        if self.track_running_stats:
            self.running_mean = creation.zeros_like(self.running_mean)
            self.running_var = creation.ones_like(self.running_var)
            self.num_batches_tracked = creation.zeros_like(self.num_batches_tracked)

    def _check(self, x: Tensor, ranks: tuple[int, ...]) -> None:
        if x.ndim not in ranks or x.shape[1] != self.num_features:
            wanted = " or ".join(f"{r}-d" for r in ranks)
            raise ShapeError(type(self).__name__, f"expected a {wanted} input with {self.num_features} "
                                                  f"channels in dim 1, got shape {x.shape}")

    def _update_running(self, mean: Tensor, var: Tensor, count: int) -> None:
        """Blend the batch's (C,) mean and biased variance (over `count` values) into the buffers."""
        self.num_batches_tracked = self.num_batches_tracked + 1
        momentum = self.momentum
        if momentum is None:
            momentum = 1.0 / float(self.num_batches_tracked.item())
        unbiased = var.detach() * (count / (count - 1))
        dtype = self.running_mean.dtype
        self.running_mean = self.running_mean * (1 - momentum) + mean.detach().cast(dtype) * momentum
        self.running_var = self.running_var * (1 - momentum) + unbiased.cast(dtype) * momentum

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class _BatchNorm(_RunningStatsNorm):
    """Batch norm over every dim but the channel dim (1); see the module docs."""

    ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x, self.ranks)
        shape = _channel_shape(x)
        if self.training or not self.track_running_stats:
            dims = (0,) + tuple(range(2, x.ndim))
            count = x.numel // x.shape[1]
            if self.training and count <= 1:
                raise ShapeError(type(self).__name__, f"expected more than 1 value per channel when "
                                                      f"training, got input of shape {x.shape}")
            mean, var = x.mean(dims), x.var(dims, correction=0)
            if self.training and self.track_running_stats:
                self._update_running(mean, var, count)
        else:
            mean, var = self.running_mean, self.running_var
        y = _standardize(x, mean.reshape(shape), var.reshape(shape), self.eps)
        return _affine(y, self.weight, self.bias, shape)


class BatchNorm1d(_BatchNorm):
    """Batch norm of (N, C) or (N, C, L) inputs: statistics per channel over N (and L).

    Args:
        num_features: C.
        eps: added to the variance.
        momentum: weight of the new batch in the running statistics (None: cumulative average).
        affine: learn a per-channel scale (`weight`, init 1) and shift (`bias`, init 0).
        track_running_stats: keep running statistics and use them in eval mode (otherwise batch
            statistics are used in both modes).
    `y = (x - mean) / sqrt(var + eps) * weight + bias`.

    Example:
        >>> BatchNorm1d(4)(ember.randn(8, 4)).shape
        (8, 4)
    """

    ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm of (N, C, H, W) inputs: statistics per channel over N, H and W.

    Args:
        num_features: C.
        eps, momentum, affine, track_running_stats: as in `BatchNorm1d`.

    Example:
        >>> BatchNorm2d(3)(ember.randn(2, 3, 4, 4)).shape
        (2, 3, 4, 4)
    """

    ranks = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch norm of (N, C, D, H, W) inputs: statistics per channel over N, D, H and W.

    Args:
        num_features: C.
        eps, momentum, affine, track_running_stats: as in `BatchNorm1d`.

    Example:
        >>> BatchNorm3d(2)(ember.randn(2, 2, 3, 3, 3)).shape
        (2, 2, 3, 3, 3)
    """

    ranks = (5,)


class _InstanceNorm(_RunningStatsNorm):
    """Instance norm: statistics per sample and channel over the spatial dims; see the module docs."""

    spatial: int = 0

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        unbatched = x.ndim == self.spatial + 1
        if unbatched:
            x = x.unsqueeze(0)
        self._check(x, (self.spatial + 2,))
        dims = tuple(range(2, x.ndim))
        shape = _channel_shape(x)
        if self.training or not self.track_running_stats:
            mean, var = x.mean(dims, keepdim=True), x.var(dims, correction=0, keepdim=True)
            if self.training and self.track_running_stats:
                # The running statistics average the per-instance statistics over the batch.
                count = math.prod(x.shape[2:])
                self._update_running(mean.mean((0,) + dims), var.mean((0,) + dims), count)
        else:
            mean, var = self.running_mean.reshape(shape), self.running_var.reshape(shape)
        y = _affine(_standardize(x, mean, var, self.eps), self.weight, self.bias, shape)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance norm of (N, C, L) or unbatched (C, L) inputs: statistics per sample and channel over L.

    Args:
        num_features: C.
        eps: added to the variance.
        momentum: weight of each batch in the running statistics (None: cumulative average, as in
            batch norm; PyTorch's instance norm instead leaves the statistics unchanged).
        affine: learn a per-channel scale and shift (off by default, as in PyTorch).
        track_running_stats: keep running statistics (the batch average of the per-instance ones) and
            use them in eval mode (off by default).

    Example:
        >>> InstanceNorm1d(3)(ember.randn(2, 3, 10)).shape
        (2, 3, 10)
    """

    spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance norm of (N, C, H, W) or unbatched (C, H, W) inputs: per sample and channel over H, W.

    Args:
        num_features: C.
        eps, momentum, affine, track_running_stats: as in `InstanceNorm1d`.

    Example:
        >>> InstanceNorm2d(3, affine=True)(ember.randn(2, 3, 4, 4)).shape
        (2, 3, 4, 4)
    """

    spatial = 2


class LayerNorm(Module):
    """Standardize over the trailing `normalized_shape` dims, then apply an elementwise affine map.

    Args:
        normalized_shape: an int or tuple: the trailing dims normalized together.
        eps: added to the variance.
        elementwise_affine: learn `weight` (init 1) of `normalized_shape`.
        bias: also learn `bias` (init 0) when `elementwise_affine`.
    `y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias` (biased variance).

    Example:
        >>> LayerNorm(8)(ember.randn(2, 5, 8)).shape
        (2, 5, 8)
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None) -> None:
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps = eps
        self.weight = Param(creation.ones(*self.normalized_shape, dtype=dtype, device=device)) \
            if elementwise_affine else None
        self.bias = Param(creation.zeros(*self.normalized_shape, dtype=dtype, device=device)) \
            if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, affine={self.weight is not None}"


class GroupNorm(Module):
    """Standardize each sample over groups of channels, then apply a per-channel affine map.

    Args:
        num_groups: how many groups the `num_channels` are split into (must divide it).
        num_channels: C of the (N, C, *) input.
        eps: added to the variance.
        affine: learn per-channel `weight` (init 1) and `bias` (init 0).

    Example:
        >>> GroupNorm(2, 6)(ember.randn(3, 6, 4)).shape
        (3, 6, 4)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None) -> None:
        if num_groups <= 0 or num_channels % num_groups:
            raise ShapeError("GroupNorm", f"num_channels={num_channels} must be divisible by "
                                          f"num_groups={num_groups}")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.weight = Param(creation.ones(num_channels, dtype=dtype, device=device)) if affine else None
        self.bias = Param(creation.zeros(num_channels, dtype=dtype, device=device)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError("GroupNorm", f"expected (N, {self.num_channels}, *) input, got shape {x.shape}")
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.weight is not None}"


class RMSNorm(Module):
    """Scale by the root mean square over the trailing `normalized_shape` dims.

    Args:
        normalized_shape: an int or tuple: the trailing dims normalized together.
        eps: added to the mean square; None means the machine epsilon of the input's dtype.
        elementwise_affine: learn `weight` (init 1) of `normalized_shape`.
    `y = x / sqrt(mean(x^2) + eps) * weight`.

    Example:
        >>> RMSNorm(8)(ember.randn(2, 8)).shape
        (2, 8)
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None) -> None:
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps = eps
        self.weight = Param(creation.ones(*self.normalized_shape, dtype=dtype, device=device)) \
            if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, affine={self.weight is not None}"


def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """`x` divided by its p-norm along `dim`, the norm clamped to at least `eps` (PyTorch's
    `F.normalize`: the gradient of the clamp is zero where the norm is below `eps`).

    Example:
        >>> normalize(ember.tensor([[0.0, 2.0]])).tolist()
        [[0.0, 1.0]]
    """
    return x / x.norm(p, dim=dim, keepdim=True).clamp(min=eps)
